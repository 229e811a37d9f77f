//! A consistent copy of a SQLite inbox while `serve` runs (`hookinbox backup`).
//!
//! SQLite's online backup API copies the inbox page by page from a read-only connection
//! that holds one read transaction for the whole copy, so every step reads the same
//! snapshot (everything committed before it began) while the service keeps writing; the
//! page count gives a progress line on a terminal. The copy is switched to a rollback
//! journal, so that it is one self-contained file, synced with its directory, and then
//! checked with `PRAGMA integrity_check` before it is called a backup.

use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use rusqlite::backup::{Backup, StepResult};

/// Pages copied per step: 4 MiB at the inbox's 4 KiB pages. The snapshot is held for the
/// whole copy either way, so the step only sets how often progress is reported; a step
/// of this size costs a few milliseconds.
const PAGES_PER_STEP: i32 = 1024;
/// How long a step that found the inbox locked (only WAL recovery after a crash takes such
/// a lock from a reader) waits before trying again, and how long in all.
const BUSY_PAUSE: Duration = Duration::from_millis(50);
const BUSY_FOR_AT_MOST: Duration = Duration::from_secs(5);

/// A copy as it was written.
#[derive(Debug)]
pub struct BackedUp {
    /// The copy's pages (compacted: fewer than the inbox's when it had free pages).
    pub pages: i64,
    /// Events in the copy.
    pub events: i64,
    /// `PRAGMA integrity_check` of the copy: "ok", or the problems it found.
    pub integrity_check: String,
}

/// Copies the inbox at `db` into `dest`, a new file (absolute, so that SQLite never reads
/// a name like "file:x.db" as a URI), readable by its owner only, synced with its
/// directory, then checked; `on_step(pages done, pages in all)` after each step. Refuses a
/// `dest` that exists; a partial copy is removed.
pub fn write(db: &Path, dest: &Path, on_step: impl FnMut(u64, u64)) -> anyhow::Result<BackedUp> {
    // A journal or WAL left beside the name (a backup killed part way) would be read into
    // the new copy as if it were its own.
    for leftover in companions(dest) {
        if leftover.exists() {
            bail!(
                "{} exists, left by an earlier copy; remove it or name another file",
                leftover.display()
            );
        }
    }
    // Created here, exclusively (the backup API would overwrite whatever it finds), and
    // readable by its owner only: it holds every stored payload.
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(dest)
    {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => bail!(
            "{} already exists; name a new file (a backup never overwrites)",
            dest.display()
        ),
        Err(e) => return Err(e).with_context(|| format!("creating {}", dest.display())),
    }
    let events = match copy(db, dest, PAGES_PER_STEP, on_step) {
        Ok((_, events)) => events,
        Err(e) => {
            // A partial copy is not a backup.
            for file in std::iter::once(dest.to_owned()).chain(companions(dest)) {
                let _ = std::fs::remove_file(file);
            }
            return Err(e.context(format!("writing the copy to {}", dest.display())));
        }
    };
    std::fs::File::open(dest)
        .and_then(|f| f.sync_all())
        .with_context(|| format!("syncing {} to disk", dest.display()))?;
    if let Some(dir) = dest.parent().filter(|d| !d.as_os_str().is_empty()) {
        // The new directory entry must be durable too.
        std::fs::File::open(dir)
            .and_then(|f| f.sync_all())
            .with_context(|| format!("syncing the directory {}", dir.display()))?;
    }
    // A connection of its own, so that the check reads the file, not pages still cached.
    let copy = super::read::open(dest)?;
    let integrity_check: String = copy.query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
    // The compacted copy's, not the inbox's.
    let pages: i64 = copy.query_row("PRAGMA page_count", [], |r| r.get(0))?;
    Ok(BackedUp {
        pages,
        events,
        integrity_check,
    })
}

/// Copies the inbox at `db` into the empty file `dest`, `pages_per_step` pages at a time,
/// calling `on_step(pages done, pages in all)` after each step; returns the pages and the
/// events copied.
/// The files SQLite may keep beside a database: its rollback journal, WAL and shared memory.
fn companions(dest: &Path) -> Vec<std::path::PathBuf> {
    ["-journal", "-wal", "-shm"]
        .iter()
        .map(|suffix| {
            let mut name = dest.as_os_str().to_owned();
            name.push(suffix);
            name.into()
        })
        .collect()
}

