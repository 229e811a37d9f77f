//! The single writer: one OS thread owns the only read-write connection and commits what
//! the HTTP handlers send it in batches (group commit).
//!
//! Why one writer: SQLite admits one writer at a time anyway; with several, they would take
//! turns at the lock and each pay its own fsync. Here requests queue in a channel, the
//! thread takes everything waiting (up to [`MAX_BATCH`]), runs it in one
//! `BEGIN IMMEDIATE … COMMIT` — one fsync for the whole batch — and only then answers each
//! request. The fsync is shared; the promise is not weakened: nobody hears "stored" before
//! the commit that holds their event returned.
//!
//! There is no artificial wait for a batch to fill: while one commit is in flight, the
//! next requests pile up in the channel, so batches grow exactly when load does.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use tokio::sync::{mpsc, oneshot};

use crate::clock;
use crate::config::Synchronous;
use crate::metrics::Metrics;

/// The most operations in one transaction. Beyond a few hundred rows the fsync is no longer
/// what dominates a commit (reference/reliability-perf.md §1.5), and a bound keeps one
/// commit's latency, which every request in it waits for, in check.
pub const MAX_BATCH: usize = 512;

/// Requests waiting for the writer. When it is full the disk is far behind the network, and
/// a new request is answered 503 at once rather than queued into a provider's timeout.
pub const QUEUE_CAPACITY: usize = 4096;

/// How long a handler waits for its commit before answering 503. A commit can still land
/// after that; the provider then retries and hears "duplicate", which is honest. Below
/// Slack's and Shopify's answer deadlines (3 s and 5 s) would be ideal, but a disk that
/// takes seconds to fsync is better answered late than never.
pub const COMMIT_WAIT: Duration = Duration::from_secs(10);

/// An event, verified and ready to store, with everything computed off the writer thread.
#[derive(Debug)]
pub struct NewEvent {
    pub source: Arc<str>,
    pub account: Arc<str>,
    pub event_id: String,
    pub sha256_hex: String,
    pub body: Bytes,
    /// Whether `body` is valid UTF-8 and so is stored as TEXT.
    pub body_is_text: bool,
    /// JSON `[[name, value], …]`.
    pub headers: String,
    pub event_type: Option<String>,
    /// Unix seconds.
    pub provider_time: Option<i64>,
    /// (target name, idempotency key), one delivery row each.
    pub deliveries: Vec<(String, String)>,
}

/// What the store did with an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    /// Committed for the first time.
    New,
    /// Same identity and same bytes as an event already stored: nothing written.
    Duplicate,
    /// Same identity, different bytes: quarantined in `conflicts`; the original untouched.
    Conflict,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum WriteError {
    #[error("the write queue is full")]
    QueueFull,
    #[error("the commit failed: {0}")]
    CommitFailed(String),
    #[error("the writer did not answer within {COMMIT_WAIT:?}")]
    TimedOut,
    #[error("the writer has stopped")]
    Stopped,
}

enum Op {
    Ingest(Box<NewEvent>, oneshot::Sender<Result<Stored, WriteError>>),
    /// Answered when the writer loop reaches it: proves the thread is alive and draining.
    Ping(oneshot::Sender<()>),
}

/// What the writer reports about itself, for `/readyz` and the watchdog.
#[derive(Debug, Default)]
pub struct Health {
    /// False after a failed commit or open, true again after a successful one.
    pub last_commit_ok: AtomicBool,
}

/// A handle to the writer thread. Cheap to clone; the thread stops when every handle is
/// dropped, after committing what was queued.
#[derive(Clone)]
pub struct Writer {
    tx: mpsc::Sender<Op>,
    health: Arc<Health>,
}

impl Writer {
    /// Opens the inbox (creating and migrating it if needed) on the calling thread, so that a
    /// bad path or a newer schema fails start-up with a clear message, then starts the thread.
    pub fn start(
        path: PathBuf,
        sync: Synchronous,
        metrics: Arc<Metrics>,
    ) -> Result<(Writer, JoinHandle<()>), super::Error> {
        let conn = super::open_writer(&path, sync, true)?;
        let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
        let health = Arc::new(Health {
            last_commit_ok: AtomicBool::new(true),
        });
        let state = Loop {
            conn: Some(conn),
            path,
            sync,
            metrics,
            health: health.clone(),
        };
        let handle = std::thread::Builder::new()
            .name("hookinbox-writer".into())
            .spawn(move || state.run(rx))
            .expect("spawning the writer thread");
        Ok((Writer { tx, health }, handle))
    }

