//! `hookinbox dead`: deliveries whose target gave up (a permanent refusal such as 410, or
//! retries exhausted), newest first: the candidates for replay. Each row names both ids a
//! replay can take: the delivery (`replay --delivery N`) and its event (`replay EVENT`).

use std::io::Write;

use anyhow::Context as _;
use serde::Serialize;

use super::events::{DEFAULT_LIMIT, MAX_LIMIT};
use crate::store::Location;
use crate::store::views::dead::Dead;
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

pub fn run(inbox: &Location, args: &Args, out: &mut impl Write) -> anyhow::Result<()> {
    let conn = inbox.read()?;
    let dead = conn
        .db()
        .dead(args.source.as_deref(), args.target.as_deref(), args.limit)
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
