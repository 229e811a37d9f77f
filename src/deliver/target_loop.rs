//! One target's loop: each turn records the attempts that ended and claims what is due, as
//! many as its free slots and its rate allow, in one write ([`super::turn`]); it starts an
//! attempt task per claim ([`super::attempt`]) and sleeps until something is due, the rate
//! allows more, a new event is committed or an attempt ends.
//!
//! Invariant: the loop claims only what may start now (free slots, the rate's tokens), so a
//! claimed delivery's lease never runs while it waits; it never claims after it was told to
//! stop, and on stopping lets its attempts in flight finish and be recorded within the
//! drain, abandoning the rest to their leases.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;
use tokio::task::JoinSet;

use super::attempt::{Done, attempt};
use super::health::unix_millis;
use super::pace::Pace;
use super::target::{Shared, TargetRun};
use super::turn::{Taken, turn};
use crate::store::ClaimRequest;
use crate::store::Paused;
use crate::store::Store;

/// How long a target's task sleeps at most before looking for due work again, when nothing
/// woke it (a retry coming due is found by its time; this catches the rest).
pub const IDLE_POLL: Duration = Duration::from_secs(1);
/// Under load, the longest a target's loop waits for more free slots before claiming for
/// the ones it has.
const CLAIM_BATCH_WAIT: Duration = Duration::from_millis(100);
/// Pause after the writer refused a claim (the inbox is failing), so the loop does not spin.
const CLAIM_BACKOFF: Duration = Duration::from_secs(1);
/// On shutdown, how long attempts in flight may take to finish and be recorded; the rest are
/// abandoned to their lease and retried after a restart.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// One target's loop: record the results of attempts that ended and claim what is due
/// (up to the free concurrency, and what its rate allows now) in one write, start an
/// attempt task per claim, sleep until something is due, the rate allows more, a new event
/// is committed or an attempt ends.
pub(super) async fn run_target(
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
