//! `hookinbox events`: the inbox's events, newest first, with what became of their
//! deliveries; filtered by source, status and time, and paged with `--before`.
//!
//! The status is the `status` word of the `recent_events` view, so this command, the view
//! and an operator's `sqlite3` always agree on what "dead" means.

use std::io::Write;
use std::path::Path;

use anyhow::Context as _;
use rusqlite::types::Value;
use serde::{Deserialize, Serialize};

use crate::terminal::Table;
use crate::{clock, store};

/// Rows a listing (`events`, `conflicts`, `dead`) prints unless `--limit` says otherwise:
/// a screenful or two.
pub const DEFAULT_LIMIT: u32 = 50;
/// The most rows one listing prints; page further with `events --before`. Bounds the memory
/// one command uses and how long its statement reads.
pub const MAX_LIMIT: i64 = 10_000;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only events of this configured source
    #[arg(long, value_name = "NAME")]
    pub source: Option<String>,
    /// Only events with this status (derived from their deliveries)
    #[arg(long, value_enum)]
    pub status: Option<Status>,
    /// Only events received at or after TIME: an RFC 3339 time (2026-11-30T07:00:00Z) or a
    /// duration ago (2h, 30m, 7d)
    #[arg(long, value_name = "TIME", value_parser = clock::parse_time_arg)]
    pub since: Option<String>,
    /// Only events received before TIME (same forms as --since)
    #[arg(long, value_name = "TIME", value_parser = clock::parse_time_arg)]
    pub until: Option<String>,
    /// Print at most N events (1 to 10000)
    #[arg(
        long,
        value_name = "N",
        default_value_t = DEFAULT_LIMIT,
        value_parser = clap::value_parser!(u32).range(1..=MAX_LIMIT)
    )]
    pub limit: u32,
    /// Only events whose ID is below this one: the next page, as the previous page printed
    /// it ("more: --before ID")
    #[arg(long, value_name = "ID")]
    pub before: Option<i64>,
    /// Print JSON instead of a table
    #[arg(long)]
    pub json: bool,
}

/// An event's status: the `status` word of the `recent_events` view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Status {
    /// Stored with no targets to deliver to
    Stored,
    /// Some delivery is still to be made (waiting or in flight)
    Pending,
    /// Every target took it (or it was superseded)
    Delivered,
    /// Some target gave up on it: see `hookinbox dead`
    Dead,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Stored => "stored",
            Status::Pending => "pending",
            Status::Delivered => "delivered",
            Status::Dead => "dead",
        }
    }
}

/// The JSON output: one page of events and where the next one starts.
#[derive(Debug, Serialize)]
struct Page {
    events: Vec<Event>,
    /// The `--before` value for the next page; null on the last page.
    next_before: Option<i64>,
}

