//! When to try again: the target's schedule with ±20% jitter (a URL target's own
//! `Retry-After` is read by its kind, `targets::url`).

use std::time::Duration;

/// Spread of each wait around its scheduled value, so that a burst of failures does not
/// come back as a burst of retries. svix uses the same ±20%.
pub const JITTER: f64 = 0.2;

/// The wait after failed attempt number `attempt` (1-based), or None when the schedule is
/// exhausted and the delivery is dead. `unit` is a random number in [0, 1).
pub fn delay(schedule: &[Duration], attempt: u32, unit: f64) -> Option<Duration> {
    let base = *schedule.get(usize::try_from(attempt).ok()?.checked_sub(1)?)?;
    let factor = 1.0 + JITTER * (2.0 * unit.clamp(0.0, 1.0) - 1.0);
    Some(base.mul_f64(factor))
}

/// A random number in [0, 1) from the system's generator.
pub fn unit_random() -> f64 {
    let mut bytes = [0u8; 4];
    // ring's SystemRandom reads getrandom(2); if it ever failed, no jitter is acceptable.
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes);
    f64::from(u32::from_be_bytes(bytes)) / (f64::from(u32::MAX) + 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: [Duration; 2] = [Duration::from_secs(5), Duration::from_secs(300)];

    #[test]
    fn schedule_then_dead() {
        assert_eq!(delay(&S, 1, 0.5), Some(Duration::from_secs(5)));
        assert_eq!(delay(&S, 2, 0.5), Some(Duration::from_secs(300)));
        assert_eq!(delay(&S, 3, 0.5), None);
        assert_eq!(delay(&S, 0, 0.5), None);
    }

    proptest! {
        #[test]
        fn jitter_stays_within_twenty_percent(attempt in 1u32..3, unit in 0.0f64..1.0) {
            let base = S[attempt as usize - 1];
            let d = delay(&S, attempt, unit).unwrap();
            prop_assert!(d >= base.mul_f64(1.0 - JITTER) && d <= base.mul_f64(1.0 + JITTER));
        }
    }

    #[test]
    fn random_units_are_in_range() {
        for _ in 0..100 {
            let u = unit_random();
            assert!((0.0..1.0).contains(&u));
        }
    }
}
