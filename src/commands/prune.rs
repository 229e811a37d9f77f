//! `hookinbox prune`: applies the sources' retention windows now (`serve` also does it every
//! ten minutes). Safe while `serve` runs: short transactions, chunk by chunk (on
//! PostgreSQL through the same prune as serve's replicas, which skips rows another holds).
//! On a terminal it shows its progress on stderr; piped, it prints only its report.

use std::io::Write;
use std::sync::Arc;
use std::time::SystemTime;

use anyhow::Context as _;
use serde::Serialize;

use crate::store::Location;
use crate::store::retention::{Pruned, Rule, Walk};
use crate::terminal::Progress;

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
struct Row {
    source: String,
    #[serde(flatten)]
    pruned: Pruned,
}

/// What became of the freed space: SQLite gives pages back to the file system;
/// PostgreSQL's autovacuum reuses it.
enum Space {
    /// Pages released, then (free pages, pages) of the file.
    Sqlite(i64, i64, i64),
    Postgres,
}

pub fn run(
    inbox: &Location,
    rules: &[Rule],
    args: &Args,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let now = SystemTime::now();
    let (rows, space) = if args.dry_run {
        count(inbox, rules, now)?
    } else {
        prune(inbox, rules, now)?
    };
    report(&rows, &space, args, out)
}

/// The dry run: what each rule would remove, counted in full on a connection of its own.
fn count(inbox: &Location, rules: &[Rule], now: SystemTime) -> anyhow::Result<(Vec<Row>, Space)> {
    let conn = inbox.write()?;
    let mut rows = Vec::with_capacity(rules.len());
    let mut progress = Progress::new("counting, sources", u64::try_from(rules.len()).ok());
    for (i, rule) in rules.iter().enumerate() {
        rows.push(Row {
            source: rule.source.clone(),
            pruned: conn.db().prune_count(rule, now)?,
        });
        progress.set(i as u64 + 1);
    }
    progress.finish();
    let space = match conn.db().pages()? {
        Some(pages) => Space::Sqlite(0, pages.free, pages.all),
        None => Space::Postgres,
    };
    Ok((rows, space))
}

/// The prune itself, through the same store as serve's (on SQLite a writer of this
/// command's own, on PostgreSQL batchers that skip the rows a replica holds), chunk by
/// chunk; then, on SQLite, the freed pages go back to the file system a step at a time.
fn prune(inbox: &Location, rules: &[Rule], now: SystemTime) -> anyhow::Result<(Vec<Row>, Space)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let (store, _held) = inbox
            .for_command(Arc::new(crate::metrics::Metrics::new()))
            .await?;
        let mut rows = Vec::with_capacity(rules.len());
        // On a terminal, a line of progress on stderr: rows removed so far (a total would
        // cost a dry run first), then the pages given back out of those there are to give.
        let mut progress = Progress::new("pruning, rows removed", None);
        let mut removed = 0;
        for rule in rules {
            let mut total = Pruned::default();
            let mut walk = Walk::default();
            loop {
                let (done, next) = store.prune_chunk(rule.clone(), now, walk).await?;
                walk = next;
                total.add(done);
                removed += u64::try_from(done.total()).unwrap_or(0);
                progress.set(removed);
                if done.total() == 0 && walk.caught_up {
                    break;
                }
            }
            rows.push(Row {
                source: rule.source.clone(),
                pruned: total,
            });
        }
        progress.finish();
        let pages = || store.read(|db| Ok(db.pages()?));
        let Some(before) = pages().await? else {
            return Ok((rows, Space::Postgres));
        };
        let mut released = 0;
        let to_release = u64::try_from(before.releasable).unwrap_or(0);
        let mut progress = Progress::new("giving free pages back", Some(to_release));
        loop {
            let n = store.release_free_pages().await?;
            released += n;
            // A release also drops the pointer-map pages that tracked the freed ones, so it
            // can count a little past the free list.
            progress.set(u64::try_from(released).unwrap_or(0).min(to_release));
            if n == 0 {
                break;
            }
        }
        progress.finish();
        let after = pages().await?.unwrap_or(before);
        Ok((rows, Space::Sqlite(released, after.free, after.all)))
    })
}

fn report(rows: &[Row], space: &Space, args: &Args, out: &mut impl Write) -> anyhow::Result<()> {
    if args.json {
        let mut report = serde_json::json!({
            "dry_run": args.dry_run,
            "sources": rows,
        });
        if let Space::Sqlite(released, free, pages) = space {
            report["released_pages"] = (*released).into();
            report["pages"] = (*pages).into();
            report["free_pages"] = (*free).into();
        }
        serde_json::to_writer_pretty(&mut *out, &report)?;
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
        "{:<20} {:>9} {:>9} {:>9} {:>9} {:>10} {:>9}",
        "SOURCE", "PAYLOADS", "EVENTS", "CONFLICTS", "ATTEMPTS", "ORDER KEYS", "RECOVERY"
    )?;
    for r in rows {
        let p = r.pruned;
        writeln!(
            out,
            "{:<20} {:>9} {:>9} {:>9} {:>9} {:>10} {:>9}",
            r.source, p.payloads, p.events, p.conflicts, p.attempts, p.order_keys, p.recovery
        )?;
    }
    writeln!(
        out,
        "payloads: bodies and headers of finished events past keep_payload (their identity stays);\n\
         events: identity rows past keep_identity, with their deliveries and attempts;\n\
         recovery: gaps past keep_identity, redeliveries asked for past keep_payload"
    )?;
    match (space, args.dry_run) {
        (_, true) => {}
        (Space::Sqlite(released, free, pages), false) => writeln!(
            out,
            "gave {released} free pages back to the file system; the inbox has {pages} pages, \
             {free} of them free for new events"
        )?,
        (Space::Postgres, false) => writeln!(
            out,
            "PostgreSQL's autovacuum makes the freed space reusable; VACUUM FULL would give it \
             back to the file system (it locks the tables while it runs)"
        )?,
    }
    Ok(())
}
