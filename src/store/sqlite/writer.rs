//! The single writer: one OS thread owns the only read-write connection and commits what
//! the rest of hookinbox sends it in batches (group commit).
//!
//! Why one writer: SQLite admits one writer at a time anyway; with several, they would take
//! turns at the lock and each pay its own fsync. Here jobs queue in a channel, the thread
//! takes everything waiting (up to [`MAX_BATCH`]), runs it in one `BEGIN IMMEDIATE … COMMIT`
//! — one fsync for the whole batch — and only then answers each job. The fsync is shared;
//! the promise is not weakened: nobody hears "stored" before the commit that holds their
//! event returned.
//!
//! There is no artificial wait for a batch to fill: while one commit is in flight, the
//! next jobs pile up in the channel, so batches grow exactly when load does.
//!
//! A job is any closure over the connection (store an event, claim deliveries, record an
//! attempt). An error peculiar to one job fails only that job (the batch runs again with a
//! savepoint per job, see [`run_batch`]), while a storage error (disk full, I/O) fails the
//! batch.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::{Connection, TransactionBehavior};
use tokio::sync::{mpsc, oneshot};

use super::{ingest, queue};
use crate::clock;
use crate::config::Synchronous;
use crate::metrics::Metrics;
use crate::store::batching::queue_and_wait;
use crate::store::model::{MAX_BATCH, QUEUE_CAPACITY};
use crate::store::{CommitHealth, Commits, Finished, NewEvent, Recorded, Stored, WriteError};

/// Work for the writer thread.
trait Job: Send {
    /// Runs inside the batch's transaction. It may run twice: when another job of the
    /// batch fails, the transaction is rolled back and every job runs again, each in a
    /// savepoint of its own (see [`run_batch`]); so a job touches nothing but the database
    /// and its own result until [`Job::answer`].
    fn run(&mut self, conn: &Connection, now: &str) -> rusqlite::Result<()>;
    /// This job alone failed; its savepoint was rolled back.
    fn fail(&mut self, error: WriteError);
    /// Answers the caller once the batch committed, or with the batch's error.
    fn answer(self: Box<Self>, batch_error: Option<WriteError>);
    /// Whether this job stores a webhook event (for the batch-size metric).
    fn is_event(&self) -> bool;
    /// Whether this job is housekeeping too small to count as activity (the heartbeat):
    /// it does not keep the idle checkpoint from running.
    fn is_quiet(&self) -> bool;
}

struct Task<T, F> {
    work: F,
    result: Option<Result<T, WriteError>>,
    reply: oneshot::Sender<Result<T, WriteError>>,
    event: bool,
    quiet: bool,
}

impl<T, F> Job for Task<T, F>
where
    T: Send,
    F: FnMut(&Connection, &str) -> rusqlite::Result<T> + Send,
{
    fn run(&mut self, conn: &Connection, now: &str) -> rusqlite::Result<()> {
        self.result = Some(Ok((self.work)(conn, now)?));
        Ok(())
    }

    fn fail(&mut self, error: WriteError) {
        self.result = Some(Err(error));
    }

    fn answer(self: Box<Self>, batch_error: Option<WriteError>) {
        let result = match batch_error {
            Some(e) => Err(e),
            None => self.result.unwrap_or(Err(WriteError::Stopped)),
        };
        let _ = self.reply.send(result);
    }

    fn is_event(&self) -> bool {
        self.event
    }

    fn is_quiet(&self) -> bool {
        self.quiet
    }
}

enum Op {
    Job(Box<dyn Job>),
    /// Answered when the writer loop reaches it: proves the thread is alive and draining.
    Ping(oneshot::Sender<()>),
    /// Checkpoint the WAL if idle (see [`Writer::checkpoint_if_idle`]).
    Checkpoint(oneshot::Sender<()>),
}