fn copy(
    db: &Path,
    dest: &Path,
    pages_per_step: i32,
    mut on_step: impl FnMut(u64, u64),
) -> anyhow::Result<(i64, i64)> {
    let source =
        super::read::open(db).with_context(|| format!("opening the inbox {}", db.display()))?;
    // The read transaction that every step reads from. A step opens one of its own when
    // none is open and closes it after, and then the next one would see the service's new
    // commits and start the copy over: under steady traffic it might never finish.
    source.execute_batch("BEGIN")?;
    let events: i64 = source.query_row("SELECT count(*) FROM events", [], |r| r.get(0))?;
    let pages: i64 = source.query_row("PRAGMA page_count", [], |r| r.get(0))?;
    let mut target = rusqlite::Connection::open(dest)?;
    {
        let backup = Backup::new(&source, &mut target)?;
        let mut busy_since = None;
        loop {
            let step = backup.step(pages_per_step)?;
            let p = backup.progress();
            let count = |n: i32| u64::try_from(n).unwrap_or(0);
            on_step(count(p.pagecount - p.remaining), count(p.pagecount));
            match step {
                StepResult::Done => break,
                StepResult::More => busy_since = None,
                _busy_or_locked => {
                    let since = *busy_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > BUSY_FOR_AT_MOST {
                        bail!("the inbox stayed locked for {BUSY_FOR_AT_MOST:?}");
                    }
                    std::thread::sleep(BUSY_PAUSE);
                }
            }
        }
    }
    source.execute_batch("COMMIT")?;
    // The pages came from a WAL-mode file, header included; as a rollback-journal file the
    // copy needs no -wal beside it (serve switches it back to WAL when it opens it).
    let mode: String = target.query_row("PRAGMA journal_mode = DELETE", [], |r| r.get(0))?;
    if mode != "delete" {
        bail!("the copy stayed in journal mode {mode}");
    }
    // Page for page, the copy has the inbox's free pages too, and in them bytes of the
    // payloads retention dropped: rebuilt, it holds only what is live, compacted. This
    // works on the copy alone; serve never waits for it.
    target
        .execute_batch("VACUUM")
        .context("compacting the copy")?;
    target
        .close()
        .map_err(|(_, e)| e)
        .context("closing the copy")?;
    Ok((pages, events))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(conn: &rusqlite::Connection) -> i64 {
        conn.query_row("SELECT count(*) FROM events", [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn the_copy_is_the_snapshot_it_began_with_while_another_connection_writes() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("inbox.db");
        let writer = rusqlite::Connection::open(&db).unwrap();
        writer
            .execute_batch(
                "PRAGMA journal_mode = WAL;
                 CREATE TABLE events (id INTEGER PRIMARY KEY, body BLOB);",
            )
            .unwrap();
        let insert = "INSERT INTO events (body) VALUES (zeroblob(3000))";
        for _ in 0..200 {
            writer.execute(insert, []).unwrap();
        }
        let dest = dir.path().join("copy.db");
        std::fs::File::create_new(&dest).unwrap();
        // A commit between every two steps, as a busy serve makes them. Without the held
        // read transaction each one starts the copy over (and this would never end, hence
        // the bound).
        let mut seen = Vec::new();
        let (pages, events) = copy(&db, &dest, 8, |done, _| {
            seen.push(done);
            assert!(seen.len() < 10_000, "the copy keeps starting over");
            writer.execute(insert, []).unwrap();
        })
        .unwrap();
        assert!(seen.len() > 10, "{seen:?}");
        assert!(
            seen.windows(2).all(|w| w[0] < w[1]),
            "never started over: {seen:?}"
        );
        assert_eq!(seen.last(), Some(&u64::try_from(pages).unwrap()));
        assert_eq!(events, 200);
        let copy = super::super::read::open(&dest).unwrap();
        assert_eq!(
            count(&copy),
            200,
            "the rows committed before it began, no more"
        );
        let check: String = copy
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(check, "ok");
        let mode: String = copy
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "delete", "one self-contained file");
        assert_eq!(count(&writer), 200 + seen.len() as i64);
    }
}
