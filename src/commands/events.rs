//! `hookinbox events`: the inbox's events, newest first, with what became of their
//! deliveries; filtered by source, status and time, and paged with `--before`. With
//! `--follow`, the newest page and then each new event as it is committed, like `tail -f`.
//!
//! The status is the `status` word of the `recent_events` view, so this command, the view
//! and an operator's `sqlite3` always agree on what "dead" means.

use std::io::Write;

use anyhow::Context as _;
use rusqlite::types::Value;
use serde::{Deserialize, Serialize};

use crate::clock;
use crate::store::sql::{self, Db, Dialect, Inbox};
use crate::store::timeline;
use crate::terminal::Table;

/// Rows a listing (`events`, `conflicts`, `dead`) prints unless `--limit` says otherwise:
/// a screenful or two.
pub const DEFAULT_LIMIT: u32 = 50;
/// The most rows one listing prints; page further with `events --before`. Bounds the memory
/// one command uses and how long its statement reads.
pub const MAX_LIMIT: i64 = 10_000;

/// How often `--follow` looks for new events. Another process cannot be told of a commit,
/// so it polls: each look is one read of the ids above the last one printed (the primary
/// key; under WAL it never blocks `serve`), so half a second costs nothing while a new
/// event shows up before anyone watching wonders where it is.
pub const FOLLOW_POLL: std::time::Duration = std::time::Duration::from_millis(500);

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
    /// Print JSON instead of a table (with --follow: one JSON object per event and line,
    /// NDJSON)
    #[arg(long)]
    pub json: bool,
    /// Keep printing new events as they are stored, like `tail -f`, until interrupted: the
    /// newest page (--limit) oldest first, then each new event that matches the filters.
    /// --status is the status an event has when it is first seen
    #[arg(long, short, conflicts_with_all = ["before", "until"])]
    pub follow: bool,
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
    /// `webhook`, or `api` (fetched by `recover` from the provider's API).
    origin: String,
    deliveries: Vec<Delivery>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Delivery {
    target: String,
    state: String,
    attempts: i64,
}

/// One statement reads the page and, per event, its deliveries as a JSON array (the
/// database's JSON functions), so that status and deliveries come from the same snapshot
/// without an explicit transaction. The WHERE clause is appended from the fixed fragments
/// in [`filtered`].
fn select(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Sqlite => {
            "
SELECT v.id, v.received_at, v.source, v.account, v.event_id, v.event_type, v.size,
       v.status, v.pruned, v.origin,
       (SELECT json_group_array(json_object('target', d.target, 'state', d.state,
                                            'attempts', d.attempts))
          FROM (SELECT target, state, attempts FROM deliveries
                 WHERE event = v.id ORDER BY id) d)
  FROM recent_events v
 WHERE TRUE"
        }
        Dialect::Postgres => {
            "
SELECT v.id, v.received_at, v.source, v.account, v.event_id, v.event_type, v.size,
       v.status, v.pruned, v.origin,
       (SELECT json_agg(json_build_object('target', d.target, 'state', d.state,
                                          'attempts', d.attempts) ORDER BY d.id)
          FROM deliveries d WHERE d.event = v.id)
  FROM recent_events v
 WHERE TRUE"
        }
    }
}

pub fn run(inbox: &Inbox, args: &Args, out: &mut impl Write) -> anyhow::Result<()> {
    let conn = inbox.read()?;
    if args.follow {
        return follow(conn.db(), inbox, args, out);
    }
    // One row more than the page: whether it exists says whether there is a next page.
    let (mut sql, mut params) = filtered(conn.db(), args)?;
    if let Some(id) = args.before {
        sql.push_str(" AND v.id < ?");
        params.push(Value::Integer(id));
    }
    sql.push_str(" ORDER BY v.id DESC LIMIT ?");
    params.push(Value::Integer(i64::from(args.limit) + 1));
    let mut events = read(conn.db(), inbox, &sql, params)?;
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
    let mut table = Table::new(&HEADERS);
    for e in &events {
        table.row(cells(e));
    }
    table.write(out)?;
    if let Some(id) = next_before {
        // On stderr, so that the table on stdout stays only rows.
        eprintln!("more: --before {id}");
    }
    Ok(())
}

/// The table's columns.
const HEADERS: [&str; 9] = [
    "id",
    "received",
    "source",
    "origin",
    "event id",
    "type",
    "size",
    "status",
    "deliveries",
];

