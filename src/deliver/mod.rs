//! The delivery worker: forwards each stored event to its source's targets, under one
//! idempotency key, until each target accepts it or its schedule runs out.
//!
//! Invariant: a delivery is only ever marked `delivered` after its target accepted it, and
//! a crash at any moment leaves it claimable again (its lease expires), so the worst case is
//! a redelivery with the same key, never a lost event. All writes go through the writer.
//!
//! One task per target claims due deliveries (up to its concurrency) and runs each attempt
//! in a task of its own; one failing target never holds back another, because each has its
//! own rows, claims and tasks. A sweeper returns expired leases to the queue. A paused
//! target's loop claims nothing (the claim itself skips it, see `store::pause`) and idles
//! until it sees the target resumed.

pub mod backoff;
pub mod pace;
pub mod targets;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::clock;
use crate::config::{Rate, Source, Target};
use crate::metrics::{AttemptLabels, Metrics, TargetLabels};
use crate::store::Store;
use crate::store::pause::Paused;
use crate::store::queue::{ClaimRequest, Claimed, EventData, Finished, Next, Turn};
use crate::store::writer::WriteError;
use pace::Pace;
use targets::{ADDRESS_HEADERS, Attempt, AttemptResult, Forwarder, Verdict};

/// How long a target's task sleeps at most before looking for due work again, when nothing
/// woke it (a retry coming due is found by its time; this catches the rest).
pub const IDLE_POLL: Duration = Duration::from_secs(1);
/// On shutdown, how long attempts in flight may take to finish and be recorded; the rest are
/// abandoned to their lease and retried after a restart.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// On a reload, the old loops' attempts may run to their own timeout (at most an hour).
const RELOAD_DRAIN: Duration = Duration::from_secs(3600);
/// Under load, the longest a target's loop waits for more free slots before claiming for
/// the ones it has.
const CLAIM_BATCH_WAIT: Duration = Duration::from_millis(100);
/// Pause after the writer refused a claim (the inbox is failing), so the loop does not spin.
const CLAIM_BACKOFF: Duration = Duration::from_secs(1);

/// One configured target, ready to send.
struct TargetRun {
    source: String,
    name: String,
    /// The schedule of waits between attempts (one attempt more than waits).
    retry: Vec<Duration>,
    concurrency: usize,
    /// How fast attempts may start, if limited.
    rate: Option<Rate>,
    lease: Duration,
    /// Whether the source orders its events.
    ordered: bool,
    /// Its kind's running target, which makes the attempts.
    forwarder: Box<dyn Forwarder>,
}

impl TargetRun {
    /// `source` names the target's source; `ordered`, whether that source orders its events.
    fn new(source: &str, ordered: bool, t: &Target) -> anyhow::Result<TargetRun> {
        Ok(TargetRun {
            source: source.to_owned(),
            name: t.name.clone(),
            retry: t.retry.clone(),
            concurrency: t.concurrency,
            rate: t.rate,
            lease: t.lease,
            ordered,
            forwarder: t.destination.forwarder(t.timeout)?,
        })
    }

    fn max_attempts(&self) -> u32 {
        u32::try_from(self.retry.len()).unwrap_or(u32::MAX - 1) + 1
    }
}

/// Everything a loop, an attempt and the sweeper need.
#[derive(Clone)]
struct Shared {
    store: Store,
    metrics: Arc<Metrics>,
}

/// What the worker reports about itself, for `/readyz` and the watchdog.
#[derive(Debug, Default)]
pub struct Health {
    /// Set when shutdown begins.
    pub draining: AtomicBool,
    /// Per target loop, the unix milliseconds of its last turn.
    beats: std::sync::Mutex<Vec<(String, Arc<AtomicU64>)>>,
}

/// A loop that has not turned for this long is stuck: every turn is bounded by the idle
/// poll (1 s), a claim (the writer's commit wait, 10 s) or a read (its busy timeout, 5 s).
pub const STUCK_AFTER: Duration = Duration::from_secs(30);

impl Health {
    /// The first target loop that has not turned within [`STUCK_AFTER`], if any.
    pub fn stuck(&self) -> Option<String> {
        let now = unix_millis();
        let limit = u64::try_from(STUCK_AFTER.as_millis()).unwrap_or(u64::MAX);
        self.beats
            .lock()
            .expect("no panics while holding the lock")
            .iter()
            .find(|(_, beat)| now.saturating_sub(beat.load(Ordering::Relaxed)) > limit)
            .map(|(name, _)| name.clone())
    }
}

