//! `hookinbox recover`: asks a source's provider for what it sent in a window, and fills
//! what the inbox lacks: GitHub redelivers the missing deliveries (signed, through the
//! running serve), Stripe's missing events are stored with origin `api`. Prints the plan
//! first; `--dry-run` stops there. Running it twice asks for nothing more.
//!
//! It writes to the inbox beside a running serve (short transactions, as `replay` does);
//! the redeliveries it asks for need serve to be receiving.

use std::io::Write;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use serde::Serialize;

use crate::clock;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::recover::{self, Item, RecoveryPlan, Window};
use crate::scheme::providers;
use crate::store;
use crate::terminal::{Progress, Table};

/// Events listed in the text output; `--json` lists every one.
const LISTED: usize = 50;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The source to recover (it needs a `recover` table in the config)
    #[arg(long, value_name = "NAME")]
    pub source: String,
    /// The window's start: RFC 3339, or a duration ago like 6h
    #[arg(long, value_name = "TIME", value_parser = crate::clock::parse_time_arg)]
    pub since: String,
    /// The window's end (same forms as --since) [default: now]
    #[arg(long, value_name = "TIME", value_parser = crate::clock::parse_time_arg)]
    pub until: Option<String>,
    /// Print what is missing and what would be asked for or stored; change nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
struct Report {
    plan: RecoveryPlan,
    dry_run: bool,
    done: Option<recover::Done>,
}

pub fn run(
    config: Config,
    place: &store::Location,
    args: &Args,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let path = config.path.clone();
    // Owned, to share with the API client.
    let source = config
        .sources
        .into_iter()
        .find(|s| s.name == args.source)
        .map(Arc::new)
        .ok_or_else(|| {
            super::NotFound(format!("no source {:?} in {}", args.source, path.display()))
        })?;
    if source.recover.is_none() {
        if source.scheme.provider().recovery.is_some() {
            anyhow::bail!(
                "source {:?} has no recover table: add recover = {{ api = \"{}\", … }} to it \
                 (man hookinbox, [sources.recover])",
                source.name,
                source.scheme.name()
            );
        }
        anyhow::bail!(
            "source {:?} cannot be recovered: hookinbox reads missed events only from the APIs \
             of {} sources, and its scheme is {:?}; ask the provider to redeliver them (most \
             have a button or an API for it), and `hookinbox gaps` shows when it was down",
            source.name,
            providers::names_with(|p| p.recovery.is_some()).join(" and "),
            source.scheme.name()
        );
    }
    let time = |flag: &str, text: &str| -> anyhow::Result<i64> {
        let iso = clock::parse_time_arg(text).map_err(|e| anyhow::anyhow!("{flag}: {e}"))?;
        clock::unix_from_iso(&iso).ok_or_else(|| anyhow::anyhow!("{flag}: {text:?}"))
    };
    let window = Window {
        from: time("--since", &args.since)?,
        until: match &args.until {
            Some(t) => time("--until", t)?,
            None => clock::unix_now(),
        },
    };
    if window.from > window.until {
        anyhow::bail!("--since is after --until: nothing to recover");
    }
    let metrics = Arc::new(Metrics::new());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    runtime.block_on(async {
        // Serve's store, here for this command alone: on SQLite a writer of its own beside
        // a running serve, on PostgreSQL batchers as a replica's.
        let (inbox, _held) = place.for_command(metrics.clone()).await?;
        let api = recover::api_for(&source, metrics.clone())?;
        let plan = recover::plan(api.as_ref(), &source, window, &inbox)
            .await
            .with_context(|| {
                format!("listing what {} holds; nothing was changed", api.provider())
            })?;
        if !args.json {
            print_plan(&plan, args.dry_run, out)?;
        }
        let done = if args.dry_run || plan.nothing_to_do() {
            None
        } else {
            let total = (plan.redeliver.len() + plan.store.len()) as u64;
            let what = if plan.store.is_empty() {
                "asking for redeliveries"
            } else {
                "storing events"
            };
            let progress = Mutex::new((Progress::new(what, Some(total)), 0u64));
            let step = || {
                let mut p = progress.lock().expect("no panics while holding the lock");
                p.1 += 1;
                let n = p.1;
                p.0.set(n);
            };
            let done = recover::carry_out(&api, &source, &plan, &inbox, &metrics, &step).await;
            progress
                .into_inner()
                .expect("no panics while holding the lock")
                .0
                .finish();
            Some(done)
        };
        // Gaps that lie inside the window are now recovered (also when nothing was
        // missing); not after a dry run, nor when something failed.
        let recovered = match &done {
            Some(done) => done.errors.is_empty().then(|| done.summary(&plan)),
            None if !args.dry_run => Some(recover::Done::default().summary(&plan)),
            None => None,
        };
        if let Some(summary) = recovered {
            let (name, from, until) = (
                source.name.clone(),
                clock::iso_from_unix(window.from),
                clock::iso_from_unix(window.until),
            );
            inbox
                .change(move |db, now| {
                    let ids: Vec<i64> = store::gaps::list(db, &from, Some(&name))?
                        .into_iter()
                        .filter(|g| g.started_at >= from && g.ended_at <= until)
                        .map(|g| g.id)
                        .collect();
                    store::gaps::recovered(db, &ids, &summary, now)
                })
                .await?;
        }
        let errors = done.as_ref().map_or(0, |d| d.errors.len());
        if args.json {
            crate::terminal::write_json(
                out,
                &Report {
                    plan,
                    dry_run: args.dry_run,
                    done,
                },
            )?;
        } else if let Some(done) = &done {
            print_done(&plan, done, out)?;
        }
        if errors > 0 {
            anyhow::bail!(
                "{errors} of the plan's events failed (see above); run it again to retry them"
            );
        }
        Ok(())
    })
}

