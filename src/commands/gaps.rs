//! `hookinbox gaps`: the windows in which a source was not receiving (serve down, or
//! refusing every request the source sent), with their lengths and what recovery did, and
//! each source's state now.

use std::io::Write;

use anyhow::Context as _;
use serde::Serialize;

use crate::clock;
use crate::store::Location;
use crate::store::gaps;
use crate::store::gaps::HEARTBEAT;
use crate::terminal::Table;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only gaps of this configured source
    #[arg(long, value_name = "NAME")]
    pub source: Option<String>,
    /// Only gaps that ended since TIME (RFC 3339, or a duration ago like 7d)
    #[arg(long, value_name = "TIME", value_parser = crate::clock::parse_time_arg, default_value = "30d")]
    pub since: String,
    /// Print JSON instead of a table
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
struct Listing {
    gaps: Vec<Listed>,
    /// Sources not receiving right now, by the inbox's account of them.
    now: Vec<Open>,
}

#[derive(Debug, Serialize)]
struct Listed {
    #[serde(flatten)]
    gap: gaps::Gap,
    seconds: i64,
}

#[derive(Debug, Serialize)]
struct Open {
    source: String,
    since: String,
    why: String,
}

pub fn run(inbox: &Location, args: &Args, out: &mut impl Write) -> anyhow::Result<()> {
    let since = clock::parse_time_arg(&args.since).map_err(|e| anyhow::anyhow!("--since: {e}"))?;
    let conn = inbox.read()?;
    let listed = gaps::list(conn.db(), &since, args.source.as_deref())
        .with_context(|| format!("reading gaps from {}", inbox.name()))?;
    let receiving = gaps::receiving(conn.db())?;
    drop(conn);
    let now = clock::unix_now();
    let live = |r: &gaps::Receiving| {
        r.stopped_at.is_none()
            && r.rejecting_since.is_none()
            && clock::unix_from_iso(&r.heartbeat_at)
                .is_some_and(|beat| now - beat <= 3 * HEARTBEAT.as_secs() as i64)
    };
    // With replicas a source has a row per replica, newest heartbeat first: it is receiving
    // while any replica is; otherwise the newest row says why not.
    let mut sources: Vec<gaps::Receiving> = Vec::new();
    for r in receiving {
        if sources.last().is_some_and(|s| s.source == r.source) {
            if live(&r) {
                *sources.last_mut().expect("just checked") = r;
            }
        } else {
            sources.push(r);
        }
    }
    let open: Vec<Open> = sources
        .into_iter()
        .filter(|r| args.source.as_ref().is_none_or(|s| s == &r.source))
        .filter_map(|r| {
            if let Some(at) = r.stopped_at {
                return Some(Open {
                    source: r.source,
                    since: at,
                    why: "down: serve stopped cleanly".into(),
                });
            }
            let beat = clock::unix_from_iso(&r.heartbeat_at)?;
            if now - beat > 3 * HEARTBEAT.as_secs() as i64 {
                return Some(Open {
                    source: r.source,
                    since: r.heartbeat_at,
                    why: "no heartbeat since: serve is not running, or cannot write".into(),
                });
            }
            r.rejecting_since.map(|at| Open {
                source: r.source,
                why: format!("refusing every request ({} so far)", r.rejected),
                since: at,
            })
        })
        .collect();
    let gaps: Vec<Listed> = listed
        .into_iter()
        .map(|gap| Listed {
            seconds: match (
                clock::unix_from_iso(&gap.started_at),
                clock::unix_from_iso(&gap.ended_at),
            ) {
                (Some(a), Some(b)) => (b - a).max(0),
                _ => 0,
            },
            gap,
        })
        .collect();
    if args.json {
        crate::terminal::write_json(out, &Listing { gaps, now: open })?;
        return Ok(());
    }
    if gaps.is_empty() {
        writeln!(out, "no gaps since {since}")?;
    } else {
        let mut table = Table::new(&[
            "source", "kind", "from", "until", "length", "detail", "recovery",
        ]);
        for g in &gaps {
            let recovery = match (&g.gap.recovered_at, &g.gap.recovery) {
                (Some(_), Some(r)) => r.clone(),
                (None, Some(r)) => r.clone(),
                _ => "-".into(),
            };
            table.row([
                g.gap.source.as_str(),
                g.gap.kind.as_str(),
                g.gap.started_at.as_str(),
                g.gap.ended_at.as_str(),
                &humantime::format_duration(std::time::Duration::from_secs(g.seconds as u64))
                    .to_string(),
                g.gap.detail.as_str(),
                &recovery,
            ]);
        }
        table.write(out)?;
    }
    for o in &open {
        writeln!(
            out,
            "{}: not receiving since {}: {}",
            crate::terminal::escape(&o.source),
            o.since,
            o.why
        )?;
    }
    Ok(())
}
