//! Group commit on PostgreSQL: one task per kind of work owns one connection, takes every
//! job waiting (up to [`MAX_BATCH`]) and runs them in one transaction. As with the SQLite
//! writer, nothing waits for a batch to fill: while one commits, the next piles up.
//!
//! A batch fails whole: PostgreSQL aborts a transaction at its first error, and the jobs are
//! written so that none errs in the normal course (conflicts are `ON CONFLICT`, text is
//! cleaned of NUL). Everyone in a failed batch hears `CommitFailed`: a request answers 503
//! and the provider retries; an attempt's result is lost and its lease brings it back.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::{Client, Transaction};

use crate::pg::{Connector, connection_lost, describe};
use crate::store::writer::{COMMIT_WAIT, Health, MAX_BATCH, WriteError};

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

/// One kind of batched work.
pub trait Kind: Send + 'static {
    type Job: Send + 'static;
    /// Runs every job of the batch in `tx`, filling their slots. An error fails the batch.
    fn run<'a>(
        &'a self,
        tx: &'a Transaction<'a>,
        jobs: &'a mut [Self::Job],
        now: &'a str,
    ) -> BoxFuture<'a, Result<(), tokio_postgres::Error>>;
    fn answer(&self, job: Self::Job, batch_error: Option<WriteError>);
    /// A batch of `jobs` committed in `seconds`.
    fn committed(&self, _jobs: usize, _seconds: f64) {}
}

/// The longest a batch may take, connecting included. Past it the connection is dropped
/// (PostgreSQL then rolls the transaction back, unless its COMMIT had already arrived) and
/// the batch is refused: a request hears 503, which is honest either way.
const BATCH_TIMEOUT: Duration = Duration::from_secs(15);

/// Queues a job made by `make` and waits for its result, as [`crate::store::writer`]'s
/// callers do: a full queue is refused at once when `wait_for_room` is false (a request
/// answers 503 rather than wait into its provider's timeout).
pub async fn submit<J, T>(
    queue: &mpsc::Sender<Op<J>>,
    wait_for_room: bool,
    make: impl FnOnce(oneshot::Sender<Result<T, WriteError>>) -> J,
) -> Result<T, WriteError> {
    let (reply, answer) = oneshot::channel();
    let op = Op::Job(make(reply));
    if wait_for_room {
        queue.send(op).await.map_err(|_| WriteError::Stopped)?;
    } else {
        queue.try_send(op).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => WriteError::QueueFull,
            mpsc::error::TrySendError::Closed(_) => WriteError::Stopped,
        })?;
    }
    match tokio::time::timeout(COMMIT_WAIT, answer).await {
        Err(_) => Err(WriteError::TimedOut),
        Ok(Err(_)) => Err(WriteError::Stopped),
        Ok(Ok(result)) => result,
    }
}

/// The batcher's loop; ends when every sender is dropped and the queue is drained.
/// `health`, when given, is what `/readyz` reads: false after a failed batch, true again
/// after a committed one (or a probe write that succeeded).
pub async fn run<K: Kind>(
    name: &'static str,
    connector: Connector,
    mut client: Option<Client>,
    mut rx: mpsc::Receiver<Op<K::Job>>,
    kind: K,
    health: Option<Arc<Health>>,
) {
    let mut ops = Vec::with_capacity(MAX_BATCH);
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
            if unhealthy {
                probe(name, &connector, &mut client, health.as_deref()).await;
            }
        } else {
            let started = Instant::now();
            let now = crate::clock::iso_now();
            let outcome = tokio::time::timeout(
                BATCH_TIMEOUT,
                commit(&connector, &mut client, &kind, &mut jobs, &now),
            )
            .await;
            let batch_error = match outcome {
                Ok(Ok(())) => {
                    kind.committed(jobs.len(), started.elapsed().as_secs_f64());
                    if let Some(h) = &health {
                        if unhealthy {
                            tracing::info!(
                                batcher = name,
                                "the PostgreSQL inbox takes writes again"
                            );
                        }
                        h.last_commit_ok.store(true, Ordering::Relaxed);
                    }
                    None
                }
                Ok(Err(e)) => {
                    if connection_lost(&e) {
                        client = None;
                    }
                    Some(describe(&e))
                }
                Err(_) => {
                    client = None;
                    Some(format!(
                        "no answer from PostgreSQL within {BATCH_TIMEOUT:?}"
                    ))
                }
            };
            let batch_error = batch_error.map(|why| {
                if let Some(h) = &health {
                    h.last_commit_ok.store(false, Ordering::Relaxed);
                }
                tracing::error!(batcher = name, jobs = jobs.len(), error = %why,
                    "PostgreSQL transaction failed; everything in it is refused (requests get 503)");
                WriteError::CommitFailed(why)
            });
            for job in jobs {
                kind.answer(job, batch_error.clone());
            }
        }
        for ping in pings {
            let _ = ping.send(());
        }
    }
}

async fn connection<'c>(
    connector: &Connector,
    client: &'c mut Option<Client>,
) -> Result<&'c mut Client, tokio_postgres::Error> {
    if client.as_ref().is_some_and(Client::is_closed) {
        *client = None;
    }
    if client.is_none() {
        *client = Some(connector.connect().await?);
    }
    Ok(client.as_mut().expect("just connected"))
}

async fn commit<K: Kind>(
    connector: &Connector,
    client: &mut Option<Client>,
    kind: &K,
    jobs: &mut [K::Job],
    now: &str,
) -> Result<(), tokio_postgres::Error> {
    let conn = connection(connector, client).await?;
    let tx = conn.transaction().await?;
    kind.run(&tx, jobs, now).await?;
    tx.commit().await
}

/// A small committed write after a failure: whether the database takes writes again shows
/// only when something is written.
async fn probe(
    name: &str,
    connector: &Connector,
    client: &mut Option<Client>,
    health: Option<&Health>,
) {
    let write = async {
        let conn = connection(connector, client).await?;
        conn.execute(
            "INSERT INTO writer_probe (id, probed_at) VALUES (1, $1)
             ON CONFLICT (id) DO UPDATE SET probed_at = excluded.probed_at",
            &[&crate::clock::iso_now()],
        )
        .await
    };
    match tokio::time::timeout(BATCH_TIMEOUT, write).await {
        Ok(Ok(_)) => {
            if let Some(h) = health {
                h.last_commit_ok.store(true, Ordering::Relaxed);
            }
            tracing::info!(batcher = name, "the PostgreSQL inbox takes writes again");
        }
        Ok(Err(e)) => {
            tracing::debug!(error = %describe(&e), "the PostgreSQL inbox still takes no writes");
            if connection_lost(&e) {
                *client = None;
            }
        }
        Err(_) => *client = None,
    }
}
