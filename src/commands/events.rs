//! `hookinbox events`: the inbox's events, newest first, with what became of their
//! deliveries; filtered by source, status and time, and paged with `--before`. With
//! `--follow`, the newest page and then each new event as it is committed, like `tail -f`.
//!
//! The status is the `status` word of the `recent_events` view, so this command, the view
//! and an operator's `sqlite3` always agree on what "dead" means.

use std::io::Write;

use anyhow::Context as _;
use serde::Serialize;

use crate::clock;
use crate::store::Location;
use crate::store::views::events::{EventFilter, EventRow, Follow, MAX_PAGE, Range};
use crate::terminal::Table;

/// Rows a listing (`events`, `conflicts`, `dead`) prints unless `--limit` says otherwise:
/// a screenful or two.
pub const DEFAULT_LIMIT: u32 = 50;
/// The most rows one listing prints; page further with `events --before`. Bounds the memory
/// one command uses and how long its statement reads.
pub const MAX_LIMIT: i64 = MAX_PAGE;

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
    /// Only events of this type as the TYPE column shows it, where `*` is any run of
    /// characters, dots included: 'invoice.*', '*.deleted', 'push'
    #[arg(long = "type", visible_alias = "event-type", value_name = "TYPE")]
    pub event_type: Option<String>,
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
    events: Vec<EventRow>,
    /// The `--before` value for the next page; null on the last page.
    next_before: Option<i64>,
}

pub fn run(inbox: &Location, args: &Args, out: &mut impl Write) -> anyhow::Result<()> {
    let conn = inbox.read()?;
    if args.follow {
        return follow(&conn, inbox, args, out);
    }
    // One row more than the page: whether it exists says whether there is a next page.
    let range = Range::Page {
        before: args.before,
        limit: i64::from(args.limit) + 1,
    };
    let mut events = conn
        .db()
        .events(&filter(args), &range)
        .with_context(|| format!("reading events from {}", inbox.name()))?;
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
fn cells(e: &EventRow) -> [String; 9] {
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

/// The operator's filters.
fn filter(args: &Args) -> EventFilter {
    EventFilter {
        source: args.source.clone(),
        status: args.status.map(|s| s.as_str().to_owned()),
        event_type: args.event_type.clone(),
        since: args.since.clone(),
        until: args.until.clone(),
        ..EventFilter::default()
    }
}

/// `--follow`: the newest page, oldest first, then every new event as it is committed, until
/// SIGINT or SIGTERM (exit 0), or until stdout is closed (seen between polls, or a write
/// fails with a broken pipe, which `cli` takes as the reader's choice, not a failure).
///
/// Each event is looked at once, when its id first appears (see [`Cursor`]).
fn follow(
    conn: &crate::store::Open,
    inbox: &Location,
    args: &Args,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let db = conn.db();
    let reading = || format!("reading events from {}", inbox.name());
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
    let filter = filter(args);
    let seen = db.newest_event_id().with_context(reading)?;
    // The ids looked at before the page is read: an event that commits between the two
    // (replicas commit out of order) is then either on the page or printed as new.
    let mut cursor = Follow::start(db, seen)?;
    let range = Range::UpTo {
        id: seen,
        limit: i64::from(args.limit),
    };
    let mut page = db.events(&filter, &range).with_context(reading)?;
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
        for range in cursor.new_events(db).with_context(reading)? {
            for e in db.events(&filter, &range).with_context(reading)? {
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

fn print_followed(
    e: &EventRow,
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
