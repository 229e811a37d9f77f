//! `hookinbox migrate-store --to postgres://…`: copies a stopped SQLite inbox into an empty
//! PostgreSQL one ([`crate::store::migrate`]), and says how to point `[store]` at it.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::store;

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The PostgreSQL inbox to copy into, without a password:
    /// postgres://USER@HOST/DATABASE (it must be empty; its schema is made if missing)
    #[arg(long, value_name = "URL")]
    pub to: String,
    /// The password, as any secret spec (env:NAME, file:PATH, …)
    #[arg(long, value_name = "SECRET")]
    pub password: Option<String>,
    /// TLS to the server: verify-full (the default to another host) or off (only to this
    /// machine)
    #[arg(long, value_name = "MODE")]
    pub tls: Option<String>,
    /// The CA certificate (PEM) that the server's certificate is checked against, instead
    /// of the system's roots
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// Print the result as JSON
    #[arg(long)]
    pub json: bool,
}

pub fn run(db: &Path, args: &Args, out: &mut impl Write) -> anyhow::Result<()> {
    let target = crate::config::pg_store_from(
        &args.to,
        args.password.as_deref(),
        args.tls.as_deref(),
        args.ca.as_deref(),
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let outcome = store::migrate::sqlite_to_postgres(db, &target)?;
    if args.json {
        crate::terminal::write_json(out, &outcome)?;
        return Ok(());
    }
    let mut table = crate::terminal::Table::new(&["TABLE", "ROWS", "SHA-256 (BOTH SIDES)"]);
    for t in &outcome.tables {
        table.row([
            t.table.to_owned(),
            t.rows.to_string(),
            t.digest[..16].to_owned(),
        ]);
    }
    writeln!(
        out,
        "copied {} into {}, and read it back:",
        outcome.from, outcome.to
    )?;
    table.write(out)?;
    if outcome.nul_replaced > 0 {
        writeln!(
            out,
            "{} text values held NUL, which PostgreSQL's text cannot: stored with U+FFFD",
            outcome.nul_replaced
        )?;
    }
    writeln!(
        out,
        "\nNow point [store] at it, on this machine and on every replica:\n\n  [store]\n  \
         path = {:?}   # still where serve keeps its local files\n  backend = \"postgres\"\n  \
         url = {:?}{}{}\n\nthen start serve. The SQLite file stays as it was: keep it until the\n\
         new inbox has run a while.",
        db.display().to_string(),
        target.url,
        args.password
            .as_deref()
            .map(|p| format!("\n  password = {p:?}"))
            .unwrap_or_default(),
        match &args.tls {
            Some(tls) => format!("\n  tls = {tls:?}"),
            None => String::new(),
        }
    )?;
    Ok(())
}
