//! `hookinbox conflicts`: deliveries that reused a stored event's identity with different
//! bytes, newest first. Their bytes were quarantined in `conflicts` and never forwarded; the
//! original event is untouched.

use std::io::Write;

use anyhow::Context as _;
use serde::Serialize;

use super::events::{DEFAULT_LIMIT, MAX_LIMIT};
use crate::store::Location;
use crate::store::views::conflicts::Conflict;
use crate::terminal::Table;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only conflicts of this configured source
    #[arg(long, value_name = "NAME")]
    pub source: Option<String>,
    /// Print at most N conflicts (1 to 10000)
    #[arg(
        long,
        value_name = "N",
        default_value_t = DEFAULT_LIMIT,
        value_parser = clap::value_parser!(u32).range(1..=MAX_LIMIT)
    )]
    pub limit: u32,
    /// Print JSON instead of a table
    #[arg(long)]
    pub json: bool,
}

/// Hex digits of a SHA-256 shown in the table: enough to tell versions apart by eye; the
/// JSON has them whole.
const SHORT_HASH: usize = 12;

#[derive(Debug, Serialize)]
struct Listing {
    conflicts: Vec<Conflict>,
}

pub fn run(inbox: &Location, args: &Args, out: &mut impl Write) -> anyhow::Result<()> {
    let conn = inbox.read()?;
    let conflicts = conn
        .db()
        .conflicts(args.source.as_deref(), args.limit)
        .with_context(|| format!("reading conflicts from {}", inbox.name()))?;
    drop(conn);

    if args.json {
        crate::terminal::write_json(out, &Listing { conflicts })?;
        return Ok(());
    }
    let mut table = Table::new(&[
        "id",
        "last seen",
        "source",
        "event id",
        "seen",
        "original sha256",
        "sha256",
    ]);
    for c in &conflicts {
        table.row([
            c.id.to_string(),
            c.last_seen_at.clone(),
            c.source.clone(),
            c.event_id.clone(),
            c.seen.to_string(),
            short(&c.original_sha256).to_owned(),
            short(&c.sha256).to_owned(),
        ]);
    }
    table.write(out)?;
    Ok(())
}

/// The first [`SHORT_HASH`] characters (the whole text when shorter, or when the cut would
/// split a character: the column holds hex, but the inbox is a file anyone can edit).
fn short(hash: &str) -> &str {
    hash.get(..SHORT_HASH).unwrap_or(hash)
}
