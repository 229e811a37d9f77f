//! `hookinbox check`: validates the configuration without starting anything, and prints
//! what `serve` would do with it.

use std::io::Write;
use std::path::Path;

use serde::Serialize;

use crate::config::Config;
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
    inbox: store::Described,
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
    /// The certificate the public listener serves, from `server.tls.cert`.
    certificate: Option<crate::config::CertInfo>,
    /// With `[server.tls.acme]`: the names and the ACME server's directory.
    acme: Option<AcmeReport>,
    /// Whether the web inbox may replay, pause and resume (`admin.actions`).
    web_actions: bool,
}

#[derive(Debug, Serialize)]
struct AcmeReport {
    domains: Vec<String>,
    directory: String,
    /// `tls-alpn-01` on the public listener, or `http-01` on `http01_listen`.
    challenge: String,
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
    /// The only addresses requests are taken from (`allow_from`), each range as written
    /// and each provider's list with what it is and where it is fetched; null: any.
    allow_from: Option<Vec<String>>,
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

/// Each entry of `allow_from`, in words: a range as written, a provider's list as what it is.
fn allow_from_lines(allow: &crate::config::AllowFrom) -> Vec<String> {
    let ranges = allow.ranges.iter().map(|r| r.to_string());
    let lists = allow.lists.iter().map(|l| {
        let what = l.provider.addresses.as_ref().map_or("", |a| a.what);
        // Daily: `receive::allow::REFRESH`.
        format!(
            "{}: {what}, from {}, fetched at start-up and daily, kept in the inbox",
            l.name(),
            l.url,
        )
    });
    ranges.chain(lists).collect()
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
            allow_from: s.allow_from.as_ref().map(allow_from_lines),
            targets: s.targets.iter().map(target_report).collect(),
        })
        .collect();
    let mut warnings = config.warnings();
    let inbox = store::Location::of(&config.store);
    warnings.extend(inbox.upgrade_warnings());
    let problems = config.problems();
    Report {
        config: config.path.display().to_string(),
        ok: problems.is_empty(),
        listeners: Listeners {
            public: config.server.listen.to_string(),
            admin: config.admin.listen.to_string(),
            tls: config.server.tls.is_some() || config.server.acme.is_some(),
            acme: config.server.acme.as_ref().map(|a| AcmeReport {
                domains: a.domains.clone(),
                directory: a.directory.clone(),
                challenge: match a.http01_listen {
                    Some(addr) => format!("http-01 on {addr}"),
                    None => "tls-alpn-01 on the public listener".into(),
                },
            }),
            certificate: config
                .server
                .tls
                .as_ref()
                .and_then(|t| crate::config::CertInfo::of_pem_file(&t.cert).ok()),
            web_actions: config.admin.actions,
        },
        inbox: inbox.describe(),
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
        "  listen  {} {}  (admin and web inbox {}, {})",
        r.listeners.public,
        if r.listeners.tls { "HTTPS" } else { "HTTP" },
        r.listeners.admin,
        if r.listeners.web_actions {
            "actions on"
        } else {
            "read-only"
        }
    )?;
    if let Some(a) = &r.listeners.acme {
        writeln!(
            out,
            "  tls     by ACME for {} from {} ({}); `hookinbox show-cert` prints what is served",
            a.domains.join(", "),
            a.directory,
            a.challenge
        )?;
    }
    if let Some(c) = &r.listeners.certificate {
        // Validation read the pair with rustls, which refuses a key that is not the
        // certificate's.
        writeln!(
            out,
            "  tls     certificate for {}; issued by {}{}; {}; the key matches",
            if c.names.is_empty() {
                "no names (clients will refuse it)".to_owned()
            } else {
                c.names.join(", ")
            },
            c.issuer,
            if c.self_signed { " (self-signed)" } else { "" },
            c.expiry_in_words(crate::clock::unix_now())
        )?;
    }
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
        if let Some(allowed) = &s.allow_from {
            writeln!(
                out,
                "          allow from (403 for any other address, before the body is read):"
            )?;
            for entry in allowed {
                writeln!(out, "            {entry}")?;
            }
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
