//! The inbox in one SQLite file (the default): WAL mode, one writer thread that commits in
//! batches ([`writer`]), read-only connections beside it ([`read`]), one `serve` per file
//! ([`lock`]).
//!
//! Invariant: every write of `serve` goes through the one [`writer::Writer`] thread, and a
//! caller hears "stored" only after the transaction that holds its event committed (with
//! `synchronous=FULL`, after the WAL was fsynced). Readers never block the writer (WAL).
//! The operator's commands write in short `BEGIN IMMEDIATE` transactions of their own
//! beside a running serve, and never migrate.

pub mod backup;
pub mod ingest;
pub mod lock;
pub mod queue;
pub mod read;
pub mod schema;
pub mod timeline;
pub mod upgrade;
pub mod writer;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;

use super::gaps::{self, Beat, Gap, Unconfirmed};
use super::retention::{self, Pruned, Rule, Walk};
use super::{
    CommitHealth, Commits, Db, DbError, EventData, Finished, Gauges, Look, NewEvent, Recorded,
    Settled, Stored, Turn, WriteError, pause,
};
use crate::config::Synchronous;
use crate::metrics::Metrics;
use schema::OpenError;
use writer::Writer;

/// `serve`'s handle on a SQLite inbox: its writer and its read-only connections. Cheap to
/// clone.
#[derive(Clone)]
pub struct SqliteStore {
    writer: Writer,
    readers: read::Pool,
    path: PathBuf,
}

/// What `serve` holds of a SQLite inbox besides the [`SqliteStore`]: the writer thread and
/// the inbox's lock.
pub struct Opened {
    thread: std::thread::JoinHandle<()>,
    /// None for a command's store, which runs beside a serve.
    lock: Option<lock::InboxLock>,
}

impl Opened {
    /// Waits up to `wait` for the writer thread to commit what is queued and close the
    /// inbox (it ends once every handle is dropped), then lets the lock go: only now may
    /// another serve open the inbox.
    pub async fn close(self, wait: Duration) {
        let Opened { thread, lock } = self;
        let flushed = tokio::task::spawn_blocking(move || thread.join());
        match tokio::time::timeout(wait, flushed).await {
            Ok(_) => tracing::info!("stopped; the inbox is closed"),
            Err(_) => tracing::warn!(
                "stopped without waiting longer for the writer; every acknowledged event is already committed"
            ),
        }
        drop(lock);
    }
}

impl SqliteStore {
    /// Opens the inbox for `serve`: its lock first (a second serve must not even migrate
    /// it), then the writer, which creates and migrates it.
    pub fn start(
        path: &Path,
        sync: Synchronous,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<(SqliteStore, Opened)> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("creating the inbox directory {}", dir.display()))?;
        }
        let lock = lock::InboxLock::acquire(path)?;
        let started = Writer::start(path.to_owned(), sync, metrics);
        Self::around(path, started, Some(lock))
    }

    /// Opens the inbox for an operator's command that runs `serve`'s machinery (`prune`,
    /// `recover`) beside a running serve: a writer of its own that never migrates, and no
    /// lock (its writes are short transactions, which wait for serve's writer's).
    pub fn for_command(
        path: &Path,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<(SqliteStore, Opened)> {
        Self::around(path, Writer::start_current(path.to_owned(), metrics), None)
    }

    /// The store around a writer just started, with read-only connections beside it.
    fn around(
        path: &Path,
        started: Result<(Writer, std::thread::JoinHandle<()>), OpenError>,
        lock: Option<lock::InboxLock>,
    ) -> anyhow::Result<(SqliteStore, Opened)> {
        let (writer, thread) =
            started.with_context(|| format!("opening the inbox {}", path.display()))?;
        Ok((
            SqliteStore {
                writer,
                readers: read::pool(path),
                path: path.to_owned(),
            },
            Opened { thread, lock },
        ))
    }

    /// Runs `read` on a read-only connection, off the async threads.
    async fn on_reader<T, F>(&self, read: F) -> Result<T, String>
    where
        T: Send + 'static,
        F: FnOnce(&rusqlite::Connection) -> Result<T, String> + Send + 'static,
    {
        let pool = self.readers.clone();
        tokio::task::spawn_blocking(move || {
            let conn = pool.get().map_err(|e| e.to_string())?;
            read(&conn)
        })
        .await
        .map_err(|e| e.to_string())?
    }
}

impl super::Backend for SqliteStore {
    async fn ingest(&self, event: NewEvent) -> Result<Stored, WriteError> {
        self.writer.ingest(event).await
    }

    async fn finish(&self, finished: Finished) -> Result<Recorded, WriteError> {
        self.writer.finish(finished).await
    }

    /// One writer job: the results, the claim, the claimed events and the look share a
    /// transaction.
    async fn settle(&self, turn: Turn) -> Result<Settled, WriteError> {
        self.writer
            .job(move |conn, now| queue::settle(conn, &turn, now))
            .await
    }

