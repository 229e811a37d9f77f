//! What the worker reports about itself, for `/readyz` and the watchdog: whether it is
//! draining, and each target loop's last turn.
//!
//! Invariant: every loop beats at the top of every turn, and a turn is bounded (the idle
//! poll, a claim's commit wait, a read's busy timeout), so a loop that has not beaten for
//! [`STUCK_AFTER`] is stuck, not idle.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

/// What the worker reports about itself, for `/readyz` and the watchdog.
#[derive(Debug, Default)]
pub struct Health {
    /// Set when shutdown begins.
    pub draining: AtomicBool,
    /// Per target loop, the unix milliseconds of its last turn.
    pub(super) beats: std::sync::Mutex<Vec<(String, Arc<AtomicU64>)>>,
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

pub(super) fn unix_millis() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
