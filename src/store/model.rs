//! The store's contract in types: what goes in and comes out of [`super::Store`], the
//! same for both backends. Nothing here names a database crate: the SQLite and PostgreSQL
//! implementations turn these into their own rows and statements.
//!
//! The event to store itself is [`crate::event::NewEvent`], built below the store.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crate::config::Rate;

pub use crate::event::{NewEvent, Origin, Version};

/// The most jobs in one transaction. Beyond a few hundred rows the fsync is no longer what
/// dominates a commit (reference/reliability-perf.md §1.5), and a bound keeps one commit's
/// latency, which every request in it waits for, in check.
pub const MAX_BATCH: usize = 512;

/// Jobs waiting for the writer. When it is full the disk is far behind the network, and a
/// new request is answered 503 at once rather than queued into a provider's timeout.
pub const QUEUE_CAPACITY: usize = 4096;

/// How long a caller waits for its commit before giving up (a request answers 503). A
/// commit can still land after that; the provider then retries and hears "duplicate", which
/// is honest. A disk that takes seconds to fsync is better answered late than never.
pub const COMMIT_WAIT: Duration = Duration::from_secs(10);

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

/// What the writer (or PostgreSQL's batcher of received events) reports about itself, for
/// `/readyz` and the watchdog.
#[derive(Debug, Default)]
pub struct CommitHealth {
    /// False after a failed commit or open, true again after a successful one.
    pub last_commit_ok: AtomicBool,
}

/// Why a delivery is `superseded`.
pub(crate) const SUPERSEDED: &str = "superseded: a version at least as new was already delivered";

/// What a target's worker asks for.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    pub source: String,
    pub target: String,
    /// How many deliveries it can start now.
    pub limit: usize,
    pub lease: Duration,
    /// After this many attempts the delivery is dead (the schedule's length plus one).
    pub max_attempts: u32,
    /// Whether the source orders its events (only then can anything be superseded).
    pub ordered: bool,
    /// The target's rate limit. One SQLite inbox has one serve, whose loop paces the
    /// target; replicas on PostgreSQL share the limit through the claim.
    pub rate: Option<Rate>,
}

/// What a claim gave.
#[derive(Debug, Default)]
pub struct Claims {
    pub claimed: Vec<Claimed>,
    /// How many of the rows the claim took were superseded instead of claimed ([`claim`]):
    /// with the claimed ones, what the claim used of its limit.
    pub superseded: usize,
    /// How many it gave up instead (`dead`: the last attempt's lease expired every time).
    pub given_up: usize,
    /// When a rate shared with other replicas gave fewer than asked: how long until one
    /// more may start.
    pub rate_wait: Option<Duration>,
}

impl Claims {
    /// Every row the claim took: claimed, superseded or given up. Fewer than asked means
    /// no other due row of the target was claimable when it ran.
    pub fn taken(&self) -> usize {
        self.claimed.len() + self.superseded + self.given_up
    }
}

/// One claimed delivery, ready for an attempt.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub delivery: i64,
    pub event: i64,
    /// 1 for the first attempt; counts on across replays.
    pub attempt: u32,
    /// Attempts made before the current retry schedule began (a replay starts a new one).
    pub schedule_base: u32,
    pub idempotency_key: String,
}

impl Claimed {
    /// This attempt's place in the current schedule: 1 for the first try after a replay.
    pub fn in_schedule(&self) -> u32 {
        self.attempt.saturating_sub(self.schedule_base)
    }
}

/// How an attempt ended, as the delivery's next state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    Delivered,
    /// Try again at this time (inbox text).
    Retry(String),
    Dead,
}

impl Next {
    /// The word stored in `attempts.outcome`.
    pub fn word(&self) -> &'static str {
        match self {
            Next::Delivered => "delivered",
            Next::Retry(_) => "retry",
            Next::Dead => "dead",
        }
    }
}

/// One finished attempt.
#[derive(Debug, Clone)]
pub struct Finished {
    pub delivery: i64,
    pub attempt: u32,
    /// The claim's schedule base: a replay since then starts a new schedule, which a late
    /// result of this attempt must not undo.
    pub schedule_base: u32,
    pub started_at: String,
    pub duration_ms: i64,
    pub next: Next,
    /// The HTTP status or the command's exit code.
    pub status: Option<i64>,
    pub error: Option<String>,
    pub output: Option<String>,
    /// The target may have acted without our hearing (a timeout).
    pub ambiguous: bool,
}

/// What recording an attempt did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    /// False when the delivery had meanwhile been claimed again: the newer claim decides.
    pub applied: bool,
    /// This delivery succeeded after an earlier attempt of it timed out: that ambiguity is
    /// now resolved.
    pub resolved_ambiguity: bool,
}

/// What an attempt needs to know about its event.
#[derive(Debug, Clone)]
pub struct EventData {
    pub source: String,
    pub event_id: String,
    /// None once retention dropped it.
    pub body: Option<Vec<u8>>,
    /// JSON `[[name, value], …]`.
    pub headers: Option<String>,
    pub event_type: Option<String>,
    pub received_at: String,
    /// Who sent it, as `proxy::client` decided.
    pub remote_addr: Option<String>,
    /// `webhook` or `api` (fetched by recovery).
    pub origin: String,
}

/// One turn of a target's loop, as one write: the results of the attempts that ended,
/// then a claim for the slots that are free. Recording a batch of results and claiming the
/// next deliveries in one transaction, rather than a transaction per result and one per
/// claim, is what lets one target forward thousands of events a second
/// (BENCHMARKS.md, "Forwarding").
#[derive(Debug, Default)]
pub struct Turn {
    pub results: Vec<Finished>,
    /// None when no slot is free (or the rate allows none): results only.
    pub claim: Option<ClaimRequest>,
}

/// What a [`Turn`] did.
#[derive(Debug)]
pub struct Settled {
    /// One per result, in order: how it was recorded, or why it was not (the lease then
    /// brings the delivery back).
    pub recorded: Vec<Result<Recorded, WriteError>>,
    pub claims: Claims,
    /// The claimed deliveries' events, by row id, or why they could not be read (each
    /// attempt then fails with it and is retried).
    pub events: Result<std::collections::HashMap<i64, EventData>, String>,
    /// When the claim took fewer than it asked for: whether the target is paused, and when
    /// its next claimable delivery is due (inbox text), for the loop to sleep until then.
    pub look: Option<Look>,
    /// Why the claim failed while the results were recorded (PostgreSQL, where they are
    /// separate jobs of the batcher; on SQLite the turn fails as a whole).
    pub claim_failed: Option<WriteError>,
}

impl Default for Settled {
    fn default() -> Settled {
        Settled {
            recorded: Vec::new(),
            claims: Claims::default(),
            events: Ok(Default::default()),
            look: None,
            claim_failed: None,
        }
    }
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

/// One paused target.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Paused {
    pub source: String,
    pub target: String,
    /// When it was paused (inbox text).
    pub paused_at: String,
    /// Who paused it, as they gave it.
    pub paused_by: String,
}

/// Whether a target is paused, and when its next claimable delivery is due (inbox text):
/// what a target's loop needs to know to sleep until then.
pub type Look = (Option<Paused>, Option<String>);
