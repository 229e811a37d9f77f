//! `hookinbox backup FILE`: a consistent copy of the inbox while `serve` runs, made by the
//! store ([`crate::store::sqlite::backup`]), with a progress line on a terminal.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context as _, bail};
use serde::Serialize;

use crate::store;
use crate::terminal::Progress;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where to write the copy; it must not exist yet
    #[arg(value_name = "FILE")]
    pub file: std::path::PathBuf,
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
}

/// What `backup` wrote: its text and JSON output.
#[derive(Debug, Serialize)]
struct Written {
    /// The inbox copied.
    inbox: String,
    /// The copy.
    path: String,
    bytes: u64,
    pages: i64,
    /// Events in the copy.
    events: i64,
    duration_ms: u128,
    /// `PRAGMA integrity_check` of the copy: "ok", or the problems it found.
    integrity_check: String,
}

pub fn run(db: &Path, args: &Args, out: &mut impl Write) -> anyhow::Result<()> {
    let started = Instant::now();
    // Absolute, so that SQLite never reads a name like "file:x.db" as a URI, and the parent
    // directory (fsynced below) is never empty.
    let dest = &std::path::absolute(&args.file)
        .with_context(|| format!("resolving {}", args.file.display()))?;
    // On a terminal, pages copied out of the snapshot's pages, on stderr.
    let mut progress = None;
    let copied = store::sqlite::backup::write(db, dest, |done, total| {
        progress
            .get_or_insert_with(|| Progress::new("copying pages", Some(total)))
            .set(done);
    });
    if let Some(p) = progress {
        p.finish();
    }
    let copied = copied?;
    let written = Written {
        inbox: db.display().to_string(),
        path: dest.display().to_string(),
        bytes: std::fs::metadata(dest)?.len(),
        pages: copied.pages,
        events: copied.events,
        duration_ms: started.elapsed().as_millis(),
        integrity_check: copied.integrity_check,
    };
    if args.json {
        crate::terminal::write_json(out, &written)?;
    } else if written.integrity_check == "ok" {
        writeln!(
            out,
            "backed up {} to {} ({} events, {} bytes); integrity_check: ok",
            written.inbox, written.path, written.events, written.bytes
        )?;
        writeln!(
            out,
            "to restore: stop hookinbox, copy it over the inbox file, remove the old -wal and -shm files, start"
        )?;
    }
    if written.integrity_check != "ok" {
        bail!(
            "the copy at {} failed its integrity check: {}",
            dest.display(),
            written.integrity_check
        );
    }
    Ok(())
}
