//! Knowing the gaps while serving: each source's run of refused requests (401, 503) with no
//! accepted one since, kept in memory by the receive path, and the heartbeat that writes it
//! to the inbox with "still receiving" (`store::gaps`).
//!
//! The receive path pays one atomic load per accepted request while nothing is refused; a
//! refusal takes the source's lock. A run becomes a gap when an accepted request ends it:
//! the window is from its first refusal to its last, which is exactly when requests were
//! refused (a provider sending in between would have been refused too, and counted).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, watch};

use crate::clock;
use crate::store::Store;
use crate::store::gaps::HEARTBEAT;
use crate::store::gaps::{Beat, Gap, Run};

/// Every source's receiving state.
#[derive(Debug, Default)]
pub struct Watch {
    sources: Mutex<HashMap<String, Arc<SourceWatch>>>,
}

/// One source's receiving state, held by the receive path.
#[derive(Debug, Default)]
pub struct SourceWatch {
    /// A run is open: the next accepted request closes it. Read without the lock.
    open: AtomicBool,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    open: Option<Run>,
    closed: Vec<Run>,
}

/// The most closed runs kept for the next heartbeat. Beyond it (a forged request between
/// every genuine one, or heartbeats that cannot be written, or none at all: PostgreSQL has
/// no heartbeat yet) the newest runs merge into the last one kept: one wider gap rather
/// than memory without bound.
const MAX_CLOSED: usize = 64;

impl State {
    fn close(&mut self, run: Run) {
        if self.closed.len() < MAX_CLOSED {
            self.closed.push(run);
            return;
        }
        let last = self.closed.last_mut().expect("MAX_CLOSED is above zero");
        last.last = run.last;
        for (status, n) in run.refused {
            match last.refused.iter_mut().find(|(s, _)| *s == status) {
                Some((_, count)) => *count += n,
                None => last.refused.push((status, n)),
            }
        }
    }
}

impl Watch {
    /// The state of `source`, made on first use and kept across reloads.
    pub fn source(&self, source: &str) -> Arc<SourceWatch> {
        self.sources
            .lock()
            .expect("no panics while holding the lock")
            .entry(source.to_owned())
            .or_default()
            .clone()
    }

    /// What the next heartbeat writes for these sources; closed runs are handed over (and
    /// given back by [`Watch::give_back`] if the write fails).
    pub fn beats(&self, sources: &[String]) -> Vec<Beat> {
        sources
            .iter()
            .map(|name| {
                let watch = self.source(name);
                let mut state = watch
                    .state
                    .lock()
                    .expect("no panics while holding the lock");
                Beat {
                    source: name.clone(),
                    open: state.open.clone(),
                    closed: std::mem::take(&mut state.closed),
                }
            })
            .collect()
    }

    /// Closed runs of a heartbeat that could not be written, for the next one.
    pub fn give_back(&self, beats: Vec<Beat>) {
        for beat in beats {
            let watch = self.source(&beat.source);
            let mut state = watch
                .state
                .lock()
                .expect("no panics while holding the lock");
            let newer = std::mem::take(&mut state.closed);
            for run in beat.closed.into_iter().chain(newer) {
                state.close(run);
            }
        }
    }
}

impl SourceWatch {
    /// A request of this source was refused with `status` (401: not authentic, 503: not
    /// stored).
    pub fn refused(&self, status: u16) {
        let now = clock::iso_now();
        let mut state = self.state.lock().expect("no panics while holding the lock");
        let run = state.open.get_or_insert_with(|| Run {
            since: now.clone(),
            last: now.clone(),
            refused: Vec::new(),
        });
        run.last = now;
        match run.refused.iter_mut().find(|(s, _)| *s == status) {
            Some((_, n)) => *n += 1,
            None => run.refused.push((status, 1)),
        }
        self.open.store(true, Ordering::Release);
    }

    /// A request of this source was accepted: a run of refusals, if one was open, is a gap.
    pub fn accepted(&self) {
        if !self.open.load(Ordering::Acquire) {
            return;
        }
        let mut state = self.state.lock().expect("no panics while holding the lock");
        if let Some(run) = state.open.take() {
            state.close(run);
        }
        self.open.store(false, Ordering::Release);
    }
}

/// Writes a heartbeat every [`HEARTBEAT`] for the configured sources (`sources`, replaced on a
/// reload) and sends each closed run, once recorded as a gap, to `gaps`. When `stop` turns
/// true, writes a last heartbeat and the clean-stop marker, and ends.
///
/// On PostgreSQL the rows are this replica's (`replica`, see [`gaps::start_replica`]).
pub async fn heartbeat(
    store: Store,
    replica: String,
    watch: Arc<Watch>,
    sources: watch::Receiver<Vec<Arc<crate::config::Source>>>,
    found: mpsc::UnboundedSender<Gap>,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(HEARTBEAT);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await; // the first tick is now: start() has just written every row
    loop {
        let stopping = tokio::select! {
            _ = tick.tick() => false,
            _ = stop.wait_for(|s| *s) => true,
        };
        let names: Vec<String> = sources.borrow().iter().map(|s| s.name.clone()).collect();
        let beats = watch.beats(&names);
        let result = store
            .beat(replica.clone(), beats.clone(), stopping.then_some(names))
            .await;
        match result {
            Ok(recorded) => {
                for gap in recorded {
                    gap.warn("a source refused every request for a while: a gap");
                    let _ = found.send(gap);
                }
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "could not write the heartbeat; trying again");
                watch.give_back(beats);
            }
        }
        if stopping {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn closed_runs_without_a_heartbeat_stay_bounded_and_merge_into_one_wider_gap() {
        let watch = Watch::default();
        let source = watch.source("a");
        for _ in 0..1000 {
            source.refused(401);
            source.accepted();
        }
        let beats = watch.beats(&["a".into()]);
        let closed = &beats[0].closed;
        assert_eq!(closed.len(), MAX_CLOSED);
        let refused: u64 = closed.iter().map(Run::count).sum();
        assert_eq!(refused, 1000, "every refusal is still counted");
        assert!(closed[MAX_CLOSED - 1].since <= closed[MAX_CLOSED - 1].last);
        // Given back after a failed write, and more closed meanwhile: still bounded.
        source.refused(503);
        source.accepted();
        watch.give_back(beats);
        let again = watch.beats(&["a".into()]);
        assert_eq!(again[0].closed.len(), MAX_CLOSED);
        assert_eq!(again[0].closed.iter().map(Run::count).sum::<u64>(), 1001);
    }

    use super::*;

    #[test]
    fn a_run_opens_on_a_refusal_and_closes_on_the_next_accepted_request() {
        let watch = Watch::default();
        let a = watch.source("a");
        a.accepted();
        assert!(watch.beats(&["a".into()])[0].open.is_none());
        a.refused(401);
        a.refused(401);
        a.refused(503);
        let beat = &watch.beats(&["a".into()])[0];
        let open = beat.open.as_ref().unwrap();
        assert_eq!(open.refused, vec![(401, 2), (503, 1)]);
        assert!(beat.closed.is_empty());
        a.accepted();
        let beats = watch.beats(&["a".into()]);
        assert!(beats[0].open.is_none());
        assert_eq!(beats[0].closed.len(), 1);
        // Handed over once; given back when the write failed.
        assert!(watch.beats(&["a".into()])[0].closed.is_empty());
        watch.give_back(beats);
        assert_eq!(watch.beats(&["a".into()])[0].closed.len(), 1);
        // The same state after a reload asks for the source again.
        assert!(Arc::ptr_eq(&a, &watch.source("a")));
    }
}
