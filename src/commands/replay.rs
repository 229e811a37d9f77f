//! `hookinbox replay`: queues deliveries again, under the same idempotency key, from the
//! payload already in the inbox. Nothing is received again; a running `serve` picks them up
//! within a second.
//!
//! The vocabulary is the listings': `replay EVENT` takes what `events` prints in its ID
//! column (or a provider event id), `replay --delivery N` what `dead` prints in its DELIVERY
//! column. What is (or would be) re-queued is listed by both ids, never as a bare count.
//!
//! Choosing the deliveries, the plan and the change itself are [`store::replay`]'s; this
//! module turns the command line into its filter, applies it in chunks, and prints.

use std::io::Write;

use serde::Serialize;

use crate::config::Offline;
use crate::store::Db;
use crate::store::Location;
use crate::store::replay::{CHUNK, Filter, Listed};
use crate::terminal::{Progress, Table};
use crate::{clock, store};

/// Deliveries listed in the text output; `--json` lists every one.
const LISTED: usize = 50;

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("what").required(true).multiple(true).args([
    "event", "delivery", "dead", "state", "since", "event_type", "error"
])))]
pub struct Args {
    /// Every delivery of one event: its row id (the ID column of `events`, the EVENT column
    /// of `dead`) or the provider's event id
    pub event: Option<String>,
    /// One delivery: its row id (the DELIVERY column of `dead`); repeat for several
    #[arg(long, value_name = "N")]
    pub delivery: Vec<i64>,
    /// Every dead delivery (narrow with --source and --target); the same as --state dead
    #[arg(long, conflicts_with = "state")]
    pub dead: bool,
    /// Every delivery in this state (narrow with the other filters)
    #[arg(long, value_enum)]
    pub state: Option<State>,
    /// Every delivery of events received since TIME (RFC 3339, or a duration ago like 2h)
    #[arg(long, value_name = "TIME", value_parser = crate::clock::parse_time_arg)]
    pub since: Option<String>,
    /// Only events received before TIME (same forms as --since)
    #[arg(long, value_name = "TIME", value_parser = crate::clock::parse_time_arg)]
    pub until: Option<String>,
    /// Every delivery of events of this type as `events` shows it, where `*` is any run of
    /// characters, dots included: invoice.paid, 'invoice.*'
    #[arg(long, visible_alias = "type", value_name = "TYPE")]
    pub event_type: Option<String>,
    /// Every delivery whose last error contains TEXT, ignoring ASCII case (as `dead` and
    /// `show` print it: "connection refused", "status 503")
    #[arg(long, value_name = "TEXT")]
    pub error: Option<String>,
    /// Only this source
    #[arg(long, value_name = "NAME")]
    pub source: Option<String>,
    /// Only this target
    #[arg(long, value_name = "NAME")]
    pub target: Option<String>,
    /// List what would be re-queued, change nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
}

/// A delivery's state, as the inbox writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum State {
    /// Its target gave up (`hookinbox dead`)
    Dead,
    /// The target took it: send it once more
    Delivered,
    /// Waiting for its next attempt: try it now, on a fresh schedule
    Pending,
    /// A version of its key at least as new was delivered: counted, and left alone while so
    Superseded,
    /// An attempt is running: never replayed, only counted
    #[value(name = "in_flight")]
    InFlight,
}

impl State {
    fn as_str(self) -> &'static str {
        match self {
            State::Dead => "dead",
            State::Delivered => "delivered",
            State::Pending => "pending",
            State::Superseded => "superseded",
            State::InFlight => "in_flight",
        }
    }
}

#[derive(Debug, Default, Serialize)]
struct Report {
    /// Deliveries queued again (or that would be, in a dry run).
    requeued: usize,
    /// Matching deliveries left alone because an attempt is running now.
    in_flight: usize,
    /// Matching deliveries whose payload retention already dropped.
    pruned: usize,
    /// Matching deliveries under ordering whose key has a version at least as new
    /// delivered: sending them again would break the order.
    superseded: usize,
    /// Of those re-queued, how many are for a paused target: they wait until it is resumed.
    paused: usize,
    dry_run: bool,
    /// What is (or would be) re-queued.
    deliveries: Vec<Listed>,
}

pub fn run(
    inbox: &Location,
    config: Option<&Offline>,
    args: &Args,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let conn = inbox.write()?;
    let db = conn.db();
    known_names(db, config, args)?;
    let filter = filter(db, args)?;
    let plan = store::replay::plan(db, &filter)?;
    let paused = store::pause::all(db)?;
    let mut report = Report {
        in_flight: plan.in_flight,
        pruned: plan.pruned,
        superseded: plan.superseded,
        paused: plan
            .eligible
            .iter()
            .filter(|d| {
                paused
                    .iter()
                    .any(|p| p.source == d.source && p.target == d.target)
            })
            .count(),
        dry_run: args.dry_run,
        deliveries: plan.eligible,
        ..Report::default()
    };
    if args.dry_run {
        report.requeued = report.deliveries.len();
    } else {
        let now = clock::iso_now();
        let mut progress = Progress::new(
            "re-queuing deliveries",
            Some(report.deliveries.len() as u64),
        );
        // One short write transaction per chunk, so that serve's writer, which waits at
        // most 2 s for the lock, never has to wait long.
        for (done, chunk) in report.deliveries.chunks(CHUNK).enumerate() {
            let step = db.write(|tx| store::replay::requeue(tx, chunk, &now));
            match step {
                Ok(n) => report.requeued += n,
                Err(e) => {
                    progress.finish();
                    // The chunks before are committed: say so, not only that it failed.
                    return Err(anyhow::Error::from(e).context(format!(
                        "re-queued {} deliveries, then could not go on",
                        report.requeued
                    )));
                }
            }
            progress.set(((done * CHUNK) + chunk.len()) as u64);
        }
        progress.finish();
    }
    if args.json {
        crate::terminal::write_json(out, &report)?;
    } else {
        print(&report, out)?;
    }
    Ok(())
}

