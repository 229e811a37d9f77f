//! One attempt: the claimed delivery's event as its target sees it ([`Attempt`]), sent by
//! the target's kind, and what is next for the delivery: delivered, dead, or retried at a
//! time the schedule and the target's `Retry-After` decide. The attempt's log line and
//! metrics are written here; its loop records it with its next turn.
//!
//! Invariant: nothing here writes to the inbox, so an attempt's result reaches the inbox
//! only through its loop's turn, guarded by the attempt's number (a stale attempt cannot
//! overwrite a newer claim).

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use super::backoff;
use super::target::Shared;
use super::target::TargetRun;
use crate::clock;
use crate::metrics::{AttemptLabels, TargetLabels};
use crate::store::{Claimed, EventData, Finished, Next};
use crate::targets::{ADDRESS_HEADERS, Attempt, AttemptResult, Disposition};

/// An attempt that ended, waiting for its loop to record it with the next turn.
pub(super) struct Done {
    pub(super) finished: Finished,
    /// When its event was received, for the delivery-lag metric once it is recorded.
    pub(super) received_at: Option<String>,
    pub(super) event_id: String,
}

/// One attempt: send the event and decide what is next; its loop records it. None when
/// the result is lost before that (a failpoint standing for a crash).
pub(super) async fn attempt(
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
                disposition: Disposition::Gone,
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
            disposition: Disposition::Gone,
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
    match r.disposition {
        Disposition::Delivered => Next::Delivered,
        Disposition::Gone => Next::Dead,
        Disposition::Retry { after } => {
            match backoff::delay(&t.retry, attempt, backoff::unit_random()) {
                None => Next::Dead,
                Some(wait) => {
                    let wait = after.map_or(wait, |a| a.max(wait));
                    Next::Retry(clock::iso(SystemTime::now() + wait))
                }
            }
        }
    }
}
