//! The command line. `main.rs` parses it and calls [`run`]; every subcommand lives in
//! [`crate::commands`].

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use crate::store::Location;
use crate::store::retention::Rule;
use crate::{commands, config};

/// The help heading of the options every subcommand takes.
const GLOBAL: &str = "Global options";

/// hookinbox: a webhook front door. It verifies each delivery's signature, stores it durably
/// in a SQLite inbox before answering 2xx, and forwards it to your app under one
/// idempotency key until the app accepts it.
#[derive(Debug, Parser)]
#[command(name = "hookinbox", version, about, long_about = None)]
#[command(
    after_help = "Start with:  hookinbox check --config examples/quickstart.toml\n\
                        Then:        hookinbox serve --config examples/quickstart.toml\n\
                        Exit codes:  0 ok, 1 failure, 2 bad usage, 3 bad config, 4 not found\n\
                        More:        each command's --help ends with examples; man hookinbox \
                        has the configuration reference"
)]
pub struct Cli {
    /// The configuration file [default: /etc/hookinbox/hookinbox.toml if it exists, else
    /// ./hookinbox.toml]
    // The global options sit under a heading of their own, so that each subcommand's
    // `--help` shows its own options first.
    #[arg(
        long,
        short,
        global = true,
        env = "HOOKINBOX_CONFIG",
        value_name = "FILE",
        help_heading = GLOBAL
    )]
    pub config: Option<PathBuf>,

    /// The inbox to inspect, replay, prune or back up, instead of the config's store.path
    #[arg(long, global = true, value_name = "FILE", help_heading = GLOBAL)]
    pub db: Option<PathBuf>,

    /// How logs are written to stderr
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, help_heading = GLOBAL)]
    pub log_format: LogFormat,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One line of text per event (without time and colour under journald)
    Text,
    /// One JSON object per line
    Json,
}

