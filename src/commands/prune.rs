//! `hookinbox prune`: applies the sources' retention windows now (`serve` also does it every
//! ten minutes). Safe while `serve` runs: short transactions, chunk by chunk.

use std::io::Write;
use std::path::Path;
use std::time::SystemTime;

use anyhow::Context as _;
use serde::Serialize;

use crate::store;
use crate::store::retention::{self, Pruned, Rule};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Count what would be removed, change nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Print JSON instead of a table
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct Row<'a> {
    source: &'a str,
    #[serde(flatten)]
    pruned: Pruned,
}

pub fn run(db: &Path, rules: &[Rule], args: &Args, out: &mut impl Write) -> anyhow::Result<()> {
    let mut conn =
        store::open_current(db).with_context(|| format!("opening the inbox {}", db.display()))?;
    let now = SystemTime::now();
    let mut rows = Vec::with_capacity(rules.len());
    for rule in rules {
        let pruned = if args.dry_run {
            retention::count(&conn, rule, now)?
        } else {
            let mut total = Pruned::default();
            loop {
                let tx =
                    conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
                let done = retention::prune_chunk(&tx, rule, now)?;
                tx.commit()?;
                total.add(done);
                if done.total() == 0 {
                    break total;
                }
            }
        };
        rows.push(Row {
            source: &rule.source,
            pruned,
        });
    }
    // The freed pages go back to the file system, one short transaction per step.
    let mut released = 0;
    if !args.dry_run {
        loop {
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let n = store::release_free_pages(&tx)?;
            tx.commit()?;
            released += n;
            if n == 0 {
                break;
            }
        }
    }
    let (free, pages) = store::page_counts(&conn)?;
    if args.json {
        serde_json::to_writer_pretty(
            &mut *out,
            &serde_json::json!({
                "dry_run": args.dry_run,
                "sources": rows,
                "released_pages": released,
                "pages": pages,
                "free_pages": free,
            }),
        )?;
        writeln!(out)?;
        return Ok(());
    }
    let verb = if args.dry_run {
        "would remove"
    } else {
        "removed"
    };
    writeln!(out, "{verb} (per source):")?;
    writeln!(
        out,
        "{:<20} {:>9} {:>9} {:>9} {:>9} {:>10}",
        "SOURCE", "PAYLOADS", "EVENTS", "CONFLICTS", "ATTEMPTS", "ORDER KEYS"
    )?;
    for r in &rows {
        let p = r.pruned;
        writeln!(
            out,
            "{:<20} {:>9} {:>9} {:>9} {:>9} {:>10}",
            r.source, p.payloads, p.events, p.conflicts, p.attempts, p.order_keys
        )?;
    }
    writeln!(
        out,
        "payloads: bodies and headers of finished events past keep_payload (their identity stays);\n\
         events: identity rows past keep_identity, with their deliveries and attempts"
    )?;
    if !args.dry_run {
        writeln!(
            out,
            "gave {released} free pages back to the file system; the inbox has {pages} pages, \
             {free} of them free for new events"
        )?;
    }
    Ok(())
}