fn unix_millis() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A configuration's targets, ready to start ([`Deliverer::plan`]).
pub struct Planned(Vec<Arc<TargetRun>>);

impl Planned {
    /// Their (source, target) pairs.
    fn pairs(&self) -> Vec<(String, String)> {
        self.0
            .iter()
            .map(|t| (t.source.clone(), t.name.clone()))
            .collect()
    }
}

/// The loops started from one configuration.
struct Generation {
    /// None while running; Some(drain) once told to stop: how long its attempts may take.
    stop: watch::Sender<Option<Duration>>,
    tasks: JoinSet<()>,
    /// Its (source, target) pairs.
    targets: Vec<(String, String)>,
    /// The pairs earlier reloads removed, which its sweeper retires (see
    /// [`RETIRE_REMOVED_FOR`]).
    removed: Vec<(String, String)>,
}

/// Targets removed by a reload, whose deliveries can still come back to `pending` after the
/// reload retired them: a request that was in flight on the old configuration commits one,
/// an old attempt ends in a retry, a lease of theirs expires. The new generation's sweeper
/// retires them again on every sweep for this long: an attempt runs at most an hour, a
/// lease at most two, and a request in flight finishes within its body and commit timeouts.
const RETIRE_REMOVED_FOR: Duration = Duration::from_secs(2 * 3600 + 60);

/// How often the sweeper looks when no target has a lease to set its pace (a configuration
/// without targets that still retires removed ones).
const SWEEP_WITHOUT_TARGETS: Duration = Duration::from_secs(30);

/// The running worker.
pub struct Deliverer {
    shared: Shared,
    current: Generation,
    /// Earlier generations, stopped by a reload, finishing their attempts.
    retiring: Vec<Generation>,
    health: Arc<Health>,
}

