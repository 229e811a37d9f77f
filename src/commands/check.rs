//! `hookinbox check`: validates the configuration without starting anything, and prints
//! what `serve` would do with it.

use std::io::Write;

use crate::config::{Config, TargetKind};
use crate::receive::HOOKS_PREFIX;

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
        writeln!(
            out,
            "  source  {:<16} scheme={:<17} POST {HOOKS_PREFIX}{}  secrets={}",
            s.name,
            s.scheme.kind().name(),
            s.name,
            s.secret_origins.len()
        )?;
        for t in &s.targets {
            let what = match &t.kind {
                TargetKind::Url(url) => format!("url {url}"),
                TargetKind::Command(argv) => format!("command {argv:?}"),
            };
            writeln!(out, "          target {:<10} {what}", t.name)?;
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