    async fn sweep(&self) -> Result<usize, WriteError> {
        self.writer.sweep().await
    }

    async fn retire_targets(&self, pairs: Vec<(String, String)>) -> Result<usize, WriteError> {
        self.writer
            .job(move |conn, now| queue::retire_targets(conn, &pairs, now))
            .await
    }

    async fn retire_unknown_targets(
        &self,
        keep: Vec<(String, String)>,
    ) -> Result<usize, WriteError> {
        self.writer
            .job(move |conn, now| queue::retire_unknown_targets(conn, &keep, now))
            .await
    }

    async fn start_receiving(
        &self,
        _replica: String,
        sources: Vec<String>,
    ) -> anyhow::Result<(Vec<Gap>, Vec<Unconfirmed>)> {
        let gaps = self
            .writer
            .job(move |conn, now| gaps::start(conn, &sources, now))
            .await?;
        Ok((gaps, Vec::new()))
    }

    async fn beat(
        &self,
        _replica: String,
        beats: Vec<Beat>,
        stopping: Option<Vec<String>>,
    ) -> anyhow::Result<Vec<Gap>> {
        Ok(self
            .writer
            .quiet_job(move |conn, now| {
                let recorded = gaps::beat(conn, &beats, now)?;
                if let Some(names) = &stopping {
                    gaps::stop(conn, names, now)?;
                }
                Ok(recorded)
            })
            .await?)
    }

    async fn store_unless_known(&self, events: Vec<NewEvent>) -> anyhow::Result<()> {
        self.writer
            .job(move |conn, now| {
                for e in &events {
                    if !Db::Sqlite(conn).is_stored(&e.source, &e.account, &e.event_id)? {
                        ingest::store(conn, e, now)?;
                    }
                }
                Ok(())
            })
            .await?;
        Ok(())
    }

    fn shared(&self) -> bool {
        false
    }

    async fn look(&self, source: &str, target: &str) -> Result<Look, String> {
        let (source, target) = (source.to_owned(), target.to_owned());
        self.on_reader(move |conn| {
            let paused = pause::all(Db::Sqlite(conn))
                .map_err(|e| e.to_string())?
                .into_iter()
                .find(|p| p.source == source && p.target == target);
            let due = queue::next_due(conn, &source, &target).map_err(|e| e.to_string())?;
            Ok((paused, due))
        })
        .await
    }

    async fn events(&self, ids: Vec<i64>) -> Result<HashMap<i64, EventData>, String> {
        self.on_reader(move |conn| queue::events(conn, &ids).map_err(|e| e.to_string()))
            .await
    }

    async fn gauges(&self, settled: bool) -> Result<Gauges, String> {
        self.on_reader(move |conn| {
            let s = |e: rusqlite::Error| e.to_string();
            let (counts, oldest_pending) = read::gauges(conn, settled).map_err(s)?;
            Ok(Gauges {
                counts,
                oldest_pending,
                paused: pause::all(Db::Sqlite(conn)).map_err(|e| e.to_string())?,
                pages: Some(schema::page_counts(conn).map_err(s)?),
            })
        })
        .await
    }

    async fn prune_chunk(
        &self,
        rule: Rule,
        now: SystemTime,
        walk: Walk,
    ) -> Result<(Pruned, Walk), WriteError> {
        self.writer
            .job(move |conn, _| {
                // From the same start if the writer runs the job again after a rollback.
                let mut walk = walk;
                let done = retention::prune_chunk(conn, &rule, now, &mut walk)?;
                Ok((done, walk))
            })
            .await
    }

    async fn release_free_pages(&self) -> Result<i64, WriteError> {
        self.writer
            .job(|conn, _| schema::release_free_pages(conn))
            .await
    }

    async fn checkpoint_if_idle(&self) {
        self.writer.checkpoint_if_idle().await;
    }

    fn wal_bytes(&self) -> Option<u64> {
        let mut wal = self.path.clone().into_os_string();
        wal.push("-wal");
        Some(std::fs::metadata(&wal).map_or(0, |m| m.len()))
    }

    async fn ping(&self) -> Result<(), WriteError> {
        self.writer.ping().await
    }

    fn health(&self) -> &CommitHealth {
        self.writer.health()
    }

    fn commits(&self) -> &Commits {
        self.writer.commits()
    }

    async fn read<T, F>(&self, read: F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(Db) -> anyhow::Result<T> + Send + 'static,
    {
        let pool = self.readers.clone();
        tokio::task::spawn_blocking(move || {
            let conn = pool.get()?;
            read(Db::Sqlite(&conn))
        })
        .await?
    }

    async fn change<T, F>(&self, change: F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: FnMut(Db, &str) -> Result<T, DbError> + Send + 'static,
    {
        let mut change = change;
        Ok(self
            .writer
            .job(move |conn, now| Ok(change(Db::Sqlite(conn), now)?))
            .await?)
    }
}
