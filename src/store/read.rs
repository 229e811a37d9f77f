//! Read-only connections for everything that is not the writer: metrics gauges, the CLI,
//! the delivery worker's scans. WAL lets them read while the writer commits.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

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
        open(&self.0)
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
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(READ_BUSY_TIMEOUT)?;
    // Every commit of the writer empties a reader's page cache, so without a mapping each
    // query copies its pages in again with pread; mapped, they are read in place.
    conn.pragma_update(None, "mmap_size", super::MMAP_SIZE)?;
    super::stable_plans(&conn)?;
    Ok(conn)
}

/// [`open`], for the CLI's readers: refuses an inbox of another schema version with a
/// message that says what to do, rather than failing on a missing table.
pub fn open_current(path: &Path) -> Result<Connection, super::Error> {
    let conn = open(path)?;
    super::require_current(&conn)?;
    Ok(conn)
}

/// Delivery rows per state: of every state if `settled`, a walk of every row; otherwise of
/// [`BACKLOG_STATES`] only, a walk of their stretch of `deliveries_state`. One statement,
/// so the counts are of one moment.
pub fn delivery_counts(conn: &Connection, settled: bool) -> rusqlite::Result<Vec<(String, i64)>> {
    let row = |r: &rusqlite::Row| Ok((r.get(0)?, r.get(1)?));
    if settled {
        conn.prepare_cached("SELECT state, count(*) FROM deliveries GROUP BY state")?
            .query_map([], row)?
            .collect()
    } else {
        conn.prepare_cached(
            "SELECT state, count(*) FROM deliveries WHERE state IN (?1, ?2, ?3) GROUP BY state",
        )?
        .query_map(BACKLOG_STATES, row)?
        .collect()
    }
}

/// When the oldest delivery still pending or in flight was created, if any.
pub fn oldest_pending(conn: &Connection) -> rusqlite::Result<Option<String>> {
    conn.prepare_cached(
        "SELECT min(created_at) FROM deliveries WHERE state IN ('pending', 'in_flight')",
    )?
    .query_row([], |r| r.get(0))
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
