//! The SQLite inbox's file: the schema of `schema.sql` and its migrations, the pragmas every
//! connection sets, and the pages it gives back to the file system.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use crate::config::Synchronous;

/// The schema, embedded so that the binary is the one thing to install.
pub const SCHEMA: &str = include_str!("../../../schema.sql");

/// How long the writer waits for a write lock held by someone else (an operator's
/// `sqlite3` session inside `BEGIN IMMEDIATE`, say) before the batch fails with 503. Short,
/// because providers time out quickly (Slack after 3 s) and a 503 makes them retry.
pub const WRITE_LOCK_TIMEOUT: Duration = Duration::from_secs(2);

/// How much of the database file one-off commands' connections map into memory (a limit,
/// not an allocation; serve's readers map none, see `read::ReadOnly`).
pub const MMAP_SIZE: i64 = 256 * 1024 * 1024;

/// The writer's WAL pages between checkpoints (SQLite's default is 1000). SQLite checkpoints
/// inside the commit that crosses the mark, and every request in that batch and queued
/// behind it waits while the pages are copied into the database file and the file is
/// synced: at 1000 pages 8–30 ms on the benchmark's disk, which made the p99 of a stored
/// event 13–16 ms with time-ordered ids; at 250 pages, 2–8 ms and a p99 of 5–7 ms
/// (BENCHMARKS.md). The pages every commit rewrites (the tails of the b-trees) are copied
/// more often: 1–3% more bytes per event with time-ordered ids, a tenth more with random
/// ones, and at 100 pages 6% more with ordered ids. Answering the batch before
/// checkpointing measured no better.
pub const CHECKPOINT_PAGES: i64 = 250;

/// The WAL is truncated back to this size after checkpoints, so that one burst does not
/// leave a large file behind.
pub const JOURNAL_SIZE_LIMIT: i64 = 64 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
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
    #[error(
        "the inbox has schema version {found}, and this hookinbox works on version {known}; \
         start `hookinbox serve` once (it converts the inbox at start-up), then run this again"
    )]
    Outdated { found: i64, known: i64 },
}

/// The migrations in `schema.sql`: (version, SQL), in file order.
pub fn migrations() -> Vec<(i64, &'static str)> {
    super::super::schema_sections(SCHEMA)
}

/// The schema version this binary writes.
pub fn schema_version() -> i64 {
    migrations().last().map_or(0, |(v, _)| *v)
}

/// Opens the read-write connection, sets its pragmas and migrates the schema. `create`
/// allows creating a new, empty inbox (at start-up, not on a reopen after a failure).
/// Migrating may rewrite the whole file once (see [`ensure_incremental_vacuum`]), so only
/// `serve` opens this way; the CLI's writers use [`open_current`].
pub fn open_writer(path: &Path, sync: Synchronous, create: bool) -> Result<Connection, OpenError> {
    let conn = connect(path, sync, create)?;
    migrate(&conn)?;
    ensure_incremental_vacuum(&conn, path)?;
    conn.execute_batch(&format!("PRAGMA wal_autocheckpoint = {CHECKPOINT_PAGES}"))?;
    Ok(conn)
}

/// A read-write connection for the CLI's short write transactions (`replay`, `prune`),
/// next to a running `serve`: it never migrates, and refuses an inbox of another version.
pub fn open_current(path: &Path) -> Result<Connection, OpenError> {
    let conn = connect(path, Synchronous::Full, false)?;
    require_current(&conn)?;
    Ok(conn)
}

/// The schema version the inbox at `conn` is at (0 for a new, empty file).
fn user_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
}

/// Refuses an inbox whose schema is not the one this binary reads and writes.
pub fn require_current(conn: &Connection) -> Result<(), OpenError> {
    let known = schema_version();
    let found = user_version(conn)?;
    match found.cmp(&known) {
        std::cmp::Ordering::Equal => Ok(()),
        std::cmp::Ordering::Less => Err(OpenError::Outdated { found, known }),
        std::cmp::Ordering::Greater => Err(OpenError::TooNew { found, known }),
    }
}

