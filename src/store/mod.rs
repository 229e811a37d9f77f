//! The inbox contract that `serve`'s receive path, delivery worker and admin listener use,
//! with its two implementations: the SQLite file (the single writer thread and read-only
//! connections) and a PostgreSQL database that several replicas share ([`super::pg`]).
//! Outside `store/`, nothing knows which one runs.
//!
//! Both keep the same promises: `ingest` answers only after the transaction holding the
//! event committed; identity is unique; a claim hands a delivery to one attempt at a time
//! under a lease; a result recorded after a newer claim does not undo it.

use std::collections::HashMap;

use super::commits::Commits;
use super::gaps::{self, Beat, Gap};
use super::ingest::{NewEvent, Stored};
use super::pause::{self, Paused};
use super::queue::{self, EventData, Finished, Recorded, Settled, Turn};
use super::read;
use super::sql::{self, Db};
use super::writer::{Health, WriteError, Writer};

#[derive(Clone)]
pub enum Store {
    Sqlite { writer: Writer, readers: read::Pool },
    Postgres(super::pg::Inbox),
}

/// What `/metrics` reads from the inbox.
#[derive(Debug, Default)]
pub struct Gauges {
    /// Delivery rows per state, of the states asked for.
    pub counts: Vec<(String, i64)>,
    /// When the oldest delivery still pending or in flight was created.
    pub oldest_pending: Option<String>,
    pub paused: Vec<Paused>,
    /// The SQLite file's (free pages, pages); none for PostgreSQL.
    pub pages: Option<(i64, i64)>,
}

impl Store {
    /// Stores one verified event; answers after its commit.
    pub async fn ingest(&self, event: NewEvent) -> Result<Stored, WriteError> {
        match self {
            Store::Sqlite { writer, .. } => writer.ingest(event).await,
            Store::Postgres(pg) => pg.ingest(event).await,
        }
    }

    /// Records an attempt and the delivery's next state (a turn's results one by one,
    /// after the turn's write failed).
    pub async fn finish(&self, finished: Finished) -> Result<Recorded, WriteError> {
        match self {
            Store::Sqlite { writer, .. } => writer.finish(finished).await,
            Store::Postgres(pg) => pg.finish(finished).await,
        }
    }

    /// A target loop's turn ([`Turn`]): its attempts' results, then a claim. On SQLite one
    /// writer job. On PostgreSQL the claim and the results go to the queue batcher
    /// together, so that they share a transaction and its commit (one after the other,
    /// the turn waited for two commits: BENCHMARKS.md, "PostgreSQL"), then one read of the
    /// claimed events. Their order within the transaction does not matter: a claim that
    /// runs after the results sees them, as on SQLite. The batcher runs each job alone
    /// when a batch fails, so each result's outcome is its own: a claim that fails when
    /// results went with it is reported in [`Settled::claim_failed`], not as the turn's
    /// error, which would make the loop record those results again.
    pub async fn settle(&self, turn: Turn) -> Result<Settled, WriteError> {
        match self {
            Store::Sqlite { writer, .. } => {
                writer
                    .job(move |conn, now| queue::settle(conn, &turn, now))
                    .await
            }
            Store::Postgres(pg) => {
                let Turn { results, claim } = turn;
                let mut settled = Settled::default();
                let mut look = None;
                // The claim's answer with what it asked for: the target, and how many.
                let claimed = async {
                    match claim {
                        Some(request) => {
                            let asked = (request.source.clone(), request.target.clone());
                            let limit = request.limit;
                            Some((pg.claim(request).await, asked, limit))
                        }
                        None => None,
                    }
                };
                let recorded =
                    futures_util::future::join_all(results.into_iter().map(|f| pg.finish(f)));
                let (claimed, recorded) = futures_util::future::join(claimed, recorded).await;
                settled.recorded = recorded;
                if let Some((claimed, (source, target), limit)) = claimed {
                    match claimed {
                        Ok(claims) => settled.claims = claims,
                        Err(e) if settled.recorded.is_empty() => return Err(e),
                        Err(e) => {
                            settled.claim_failed = Some(e);
                            return Ok(settled);
                        }
                    }
                    if settled.claims.taken() < limit {
                        look = Some((source, target));
                    }
                }
                let ids: Vec<i64> = settled.claims.claimed.iter().map(|c| c.event).collect();
                if !ids.is_empty() {
                    settled.events = pg.events(&ids).await;
                }
                if let Some((source, target)) = look {
                    settled.look = pg.look(&source, &target).await.ok();
                }
                Ok(settled)
            }
        }
    }

    /// Returns deliveries whose lease expired to the queue.
    pub async fn sweep(&self) -> Result<usize, WriteError> {
        match self {
            Store::Sqlite { writer, .. } => writer.sweep().await,
            Store::Postgres(pg) => pg.sweep().await,
        }
    }

