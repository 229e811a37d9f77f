//! Read-only connections for everything that is not the writer: metrics gauges, the CLI,
//! the delivery worker's scans. WAL lets them read while the writer commits.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, OptionalExtension};

use crate::metrics::BACKLOG_STATES;

/// Few connections: readers are short queries, and a small VM has two cores.
pub const POOL_SIZE: u32 = 4;
/// A reader waits this long for a lock (only WAL recovery after a crash takes one).
const READ_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

pub type Pool = r2d2::Pool<ReadOnly>;

/// An r2d2 manager for read-only connections (r2d2_sqlite lags rusqlite's versions, and
/// this is all it would do).
#[derive(Debug)]
pub struct ReadOnly(PathBuf);

impl r2d2::ManageConnection for ReadOnly {
    type Connection = Connection;
    type Error = rusqlite::Error;

    fn connect(&self) -> rusqlite::Result<Connection> {
        // Not mapped, unlike `open`: a read transaction that finds the WAL changed since the
        // connection's last one unmaps the whole file (SQLite's `pagerBeginReadTransaction`),
        // and serve's readers start one after nearly every commit. Mapped, each paid an
        // munmap, an mmap and a page fault per page it touched: 8% of the server's CPU when
        // a paused target's loop still read its queue after every commit (BENCHMARKS.md,
        // "Readers without a map, and a paused target's looks").
        unmapped(&self.0)
    }

    fn is_valid(&self, conn: &mut Connection) -> rusqlite::Result<()> {
        conn.execute_batch("")
    }

    fn has_broken(&self, _: &mut Connection) -> bool {
        false
    }
}

/// One read-only connection, for one-off commands.
pub fn open(path: &Path) -> rusqlite::Result<Connection> {
    let conn = unmapped(path)?;
    // A command's reads are a few long walks (a listing, a count, a backup's copy):
    // mapped, their pages are read in place rather than copied in with pread.
    conn.pragma_update(None, "mmap_size", super::schema::MMAP_SIZE)?;
    Ok(conn)
}

/// A read-only connection that reads pages with pread.
fn unmapped(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(READ_BUSY_TIMEOUT)?;
    super::schema::stable_plans(&conn)?;
    Ok(conn)
}

/// [`open`], for the CLI's readers: refuses an inbox of another schema version with a
/// message that says what to do, rather than failing on a missing table.
pub fn open_current(path: &Path) -> Result<Connection, super::schema::OpenError> {
    let conn = open(path)?;
    super::schema::require_current(&conn)?;
    Ok(conn)
}

/// Delivery rows per state: (state, count); a state not listed has none.
pub type StateCounts = Vec<(String, i64)>;

/// Delivery rows per state, and when the first delivery still pending or in flight was
/// created: of every state if `settled`, a walk of every row; otherwise of
/// [`BACKLOG_STATES`] only, a walk of each target's stretch of `deliveries_due`. One read
/// transaction, so the figures are of one moment.
pub fn gauges(conn: &Connection, settled: bool) -> rusqlite::Result<(StateCounts, Option<String>)> {
    let snapshot = conn.unchecked_transaction()?;
    let mut counts = StateCounts::new();
    let mut oldest: Option<(i64, String)> = None;
    for (source, target) in delivery_pairs(conn)? {
        let b = backlog(conn, &source, &target)?;
        for (state, n) in [
            ("pending", b.pending),
            ("in_flight", b.in_flight),
            ("dead", b.dead),
        ] {
            add(&mut counts, state, n);
        }
        if let Some(first) = b.first {
            keep_first(&mut oldest, first);
        }
    }
    if settled {
        // The walk above still named the first waiting delivery; these counts replace its.
        counts.clear();
        let mut every = conn.prepare_cached(EVERY_STATE)?;
        let mut rows = every.query([])?;
        while let Some(r) = rows.next()? {
            let (state, n): (String, i64) = (r.get(0)?, r.get(1)?);
            add(&mut counts, &state, n);
        }
    }
    snapshot.finish()?;
    Ok((counts, oldest.map(|(_, created)| created)))
}

/// Adds `n` rows in `state` to `counts`.
fn add(counts: &mut StateCounts, state: &str, n: i64) {
    match counts.iter_mut().find(|(s, _)| s == state) {
        Some((_, sum)) => *sum += n,
        None => counts.push((state.to_owned(), n)),
    }
}