fn connect(path: &Path, sync: Synchronous, create: bool) -> Result<Connection, OpenError> {
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if create {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(WRITE_LOCK_TIMEOUT)?;
    // Only possible while the file has no table yet; on an older inbox a VACUUM does it.
    let tables: i64 = conn.query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))?;
    if tables == 0 {
        conn.execute_batch("PRAGMA auto_vacuum = INCREMENTAL")?;
    }
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(OpenError::NotWal(mode));
    }
    let sync = match sync {
        Synchronous::Full => "FULL",
        Synchronous::Normal => "NORMAL",
    };
    // temp_store = MEMORY keeps the savepoint journal in memory: the writer runs each job
    // in a savepoint, which copies every page the job changes there first, and past 64 KiB
    // SQLite spills that journal to a temporary file (measured: a pwrite per page per job,
    // about a third as many as the WAL's). It is never synced and is thrown away at the
    // commit; in memory it is a copy, not a system call.
    conn.execute_batch(&format!(
        "PRAGMA synchronous = {sync};
         PRAGMA foreign_keys = ON;
         PRAGMA temp_store = MEMORY;
         PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT};"
    ))?;
    stable_plans(&conn)?;
    Ok(conn)
}

/// Turns on SQLite's query planner stability guarantee: a statement's plan no longer
/// depends on the values bound to it. Without it SQLite marks a parameter whose value it
/// compared while planning (against a partial index's condition, among others) and
/// prepares the statement again whenever a new value is bound: a cached statement is then
/// compiled on every execution. Measured while forwarding: 8% of the CPU went to preparing
/// the claim again. hookinbox never runs ANALYZE, so no plan loses anything.
pub fn stable_plans(conn: &Connection) -> rusqlite::Result<()> {
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )?;
    Ok(())
}

fn migrate(conn: &Connection) -> Result<(), OpenError> {
    let known = schema_version();
    let found = user_version(conn)?;
    if found > known {
        return Err(OpenError::TooNew { found, known });
    }
    for (version, sql) in migrations() {
        if version <= found {
            continue;
        }
        let started = std::time::Instant::now();
        // One transaction per step: a crash mid-migration leaves the previous version.
        // Foreign keys are off meanwhile, as SQLite's procedure for rebuilding a table
        // requires (dropping the old table must not cascade), and checked before the
        // commit instead.
        // Rows that referred to nothing before (an operator's DELETE in a shell without
        // foreign keys) are not the migration's doing: only new ones stop it.
        let broken = || -> rusqlite::Result<i64> {
            conn.query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |r| {
                r.get(0)
            })
        };
        conn.execute_batch("PRAGMA foreign_keys = OFF")?;
        let before = broken()?;
        let step = conn
            .execute_batch(&format!(
                "BEGIN IMMEDIATE; {sql}; PRAGMA user_version = {version};"
            ))
            .and_then(|()| {
                let after = broken()?;
                if after > before {
                    return Err(rusqlite::Error::SqliteFailure(
                        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CONSTRAINT),
                        Some(format!(
                            "migration {version} would leave {} rows referring to nothing",
                            after - before
                        )),
                    ));
                }
                conn.execute_batch("COMMIT")
            });
        if step.is_err() {
            // Rolled back first: the pragma below is ignored inside a transaction.
            let _ = conn.execute_batch("ROLLBACK");
        }
        conn.execute_batch("PRAGMA foreign_keys = ON")?;
        step?;
        // A new inbox goes through every step in moments: one line for it, below.
        if found > 0 {
            tracing::info!(
                version,
                seconds = started.elapsed().as_secs_f64(),
                "migrated the inbox schema"
            );
        }
    }
    if found == 0 {
        tracing::info!(version = known, "created the inbox");
    }
    Ok(())
}

/// `PRAGMA auto_vacuum` for incremental vacuum.
const INCREMENTAL: i64 = 2;