// Every subcommand's help ends with examples that work as written (the tests parse each
// one), in the `Examples:` form of `EXAMPLES_*` below.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Receive webhooks: verify, store durably, answer, forward (until SIGTERM or SIGINT;
    /// SIGHUP reloads the sources, secrets and targets)
    #[command(
        long_about = "Receive webhooks: verify, store durably, answer, forward (until \
        SIGTERM or SIGINT; SIGHUP reloads the sources, secrets and targets).\n\n\
        Under systemd socket activation (hookinbox.socket) it listens on the sockets systemd \
        passes: the one named \"public\" (FileDescriptorName=), or the only one, as the \
        public listener and the one named \"admin\" as the admin listener; server.listen or \
        admin.listen is bound only for a listener not passed."
    )]
    #[command(after_help = "Examples:\n  \
        hookinbox serve --config examples/quickstart.toml\n  \
        hookinbox serve --log-format json      # /etc/hookinbox/hookinbox.toml, as the unit runs it")]
    Serve,
    /// Validate the configuration and print what `serve` would do, without starting
    #[command(after_help = "Examples:\n  \
        hookinbox check --config examples/quickstart.toml\n  \
        hookinbox check --json | jq .warnings  # exit 3 when something would fail at run time")]
    Check(commands::check::Args),
    /// Print the certificate the public listener serves: its names, issuer, expiry and
    /// source (the files, or the one ACME obtained, as the inbox keeps it)
    #[command(after_help = "Examples:\n  \
        hookinbox show-cert --config /etc/hookinbox/hookinbox.toml")]
    ShowCert,
    /// Print a correctly signed test request for a source (a curl command by default)
    #[command(after_help = "Examples:\n  \
        hookinbox sign --source demo | sh       # sends it to this config's listener\n  \
        hookinbox sign --source demo --body event.json --format headers")]
    Sign(commands::sign::Args),
    /// Queue deliveries again under their idempotency keys: one event, every dead delivery,
    /// or those a filter chooses (state, time, event type, error); a running `serve` sends
    /// them within a second
    #[command(after_help = "Examples:\n  \
        hookinbox replay 42                     # every delivery of event 42\n  \
        hookinbox replay --dead --source stripe --target app --dry-run\n  \
        hookinbox replay --state dead --error timeout --since 1d")]
    Replay(commands::replay::Args),
    /// Hold a target's deliveries back: they stay pending, and are not attempted, until
    /// `resume` (kept in the inbox, so across restarts; attempts already running finish)
    #[command(after_help = "Examples:\n  \
        hookinbox pause stripe/app              # while the app is being migrated\n  \
        hookinbox pause stripe/app --json")]
    Pause(commands::pause::PauseArgs),
    /// Release a paused target: its pending deliveries go out in their order (a running
    /// `serve` notices within a second)
    #[command(after_help = "Examples:\n  \
        hookinbox resume stripe/app")]
    Resume(commands::pause::Args),
    /// Ask the running serve to reload its configuration, and wait for the answer (exit 1
    /// when it was refused; the unit's ExecReload)
    ///
    /// The same as SIGHUP, but it tells: `systemctl reload hookinbox` fails with the reason
    /// instead of reporting success the moment the signal is sent.
    #[command(after_help = "Examples:\n  \
        hookinbox reload --config /etc/hookinbox/hookinbox.toml\n  \
        hookinbox reload --timeout 90s          # wait up to 90s for the answer")]
    Reload(commands::reload::Args),
    /// Apply the retention windows now (serve does it every 10 minutes)
    #[command(after_help = "Examples:\n  \
        hookinbox prune --dry-run               # what would go, per source\n  \
        hookinbox prune --json --config /etc/hookinbox/hookinbox.toml")]
    Prune(commands::prune::Args),
    /// Write a consistent, checked copy of the inbox while serve runs
    #[command(after_help = "Examples:\n  \
        hookinbox backup /var/backups/hookinbox.db\n  \
        hookinbox backup --json --db /var/lib/hookinbox/inbox.db /var/backups/before-upgrade.db")]
    Backup(commands::backup::Args),
    /// Copy a stopped SQLite inbox into an empty PostgreSQL one (identities, payloads,
    /// deliveries, attempts, conflicts), check every table read back, and say what to change
    /// in the config
    #[command(after_help = "Examples:\n  \
        hookinbox migrate-store --to postgres://hookinbox@db.internal/hookinbox --password file:/etc/hookinbox/secrets/pg\n  \
        hookinbox migrate-store --db /var/lib/hookinbox/inbox.db --to postgres://hookinbox@127.0.0.1/hookinbox --json")]
    MigrateStore(commands::migrate_store::Args),
    /// List stored events, newest first, with what became of their deliveries (--follow:
    /// then each new one as it is stored, like `tail -f`)
    #[command(after_help = "Examples:\n  \
        hookinbox events --status dead --since 1d\n  \
        hookinbox events --source stripe --limit 500 --json\n  \
        hookinbox events --follow --source stripe")]
    Events(commands::events::Args),
    /// Show one event: identity, headers, body, and every delivery with every attempt
    #[command(after_help = "Examples:\n  \
        hookinbox show 42                       # 42: the ID column of hookinbox events\n  \
        hookinbox show evt_1NXWPE2eZvKYlo2C --source stripe --body > body.json")]
    Show(commands::show::Args),
    /// List conflicts (same event id, different bytes: quarantined, never forwarded)
    #[command(after_help = "Examples:\n  \
        hookinbox conflicts --source stripe\n  \
        hookinbox conflicts --json")]
    Conflicts(commands::conflicts::Args),
    /// List dead deliveries (a target gave up), newest first: the candidates for replay
    #[command(after_help = "Examples:\n  \
        hookinbox dead --source stripe --target app\n  \
        hookinbox replay --delivery 57          # one of them again, by its DELIVERY id")]
    Dead(commands::dead::Args),
    /// List the windows in which a source was not receiving: serve down (found at its next
    /// start), or refusing every request the source sent (401, 503); and what recovery did
    #[command(after_help = "Examples:\n  \
        hookinbox gaps                          # the last 30 days\n  \
        hookinbox gaps --source github --since 7d --json")]
    Gaps(commands::gaps::Args),
    /// Ask a source's provider for what it sent in a window and fill what the inbox lacks:
    /// GitHub redelivers it (signed, to the running serve), Stripe's events are stored with
    /// origin api. Prints the plan first; running it twice asks for nothing more
    #[command(after_help = "Examples:\n  \
        hookinbox recover --source github --since 6h --dry-run\n  \
        hookinbox recover --source stripe --since 2026-11-30T07:00:00Z --until 2026-11-30T09:00:00Z")]
    Recover(commands::recover::Args),
    /// Open a source's window for a handshake that hands over its secret (Asana): the first
    /// one within it is trusted and stored, any other refused
    #[command(after_help = "Examples:\n  \
        hookinbox arm --source asana            # then create the webhook at Asana\n  \
        hookinbox arm --source asana --for 30m")]
    Arm(commands::arm::Args),
    /// Make a test key pair for a scheme verified with public keys (Discord, SendGrid,
    /// Standard Webhooks v1a), to try a source with `sign --signing-key`
    #[command(after_help = "Examples:\n  \
        hookinbox keypair --scheme discord --out test  # test.pub for secrets, test.key\n  \
        hookinbox sign --source discord --signing-key file:test.key | sh")]
    Keypair(commands::keypair::Args),
    /// Write the man page and shell completions (for packaging)
    #[command(
        hide = true,
        after_help = "Examples:\n  \
        hookinbox generate --out-dir target/assets   # as packaging/build-deb.sh runs it"
    )]
    Generate {
        /// Where to write hookinbox.1, hookinbox.bash, _hookinbox and hookinbox.fish
        #[arg(long, value_name = "DIR")]
        out_dir: PathBuf,
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
    /// The configuration file is missing or invalid, or systemd passed a socket that
    /// `serve` cannot use: restarting cannot mend either (the unit's
    /// RestartPreventExitStatus).
    Config = 3,
    /// What was asked for is not in the inbox (`show`, `replay` of an unknown event).
    NotFound = 4,
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e as u8)
    }
}

