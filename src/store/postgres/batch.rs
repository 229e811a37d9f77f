//! Group commit on PostgreSQL: one task per kind of work owns one connection, takes every
//! job waiting (up to [`MAX_BATCH`]) and runs them in one transaction. As with the SQLite
//! writer, nothing waits for a batch to fill: while one commits, the next piles up.
//!
//! PostgreSQL aborts a transaction at its first error, so the jobs are written not to err in
//! the normal course (conflicts are `ON CONFLICT`, text is cleaned of NUL). When a batch
//! fails anyway with the database's own error (a value it refuses, a deadlock with another
//! replica), each of its jobs runs again alone, so that one job's error fails that job
//! only. When the connection is lost or the batch times out, everyone in it hears
//! `CommitFailed` at once: a request answers 503 and the provider retries; an attempt's
//! result is lost and its lease brings it back.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::{Client, Statement, Transaction};

use crate::pgconn::{Connector, connection_lost, describe};
use crate::store::{CommitHealth, MAX_BATCH, WriteError};

pub enum Op<J> {
    Job(J),
    /// Answered when the batcher reaches it: proves it is alive and draining.
    Ping(oneshot::Sender<()>),
}

/// Where one job's result waits until its batch committed.
pub struct Slot<T> {
    reply: oneshot::Sender<Result<T, WriteError>>,
    result: Option<T>,
}

impl<T> Slot<T> {
    pub fn new(reply: oneshot::Sender<Result<T, WriteError>>) -> Slot<T> {
        Slot {
            reply,
            result: None,
        }
    }

    pub fn set(&mut self, value: T) {
        self.result = Some(value);
    }

    /// The result once the batch committed, or the batch's error.
    pub fn answer(self, batch_error: Option<WriteError>) {
        let result = match (batch_error, self.result) {
            (Some(e), _) => Err(e),
            (None, Some(value)) => Ok(value),
            (None, None) => Err(WriteError::CommitFailed("the job did not run".into())),
        };
        let _ = self.reply.send(result);
    }
}

/// Why a batch's transaction failed.
#[derive(Debug)]
pub enum BatchError {
    Pg(tokio_postgres::Error),
    /// A job found the inbox in a state it cannot go on from in this transaction.
    Job(String),
}

impl From<tokio_postgres::Error> for BatchError {
    fn from(e: tokio_postgres::Error) -> BatchError {
        BatchError::Pg(e)
    }
}

impl BatchError {
    /// The connection is no use any more: the batch is not tried again job by job.
    fn connection_lost(&self) -> bool {
        matches!(self, BatchError::Pg(e) if connection_lost(e))
    }

    fn describe(&self) -> String {
        match self {
            BatchError::Pg(e) => describe(e),
            BatchError::Job(why) => why.clone(),
        }
    }
}

/// One kind of batched work.
pub trait BatchKind: Send + 'static {
    type Job: Send + 'static;
    /// Runs every job of the batch in `tx`, filling their slots. An error fails the batch.
    fn run<'a>(
        &'a self,
        tx: &'a Transaction<'a>,
        prepared: &'a Prepared,
        jobs: &'a mut [Self::Job],
        now: &'a str,
    ) -> BoxFuture<'a, Result<(), BatchError>>;
    fn answer(&self, job: Self::Job, batch_error: Option<WriteError>);
    /// A batch of `jobs` committed in `seconds`.
    fn committed(&self, _jobs: usize, _seconds: f64) {}
    /// A batch, or a job of it run alone, failed.
    fn failed(&self) {}
}

/// How long without a commit before a ping writes the probe row, so that `/readyz` finds
/// out that the database went away even while no request comes.
const PROBE_WHEN_IDLE: Duration = Duration::from_secs(5);

/// The longest a batch may take, connecting included. Past it the connection is dropped
/// (PostgreSQL then rolls the transaction back, unless its COMMIT had already arrived) and
/// the batch is refused: a request hears 503, which is honest either way.
pub(crate) const BATCH_TIMEOUT: Duration = Duration::from_secs(15);

