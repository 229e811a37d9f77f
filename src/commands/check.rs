//! `hookinbox check`: validates the configuration without starting anything, and prints
//! what `serve` would do with it.

use std::io::Write;
use std::path::Path;

use crate::config::{Config, TargetKind};
use crate::receive::HOOKS_PREFIX;
use crate::store;

/// Prints each source, its scheme, path and targets, then the warnings, then the problems
/// (an error when there are any).
pub fn run(config: &Config, out: &mut impl Write) -> anyhow::Result<()> {
    writeln!(out, "config {} parses and validates", config.path.display())?;
    writeln!(
        out,
        "  listen  {}  (admin {})",
        config.server.listen, config.admin.listen
    )?;
    writeln!(
        out,
        "  inbox   {}  (synchronous={:?})",
        config.store.path.display(),
        config.store.synchronous
    )?;
    for s in &config.sources {
        let methods: Vec<&str> = s
            .scheme
            .verifier()
            .methods()
            .iter()
            .map(|m| m.as_str())
            .collect();
        writeln!(
            out,
            "  source  {:<16} scheme={:<17} {} {HOOKS_PREFIX}{}  secrets={}",
            s.name,
            s.scheme.name(),
            methods.join(","),
            s.name,
            s.secret_origins.len()
        )?;
        if let Some(rule) = s.scheme.id_rule() {
            writeln!(out, "          event id {}", rule.describe())?;
        }
        for t in &s.targets {
            let what = match &t.kind {
                TargetKind::Url(url) => format!("url {url}"),
                TargetKind::Command(argv) => format!("command {argv:?}"),
            };
            let rate = match &t.rate {
                Some(r) => format!("  rate={r} (at most {} at once)", r.burst()),
                None => String::new(),
            };
            writeln!(out, "          target {:<10} {what}{rate}", t.name)?;
        }
        if s.targets.is_empty() {
            writeln!(
                out,
                "          (no targets: events are stored, not forwarded)"
            )?;
        }
    }
    let warnings = config.warnings();
    for w in &warnings {
        writeln!(out, "warning: {w}")?;
    }
    if let Some(w) = conversion_warning(&config.store.path) {
        writeln!(out, "warning: {w}")?;
    }
    let problems = config.problems();
    for p in &problems {
        writeln!(out, "error: {p}")?;
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(Problems(problems.len()).into())
    }
}

/// `check` found what `serve` would only meet at run time (exit code 3).
#[derive(Debug, thiserror::Error)]
#[error("{0} problem(s) above would fail at run time; the file parses, but fix them first")]
pub struct Problems(pub usize);

/// What `serve` will do to an existing inbox at start-up that an operator should plan
/// for: a conversion that rewrites the whole file once.
fn conversion_warning(db: &Path) -> Option<String> {
    let conn = db.exists().then(|| store::read::open(db).ok()).flatten()?;
    let (rewrite, version) = store::pending_rewrite(&conn).ok()?;
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
        store::schema_version(),
        mib(size) * REWRITE_SPACE_FACTOR + 1,
    ))
}

/// What the one-time rewrite took, measured on a 2-core VM with a 717 MiB inbox of 300,000
/// events (BENCHMARKS.md, "Disk: pruning, giving pages back, and the schema 2 conversion"):
/// 11–13 s, and at its peak the old file, the migration's copy and the WAL together used
/// 3.1 times the file's size, so about twice its size must be free beside it.
const REWRITE_SECONDS_PER_GIB: u64 = 25;
const REWRITE_SPACE_FACTOR: u64 = 2;