impl Deliverer {
    /// Starts one task per target and the sweeper. Each target's loop wakes when its
    /// source's commits are announced through the writer.
    pub fn start(
        sources: &[Arc<Source>],
        alerts: &[Target],
        store: Store,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<Deliverer> {
        let shared = Shared { store, metrics };
        let health = Arc::new(Health::default());
        let current = Self::spawn(Self::plan(sources, alerts)?, Vec::new(), &shared, &health);
        Ok(Deliverer {
            shared,
            current,
            retiring: Vec::new(),
            health,
        })
    }

    /// Everything about a configuration's targets that can fail (an HTTP client, a signing
    /// key), done before any loop starts, so that a reload either switches whole or not
    /// at all. The `[[alerts]]` targets are targets of the internal source
    /// [`crate::alerts::SOURCE`], delivered like any other.
    pub fn plan(sources: &[Arc<Source>], alerts: &[Target]) -> anyhow::Result<Planned> {
        let mut runs = Vec::new();
        for source in sources {
            for target in &source.targets {
                runs.push(Arc::new(TargetRun::new(
                    &source.name,
                    source.order.is_some(),
                    target,
                )?));
            }
        }
        for target in alerts {
            runs.push(Arc::new(TargetRun::new(
                crate::alerts::SOURCE,
                false,
                target,
            )?));
        }
        Ok(Planned(runs))
    }

    fn spawn(
        planned: Planned,
        removed: Vec<(String, String)>,
        shared: &Shared,
        health: &Health,
    ) -> Generation {
        let targets = planned.pairs();
        let Planned(runs) = planned;
        let (stop, stopped) = watch::channel(None);
        let shortest_lease = runs.iter().map(|t| t.lease).min();
        let mut tasks = JoinSet::new();
        let mut beats = Vec::new();
        for target in runs {
            let beat = Arc::new(AtomicU64::new(unix_millis()));
            beats.push((format!("{}/{}", target.source, target.name), beat.clone()));
            let commits = shared.store.commits().subscribe(&target.source);
            tasks.spawn(run_target(
                target,
                shared.clone(),
                commits,
                stopped.clone(),
                beat,
            ));
        }
        if shortest_lease.is_some() || !removed.is_empty() {
            let every = shortest_lease.map_or(SWEEP_WITHOUT_TARGETS, sweep_interval);
            let retire = Removed {
                targets: removed.clone(),
                until: Instant::now() + RETIRE_REMOVED_FOR,
            };
            tasks.spawn(sweeper(every, retire, shared.clone(), stopped));
        }
        *health
            .beats
            .lock()
            .expect("no panics while holding the lock") = beats;
        Generation {
            stop,
            tasks,
            targets,
            removed,
        }
    }

    /// Switches to the targets of a new configuration, planned beforehand (this cannot
    /// fail): the old loops stop claiming and finish their attempts in the background; new
    /// loops start at once. A claim is atomic, so the two never take the same delivery.
    pub fn switch(&mut self, planned: Planned) {
        let kept = planned.pairs();
        // Removed now, or by an earlier reload whose old attempts may still be running.
        let mut removed: Vec<(String, String)> = self
            .current
            .targets
            .iter()
            .chain(&self.current.removed)
            .filter(|pair| !kept.contains(pair))
            .cloned()
            .collect();
        removed.sort();
        removed.dedup();
        let next = Self::spawn(planned, removed, &self.shared, &self.health);
        for g in &mut self.retiring {
            while g.tasks.try_join_next().is_some() {}
        }
        self.retiring.retain(|g| !g.tasks.is_empty());
        let old = std::mem::replace(&mut self.current, next);
        // A reload is no emergency: the old attempts finish within their own timeouts.
        let _ = old.stop.send(Some(RELOAD_DRAIN));
        self.retiring.push(old);
    }

    pub fn health(&self) -> Arc<Health> {
        self.health.clone()
    }

    /// Stops claiming, lets attempts in flight finish and be recorded (up to
    /// [`DRAIN_TIMEOUT`]), then abandons the rest to their leases.
    pub async fn shutdown(mut self) {
        self.health.draining.store(true, Ordering::Relaxed);
        self.retiring.push(self.current);
        for g in &self.retiring {
            let _ = g.stop.send(Some(DRAIN_TIMEOUT));
        }
        for mut g in self.retiring {
            while g.tasks.join_next().await.is_some() {}
        }
    }
}

/// How often expired leases are looked for: half the shortest lease, within bounds.
fn sweep_interval(shortest_lease: Duration) -> Duration {
    (shortest_lease / 2).clamp(Duration::from_millis(500), Duration::from_secs(30))
}

/// Targets a reload removed, retired again on every sweep until `until`.
struct Removed {
    targets: Vec<(String, String)>,
    until: Instant,
}

async fn sweeper(
    every: Duration,
    removed: Removed,
    shared: Shared,
    mut stop: watch::Receiver<Option<Duration>>,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        if !removed.targets.is_empty() && Instant::now() < removed.until {
            let pairs = removed.targets.clone();
            match shared.store.retire_targets(pairs).await {
                Ok(0) => {}
                Ok(n) => tracing::warn!(
                    deliveries = n,
                    "deliveries of targets removed by the last reload came back after it; \
                     they are dead too (`hookinbox replay --dead` sends them once the target is back)"
                ),
                Err(e) => {
                    tracing::warn!(error = %e, "retiring removed targets' deliveries failed; will try again")
                }
            }
        }
        match shared.store.sweep().await {
            Ok(0) => {}
            Ok(n) => {
                tracing::warn!(
                    deliveries = n,
                    "leases expired (an attempt never finished); queued again under the same keys"
                );
                shared.store.commits().all();
            }
            Err(e) => tracing::warn!(error = %e, "sweeping expired leases failed; will try again"),
        }
    }
}