/// One event's row, unescaped (the table and [`Rows`] escape every cell).
fn cells(e: &Event) -> [String; 9] {
    let deliveries: Vec<String> = e
        .deliveries
        .iter()
        .map(|d| format!("{}={}", d.target, d.state))
        .collect();
    [
        e.id.to_string(),
        e.received_at.clone(),
        e.source.clone(),
        e.origin.clone(),
        e.event_id.clone(),
        e.event_type.clone().unwrap_or_else(|| "-".into()),
        e.size.to_string(),
        e.status.clone(),
        deliveries.join(" "),
    ]
}

/// [`SELECT`] with the operator's filters, to which the caller appends its range and order.
///
/// Only fixed fragments go into the SQL; every value the operator typed is a parameter.
///
/// Plans, so that a page of a large inbox stays a short query: by default SQLite walks the
/// primary key downwards from `--before` and stops after a page of matches. The unary `+`
/// keeps it from using the identity index for `--source`, which would collect every match
/// and sort them all, on every page. `--since` and `--until` bound the ids walked
/// ([`timeline::window`]). PostgreSQL's planner has statistics to choose by, and no unary
/// `+` on text.
fn filtered(db: Db, args: &Args) -> anyhow::Result<(String, Vec<Value>)> {
    let mut sql = String::from(select(db.dialect()));
    let unindexed = match db.dialect() {
        Dialect::Sqlite => "+",
        Dialect::Postgres => "",
    };
    let mut params: Vec<Value> = Vec::new();
    if let Some(s) = &args.source {
        sql.push_str(&format!(" AND {unindexed}v.source = ?"));
        params.push(Value::Text(s.clone()));
    }
    if let Some(s) = args.status {
        sql.push_str(" AND v.status = ?");
        params.push(Value::Text(s.as_str().into()));
    }
    timeline::window(
        db,
        args.since.as_deref(),
        args.until.as_deref(),
        &mut sql,
        &mut params,
    )
    .context("finding the time window's events")?;
    Ok((sql, params))
}

/// Runs a query built on [`SELECT`]. Collected before returning, so that the statement is
/// reset and holds no read snapshot open (which would keep the WAL from being
/// checkpointed while `--follow` waits).
fn read(db: Db, inbox: &Inbox, sql: &str, params: Vec<Value>) -> anyhow::Result<Vec<Event>> {
    db.rows(sql, &sql::refs(&params), |r| {
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
                origin: r.get(9)?,
                deliveries: Vec::new(),
            },
            r.get::<Option<String>>(10)?,
        ))
    })
    .with_context(|| format!("reading events from {}", inbox.name()))?
    .into_iter()
    .map(|(mut e, deliveries)| {
        // Built by the database's JSON functions just above, so it parses; an empty
        // list when there is nothing.
        e.deliveries = match deliveries {
            Some(json) => serde_json::from_str(&json)
                .with_context(|| format!("reading the deliveries of event {}", e.id))?,
            None => Vec::new(),
        };
        Ok(e)
    })
    .collect()
}

/// `--follow`: the newest page, oldest first, then every new event as it is committed, until
/// SIGINT or SIGTERM (exit 0), or until stdout is closed (seen between polls, or a write
/// fails with a broken pipe, which `cli` takes as the reader's choice, not a failure).
///
/// Each event is looked at once, when its id first appears (see [`Cursor`]).
fn follow(db: Db, inbox: &Inbox, args: &Args, out: &mut impl Write) -> anyhow::Result<()> {
    // Only for the signals: the reads run outside it, since a PostgreSQL connection blocks
    // on its own runtime.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime that waits for signals")?;
    // Before the first line: from then on an interrupt ends the loop between lines.
    let (mut interrupt, mut terminate) = runtime.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        anyhow::Ok((
            signal(SignalKind::interrupt())?,
            signal(SignalKind::terminate())?,
        ))
    })?;
    let mut rows = Rows::default();
    let seen = newest_id(db, inbox)?;
    // The ids looked at before the page is read: an event that commits between the two
    // (replicas commit out of order) is then either on the page or printed as new.
    let mut cursor = Cursor::start(db, seen)?;
    let (mut sql, mut params) = filtered(db, args)?;
    sql.push_str(" AND v.id <= ? ORDER BY v.id DESC LIMIT ?");
    params.extend([Value::Integer(seen), Value::Integer(i64::from(args.limit))]);
    let mut page = read(db, inbox, &sql, params)?;
    page.reverse();
    cursor.looked_at(page.iter().map(|e| e.id));
    if !args.json {
        // The first page is known: aligned over it, as a table would be.
        let header = HEADERS.map(str::to_uppercase);
        for cells in std::iter::once(header.clone()).chain(page.iter().map(cells)) {
            rows.widen(&cells);
        }
        rows.write(out, &header)?;
    }
    for e in &page {
        print_followed(e, args.json, &mut rows, out)?;
    }
    out.flush()?;
    loop {
        let stop = runtime.block_on(async {
            tokio::select! {
                _ = interrupt.recv() => true,
                _ = terminate.recv() => true,
                () = tokio::time::sleep(FOLLOW_POLL) => false,
            }
        });
        if stop || stdout_closed() {
            return Ok(());
        }
        // A burst is read in pages, each a short statement.
        for range in cursor.new_ids(db, inbox)? {
            let (mut sql, mut params) = filtered(db, args)?;
            match range {
                New::Above(seen, upto) => {
                    sql.push_str(" AND v.id > ? AND v.id <= ?");
                    params.extend([Value::Integer(seen), Value::Integer(upto)]);
                }
                New::These(ids) => {
                    let marks = vec!["?"; ids.len()].join(", ");
                    sql.push_str(&format!(" AND v.id IN ({marks})"));
                    params.extend(ids.into_iter().map(Value::Integer));
                }
            }
            sql.push_str(" ORDER BY v.id");
            for e in read(db, inbox, &sql, params)? {
                print_followed(&e, args.json, &mut rows, out)?;
            }
        }
        out.flush()?;
    }
}

