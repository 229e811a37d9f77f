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
//!
//! # Layout
//!
//! - this module: the [`Deliverer`], which starts a configuration's loops, switches to a
//!   new configuration on reload and drains on shutdown. Everything that can fail is done
//!   in [`Deliverer::plan`], before any loop starts, so a reload switches whole or not at
//!   all; old and new loops never take the same delivery, as a claim is atomic;
//! - `target_loop`: one target's loop: when to claim, how many (its free slots and its
//!   rate, [`pace`]), sleeping until something is due;
//! - `turn`: a loop's one write per turn: the results of ended attempts, and a claim;
//! - `attempt`: one attempt: the event as the target sees it, what came of it, the
//!   delivery's next state (the schedule's waits in [`backoff`]);
//! - [`targets`]: the kinds of target (url, command, postgres), one file each: its keys,
//!   their check, the attempt itself;
//! - `sweeper`: expired leases back to the queue, removed targets retired;
//! - `health`: what `/readyz` and the watchdog ask of the worker ([`Health`]).

mod attempt;
pub mod backoff;
mod health;
pub mod pace;
mod sweeper;
mod target;
mod target_loop;
mod turn;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::config::{Source, Target};
use crate::metrics::Metrics;
use crate::store::Store;
use health::unix_millis;
pub use health::{Health, STUCK_AFTER};
use sweeper::{RETIRE_REMOVED_FOR, Removed, SWEEP_WITHOUT_TARGETS, sweep_interval, sweeper};
use target::{Shared, TargetRun};
use target_loop::run_target;
pub use target_loop::{DRAIN_TIMEOUT, IDLE_POLL};

/// On a reload, the old loops' attempts may run to their own timeout (at most an hour).
const RELOAD_DRAIN: Duration = Duration::from_secs(3600);

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
