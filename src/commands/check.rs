//! `hookinbox check`: validates the configuration without starting anything, and prints
//! what `serve` would do with it.

use std::io::Write;
use std::path::Path;

use serde::Serialize;

use crate::config::{Config, Synchronous};
use crate::receive::HOOKS_PREFIX;
use crate::store;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print JSON instead of text (the exit code is the same)
    #[arg(long)]
    pub json: bool,
}

/// What `check` found: the JSON output, and what the text output prints.
#[derive(Debug, Serialize)]
struct Report {
    config: String,
    /// No problems: what `serve` would do works (warnings aside).
    ok: bool,
    listeners: Listeners,
    inbox: Inbox,
    sources: Vec<SourceReport>,
    /// The `[[alerts]]` targets.
    alerts: Vec<TargetReport>,
    warnings: Vec<String>,
    /// What would fail at run time (exit code 3).
    problems: Vec<String>,
}

#[derive(Debug, Serialize)]
struct Listeners {
    public: String,
    admin: String,
    tls: bool,
    /// Whether the web inbox may replay, pause and resume (`admin.actions`).
    web_actions: bool,
}

#[derive(Debug, Serialize)]
struct Inbox {
    /// The SQLite file, or the PostgreSQL URL.
    path: String,
    backend: &'static str,
    synchronous: &'static str,
}

#[derive(Debug, Serialize)]
struct SourceReport {
    name: String,
    scheme: &'static str,
    methods: Vec<&'static str>,
    path: String,
    /// Secrets configured (their values are never printed).
    secrets: usize,
    /// How the event id is found; null where the scheme has no rule of its own.
    event_id: Option<String>,
    /// `expect_every`, in words: silent after this long without an event.
    expect_every: Option<String>,
    /// What fills the source's gaps (`recover`), in words; null without it.
    recover: Option<String>,
    targets: Vec<TargetReport>,
}

#[derive(Debug, Serialize)]
struct TargetReport {
    name: String,
    /// `rate`, as written (`50/s`); null without a limit.
    rate: Option<String>,
    /// How many attempts the rate lets start at once.
    burst: Option<u32>,
    /// `"url": …`, `"command": […]` or `"postgres": "URL table NAME"`, as its kind
    /// describes it.
    #[serde(flatten)]
    to: serde_json::Map<String, serde_json::Value>,
    /// The same in words, for the text output: `url https://…`.
    #[serde(skip)]
    to_text: String,
}

/// "github repository octo/app hook 123 at https://api.github.com/, every 1h"
fn recover_line(r: &crate::config::Recover) -> String {
    use crate::config::{GitHubHook, RecoverApi};
    let what = match &r.api {
        RecoverApi::GitHub { hook, .. } => match hook {
            GitHubHook::Repo { repo, hook_id } => {
                format!("github: redeliveries of repository {repo}'s hook {hook_id}")
            }
            GitHubHook::Org { org, hook_id } => {
                format!("github: redeliveries of organisation {org}'s hook {hook_id}")
            }
            GitHubHook::App => "github: redeliveries of the App's hook".to_owned(),
        },
        RecoverApi::Stripe { types, .. } if types.is_empty() => "stripe: missing events".into(),
        RecoverApi::Stripe { types, .. } => {
            format!("stripe: missing events of {}", types.join(", "))
        }
    };
    format!(
        "{what} from {}, after each gap and every {}",
        r.base,
        humantime::format_duration(r.every)
    )
}

