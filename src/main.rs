//! The `hookinbox` binary: parse the command line, set up logging, dispatch.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use hookinbox::cli::LogFormat;
use tracing_subscriber::EnvFilter;

/// jemalloc, because it gives memory back: glibc's allocator kept every page a body flood
/// had touched (Cargo.toml says more).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = hookinbox::cli::Cli::parse();
    init_logging(cli.log_format);
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
