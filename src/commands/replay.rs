//! `hookinbox replay`: queues deliveries again, under the same idempotency key, from the
//! payload already in the inbox. Nothing is received again; a running `serve` picks them up
//! within a second.

use std::io::Write;
use std::path::Path;

use anyhow::Context as _;
use rusqlite::{Connection, params_from_iter, types::Value};
use serde::Serialize;

use crate::clock;
use crate::config::Synchronous;
use crate::store;

/// A delivery under ordering that a newer (or the same) version of its key already passed:
/// re-queued, it would only be superseded again.
const OUTDATED: &str = "(d.order_key IS NOT NULL AND EXISTS (
        SELECT 1 FROM order_keys k
         WHERE k.source = d.source AND k.target = d.target AND k.order_key = d.order_key
           AND k.last_version >= d.order_version))";

/// Deliveries re-queued per transaction, so that a large replay never holds the write lock
/// for long.
const CHUNK: usize = 500;

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("what").required(true).multiple(true).args(["event", "dead", "since"])))]
pub struct Args {
    /// One event: its row id (the ID column of `events`) or the provider's event id
    pub event: Option<String>,
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
    /// Print what would be re-queued, change nothing
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
}

pub fn run(db: &Path, args: &Args, out: &mut impl Write) -> anyhow::Result<()> {
    let mut conn = store::open_writer(db, Synchronous::Full, false)
        .with_context(|| format!("opening the inbox {}", db.display()))?;
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
        pruned: count("d.state <> 'in_flight' AND e.body IS NULL")?,
        superseded: count(&format!(
            "d.state <> 'in_flight' AND e.body IS NOT NULL AND {OUTDATED}"
        ))?,
        dry_run: args.dry_run,
        ..Report::default()
    };
    let eligible = format!("d.state <> 'in_flight' AND e.body IS NOT NULL AND NOT {OUTDATED}");
    let ids: Vec<i64> = {
        let sql = format!(
            "SELECT d.id FROM deliveries d JOIN events e ON e.id = d.event WHERE {filter} AND {eligible}"
        );
        let mut stmt = conn.prepare(&sql)?;
        stmt.query_map(params_from_iter(values.iter()), |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?
    };
    if !args.dry_run {
        let now = clock::iso_now();
        for chunk in ids.chunks(CHUNK) {
            let marks = vec!["?"; chunk.len()].join(", ");
            // A new schedule starts (schedule_base = attempts so far); the attempt numbers
            // the target sees count on.
            let sql = format!(
                "UPDATE deliveries
                    SET state = 'pending', next_attempt_at = ?1, schedule_base = attempts,
                        lease_until = NULL, last_error = 'replayed by the operator', updated_at = ?1
                  WHERE id IN ({marks})
                    AND id IN (SELECT d.id FROM deliveries d JOIN events e ON e.id = d.event
                                WHERE {eligible})"
            );
            let mut params: Vec<Value> = vec![now.clone().into()];
            params.extend(chunk.iter().map(|id| Value::Integer(*id)));
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            report.requeued += tx.execute(&sql, params_from_iter(params.iter()))?;
            tx.commit()?;
        }
    } else {
        report.requeued = ids.len();
    }
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &report)?;
        writeln!(out)?;
    } else {
        let verb = if args.dry_run {
            "would re-queue"
        } else {
            "re-queued"
        };
        writeln!(
            out,
            "{verb} {} deliveries under their idempotency keys",
            report.requeued
        )?;
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