fn report(config: &Config) -> Report {
    let sources = config
        .sources
        .iter()
        .map(|s| SourceReport {
            name: s.name.clone(),
            scheme: s.scheme.name(),
            methods: s
                .scheme
                .verifier()
                .methods()
                .iter()
                .map(|m| m.as_str())
                .collect(),
            path: format!("{HOOKS_PREFIX}{}", s.name),
            secrets: s.secret_origins.len(),
            event_id: s.scheme.id_rule().map(|r| r.describe()),
            expect_every: s
                .expect_every
                .map(|d| humantime::format_duration(d).to_string()),
            recover: s.recover.as_ref().map(recover_line),
            targets: s.targets.iter().map(target_report).collect(),
        })
        .collect();
    let mut warnings = config.warnings();
    // The SQLite file's conversions; a PostgreSQL inbox migrates in its own database (a
    // file left behind by `migrate-store` is never opened again).
    let db = &config.store.path;
    if matches!(config.store.backend, crate::config::Backend::Sqlite)
        && let Some(conn) = db.exists().then(|| store::read::open(db).ok()).flatten()
    {
        warnings.extend(conversion_warning(&conn, db));
        warnings.extend(deliveries_rebuild_warning(&conn, db));
    }
    let problems = config.problems();
    Report {
        config: config.path.display().to_string(),
        ok: problems.is_empty(),
        listeners: Listeners {
            public: config.server.listen.to_string(),
            admin: config.admin.listen.to_string(),
            tls: config.server.tls.is_some(),
            web_actions: config.admin.actions,
        },
        inbox: match &config.store.backend {
            crate::config::Backend::Sqlite => Inbox {
                path: config.store.path.display().to_string(),
                backend: "sqlite",
                synchronous: match config.store.synchronous {
                    Synchronous::Full => "full",
                    Synchronous::Normal => "normal",
                },
            },
            crate::config::Backend::Postgres(pg) => Inbox {
                path: pg.url.clone(),
                backend: "postgres",
                synchronous: "synchronous_commit=on",
            },
        },
        sources,
        alerts: config.alerts.iter().map(target_report).collect(),
        warnings,
        problems,
    }
}

fn target_report(t: &crate::config::Target) -> TargetReport {
    let to = t.destination.describe();
    TargetReport {
        name: t.name.clone(),
        rate: t.rate.as_ref().map(|r| r.to_string()),
        burst: t.rate.as_ref().map(|r| r.burst()),
        to_text: format!("{} {}", to.key, to.text),
        to: [(to.key.to_owned(), to.json)].into_iter().collect(),
    }
}

fn target_line(t: &TargetReport) -> String {
    let what = t.to_text.clone();
    match (&t.rate, t.burst) {
        (Some(rate), Some(burst)) => format!("{what}  rate={rate} (at most {burst} at once)"),
        _ => what,
    }
}

/// Prints each source, its scheme, path and targets, then the warnings, then the problems
/// (an error when there are any); or all of it as JSON.
pub fn run(config: &Config, args: &Args, out: &mut impl Write) -> anyhow::Result<()> {
    let r = report(config);
    if args.json {
        crate::terminal::write_json(out, &r)?;
    } else {
        write_text(&r, out)?;
    }
    if r.ok {
        Ok(())
    } else {
        Err(Problems(r.problems.len()).into())
    }
}

/// `check --json` for a file that does not even load: the same `config` and `ok` keys, and
/// the error (also on stderr; the exit code is 3 either way).
pub fn write_load_error(
    path: &Path,
    error: &anyhow::Error,
    out: &mut impl Write,
) -> std::io::Result<()> {
    crate::terminal::write_json(
        out,
        &serde_json::json!({
            "config": path.display().to_string(),
            "ok": false,
            "error": format!("{error:#}"),
        }),
    )
}

