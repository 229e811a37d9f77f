//! `hookinbox replay`: queues deliveries again, under the same idempotency key, from the
//! payload already in the inbox. Nothing is received again; a running `serve` picks them up
//! within a second.
//!
//! The vocabulary is the listings': `replay EVENT` takes what `events` prints in its ID
//! column (or a provider event id), `replay --delivery N` what `dead` prints in its DELIVERY
//! column. What is (or would be) re-queued is listed by both ids, never as a bare count.

use std::io::Write;
use std::path::Path;

use anyhow::Context as _;
use rusqlite::{Connection, params_from_iter, types::Value};
use serde::Serialize;

use crate::config::Offline;
use crate::terminal::Table;
use crate::{clock, store};

/// A delivery under ordering that a newer (or the same) version of its key already passed:
/// re-queued, it would only be superseded again.
const OUTDATED: &str = "(d.order_key IS NOT NULL AND EXISTS (
        SELECT 1 FROM order_keys k
         WHERE k.source = d.source AND k.target = d.target AND k.order_key = d.order_key
           AND k.last_version >= d.order_version))";

/// The event of delivery `d` still has its body (retention did not prune it).
const HAS_PAYLOAD: &str = "EXISTS (SELECT 1 FROM payloads p WHERE p.event = d.event)";

/// Deliveries re-queued per transaction, so that a large replay never holds the write lock
/// for long.
const CHUNK: usize = 500;

/// Deliveries listed in the text output; `--json` lists every one.
const LISTED: usize = 50;

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("what").required(true).multiple(true).args(["event", "delivery", "dead", "since"])))]
pub struct Args {
    /// Every delivery of one event: its row id (the ID column of `events`, the EVENT column
    /// of `dead`) or the provider's event id
    pub event: Option<String>,
    /// One delivery: its row id (the DELIVERY column of `dead`); repeat for several
    #[arg(long, value_name = "N")]
    pub delivery: Vec<i64>,
    /// Every dead delivery (narrow with --source and --target)
    #[arg(long)]
    pub dead: bool,
    /// Every delivery of events received since TIME (RFC 3339, or a duration ago like 2h)
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// … and before TIME (with --since)
    #[arg(long, value_name = "TIME", requires = "since")]
    pub until: Option<String>,
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
    dry_run: bool,
    /// What is (or would be) re-queued.
    deliveries: Vec<Listed>,
}

/// One delivery re-queued, by every name an operator may know it by.
#[derive(Debug, Serialize)]
struct Listed {
    delivery: i64,
    /// The event's row id.
    event: i64,
    source: String,
    event_id: String,
    target: String,
    /// Its state before the replay.
    state: String,
}

