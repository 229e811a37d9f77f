//! The inbox: a WAL-mode SQLite file with the schema of `schema.sql`.
//!
//! Invariant: every write goes through the one [`writer::Writer`] thread, and a caller hears
//! "stored" only after the transaction that holds its event committed (with
//! `synchronous=FULL`, after the WAL was fsynced). Readers use a small pool of read-only
//! connections ([`read`]) and never block the writer (WAL). One `serve` holds an inbox at a
//! time ([`lock`]).

pub mod commits;
pub mod ingest;
pub mod lock;
pub mod queue;
pub mod read;
pub mod retention;
pub mod writer;

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use crate::config::Synchronous;

/// The schema, embedded so that the binary is the one thing to install.
pub const SCHEMA: &str = include_str!("../../schema.sql");

/// How long the writer waits for a write lock held by someone else (an operator's
/// `sqlite3` session inside `BEGIN IMMEDIATE`, say) before the batch fails with 503. Short,
/// because providers time out quickly (Slack after 3 s) and a 503 makes them retry.
pub const WRITE_LOCK_TIMEOUT: Duration = Duration::from_secs(2);

/// How much of the database file connections map into memory (a limit, not an allocation).
pub const MMAP_SIZE: i64 = 256 * 1024 * 1024;

/// The WAL is truncated back to this size after checkpoints, so that one burst does not
/// leave a large file behind.
pub const JOURNAL_SIZE_LIMIT: i64 = 64 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error(
        "the inbox has schema version {found}, newer than this hookinbox knows ({known}); \
         run the newer hookinbox or restore a backup"
    )]
    TooNew { found: i64, known: i64 },
    #[error(
        "journal_mode is {0:?}, not wal; is the inbox on a filesystem without shared memory (NFS)?"
    )]
    NotWal(String),
}

/// The migrations in `schema.sql`: (version, SQL), in file order.
pub fn migrations() -> Vec<(i64, &'static str)> {
    // A marker is a line of its own; the file's header mentions the marker mid-line.
    const MARK: &str = "\n-- migrate: ";
    let mut out = Vec::new();
    let mut rest = SCHEMA;
    while let Some(start) = rest.find(MARK) {
        let after = &rest[start + MARK.len()..];
        let line_end = after.find('\n').unwrap_or(after.len());
        let version: i64 = after[..line_end]
            .trim()
            .parse()
            .expect("schema.sql: a migrate marker is followed by its version number");
        let body = &after[line_end..];
        let end = body.find(MARK).unwrap_or(body.len());
        out.push((version, &body[..end]));
        rest = &body[end..];
    }
    out
}

/// The schema version this binary writes.
pub fn schema_version() -> i64 {
    migrations().last().map_or(0, |(v, _)| *v)
}

/// Opens the read-write connection, sets its pragmas and migrates the schema. `create`
/// allows creating a new, empty inbox (at start-up, not on a reopen after a failure).
pub fn open_writer(path: &Path, sync: Synchronous, create: bool) -> Result<Connection, Error> {
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if create {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(WRITE_LOCK_TIMEOUT)?;
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(Error::NotWal(mode));
    }
    let sync = match sync {
        Synchronous::Full => "FULL",
        Synchronous::Normal => "NORMAL",
    };
    conn.execute_batch(&format!(
        "PRAGMA synchronous = {sync};
         PRAGMA foreign_keys = ON;
         PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT};"
    ))?;
    migrate(&conn)?;
    Ok(conn)
}

fn migrate(conn: &Connection) -> Result<(), Error> {
    let known = schema_version();
    let found: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if found > known {
        return Err(Error::TooNew { found, known });
    }
    for (version, sql) in migrations() {
        if version <= found {
            continue;
        }
        // One transaction per step: a crash mid-migration leaves the previous version.
        conn.execute_batch(&format!(
            "BEGIN IMMEDIATE; {sql}; PRAGMA user_version = {version}; COMMIT;"
        ))
        .inspect_err(|_| {
            let _ = conn.execute_batch("ROLLBACK");
        })?;
        tracing::info!(version, "migrated the inbox schema");
    }
    Ok(())
}

/// The idempotency key of one event at one target: derived from the identity, so it is the
/// same on every attempt, replay and restart, and even if the identity row was pruned and
/// the provider sends the event once more.
pub fn idempotency_key(source: &str, account: &str, event_id: &str, target: &str) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for part in [source, account, event_id, target] {
        // Length-prefixed, so that no two different tuples hash the same bytes.
        ctx.update(&(part.len() as u64).to_be_bytes());
        ctx.update(part.as_bytes());
    }
    format!("hk_{}", hex::encode(&ctx.finish().as_ref()[..16]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_numbered_in_order() {
        let m = migrations();
        assert!(!m.is_empty());
        for (i, (v, _)) in m.iter().enumerate() {
            assert_eq!(*v, i as i64 + 1);
        }
    }

    #[test]
    fn open_migrates_once_and_reopens() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("inbox.db");
        let c = open_writer(&p, Synchronous::Full, true).unwrap();
        let v: i64 = c
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, schema_version());
        drop(c);
        open_writer(&p, Synchronous::Full, true).unwrap();
    }

    #[test]
    fn refuses_a_newer_schema() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("inbox.db");
        let c = open_writer(&p, Synchronous::Full, true).unwrap();
        c.execute_batch("PRAGMA user_version = 999").unwrap();
        drop(c);
        let e = open_writer(&p, Synchronous::Full, true).unwrap_err();
        assert!(matches!(e, Error::TooNew { found: 999, .. }), "{e}");
    }

    #[test]
    fn idempotency_keys_are_stable_and_distinct() {
        let a = idempotency_key("stripe", "", "evt_1", "app");
        assert_eq!(a, idempotency_key("stripe", "", "evt_1", "app"));
        assert_ne!(a, idempotency_key("stripe", "", "evt_1", "audit"));
        assert_ne!(
            idempotency_key("ab", "c", "e", "t"),
            idempotency_key("a", "bc", "e", "t")
        );
        assert_eq!(a.len(), 3 + 32);
    }
}