    /// Stores one event and waits until its commit returned.
    pub async fn ingest(&self, event: NewEvent) -> Result<Stored, WriteError> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .try_send(Op::Ingest(Box::new(event), reply))
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => WriteError::QueueFull,
                mpsc::error::TrySendError::Closed(_) => WriteError::Stopped,
            })?;
        match tokio::time::timeout(COMMIT_WAIT, answer).await {
            Err(_) => Err(WriteError::TimedOut),
            Ok(Err(_)) => Err(WriteError::Stopped),
            Ok(Ok(result)) => result,
        }
    }

    /// Waits until the writer loop has drained everything queued before this call.
    pub async fn ping(&self) -> Result<(), WriteError> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Op::Ping(reply))
            .await
            .map_err(|_| WriteError::Stopped)?;
        answer.await.map_err(|_| WriteError::Stopped)
    }

    pub fn health(&self) -> &Health {
        &self.health
    }
}

struct Loop {
    /// None after a failure: the next batch reopens it. A connection that saw an I/O error
    /// is not trusted again (fsync failures cannot be retried on the same handle).
    conn: Option<Connection>,
    path: PathBuf,
    sync: Synchronous,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
}

impl Loop {
    fn run(mut self, mut rx: mpsc::Receiver<Op>) {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        while let Some(first) = rx.blocking_recv() {
            batch.push(first);
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(op) => batch.push(op),
                    Err(_) => break,
                }
            }
            self.commit(&mut batch);
        }
        tracing::debug!("writer stopped: every handle dropped and the queue is drained");
    }

    /// Runs one batch and answers everyone in it.
    fn commit(&mut self, batch: &mut Vec<Op>) {
        let events = batch
            .iter()
            .filter(|op| matches!(op, Op::Ingest(..)))
            .count();
        let started = Instant::now();
        let mut outcomes = if events > 0 {
            match self.connection().and_then(|conn| run_batch(conn, batch)) {
                Ok(outcomes) => {
                    self.metrics.writer_batch_size.observe(events as f64);
                    self.metrics
                        .writer_commit_seconds
                        .observe(started.elapsed().as_secs_f64());
                    self.health.last_commit_ok.store(true, Ordering::Relaxed);
                    outcomes
                }
                Err(e) => {
                    self.failed(&e, events);
                    let err = WriteError::CommitFailed(e.to_string());
                    vec![Err(err); events]
                }
            }
        } else {
            // Only pings. After a failure, nothing else would ever prove the inbox healthy
            // again if no traffic arrives (a load balancer may be holding it back because
            // of /readyz), so try a real write.
            if !self.health.last_commit_ok.load(Ordering::Relaxed) {
                self.probe();
            }
            Vec::new()
        }
        .into_iter();
        for op in batch.drain(..) {
            match op {
                Op::Ingest(_, reply) => {
                    let outcome = outcomes.next().expect("one outcome per event");
                    let _ = reply.send(outcome);
                }
                Op::Ping(reply) => {
                    let _ = reply.send(());
                }
            }
        }
    }

    fn failed(&mut self, e: &super::Error, events: usize) {
        self.metrics.writer_commit_failures.inc();
        self.health.last_commit_ok.store(false, Ordering::Relaxed);
        tracing::error!(
            error = %e,
            events,
            path = %self.path.display(),
            "commit failed; every request in the batch is answered 503 and the inbox \
             connection will be reopened"
        );
        self.conn = None;
    }

    /// A small committed write: a full disk or a held lock only shows when something is
    /// written and synced.
    fn probe(&mut self) {
        let now = clock::iso_now();
        let result = self.connection().and_then(|conn| {
            conn.execute(
                "INSERT INTO writer_probe (id, probed_at) VALUES (1, ?1)
                 ON CONFLICT (id) DO UPDATE SET probed_at = excluded.probed_at",
                [now],
            )
            .map_err(super::Error::from)
        });
        match result {
            Ok(_) => {
                self.health.last_commit_ok.store(true, Ordering::Relaxed);
                tracing::info!(path = %self.path.display(), "the inbox takes writes again");
            }
            Err(e) => {
                tracing::debug!(error = %e, "the inbox still cannot take writes");
                self.conn = None;
            }
        }
    }

    /// The write connection, reopened after a failure. A reopen never creates the file: if
    /// the inbox vanished, a fresh empty one would silently forget every identity.
    fn connection(&mut self) -> Result<&mut Connection, super::Error> {
        if self.conn.is_none() {
            self.conn = Some(super::open_writer(&self.path, self.sync, false)?);
            tracing::info!(path = %self.path.display(), "reopened the inbox");
        }
        Ok(self.conn.as_mut().expect("just opened"))
    }
}

