//! `hookinbox prune`: applies the sources' retention windows now (`serve` also does it every
//! ten minutes). Safe while `serve` runs: short transactions, chunk by chunk (on
//! PostgreSQL through the same prune as serve's replicas, which skips rows another holds).
//! On a terminal it shows its progress on stderr; piped, it prints only its report.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use anyhow::Context as _;
use serde::Serialize;

use crate::config::PgStore;
use crate::store;
use crate::store::retention::{self, Pruned, Rule};
use crate::store::sql::{Db, Inbox, PgConn};
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

pub fn run(inbox: &Inbox, rules: &[Rule], args: &Args, out: &mut impl Write) -> anyhow::Result<()> {
    let (rows, space) = match inbox {
        Inbox::Sqlite(db) => sqlite(db, rules, args)?,
        Inbox::Postgres(store) => postgres(store, rules, args)?,
    };
    report(&rows, &space, args, out)
}

/// On a PostgreSQL inbox: the dry run counts with the same SQL as SQLite's; the prune runs
/// serve's own (a PostgreSQL inbox's batcher, here for this command alone).
fn postgres(store: &PgStore, rules: &[Rule], args: &Args) -> anyhow::Result<(Vec<Row>, Space)> {
    let now = SystemTime::now();
    let mut rows = Vec::with_capacity(rules.len());
    if args.dry_run {
        let conn =
            PgConn::open(store).with_context(|| format!("opening the inbox {}", store.url))?;
        let mut progress = Progress::new("counting, sources", u64::try_from(rules.len()).ok());
        for (i, rule) in rules.iter().enumerate() {
            rows.push(Row {
                source: rule.source.clone(),
                pruned: retention::count(Db::Postgres(&conn), rule, now)?,
            });
            progress.set(i as u64 + 1);
        }
        progress.finish();
        return Ok((rows, Space::Postgres));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime for PostgreSQL")?;
    runtime.block_on(async {
        let inbox = store::pg::Inbox::for_command(store, Arc::new(crate::metrics::Metrics::new()))
            .await
            .with_context(|| format!("opening the inbox {}", store.url))?;
        let mut progress = Progress::new("pruning, rows removed", None);
        let mut removed = 0;
        for rule in rules {
            let mut total = Pruned::default();
            loop {
                let done = inbox.prune(rule.clone()).await?;
                total.add(done);
                removed += u64::try_from(done.total()).unwrap_or(0);
                progress.set(removed);
                if done.total() == 0 {
                    break;
                }
            }
            rows.push(Row {
                source: rule.source.clone(),
                pruned: total,
            });
        }
        progress.finish();
        anyhow::Ok(())
    })?;
    Ok((rows, Space::Postgres))
}

fn sqlite(db: &Path, rules: &[Rule], args: &Args) -> anyhow::Result<(Vec<Row>, Space)> {
    let mut conn =
        store::open_current(db).with_context(|| format!("opening the inbox {}", db.display()))?;
    let now = SystemTime::now();
    let mut rows = Vec::with_capacity(rules.len());
    // On a terminal, a line of progress on stderr: rows removed so far (a total would cost
    // a dry run first), then the pages given back out of those there are to give.
    let mut progress = if args.dry_run {
        Progress::new("counting, sources", u64::try_from(rules.len()).ok())
    } else {
        Progress::new("pruning, rows removed", None)
    };
    let mut removed = 0;
    for (i, rule) in rules.iter().enumerate() {
        let pruned = if args.dry_run {
            let would = retention::count(Db::Sqlite(&conn), rule, now)?;
            progress.set(i as u64 + 1);
            would
        } else {
            let mut total = Pruned::default();
            let mut walk = retention::Walk::default();
            loop {
                let tx =
                    conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
                let done = retention::prune_chunk(&tx, rule, now, &mut walk)?;
                tx.commit()?;
                total.add(done);
                removed += u64::try_from(done.total()).unwrap_or(0);
                progress.set(removed);
                if done.total() == 0 && walk.caught_up {
                    break total;
                }
            }
        };
        rows.push(Row {
            source: rule.source.clone(),
            pruned,
        });
    }
    progress.finish();
    // The freed pages go back to the file system, one short transaction per step.
    let mut released = 0;
    if !args.dry_run {
        let (free, _) = store::page_counts(&conn)?;
        let to_release = u64::try_from(free - store::FREE_PAGE_RESERVE).unwrap_or(0);
        let mut progress = Progress::new("giving free pages back", Some(to_release));
        loop {
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let n = store::release_free_pages(&tx)?;
            tx.commit()?;
            released += n;
            // A release also drops the pointer-map pages that tracked the freed ones, so it
            // can count a little past the free list.
            progress.set(u64::try_from(released).unwrap_or(0).min(to_release));
            if n == 0 {
                break;
            }
        }
        progress.finish();
    }
    let (free, pages) = store::page_counts(&conn)?;
    Ok((rows, Space::Sqlite(released, free, pages)))
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
