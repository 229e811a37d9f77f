//! The inbox: what hookinbox keeps, behind one contract with two implementations.
//!
//! - [`Store`] is the contract that `serve` uses (the receive path, the delivery worker,
//!   retention, alerts, the admin listener and the web inbox). Its types are in [`model`],
//!   backend-neutral.
//! - [`Location::of`] is the one place that picks the backend, from the configuration:
//!   `serve` opens a [`Store`] there ([`Location::serve`]), the operator's commands a
//!   blocking connection ([`Location::read`], [`Location::write`]).
//! - [`Db`] is an open connection of either backend. Outside `store/` it offers only typed
//!   questions and changes, one per thing an operator asks or does ([`views`]); SQL is
//!   written here and nowhere else.
//! - [`sqlite`]: the embedded default, a WAL-mode file with one writer thread (group
//!   commit) and read-only connections beside it. [`postgres`]: one database shared by
//!   several stateless replicas, with batchers of its own.
//!
//! Both keep the same promises: `ingest` answers only after the transaction holding the
//! event committed; identity is unique; a claim hands a delivery to one attempt at a time
//! under a lease; a result recorded after a newer claim does not undo it.
//!
//! Why an enum and not a trait object: [`Backend`] is the contract as a trait, which each
//! backend implements in full (the compiler checks that neither misses a method), and
//! [`Store`] holds one of the two and forwards each call in one line ([`on_backend`]). A
//! `dyn` trait would box every call's future, the receive path's included, and could not
//! take the generic closures of [`Store::read`] and [`Store::change`].

pub mod batching;
pub mod commits;
mod db;
pub mod gaps;
pub mod kept;
pub mod learnt;
pub mod migrate;
pub mod model;
pub mod pause;
pub mod postgres;
pub mod replay;
pub mod retention;
mod row;
pub mod sqlite;
pub mod stats;
pub mod views;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

pub use commits::Commits;
pub(crate) use db::DbError;
pub use db::{Db, Open};
use gaps::{Beat, Gap, Unconfirmed};
pub use model::*;
use postgres::PostgresStore;
use retention::{Pruned, Rule, Walk};
use sqlite::SqliteStore;

use crate::config;
use crate::metrics::Metrics;