pub fn run(
    db: &Path,
    config: Option<&Offline>,
    args: &Args,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let mut conn =
        store::open_current(db).with_context(|| format!("opening the inbox {}", db.display()))?;
    known_names(&conn, config, args)?;
    let (filter, values) = selection(&conn, args)?;
    let count = |extra: &str| -> anyhow::Result<usize> {
        let sql = format!(
            "SELECT count(*) FROM deliveries d JOIN events e ON e.id = d.event WHERE {filter} AND {extra}"
        );
        let n: i64 = conn.query_row(&sql, params_from_iter(values.iter()), |r| r.get(0))?;
        Ok(usize::try_from(n).unwrap_or(0))
    };
    let mut report = Report {
        in_flight: count("d.state = 'in_flight'")?,
        pruned: count(&format!("d.state <> 'in_flight' AND NOT {HAS_PAYLOAD}"))?,
        superseded: count(&format!(
            "d.state <> 'in_flight' AND {HAS_PAYLOAD} AND {OUTDATED}"
        ))?,
        dry_run: args.dry_run,
        ..Report::default()
    };
    let eligible = format!("d.state <> 'in_flight' AND {HAS_PAYLOAD} AND NOT {OUTDATED}");
    report.deliveries = {
        let sql = format!(
            "SELECT d.id, d.event, d.source, e.event_id, d.target, d.state
               FROM deliveries d JOIN events e ON e.id = d.event
              WHERE {filter} AND {eligible} ORDER BY d.id"
        );
        let mut stmt = conn.prepare(&sql)?;
        stmt.query_map(params_from_iter(values.iter()), |r| {
            Ok(Listed {
                delivery: r.get(0)?,
                event: r.get(1)?,
                source: r.get(2)?,
                event_id: r.get(3)?,
                target: r.get(4)?,
                state: r.get(5)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?
    };
    if !args.dry_run {
        let now = clock::iso_now();
        let ids: Vec<i64> = report.deliveries.iter().map(|d| d.delivery).collect();
        for chunk in ids.chunks(CHUNK) {
            let marks = vec!["?"; chunk.len()].join(", ");
            // A new schedule starts (schedule_base = attempts so far); the attempt numbers
            // the target sees count on.
            // Still eligible now, inside the write transaction (an attempt may have
            // started since the listing): checked row by row, correlated, so the update
            // touches only the chunk's rows rather than scanning the table.
            let sql = format!(
                "UPDATE deliveries AS d
                    SET state = 'pending', next_attempt_at = ?1, schedule_base = attempts,
                        lease_until = NULL, last_error = 'replayed by the operator', updated_at = ?1
                  WHERE d.id IN ({marks}) AND {eligible}"
            );
            let mut params: Vec<Value> = vec![now.clone().into()];
            params.extend(chunk.iter().map(|id| Value::Integer(*id)));
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            report.requeued += tx.execute(&sql, params_from_iter(params.iter()))?;
            tx.commit()?;
        }
    } else {
        report.requeued = report.deliveries.len();
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
fn known_names(conn: &Connection, config: Option<&Offline>, args: &Args) -> anyhow::Result<()> {
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
        None => conn
            .prepare("SELECT DISTINCT source, target FROM deliveries ORDER BY 1, 2")?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?,
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

/// The WHERE clause (over `d` and `e`) and its parameters for what the operator named.
fn selection(conn: &Connection, args: &Args) -> anyhow::Result<(String, Vec<Value>)> {
    let mut clauses = Vec::new();
    let mut values: Vec<Value> = Vec::new();
    if let Some(event) = &args.event {
        clauses.push("d.event = ?".to_owned());
        values.push(super::show::resolve(conn, event, args.source.as_deref())?.into());
    }
    if !args.delivery.is_empty() {
        for id in &args.delivery {
            let exists = conn
                .query_row("SELECT 1 FROM deliveries WHERE id = ?1", [id], |_| Ok(()))
                .is_ok();
            if !exists {
                return Err(super::NotFound(format!(
                    "no delivery {id} in the inbox (the DELIVERY column of `hookinbox dead`, \
                     or `delivery N` in `hookinbox show`)"
                ))
                .into());
            }
        }
        clauses.push(format!(
            "d.id IN ({})",
            vec!["?"; args.delivery.len()].join(", ")
        ));
        values.extend(args.delivery.iter().map(|id| Value::Integer(*id)));
    }
    if args.dead {
        clauses.push("d.state = 'dead'".to_owned());
    }
    if let Some(since) = &args.since {
        clauses.push("e.received_at >= ?".to_owned());
        values.push(
            clock::parse_time_arg(since)
                .map_err(anyhow::Error::msg)?
                .into(),
        );
    }
    if let Some(until) = &args.until {
        clauses.push("e.received_at < ?".to_owned());
        values.push(
            clock::parse_time_arg(until)
                .map_err(anyhow::Error::msg)?
                .into(),
        );
    }
    if let Some(source) = &args.source {
        clauses.push("d.source = ?".to_owned());
        values.push(source.clone().into());
    }
    if let Some(target) = &args.target {
        clauses.push("d.target = ?".to_owned());
        values.push(target.clone().into());
    }
    Ok((clauses.join(" AND "), values))
}