/// Runs the parsed command line, printing errors as `error: {err:#}`.
pub fn run(cli: Cli) -> Exit {
    let path = cli.config.clone().unwrap_or_else(config::default_path);
    // A global option, so clap takes it everywhere; these would silently use the config's
    // store.path instead.
    if cli.db.is_some() {
        let ignores = match &cli.command {
            Command::Serve => Some(("serve", "uses the config's [store] (pass --config FILE)")),
            Command::Check(_) => {
                Some(("check", "checks the config's [store] (pass --config FILE)"))
            }
            Command::ShowCert => Some(("show-cert", "reads the config's [store]")),
            Command::Sign(_) => Some(("sign", "opens no inbox")),
            Command::Keypair(_) => Some(("keypair", "opens no inbox")),
            Command::Generate { .. } => Some(("generate", "opens no inbox")),
            _ => None,
        };
        if let Some((name, instead)) = ignores {
            eprintln!(
                "error: {name} takes no --db: it is for the commands that read or change an \
                 inbox (events, show, replay, prune, backup, …), and {name} {instead}"
            );
            return Exit::Usage;
        }
    }
    let result = match &cli.command {
        Command::Generate { out_dir } => commands::generate::run(
            <Cli as clap::CommandFactory>::command(),
            out_dir,
            &mut std::io::stdout().lock(),
        ),
        Command::Keypair(args) => commands::keypair::run(args, &mut std::io::stdout().lock()),
        // Reload must work while the file is broken: that is when it must say "refused".
        Command::Reload(args) => commands::reload::run(
            &path,
            cli.db.as_deref(),
            args,
            &mut std::io::stdout().lock(),
        ),
        Command::Serve
        | Command::Check(_)
        | Command::ShowCert
        | Command::Sign(_)
        | Command::Recover(_) => {
            let purpose = match &cli.command {
                Command::Check(_) | Command::ShowCert => config::Purpose::Check,
                // Only the named source's secrets: its API key is one of them, and the
                // others may be systemd credentials this shell cannot read.
                Command::Sign(commands::sign::Args { source, .. })
                | Command::Recover(commands::recover::Args { source, .. }) => {
                    config::Purpose::Sign(source)
                }
                _ => config::Purpose::Serve,
            };
            let config = match config::load_for(&path, purpose) {
                Ok(c) => c,
                Err(e) => {
                    if let Command::Check(commands::check::Args { json: true }) = &cli.command {
                        // A script reading `check --json` gets its answer on stdout too.
                        let _ = commands::check::write_load_error(
                            &path,
                            &e,
                            &mut std::io::stdout().lock(),
                        );
                    }
                    eprintln!("error: {e:#}");
                    return Exit::Config;
                }
            };
            with_config(config, cli.db.clone(), cli.command)
        }
        _ => {
            // The operator commands read the config without the sources' secrets (a
            // PostgreSQL inbox's password only), or need none.
            let offline = match (&cli.db, config::load_offline(&path)) {
                (_, Ok(o)) => Ok(o),
                // --db names the inbox; only prune still needs the config.
                (Some(_), Err(e)) => Err(e),
                (None, Err(e)) => {
                    eprintln!("error: {e:#}");
                    return Exit::Config;
                }
            };
            let db = cli
                .db
                .clone()
                .or_else(|| offline.as_ref().ok().map(|o| o.store.path.clone()))
                .expect("one of the two is set");
            if let (Command::Prune(_), Err(e)) = (&cli.command, &offline) {
                // --db was given: it chooses the inbox, not the windows.
                match e.downcast_ref::<config::Unreadable>() {
                    Some(u) => eprintln!(
                        "error: prune needs the config's retention windows (keep_payload, \
                         keep_identity), and cannot read config file {}: {}; pass --config FILE \
                         (with --db FILE to prune another copy of the inbox)",
                        u.path.display(),
                        u.error
                    ),
                    None => eprintln!("error: prune needs the config's retention windows: {e:#}"),
                }
                return Exit::Config;
            }
            offline_command(&db, cli.db.is_some(), offline.as_ref().ok(), &cli.command)
        }
    };
    match result {
        Ok(()) => Exit::Success,
        // `hookinbox events | head` closes the pipe early: that is the reader's choice, not
        // a failure.
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            Exit::Success
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            if e.is::<commands::NotFound>() {
                Exit::NotFound
            } else if e.is::<commands::check::Problems>() || e.is::<crate::activation::Error>() {
                Exit::Config
            } else {
                Exit::Failure
            }
        }
    }
}