    /// Marks dead the pending deliveries of these (source, target) pairs, targets a reload
    /// removed. Not on PostgreSQL: replicas in the middle of a rollout disagree about which
    /// targets exist, and one must not retire what the others deliver; there the operator
    /// retires a target removed everywhere with SQL (README, "More than one machine").
    pub async fn retire_targets(&self, pairs: Vec<(String, String)>) -> Result<usize, WriteError> {
        match self {
            Store::Sqlite { writer, .. } => {
                writer
                    .job(move |conn, now| queue::retire_targets(conn, &pairs, now))
                    .await
            }
            Store::Postgres(_) => Ok(0),
        }
    }

    /// Marks dead the pending deliveries of every target not in `keep` (serve's start and
    /// reload). Not on PostgreSQL, for the reason [`Store::retire_targets`] gives.
    pub async fn retire_unknown_targets(
        &self,
        keep: Vec<(String, String)>,
    ) -> Result<usize, WriteError> {
        match self {
            Store::Sqlite { writer, .. } => {
                writer
                    .job(move |conn, now| queue::retire_unknown_targets(conn, &keep, now))
                    .await
            }
            Store::Postgres(_) => Ok(0),
        }
    }

    /// At serve's start: the window since each source was last seen receiving is recorded
    /// as a gap ([`gaps::start`]; with replicas, only while none was, [`gaps::start_replica`]),
    /// and from now on it is receiving. `replica` names this process among replicas.
    ///
    /// With replicas, a start that found others live returns them too, to be confirmed
    /// after [`gaps::LIVE`] ([`Store::confirm_receiving`]).
    pub async fn start_receiving(
        &self,
        replica: String,
        sources: Vec<String>,
    ) -> anyhow::Result<(Vec<Gap>, Vec<gaps::Unconfirmed>)> {
        match self {
            Store::Sqlite { writer, .. } => Ok((
                writer
                    .job(move |conn, now| gaps::start(conn, &sources, now))
                    .await?,
                Vec::new(),
            )),
            Store::Postgres(_) => {
                self.change(move |db, now| gaps::start_replica(db, &replica, &sources, now))
                    .await
            }
        }
    }

    /// See [`gaps::confirm`]: the gap found, if the replicas that looked live were not.
    pub async fn confirm_receiving(&self, u: gaps::Unconfirmed) -> anyhow::Result<Option<Gap>> {
        self.change(move |db, _| gaps::confirm(db, &u)).await
    }

    /// A heartbeat ([`gaps::beat`]), and with `stopping` the clean-stop marker of these
    /// sources. On SQLite a quiet job: it does not keep the idle checkpoint from running.
    pub async fn beat(
        &self,
        replica: String,
        beats: Vec<Beat>,
        stopping: Option<Vec<String>>,
    ) -> anyhow::Result<Vec<Gap>> {
        match self {
            Store::Sqlite { writer, .. } => Ok(writer
                .quiet_job(move |conn, now| {
                    let recorded = gaps::beat(conn, &beats, now)?;
                    if let Some(names) = &stopping {
                        gaps::stop(conn, names, now)?;
                    }
                    Ok(recorded)
                })
                .await?),
            Store::Postgres(_) => {
                self.change(move |db, now| {
                    let recorded = gaps::beat_replica(db, &replica, &beats, now)?;
                    if let Some(names) = &stopping {
                        gaps::stop_replica(db, &replica, names, now)?;
                    }
                    Ok(recorded)
                })
                .await
            }
        }
    }

    /// Stores each of `events` whose identity is not stored yet (alert notifications,
    /// judged again after a restart or by another replica). On SQLite the check and the
    /// insert are one writer job; on PostgreSQL the check is a read and each is ingested as
    /// a webhook is, so two replicas storing at once store one and quarantine the other.
    pub async fn store_unless_known(&self, events: Vec<NewEvent>) -> anyhow::Result<()> {
        const KNOWN: &str =
            "SELECT 1 FROM events WHERE source = ?1 AND account = ?2 AND event_id = ?3";
        if let Store::Sqlite { writer, .. } = self {
            writer
                .job(move |conn, now| {
                    for e in &events {
                        let params = rusqlite::params![&*e.source, &*e.account, e.event_id];
                        if !conn.prepare_cached(KNOWN)?.exists(params)? {
                            super::ingest::store(conn, e, now)?;
                        }
                    }
                    Ok(())
                })
                .await?;
            return Ok(());
        }
        for e in events {
            let (source, account, id) = (e.source.clone(), e.account.clone(), e.event_id.clone());
            let known = self
                .read(move |db| {
                    Ok(db
                        .row(KNOWN, &[&&*source, &&*account, &id], |_| Ok(()))?
                        .is_some())
                })
                .await?;
            if !known {
                self.ingest(e).await?;
            }
        }
        Ok(())
    }

    /// Whether other processes write this inbox too (replicas on PostgreSQL): what one
    /// learns (a handshake's secret) the others must read again.
    pub fn shared(&self) -> bool {
        matches!(self, Store::Postgres(_))
    }