/// Whether the reader of stdout is gone (`events --follow | head -1` after `head` exits).
/// A write would find out too, but on a quiet source none comes, and the command would
/// linger until the next event. poll reports it without writing: POLLERR on a pipe whose
/// reader closed, POLLHUP on a hung-up terminal or socket; a file reports neither.
fn stdout_closed() -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    let stdout = std::io::stdout();
    let mut fds = [PollFd::new(stdout.as_fd(), PollFlags::empty())];
    matches!(poll(&mut fds, PollTimeout::ZERO), Ok(1))
        && fds[0]
            .revents()
            .is_some_and(|r| r.intersects(PollFlags::POLLERR | PollFlags::POLLHUP))
}

/// Which events `--follow` has not looked at yet.
enum Cursor {
    /// SQLite: ids only grow, since the one writer inserts them in commit order, so "above
    /// the last id seen" is exactly "new". (Retention deleting the newest row could let its
    /// id be used again, which this would not see; it deletes only events older than
    /// `keep_identity`, so only after an inbox had no new event for that long.)
    Last(i64),
    /// PostgreSQL: replicas take ids from one sequence as they insert, and their
    /// transactions commit in another order, so an id below the highest seen can still
    /// appear, until every transaction that took one has ended: a batch commits within
    /// [`crate::store::pg::BATCH_TIMEOUT`] or is rolled back. So the ids above `settled`
    /// that were looked at are remembered, and `settled` moves up to the highest id seen
    /// [`LOOK_BACK`] ago.
    Window {
        settled: i64,
        looked: std::collections::BTreeSet<i64>,
        marks: std::collections::VecDeque<(std::time::Instant, i64)>,
    },
}

/// Past this, no transaction that took an id then is still open (twice the batch timeout).
const LOOK_BACK: std::time::Duration =
    std::time::Duration::from_secs(2 * crate::store::pg::BATCH_TIMEOUT.as_secs());

/// New events to read: a range of ids, or these ids.
enum New {
    Above(i64, i64),
    These(Vec<i64>),
}

impl Cursor {
    /// After the first page, which showed the events up to `seen`.
    fn start(db: Db, seen: i64) -> anyhow::Result<Cursor> {
        Ok(match db.dialect() {
            Dialect::Sqlite => Cursor::Last(seen),
            Dialect::Postgres => {
                // Events committed before the start are taken as looked at; ids just below
                // `seen` may still be in flight, so the window starts a page of ids back.
                let settled = seen.saturating_sub(MAX_LIMIT).max(0);
                let looked = db.rows(
                    "SELECT id FROM events WHERE id > ? AND id <= ?",
                    &[&settled, &seen],
                    |r| r.get(0),
                )?;
                Cursor::Window {
                    settled,
                    looked: looked.into_iter().collect(),
                    marks: [(std::time::Instant::now(), seen)].into(),
                }
            }
        })
    }

    /// Events already printed (the first page).
    fn looked_at(&mut self, ids: impl Iterator<Item = i64>) {
        if let Cursor::Window {
            settled, looked, ..
        } = self
        {
            looked.extend(ids.filter(|id| id > settled));
        }
    }