/// Keeps in `first` whichever of it and `candidate`, each (id, created_at), has the lower id.
fn keep_first(first: &mut Option<(i64, String)>, candidate: (i64, String)) {
    if first.as_ref().is_none_or(|(id, _)| candidate.0 < *id) {
        *first = Some(candidate);
    }
}

/// One target's deliveries waiting or given up on.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Backlog {
    pub pending: i64,
    pub in_flight: i64,
    pub dead: i64,
    /// The id and creation time of the first delivery still pending or in flight.
    ///
    /// The lowest id rather than the least `created_at`: ids follow insertion, and the id
    /// is in `deliveries_due` while the time is not, so this reads one row where the
    /// least time would read every one. They differ only if the clock stepped back between
    /// two inserts.
    pub first: Option<(i64, String)>,
}

/// A target's deliveries (`?1`, `?2`) in the states `?3`, `?4`, `?5`: per state, the count,
/// the lowest id and when that one was created. One statement, so one moment: the row of
/// the lowest id cannot go between reading the id and reading its time.
const BACKLOG: &str = "WITH b AS (SELECT state, count(*) AS n, min(id) AS first FROM deliveries
                                  WHERE source = ?1 AND target = ?2 AND state IN (?3, ?4, ?5)
                                  GROUP BY state)
                       SELECT b.state, b.n, b.first, d.created_at
                         FROM b JOIN deliveries d ON d.id = b.first";

/// Every delivery by state, per (source, target) so that the walk follows `deliveries_due`
/// in its order: grouped by state alone, SQLite sorts every row first. The caller sums.
const EVERY_STATE: &str = "SELECT state, count(*) FROM deliveries GROUP BY source, target, state";

/// The first (source, target) pair with deliveries after (`?1`, `?2`).
const NEXT_PAIR: &str = "SELECT source, target FROM deliveries
                          WHERE (source, target) > (?1, ?2) ORDER BY source, target LIMIT 1";