#[derive(Debug, Serialize)]
struct Event {
    id: i64,
    received_at: String,
    source: String,
    account: String,
    event_id: String,
    event_type: Option<String>,
    size: i64,
    status: String,
    pruned: bool,
    deliveries: Vec<Delivery>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Delivery {
    target: String,
    state: String,
    attempts: i64,
}

/// One statement reads the page and, per event, its deliveries as a JSON array (SQLite's
/// JSON functions), so that status and deliveries come from the same snapshot without an
/// explicit transaction. The WHERE clause is appended from the fixed fragments in [`run`].
const SELECT: &str = "
SELECT v.id, v.received_at, v.source, v.account, v.event_id, v.event_type, v.size,
       v.status, v.pruned,
       (SELECT json_group_array(json_object('target', d.target, 'state', d.state,
                                            'attempts', d.attempts))
          FROM (SELECT target, state, attempts FROM deliveries
                 WHERE event = v.id ORDER BY id) d)
  FROM recent_events v
 WHERE 1";

pub fn run(db: &Path, args: &Args, out: &mut impl Write) -> anyhow::Result<()> {
    // Only fixed fragments go into the SQL; every value the operator typed is a parameter.
    //
    // Plans, so that a page of a large inbox stays a short query: by default SQLite walks
    // the primary key downwards from `--before` and stops after a page of matches. The unary
    // `+` keeps it from using the source index for `--source` (or `events_received` for
    // `--until`), which would collect every match and sort them all, on every page. `--since`
    // is left indexable: its window is the newest events, which the index finds without
    // walking the rest of the table (and sorts only the window).
    let mut sql = String::from(SELECT);
    let mut params: Vec<Value> = Vec::new();
    let mut filter = |clause: &str, value: Value| {
        sql.push_str(clause);
        params.push(value);
    };
    if let Some(s) = &args.source {
        filter(" AND +v.source = ?", Value::Text(s.clone()));
    }
    if let Some(s) = args.status {
        filter(" AND v.status = ?", Value::Text(s.as_str().into()));
    }
    if let Some(t) = &args.since {
        filter(" AND v.received_at >= ?", Value::Text(t.clone()));
    }
    if let Some(t) = &args.until {
        filter(" AND +v.received_at < ?", Value::Text(t.clone()));
    }
    if let Some(id) = args.before {
        filter(" AND v.id < ?", Value::Integer(id));
    }
    // One row more than the page: whether it exists says whether there is a next page.
    filter(
        " ORDER BY v.id DESC LIMIT ?",
        Value::Integer(i64::from(args.limit) + 1),
    );

    let conn = store::read::open_current(db)
        .with_context(|| format!("opening the inbox {}", db.display()))?;
    let mut events = conn
        .prepare(&sql)
        .and_then(|mut stmt| {
            stmt.query_map(rusqlite::params_from_iter(params), |r| {
                Ok((
                    Event {
                        id: r.get(0)?,
                        received_at: r.get(1)?,
                        source: r.get(2)?,
                        account: r.get(3)?,
                        event_id: r.get(4)?,
                        event_type: r.get(5)?,
                        size: r.get(6)?,
                        status: r.get(7)?,
                        pruned: r.get(8)?,
                        deliveries: Vec::new(),
                    },
                    r.get::<_, Option<String>>(9)?,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()
        })
        .with_context(|| format!("reading events from {}", db.display()))?
        .into_iter()
        .map(|(mut e, deliveries)| {
            // Built by SQLite's json_group_array just above, so it parses; an empty list
            // when there is nothing.
            e.deliveries = match deliveries {
                Some(json) => serde_json::from_str(&json)
                    .with_context(|| format!("reading the deliveries of event {}", e.id))?,
                None => Vec::new(),
            };
            Ok(e)
        })
        .collect::<anyhow::Result<Vec<Event>>>()?;
    drop(conn);

    let limit = args.limit as usize;
    let next_before = if events.len() > limit {
        events.truncate(limit);
        events.last().map(|e| e.id)
    } else {
        None
    };

    if args.json {
        crate::terminal::write_json(
            out,
            &Page {
                events,
                next_before,
            },
        )?;
        return Ok(());
    }
    let mut table = Table::new(&[
        "id",
        "received",
        "source",
        "event id",
        "type",
        "size",
        "status",
        "deliveries",
    ]);
    for e in &events {
        let deliveries: Vec<String> = e
            .deliveries
            .iter()
            .map(|d| format!("{}={}", d.target, d.state))
            .collect();
        table.row([
            e.id.to_string(),
            e.received_at.clone(),
            e.source.clone(),
            e.event_id.clone(),
            e.event_type.clone().unwrap_or_else(|| "-".into()),
            e.size.to_string(),
            e.status.clone(),
            deliveries.join(" "),
        ]);
    }
    table.write(out)?;
    if let Some(id) = next_before {
        // On stderr, so that the table on stdout stays only rows.
        eprintln!("more: --before {id}");
    }
    Ok(())
}