fn with_config(
    config: config::Config,
    db: Option<PathBuf>,
    command: Command,
) -> anyhow::Result<()> {
    let out = &mut std::io::stdout().lock();
    match command {
        Command::Recover(args) => {
            // --db names a SQLite inbox as for the other operator commands.
            let inbox = match db {
                Some(db) => Location::file(db),
                None => Location::of(&config.store),
            };
            commands::recover::run(config, &inbox, &args, out)
        }
        Command::Check(args) => commands::check::run(&config, &args, out),
        Command::ShowCert => commands::show_cert::run(&config, out),
        Command::Sign(args) => commands::sign::run(&config, &args, out),
        Command::Serve => {
            commands::serve::abort_on_panic();
            // Before the runtime's threads: taking the sockets unsets LISTEN_FDS.
            let inherited = crate::activation::Inherited::from_env()?;
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            // The writer has a thread of its own: leave it a core. On a 2-core VM one async
            // worker and the writer measured 11% less CPU per stored event than two workers
            // contending with it (BENCHMARKS.md). TOKIO_WORKER_THREADS still overrides.
            if std::env::var_os("TOKIO_WORKER_THREADS").is_none() {
                let cores = std::thread::available_parallelism().map_or(1, usize::from);
                builder.worker_threads(cores.saturating_sub(1).max(1));
            }
            let runtime = builder
                .enable_all()
                .build()
                .map_err(|e| anyhow::anyhow!("starting the async runtime: {e}"))?;
            runtime.block_on(commands::serve::run(config, inherited))
        }
        _ => unreachable!("offline commands are dispatched by offline_command"),
    }
}

/// On stderr, before a read command's table: see [`commands::unconfigured_names`].
fn warn_unconfigured(
    offline: Option<&config::Offline>,
    source: Option<&str>,
    target: Option<&str>,
) {
    if let Some(warning) = commands::unconfigured_names(offline, source, target) {
        eprintln!("warning: {warning}");
    }
}

