//! A target's rate limit (`rate = "50/s"`): a token bucket in front of its claims, kept by
//! the target's loop.
//!
//! Invariant: the loop claims no more deliveries than may start at once, so nothing claimed
//! waits for the rate while its lease runs: the waiting happens while the deliveries are
//! still `pending`. The bucket holds [`Rate::burst`] attempts (a tenth of a second's worth,
//! at least one) and refills one every [`Rate::interval`].
//!
//! Kept as the time the bucket is full again (the generic cell rate algorithm's
//! "theoretical arrival time"): one instant, no refill timer, exact in whole nanoseconds.
//! It lives in memory, per loop: a restart or a reload starts with a full bucket, at most a
//! burst early. Replicas on PostgreSQL share a second bucket of the same kind, kept in the
//! inbox and taken by the claim (`store::postgres`), so that together they keep the rate.

use std::time::{Duration, Instant};

use crate::config::Rate;

#[derive(Debug, Clone)]
pub struct Pace {
    interval: Duration,
    /// What a full bucket holds, as time: `burst × interval`.
    capacity: Duration,
    /// When the bucket is full again; at or before now, it is full.
    full_at: Instant,
}

impl Pace {
    /// A full bucket for `rate`.
    pub fn new(rate: &Rate, now: Instant) -> Pace {
        let interval = rate.interval().max(Duration::from_nanos(1));
        Pace {
            interval,
            capacity: interval.saturating_mul(rate.burst()),
            full_at: now,
        }
    }

    /// How many attempts may start at `now`.
    pub fn available(&self, now: Instant) -> usize {
        let room = self.capacity.saturating_sub(self.owed(now));
        usize::try_from(room.as_nanos() / self.interval.as_nanos()).unwrap_or(usize::MAX)
    }

    /// Records that `n` attempts started at `now`.
    pub fn take(&mut self, n: usize, now: Instant) {
        let used = self
            .interval
            .saturating_mul(u32::try_from(n).unwrap_or(u32::MAX));
        self.full_at = self.full_at.max(now) + used;
    }

    /// How long after `now` one more attempt may start; zero if one may now.
    pub fn wait(&self, now: Instant) -> Duration {
        // One may start once what is owed leaves room for one interval.
        self.owed(now)
            .saturating_sub(self.capacity.saturating_sub(self.interval))
    }

    /// The part of the bucket in use at `now`, as time.
    fn owed(&self, now: Instant) -> Duration {
        self.full_at.saturating_duration_since(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pace(text: &str, now: Instant) -> Pace {
        Pace::new(&crate::config::parse_rate(text).unwrap(), now)
    }

    #[test]
    fn a_full_bucket_starts_a_burst_then_one_per_interval() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        // 50/s: 20 ms each, 5 at once.
        let mut p = pace("50/s", t0);
        assert_eq!(p.available(t0), 5);
        p.take(5, t0);
        assert_eq!(p.available(t0), 0);
        assert_eq!(p.wait(t0), Duration::from_millis(20));
        assert_eq!(p.available(ms(19)), 0);
        assert_eq!(p.available(ms(20)), 1);
        p.take(1, ms(20));
        assert_eq!(p.wait(ms(20)), Duration::from_millis(20));
        // Idle for long: full again, and no fuller.
        assert_eq!(p.available(ms(10_000)), 5);
        assert_eq!(p.wait(ms(10_000)), Duration::ZERO);
    }

    #[test]
    fn over_any_stretch_no_more_start_than_the_rate_and_one_burst() {
        let t0 = Instant::now();
        let mut p = pace("2/s", t0);
        let mut started = Vec::new();
        let mut now = t0;
        // A loop that claims whatever the bucket allows and sleeps as it says.
        while started.len() < 6 {
            let n = p.available(now);
            p.take(n, now);
            started.extend(std::iter::repeat_n(now, n));
            now += p.wait(now).max(Duration::from_millis(1));
        }
        let spread = *started.last().unwrap() - started[0];
        assert_eq!(spread, Duration::from_millis(2500), "one every 500 ms");
    }
}