/// Turns on incremental auto-vacuum for an inbox created before it was the default: a
/// VACUUM rewrites the file once (with the migration before it, the peak measured 3.1
/// times the file's size on disk, so about twice its size must be free beside it, and it
/// takes time in proportion to its size), logged with how long it took. It cannot run
/// inside the migration's transaction, so it runs after; a crash in between is finished at
/// the next start, and a failure (a full disk) is logged and served through.
fn ensure_incremental_vacuum(conn: &Connection, path: &Path) -> Result<(), OpenError> {
    let mode: i64 = conn.query_row("PRAGMA auto_vacuum", [], |r| r.get(0))?;
    if mode == INCREMENTAL {
        return Ok(());
    }
    let bytes = std::fs::metadata(path).map_or(0, |m| m.len());
    tracing::warn!(
        path = %path.display(),
        bytes,
        "rewriting the inbox once (VACUUM) to turn on incremental auto-vacuum, so that pruned \
         payloads give disk back; webhooks are answered once it is done"
    );
    let started = std::time::Instant::now();
    // The migration's pages are still in the WAL: moved into the file first, the WAL is
    // empty again before VACUUM fills it with the whole new copy, which bounds the disk
    // this needs at its peak.
    let rewrite = conn
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .and_then(|()| conn.execute_batch("PRAGMA auto_vacuum = INCREMENTAL; VACUUM;"));
    if let Err(e) = rewrite {
        // Receiving matters more than giving pages back: the inbox works as before, and
        // pruned payloads' pages are reused by new events rather than returned. A VACUUM
        // that fails changes nothing; the next start tries again.
        tracing::error!(
            error = %e,
            path = %path.display(),
            "could not rewrite the inbox to turn on incremental auto-vacuum; serving without \
             it (freed pages are reused, not given back). Free about twice the file's size \
             beside it and restart to try again"
        );
        return Ok(());
    }
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
    let after = std::fs::metadata(path).map_or(0, |m| m.len());
    tracing::warn!(
        seconds = started.elapsed().as_secs_f64(),
        bytes_before = bytes,
        bytes_after = after,
        "the inbox is rewritten with incremental auto-vacuum"
    );
    Ok(())
}

/// Whether opening the inbox for `serve` will rewrite the whole file once (schema version
/// 2 needs incremental auto-vacuum, which only a VACUUM turns on), and its version.
pub fn pending_rewrite(conn: &Connection) -> rusqlite::Result<(bool, i64)> {
    let version = user_version(conn)?;
    let vacuum: i64 = conn.query_row("PRAGMA auto_vacuum", [], |r| r.get(0))?;
    Ok((version > 0 && vacuum != INCREMENTAL, version))
}

/// The schema version that rebuilds `deliveries` (without the idempotency key's index).
pub const DELIVERIES_REBUILT_IN: i64 = 7;

/// When `serve`'s next start will rebuild `deliveries` (an inbox from before
/// [`DELIVERIES_REBUILT_IN`]): how many rows it copies (counted: ids go on climbing after
/// retention deletes rows, so the highest id can be far more; a second per ten million
/// rows, once). None when it will not.
pub fn pending_deliveries_rebuild(conn: &Connection) -> rusqlite::Result<Option<i64>> {
    let version = user_version(conn)?;
    if version == 0 || version >= DELIVERIES_REBUILT_IN {
        return Ok(None);
    }
    conn.query_row("SELECT count(*) FROM deliveries", [], |r| r.get(0))
        .map(Some)
}

/// How many pages of the inbox are free, and how many it has in all.
pub fn page_counts(conn: &Connection) -> rusqlite::Result<(i64, i64)> {
    let free = conn.query_row("PRAGMA freelist_count", [], |r| r.get(0))?;
    let all = conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
    Ok((free, all))
}

/// Pages a free-page release leaves on the free list: new events reuse them at once, so
/// giving back and growing again would be churn.
pub const FREE_PAGE_RESERVE: i64 = 256;

