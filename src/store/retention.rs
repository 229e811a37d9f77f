//! Retention: keeps the inbox from growing without bound, per source.
//!
//! - After `keep_payload`, a finished event (no delivery pending or in flight) loses its body
//!   and headers (its `payloads` row); its compact identity row stays, so a late
//!   redelivery is still a duplicate.
//! - After `keep_identity`, the identity row goes too, with its deliveries and attempts.
//! - Conflicts and attempt history are kept for `keep_payload`; ordering state for
//!   `keep_identity`.
//!
//! Work is done in chunks of [`CHUNK`] rows, one short transaction each, so a prune never
//! holds the write lock for long; inside `serve` every chunk is one job of the writer, so it
//! shares batches with incoming webhooks instead of competing with them.

use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rusqlite::{Connection, params};
use serde::Serialize;
use tokio::sync::watch;

use super::sql::{Db, Dialect};
use super::writer::Writer;
use crate::clock;
use crate::config::Source;

/// Rows changed per transaction.
pub const CHUNK: i64 = 500;
/// The first retention run after start-up comes no later than this (then every
/// `store.retention_interval`).
pub const FIRST_RUN_AFTER: Duration = Duration::from_secs(60);
/// How often `serve` offers the writer an idle WAL checkpoint.
pub const CHECKPOINT_EVERY: Duration = Duration::from_secs(10);

/// One source's retention windows.
#[derive(Debug, Clone)]
pub struct Rule {
    pub source: String,
    pub keep_payload: Duration,
    pub keep_identity: Duration,
}

impl Rule {
    pub fn of(source: &Source) -> Rule {
        Rule {
            source: source.name.clone(),
            keep_payload: source.keep_payload,
            keep_identity: source.keep_identity,
        }
    }
}

/// The rules in force; replaced on a config reload.
#[derive(Clone)]
pub struct Settings(Arc<RwLock<Arc<Vec<Rule>>>>);

impl Settings {
    pub fn new(sources: &[Arc<Source>]) -> Settings {
        Settings(Arc::new(RwLock::new(Arc::new(Self::of(sources)))))
    }

    pub fn replace(&self, sources: &[Arc<Source>]) {
        *self.0.write().expect("no panics while holding the lock") = Arc::new(Self::of(sources));
    }

    /// Each source's rule, and the default windows for the alert notifications'
    /// internal source.
    fn of(sources: &[Arc<Source>]) -> Vec<Rule> {
        sources
            .iter()
            .map(|s| Rule::of(s))
            .chain([Rule {
                source: crate::alerts::SOURCE.to_owned(),
                keep_payload: crate::config::DEFAULT_KEEP_PAYLOAD,
                keep_identity: crate::config::DEFAULT_KEEP_IDENTITY,
            }])
            .collect()
    }

    pub fn rules(&self) -> Arc<Vec<Rule>> {
        self.0
            .read()
            .expect("no panics while holding the lock")
            .clone()
    }
}

/// What a prune removed (or, in a dry run, would remove).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Pruned {
    /// Events whose body and headers were dropped.
    pub payloads: i64,
    /// Free pages given back to the file system afterwards (not rows: not in `total`, and
    /// not per source).
    #[serde(skip_serializing)]
    pub released_pages: i64,
    /// Identity rows deleted, with their deliveries and attempts.
    pub events: i64,
    pub conflicts: i64,
    pub attempts: i64,
    pub order_keys: i64,
    /// Gaps past keep_identity and redeliveries asked for past keep_payload (`recover`).
    pub recovery: i64,
}

impl Pruned {
    pub fn total(&self) -> i64 {
        self.payloads
            + self.events
            + self.conflicts
            + self.attempts
            + self.order_keys
            + self.recovery
    }

    pub fn add(&mut self, o: Pruned) {
        self.payloads += o.payloads;
        self.released_pages += o.released_pages;
        self.events += o.events;
        self.conflicts += o.conflicts;
        self.attempts += o.attempts;
        self.order_keys += o.order_keys;
        self.recovery += o.recovery;
    }
}

/// A finished event: nothing of it is waiting to be delivered.
pub(super) const FINISHED: &str = "NOT EXISTS (SELECT 1 FROM deliveries d
                                 WHERE d.event = e.id AND d.state IN ('pending', 'in_flight'))";
/// An event whose payload may go: finished, and no delivery dead, since a dead delivery is
/// replayed from its payload (it goes with the identity row, after `keep_identity`).
pub(super) const PAYLOAD_DONE: &str = "NOT EXISTS (SELECT 1 FROM deliveries d
                                    WHERE d.event = e.id AND d.state IN ('pending', 'in_flight', 'dead'))";

/// The kinds of rows retention removes, in the order a chunk handles them.
#[derive(Clone, Copy)]
enum Kind {
    Payloads,
    Events,
    Conflicts,
    Attempts,
    OrderKeys,
    Gaps,
    Requests,
}