/// One transaction for the batch; a savepoint per event, so that an error peculiar to one
/// event fails only that event. Returns one outcome per `Op::Ingest`, in order; an `Err`
/// means nothing in the batch committed.
fn run_batch(
    conn: &mut Connection,
    batch: &[Op],
) -> Result<Vec<Result<Stored, WriteError>>, super::Error> {
    let now = clock::iso_now();
    let mut tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut outcomes = Vec::with_capacity(batch.len());
    for op in batch {
        let Op::Ingest(event, _) = op else { continue };
        let sp = tx.savepoint()?;
        match store_one(&sp, event, &now) {
            Ok(stored) => {
                sp.commit()?;
                outcomes.push(Ok(stored));
            }
            Err(e) => {
                // Dropping the savepoint rolls back to it.
                drop(sp);
                // A full disk or an I/O error fails the batch and retires the connection.
                // SQLite may also have rolled the whole transaction back; carrying on
                // would then run the rest in autocommit, one event at a time.
                if is_storage_error(&e) || tx.is_autocommit() {
                    return Err(e.into());
                }
                tracing::error!(error = %e, source = %event.source, event_id = %event.event_id,
                    "storing one event failed; it is answered 503, the rest of its batch goes on");
                outcomes.push(Err(WriteError::CommitFailed(e.to_string())));
            }
        }
    }
    tx.commit()?;
    Ok(outcomes)
}

/// Errors that say the storage itself failed, as opposed to one statement.
fn is_storage_error(e: &rusqlite::Error) -> bool {
    use rusqlite::ErrorCode::*;
    matches!(
        e.sqlite_error_code(),
        Some(
            SystemIoFailure
                | DiskFull
                | DatabaseCorrupt
                | NotADatabase
                | CannotOpen
                | DatabaseBusy
                | DatabaseLocked
                | OutOfMemory
        )
    )
}

fn store_one(conn: &Connection, e: &NewEvent, now: &str) -> rusqlite::Result<Stored> {
    // Valid UTF-8 is bound as TEXT so that `sqlite3` shows it; the bytes are the same.
    let text = if e.body_is_text {
        std::str::from_utf8(&e.body).ok()
    } else {
        None
    };
    let raw: &[u8] = &e.body;
    let body: &dyn rusqlite::ToSql = match &text {
        Some(t) => t,
        None => &raw,
    };
    let provider_time = e.provider_time.map(clock::iso_from_unix);
    let inserted: Option<i64> = conn
        .prepare_cached(
            "INSERT INTO events (source, account, event_id, sha256, size, body, headers,
                                 event_type, provider_time, received_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
             ON CONFLICT (source, account, event_id) DO NOTHING
             RETURNING id",
        )?
        .query_row(
            params![
                &*e.source,
                &*e.account,
                e.event_id,
                e.sha256_hex,
                e.body.len() as i64,
                body,
                e.headers,
                e.event_type,
                provider_time,
                now
            ],
            |r| r.get(0),
        )
        .optional()?;
    if let Some(id) = inserted {
        let mut insert = conn.prepare_cached(
            "INSERT INTO deliveries (event, target, idempotency_key, next_attempt_at, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?4, ?4)",
        )?;
        for (target, key) in &e.deliveries {
            insert.execute(params![id, target, key, now])?;
        }
        return Ok(Stored::New);
    }
    let (original, original_sha): (i64, String) = conn
        .prepare_cached(
            "SELECT id, sha256 FROM events WHERE source = ?1 AND account = ?2 AND event_id = ?3",
        )?
        .query_row(params![&*e.source, &*e.account, e.event_id], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
    if original_sha == e.sha256_hex {
        return Ok(Stored::Duplicate);
    }
    conn.prepare_cached(
        "INSERT INTO conflicts (event, source, account, event_id, original_sha256, sha256, size,
                                body, headers, received_at, last_seen_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10)
         ON CONFLICT (source, account, event_id, sha256)
         DO UPDATE SET seen = seen + 1, last_seen_at = excluded.last_seen_at",
    )?
    .execute(params![
        original,
        &*e.source,
        &*e.account,
        e.event_id,
        original_sha,
        e.sha256_hex,
        e.body.len() as i64,
        body,
        e.headers,
        now
    ])?;
    Ok(Stored::Conflict)
}