/// How long the writer must have been idle before a checkpoint: a checkpoint copies pages
/// into the database file, which webhooks arriving meanwhile would wait behind.
pub const IDLE_BEFORE_CHECKPOINT: Duration = Duration::from_secs(5);

/// A handle to the writer thread. Cheap to clone; the thread stops when every handle is
/// dropped, after committing what was queued.
#[derive(Clone)]
pub struct Writer {
    tx: mpsc::Sender<Op>,
    health: Arc<CommitHealth>,
    commits: Arc<Commits>,
}

impl Writer {
    /// Opens the inbox (creating and migrating it if needed) on the calling thread, so that a
    /// bad path or a newer schema fails start-up with a clear message, then starts the thread.
    pub fn start(
        path: PathBuf,
        sync: Synchronous,
        metrics: Arc<Metrics>,
    ) -> Result<(Writer, JoinHandle<()>), super::schema::OpenError> {
        let conn = super::schema::open_writer(&path, sync, true)?;
        Ok(Writer::spawn(conn, path, Some(sync), metrics))
    }

    /// The writer of an operator's command beside a running serve: the inbox must exist
    /// and be of this binary's schema, which it never migrates (see
    /// [`super::schema::open_current`]).
    pub fn start_current(
        path: PathBuf,
        metrics: Arc<Metrics>,
    ) -> Result<(Writer, JoinHandle<()>), super::schema::OpenError> {
        let conn = super::schema::open_current(&path)?;
        Ok(Writer::spawn(conn, path, None, metrics))
    }