    fn new_ids(&mut self, db: Db, inbox: &Inbox) -> anyhow::Result<Vec<New>> {
        match self {
            Cursor::Last(seen) => {
                let newest = newest_id(db, inbox)?;
                // Retention deleted every event since the last look (row ids are reused
                // once the newest row is gone): count on from what is there now.
                if newest < *seen {
                    *seen = newest;
                }
                let mut ranges = Vec::new();
                while *seen < newest {
                    let upto = newest.min(seen.saturating_add(MAX_LIMIT));
                    ranges.push(New::Above(*seen, upto));
                    *seen = upto;
                }
                Ok(ranges)
            }
            Cursor::Window {
                settled,
                looked,
                marks,
            } => {
                let ids: Vec<i64> = db
                    .rows(
                        "SELECT id FROM events WHERE id > ? ORDER BY id",
                        &[&*settled],
                        |r| r.get(0),
                    )
                    .with_context(|| format!("reading events from {}", inbox.name()))?;
                let new: Vec<i64> = ids.into_iter().filter(|id| !looked.contains(id)).collect();
                looked.extend(&new);
                let highest = looked.last().copied().unwrap_or(*settled);
                marks.push_back((std::time::Instant::now(), highest));
                while let Some(&(at, id)) = marks.front()
                    && at.elapsed() > LOOK_BACK
                {
                    *settled = (*settled).max(id);
                    marks.pop_front();
                }
                *looked = looked.split_off(&(*settled + 1));
                Ok(new
                    .chunks(crate::store::replay::CHUNK)
                    .map(|c| New::These(c.to_vec()))
                    .collect())
            }
        }
    }
}

/// The highest event id in the inbox, 0 when it has none.
fn newest_id(db: Db, inbox: &Inbox) -> anyhow::Result<i64> {
    db.value("SELECT coalesce(max(id), 0) FROM events", &[])
        .with_context(|| format!("reading events from {}", inbox.name()))
}

fn print_followed(
    e: &Event,
    json: bool,
    rows: &mut Rows,
    out: &mut impl Write,
) -> std::io::Result<()> {
    if json {
        crate::terminal::write_json_line(out, e)
    } else {
        rows.write(out, &cells(e))
    }
}

/// Table rows written one at a time, for `--follow`: a [`Table`] aligns its columns over
/// rows it already holds, and a follow cannot wait for rows to come. Each column is padded
/// to the widest cell seen so far, so the columns line up until a wider value arrives, and
/// move right (never left) from then on.
#[derive(Debug, Default)]
struct Rows {
    widths: Vec<usize>,
}

impl Rows {
    /// Makes room for `cells` (unescaped) without writing them.
    fn widen(&mut self, cells: &[String]) {
        let cells: Vec<String> = cells.iter().map(|c| crate::terminal::cell(c)).collect();
        self.widen_escaped(&cells);
    }

    fn widen_escaped(&mut self, cells: &[String]) {
        self.widths.resize(self.widths.len().max(cells.len()), 0);
        for (w, c) in self.widths.iter_mut().zip(cells) {
            *w = (*w).max(c.chars().count());
        }
    }

    /// Writes one row of `cells` (unescaped), each escaped and capped like a table's.
    fn write(&mut self, out: &mut impl Write, cells: &[String]) -> std::io::Result<()> {
        let cells: Vec<String> = cells.iter().map(|c| crate::terminal::cell(c)).collect();
        self.widen_escaped(&cells);
        let mut line = String::new();
        for (i, c) in cells.iter().enumerate() {
            line.push_str(c);
            if i + 1 < cells.len() {
                // Two spaces between columns, as a table has.
                let pad = self.widths[i] - c.chars().count() + 2;
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        writeln!(out, "{}", line.trim_end())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn followed_rows_line_up_and_only_ever_widen() {
        let row = |cells: &[&str]| cells.iter().map(|c| c.to_string()).collect::<Vec<_>>();
        let mut rows = Rows::default();
        let mut out = Vec::new();
        rows.widen(&row(&["ID", "SOURCE"]));
        rows.widen(&row(&["12", "stripe"]));
        rows.write(&mut out, &row(&["ID", "SOURCE"])).unwrap();
        rows.write(&mut out, &row(&["12", "stripe"])).unwrap();
        rows.write(&mut out, &row(&["13", "sw"])).unwrap();
        rows.write(&mut out, &row(&["1234", "evil\x1b[2J"]))
            .unwrap();
        rows.write(&mut out, &row(&["14", "sw"])).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "ID  SOURCE\n12  stripe\n13  sw\n1234  evil\\x1b[2J\n14    sw\n"
        );
    }
}
