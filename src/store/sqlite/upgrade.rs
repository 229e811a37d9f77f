//! What `serve`'s next start will do to an inbox made by an older hookinbox that an
//! operator should plan for (`hookinbox check` says it): a conversion that rewrites the
//! whole file once, or a rebuild of `deliveries` large enough to take a while.

use std::path::Path;

use rusqlite::Connection;

/// The warnings for the inbox at `db`, if it exists and is readable.
pub fn warnings(db: &Path) -> Vec<String> {
    let Some(conn) = db.exists().then(|| super::read::open(db).ok()).flatten() else {
        return Vec::new();
    };
    conversion_warning(&conn, db)
        .into_iter()
        .chain(deliveries_rebuild_warning(&conn, db))
        .collect()
}

/// What `serve` will do to an existing inbox at start-up that an operator should plan
/// for: a conversion that rewrites the whole file once.
fn conversion_warning(conn: &Connection, db: &Path) -> Option<String> {
    let (rewrite, version) = super::schema::pending_rewrite(conn).ok()?;
    if !rewrite {
        return None;
    }
    let mib = |bytes: u64| bytes / (1024 * 1024);
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    let size = [db.as_os_str(), wal.as_os_str()]
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum::<u64>();
    let dir = db
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let free = nix::sys::statvfs::statvfs(dir)
        .map(|s| {
            format!(
                ", {} MiB are",
                mib(s.blocks_available() * s.fragment_size())
            )
        })
        .unwrap_or_default();
    Some(format!(
        "the inbox {} ({} MiB, schema version {version}) is converted to version {} when \
         `serve` next starts: the file is rewritten once (VACUUM), which needs about {} MiB \
         free beside it at its peak{free} and takes about {REWRITE_SECONDS_PER_GIB} s per GiB \
         on a small VM. Providers are not answered until it is done (they retry; under \
         systemd serve extends its start timeout meanwhile): take a `hookinbox backup` \
         first and restart when traffic is low",
        db.display(),
        mib(size),
        super::schema::schema_version(),
        mib(size) * REWRITE_SPACE_FACTOR + 1,
    ))
}

/// The schema 7 rebuild of `deliveries` on an inbox large enough for it to take a while:
/// `serve` copies every delivery once before it listens.
fn deliveries_rebuild_warning(conn: &Connection, db: &Path) -> Option<String> {
    let rows = super::schema::pending_deliveries_rebuild(conn).ok()??;
    if rows < REBUILD_WORTH_SAYING {
        return None;
    }
    let millions = rows as f64 / 1e6;
    Some(format!(
        "the inbox {} holds {rows} deliveries, which `serve` copies once when it next \
         starts (schema version {} drops the index of their idempotency keys): about {:.0} s, \
         with about {} MiB free for the copy at its peak (a third of it stays in the file, \
         given back to the file system a little at a time). Providers are not answered \
         until it is done (they retry): restart when traffic is low",
        db.display(),
        super::schema::DELIVERIES_REBUILT_IN,
        (millions * REBUILD_SECONDS_PER_MILLION).ceil(),
        (rows as u64 * REBUILD_BYTES_PER_DELIVERY) / (1024 * 1024) + 1,
    ))
}

/// Below this many deliveries the rebuild takes about a second or less: not worth a
/// warning.
const REBUILD_WORTH_SAYING: i64 = 250_000;
/// What the rebuild took, measured on a 2-core VM with 1 million delivered deliveries (one
/// target): 3.6–5.6 s; at its peak the file and its WAL took 425 MB more than before with
/// hookinbox's SQLite, 672 MB with Debian's 3.40 (the new table and its indexes in the WAL,
/// more than once where the page cache spilled, then copied into the file beside the old
/// one's pages, which become free), and the file stayed 165–170 MB larger. The space asked
/// for is the larger peak.
const REBUILD_SECONDS_PER_MILLION: f64 = 6.0;
const REBUILD_BYTES_PER_DELIVERY: u64 = 700;

/// What the one-time rewrite took, measured on a 2-core VM with a 717 MiB inbox of 300,000
/// events (BENCHMARKS.md, "Disk: pruning, giving pages back, and the schema 2 conversion"):
/// 11–13 s, and at its peak the old file, the migration's copy and the WAL together used
/// 3.1 times the file's size, so about twice its size must be free beside it.
const REWRITE_SECONDS_PER_GIB: u64 = 25;
const REWRITE_SPACE_FACTOR: u64 = 2;
