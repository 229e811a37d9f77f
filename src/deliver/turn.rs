//! A target loop's one write per turn: the results of the attempts that ended since the
//! last turn, then a claim for the free slots, as one `queue::Turn` (one transaction), so a
//! target forwarding at full speed costs a commit per turn, not one per claim and result.
//!
//! Invariant: a result is recorded at most once. When the turn's write is refused, each
//! result is recorded on its own (one the inbox refuses must not hold back the others);
//! when it timed out, nothing is written again (it may still commit) and the leases bring
//! back whatever it did not; when only its claim failed, the results stand.

use std::time::{Duration, SystemTime};

use super::attempt::Done;
use super::target::Shared;
use super::target::TargetRun;
use crate::metrics::TargetLabels;
use crate::store::Paused;
use crate::store::WriteError;
use crate::store::{ClaimRequest, Claimed, EventData, Next, Turn};

/// What a turn claimed, ready to start.
pub(super) struct Taken {
    pub(super) claims: Vec<Claimed>,
    /// Rows the claim took but sends no attempt for: superseded (an older version of a
    /// key) or given up (its last attempt never finished).
    pub(super) not_sent: usize,
    pub(super) events: Result<std::collections::HashMap<i64, EventData>, String>,
    /// Replicas sharing a rate: how long until one more may start.
    pub(super) rate_wait: Option<Duration>,
    /// When the claim took fewer than asked: the pause (if any) and when the next
    /// delivery is due.
    pub(super) look: Option<(Option<Paused>, Option<SystemTime>)>,
}

/// Records `done` and claims (one write, [`crate::store::Turn`]); None when that
/// write failed (logged), or when only its claim did (PostgreSQL: the results stand). When
/// the write was refused, the results are then recorded one by one; otherwise (the writer
/// stopped, or did not answer in time) their leases bring the deliveries back.
pub(super) async fn turn(
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
    recorded: Result<crate::store::Recorded, WriteError>,
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
