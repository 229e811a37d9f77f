//! One configured target as the worker runs it: its schedule, concurrency, rate and lease,
//! and its kind's [`Forwarder`] that makes the attempts; with what every loop, attempt and
//! the sweeper share (the store and the metrics).

use std::sync::Arc;
use std::time::Duration;

use crate::config::{Rate, Target};
use crate::metrics::Metrics;
use crate::store::Store;
use crate::targets::Forwarder;

/// Everything a loop, an attempt and the sweeper need.
#[derive(Clone)]
pub(super) struct Shared {
    pub(super) store: Store,
    pub(super) metrics: Arc<Metrics>,
}

/// One configured target, ready to send.
pub(super) struct TargetRun {
    pub(super) source: String,
    pub(super) name: String,
    /// The schedule of waits between attempts (one attempt more than waits).
    pub(super) retry: Vec<Duration>,
    pub(super) concurrency: usize,
    /// How fast attempts may start, if limited.
    pub(super) rate: Option<Rate>,
    pub(super) lease: Duration,
    /// Whether the source orders its events.
    pub(super) ordered: bool,
    /// Its kind's running target, which makes the attempts.
    pub(super) forwarder: Box<dyn Forwarder>,
}

impl TargetRun {
    /// `source` names the target's source; `ordered`, whether that source orders its events.
    pub(super) fn new(source: &str, ordered: bool, t: &Target) -> anyhow::Result<TargetRun> {
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

    pub(super) fn max_attempts(&self) -> u32 {
        u32::try_from(self.retry.len()).unwrap_or(u32::MAX - 1) + 1
    }
}
