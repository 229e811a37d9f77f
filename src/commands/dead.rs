//! `hookinbox dead`: deliveries whose target gave up (a permanent refusal such as 410, or
//! retries exhausted), newest first: the candidates for replay. Each row names both ids a
//! replay can take: the delivery (`replay --delivery N`) and its event (`replay EVENT`).

use std::io::Write;

use anyhow::Context as _;
use rusqlite::types::Value;
use serde::Serialize;

use super::events::{DEFAULT_LIMIT, MAX_LIMIT};
use crate::store::sql::{self, Db, Dialect, Inbox};
use crate::terminal::Table;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only dead deliveries of this configured source
    #[arg(long, value_name = "NAME")]
    pub source: Option<String>,
    /// Only dead deliveries to this target (a target name in the source's config)
    #[arg(long, value_name = "NAME")]
    pub target: Option<String>,
    /// Print at most N dead deliveries (1 to 10000)
    #[arg(
        long,
        value_name = "N",
        default_value_t = DEFAULT_LIMIT,
        value_parser = clap::value_parser!(u32).range(1..=MAX_LIMIT)
    )]
    pub limit: u32,
    /// Print JSON instead of a table
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
struct Listing {
    dead: Vec<Dead>,
}

#[derive(Debug, Serialize)]
pub(crate) struct Dead {
    /// The delivery's row id.
    pub(crate) delivery: i64,
    /// The event's row id, for `hookinbox show`.
    pub(crate) event: i64,
    /// When the delivery died (its last change of state).
    pub(crate) died_at: String,
    pub(crate) source: String,
    pub(crate) account: String,
    pub(crate) event_id: String,
    pub(crate) target: String,
    pub(crate) attempts: i64,
    pub(crate) last_error: Option<String>,
    pub(crate) idempotency_key: String,
    pub(crate) received_at: String,
}

pub fn run(inbox: &Inbox, args: &Args, out: &mut impl Write) -> anyhow::Result<()> {
    let conn = inbox.read()?;
    let dead = list(
        conn.db(),
        args.source.as_deref(),
        args.target.as_deref(),
        args.limit,
    )
    .with_context(|| format!("reading dead deliveries from {}", inbox.name()))?;
    drop(conn);

    if args.json {
        crate::terminal::write_json(out, &Listing { dead })?;
        return Ok(());
    }
    let mut table = Table::new(&[
        "delivery",
        "event",
        "died",
        "source",
        "event id",
        "target",
        "attempts",
        "last error",
    ]);
    for d in &dead {
        table.row([
            d.delivery.to_string(),
            d.event.to_string(),
            d.died_at.clone(),
            d.source.clone(),
            d.event_id.clone(),
            d.target.clone(),
            d.attempts.to_string(),
            d.last_error.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    table.write(out)?;
    if !dead.is_empty() {
        writeln!(
            out,
            "replay one delivery: hookinbox replay --delivery DELIVERY; every delivery of an \
             event: hookinbox replay EVENT; all of them: hookinbox replay --dead"
        )?;
    }
    Ok(())
}

/// Dead deliveries, newest first. The tables rather than the `dead_deliveries` view: the view
/// has no event row id or account, and `show` needs the one to follow up. Same filter and
/// order as the view, read in that order from `deliveries_dead` (the planner, without
/// statistics, would rather collect every dead row and sort them; PostgreSQL's has them).
/// Only fixed fragments go into the SQL; values are parameters.
pub(crate) fn list(
    db: Db,
    source: Option<&str>,
    target: Option<&str>,
    limit: u32,
) -> Result<Vec<Dead>, sql::Error> {
    let deliveries = match db.dialect() {
        Dialect::Sqlite => "deliveries d INDEXED BY deliveries_dead",
        Dialect::Postgres => "deliveries d",
    };
    let mut sql = format!(
        "SELECT d.id, d.event, d.updated_at, d.source, e.account, e.event_id, d.target,
                d.attempts, d.last_error, d.idempotency_key, e.received_at
           FROM {deliveries} JOIN events e ON e.id = d.event
          WHERE d.state = 'dead'"
    );
    let mut params: Vec<Value> = Vec::new();
    if let Some(s) = source {
        sql.push_str(" AND d.source = ?");
        params.push(Value::Text(s.to_owned()));
    }
    if let Some(t) = target {
        sql.push_str(" AND d.target = ?");
        params.push(Value::Text(t.to_owned()));
    }
    sql.push_str(" ORDER BY d.updated_at DESC, d.id DESC LIMIT ?");
    params.push(Value::Integer(limit.into()));
    db.rows(&sql, &sql::refs(&params), |r| {
        Ok(Dead {
            delivery: r.get(0)?,
            event: r.get(1)?,
            died_at: r.get(2)?,
            source: r.get(3)?,
            account: r.get(4)?,
            event_id: r.get(5)?,
            target: r.get(6)?,
            attempts: r.get(7)?,
            last_error: r.get(8)?,
            idempotency_key: r.get(9)?,
            received_at: r.get(10)?,
        })
    })
}
