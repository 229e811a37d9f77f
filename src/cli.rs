//! The command line. `main.rs` parses it and calls [`run`]; every subcommand lives in
//! [`crate::commands`].

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::{commands, config};

/// hookinbox: a webhook front door. It verifies each delivery's signature, stores it durably
/// in a SQLite inbox before answering 2xx, and forwards it to your app.
#[derive(Debug, Parser)]
#[command(name = "hookinbox", version, about, long_about = None)]
#[command(
    after_help = "Start with:  hookinbox check --config examples/quickstart.toml\n\
                        Then:        hookinbox serve --config examples/quickstart.toml"
)]
pub struct Cli {
    /// The configuration file [default: /etc/hookinbox/hookinbox.toml if it exists, else
    /// ./hookinbox.toml]
    #[arg(
        long,
        short,
        global = true,
        env = "HOOKINBOX_CONFIG",
        value_name = "FILE"
    )]
    pub config: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Receive webhooks: verify, store durably, answer (runs until SIGTERM or SIGINT)
    Serve,
    /// Validate the configuration and print what `serve` would do, without starting
    Check,
    /// Print a correctly signed test request for a source (a curl command by default)
    ///
    /// Example: hookinbox sign --source demo | sh
    Sign {
        /// The configured source to sign for
        #[arg(long, value_name = "NAME")]
        source: String,
        /// The body to sign: a file, or - for stdin [default: a small JSON test event]
        #[arg(long, value_name = "FILE")]
        body: Option<PathBuf>,
        /// The event id, for schemes that carry it in a header [default: test_<unix nanoseconds>]
        #[arg(long)]
        id: Option<String>,
        /// What to print
        #[arg(long, value_enum, default_value_t = commands::sign::Format::Curl)]
        format: commands::sign::Format,
    },
}

/// Exit codes, the one place their numbers appear.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Success = 0,
    /// A runtime failure: the inbox cannot be opened, a port cannot be bound, …
    Failure = 1,
    /// Bad command-line usage (clap's own code).
    Usage = 2,
    /// The configuration file is missing or invalid.
    Config = 3,
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e as u8)
    }
}

/// Runs the parsed command line, printing errors as `error: {err:#}`.
pub fn run(cli: Cli) -> Exit {
    let path = cli.config.unwrap_or_else(config::default_path);
    let config = match config::load(&path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e:#}");
            return Exit::Config;
        }
    };
    let result = match cli.command {
        Command::Check => {
            commands::check::run(&config, &mut std::io::stdout().lock()).map_err(Into::into)
        }
        Command::Sign {
            source,
            body,
            id,
            format,
        } => commands::sign::run(
            &config,
            &source,
            body.as_deref(),
            id,
            format,
            &mut std::io::stdout().lock(),
        ),
        Command::Serve => {
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("error: starting the async runtime: {e}");
                    return Exit::Failure;
                }
            };
            runtime.block_on(commands::serve::run(config))
        }
    };
    match result {
        Ok(()) => Exit::Success,
        Err(e) => {
            eprintln!("error: {e:#}");
            Exit::Failure
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }
}
