//! `hookinbox reload`: asks the running `serve` to reload its configuration (SIGHUP) and
//! waits for the answer, so that `systemctl reload hookinbox` fails when the reload was
//! refused instead of reporting success the moment the signal is sent.
//!
//! The answer travels through a small file (`inbox.db.reload` beside the inbox, or in the
//! unit's runtime directory under systemd, see [`path_for`]): `serve` writes it at start-up
//! and after every reload, with its PID, how many reloads it has
//! handled, and how the last one went. This command reads the count, signals, and waits
//! for the count to move. The PID comes from systemd (`--pid $MAINPID`) or from the
//! inbox's lock file, whose holder is by construction the serving process.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use crate::clock;
use crate::store::sqlite::lock;

/// How often the answer is looked for.
const POLL: Duration = Duration::from_millis(50);

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The serving process [default: the PID in the inbox's lock file]
    // 1 and up: kill(0) or kill(-n) would signal a whole process group.
    #[arg(long, value_name = "PID", value_parser = clap::value_parser!(i32).range(1..))]
    pub pid: Option<i32>,
    /// How long to wait for its answer
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = crate::config::parse_duration)]
    pub timeout: Duration,
}

/// What `serve` says about its reloads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    pub pid: u32,
    /// Reloads handled since start-up (0: none yet).
    pub reloads: u64,
    /// Whether the last one was applied (true at start-up).
    pub ok: bool,
    /// What happened, in words: the log line's gist.
    pub message: String,
    pub at: String,
}

/// Where `serve` writes its status: under systemd, in the unit's runtime directory
/// (`RuntimeDirectory=`, `$RUNTIME_DIRECTORY`, which the unit's ExecReload sees too), so
/// that it is found even when the edited file moved `store.path` (which only a restart
/// applies); elsewhere beside the inbox at `db` (`inbox.db.reload`).
pub fn path_for(db: &Path) -> PathBuf {
    if let Some(dirs) = std::env::var_os("RUNTIME_DIRECTORY")
        && let Some(dir) = std::env::split_paths(&dirs).next()
        && !dir.as_os_str().is_empty()
    {
        return dir.join("reload-status.json");
    }
    let mut p = db.as_os_str().to_owned();
    p.push(".reload");
    PathBuf::from(p)
}

/// Writes `status` for the inbox at `db`, replacing the file whole (a reader never sees
/// half of it).
pub fn write_status(db: &Path, status: &Status) -> std::io::Result<()> {
    let path = path_for(db);
    let mut tmp = path.clone().into_os_string();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, serde_json::to_vec(status)?)?;
    std::fs::rename(&tmp, &path)
}

/// `serve`'s status for the inbox at `db`, if it wrote one that parses.
pub fn read_status(db: &Path) -> Option<Status> {
    let bytes = std::fs::read(path_for(db)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

impl Status {
    pub fn new(reloads: u64, ok: bool, message: impl Into<String>) -> Status {
        Status {
            pid: std::process::id(),
            reloads,
            ok,
            message: message.into(),
            at: clock::iso_now(),
        }
    }
}

/// The answer was "refused": `systemctl reload` must fail.
#[derive(Debug, thiserror::Error)]
#[error("the reload was refused: {0}; the running configuration stays")]
pub struct Refused(pub String);

/// `config` is the file serve reloads from; `db` overrides the inbox it names.
pub fn run(
    config: &Path,
    db: Option<&Path>,
    args: &Args,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let found = match db {
        Some(db) => Ok(db.to_owned()),
        None => crate::config::inbox_path(config),
    };
    let db = match found {
        Ok(db) => db,
        // The file does not even parse as TOML, so serve will refuse it too. With its PID
        // known, it is still asked, so that its log and status say so as well.
        Err(e) => {
            let Some(pid) = args.pid else {
                return Err(e.context("cannot find the inbox of the running serve"));
            };
            signal(pid)?;
            return Err(Refused(format!("{e:#}")).into());
        }
    };
    let db = db.as_path();
    let pid = match args.pid {
        Some(pid) => pid,
        None => lock::holder(db)?,
    };
    // The count before, from this very process: a file left by an earlier serve counts
    // as none.
    let before = read_status(db)
        .filter(|s| i64::from(s.pid) == i64::from(pid))
        .map_or(0, |s| s.reloads);
    signal(pid)?;
    let deadline = Instant::now() + args.timeout;
    loop {
        if let Some(s) = read_status(db)
            && i64::from(s.pid) == i64::from(pid)
            && s.reloads > before
        {
            if s.ok {
                writeln!(out, "reloaded: {}", s.message)?;
                return Ok(());
            }
            return Err(Refused(s.message).into());
        }
        if Instant::now() >= deadline {
            anyhow::bail!(
                "serve (PID {pid}) did not report a reload in {} within {:?}; see its log \
                 (journalctl -u hookinbox). If the file's store.path changed, that takes a \
                 restart, and the answer went beside the inbox it started with",
                path_for(db).display(),
                args.timeout
            );
        }
        std::thread::sleep(POLL);
    }
}

fn signal(pid: i32) -> anyhow::Result<()> {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGHUP,
    )
    .with_context(|| format!("sending SIGHUP to PID {pid}"))
}