/// One target's loop: record the results of attempts that ended and claim what is due
/// (up to the free concurrency, and what its rate allows now) in one write, start an
/// attempt task per claim, sleep until something is due, the rate allows more, a new event
/// is committed or an attempt ends.
async fn run_target(
    t: Arc<TargetRun>,
    shared: Shared,
    mut commits: watch::Receiver<u64>,
    mut stop: watch::Receiver<Option<Duration>>,
    beat: Arc<AtomicU64>,
) {
    let mut inflight: JoinSet<Option<Done>> = JoinSet::new();
    // Attempts that ended, waiting to be recorded with the next turn.
    let mut done: Vec<Done> = Vec::new();
    let mut last_turn = Instant::now();
    // The pause last seen, to log when it begins and ends. A paused target's loop keeps
    // turning (nothing is due, so it sleeps the idle poll or until a commit wakes it): that
    // is how it notices a resume written by another process, within a second.
    let mut paused: Option<Paused> = None;
    let mut pace = t.rate.as_ref().map(|r| Pace::new(r, Instant::now()));
    // When the next claimable delivery is due, as last seen; and whether something may
    // have changed since (a commit, the idle poll), so that it is worth reading again.
    let mut due: Option<SystemTime> = None;
    let mut look_again = true;
    // While paused, a commit of the source is no reason to look (nothing can come due):
    // the loop looks when the last look is an idle poll old, or when something other than a
    // commit woke it ([`Commits::all`]: a resume or a replay inside serve). A look after
    // every commit was 16% of the async side's samples while a paused target's source
    // received at full rate (BENCHMARKS.md, "Readers without a map, and a paused target's
    // looks").
    let mut last_look = Instant::now();
    let mut steered = *commits.borrow();
    while stop.borrow().is_none() {
        beat.store(unix_millis(), Ordering::Relaxed);
        while let Some(ended) = inflight.try_join_next() {
            done.extend(ended.ok().flatten());
        }
        let free = t.concurrency.saturating_sub(inflight.len());
        let mut wait = IDLE_POLL;
        // Work in batches: every turn is a commit, so under load wait until half the slots
        // are free (attempts ending wake the loop), or a short while since the last turn
        // (slow attempts must not keep free slots idle, nor results unrecorded); when idle,
        // at once.
        let batch_ready = inflight.is_empty()
            || free * 2 >= t.concurrency
            || last_turn.elapsed() >= CLAIM_BATCH_WAIT;
        if batch_ready && (free > 0 || !done.is_empty()) {
            // With a rate, only what may start now is claimed: a claimed delivery's lease
            // runs from the claim, so it must not wait for the rate in flight.
            let allowed = pace
                .as_ref()
                .map_or(free, |p| p.available(Instant::now()).min(free));
            // Nothing to record: a read tells whether a claim (a write) is worth it.
            if look_again && done.is_empty() && free > 0 {
                if let Some(look) = look(&shared.store, &t).await {
                    note_pause(&t, &mut paused, look.paused);
                    due = look.due;
                }
                look_again = false;
                last_look = Instant::now();
            }
            let due_now = due.is_some_and(|at| at <= SystemTime::now());
            // Writing the results anyway, a claim rides along whenever a slot is free: one
            // that finds nothing says when to look next.
            let claim = (allowed > 0 && (due_now || !done.is_empty())).then(|| ClaimRequest {
                source: t.source.clone(),
                target: t.name.clone(),
                limit: allowed,
                lease: t.lease,
                max_attempts: t.max_attempts(),
                ordered: t.ordered,
                rate: t.rate,
            });
            if due_now && allowed == 0 && free > 0 {
                // Due, but the rate allows none yet: sleep until it allows one.
                wait = pace
                    .as_ref()
                    .map_or(IDLE_POLL, |p| p.wait(Instant::now()))
                    .min(IDLE_POLL);
            }
            if claim.is_some() || !done.is_empty() {
                last_turn = Instant::now();
                let asked = claim.as_ref().map_or(0, |c| c.limit);
                match turn(&t, &shared, std::mem::take(&mut done), claim).await {
                    Some(Taken { claims, look, .. })
                        if crate::failpoint::error("deliver.after_claim") =>
                    {
                        // Claimed, then forgotten as a crash would: the leases bring them back.
                        drop(claims);
                        if let Some((_, next)) = look {
                            due = next;
                        }
                    }
                    Some(Taken {
                        claims,
                        not_sent,
                        mut events,
                        rate_wait,
                        look,
                    }) => {
                        if let Some(p) = &mut pace {
                            p.take(claims.len(), Instant::now());
                        }
                        // Rows superseded or given up used the claim's limit too.
                        let all = asked > 0 && claims.len() + not_sent == asked;
                        for c in claims {
                            let event = match &mut events {
                                Ok(found) => Ok(found.remove(&c.event)),
                                Err(e) => Err(e.clone()),
                            };
                            inflight.spawn(attempt(t.clone(), c, event, shared.clone()));
                        }
                        if let Some((p, next)) = look {
                            note_pause(&t, &mut paused, p);
                            due = next;
                        }
                        if all {
                            // There may be more due: look again at once (if the rate
                            // stopped this claim, the next turn sleeps until it allows more).
                            due = Some(SystemTime::now());
                            continue;
                        }
                        if let Some(rate_wait) = rate_wait {
                            // The replicas' shared rate gave fewer: sleep until it allows
                            // one more (or an attempt ends).
                            due = None;
                            wait = rate_wait.min(IDLE_POLL);
                        }
                    }
                    None => {
                        due = None;
                        wait = CLAIM_BACKOFF;
                    }
                }
            }
            // Sleep until the next delivery comes due. One that is due but was not claimed
            // waits behind an earlier version of its key: an attempt ending wakes us.
            if let Some(at) = due
                && let Ok(until) = at.duration_since(SystemTime::now())
            {
                wait = wait.min(until);
            }
        }
        if !done.is_empty() {
            // Results wait for the batch at most a short while.
            wait = wait.min(CLAIM_BATCH_WAIT.saturating_sub(last_turn.elapsed()));
        }
        if paused.is_some() && !look_again {
            // The idle poll counts from the last look: commits waking the loop meanwhile
            // must not push it back.
            wait = wait.min(IDLE_POLL.saturating_sub(last_look.elapsed()));
        }
        tokio::select! {
            // The writer lives as long as this loop's handle to it: never an error.
            _ = commits.changed() => {
                let now_steered = *commits.borrow_and_update();
                look_again |= paused.is_none()
                    || now_steered != steered
                    || last_look.elapsed() >= IDLE_POLL;
                steered = now_steered;
            }
            Some(ended) = inflight.join_next(), if !inflight.is_empty() => {
                done.extend(ended.ok().flatten());
            }
            () = tokio::time::sleep(wait) => look_again = true,
            changed = stop.changed() => if changed.is_err() { break },
        }
    }
    // Draining: attempts in flight may finish and record their result; the rest are dropped
    // (a command's process group is killed) and their leases bring them back after a
    // restart.
    // A reload's long drain is cut short if a shutdown follows.
    let started = tokio::time::Instant::now();
    let mut drain = stop.borrow().unwrap_or(DRAIN_TIMEOUT);
    loop {
        if !done.is_empty() {
            turn(&t, &shared, std::mem::take(&mut done), None).await;
        }
        tokio::select! {
            ended = inflight.join_next() => match ended {
                None => return,
                Some(ended) => done.extend(ended.ok().flatten()),
            },
            () = tokio::time::sleep_until(started + drain) => break,
            changed = stop.changed() => match changed {
                Ok(()) => drain = drain.min(stop.borrow().unwrap_or(DRAIN_TIMEOUT) + started.elapsed()),
                Err(_) => break,
            },
        }
    }
    tracing::warn!(source = %t.source, target = %t.name, abandoned = inflight.len(),
        "attempts still running after {drain:?}; they will be retried after their lease");
    inflight.abort_all();
}