/// `db` is the SQLite inbox that `--db` (`given`) or the config names.
fn offline_command(
    db: &Path,
    given: bool,
    offline: Option<&config::Offline>,
    command: &Command,
) -> anyhow::Result<()> {
    let out = &mut std::io::stdout().lock();
    // `--db FILE` names a SQLite inbox; otherwise the config says where the inbox is.
    let inbox = match offline {
        Some(offline) if !given => Location::of(&offline.store),
        _ => Location::file(db.to_owned()),
    };
    if inbox.missing() {
        let hint = if matches!(command, Command::MigrateStore(_)) {
            ""
        } else {
            " (serve creates it)"
        };
        anyhow::bail!(
            "no inbox at {}; is --config or --db right?{hint}",
            inbox.name()
        );
    }
    if let Command::MigrateStore(args) = command {
        let db = inbox.sqlite_only(
            "migrate-store",
            "it copies a SQLite inbox into PostgreSQL; name the SQLite file with --db FILE",
        )?;
        return commands::migrate_store::run(db, args, out);
    }
    match command {
        Command::Replay(args) => commands::replay::run(&inbox, offline, args, out),
        Command::Pause(args) => {
            commands::pause::run(&inbox, offline, true, &args.which, args.by.as_deref(), out)
        }
        Command::Resume(args) => commands::pause::run(&inbox, offline, false, args, None, out),
        Command::Arm(args) => commands::arm::run(&inbox, offline, args, out),
        Command::Prune(args) => {
            let Some(offline) = offline else {
                anyhow::bail!("prune needs the config's retention windows: pass --config");
            };
            let rules: Vec<Rule> = offline
                .sources
                .iter()
                .map(|s| Rule {
                    source: s.name.clone(),
                    keep_payload: s.keep_payload,
                    keep_identity: s.keep_identity,
                })
                .collect();
            commands::prune::run(&inbox, &rules, args, out)
        }
        Command::Backup(args) => {
            let db = inbox.sqlite_only(
                "backup",
                "back it up with PostgreSQL's own tools (pg_dump, or a base backup and WAL \
                 archiving for point-in-time recovery)",
            )?;
            commands::backup::run(db, args, out)
        }
        Command::Events(args) => {
            warn_unconfigured(offline, args.source.as_deref(), None);
            commands::events::run(&inbox, args, out)
        }
        Command::Show(args) => {
            // `show --body` writes the raw bytes unless stdout is a terminal; decided here so
            // that `show::run` stays testable both ways.
            let args = commands::show::Args {
                terminal: std::io::stdout().is_terminal(),
                ..args.clone()
            };
            commands::show::run(&inbox, &args, out)
        }
        Command::Conflicts(args) => {
            warn_unconfigured(offline, args.source.as_deref(), None);
            commands::conflicts::run(&inbox, args, out)
        }
        Command::Dead(args) => {
            warn_unconfigured(offline, args.source.as_deref(), args.target.as_deref());
            commands::dead::run(&inbox, args, out)
        }
        Command::Gaps(args) => {
            warn_unconfigured(offline, args.source.as_deref(), None);
            commands::gaps::run(&inbox, args, out)
        }
        Command::Serve
        | Command::MigrateStore(_)
        | Command::Recover(_)
        | Command::Check(_)
        | Command::ShowCert
        | Command::Sign(_)
        | Command::Generate { .. }
        | Command::Keypair(_)
        | Command::Reload(_) => {
            unreachable!("dispatched by run")
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

    #[test]
    fn every_subcommand_ends_its_help_with_examples_that_parse() {
        for sub in Cli::command().get_subcommands() {
            let name = sub.get_name();
            let after = sub.get_after_help().map(|h| h.to_string());
            let after = after.unwrap_or_default();
            let mut lines = after.lines();
            assert_eq!(lines.next(), Some("Examples:"), "{name}");
            let mut examples = 0;
            for line in lines {
                // The command, without its comment and what the shell does with its output.
                let command = line.split(" #").next().unwrap();
                let words: Vec<&str> = command
                    .split_whitespace()
                    .take_while(|w| !matches!(*w, "|" | ">"))
                    .collect();
                assert_eq!(words.first(), Some(&"hookinbox"), "{name}: {line:?}");
                if let Err(e) = Cli::try_parse_from(&words) {
                    panic!("{name}: the example {line:?} does not parse: {e}");
                }
                examples += 1;
            }
            assert!(examples >= 1, "{name}");
        }
    }
}
