//! The inbox in PostgreSQL (`[store] backend = "postgres"`): the same contract as the SQLite
//! inbox, for several stateless replicas sharing one database.
//!
//! Each replica keeps three kinds of connection:
//! - one that commits received events, in batches (group commit, as the SQLite writer):
//!   the requests waiting while one transaction commits go together into the next, each
//!   answered only after its transaction committed (`synchronous_commit = on`);
//! - one for the delivery queue (claims, attempts' results, the sweep), batched the same way
//!   so that a busy worker does not pay a commit per result;
//! - `pool` for reads (what is due, the events to send, the gauges), which need no
//!   transaction and are pipelined.
//!
//! Across replicas, PostgreSQL decides: identity is a unique constraint (two replicas
//! receiving the same event at once store it once, the second hears "duplicate"), claims
//! take their rows `FOR NO KEY UPDATE SKIP LOCKED`, an ordered target's under its advisory
//! lock (see [`queue`]), and migrations run under an advisory lock, so replicas starting
//! together migrate once.

mod batch;
mod ingest;
mod queue;
pub mod schema;
pub mod session;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, oneshot};
use tokio_postgres::Client;

use super::gaps::{self, Beat, Gap, Unconfirmed};
use super::model::QUEUE_CAPACITY;
use super::retention::{Pruned, Rule, Walk};
use super::{
    ClaimRequest, Claims, CommitHealth, Commits, Db, DbError, EventData, Finished, Gauges, Look,
    NewEvent, Recorded, Settled, Stored, Turn, WriteError,
};
use crate::config::PgStore;
use crate::metrics::Metrics;
use crate::pgconn::{Connector, Shared};
pub use schema::{StartError, migrate, require_version, schema_version};

/// How long a read may take (what is due, the events to send, the gauges): a delivery
/// loop waiting on a dead server must turn again, or the watchdog takes it for stuck.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// How long connecting may take. A server that does not answer within it is down: requests
/// hear 503 while the next batch tries again.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The session settings of every connection to the inbox. A commit that returns is durable
/// whatever the server's default says; a statement or lock wait that runs long ends with an
/// error within the callers' commit wait (10 s), so requests hear 503 rather than hang.
/// No JIT: its compiling costs tens of milliseconds at each execution of a statement whose
/// estimate crosses `jit_above_cost`, as a claim over a long backlog's does (198 ms without
/// it, 333 with, for a key with 20,000 waiting versions), and no statement here runs long
/// enough to win that back.
macro_rules! session {
    () => {
        "-c synchronous_commit=on -c statement_timeout=5000 -c lock_timeout=5000 \
         -c idle_in_transaction_session_timeout=30000 -c timezone=UTC -c jit=off"
    };
}
const SESSION: &str = session!();

/// The sessions of the two batchers (received events; claims and results), on top of
/// [`SESSION`]. Their statements are prepared once and run for as long as the session
/// lives, so PostgreSQL soon runs each on a generic plan, costed on the table sizes of that
/// moment. One costed while `attempts` held a page or two scanned it for every attempt
/// recorded, and kept doing so as it grew (until autovacuum's next `ANALYZE`): forwarding
/// fell from 1,900 to 850 a second within 12 s, against a steady 5,000 without. Every
/// statement they prepare reads by an index, so a sequential scan is never the plan
/// wanted; retention's chunks, planned afresh each time, allow scans for their job.
const BATCH_SESSION: &str = concat!(session!(), " -c enable_seqscan=off");

pub(crate) use batch::BATCH_TIMEOUT;
pub use ingest::numeric_text;
pub(crate) use queue::OUTDATED;
pub use queue::claim_statement;

/// A handle to one replica's connections to the inbox. Cheap to clone.
#[derive(Clone)]
pub struct PostgresStore {
    ingest: mpsc::Sender<batch::Op<ingest::Job>>,
    queue: mpsc::Sender<batch::Op<queue::Job>>,
    readers: Arc<Readers>,
    health: Arc<CommitHealth>,
    commits: Arc<Commits>,
    /// The web inbox's blocking connections (the operator commands' SQL).
    operator: Arc<PgPool>,
}