fn write_text(r: &Report, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(out, "config {} parses and validates", r.config)?;
    writeln!(
        out,
        "  listen  {}  (admin and web inbox {}, {})",
        r.listeners.public,
        r.listeners.admin,
        if r.listeners.web_actions {
            "actions on"
        } else {
            "read-only"
        }
    )?;
    writeln!(
        out,
        "  inbox   {}  ({}, {})",
        r.inbox.path,
        r.inbox.backend,
        if r.inbox.backend == "sqlite" {
            format!("synchronous={}", r.inbox.synchronous)
        } else {
            r.inbox.synchronous.to_owned()
        }
    )?;
    for s in &r.sources {
        writeln!(
            out,
            "  source  {:<16} scheme={:<17} {} {}  secrets={}",
            s.name,
            s.scheme,
            s.methods.join(","),
            s.path,
            s.secrets
        )?;
        if let Some(rule) = &s.event_id {
            writeln!(out, "          event id {rule}")?;
        }
        if let Some(every) = &s.expect_every {
            writeln!(
                out,
                "          silent (an alert) after {every} without an event"
            )?;
        }
        if let Some(recover) = &s.recover {
            writeln!(out, "          recover {recover}")?;
        }
        for t in &s.targets {
            writeln!(out, "          target {:<10} {}", t.name, target_line(t))?;
        }
        if s.targets.is_empty() {
            writeln!(
                out,
                "          (no targets: events are stored, not forwarded)"
            )?;
        }
    }
    for t in &r.alerts {
        writeln!(out, "  alerts  {:<16} {}", t.name, target_line(t))?;
    }
    if r.alerts.is_empty() {
        writeln!(
            out,
            "  alerts  (no [[alerts]] targets: alerts are logged and shown in the web inbox)"
        )?;
    }
    for w in &r.warnings {
        writeln!(out, "warning: {w}")?;
    }
    for p in &r.problems {
        writeln!(out, "error: {p}")?;
    }
    Ok(())
}

/// `check` found what `serve` would only meet at run time (exit code 3).
#[derive(Debug, thiserror::Error)]
#[error("{0} problem(s) above would fail at run time; the file parses, but fix them first")]
pub struct Problems(pub usize);

/// What `serve` will do to an existing inbox at start-up that an operator should plan
/// for: a conversion that rewrites the whole file once.
fn conversion_warning(conn: &rusqlite::Connection, db: &Path) -> Option<String> {
    let (rewrite, version) = store::pending_rewrite(conn).ok()?;
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

/// The schema 7 rebuild of `deliveries` on an inbox large enough for it to take a while:
/// `serve` copies every delivery once before it listens.
fn deliveries_rebuild_warning(conn: &rusqlite::Connection, db: &Path) -> Option<String> {
    let rows = store::pending_deliveries_rebuild(conn).ok()??;
    if rows < REBUILD_WORTH_SAYING {
        return None;
    }
    let millions = rows as f64 / 1e6;
    Some(format!(
        "the inbox {} holds {rows} deliveries, which `serve` copies once when it next \
         starts (schema version {} drops the index of their idempotency keys): about {:.0} s, \
         with about {} MiB free for the copy at its peak (a third of it stays in the file, \
         given back to the file system a little at a time). Providers are not answered \
         until it is done (they retry): restart when traffic is low",
        db.display(),
        store::DELIVERIES_REBUILT_IN,
        (millions * REBUILD_SECONDS_PER_MILLION).ceil(),
        (rows as u64 * REBUILD_BYTES_PER_DELIVERY) / (1024 * 1024) + 1,
    ))
}

/// Below this many deliveries the rebuild takes about a second or less: not worth a
/// warning.
const REBUILD_WORTH_SAYING: i64 = 250_000;
/// What the rebuild took, measured on a 2-core VM with 1 million delivered deliveries (one
/// target): 3.6–5.6 s; at its peak the file and its WAL took 425 MB more than before with
/// hookinbox's SQLite, 672 MB with Debian's 3.40 (the new table and its indexes in the WAL,
/// more than once where the page cache spilled, then copied into the file beside the old
/// one's pages, which become free), and the file stayed 165–170 MB larger. The space asked
/// for is the larger peak.
const REBUILD_SECONDS_PER_MILLION: f64 = 6.0;
const REBUILD_BYTES_PER_DELIVERY: u64 = 700;

/// What the one-time rewrite took, measured on a 2-core VM with a 717 MiB inbox of 300,000
/// events (BENCHMARKS.md, "Disk: pruning, giving pages back, and the schema 2 conversion"):
/// 11–13 s, and at its peak the old file, the migration's copy and the WAL together used
/// 3.1 times the file's size, so about twice its size must be free beside it.
const REWRITE_SECONDS_PER_GIB: u64 = 25;
const REWRITE_SPACE_FACTOR: u64 = 2;