    /// Whether a target is paused, and when its next claimable delivery is due (inbox text).
    pub async fn look(
        &self,
        source: &str,
        target: &str,
    ) -> Result<(Option<Paused>, Option<String>), String> {
        match self {
            Store::Sqlite { readers, .. } => {
                let (pool, source, target) =
                    (readers.clone(), source.to_owned(), target.to_owned());
                tokio::task::spawn_blocking(move || {
                    let conn = pool.get().map_err(|e| e.to_string())?;
                    let paused = pause::all(super::sql::Db::Sqlite(&conn))
                        .map_err(|e| e.to_string())?
                        .into_iter()
                        .find(|p| p.source == source && p.target == target);
                    let due =
                        queue::next_due(&conn, &source, &target).map_err(|e| e.to_string())?;
                    Ok((paused, due))
                })
                .await
                .map_err(|e| e.to_string())?
            }
            Store::Postgres(pg) => pg.look(source, target).await,
        }
    }

    /// The events with these row ids, by id (a missing id is not in the map).
    pub async fn events(&self, ids: Vec<i64>) -> Result<HashMap<i64, EventData>, String> {
        match self {
            Store::Sqlite { readers, .. } => {
                let pool = readers.clone();
                tokio::task::spawn_blocking(move || {
                    let conn = pool.get().map_err(|e| e.to_string())?;
                    queue::events(&conn, &ids).map_err(|e| e.to_string())
                })
                .await
                .map_err(|e| e.to_string())?
            }
            Store::Postgres(pg) => pg.events(&ids).await,
        }
    }

    /// The figures `/metrics` shows. The delivery counts are of the backlog's states
    /// ([`crate::metrics::BACKLOG_STATES`]) only, unless `settled` asks for every state too,
    /// which walks every delivery row.
    pub async fn gauges(&self, settled: bool) -> Result<Gauges, String> {
        match self {
            Store::Sqlite { readers, .. } => {
                let pool = readers.clone();
                tokio::task::spawn_blocking(move || {
                    let conn = pool.get().map_err(|e| e.to_string())?;
                    let s = |e: rusqlite::Error| e.to_string();
                    let p = |e: super::sql::Error| e.to_string();
                    let (counts, oldest_pending) = read::gauges(&conn, settled).map_err(s)?;
                    Ok(Gauges {
                        counts,
                        oldest_pending,
                        paused: pause::all(super::sql::Db::Sqlite(&conn)).map_err(p)?,
                        pages: Some(super::page_counts(&conn).map_err(s)?),
                    })
                })
                .await
                .map_err(|e| e.to_string())?
            }
            Store::Postgres(pg) => pg.gauges(settled).await,
        }
    }

    /// Waits until the store has drained what was queued before this call.
    pub async fn ping(&self) -> Result<(), WriteError> {
        match self {
            Store::Sqlite { writer, .. } => writer.ping().await,
            Store::Postgres(pg) => pg.ping().await,
        }
    }

    /// Whether the last commit succeeded.
    pub fn health(&self) -> &Health {
        match self {
            Store::Sqlite { writer, .. } => writer.health(),
            Store::Postgres(pg) => pg.health(),
        }
    }

    /// Where commits of new events are announced (within this process).
    pub fn commits(&self) -> &Commits {
        match self {
            Store::Sqlite { writer, .. } => writer.commits(),
            Store::Postgres(pg) => pg.commits(),
        }
    }

    /// Runs `read` on a connection that reads the inbox, the operator's SQL (the web
    /// inbox's pages): on SQLite a read-only one next to the writer.
    pub async fn read<T, F>(&self, read: F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(Db) -> anyhow::Result<T> + Send + 'static,
    {
        let run: Box<dyn FnOnce() -> anyhow::Result<T> + Send> = match self {
            Store::Sqlite { readers, .. } => {
                let pool = readers.clone();
                Box::new(move || {
                    let conn = pool.get()?;
                    read(Db::Sqlite(&conn))
                })
            }
            Store::Postgres(pg) => {
                let pool = pg.operator().clone();
                Box::new(move || pool.with(read))
            }
        };
        tokio::task::spawn_blocking(run).await?
    }

    /// Runs `change` in one write transaction, with the time as inbox text (the web
    /// inbox's actions): on SQLite as a writer job, among the webhooks' batches. The
    /// caller wakes the delivery loops ([`Store::commits`]) when it changed something.
    pub async fn change<T, F>(&self, change: F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: FnMut(Db, &str) -> Result<T, sql::Error> + Send + 'static,
    {
        let mut change = change;
        match self {
            Store::Sqlite { writer, .. } => Ok(writer
                .job(move |conn, now| Ok(change(Db::Sqlite(conn), now)?))
                .await?),
            Store::Postgres(pg) => {
                let pool = pg.operator().clone();
                tokio::task::spawn_blocking(move || {
                    let now = crate::clock::iso_now();
                    pool.with(|db| db.write(|tx| Ok(change(tx, &now)?)))
                })
                .await?
            }
        }
    }

    /// The SQLite writer and read pool, for what has a SQLite way of its own (the
    /// heartbeat's quiet jobs, the WAL checkpoint, start-up's retiring of removed targets,
    /// alert notifications in one job, gaps at start).
    pub fn sqlite(&self) -> Option<(&Writer, &read::Pool)> {
        match self {
            Store::Sqlite { writer, readers } => Some((writer, readers)),
            Store::Postgres(_) => None,
        }
    }
}