/// What a turn claimed, ready to start.
struct Taken {
    claims: Vec<Claimed>,
    /// Rows the claim took but sends no attempt for: superseded (an older version of a
    /// key) or given up (its last attempt never finished).
    not_sent: usize,
    events: Result<std::collections::HashMap<i64, EventData>, String>,
    /// Replicas sharing a rate: how long until one more may start.
    rate_wait: Option<Duration>,
    /// When the claim took fewer than asked: the pause (if any) and when the next
    /// delivery is due.
    look: Option<(Option<Paused>, Option<SystemTime>)>,
}

/// Records `done` and claims (one write, [`crate::store::queue::Turn`]); None when that
/// write failed (logged), or when only its claim did (PostgreSQL: the results stand). When
/// the write was refused, the results are then recorded one by one; otherwise (the writer
/// stopped, or did not answer in time) their leases bring the deliveries back.
async fn turn(
    t: &TargetRun,
    shared: &Shared,
    done: Vec<Done>,
    claim: Option<ClaimRequest>,
) -> Option<Taken> {
    let results = done.iter().map(|d| d.finished.clone()).collect();
    let settled = match shared.store.settle(Turn { results, claim }).await {
        Ok(settled) => settled,
        // The write was refused (not a timeout, after which it may still commit): one
        // result the inbox refuses must not keep the others from being recorded.
        Err(e @ WriteError::CommitFailed(_)) => {
            tracing::warn!(source = %t.source, target = %t.name, error = %e,
                results = done.len(), "recording attempts and claiming failed; recording each on its own");
            for d in done {
                let recorded = shared.store.finish(d.finished.clone()).await;
                recorded_metrics(t, shared, &d, recorded);
            }
            return None;
        }
        Err(e) => {
            for d in &done {
                recorded_metrics(t, shared, d, Err(e.clone()));
            }
            return None;
        }
    };
    for (d, recorded) in done.iter().zip(settled.recorded) {
        recorded_metrics(t, shared, d, recorded);
    }
    if let Some(e) = settled.claim_failed {
        // The results stand, each as recorded; the loop backs off as from a failed turn.
        tracing::warn!(source = %t.source, target = %t.name, error = %e,
            "claiming deliveries failed; the attempts' results went in on their own");
        return None;
    }
    Some(Taken {
        claims: settled.claims.claimed,
        not_sent: settled.claims.superseded + settled.claims.given_up,
        events: settled.events,
        rate_wait: settled.claims.rate_wait,
        look: settled.look.map(|(paused, due)| {
            (
                paused,
                due.and_then(|text| humantime::parse_rfc3339(&text).ok()),
            )
        }),
    })
}