    /// `sync` is None for a command's writer, which reopens without migrating.
    fn spawn(
        conn: Connection,
        path: PathBuf,
        sync: Option<Synchronous>,
        metrics: Arc<Metrics>,
    ) -> (Writer, JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
        let health = Arc::new(CommitHealth {
            last_commit_ok: AtomicBool::new(true),
        });
        let state = Loop {
            last_job: Instant::now(),
            wal_dirty: true,
            written: 0,
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
        let commits = Arc::default();
        (
            Writer {
                tx,
                health,
                commits,
            },
            handle,
        )
    }

    /// Stores one event and waits until its commit returned. A full queue is refused at
    /// once: the request answers 503 instead of waiting into the provider's timeout.
    /// A new event announces itself to [`Writer::commits`] once committed.
    pub async fn ingest(&self, event: NewEvent) -> Result<Stored, WriteError> {
        let source = event.source.clone();
        let stored = self
            .submit(true, false, move |conn, now| {
                ingest::store(conn, &event, now)
            })
            .await;
        if matches!(stored, Ok(Stored::New)) {
            self.commits.committed(&source);
        }
        stored
    }

    /// Where commits of new events are announced, per source.
    pub fn commits(&self) -> &Commits {
        &self.commits
    }

    /// Records one attempt and the delivery's next state (see [`queue::finish`]).
    pub async fn finish(&self, finished: Finished) -> Result<Recorded, WriteError> {
        self.submit(false, true, move |conn, now| {
            queue::finish(conn, &finished, now)
        })
        .await
    }

    /// Runs `work` in the next batch's transaction and returns its result after the commit.
    pub async fn job<T, F>(&self, work: F) -> Result<T, WriteError>
    where
        T: Send + 'static,
        F: FnMut(&Connection, &str) -> rusqlite::Result<T> + Send + 'static,
    {
        self.submit(false, true, work).await
    }

    /// [`Writer::job`] for a small periodic write (the heartbeat) that must not count as
    /// activity: were it to, a heartbeat every few seconds would keep the idle checkpoint
    /// from ever running, and the WAL from ever being truncated.
    pub async fn quiet_job<T, F>(&self, work: F) -> Result<T, WriteError>
    where
        T: Send + 'static,
        F: FnMut(&Connection, &str) -> rusqlite::Result<T> + Send + 'static,
    {
        self.send(false, true, true, work).await
    }

    /// Asks for a WAL checkpoint, done only if the writer has had nothing to do for
    /// [`IDLE_BEFORE_CHECKPOINT`].
    pub async fn checkpoint_if_idle(&self) {
        let (reply, answer) = oneshot::channel();
        if self.tx.send(Op::Checkpoint(reply)).await.is_ok() {
            let _ = answer.await;
        }
    }

    /// Returns deliveries whose lease expired to the queue (see [`queue::sweep`]).
    pub async fn sweep(&self) -> Result<usize, WriteError> {
        self.submit(false, true, queue::sweep).await
    }

    async fn submit<T, F>(&self, event: bool, wait_for_room: bool, work: F) -> Result<T, WriteError>
    where
        T: Send + 'static,
        F: FnMut(&Connection, &str) -> rusqlite::Result<T> + Send + 'static,
    {
        self.send(event, wait_for_room, false, work).await
    }

    async fn send<T, F>(
        &self,
        event: bool,
        wait_for_room: bool,
        quiet: bool,
        work: F,
    ) -> Result<T, WriteError>
    where
        T: Send + 'static,
        F: FnMut(&Connection, &str) -> rusqlite::Result<T> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let op = Op::Job(Box::new(Task {
            work,
            result: None,
            reply,
            event,
            quiet,
        }));
        queue_and_wait(&self.tx, op, wait_for_room, answer).await
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

    pub fn health(&self) -> &CommitHealth {
        &self.health
    }
}

struct Loop {
    /// When the last job ran, for idle checkpoints.
    last_job: Instant,
    /// Something was committed since the last complete checkpoint.
    wal_dirty: bool,
    /// The connection's count of changed rows when last looked at.
    written: u64,
    /// None after a failure: the next batch reopens it. A connection that saw an I/O error
    /// is not trusted again (fsync failures cannot be retried on the same handle).
    conn: Option<Connection>,
    path: PathBuf,
    /// How serve's writer reopens (migrating); None for a command's, which never does.
    sync: Option<Synchronous>,
    metrics: Arc<Metrics>,
    health: Arc<CommitHealth>,
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
        let mut jobs = Vec::with_capacity(batch.len());
        let mut pings = Vec::new();
        let mut checkpoint = false;
        for op in batch.drain(..) {
            match op {
                Op::Job(job) => jobs.push(job),
                Op::Ping(reply) => pings.push(reply),
                Op::Checkpoint(reply) => {
                    checkpoint = true;
                    pings.push(reply);
                }
            }
        }
        // Idle means nothing written: claims and sweeps that found nothing do not count, or
        // a short sweep interval would keep the checkpoint from ever running; nor does
        // housekeeping such as the heartbeat (a quiet job), which would otherwise keep it
        // away for good. Whatever was written makes a checkpoint due.
        let written = self.conn.as_ref().map_or(0, Connection::total_changes);
        if written != self.written {
            self.written = written;
            self.wal_dirty = true;
        }
        let events = jobs.iter().filter(|j| j.is_event()).count();
        // Decided before the batch, on the jobs before it. A batch of housekeeping alone
        // (the heartbeat) while idle is checkpointed right after it, offered or not: else
        // each heartbeat would leave its pages in a WAL that an offer had just truncated.
        let quiet_only = !jobs.is_empty() && jobs.iter().all(|j| j.is_quiet());
        let checkpoint = ((checkpoint && jobs.is_empty()) || quiet_only)
            && self.last_job.elapsed() >= IDLE_BEFORE_CHECKPOINT;
        let batch_error = if jobs.is_empty() {
            // Only pings. After a failure nothing else would prove the inbox healthy again
            // if no traffic arrives (a load balancer may be holding it back because of
            // /readyz), so try a real write.
            if !self.health.last_commit_ok.load(Ordering::Relaxed) {
                self.probe();
            }
            None
        } else {
            let started = Instant::now();
            match self
                .connection()
                .and_then(|conn| run_batch(conn, &mut jobs))
            {
                Ok(active) => {
                    if active {
                        self.last_job = Instant::now();
                    }
                    if events > 0 {
                        self.metrics.writer_batch_size.observe(events as f64);
                    }
                    self.metrics
                        .writer_commit_seconds
                        .observe(started.elapsed().as_secs_f64());
                    self.health.last_commit_ok.store(true, Ordering::Relaxed);
                    let written = self.conn.as_ref().map_or(0, Connection::total_changes);
                    if written != self.written {
                        self.written = written;
                        self.wal_dirty = true;
                    }
                    // Committed but refused: the caller hears 503 and the provider's retry
                    // finds a duplicate. Safe, which is what the sweep checks.
                    (events > 0 && crate::failpoint::error("writer.after_commit"))
                        .then(|| WriteError::CommitFailed("failpoint writer.after_commit".into()))
                }
                Err(e) => {
                    self.failed(&e, jobs.len());
                    Some(WriteError::CommitFailed(e.to_string()))
                }
            }
        };
        if checkpoint && self.wal_dirty && batch_error.is_none() {
            self.checkpoint();
        }
        for job in jobs {
            job.answer(batch_error.clone());
        }
        for ping in pings {
            let _ = ping.send(());
        }
    }

