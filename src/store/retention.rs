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

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rusqlite::{Connection, params};
use serde::Serialize;
use tokio::sync::watch;

use super::{Store, WriteError};
use crate::clock;
use crate::config::Source;
use crate::store::db::{Db, Dialect};

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
                source: crate::event::ALERT_SOURCE.to_owned(),
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

/// The attempts of event `?1` that [`Kind::Attempts`] would remove for their age (`?2` its
/// cut-off). An identity row takes its deliveries' attempts with it, before or after they
/// come due; those that were due are counted as attempts, as a dry run counts them.
const AGED_ATTEMPTS_OF_EVENT: &str = "SELECT count(*) FROM attempts a
    JOIN deliveries d ON d.id = a.delivery
   WHERE d.event = ?1 AND a.started_at < ?2 AND d.state NOT IN ('pending', 'in_flight')";

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
    /// The keys of the rows due for removal on PostgreSQL (its dry run counts these;
    /// its prune, `postgres::queue`, takes the same rows), and on SQLite for the kinds that are
    /// not walked by id ([`Kind::walked`]): `?1` is the source, `?2` the cut-off.
    fn candidates(self, dialect: Dialect) -> String {
        let rowid = match dialect {
            Dialect::Sqlite => "rowid",
            Dialect::Postgres => "1",
        };
        match self {
            Kind::Payloads => format!(
                "SELECT e.id FROM events e
                  WHERE e.source = ?1 AND e.received_at < ?2 AND e.pruned_at IS NULL
                    AND {PAYLOAD_DONE}"
            ),
            Kind::Events => format!(
                "SELECT e.id FROM events e
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

    /// On SQLite, payloads and identity rows are found by walking `events` in id order (it
    /// has no index by time, see [`super::timeline`]): this is the test of one row, `?1`
    /// the source, `?2` the cut-off. One text for the prune and the dry run, so the two
    /// never disagree. (`+e.source`: through the identity index, the dry run would read
    /// every row of the source rather than the range of ids.)
    fn walked(self) -> Option<String> {
        match self {
            Kind::Payloads => Some(format!(
                "+e.source = ?1 AND e.received_at < ?2 AND e.pruned_at IS NULL AND {PAYLOAD_DONE}"
            )),
            Kind::Events => Some(format!(
                "+e.source = ?1 AND e.received_at < ?2 AND {FINISHED}"
            )),
            _ => None,
        }
    }

    /// Where a walk may start: below the oldest payload every payload is gone.
    fn walk_floor(self, conn: &Connection) -> rusqlite::Result<i64> {
        match self {
            Kind::Payloads => conn
                .prepare_cached("SELECT coalesce(min(event), 0) FROM payloads")?
                .query_row([], |r| r.get(0)),
            _ => Ok(0),
        }
    }

    /// The statement that removes at most [`CHUNK`] of them (`?3`); the walked kinds go by
    /// [`walk_chunk`].
    fn removal(self) -> Option<String> {
        let chunk = format!("{} LIMIT ?3", self.candidates(Dialect::Sqlite));
        Some(match self {
            Kind::Payloads | Kind::Events => return None,
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

/// How far one source's walks through `events` went ([`Kind::walked`]): the next id
/// each looks at. Every row below it was looked at, and pruned if it was due then. A row
/// that was not (a delivery still pending, a clock stepped back) is looked at again when
/// the walk starts over: [`Walks`] starts them over once a day, the CLI at each run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Walk {
    payloads: i64,
    events: i64,
    /// Both walks reached the rows not yet due, in the last chunk.
    pub caught_up: bool,
}

impl Walk {
    /// A walk with nothing left: what a chunk that needs no walk (PostgreSQL's) returns.
    pub fn done() -> Walk {
        Walk {
            caught_up: true,
            ..Walk::default()
        }
    }
}

/// `serve`'s walks, one per source, kept between retention runs so that each run looks
/// only at the rows that became due since the last (a pass over every row kept would grow
/// with the inbox), and started over every [`WALKS_START_OVER`].
#[derive(Clone, Default)]
pub struct Walks(Arc<std::sync::Mutex<WalksState>>);

#[derive(Default)]
struct WalksState {
    by_source: HashMap<String, Walk>,
    /// When they last started over.
    started: Option<std::time::Instant>,
}

/// How often [`Walks`] start over from the oldest row: the longest a payload whose
/// delivery was still pending at its cut-off outlives it once it is delivered.
pub const WALKS_START_OVER: Duration = Duration::from_secs(86_400);

impl Walks {
    fn take(&self, source: &str) -> Walk {
        let mut w = self.0.lock().expect("no panics while holding the lock");
        let now = std::time::Instant::now();
        if w.started
            .is_none_or(|t| now.duration_since(t) >= WALKS_START_OVER)
        {
            *w = WalksState {
                by_source: HashMap::new(),
                started: Some(now),
            };
        }
        w.by_source.get(source).copied().unwrap_or_default()
    }

    fn put(&self, source: &str, walk: Walk) {
        let mut w = self.0.lock().expect("no panics while holding the lock");
        w.by_source.insert(source.to_owned(), walk);
    }
}

/// One chunk of work for `rule`: at most [`CHUNK`] rows of each kind (looked at, for the
/// walked kinds). Returns what it did; zero everywhere with `walk.caught_up` means the rule
/// is applied.
pub fn prune_chunk(
    conn: &Connection,
    rule: &Rule,
    now: SystemTime,
    walk: &mut Walk,
) -> rusqlite::Result<Pruned> {
    let mut done = Pruned::default();
    walk.caught_up = true;
    for kind in KINDS {
        let cutoff = kind.cutoff(rule, now);
        let n = match kind.removal() {
            None => {
                let at = match kind {
                    Kind::Payloads => &mut walk.payloads,
                    _ => &mut walk.events,
                };
                let attempts_cutoff = Kind::Attempts.cutoff(rule, now);
                let (n, caught_up, attempts) =
                    walk_chunk(conn, kind, &rule.source, &cutoff, &attempts_cutoff, now, at)?;
                walk.caught_up &= caught_up;
                done.attempts += attempts;
                n
            }
            Some(sql) => conn
                .prepare_cached(&sql)?
                .execute(params![rule.source, cutoff, CHUNK])?,
        };
        kind.count_into(&mut done, i64::try_from(n).unwrap_or(i64::MAX));
    }
    Ok(done)
}

/// Looks at up to [`CHUNK`] rows of `events` from `*at` up to the cut-off's boundary, and
/// removes the payloads or the identity rows (with their deliveries and attempts) of those
/// that are due. Returns how many it removed, whether it reached the boundary, and how
/// many of the attempts that went with the identity rows were past `attempts_cutoff`: those
/// a dry run counts as attempts ([`Kind::Attempts`]), so that the two reports agree.
fn walk_chunk(
    conn: &Connection,
    kind: Kind,
    source: &str,
    cutoff: &str,
    attempts_cutoff: &str,
    now: SystemTime,
    at: &mut i64,
) -> rusqlite::Result<(usize, bool, i64)> {
    let test = kind.walked().expect("a walked kind");
    let end = super::sqlite::timeline::first_id_at(conn, cutoff)?;
    // Ids are given from the highest one left: once every row was pruned they start
    // again from 1, below where the walk stopped.
    let next_id: i64 = conn
        .prepare_cached("SELECT coalesce(max(id), 0) + 1 FROM events")?
        .query_row([], |r| r.get(0))?;
    if *at > next_id {
        *at = 0;
    }
    let from = (*at).max(kind.walk_floor(conn)?);
    if from >= end {
        *at = from;
        return Ok((0, true, 0));
    }
    let looked: Vec<(i64, bool)> = conn
        .prepare_cached(&format!(
            "SELECT e.id, {test} FROM events e
              WHERE e.id >= ?3 AND e.id < ?4 ORDER BY e.id LIMIT {CHUNK}"
        ))?
        .query_map(params![source, cutoff, from, end], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let reached = looked.len() < CHUNK as usize;
    *at = match looked.last() {
        Some((id, _)) if !reached => id + 1,
        _ => end,
    };
    let due = looked.iter().filter(|(_, due)| *due).map(|(id, _)| id);
    let mut n = 0;
    let mut aged_attempts = 0;
    match kind {
        Kind::Payloads => {
            let stamp = clock::iso(now);
            let mut drop_payload = conn.prepare_cached("DELETE FROM payloads WHERE event = ?1")?;
            let mut mark = conn.prepare_cached("UPDATE events SET pruned_at = ?2 WHERE id = ?1")?;
            for id in due {
                drop_payload.execute([id])?;
                mark.execute(params![id, stamp])?;
                n += 1;
            }
        }
        _ => {
            let mut aged = conn.prepare_cached(AGED_ATTEMPTS_OF_EVENT)?;
            let mut delete = conn.prepare_cached("DELETE FROM events WHERE id = ?1")?;
            for id in due {
                aged_attempts +=
                    aged.query_row(params![id, attempts_cutoff], |r| r.get::<_, i64>(0))?;
                n += delete.execute([id])?;
            }
        }
    }
    Ok((n, reached, aged_attempts))
}

/// What [`prune_chunk`] (or PostgreSQL's prune) would do for `rule`, counted in full (a
/// dry run).
pub fn count(db: Db, rule: &Rule, now: SystemTime) -> Result<Pruned, crate::store::db::DbError> {
    let mut would = Pruned::default();
    for kind in KINDS {
        let cutoff = kind.cutoff(rule, now);
        let n = match (db, kind.walked()) {
            (Db::Sqlite(conn), Some(test)) => conn
                .prepare_cached(&format!(
                    "SELECT count(*) FROM events e WHERE e.id >= ?3 AND e.id < ?4 AND {test}"
                ))?
                .query_row(
                    params![
                        rule.source,
                        cutoff,
                        kind.walk_floor(conn)?,
                        super::sqlite::timeline::first_id_at(conn, &cutoff)?
                    ],
                    |r| r.get(0),
                )?,
            _ => db.value(
                &format!(
                    "SELECT count(*) FROM ({}) AS due",
                    kind.candidates(db.dialect())
                ),
                &[&rule.source, &cutoff],
            )?,
        };
        kind.count_into(&mut would, n);
    }
    Ok(would)
}

/// Applies every rule, chunk by chunk, then gives the freed pages back to the file system
/// in steps, until done or until `stop` is set (a shutdown does not wait for a long
/// backlog; the next run goes on). Every chunk and every step is one short write among the
/// webhooks' batches, so they wait for one step at most.
pub async fn apply(
    store: &Store,
    rules: &[Rule],
    walks: &Walks,
    stop: &watch::Receiver<bool>,
) -> Result<Pruned, WriteError> {
    let mut total = chunk_by_chunk(rules, stop, |rule| async move {
        let walk = walks.take(&rule.source);
        let source = rule.source.clone();
        let (done, walk) = store.prune_chunk(rule, SystemTime::now(), walk).await?;
        walks.put(&source, walk);
        Ok((done, walk.caught_up))
    })
    .await?;
    while !*stop.borrow() {
        let released = store.release_free_pages().await?;
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
) -> Result<Pruned, WriteError>
where
    F: Fn(Rule) -> Fut,
    Fut: std::future::Future<Output = Result<(Pruned, bool), WriteError>>,
{
    let mut total = Pruned::default();
    for rule in rules {
        loop {
            if *stop.borrow() {
                return Ok(total);
            }
            let (done, caught_up) = prune(rule.clone()).await?;
            total.add(done);
            if done.total() == 0 && caught_up {
                break;
            }
            tokio::task::yield_now().await;
        }
    }
    Ok(total)
}

/// `serve`'s maintenance: retention every `interval` (the first no later than
/// [`FIRST_RUN_AFTER`]), and on SQLite an offer of an idle WAL checkpoint every
/// [`CHECKPOINT_EVERY`]. With several replicas on PostgreSQL each runs it; their chunks
/// skip the rows another holds.
pub async fn run_periodically(
    store: Store,
    settings: Settings,
    interval: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let walks = Walks::default();
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
            _ = checkpoint.tick() => store.checkpoint_if_idle().await,
            _ = prune.tick() => match apply(&store, &settings.rules(), &walks, &stop).await {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Synchronous;
    use crate::store::sqlite::schema::open_writer;

    const DAY: Duration = Duration::from_secs(86_400);

    /// `n` events of `source`, received `age` ago, each with a payload and,
    /// when `state` is given, one delivery in that state.
    fn receive(c: &Connection, source: &str, n: usize, age: Duration, state: Option<&str>) {
        let t = clock::iso(SystemTime::now() - age);
        for _ in 0..n {
            let id: i64 = c
                .query_row(
                    "INSERT INTO events (source, event_id, sha256, size, received_at)
                     VALUES (?1, 'e' || (SELECT coalesce(max(id), 0) + 1 FROM events), 'x', 1, ?2)
                     RETURNING id",
                    params![source, t],
                    |r| r.get(0),
                )
                .unwrap();
            c.execute(
                "INSERT INTO payloads (event, body, headers) VALUES (?1, 'b', '[]')",
                [id],
            )
            .unwrap();
            if let Some(state) = state {
                c.execute(
                    "INSERT INTO deliveries (event, source, target, idempotency_key, state,
                                             next_attempt_at, created_at, updated_at)
                     VALUES (?1, ?2, 'app', 'k' || ?1, ?3, ?4, ?4, ?4)",
                    params![id, source, state, t],
                )
                .unwrap();
            }
        }
    }

    fn rule(source: &str, keep_payload: Duration, keep_identity: Duration) -> Rule {
        Rule {
            source: source.into(),
            keep_payload,
            keep_identity,
        }
    }

    /// Chunks until the rule is applied, as `serve` and the CLI run them.
    fn apply_rule(c: &Connection, rule: &Rule, walk: &mut Walk) -> (Pruned, usize) {
        let (mut total, mut chunks) = (Pruned::default(), 0);
        loop {
            let done = prune_chunk(c, rule, SystemTime::now(), walk).unwrap();
            total.add(done);
            chunks += 1;
            if done.total() == 0 && walk.caught_up {
                return (total, chunks);
            }
        }
    }

    fn count(c: &Connection, sql: &str) -> i64 {
        c.query_row(sql, [], |r| r.get(0)).unwrap()
    }

    #[test]
    fn walks_prune_each_source_by_its_own_windows_and_step_past_what_must_stay() {
        let dir = tempfile::tempdir().unwrap();
        let c = open_writer(&dir.path().join("inbox.db"), Synchronous::Full, true).unwrap();
        // Oldest first, as commits give ids: a delivery still pending 40 days on, more
        // rows than a chunk of both sources, and a day of recent ones.
        receive(&c, "a", 1, 40 * DAY, Some("pending"));
        receive(&c, "a", 700, 20 * DAY, Some("delivered"));
        receive(&c, "b", 600, 20 * DAY, None);
        receive(&c, "a", 3, 15 * DAY, Some("dead"));
        receive(&c, "a", 5, DAY / 2, None);
        receive(&c, "b", 5, DAY / 2, None);
        let a = rule("a", 10 * DAY, 30 * DAY);

        let dry = super::count(Db::Sqlite(&c), &a, SystemTime::now()).unwrap();
        let mut walk = Walk::default();
        let (done, chunks) = apply_rule(&c, &a, &mut walk);
        assert_eq!(
            done.payloads, 700,
            "a's delivered payloads older than 10 days"
        );
        assert_eq!(done.events, 0, "the 40-day-old identity is still pending");
        assert_eq!(
            (dry.payloads, dry.events),
            (done.payloads, done.events),
            "the dry run agrees"
        );
        assert!(
            chunks >= 3,
            "a chunk looks at {CHUNK} rows at most: {chunks} chunks"
        );
        let kept = "SELECT count(*) FROM payloads p JOIN events e ON e.id = p.event
                     WHERE e.source = 'a'";
        assert_eq!(
            count(&c, kept),
            1 + 3 + 5,
            "the pending, dead and recent payloads stay"
        );
        let b = rule("b", 30 * DAY, 400 * DAY);
        assert_eq!(
            apply_rule(&c, &b, &mut Walk::default()).0.total(),
            0,
            "b keeps 30 days"
        );
        assert_eq!(count(&c, "SELECT count(*) FROM payloads"), 1 + 3 + 5 + 605);

        // The kept walk goes on from where it stopped: nothing more to look at.
        let (again, chunks) = apply_rule(&c, &a, &mut walk);
        assert_eq!((again.total(), chunks), (0, 1));

        // Once the pending delivery is delivered, a walk started over takes its payload
        // and, past keep_identity, the identity with its delivery.
        c.execute(
            "UPDATE deliveries SET state = 'delivered' WHERE state = 'pending'",
            [],
        )
        .unwrap();
        let (done, _) = apply_rule(&c, &a, &mut Walk::default());
        assert_eq!((done.payloads, done.events), (1, 1));
        assert_eq!(
            count(
                &c,
                "SELECT count(*) FROM deliveries WHERE idempotency_key = 'k1'"
            ),
            0
        );
        assert_eq!(
            count(&c, "SELECT count(*) FROM events WHERE source = 'a'"),
            700 + 3 + 5
        );

        // Once every row is gone, ids start from 1 again, below where the kept walk
        // stopped: it starts over rather than pass them by.
        c.execute_batch("DELETE FROM events").unwrap();
        receive(&c, "a", 2, 40 * DAY, Some("delivered"));
        let (done, _) = apply_rule(&c, &a, &mut walk);
        assert_eq!((done.payloads, done.events), (2, 2));
    }

    #[test]
    fn the_newest_event_per_source_outlives_its_rows_and_counts_read_the_window() {
        use crate::store::sqlite::ingest::store;
        use crate::store::{NewEvent, Origin};
        let dir = tempfile::tempdir().unwrap();
        let c = open_writer(&dir.path().join("inbox.db"), Synchronous::Full, true).unwrap();
        let ingest = |source: &str, id: &str, at: &str| {
            let event = NewEvent {
                source: source.into(),
                account: "".into(),
                event_id: id.into(),
                sha256_hex: "x".into(),
                body: bytes::Bytes::from_static(b"{}"),
                body_is_text: true,
                headers: "[]".into(),
                event_type: None,
                provider_time: None,
                deliveries: Vec::new(),
                order: None,
                remote_addr: "127.0.0.1".into(),
                origin: Origin::Webhook,
                bookkeeping: &[],
                memory: None,
            };
            store(&c, &event, at).unwrap();
        };
        let now = SystemTime::now();
        let ago = |d: Duration| clock::iso(now - d);
        ingest("a", "old", &ago(3 * DAY));
        ingest("a", "older-but-later", &ago(4 * DAY));
        ingest("b", "1", &ago(2 * DAY));
        // Within one minute: the row keeps the first, the window has the newest.
        let (first, newest) = ("2026-12-01T10:00:01.000Z", "2026-12-01T10:00:59.000Z");
        ingest("c", "1", first);
        ingest("c", "2", newest);
        let latest = |source: &str| -> String {
            c.query_row(
                "SELECT received_at FROM latest_received WHERE source = ?1",
                [source],
                |r| r.get(0),
            )
            .unwrap()
        };
        assert_eq!(latest("c"), first, "moved on once a minute");
        ingest("b", "2", &ago(Duration::from_secs(90)));
        ingest("b", "3", &ago(Duration::from_secs(30)));
        let names = ["a".into(), "b".into(), "c".into(), "d".into()];
        let stats = |c: &Connection, since: &str| {
            crate::store::stats::sources(Db::Sqlite(c), &names, since)
                .unwrap()
                .into_iter()
                .map(|s| (s.events, s.last_received))
                .collect::<Vec<_>>()
        };
        let hour = ago(Duration::from_secs(3600));
        let before = stats(&c, &hour);
        assert_eq!(
            before,
            [
                (0, Some(ago(3 * DAY))),
                (2, Some(ago(Duration::from_secs(30)))),
                (0, Some(first.into())),
                (0, None)
            ],
            "the window holds b's last two; a's newest is the later time, not the later row"
        );
        // Newest within the window, though the row is a minute behind.
        assert_eq!(
            stats(&c, "2026-12-01T10:00:00.000Z")[2],
            (2, Some(newest.into()))
        );
        // Every identity of `a` goes; its newest time stays known, for the silence alert.
        apply_rule(&c, &rule("a", DAY, DAY), &mut Walk::default());
        assert_eq!(
            count(&c, "SELECT count(*) FROM events WHERE source = 'a'"),
            0
        );
        assert_eq!(stats(&c, &hour), before);
    }
}
