//! `hookinbox conflicts`: deliveries that reused a stored event's identity with different
//! bytes, newest first. Their bytes were quarantined in `conflicts` and never forwarded; the
//! original event is untouched.

use std::io::Write;

use anyhow::Context as _;
use rusqlite::types::Value;
use serde::Serialize;

use super::events::{DEFAULT_LIMIT, MAX_LIMIT};
use crate::store::sql::{self, Db, Inbox};
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

#[derive(Debug, Serialize)]
pub(crate) struct Conflict {
    pub(crate) id: i64,
    pub(crate) last_seen_at: String,
    /// When this version first arrived.
    pub(crate) received_at: String,
    pub(crate) source: String,
    pub(crate) account: String,
    pub(crate) event_id: String,
    /// How many times this version arrived.
    pub(crate) seen: i64,
    /// The stored event's hash, and this version's.
    pub(crate) original_sha256: String,
    pub(crate) sha256: String,
    pub(crate) size: i64,
    /// The stored event's row id (for `hookinbox show`); null once it was pruned away.
    pub(crate) original_event: Option<i64>,
}

pub fn run(inbox: &Inbox, args: &Args, out: &mut impl Write) -> anyhow::Result<()> {
    let conn = inbox.read()?;
    let conflicts = list(conn.db(), args.source.as_deref(), args.limit)
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

/// Quarantined versions, newest first: the `recent_conflicts` view, so that this listing, the
/// web inbox and `sqlite3` agree. Only fixed fragments go into the SQL; values are
/// parameters.
pub(crate) fn list(db: Db, source: Option<&str>, limit: u32) -> Result<Vec<Conflict>, sql::Error> {
    let mut sql = String::from(
        "SELECT id, last_seen_at, received_at, source, account, event_id, seen,
                original_sha256, sha256, size, original_event
           FROM recent_conflicts WHERE TRUE",
    );
    let mut params: Vec<Value> = Vec::new();
    if let Some(s) = source {
        sql.push_str(" AND source = ?");
        params.push(Value::Text(s.to_owned()));
    }
    sql.push_str(" ORDER BY last_seen_at DESC, id DESC LIMIT ?");
    params.push(Value::Integer(limit.into()));
    db.rows(&sql, &sql::refs(&params), |r| {
        Ok(Conflict {
            id: r.get(0)?,
            last_seen_at: r.get(1)?,
            received_at: r.get(2)?,
            source: r.get(3)?,
            account: r.get(4)?,
            event_id: r.get(5)?,
            seen: r.get(6)?,
            original_sha256: r.get(7)?,
            sha256: r.get(8)?,
            size: r.get(9)?,
            original_event: r.get(10)?,
        })
    })
}