const KINDS: [Kind; 7] = [
    Kind::Payloads,
    Kind::Events,
    Kind::Conflicts,
    Kind::Attempts,
    Kind::OrderKeys,
    Kind::Gaps,
    Kind::Requests,
];

impl Kind {
    /// The keys of the rows due for removal: `?1` is the source, `?2` the cut-off. One
    /// text for the prune and for the dry run, so the two never disagree. (PostgreSQL's
    /// prune, `pg::queue`, takes the same rows; its dry run counts these, without SQLite's
    /// index hints and `rowid`.)
    fn candidates(self, dialect: Dialect) -> String {
        let (unpruned, age, rowid) = match dialect {
            Dialect::Sqlite => (
                "INDEXED BY events_unpruned",
                "INDEXED BY events_age",
                "rowid",
            ),
            Dialect::Postgres => ("", "", "1"),
        };
        match self {
            Kind::Payloads => format!(
                "SELECT e.id FROM events e {unpruned}
                  WHERE e.source = ?1 AND e.received_at < ?2 AND e.pruned_at IS NULL
                    AND {PAYLOAD_DONE}"
            ),
            Kind::Events => format!(
                "SELECT e.id FROM events e {age}
                  WHERE e.source = ?1 AND e.received_at < ?2 AND {FINISHED}"
            ),
            Kind::Conflicts => {
                "SELECT id FROM conflicts WHERE source = ?1 AND last_seen_at < ?2".into()
            }
            Kind::Attempts => "SELECT a.id FROM attempts a JOIN deliveries d ON d.id = a.delivery
                                WHERE d.source = ?1 AND a.started_at < ?2
                                  AND d.state NOT IN ('pending', 'in_flight')"
                .into(),
            Kind::OrderKeys => {
                format!("SELECT {rowid} FROM order_keys WHERE source = ?1 AND updated_at < ?2")
            }
            Kind::Gaps => "SELECT id FROM gaps WHERE source = ?1 AND ended_at < ?2".into(),
            Kind::Requests => format!(
                "SELECT {rowid} FROM recovery_requests WHERE source = ?1 AND requested_at < ?2"
            ),
        }
    }

    /// The statement that removes at most [`CHUNK`] of them (`?3`); payloads take two
    /// statements and go by [`prune_payloads`].
    fn removal(self) -> Option<String> {
        let chunk = format!("{} LIMIT ?3", self.candidates(Dialect::Sqlite));
        Some(match self {
            Kind::Payloads => return None,
            Kind::Events => format!("DELETE FROM events WHERE id IN ({chunk})"),
            Kind::Conflicts => format!("DELETE FROM conflicts WHERE id IN ({chunk})"),
            Kind::Attempts => format!("DELETE FROM attempts WHERE id IN ({chunk})"),
            Kind::OrderKeys => format!("DELETE FROM order_keys WHERE rowid IN ({chunk})"),
            Kind::Gaps => format!("DELETE FROM gaps WHERE id IN ({chunk})"),
            Kind::Requests => format!("DELETE FROM recovery_requests WHERE rowid IN ({chunk})"),
        })
    }

    /// Payloads and everything kept as long as them use `keep_payload`; identities and
    /// ordering state `keep_identity`.
    fn cutoff(self, rule: &Rule, now: SystemTime) -> String {
        let keep = match self {
            Kind::Payloads | Kind::Conflicts | Kind::Attempts | Kind::Requests => rule.keep_payload,
            Kind::Events | Kind::OrderKeys | Kind::Gaps => rule.keep_identity,
        };
        clock::iso(now.checked_sub(keep).unwrap_or(SystemTime::UNIX_EPOCH))
    }

    fn count_into(self, p: &mut Pruned, n: i64) {
        match self {
            Kind::Payloads => p.payloads += n,
            Kind::Events => p.events += n,
            Kind::Conflicts => p.conflicts += n,
            Kind::Attempts => p.attempts += n,
            Kind::OrderKeys => p.order_keys += n,
            Kind::Gaps | Kind::Requests => p.recovery += n,
        }
    }
}

/// One chunk of work for `rule`: at most [`CHUNK`] rows of each kind. Returns what it did;
/// zero everywhere means the rule is applied.
pub fn prune_chunk(conn: &Connection, rule: &Rule, now: SystemTime) -> rusqlite::Result<Pruned> {
    let mut done = Pruned::default();
    for kind in KINDS {
        let cutoff = kind.cutoff(rule, now);
        let n = match kind.removal() {
            None => prune_payloads(conn, &rule.source, &cutoff, now)?,
            Some(sql) => conn
                .prepare_cached(&sql)?
                .execute(params![rule.source, cutoff, CHUNK])?,
        };
        kind.count_into(&mut done, i64::try_from(n).unwrap_or(i64::MAX));
    }
    Ok(done)
}

