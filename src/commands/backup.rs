//! `hookinbox backup FILE`: a consistent copy of the inbox while `serve` runs.
//!
//! `VACUUM INTO` writes the snapshot of one read transaction (everything committed before
//! it began), compacted, from a read-only connection, so the service keeps writing
//! meanwhile. SQLite does not fsync that file, so we do, and then check it with
//! `PRAGMA integrity_check` before calling it a backup.

use std::io::Write;
use std::path::Path;

use anyhow::{Context as _, bail};

use crate::store;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where to write the copy; it must not exist yet
    #[arg(value_name = "FILE")]
    pub file: std::path::PathBuf,
}

pub fn run(db: &Path, args: &Args, out: &mut impl Write) -> anyhow::Result<()> {
    // Absolute, so that SQLite never reads a name like "file:x.db" as a URI, and the parent
    // directory (fsynced below) is never empty.
    let dest = &std::path::absolute(&args.file)
        .with_context(|| format!("resolving {}", args.file.display()))?;
    if dest.exists() {
        bail!(
            "{} already exists; name a new file (a backup never overwrites)",
            dest.display()
        );
    }
    let dest_text = dest
        .to_str()
        .with_context(|| format!("{} is not a UTF-8 path", dest.display()))?;
    let conn =
        store::read::open(db).with_context(|| format!("opening the inbox {}", db.display()))?;
    if let Err(e) = conn.execute("VACUUM INTO ?1", [dest_text]) {
        // An interrupted VACUUM INTO can leave a partial file; it is not a backup.
        let _ = std::fs::remove_file(dest);
        return Err(e).with_context(|| format!("writing the copy to {}", dest.display()));
    }
    drop(conn);
    std::fs::File::open(dest)
        .and_then(|f| f.sync_all())
        .with_context(|| format!("syncing {} to disk", dest.display()))?;
    if let Some(dir) = dest.parent().filter(|d| !d.as_os_str().is_empty()) {
        // The new directory entry must be durable too.
        std::fs::File::open(dir)
            .and_then(|f| f.sync_all())
            .with_context(|| format!("syncing the directory {}", dir.display()))?;
    }
    let copy = store::read::open(dest)?;
    let verdict: String = copy.query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
    if verdict != "ok" {
        bail!(
            "the copy at {} failed its integrity check: {verdict}",
            dest.display()
        );
    }
    let events: i64 = copy.query_row("SELECT count(*) FROM events", [], |r| r.get(0))?;
    let bytes = std::fs::metadata(dest)?.len();
    writeln!(
        out,
        "backed up {} to {} ({events} events, {bytes} bytes); integrity_check: ok",
        db.display(),
        dest.display()
    )?;
    writeln!(
        out,
        "to restore: stop hookinbox, copy it over the inbox file, remove the old -wal and -shm files, start"
    )?;
    Ok(())
}
