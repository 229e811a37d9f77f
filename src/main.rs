//! The `hookinbox` binary: parse the command line, set up logging, dispatch.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use hookinbox::cli::LogFormat;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = hookinbox::cli::Cli::parse();
    init_logging(cli.log_format);
    abort_on_panic();
    hookinbox::failpoint::setup();
    hookinbox::cli::run(cli).into()
}

/// Logs go to stderr. Under systemd (`JOURNAL_STREAM` set), journald adds its own
/// timestamps and shows no colours, so neither is written. `RUST_LOG` overrides the level.
fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let journald = std::env::var_os("JOURNAL_STREAM").is_some();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(!journald && std::io::stderr().is_terminal());
    match (format, journald) {
        (LogFormat::Json, _) => builder.json().init(),
        (LogFormat::Text, true) => builder.without_time().init(),
        (LogFormat::Text, false) => builder.init(),
    }
}

/// Crash-only: a panic anywhere (a connection task, a delivery loop, the writer thread)
/// ends the process instead of leaving it half alive with a loop or the writer gone.
/// Everything acknowledged is already committed, leases bring claimed deliveries back, and
/// systemd's `Restart=on-failure` starts a whole process again.
fn abort_on_panic() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default(info);
        tracing::error!(%info, "panic; hookinbox stops (systemd restarts it)");
        std::process::abort();
    }));
}