/// Most pages one release step gives back. A step that only cuts free pages off the end of
/// the file takes microseconds; one that moves live pages into holes costs about 0.2 ms a
/// page. Measured on a 2-core VM releasing 150,000 pages (BENCHMARKS.md): 32 pages a step
/// took 0.1 ms at the median and 6.6 ms at the 99th percentile (256: 46 ms), so webhooks
/// sharing the writer never wait long behind one.
pub const FREE_PAGE_STEP: i64 = 32;

/// Gives back to the file system up to [`FREE_PAGE_STEP`] free pages beyond the
/// [`FREE_PAGE_RESERVE`]; returns how many. Zero means there is nothing more to give.
pub fn release_free_pages(conn: &Connection) -> rusqlite::Result<i64> {
    let (free, pages) = page_counts(conn)?;
    let n = (free - FREE_PAGE_RESERVE).clamp(0, FREE_PAGE_STEP);
    if n == 0 {
        return Ok(0);
    }
    // The pragma moves one page per step: it must be stepped to the end, which
    // `execute_batch` does not do.
    let mut stmt = conn.prepare_cached(&format!("PRAGMA incremental_vacuum({n})"))?;
    let mut rows = stmt.raw_query();
    while rows.next()?.is_some() {}
    // Counted by the file's length: releasing also drops the pointer-map pages that
    // tracked the freed ones.
    Ok(pages - page_counts(conn)?.1)
}

/// A new inbox in a temporary directory and its writer's connection, for unit tests.
#[cfg(test)]
pub(crate) fn temp_inbox() -> (tempfile::TempDir, Connection) {
    let dir = tempfile::tempdir().unwrap();
    let conn = open_writer(&dir.path().join("inbox.db"), Synchronous::Normal, true).unwrap();
    (dir, conn)
}