fn print(report: &Report, out: &mut impl Write) -> anyhow::Result<()> {
    let verb = if report.dry_run {
        "would re-queue"
    } else {
        "re-queued"
    };
    writeln!(
        out,
        "{verb} {} deliveries under their idempotency keys",
        report.requeued
    )?;
    if !report.deliveries.is_empty() {
        let mut table = Table::new(&["delivery", "event", "source", "event id", "target", "state"]);
        for d in report.deliveries.iter().take(LISTED) {
            table.row([
                d.delivery.to_string(),
                d.event.to_string(),
                d.source.clone(),
                d.event_id.clone(),
                d.target.clone(),
                d.state.clone(),
            ]);
        }
        table.write(out)?;
        if report.deliveries.len() > LISTED {
            writeln!(
                out,
                "… and {} more (--json lists them all)",
                report.deliveries.len() - LISTED
            )?;
        }
    }
    if report.in_flight > 0 {
        writeln!(
            out,
            "left {} alone: an attempt is running now",
            report.in_flight
        )?;
    }
    if report.superseded > 0 {
        writeln!(
            out,
            "left {} alone: ordering is on and a version at least as new was delivered",
            report.superseded
        )?;
    }
    if report.paused > 0 {
        writeln!(
            out,
            "{} of them are for a paused target: they wait until it is resumed \
             (`hookinbox resume SOURCE/TARGET`)",
            report.paused
        )?;
    }
    if report.pruned > 0 {
        writeln!(
            out,
            "cannot replay {}: retention already dropped their payload",
            report.pruned
        )?;
    }
    if report.dry_run && report.requeued > 0 {
        writeln!(out, "run it again without --dry-run to re-queue them")?;
    }
    Ok(())
}

/// Refuses a `--source` or `--target` that names nothing, with the names there are: the
/// configured ones when the config is known (replaying to a target no longer configured
/// would wait for nobody), else those the inbox holds.
fn known_names(db: Db, config: Option<&Offline>, args: &Args) -> anyhow::Result<()> {
    // Nothing to check, and without a config the names would cost a scan of every delivery.
    if args.source.is_none() && args.target.is_none() {
        return Ok(());
    }
    let pairs: Vec<(String, String)> = match config {
        Some(c) => c
            .sources
            .iter()
            .flat_map(|s| s.targets.iter().map(|t| (s.name.clone(), t.clone())))
            .collect(),
        None => db.delivery_targets()?,
    };
    let sources: Vec<&str> = match config {
        Some(c) => c.sources.iter().map(|s| s.name.as_str()).collect(),
        None => {
            let mut v: Vec<&str> = pairs.iter().map(|(s, _)| s.as_str()).collect();
            v.dedup();
            v
        }
    };
    let (in_what, listed) = match config {
        Some(c) => (
            format!("configured in {}", c.path.display()),
            "the configured",
        ),
        None => ("in the inbox".to_owned(), "the inbox's"),
    };
    let list = |names: Vec<String>| {
        if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(", ")
        }
    };
    if let Some(source) = &args.source
        && !sources.contains(&source.as_str())
    {
        anyhow::bail!(
            "no source {source:?} {in_what}; {listed} sources are: {}",
            list(sources.iter().map(|s| s.to_string()).collect())
        );
    }
    if let Some(target) = &args.target {
        let candidates: Vec<&(String, String)> = pairs
            .iter()
            .filter(|(s, _)| args.source.as_ref().is_none_or(|want| want == s))
            .collect();
        if !candidates.iter().any(|(_, t)| t == target) {
            let of = match &args.source {
                Some(s) => format!(" of source {s:?}"),
                None => String::new(),
            };
            anyhow::bail!(
                "no target {target:?}{of} {in_what}; {listed} targets are: {}",
                list(candidates.iter().map(|(s, t)| format!("{s}/{t}")).collect())
            );
        }
    }
    Ok(())
}

/// The store's filter for what the operator named: the event resolved to its row id, the
/// deliveries checked to exist (each one missing is "not found", exit 4), times parsed.
fn filter(db: Db, args: &Args) -> anyhow::Result<Filter> {
    let event = args
        .event
        .as_deref()
        .map(|event| super::show::resolve(db, event, args.source.as_deref()))
        .transpose()?;
    for id in &args.delivery {
        if !db.has_delivery(*id)? {
            return Err(super::NotFound(format!(
                "no delivery {id} in the inbox (the DELIVERY column of `hookinbox dead`, \
                 or `delivery N` in `hookinbox show`)"
            ))
            .into());
        }
    }
    let time = |t: &Option<String>| {
        t.as_deref()
            .map(clock::parse_time_arg)
            .transpose()
            .map_err(anyhow::Error::msg)
    };
    let state = match (args.dead, args.state) {
        (true, _) => Some("dead".to_owned()),
        (false, state) => state.map(|s| s.as_str().to_owned()),
    };
    Ok(Filter {
        event,
        deliveries: args.delivery.clone(),
        source: args.source.clone(),
        target: args.target.clone(),
        state,
        since: time(&args.since)?,
        until: time(&args.until)?,
        event_type: args.event_type.clone(),
        error: args.error.clone(),
    })
}