impl PostgresStore {
    /// Connects, migrates, and starts the batchers. Fails (and `serve` with it) when the
    /// server cannot be reached or the schema is newer than this binary: a replica that
    /// cannot store anything must not look ready.
    pub async fn start(
        config: &PgStore,
        metrics: Arc<Metrics>,
    ) -> Result<PostgresStore, StartError> {
        PostgresStore::start_with(config, metrics, true).await
    }

    /// [`PostgresStore::start`] for an operator's command (`prune`, `recover`): the schema must be
    /// this binary's already; a command never migrates what a fleet of replicas runs on.
    pub async fn for_command(
        config: &PgStore,
        metrics: Arc<Metrics>,
    ) -> Result<PostgresStore, StartError> {
        PostgresStore::start_with(config, metrics, false).await
    }

    async fn start_with(
        config: &PgStore,
        metrics: Arc<Metrics>,
        migrating: bool,
    ) -> Result<PostgresStore, StartError> {
        let connector_with = |session| {
            Connector::new(
                &config.url,
                config.password.as_ref(),
                &config.tls,
                CONNECT_TIMEOUT,
                session,
            )
            .map_err(|e| StartError::Connect(format!("{e:#}")))
        };
        let connector = connector_with(SESSION)?;
        let mut first = connector
            .connect()
            .await
            .map_err(|e| StartError::Connect(crate::pgconn::describe(&e)))?;
        if migrating {
            migrate(&mut first).await?;
        } else {
            let exists: bool = first
                .query_one("SELECT to_regclass('schema_migrations') IS NOT NULL", &[])
                .await?
                .get(0);
            let found: i64 = if exists {
                first
                    .query_one(
                        "SELECT coalesce(max(version), 0)::bigint FROM schema_migrations",
                        &[],
                    )
                    .await?
                    .get(0)
            } else {
                0
            };
            require_version(found).map_err(|e| StartError::Db(format!("{e:#}")))?;
        }
        // The first session has done its part (the migrations, the version); the batchers
        // open their own, with their settings.
        drop(first);
        let batcher = connector_with(BATCH_SESSION)?;
        let health = Arc::new(CommitHealth {
            last_commit_ok: AtomicBool::new(true),
        });
        let (ingest, ingest_rx) = mpsc::channel(QUEUE_CAPACITY);
        let (queue, queue_rx) = mpsc::channel(QUEUE_CAPACITY);
        tokio::spawn(batch::run(
            "ingest",
            batcher.clone(),
            ingest_rx,
            ingest::Batch {
                metrics: metrics.clone(),
            },
            Some(health.clone()),
        ));
        tokio::spawn(batch::run("queue", batcher, queue_rx, queue::Batch, None));
        Ok(PostgresStore {
            ingest,
            queue,
            readers: Arc::new(Readers::new(connector, config.pool)),
            health,
            commits: Arc::default(),
            operator: Arc::new(PgPool::new(config.clone())),
        })
    }

    /// Connections for what an operator reads and steers (the web inbox).
    pub fn operator(&self) -> &Arc<PgPool> {
        &self.operator
    }

    pub async fn claim(&self, request: ClaimRequest) -> Result<Claims, WriteError> {
        batch::submit(&self.queue, true, |reply| {
            queue::Job::Claim(request, batch::Slot::new(reply))
        })
        .await
    }
}

impl super::Backend for PostgresStore {
    /// Answers once its transaction committed.
    async fn ingest(&self, event: NewEvent) -> Result<Stored, WriteError> {
        let source = event.source.clone();
        let stored =
            batch::submit(&self.ingest, false, |reply| ingest::Job::new(event, reply)).await;
        if matches!(stored, Ok(Stored::New)) {
            self.commits.committed(&source);
        }
        stored
    }

    async fn finish(&self, finished: Finished) -> Result<Recorded, WriteError> {
        batch::submit(&self.queue, true, |reply| {
            queue::Job::Finish(finished, batch::Slot::new(reply))
        })
        .await
    }