/// The metrics that depend on how an attempt was recorded, and the log line when it was
/// not (its lease then brings the delivery back under the same key).
fn recorded_metrics(
    t: &TargetRun,
    shared: &Shared,
    d: &Done,
    recorded: Result<crate::store::queue::Recorded, WriteError>,
) {
    let labels = TargetLabels {
        source: t.source.clone(),
        target: t.name.clone(),
    };
    match recorded {
        Ok(recorded) => {
            if recorded.resolved_ambiguity {
                shared
                    .metrics
                    .ambiguous_resolved
                    .get_or_create(&labels)
                    .inc();
            }
            if d.finished.next == Next::Delivered
                && recorded.applied
                && let Some(received) = d
                    .received_at
                    .as_deref()
                    .and_then(|t| humantime::parse_rfc3339(t).ok())
            {
                let lag = SystemTime::now()
                    .duration_since(received)
                    .unwrap_or_default();
                shared
                    .metrics
                    .delivery_lag_seconds
                    .observe(lag.as_secs_f64());
            }
        }
        Err(e) => tracing::warn!(source = %t.source, target = %t.name, event_id = d.event_id,
            error = %e, "recording the attempt failed; the delivery will be retried after its lease"),
    }
}

/// What a target's loop reads before it claims.
struct Look {
    /// The pause holding the target back, if it is paused.
    paused: Option<Paused>,
    /// When its next claimable delivery is due; never while paused.
    due: Option<SystemTime>,
}

/// Reads whether the target is paused and when its next pending delivery is due; None when
/// the inbox could not be read (logged).
async fn look(store: &Store, t: &TargetRun) -> Option<Look> {
    let read = store.look(&t.source, &t.name).await;
    match read {
        Ok((paused, due)) => Some(Look {
            paused,
            due: due.and_then(|text| humantime::parse_rfc3339(&text).ok()),
        }),
        Err(e) => {
            tracing::warn!(source = %t.source, target = %t.name, error = %e, "reading the delivery queue");
            None
        }
    }
}

/// Logs a pause beginning (or found at start-up) and ending, once each.
fn note_pause(t: &TargetRun, last: &mut Option<Paused>, now: Option<Paused>) {
    match (last.is_some(), &now) {
        (false, Some(p)) => tracing::info!(source = %t.source, target = %t.name,
            paused_at = %p.paused_at, paused_by = ?p.paused_by,
            "target is paused: its deliveries stay pending until `hookinbox resume {}/{}`",
            t.source, t.name),
        (true, None) => tracing::info!(source = %t.source, target = %t.name,
            "target resumed: its pending deliveries go out in their order"),
        _ => {}
    }
    *last = now;
}

/// An attempt that ended, waiting for its loop to record it with the next turn.
struct Done {
    finished: Finished,
    /// When its event was received, for the delivery-lag metric once it is recorded.
    received_at: Option<String>,
    event_id: String,
}

