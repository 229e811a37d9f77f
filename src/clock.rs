//! Wall-clock time in the two forms the inbox uses: unix seconds for signature windows, and
//! fixed-width UTC ISO-8601 text (`2026-11-30T07:31:02.123Z`) for every stored time, so that
//! an operator's `sqlite3` shows readable times and text comparison orders them correctly.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Seconds since the unix epoch.
pub fn unix_now() -> i64 {
    unix(SystemTime::now())
}

pub fn unix(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    }
}

/// Seconds since the unix epoch with the clock's own precision (nanoseconds on Linux; an
/// f64 keeps about a quarter of a microsecond at today's magnitude).
pub fn unix_f64(t: SystemTime) -> f64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

/// How long before `now` the unix second `secs` began; zero if it is later than `now` (a
/// clock ahead of ours).
pub fn since_unix(secs: i64, now: SystemTime) -> Duration {
    let then = match u64::try_from(secs) {
        Ok(s) => UNIX_EPOCH.checked_add(Duration::from_secs(s)),
        Err(_) => UNIX_EPOCH.checked_sub(Duration::from_secs(secs.unsigned_abs())),
    };
    then.and_then(|t| now.duration_since(t).ok())
        .unwrap_or_default()
}

/// The last second humantime can write (9999-12-31T23:59:59Z).
const LAST_WRITABLE: u64 = 253_402_300_799;

/// The inbox's text form of a time, always 24 characters with milliseconds. A time before
/// 1970 or after 9999 is written as the nearest of the two: humantime panics on them, and
/// times reach here from input (`since=100y` in the web inbox, `--since` on the CLI).
pub fn iso(t: SystemTime) -> String {
    let last = UNIX_EPOCH + Duration::from_secs(LAST_WRITABLE);
    let t = t.clamp(UNIX_EPOCH, last);
    humantime::format_rfc3339_millis(t).to_string()
}

/// The inbox's text form of a unix-seconds timestamp; out-of-range values are clamped to the
/// epoch rather than refused, since they are informational (a provider's clock).
pub fn iso_from_unix(secs: i64) -> String {
    let t = u64::try_from(secs)
        .ok()
        .and_then(|s| UNIX_EPOCH.checked_add(Duration::from_secs(s)))
        .filter(|t| unix(*t) <= LAST_WRITABLE as i64)
        .unwrap_or(UNIX_EPOCH);
    iso(t)
}

pub fn iso_now() -> String {
    iso(SystemTime::now())
}

/// Unix seconds of an inbox time (or any RFC 3339 time); None for text that is not one.
pub fn unix_from_iso(text: &str) -> Option<i64> {
    humantime::parse_rfc3339_weak(text).ok().map(unix)
}

/// A time given on the command line: an RFC 3339 time (`2026-11-30T07:00:00Z`) or a
/// duration ago (`2h`, `30m`, `7d`). Returns the inbox's text form.
pub fn parse_time_arg(text: &str) -> Result<String, String> {
    if let Ok(t) = humantime::parse_rfc3339_weak(text) {
        return Ok(iso(t));
    }
    match humantime::parse_duration(text) {
        Ok(ago) => Ok(iso(SystemTime::now()
            .checked_sub(ago)
            .unwrap_or(UNIX_EPOCH))),
        Err(_) => Err(format!(
            "{text:?} is not a time: write an RFC 3339 time (2026-11-30T07:00:00Z) or a \
             duration ago (2h, 30m, 7d)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_out_of_range_are_written_at_the_ends_never_a_panic() {
        assert_eq!(parse_time_arg("100y").unwrap(), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            parse_time_arg("100000000y").unwrap(),
            "1970-01-01T00:00:00.000Z"
        );
        assert_eq!(
            iso(UNIX_EPOCH - Duration::from_secs(1)),
            "1970-01-01T00:00:00.000Z"
        );
        let far = UNIX_EPOCH + Duration::from_secs(LAST_WRITABLE + 86_400);
        assert_eq!(iso(far), "9999-12-31T23:59:59.000Z");
    }

    #[test]
    fn time_arguments() {
        assert_eq!(
            parse_time_arg("2026-11-30T07:00:00Z").unwrap(),
            "2026-11-30T07:00:00.000Z"
        );
        let ago = parse_time_arg("2h").unwrap();
        assert!(ago < iso_now() && ago.len() == 24);
        assert!(
            parse_time_arg("yesterday-ish")
                .unwrap_err()
                .contains("not a time")
        );
    }

    #[test]
    fn lags_keep_the_fraction_and_never_go_negative() {
        let now = UNIX_EPOCH + Duration::from_millis(1_700_000_002_250);
        assert_eq!(since_unix(1_700_000_000, now), Duration::from_millis(2250));
        assert_eq!(since_unix(1_700_000_003, now), Duration::ZERO);
        assert_eq!(since_unix(i64::MAX, now), Duration::ZERO);
        assert_eq!(unix_f64(now), 1_700_000_002.25);
        assert_eq!(unix_f64(UNIX_EPOCH - Duration::from_millis(500)), -0.5);
    }

    #[test]
    fn iso_is_fixed_width_utc() {
        assert_eq!(iso_from_unix(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso_from_unix(1_700_000_000), "2023-11-14T22:13:20.000Z");
        assert_eq!(iso_from_unix(-5), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso_from_unix(i64::MAX), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso_now().len(), 24);
    }
}