    /// The claim and the results go to the queue batcher together, so that they share a
    /// transaction and its commit (one after the other, the turn waited for two commits:
    /// BENCHMARKS.md, "PostgreSQL"), then one read of the claimed events. Their order
    /// within the transaction does not matter: a claim that runs after the results sees
    /// them, as on SQLite. The batcher runs each job alone when a batch fails, so each
    /// result's outcome is its own.
    async fn settle(&self, turn: Turn) -> Result<Settled, WriteError> {
        let Turn { results, claim } = turn;
        let mut settled = Settled::default();
        let mut look = None;
        // The claim's answer with what it asked for: the target, and how many.
        let claimed = async {
            match claim {
                Some(request) => {
                    let asked = (request.source.clone(), request.target.clone());
                    let limit = request.limit;
                    Some((self.claim(request).await, asked, limit))
                }
                None => None,
            }
        };
        let recorded = futures_util::future::join_all(results.into_iter().map(|f| self.finish(f)));
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
            settled.events = self.events(ids).await;
        }
        if let Some((source, target)) = look {
            settled.look = self.look(&source, &target).await.ok();
        }
        Ok(settled)
    }

    async fn sweep(&self) -> Result<usize, WriteError> {
        batch::submit(&self.queue, true, |reply| {
            queue::Job::Sweep(batch::Slot::new(reply))
        })
        .await
    }

    /// Replicas in the middle of a rollout disagree about which targets exist: one must
    /// not retire what the others deliver.
    async fn retire_targets(&self, _: Vec<(String, String)>) -> Result<usize, WriteError> {
        Ok(0)
    }

    async fn retire_unknown_targets(&self, _: Vec<(String, String)>) -> Result<usize, WriteError> {
        Ok(0)
    }

    async fn start_receiving(
        &self,
        replica: String,
        sources: Vec<String>,
    ) -> anyhow::Result<(Vec<Gap>, Vec<Unconfirmed>)> {
        self.change(move |db, now| gaps::start_replica(db, &replica, &sources, now))
            .await
    }

    async fn beat(
        &self,
        replica: String,
        beats: Vec<Beat>,
        stopping: Option<Vec<String>>,
    ) -> anyhow::Result<Vec<Gap>> {
        self.change(move |db, now| {
            let recorded = gaps::beat_replica(db, &replica, &beats, now)?;
            if let Some(names) = &stopping {
                gaps::stop_replica(db, &replica, names, now)?;
            }
            Ok(recorded)
        })
        .await
    }

    /// The check is a read and each is ingested as a webhook is, so two replicas storing
    /// at once store one and quarantine the other.
    async fn store_unless_known(&self, events: Vec<NewEvent>) -> anyhow::Result<()> {
        for e in events {
            let (source, account, id) = (e.source.clone(), e.account.clone(), e.event_id.clone());
            let known = self
                .read(move |db| Ok(db.is_stored(&source, &account, &id)?))
                .await?;
            if !known {
                self.ingest(e).await?;
            }
        }
        Ok(())
    }

    fn shared(&self) -> bool {
        true
    }

    async fn look(&self, source: &str, target: &str) -> Result<Look, String> {
        self.readers
            .read(|client| async move { queue::look(&client, source, target).await })
            .await
    }

    async fn events(&self, ids: Vec<i64>) -> Result<HashMap<i64, EventData>, String> {
        self.readers
            .read(|client| async move { queue::events(&client, &ids).await })
            .await
    }

    async fn gauges(&self, settled: bool) -> Result<Gauges, String> {
        self.readers
            .read(|client| async move { queue::gauges(&client, settled).await })
            .await
    }

    /// In the queue batcher's transaction. No walk: each chunk finds its rows by
    /// PostgreSQL's index by time, skipping those another replica holds.
    async fn prune_chunk(
        &self,
        rule: Rule,
        now: SystemTime,
        _: Walk,
    ) -> Result<(Pruned, Walk), WriteError> {
        let done = batch::submit(&self.queue, true, |reply| {
            queue::Job::Prune(rule, now, batch::Slot::new(reply))
        })
        .await?;
        Ok((done, Walk::done()))
    }

    /// PostgreSQL gives freed space back to itself (its autovacuum reuses it).
    async fn release_free_pages(&self) -> Result<i64, WriteError> {
        Ok(0)
    }

    async fn checkpoint_if_idle(&self) {}

    fn wal_bytes(&self) -> Option<u64> {
        None
    }

    /// Waits until the ingest batcher has drained what was queued before; after a failed
    /// commit it also tries a small write, so that health comes back without traffic.
    async fn ping(&self) -> Result<(), WriteError> {
        let (reply, answer) = oneshot::channel();
        self.ingest
            .send(batch::Op::Ping(reply))
            .await
            .map_err(|_| WriteError::Stopped)?;
        answer.await.map_err(|_| WriteError::Stopped)
    }

    fn health(&self) -> &CommitHealth {
        &self.health
    }

    fn commits(&self) -> &Commits {
        &self.commits
    }

    async fn read<T, F>(&self, read: F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(Db) -> anyhow::Result<T> + Send + 'static,
    {
        let pool = self.operator.clone();
        tokio::task::spawn_blocking(move || pool.with(read)).await?
    }

    async fn change<T, F>(&self, change: F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: FnMut(Db, &str) -> Result<T, DbError> + Send + 'static,
    {
        let mut change = change;
        let pool = self.operator.clone();
        tokio::task::spawn_blocking(move || {
            let now = crate::clock::iso_now();
            pool.with(|db| db.write(|tx| Ok(change(tx, &now)?)))
        })
        .await?
    }
}

/// A few [`PgConn`]s kept open between uses: `serve`'s web inbox reads and steers a
/// PostgreSQL inbox through the same SQL as the commands, from blocking threads.
pub struct PgPool {
    store: crate::config::PgStore,
    idle: std::sync::Mutex<Vec<session::PgConn>>,
}

/// Connections kept idle: the web inbox is one operator's browser, a page a few queries.
const POOL_IDLE: usize = 2;

impl PgPool {
    pub fn new(store: crate::config::PgStore) -> PgPool {
        PgPool {
            store,
            idle: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Runs `f` on an idle connection, or a new one; blocks (call it where blocking is
    /// allowed). The connection goes back to the pool unless it broke.
    pub fn with<T>(&self, f: impl FnOnce(Db) -> anyhow::Result<T>) -> anyhow::Result<T> {
        let idle = self.idle.lock().expect("no panics while holding it").pop();
        // An idle connection's driver runs only inside block_on: one turn lets it notice a
        // socket the server closed meanwhile (a restart, a failover, an idle timeout).
        let idle = idle.filter(|conn| {
            conn.block_on(tokio::task::yield_now());
            !conn.client.is_closed()
        });
        let conn = match idle {
            Some(conn) => conn,
            None => session::PgConn::connect(&self.store)?,
        };
        let result = f(Db::Postgres(&conn));
        if !conn.client.is_closed() {
            let mut idle = self.idle.lock().expect("no panics while holding it");
            if idle.len() < POOL_IDLE {
                idle.push(conn);
            }
        }
        result
    }
}

/// Connections for reads, used in turn; a broken one is made again on its next turn.
struct Readers {
    connector: Connector,
    slots: Vec<Shared>,
    next: AtomicUsize,
}

impl Readers {
    fn new(connector: Connector, size: usize) -> Readers {
        Readers {
            connector,
            slots: (0..size.max(1)).map(|_| Shared::default()).collect(),
            next: AtomicUsize::new(0),
        }
    }

    /// Runs `read` on the next connection within [`READ_TIMEOUT`]. A connection that timed
    /// out or broke is dropped and made again on its next turn.
    async fn read<T, F, Fut>(&self, read: F) -> Result<T, String>
    where
        F: FnOnce(Arc<Client>) -> Fut,
        Fut: std::future::Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let slot = &self.slots[self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len()];
        let client = tokio::time::timeout(CONNECT_TIMEOUT, slot.get(&self.connector))
            .await
            .map_err(|_| "connecting to PostgreSQL timed out".to_owned())?
            .map_err(|e| crate::pgconn::describe(&e))?;
        match tokio::time::timeout(READ_TIMEOUT, read(client.clone())).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => {
                if crate::pgconn::connection_lost(&e) {
                    slot.forget(&client).await;
                }
                Err(crate::pgconn::describe(&e))
            }
            Err(_) => {
                slot.forget(&client).await;
                Err(format!("no answer from PostgreSQL within {READ_TIMEOUT:?}"))
            }
        }
    }
}