fn print_plan(plan: &RecoveryPlan, dry_run: bool, out: &mut impl Write) -> anyhow::Result<()> {
    writeln!(
        out,
        "{} ({}), {} to {}: {} listed, {} already in the inbox",
        crate::terminal::escape(&plan.source),
        plan.provider,
        plan.from,
        plan.until,
        plan.listed,
        plan.in_inbox
    )?;
    let (ask, store) = if dry_run {
        ("would ask for a redelivery of", "would store")
    } else {
        ("asking for a redelivery of", "storing")
    };
    section(
        out,
        &format!("{ask} {} deliveries", plan.redeliver.len()),
        &plan.redeliver,
    )?;
    section(
        out,
        &format!("{store} {} events with origin api", plan.store.len()),
        &plan.store,
    )?;
    section(
        out,
        &format!(
            "{} redeliveries asked for before, on their way (not asked again)",
            plan.waiting.len()
        ),
        &plan.waiting,
    )?;
    section(
        out,
        &format!(
            "{} asked for {} times without arriving (not asked again; see the provider's \
             delivery log)",
            plan.given_up.len(),
            recover::MAX_ASKS
        ),
        &plan.given_up,
    )?;
    if plan.nothing_to_do() {
        writeln!(out, "nothing is missing")?;
    }
    Ok(())
}

fn section(out: &mut impl Write, title: &str, items: &[Item]) -> anyhow::Result<()> {
    if items.is_empty() {
        return Ok(());
    }
    writeln!(out, "{title}:")?;
    let mut table = Table::new(&["event id", "at", "type", "provider says"]);
    for i in items.iter().take(LISTED) {
        table.row([
            i.event_id.as_str(),
            i.at.as_str(),
            i.event_type.as_deref().unwrap_or("-"),
            i.status.as_str(),
        ]);
    }
    table.write(out)?;
    if items.len() > LISTED {
        writeln!(
            out,
            "… and {} more (--json lists every one)",
            items.len() - LISTED
        )?;
    }
    Ok(())
}

fn print_done(
    plan: &RecoveryPlan,
    done: &recover::Done,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    writeln!(out, "{}", done.summary(plan))?;
    if done.redeliveries_asked > 0 {
        writeln!(
            out,
            "the redeliveries arrive signed at /hooks/{} of the running serve",
            crate::terminal::escape(&plan.source)
        )?;
    }
    for e in &done.errors {
        writeln!(out, "failed: {}", crate::terminal::escape(e))?;
    }
    Ok(())
}