/// The steps of `sql`'s query plan (EXPLAIN QUERY PLAN's detail column), for unit tests
/// that pin a statement to its index.
#[cfg(test)]
pub(crate) fn query_plan(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> Vec<String> {
    conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
        .unwrap()
        .query_map(params, |r| r.get(3))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
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

    /// The writer's WAL is copied into the database file every [`CHECKPOINT_PAGES`], not at
    /// SQLite's 1000: the file holds the pages of commits well short of 1000.
    #[test]
    fn the_writer_checkpoints_every_checkpoint_pages() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("inbox.db");
        let c = open_writer(&p, Synchronous::Normal, true).unwrap();
        c.execute_batch("CREATE TABLE scratch (b BLOB)").unwrap();
        let before = std::fs::metadata(&p).unwrap().len();
        // A new leaf per commit, with the pages above it and page 1 about four pages of
        // WAL: twice the mark, half of SQLite's 1000.
        for _ in 0..CHECKPOINT_PAGES / 2 {
            c.execute("INSERT INTO scratch (b) VALUES (zeroblob(3000))", [])
                .unwrap();
        }
        let grown = std::fs::metadata(&p).unwrap().len() - before;
        assert!(
            grown >= CHECKPOINT_PAGES as u64 / 4 * 4096,
            "the database file grew by {grown} bytes: no checkpoint copied the WAL"
        );
    }

    #[test]
    fn refuses_a_newer_schema() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("inbox.db");
        let c = open_writer(&p, Synchronous::Full, true).unwrap();
        c.execute_batch("PRAGMA user_version = 999").unwrap();
        drop(c);
        let e = open_writer(&p, Synchronous::Full, true).unwrap_err();
        assert!(matches!(e, OpenError::TooNew { found: 999, .. }), "{e}");
    }

    /// An inbox as hookinbox wrote it at schema version 1: bodies in `events`, no
    /// auto-vacuum.
    fn version_1_inbox(p: &Path) -> Connection {
        let c = Connection::open(p).unwrap();
        c.execute_batch("PRAGMA journal_mode = WAL").unwrap();
        let (_, v1) = migrations().remove(0);
        c.execute_batch(&format!("BEGIN; {v1}; PRAGMA user_version = 1; COMMIT;"))
            .unwrap();
        let t = "2026-11-30T00:00:00.000Z";
        let event = "INSERT INTO events (id, source, event_id, sha256, size, body, headers,
                                         received_at, pruned_at)
                     VALUES (?1, 'sw', ?2, 'x', 3, ?3, ?4, ?5, ?6)";
        let mut insert = c.prepare(event).unwrap();
        use rusqlite::types::Value;
        insert
            .execute(rusqlite::params![
                1,
                "text",
                "abc",
                "[[\"a\",\"b\"]]",
                t,
                None::<String>
            ])
            .unwrap();
        insert
            .execute(rusqlite::params![
                2,
                "binary",
                Value::Blob(vec![0xff, 0, 1]),
                "[]",
                t,
                None::<String>
            ])
            .unwrap();
        insert
            .execute(rusqlite::params![
                3,
                "pruned",
                None::<String>,
                None::<String>,
                t,
                Some(t)
            ])
            .unwrap();
        drop(insert);
        c.execute(
            "INSERT INTO deliveries (event, source, target, idempotency_key, next_attempt_at,
                                     created_at, updated_at)
             VALUES (1, 'sw', 'app', 'hk_1', ?1, ?1, ?1)",
            [t],
        )
        .unwrap();
        c
    }

    #[test]
    fn migration_2_moves_payloads_out_and_turns_on_incremental_vacuum() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("inbox.db");
        let c = version_1_inbox(&p);
        // A delivery whose event an operator deleted in a shell without foreign keys: it
        // was there before, so it must not stop the migration.
        c.execute_batch("PRAGMA foreign_keys = OFF").unwrap();
        c.execute(
            "INSERT INTO deliveries (event, source, target, idempotency_key, next_attempt_at,
                                     created_at, updated_at)
             VALUES (99, 'sw', 'app', 'hk_orphan', 'x', 'x', 'x')",
            [],
        )
        .unwrap();
        c.execute(
            "INSERT INTO attempts (delivery, number, started_at, duration_ms, outcome)
             VALUES (1, 1, 'x', 5, 'retry')",
            [],
        )
        .unwrap();
        drop(c);
        // The CLI refuses to work on it rather than migrate it next to an older serve.
        assert!(matches!(
            open_current(&p).unwrap_err(),
            OpenError::Outdated { found: 1, known } if known == schema_version()
        ));
        let c = open_writer(&p, Synchronous::Full, false).unwrap();
        let v: i64 = c
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        let vacuum: i64 = c.query_row("PRAGMA auto_vacuum", [], |r| r.get(0)).unwrap();
        // Through every later migration too.
        assert_eq!((v, vacuum), (schema_version(), INCREMENTAL));
        let payloads: Vec<(i64, String, Vec<u8>, String)> = c
            .prepare("SELECT event, typeof(body), CAST(body AS BLOB), headers FROM payloads ORDER BY event")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            payloads,
            [
                (1, "text".into(), b"abc".to_vec(), "[[\"a\",\"b\"]]".into()),
                (2, "blob".into(), vec![0xff, 0, 1], "[]".into()),
            ],
            "the exact bytes, as TEXT or BLOB as before; the pruned event has none"
        );
        let columns: Vec<String> = c
            .prepare("SELECT name FROM pragma_table_info('events')")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(
            !columns.iter().any(|c| c == "body" || c == "headers"),
            "{columns:?}"
        );
        let pruned: Vec<(i64, bool)> = c
            .prepare("SELECT id, pruned FROM recent_events ORDER BY id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(pruned, [(1, false), (2, false), (3, true)]);
        // Migration 6: the newest event per source, and no index by time on `events`.
        let latest: (String, String) = c
            .query_row("SELECT source, received_at FROM latest_received", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .unwrap();
        assert_eq!(latest, ("sw".into(), "2026-11-30T00:00:00.000Z".into()));
        let indexes: i64 = c
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE name IN ('events_age', 'events_unpruned')",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(indexes, 0);
        // Migration 7: the deliveries and their attempt as they were, their keys no longer
        // in an index of their own (the table's indexes name no key column), the attempt
        // still joined to its delivery.
        let deliveries: Vec<(i64, i64, String)> = c
            .prepare("SELECT id, event, idempotency_key FROM deliveries ORDER BY id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            deliveries,
            [(1, 1, "hk_1".into()), (2, 99, "hk_orphan".into())]
        );
        let keyed: i64 = c
            .query_row(
                "SELECT count(*) FROM pragma_index_list('deliveries') l,
                        pragma_index_info(l.name) i WHERE i.name = 'idempotency_key'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(keyed, 0);
        let attempt: (String, i64) = c
            .query_row(
                "SELECT idempotency_key, number FROM recent_attempts",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(attempt, ("hk_1".into(), 1));
        // Migration 8: no index of deliveries leads with their state.
        let by_state: i64 = c
            .query_row(
                "SELECT count(*) FROM pragma_index_list('deliveries') l,
                        pragma_index_info(l.name) i WHERE i.seqno = 0 AND i.name = 'state'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(by_state, 0);
        c.execute(
            "INSERT INTO deliveries (event, source, target, idempotency_key, next_attempt_at,
                                     created_at, updated_at)
             VALUES (1, 'sw', 'app', 'hk_again', 'x', 'x', 'x')",
            [],
        )
        .expect_err("one delivery per event and target, as before");
        assert_eq!(
            c.query_row("PRAGMA integrity_check", [], |r| r.get::<_, String>(0))
                .unwrap(),
            "ok"
        );
        drop(c);
        open_current(&p).unwrap();
    }

    #[test]
    fn a_crash_between_migration_and_vacuum_is_finished_at_the_next_open() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("inbox.db");
        let c = version_1_inbox(&p);
        let (_, v2) = migrations().remove(1);
        c.execute_batch(&format!("BEGIN; {v2}; PRAGMA user_version = 2; COMMIT;"))
            .unwrap();
        drop(c);
        let c = open_writer(&p, Synchronous::Full, false).unwrap();
        let vacuum: i64 = c.query_row("PRAGMA auto_vacuum", [], |r| r.get(0)).unwrap();
        assert_eq!(vacuum, INCREMENTAL);
    }

    #[test]
    fn freed_pages_go_back_in_bounded_steps() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("inbox.db");
        let mut c = open_writer(&p, Synchronous::Normal, true).unwrap();
        c.execute_batch(
            "CREATE TABLE filler (x BLOB);
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000)
             INSERT INTO filler SELECT randomblob(4000) FROM n;
             DELETE FROM filler;",
        )
        .unwrap();
        let (free, pages) = page_counts(&c).unwrap();
        assert!(
            free > FREE_PAGE_RESERVE + FREE_PAGE_STEP,
            "{free} of {pages}"
        );
        // As the writer runs it: in a savepoint of a batch's transaction.
        let mut tx = c.transaction().unwrap();
        let sp = tx.savepoint().unwrap();
        let first = release_free_pages(&sp).unwrap();
        sp.commit().unwrap();
        tx.commit().unwrap();
        assert!(first >= FREE_PAGE_STEP, "{first}");
        assert_eq!(page_counts(&c).unwrap().1, pages - first);
        let mut released = first;
        let mut steps = 1;
        loop {
            let before = page_counts(&c).unwrap().0;
            let n = release_free_pages(&c).unwrap();
            if n == 0 {
                break;
            }
            // One step frees at most a step's pages (plus the pointer maps that tracked them).
            assert!(before - page_counts(&c).unwrap().0 <= FREE_PAGE_STEP, "{n}");
            released += n;
            steps += 1;
        }
        let (free_after, pages_after) = page_counts(&c).unwrap();
        assert!(steps > 1, "{steps}");
        assert_eq!(free_after, FREE_PAGE_RESERVE);
        assert_eq!(pages_after, pages - released);
        assert!(pages_after < pages / 2, "{pages_after} of {pages}");
    }
}