/// Drops the payloads of at most [`CHUNK`] events past `cutoff` and marks the events
/// pruned. The ids are read first and then used twice, so the two statements cannot pick
/// different rows.
fn prune_payloads(
    conn: &Connection,
    source: &str,
    cutoff: &str,
    now: SystemTime,
) -> rusqlite::Result<usize> {
    let ids: Vec<i64> = conn
        .prepare_cached(&format!(
            "{} LIMIT ?3",
            Kind::Payloads.candidates(Dialect::Sqlite)
        ))?
        .query_map(params![source, cutoff, CHUNK], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let stamp = clock::iso(now);
    let mut drop_payload = conn.prepare_cached("DELETE FROM payloads WHERE event = ?1")?;
    let mut mark = conn.prepare_cached("UPDATE events SET pruned_at = ?2 WHERE id = ?1")?;
    for id in &ids {
        drop_payload.execute([id])?;
        mark.execute(params![id, stamp])?;
    }
    Ok(ids.len())
}

/// What [`prune_chunk`] (or PostgreSQL's prune) would do for `rule`, counted in full (a
/// dry run).
pub fn count(db: Db, rule: &Rule, now: SystemTime) -> Result<Pruned, super::sql::Error> {
    let mut would = Pruned::default();
    for kind in KINDS {
        let sql = format!(
            "SELECT count(*) FROM ({}) AS due",
            kind.candidates(db.dialect())
        );
        let n = db.value(&sql, &[&rule.source, &kind.cutoff(rule, now)])?;
        kind.count_into(&mut would, n);
    }
    Ok(would)
}

/// Applies every rule through the writer, chunk by chunk, then gives the freed pages back
/// to the file system in steps ([`super::release_free_pages`]), until done or until `stop`
/// is set (a shutdown does not wait for a long backlog; the next run goes on). Every chunk
/// and every step is one writer job, so webhooks share its batches and wait for one step
/// at most.
pub async fn apply(
    writer: &Writer,
    rules: &[Rule],
    stop: &watch::Receiver<bool>,
) -> Result<Pruned, super::writer::WriteError> {
    let mut total = chunk_by_chunk(rules, stop, |rule| {
        writer.job(move |conn, _| prune_chunk(conn, &rule, SystemTime::now()))
    })
    .await?;
    while !*stop.borrow() {
        let released = writer
            .job(|conn, _| super::release_free_pages(conn))
            .await?;
        total.released_pages += released;
        if released == 0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    Ok(total)
}

/// Each rule's chunks, one `prune` call each, until a chunk finds nothing or `stop` is set;
/// webhooks get their turn between chunks.
async fn chunk_by_chunk<F, Fut>(
    rules: &[Rule],
    stop: &watch::Receiver<bool>,
    prune: F,
) -> Result<Pruned, super::writer::WriteError>
where
    F: Fn(Rule) -> Fut,
    Fut: std::future::Future<Output = Result<Pruned, super::writer::WriteError>>,
{
    let mut total = Pruned::default();
    for rule in rules {
        loop {
            if *stop.borrow() {
                return Ok(total);
            }
            let done = prune(rule.clone()).await?;
            total.add(done);
            if done.total() == 0 {
                break;
            }
            tokio::task::yield_now().await;
        }
    }
    Ok(total)
}

/// [`apply`] on a PostgreSQL inbox: chunk by chunk through its queue batcher (PostgreSQL
/// gives freed space back to itself; its autovacuum reuses it).
async fn apply_pg(
    inbox: &super::pg::Inbox,
    rules: &[Rule],
    stop: &watch::Receiver<bool>,
) -> Result<Pruned, super::writer::WriteError> {
    chunk_by_chunk(rules, stop, |rule| inbox.prune(rule)).await
}

/// `serve`'s maintenance: retention every `interval` (the first no later than
/// [`FIRST_RUN_AFTER`]), and on SQLite an offer of an idle WAL checkpoint every
/// [`CHECKPOINT_EVERY`]. With several replicas on PostgreSQL each runs it; their chunks
/// skip the rows another holds.
pub async fn run_periodically(
    store: super::Store,
    settings: Settings,
    interval: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut checkpoint = tokio::time::interval(CHECKPOINT_EVERY);
    checkpoint.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut prune = tokio::time::interval_at(
        tokio::time::Instant::now() + interval.min(FIRST_RUN_AFTER),
        interval,
    );
    prune.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = checkpoint.tick() => if let Some((writer, _)) = store.sqlite() {
                writer.checkpoint_if_idle().await;
            },
            _ = prune.tick() => match match &store {
                super::Store::Sqlite { writer, .. } => apply(writer, &settings.rules(), &stop).await,
                super::Store::Postgres(inbox) => apply_pg(inbox, &settings.rules(), &stop).await,
            } {
                Ok(p) if p.total() > 0 || p.released_pages > 0 => tracing::info!(
                    payloads = p.payloads, events = p.events, conflicts = p.conflicts,
                    attempts = p.attempts, order_keys = p.order_keys, recovery = p.recovery,
                    released_pages = p.released_pages, "retention applied"),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "retention failed; it will be tried again"),
            },
        }
    }
}