/// A target's [`Backlog`]: its stretch of the covering index `deliveries_due (source,
/// target, state, …)` for the three states, and one row. Inserts touch no index by state
/// alone (schema 8 dropped `deliveries_state`, two pages of every commit).
pub fn backlog(conn: &Connection, source: &str, target: &str) -> rusqlite::Result<Backlog> {
    let mut b = Backlog::default();
    let mut stmt = conn.prepare_cached(BACKLOG)?;
    let mut rows = stmt.query(rusqlite::params![
        source,
        target,
        BACKLOG_STATES[0],
        BACKLOG_STATES[1],
        BACKLOG_STATES[2]
    ])?;
    while let Some(r) = rows.next()? {
        let (state, n, id, created): (String, i64, i64, String) =
            (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
        match state.as_str() {
            "pending" => b.pending = n,
            "in_flight" => b.in_flight = n,
            "dead" => b.dead = n,
            _ => continue,
        }
        if state != "dead" {
            keep_first(&mut b.first, (id, created));
        }
    }
    Ok(b)
}

/// The (source, target) pairs that have deliveries, in order. A seek in `deliveries_due`
/// per pair: SQLite would make this skip scan by itself only with statistics (`ANALYZE`),
/// and `SELECT DISTINCT` walks every row.
pub fn delivery_pairs(conn: &Connection) -> rusqlite::Result<Vec<(String, String)>> {
    let mut next = conn.prepare_cached(NEXT_PAIR)?;
    let mut pairs: Vec<(String, String)> = Vec::new();
    // Names are never empty (the configuration refuses them), so every pair comes after
    // two empty texts and the first seek finds the first pair.
    let (mut source, mut target) = (String::new(), String::new());
    while let Some(pair) = next
        .query_row([&source, &target], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?
    {
        (source, target) = pair;
        pairs.push((source.clone(), target.clone()));
    }
    Ok(pairs)
}

/// The pool. Connections open lazily, so this succeeds before the first query.
pub fn pool(path: &Path) -> Pool {
    r2d2::Pool::builder()
        .max_size(POOL_SIZE)
        .min_idle(Some(0))
        .test_on_check_out(false)
        .connection_timeout(Duration::from_secs(5))
        .build_unchecked(ReadOnly(path.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deliveries of two sources' targets in every state, one dead delivery created before
    /// every waiting one; the writer's connection, on a temporary inbox.
    fn inbox() -> (tempfile::TempDir, Connection) {
        let (dir, conn) = crate::store::sqlite::schema::temp_inbox();
        let rows: [(&str, &str, &str, &str); 9] = [
            ("gh", "app", "delivered", "2026-01-01T00:00:00.000Z"),
            ("gh", "app", "pending", "2026-01-01T00:00:02.000Z"),
            ("gh", "app", "in_flight", "2026-01-01T00:00:03.000Z"),
            ("gh", "app", "pending", "2026-01-01T00:00:04.000Z"),
            ("gh", "audit", "dead", "2026-01-01T00:00:01.000Z"),
            ("gh", "audit", "superseded", "2026-01-01T00:00:05.000Z"),
            ("sw", "app", "pending", "2026-01-01T00:00:06.000Z"),
            ("sw", "app", "dead", "2026-01-01T00:00:07.000Z"),
            ("sw", "old", "delivered", "2026-01-01T00:00:08.000Z"),
        ];
        for (i, (source, target, state, created)) in rows.iter().enumerate() {
            conn.execute(
                "INSERT INTO events (id, source, event_id, sha256, size, received_at)
                 VALUES (?1, ?2, ?1, 'x', 1, ?3)",
                rusqlite::params![i as i64 + 1, source, created],
            )
            .unwrap();
            conn.execute(
                "INSERT INTO deliveries (event, source, target, idempotency_key, state,
                                         next_attempt_at, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?1, ?4, ?5, ?5, ?5)",
                rusqlite::params![i as i64 + 1, source, target, state, created],
            )
            .unwrap();
        }
        (dir, conn)
    }

    fn sorted(mut counts: Vec<(String, i64)>) -> Vec<(String, i64)> {
        counts.retain(|(_, n)| *n > 0);
        counts.sort();
        counts
    }

    #[test]
    fn the_gauges_count_each_targets_backlog_and_name_its_first() {
        let (_dir, conn) = inbox();
        assert_eq!(
            delivery_pairs(&conn).unwrap(),
            [("gh", "app"), ("gh", "audit"), ("sw", "app"), ("sw", "old")]
                .map(|(s, t)| (s.to_owned(), t.to_owned()))
        );
        let (counts, oldest) = gauges(&conn, false).unwrap();
        let expect = |pairs: &[(&str, i64)]| -> Vec<(String, i64)> {
            pairs.iter().map(|(s, n)| (s.to_string(), *n)).collect()
        };
        assert_eq!(
            sorted(counts),
            expect(&[("dead", 2), ("in_flight", 1), ("pending", 3)])
        );
        // The dead delivery created earlier is not waiting; the first pending one is.
        assert_eq!(oldest.as_deref(), Some("2026-01-01T00:00:02.000Z"));
        let (counts, _) = gauges(&conn, true).unwrap();
        assert_eq!(
            sorted(counts),
            expect(&[
                ("dead", 2),
                ("delivered", 2),
                ("in_flight", 1),
                ("pending", 3),
                ("superseded", 1)
            ])
        );
        assert_eq!(
            backlog(&conn, "gh", "app").unwrap(),
            Backlog {
                pending: 2,
                in_flight: 1,
                dead: 0,
                first: Some((2, "2026-01-01T00:00:02.000Z".into())),
            }
        );
        assert_eq!(
            backlog(&conn, "sw", "old").unwrap(),
            Backlog::default(),
            "delivered history is no backlog"
        );
        conn.execute("DELETE FROM deliveries", []).unwrap();
        assert_eq!(gauges(&conn, false).unwrap(), (Vec::new(), None));
    }

    #[test]
    fn the_backlog_is_read_off_deliveries_due_not_scanned() {
        // Without an index by state, a scan here would read every delivery ever made, at
        // every scrape and every overview.
        let (_dir, conn) = inbox();
        let params = rusqlite::params!["gh", "app", "pending", "in_flight", "dead"];
        for (sql, n) in [(BACKLOG, 5), (NEXT_PAIR, 2), (EVERY_STATE, 0)] {
            let plan = crate::store::sqlite::schema::query_plan(&conn, sql, &params[..n]);
            // The table itself only by its rowid; the CTE's own rows may be scanned.
            let reads_the_index = |step: &String| {
                step.contains("COVERING INDEX deliveries_due")
                    || step.contains("INTEGER PRIMARY KEY (rowid=?)")
                    || step == "SCAN b"
                    || step.starts_with("CO-ROUTINE")
                    || step.starts_with("MATERIALIZE")
            };
            assert!(
                plan.iter().all(reads_the_index)
                    && plan.iter().any(|s| s.contains("deliveries_due")),
                "{sql}: {plan:?}"
            );
        }
    }
}