/// The contract each backend keeps; [`Store`]'s methods say what each one promises.
trait Backend {
    async fn ingest(&self, event: NewEvent) -> Result<Stored, WriteError>;
    async fn finish(&self, finished: Finished) -> Result<Recorded, WriteError>;
    async fn settle(&self, turn: Turn) -> Result<Settled, WriteError>;
    async fn sweep(&self) -> Result<usize, WriteError>;
    async fn retire_targets(&self, pairs: Vec<(String, String)>) -> Result<usize, WriteError>;
    async fn retire_unknown_targets(
        &self,
        keep: Vec<(String, String)>,
    ) -> Result<usize, WriteError>;
    async fn start_receiving(
        &self,
        replica: String,
        sources: Vec<String>,
    ) -> anyhow::Result<(Vec<Gap>, Vec<Unconfirmed>)>;
    async fn beat(
        &self,
        replica: String,
        beats: Vec<Beat>,
        stopping: Option<Vec<String>>,
    ) -> anyhow::Result<Vec<Gap>>;
    async fn store_unless_known(&self, events: Vec<NewEvent>) -> anyhow::Result<()>;
    fn shared(&self) -> bool;
    async fn look(&self, source: &str, target: &str) -> Result<Look, String>;
    async fn events(&self, ids: Vec<i64>) -> Result<HashMap<i64, EventData>, String>;
    async fn gauges(&self, settled: bool) -> Result<Gauges, String>;
    async fn prune_chunk(
        &self,
        rule: Rule,
        now: SystemTime,
        walk: Walk,
    ) -> Result<(Pruned, Walk), WriteError>;
    async fn release_free_pages(&self) -> Result<i64, WriteError>;
    async fn checkpoint_if_idle(&self);
    fn wal_bytes(&self) -> Option<u64>;
    async fn ping(&self) -> Result<(), WriteError>;
    fn health(&self) -> &CommitHealth;
    fn commits(&self) -> &Commits;
    async fn read<T, F>(&self, read: F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(Db) -> anyhow::Result<T> + Send + 'static;
    async fn change<T, F>(&self, change: F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: FnMut(Db, &str) -> Result<T, DbError> + Send + 'static;
}

/// The inbox as `serve` holds it. Cheap to clone.
#[derive(Clone)]
pub struct Store(Either);

#[derive(Clone)]
enum Either {
    Sqlite(SqliteStore),
    Postgres(PostgresStore),
}

/// Forwards a call to whichever backend `$store` holds.
macro_rules! on_backend {
    ($store:expr, $b:ident => $call:expr) => {
        match &$store.0 {
            Either::Sqlite($b) => $call,
            Either::Postgres($b) => $call,
        }
    };
}

impl Store {
    /// Stores one verified event; answers after its commit. A new event announces itself
    /// to [`Store::commits`] once committed.
    pub async fn ingest(&self, event: NewEvent) -> Result<Stored, WriteError> {
        on_backend!(self, b => b.ingest(event).await)
    }

    /// Records an attempt and the delivery's next state (a turn's results one by one,
    /// after the turn's write failed).
    pub async fn finish(&self, finished: Finished) -> Result<Recorded, WriteError> {
        on_backend!(self, b => b.finish(finished).await)
    }

    /// A target loop's turn ([`Turn`]): its attempts' results, then a claim, the claimed
    /// events, and (when the claim took fewer than asked) the [`Look`] that tells the loop
    /// how long to sleep. A claim that fails when results went with it is reported in
    /// [`Settled::claim_failed`], not as the turn's error, which would make the loop record
    /// those results again.
    pub async fn settle(&self, turn: Turn) -> Result<Settled, WriteError> {
        on_backend!(self, b => b.settle(turn).await)
    }

    /// Returns deliveries whose lease expired to the queue.
    pub async fn sweep(&self) -> Result<usize, WriteError> {
        on_backend!(self, b => b.sweep().await)
    }

    /// Marks dead the pending deliveries of these (source, target) pairs, targets a reload
    /// removed. Not on PostgreSQL: replicas in the middle of a rollout disagree about which
    /// targets exist, and one must not retire what the others deliver; there the operator
    /// retires a target removed everywhere with SQL (README, "More than one machine").
    pub async fn retire_targets(&self, pairs: Vec<(String, String)>) -> Result<usize, WriteError> {
        on_backend!(self, b => b.retire_targets(pairs).await)
    }

    /// Marks dead the pending deliveries of every target not in `keep` (serve's start and
    /// reload). Not on PostgreSQL, for the reason [`Store::retire_targets`] gives.
    pub async fn retire_unknown_targets(
        &self,
        keep: Vec<(String, String)>,
    ) -> Result<usize, WriteError> {
        on_backend!(self, b => b.retire_unknown_targets(keep).await)
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
    ) -> anyhow::Result<(Vec<Gap>, Vec<Unconfirmed>)> {
        on_backend!(self, b => b.start_receiving(replica, sources).await)
    }

    /// See [`gaps::confirm`]: the gap found, if the replicas that looked live were not.
    pub async fn confirm_receiving(&self, u: Unconfirmed) -> anyhow::Result<Option<Gap>> {
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
        on_backend!(self, b => b.beat(replica, beats, stopping).await)
    }

    /// Stores each of `events` whose identity is not stored yet (alert notifications,
    /// judged again after a restart or by another replica). On SQLite the check and the
    /// insert are one writer job; on PostgreSQL the check is a read and each is ingested as
    /// a webhook is, so two replicas storing at once store one and quarantine the other.
    pub async fn store_unless_known(&self, events: Vec<NewEvent>) -> anyhow::Result<()> {
        on_backend!(self, b => b.store_unless_known(events).await)
    }

    /// Whether other processes write this inbox too (replicas on PostgreSQL): what one
    /// learns (a handshake's secret) the others must read again.
    pub fn shared(&self) -> bool {
        on_backend!(self, b => b.shared())
    }

    /// Whether a target is paused, and when its next claimable delivery is due.
    pub async fn look(&self, source: &str, target: &str) -> Result<Look, String> {
        on_backend!(self, b => b.look(source, target).await)
    }

    /// The events with these row ids, by id (a missing id is not in the map).
    pub async fn events(&self, ids: Vec<i64>) -> Result<HashMap<i64, EventData>, String> {
        on_backend!(self, b => b.events(ids).await)
    }

    /// The figures `/metrics` shows. The delivery counts are of the backlog's states
    /// ([`crate::metrics::BACKLOG_STATES`]) only, unless `settled` asks for every state too,
    /// which walks every delivery row.
    pub async fn gauges(&self, settled: bool) -> Result<Gauges, String> {
        on_backend!(self, b => b.gauges(settled).await)
    }

    /// One chunk of `rule`'s retention as of `now`, in one short write among the webhooks'
    /// batches ([`retention`]). `walk` is where the last chunk of this rule stopped (on
    /// SQLite, which walks `events` by id); the walk returned is where this one did.
    pub async fn prune_chunk(
        &self,
        rule: Rule,
        now: SystemTime,
        walk: Walk,
    ) -> Result<(Pruned, Walk), WriteError> {
        on_backend!(self, b => b.prune_chunk(rule, now, walk).await)
    }

    /// Gives one step of free pages back to the file system; how many. Zero means there is
    /// nothing more to give (always on PostgreSQL, whose autovacuum reuses the space).
    pub async fn release_free_pages(&self) -> Result<i64, WriteError> {
        on_backend!(self, b => b.release_free_pages().await)
    }

    /// Offers the backend a moment of housekeeping: on SQLite a WAL checkpoint, done only
    /// if the writer has been idle for a while; on PostgreSQL nothing (the server has its
    /// own).
    pub async fn checkpoint_if_idle(&self) {
        on_backend!(self, b => b.checkpoint_if_idle().await)
    }

    /// The size of SQLite's write-ahead log, for `/metrics`; none on PostgreSQL.
    pub fn wal_bytes(&self) -> Option<u64> {
        on_backend!(self, b => b.wal_bytes())
    }

    /// Waits until the store has drained what was queued before this call.
    pub async fn ping(&self) -> Result<(), WriteError> {
        on_backend!(self, b => b.ping().await)
    }

    /// Whether the last commit succeeded.
    pub fn health(&self) -> &CommitHealth {
        on_backend!(self, b => b.health())
    }

    /// Where commits of new events are announced (within this process).
    pub fn commits(&self) -> &Commits {
        on_backend!(self, b => b.commits())
    }

    /// Runs `read` on a connection that reads the inbox (the web inbox's pages, alerts'
    /// judging): on SQLite a read-only one next to the writer. `read` asks [`Db`]'s typed
    /// questions.
    pub async fn read<T, F>(&self, read: F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(Db) -> anyhow::Result<T> + Send + 'static,
    {
        on_backend!(self, b => b.read(read).await)
    }

    /// Runs `change` in one write transaction, with the time as inbox text (the web
    /// inbox's actions): on SQLite as a writer job, among the webhooks' batches. The
    /// caller wakes the delivery loops ([`Store::commits`]) when it changed something.
    pub async fn change<T, F>(&self, change: F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: FnMut(Db, &str) -> Result<T, DbError> + Send + 'static,
    {
        on_backend!(self, b => b.change(change).await)
    }
}

/// Where the inbox is, as the configuration (or `--db`) names it; not yet open. The one
/// place that tells the backends apart by their settings.
#[derive(Clone)]
pub struct Location(Where);

#[derive(Clone)]
enum Where {
    Sqlite(PathBuf, config::Synchronous),
    Postgres(config::PgStore),
}

/// Where the inbox is and how it commits, as `check` reports it.
#[derive(Debug, serde::Serialize)]
pub struct Described {
    /// The SQLite file, or the PostgreSQL URL.
    pub path: String,
    pub backend: &'static str,
    pub synchronous: &'static str,
}

/// What `serve` holds of an open inbox besides its [`Store`]: on SQLite the writer thread,
/// joined at shutdown after the last handle is dropped, and the lock that keeps a second
/// serve away.
pub struct Held {
    sqlite: Option<sqlite::Opened>,
}

impl Held {
    /// Waits up to `wait` for the SQLite writer thread to commit what is queued and close
    /// the inbox (every [`Store`] handle must be dropped first), then lets the inbox's lock
    /// go. On PostgreSQL every answered event is committed already; the batchers end with
    /// their last handle.
    pub async fn close(self, wait: std::time::Duration) {
        match self.sqlite {
            Some(held) => held.close(wait).await,
            None => tracing::info!("stopped"),
        }
    }
}

impl Location {
    /// Where the configuration keeps the inbox.
    pub fn of(store: &config::StoreSettings) -> Location {
        match &store.backend {
            config::Backend::Sqlite => {
                Location(Where::Sqlite(store.path.clone(), store.synchronous))
            }
            config::Backend::Postgres(pg) => Location(Where::Postgres(pg.clone())),
        }
    }

    /// A SQLite file named on the command line (`--db`).
    pub fn file(path: PathBuf) -> Location {
        Location(Where::Sqlite(path, config::Synchronous::Full))
    }

    /// The inbox as messages name it: its file, or its database's URL (no password).
    pub fn name(&self) -> String {
        match &self.0 {
            Where::Sqlite(path, _) => path.display().to_string(),
            Where::Postgres(store) => store.url.clone(),
        }
    }

    /// What `serve`'s next start will do to an inbox of an older hookinbox that an
    /// operator should plan for (`check` says it): on SQLite, a conversion that rewrites
    /// the file or copies many rows. A PostgreSQL inbox migrates in its own database (a
    /// file left behind by `migrate-store` is never opened again).
    pub fn upgrade_warnings(&self) -> Vec<String> {
        match &self.0 {
            Where::Sqlite(path, _) => sqlite::upgrade::warnings(path),
            Where::Postgres(_) => Vec::new(),
        }
    }

    /// The inbox as `check` reports it.
    pub fn describe(&self) -> Described {
        match &self.0 {
            Where::Sqlite(path, sync) => Described {
                path: path.display().to_string(),
                backend: "sqlite",
                synchronous: match sync {
                    config::Synchronous::Full => "full",
                    config::Synchronous::Normal => "normal",
                },
            },
            Where::Postgres(pg) => Described {
                path: pg.url.clone(),
                backend: "postgres",
                synchronous: "synchronous_commit=on",
            },
        }
    }

    /// The SQLite file, when the inbox is one.
    pub fn sqlite_path(&self) -> Option<&Path> {
        match &self.0 {
            Where::Sqlite(path, _) => Some(path),
            Where::Postgres(_) => None,
        }
    }

    /// Whether it is a SQLite file that does not exist yet (`serve` creates it).
    pub fn missing(&self) -> bool {
        self.sqlite_path().is_some_and(|p| !p.exists())
    }

    /// The SQLite file, for the commands that only SQLite has (backup, migrate-store); on
    /// PostgreSQL an error that says what to use instead.
    pub fn sqlite_only(&self, what: &str, instead: &str) -> anyhow::Result<&Path> {
        match &self.0 {
            Where::Sqlite(path, _) => Ok(path),
            Where::Postgres(store) => anyhow::bail!(
                "{what} works on a SQLite inbox; this configuration keeps the inbox in \
                 PostgreSQL ({}): {instead}",
                store.url
            ),
        }
    }

    /// For reading only: SQLite read-only, so that a running serve's writer is never held up.
    pub fn read(&self) -> anyhow::Result<Open> {
        self.open(false)
    }

    /// For reading and steering (pause, replay): SQLite read-write, next to a running serve.
    pub fn write(&self) -> anyhow::Result<Open> {
        self.open(true)
    }

    fn open(&self, write: bool) -> anyhow::Result<Open> {
        use anyhow::Context as _;
        match &self.0 {
            Where::Sqlite(path, _) => {
                let conn = if write {
                    sqlite::schema::open_current(path)
                } else {
                    sqlite::read::open_current(path)
                };
                Ok(Open::Sqlite(conn.with_context(|| {
                    format!("opening the inbox {}", path.display())
                })?))
            }
            Where::Postgres(store) => Ok(Open::Postgres(
                postgres::session::PgConn::open(store)
                    .with_context(|| format!("opening the inbox {}", store.url))?,
            )),
        }
    }

    /// Opens the inbox for `serve`: on SQLite takes the inbox's lock, creates and migrates
    /// the file and starts the writer thread; on PostgreSQL connects, migrates and starts
    /// the batchers. Fails (and `serve` with it) when the inbox cannot be used.
    pub async fn serve(&self, metrics: Arc<Metrics>) -> anyhow::Result<(Store, Held)> {
        self.start(metrics, Purpose::Serve).await
    }

    /// Opens the inbox as a [`Store`] for an operator's command that runs `serve`'s
    /// machinery (`prune`, `recover`) beside a running serve: never migrating, never
    /// taking the inbox's lock (on PostgreSQL, batchers for this command alone).
    pub async fn for_command(&self, metrics: Arc<Metrics>) -> anyhow::Result<(Store, Held)> {
        self.start(metrics, Purpose::Command).await
    }

    async fn start(
        &self,
        metrics: Arc<Metrics>,
        purpose: Purpose,
    ) -> anyhow::Result<(Store, Held)> {
        use anyhow::Context as _;
        match &self.0 {
            Where::Sqlite(path, sync) => {
                let (store, held) = match purpose {
                    Purpose::Serve => SqliteStore::start(path, *sync, metrics)?,
                    Purpose::Command => SqliteStore::for_command(path, metrics)?,
                };
                Ok((Store(Either::Sqlite(store)), Held { sqlite: Some(held) }))
            }
            Where::Postgres(pg) => {
                let (started, what) = match purpose {
                    Purpose::Serve => (
                        PostgresStore::start(pg, metrics).await,
                        "opening the PostgreSQL inbox at",
                    ),
                    Purpose::Command => (
                        PostgresStore::for_command(pg, metrics).await,
                        "opening the inbox",
                    ),
                };
                let store = started
                    .map_err(anyhow::Error::new)
                    .with_context(|| format!("{what} {}", pg.url))?;
                Ok((Store(Either::Postgres(store)), Held { sqlite: None }))
            }
        }
    }
}

/// Who opens a [`Store`]: `serve` (which migrates, and on SQLite holds the lock) or an
/// operator's command beside it.
#[derive(Clone, Copy)]
enum Purpose {
    Serve,
    Command,
}

/// A schema file's "-- migrate: N" sections: (version, SQL), in file order.
pub(crate) fn schema_sections(schema: &'static str) -> Vec<(i64, &'static str)> {
    // A marker is a line of its own; the file's header mentions the marker mid-line.
    const MARK: &str = "\n-- migrate: ";
    let mut out = Vec::new();
    let mut rest = schema;
    while let Some(start) = rest.find(MARK) {
        let after = &rest[start + MARK.len()..];
        let line_end = after.find('\n').unwrap_or(after.len());
        let version: i64 = after[..line_end]
            .trim()
            .parse()
            .expect("a schema file's migrate marker is followed by its version number");
        let body = &after[line_end..];
        let end = body.find(MARK).unwrap_or(body.len());
        out.push((version, &body[..end]));
        rest = &body[end..];
    }
    out
}
