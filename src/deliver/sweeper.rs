//! The sweeper: returns the deliveries of attempts that never finished (their lease ran
//! out: a crash, a stuck attempt) to the queue, and retires the deliveries of targets a
//! reload removed that came back after it.
//!
//! Invariant: an expired lease goes back to `pending`, due now, under the same idempotency
//! key, so the worst a crash does is a redelivery; a lease always outlasts its attempt and
//! the attempt's result is recorded before any sweep (config's `MIN_LEASE_MARGIN`), so a
//! sweep never hands a running attempt's delivery to a second one.

use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::target::Shared;

/// Targets removed by a reload, whose deliveries can still come back to `pending` after the
/// reload retired them: a request that was in flight on the old configuration commits one,
/// an old attempt ends in a retry, a lease of theirs expires. The new generation's sweeper
/// retires them again on every sweep for this long: an attempt runs at most an hour, a
/// lease at most two, and a request in flight finishes within its body and commit timeouts.
pub(super) const RETIRE_REMOVED_FOR: Duration = Duration::from_secs(2 * 3600 + 60);

/// How often the sweeper looks when no target has a lease to set its pace (a configuration
/// without targets that still retires removed ones).
pub(super) const SWEEP_WITHOUT_TARGETS: Duration = Duration::from_secs(30);

/// How often expired leases are looked for: half the shortest lease, within bounds.
pub(super) fn sweep_interval(shortest_lease: Duration) -> Duration {
    (shortest_lease / 2).clamp(Duration::from_millis(500), Duration::from_secs(30))
}

/// Targets a reload removed, retired again on every sweep until `until`.
pub(super) struct Removed {
    pub(super) targets: Vec<(String, String)>,
    pub(super) until: Instant,
}

pub(super) async fn sweeper(
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