/// Queues a job made by `make` and waits for its result, as the SQLite writer's callers
/// do ([`crate::store::batching::queue_and_wait`]).
pub async fn submit<J, T>(
    queue: &mpsc::Sender<Op<J>>,
    wait_for_room: bool,
    make: impl FnOnce(oneshot::Sender<Result<T, WriteError>>) -> J,
) -> Result<T, WriteError> {
    let (reply, answer) = oneshot::channel();
    crate::store::batching::queue_and_wait(queue, Op::Job(make(reply)), wait_for_room, answer).await
}

/// The batcher's loop; ends when every sender is dropped and the queue is drained. It
/// connects with `connector` when it first has work, and again after a failure.
/// `health`, when given, is what `/readyz` reads: false after a failed batch, true again
/// after a committed one (or a probe write that succeeded).
pub async fn run<K: BatchKind>(
    name: &'static str,
    connector: Connector,
    mut rx: mpsc::Receiver<Op<K::Job>>,
    kind: K,
    health: Option<Arc<CommitHealth>>,
) {
    let mut ops = Vec::with_capacity(MAX_BATCH);
    let mut client: Option<Session> = None;
    let mut last_commit = Instant::now();
    while rx.recv_many(&mut ops, MAX_BATCH).await > 0 {
        let mut jobs = Vec::with_capacity(ops.len());
        let mut pings = Vec::new();
        for op in ops.drain(..) {
            match op {
                Op::Job(job) => jobs.push(job),
                Op::Ping(reply) => pings.push(reply),
            }
        }
        let unhealthy = health
            .as_ref()
            .is_some_and(|h| !h.last_commit_ok.load(Ordering::Relaxed));
        if jobs.is_empty() {
            if health.is_some()
                && (unhealthy || last_commit.elapsed() >= PROBE_WHEN_IDLE)
                && probe(name, &connector, &mut client, health.as_deref()).await
            {
                last_commit = Instant::now();
            }
        } else {
            let started = Instant::now();
            let now = crate::clock::iso_now();
            let errors =
                commit_or_one_by_one(name, &connector, &mut client, &kind, &mut jobs, &now).await;
            let failed = errors.iter().filter(|e| e.is_some()).count();
            if failed < jobs.len() {
                kind.committed(jobs.len() - failed, started.elapsed().as_secs_f64());
                last_commit = Instant::now();
            }
            if failed > 0 {
                kind.failed();
            }
            if let Some(h) = &health {
                // CommitHealthy while anything commits: one job the database refuses is that
                // job's problem, not the inbox's.
                let ok = failed < jobs.len();
                if ok && unhealthy {
                    tracing::info!(batcher = name, "the PostgreSQL inbox takes writes again");
                }
                h.last_commit_ok.store(ok, Ordering::Relaxed);
            }
            for (job, error) in jobs.into_iter().zip(errors) {
                kind.answer(job, error);
            }
        }
        for ping in pings {
            let _ = ping.send(());
        }
    }
}

/// Runs the batch in one transaction; when the database refuses it (not a lost connection,
/// not a timeout), runs each job alone. Returns each job's error, if any.
async fn commit_or_one_by_one<K: BatchKind>(
    name: &str,
    connector: &Connector,
    client: &mut Option<Session>,
    kind: &K,
    jobs: &mut [K::Job],
    now: &str,
) -> Vec<Option<WriteError>> {
    let n = jobs.len();
    let all = |why: String| vec![Some(WriteError::CommitFailed(why)); n];
    let error =
        match tokio::time::timeout(BATCH_TIMEOUT, commit(connector, client, kind, jobs, now)).await
        {
            Ok(Ok(())) => return vec![None; jobs.len()],
            Ok(Err(e)) => e,
            Err(_) => {
                *client = None;
                let why = format!("no answer from PostgreSQL within {BATCH_TIMEOUT:?}");
                tracing::error!(batcher = name, jobs = jobs.len(), error = %why,
                "PostgreSQL transaction failed; everything in it is refused (requests get 503)");
                return all(why);
            }
        };
    if error.connection_lost() || jobs.len() == 1 {
        if error.connection_lost() {
            *client = None;
        }
        tracing::error!(batcher = name, jobs = jobs.len(), error = %error.describe(),
            "PostgreSQL transaction failed; everything in it is refused (requests get 503)");
        return all(error.describe());
    }
    tracing::warn!(batcher = name, jobs = jobs.len(), error = %error.describe(),
        "PostgreSQL refused a batch; running its jobs one by one");
    let mut errors = Vec::with_capacity(jobs.len());
    for job in jobs.iter_mut() {
        let alone = std::slice::from_mut(job);
        let result =
            tokio::time::timeout(BATCH_TIMEOUT, commit(connector, client, kind, alone, now)).await;
        errors.push(match result {
            Ok(Ok(())) => None,
            Ok(Err(e)) => {
                if e.connection_lost() {
                    *client = None;
                }
                tracing::error!(batcher = name, error = %e.describe(),
                    "PostgreSQL refused one job; it is refused (a request gets 503)");
                Some(WriteError::CommitFailed(e.describe()))
            }
            Err(_) => {
                *client = None;
                Some(WriteError::CommitFailed(format!(
                    "no answer from PostgreSQL within {BATCH_TIMEOUT:?}"
                )))
            }
        });
    }
    errors
}