/// One attempt: send the event and decide what is next; its loop records it. None when
/// the result is lost before that (a failpoint standing for a crash).
async fn attempt(
    t: Arc<TargetRun>,
    c: Claimed,
    event: Result<Option<EventData>, String>,
    shared: Shared,
) -> Option<Done> {
    let started_at = clock::iso_now();
    let started = Instant::now();
    let mut received_at = None;
    let (result, event_id) = match event {
        Ok(Some(event)) => {
            let result = send(&t, &c, &event).await;
            received_at = Some(event.received_at);
            (result, event.event_id)
        }
        Ok(None) => (
            AttemptResult {
                verdict: Verdict::Gone,
                status: None,
                error: Some("the event is no longer in the inbox".into()),
                output: None,
                ambiguous: false,
            },
            "-".into(),
        ),
        Err(e) => (
            AttemptResult::failed(format!("reading the event: {e}")),
            "-".into(),
        ),
    };
    if crate::failpoint::error("deliver.after_send") {
        // The target's answer is lost before it is recorded; the lease brings it back.
        return None;
    }
    let next = decide(&t, c.in_schedule(), &result);
    let duration_ms = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
    shared
        .metrics
        .attempts
        .get_or_create(&AttemptLabels {
            source: t.source.clone(),
            target: t.name.clone(),
            result: next.word(),
        })
        .inc();
    let error = result.error.as_deref().unwrap_or("");
    match &next {
        // Like a stored request, an accepted delivery is logged at debug: its attempt row
        // records it, and a backlog drained at thousands a second would otherwise hit
        // journald's rate limit (10,000 lines per 30 s) and push out the lines that matter.
        // The line also cost about 6% of a delivery's CPU (bench/run.sh's forwarding run).
        Next::Delivered => {
            tracing::debug!(source = %t.source, target = %t.name, event_id, attempt = c.attempt,
            status = result.status, duration_ms, "delivered")
        }
        Next::Retry(at) => {
            tracing::info!(source = %t.source, target = %t.name, event_id, attempt = c.attempt,
            status = result.status, duration_ms, error, next_attempt_at = %at, "attempt failed; will retry")
        }
        Next::Dead => {
            tracing::warn!(source = %t.source, target = %t.name, event_id, attempt = c.attempt,
            status = result.status, duration_ms, error, "delivery is dead; replay it once the target is fixed")
        }
    }
    if result.ambiguous {
        shared
            .metrics
            .ambiguous_attempts
            .get_or_create(&TargetLabels {
                source: t.source.clone(),
                target: t.name.clone(),
            })
            .inc();
    }
    Some(Done {
        finished: Finished {
            delivery: c.delivery,
            attempt: c.attempt,
            schedule_base: c.schedule_base,
            started_at,
            duration_ms,
            next,
            status: result.status,
            error: result.error,
            output: result.output,
            ambiguous: result.ambiguous,
        },
        received_at,
        event_id,
    })
}

/// The event as the target sees it, sent by the target's kind.
async fn send(t: &TargetRun, c: &Claimed, event: &EventData) -> AttemptResult {
    let Some(body) = &event.body else {
        return AttemptResult {
            verdict: Verdict::Gone,
            status: None,
            error: Some("the event's body was pruned by retention before it was delivered".into()),
            output: None,
            ambiguous: false,
        };
    };
    let headers_json = event.headers.as_deref().unwrap_or("[]");
    let mut headers: Vec<(String, String)> = serde_json::from_str(headers_json).unwrap_or_default();
    // Anyone can write these; the target hears the address hookinbox believes instead.
    headers.retain(|(name, _)| !ADDRESS_HEADERS.iter().any(|h| h.eq_ignore_ascii_case(name)));
    let a = Attempt {
        source: &event.source,
        target: &t.name,
        event_id: &event.event_id,
        event_type: event.event_type.as_deref(),
        received_at: &event.received_at,
        idempotency_key: &c.idempotency_key,
        attempt: c.attempt,
        body,
        headers: &headers,
        remote_addr: event.remote_addr.as_deref(),
        origin: &event.origin,
    };
    t.forwarder.send(&a).await
}

/// The delivery's next state after an attempt; `attempt` is its place in the current
/// schedule (a replay starts a new one).
fn decide(t: &TargetRun, attempt: u32, r: &AttemptResult) -> Next {
    match r.verdict {
        Verdict::Delivered => Next::Delivered,
        Verdict::Gone => Next::Dead,
        Verdict::Retry { after } => match backoff::delay(&t.retry, attempt, backoff::unit_random())
        {
            None => Next::Dead,
            Some(wait) => {
                let wait = after.map_or(wait, |a| a.max(wait));
                Next::Retry(clock::iso(SystemTime::now() + wait))
            }
        },
    }
}
