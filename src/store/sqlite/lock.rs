//! One `serve` per inbox: an exclusive `flock` on a file beside it, taken before the inbox
//! is opened and held until the process ends.
//!
//! Two writers on one inbox would each believe their own group commit, readiness and
//! retention; SQLite would keep the file consistent, but every write would contend for
//! the lock and an operator would not know which process answered. `flock` is released by
//! the kernel when the holder exits, however it exits, so a SIGKILLed process never leaves
//! a stale lock behind (the file stays; the lock does not). The holder writes its PID into
//! the file so that the second process can say who holds it. The CLI's readers and its
//! short write transactions (`replay`, `prune`) do not take it.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// The lock file of the inbox at `db`: `inbox.db` → `inbox.db.lock`.
pub fn path_for(db: &Path) -> PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push(".lock");
    PathBuf::from(p)
}

/// Held while this process serves the inbox; dropping it releases the lock.
#[derive(Debug)]
pub struct InboxLock {
    _file: File,
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "the inbox {db} is already served by another `hookinbox serve`{holder} (it holds the \
         lock on {lock}); stop that one first, or give this one its own store.path"
    )]
    Held {
        db: String,
        lock: String,
        /// " (PID 1234)", or empty when the holder has not written it yet.
        holder: String,
    },
    #[error("cannot lock the inbox: {path}: {error}")]
    Io { path: String, error: std::io::Error },
}

impl InboxLock {
    /// Takes the lock for the inbox at `db` without waiting.
    pub fn acquire(db: &Path) -> Result<InboxLock, LockError> {
        let lock = path_for(db);
        let io = |error| LockError::Io {
            path: lock.display().to_string(),
            error,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock)
            .map_err(io)?;
        // `hookinbox reload` takes a shared lock for an instant to see whether a serve
        // holds it; a serve starting in that instant tries once more before giving up.
        let mut locked = file.try_lock();
        if matches!(locked, Err(TryLockError::WouldBlock)) {
            std::thread::sleep(std::time::Duration::from_millis(200));
            locked = file.try_lock();
        }
        match locked {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                let holder = match text.trim().parse::<u32>() {
                    Ok(pid) => format!(" (PID {pid})"),
                    Err(_) => String::new(),
                };
                return Err(LockError::Held {
                    db: db.display().to_string(),
                    lock: lock.display().to_string(),
                    holder,
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        Ok(InboxLock { _file: file })
    }
}

/// The PID of the `serve` that holds the inbox's lock, or an error saying none does.
pub fn holder(db: &Path) -> anyhow::Result<i32> {
    let lock_path = path_for(db);
    let none = || {
        anyhow::anyhow!(
            "no hookinbox serve is running on the inbox {} (nobody holds {}); start it \
             instead",
            db.display(),
            lock_path.display()
        )
    };
    let file = std::fs::File::open(&lock_path).map_err(|_| none())?;
    // A shared lock is refused only while a serve holds its exclusive one.
    match file.try_lock_shared() {
        Ok(()) => return Err(none()),
        Err(std::fs::TryLockError::WouldBlock) => {}
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(e).with_context(|| format!("reading {}", lock_path.display()));
        }
    }
    let text = std::fs::read_to_string(&lock_path)
        .with_context(|| format!("reading {}", lock_path.display()))?;
    text.trim()
        .parse::<i32>()
        .ok()
        .filter(|pid| *pid > 0)
        .with_context(|| format!("{} does not hold a PID yet; try again", lock_path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_with_the_first_ones_pid_and_a_dropped_lock_frees_it() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("inbox.db");
        let first = InboxLock::acquire(&db).unwrap();
        let err = InboxLock::acquire(&db).unwrap_err().to_string();
        assert!(
            err.contains(&format!("PID {}", std::process::id()))
                && err.contains(&db.display().to_string()),
            "{err}"
        );
        drop(first);
        InboxLock::acquire(&db).unwrap();
    }
}
