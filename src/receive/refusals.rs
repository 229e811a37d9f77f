//! Refused requests in the log at a bounded rate. Each is counted
//! (`hookinbox_requests_total`, `hookinbox_signature_failures_total`); the log gets the first
//! of each source and reason in full, then one line a minute saying how many more there
//! were. An invalid-signature flood wrote 787 lines a second and pushed the lines that
//! matter out of journald.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// How often the refusals of one source and reason are summed up in the log.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(60);

/// How often the summaries due are looked for: a summary comes at most this late.
const TICK: Duration = Duration::from_secs(5);

/// The refusals logged recently, by source and reason. At most one entry per configured
/// source and reason, so it cannot grow with what arrives.
#[derive(Default)]
pub struct RefusalLog {
    windows: Mutex<HashMap<(Arc<str>, &'static str), Window>>,
}

struct Window {
    /// When its line, or its last summary, was written.
    since: Instant,
    /// Refusals since then, not logged.
    more: u64,
}

impl RefusalLog {
    /// A log whose summaries a task writes every [`TICK`] for as long as the log lives
    /// (none outside a runtime: nothing then is refused for long).
    pub fn start() -> Arc<RefusalLog> {
        let log = Arc::new(RefusalLog::default());
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(summarise(Arc::downgrade(&log)));
        }
        log
    }

    /// Whether this refusal gets a line of its own: the first of its source and reason
    /// since a minute passed without one. Otherwise it is counted for the next summary.
    pub fn first(&self, source: &Arc<str>, reason: &'static str, now: Instant) -> bool {
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        match windows.get_mut(&(source.clone(), reason)) {
            Some(w) => {
                w.more += 1;
                false
            }
            None => {
                windows.insert(
                    (source.clone(), reason),
                    Window {
                        since: now,
                        more: 0,
                    },
                );
                true
            }
        }
    }

    /// Writes a line for each source and reason whose minute has passed with refusals left
    /// unlogged, and forgets those whose minute passed without any.
    pub fn summarise_due(&self, now: Instant) {
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        windows.retain(|(source, reason), w| {
            let passed = now.saturating_duration_since(w.since);
            if passed < SUMMARY_EVERY {
                return true;
            }
            if w.more == 0 {
                return false;
            }
            tracing::info!(source = %source, reason, refused = w.more,
                "{} more refused for source {source}, reason {reason} in the last minute",
                w.more);
            *w = Window {
                since: now,
                more: 0,
            };
            true
        });
    }
}

async fn summarise(log: Weak<RefusalLog>) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(log) = log.upgrade() else { return };
        log.summarise_due(Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_of_each_source_and_reason_then_a_minute_counted() {
        let log = RefusalLog::default();
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        let t0 = Instant::now();
        assert!(log.first(&a, "no_match", t0));
        assert!(log.first(&a, "timestamp_too_old", t0));
        assert!(log.first(&b, "no_match", t0));
        for _ in 0..100 {
            assert!(!log.first(&a, "no_match", t0));
        }
        log.summarise_due(t0 + SUMMARY_EVERY / 2);
        assert!(!log.first(&a, "no_match", t0 + SUMMARY_EVERY / 2));
        // After the minute: a's flood is summed up and goes on being counted; the quiet
        // ones are forgotten, so their next refusal gets a line of its own again.
        let t1 = t0 + SUMMARY_EVERY;
        log.summarise_due(t1);
        assert!(!log.first(&a, "no_match", t1));
        assert!(log.first(&b, "no_match", t1));
    }
}