    /// Moves the WAL's pages into the database and truncates it, unless a reader holds an
    /// old snapshot: then nothing waits (the busy timeout is off for the duration), and the
    /// next idle moment tries again.
    fn checkpoint(&mut self) {
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        let _ = conn.busy_timeout(Duration::ZERO);
        let result: rusqlite::Result<(i64, i64, i64)> =
            conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            });
        let _ = conn.busy_timeout(super::schema::WRITE_LOCK_TIMEOUT);
        match result {
            // Not again until something was written.
            Ok((0, _, _)) => self.wal_dirty = false,
            Ok((_, log, done)) => tracing::debug!(
                log,
                done,
                "idle checkpoint incomplete: a reader holds an old snapshot"
            ),
            Err(e) => tracing::debug!(error = %e, "idle checkpoint failed"),
        }
    }

    fn failed(&mut self, e: &super::schema::OpenError, jobs: usize) {
        self.metrics.writer_commit_failures.inc();
        self.health.last_commit_ok.store(false, Ordering::Relaxed);
        tracing::error!(
            error = %e,
            jobs,
            path = %self.path.display(),
            "commit failed; everything in the batch is refused (requests get 503) and the \
             inbox connection will be reopened"
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
            .map_err(super::schema::OpenError::from)
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
    fn connection(&mut self) -> Result<&mut Connection, super::schema::OpenError> {
        if self.conn.is_none() {
            self.conn = Some(match self.sync {
                Some(sync) => super::schema::open_writer(&self.path, sync, false)?,
                None => super::schema::open_current(&self.path)?,
            });
            tracing::info!(path = %self.path.display(), "reopened the inbox");
        }
        Ok(self.conn.as_mut().expect("just opened"))
    }
}

/// One transaction for the batch. An `Err` means nothing in the batch committed;
/// `Ok(true)` that a job other than a quiet one changed a row (activity, for the idle
/// checkpoint).
///
/// The jobs first run straight in the transaction. An error peculiar to one job (a
/// constraint, a value SQLite refuses) is rare, so only then is the transaction rolled back
/// and the batch run again with a savepoint per job, which refuses that job alone: a
/// savepoint per job always cost two more statements and a copy of every page the job
/// touched, for every job (measured, about a tenth of the writer's time per stored event).
fn run_batch(
    conn: &mut Connection,
    jobs: &mut [Box<dyn Job>],
) -> Result<bool, super::schema::OpenError> {
    let now = clock::iso_now();
    match run_jobs(conn, jobs, &now, false)? {
        Some(active) => Ok(active),
        None => Ok(run_jobs(conn, jobs, &now, true)?
            .expect("with a savepoint per job, a job's own error refuses that job only")),
    }
}

/// Runs the jobs in one transaction, each in a savepoint of its own if `savepoints`; None
/// when, without savepoints, a job failed on its own (the transaction is rolled back).
fn run_jobs(
    conn: &mut Connection,
    jobs: &mut [Box<dyn Job>],
    now: &str,
    savepoints: bool,
) -> Result<Option<bool>, super::schema::OpenError> {
    let mut active = false;
    let mut tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    for job in jobs.iter_mut() {
        let before = tx.total_changes();
        let ran = if savepoints {
            let sp = tx.savepoint()?;
            // Dropping a savepoint without committing it rolls back to it.
            job.run(&sp, now).and_then(|()| sp.commit())
        } else {
            job.run(&tx, now)
        };
        match ran {
            Ok(()) => active |= !job.is_quiet() && tx.total_changes() != before,
            Err(e) => {
                // A full disk or an I/O error fails the batch and retires the connection.
                // SQLite may also have rolled the whole transaction back; carrying on would
                // then run the rest in autocommit, one job at a time.
                if is_storage_error(&e) || tx.is_autocommit() {
                    return Err(e.into());
                }
                if !savepoints {
                    tracing::debug!(error = %e, "a job failed; the batch runs again with a savepoint per job");
                    return Ok(None);
                }
                tracing::error!(error = %e, "one write failed; it is refused, the rest of its batch goes on");
                job.fail(WriteError::CommitFailed(e.to_string()));
            }
        }
    }
    if cfg!(feature = "failpoints")
        && jobs.iter().any(|j| j.is_event())
        && crate::failpoint::error("writer.before_commit")
    {
        // What a failing fsync looks like to SQLite's caller.
        return Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_IOERR),
            Some("failpoint writer.before_commit".into()),
        )
        .into());
    }
    tx.commit()?;
    Ok(Some(active))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A job whose own statement fails is refused alone: the jobs before and after it in
    /// the same batch commit, whether the batch ran once or again with savepoints.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_failing_on_its_own_is_refused_and_the_rest_of_its_batch_commits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("inbox.db");
        let (writer, thread) =
            Writer::start(path.clone(), Synchronous::Full, Arc::new(Metrics::new())).unwrap();
        // Holds the writer for a moment, so that the three jobs below queue up behind it
        // and are taken as one batch.
        let hold = writer.job(|_, _| {
            std::thread::sleep(Duration::from_millis(300));
            Ok(())
        });
        let insert = |source: &'static str| {
            writer.job(move |conn, now| {
                conn.execute(
                    "INSERT INTO paused_targets (source, target, paused_at, paused_by)
                     VALUES (?1, 't', ?2, 'test')",
                    [source, now],
                )
            })
        };
        let before = insert("before");
        // writer_probe holds one row, id 1: id 2 breaks its CHECK constraint.
        let failing = writer.job(|conn, now| {
            conn.execute(
                "INSERT INTO writer_probe (id, probed_at) VALUES (2, ?1)",
                [now],
            )
        });
        let after = insert("after");
        let (hold, before, failing, after) = tokio::join!(hold, before, failing, after);
        hold.unwrap();
        assert_eq!(before.unwrap(), 1);
        assert!(
            matches!(failing, Err(WriteError::CommitFailed(ref e)) if e.contains("CHECK")),
            "{failing:?}"
        );
        assert_eq!(after.unwrap(), 1);
        drop(writer);
        thread.join().unwrap();
        let conn = Connection::open(&path).unwrap();
        let sources: Vec<String> = conn
            .prepare("SELECT source FROM paused_targets ORDER BY source")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(sources, ["after", "before"]);
        let probes: i64 = conn
            .query_row("SELECT count(*) FROM writer_probe", [], |r| r.get(0))
            .unwrap();
        assert_eq!(probes, 0);
    }
}