/// One connection, with the statements prepared on it (they are the connection's: a new
/// connection starts with none).
pub struct Session {
    client: Client,
    prepared: Prepared,
}

impl Session {
    fn new(client: Client) -> Session {
        Session {
            client,
            prepared: Prepared::default(),
        }
    }
}

/// Statements prepared once per connection and used by every batch after: the server
/// parses and plans them once, not once per job.
#[derive(Default)]
pub struct Prepared(tokio::sync::Mutex<std::collections::HashMap<String, Statement>>);

impl Prepared {
    pub async fn get(
        &self,
        tx: &Transaction<'_>,
        sql: &str,
    ) -> Result<Statement, tokio_postgres::Error> {
        let mut statements = self.0.lock().await;
        if let Some(statement) = statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = tx.prepare(sql).await?;
        statements.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }
}

async fn connection<'c>(
    connector: &Connector,
    client: &'c mut Option<Session>,
) -> Result<&'c mut Session, tokio_postgres::Error> {
    if client.as_ref().is_some_and(|s| s.client.is_closed()) {
        *client = None;
    }
    if client.is_none() {
        *client = Some(Session::new(connector.connect().await?));
    }
    Ok(client.as_mut().expect("just connected"))
}

async fn commit<K: BatchKind>(
    connector: &Connector,
    client: &mut Option<Session>,
    kind: &K,
    jobs: &mut [K::Job],
    now: &str,
) -> Result<(), BatchError> {
    let session = connection(connector, client).await?;
    let tx = session.client.transaction().await?;
    kind.run(&tx, &session.prepared, jobs, now).await?;
    Ok(tx.commit().await?)
}

/// A small committed write after a failure, or after a while without commits: whether the
/// database takes writes (again) shows only when something is written. Returns whether it
/// committed.
async fn probe(
    name: &str,
    connector: &Connector,
    client: &mut Option<Session>,
    health: Option<&CommitHealth>,
) -> bool {
    let was_ok = health.is_some_and(|h| h.last_commit_ok.load(Ordering::Relaxed));
    let write = async {
        let session = connection(connector, client).await?;
        session
            .client
            .execute(
                "INSERT INTO writer_probe (id, probed_at) VALUES (1, $1)
             ON CONFLICT (id) DO UPDATE SET probed_at = excluded.probed_at",
                &[&crate::clock::iso_now()],
            )
            .await
    };
    let result = tokio::time::timeout(PROBE_TIMEOUT, write).await;
    let ok = matches!(result, Ok(Ok(_)));
    match result {
        Ok(Ok(_)) if !was_ok => {
            tracing::info!(batcher = name, "the PostgreSQL inbox takes writes again");
        }
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            tracing::warn!(batcher = name, error = %describe(&e), "the PostgreSQL inbox takes no writes");
            if connection_lost(&e) {
                *client = None;
            }
        }
        Err(_) => {
            tracing::warn!(
                batcher = name,
                "the PostgreSQL inbox did not answer a probe write"
            );
            *client = None;
        }
    }
    if let Some(h) = health {
        h.last_commit_ok.store(ok, Ordering::Relaxed);
    }
    ok
}

/// Within `/readyz`'s own wait (2 s), so that a dead server reads as not ready rather than
/// as a ping that never came back.
const PROBE_TIMEOUT: Duration = Duration::from_millis(1500);
