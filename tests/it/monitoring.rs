//! What an operator's Prometheus and Grafana see: every family from the first scrape, at
//! zero for each configured source and target; the build and process metrics; receipt lag
//! with its fraction of a second; the shipped alerting rules under `promtool`; and every
//! metric name the rules and the dashboard use, exported by the real server.

use std::collections::BTreeMap;

use crate::support::*;

/// Two sources; `sw` forwards to two targets, `stripe` to one. Nothing listens on port 9,
/// and nothing is sent in the tests that look at zeros.
const SOURCES: &str = r#"
[[sources]]
name = "sw"
scheme = "standard-webhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
[[sources.targets]]
name = "app"
url = "http://127.0.0.1:9/hooks"
[[sources.targets]]
name = "audit"
command = ["/bin/true"]

[[sources]]
name = "stripe"
scheme = "stripe"
secrets = ["whsec_test_secret"]
[[sources.targets]]
name = "app"
url = "http://127.0.0.1:9/hooks"
"#;

/// Every outcome a request to a source is counted under (README, "Operating it").
const OUTCOMES: [&str; 10] = [
    "accepted",
    "duplicate",
    "conflict",
    "rejected",
    "invalid",
    "too_large",
    "timeout",
    "overloaded",
    "unavailable",
    "handshake",
];

/// Every reason a request fails authentication.
const AUTH_REASONS: [&str; 7] = [
    "missing_header",
    "malformed_header",
    "no_match",
    "timestamp_too_old",
    "timestamp_too_new",
    "bad_token",
    "not_armed",
];

const RESULTS: [&str; 3] = ["delivered", "retry", "dead"];

const PROCESS_METRICS: [&str; 6] = [
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
    "process_virtual_memory_bytes",
    "process_open_fds",
    "process_max_fds",
    "process_start_time_seconds",
];

/// One sample line of a scrape.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// The samples of a scrape. Label values here never hold `,`, `"` or `}`, so a simple
/// split is exact for them; anything else would fail the parse of the value.
fn samples(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').unwrap();
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, rest.strip_suffix('}').unwrap()),
                None => (series, ""),
            };
            let labels = labels
                .split(',')
                .filter(|l| !l.is_empty())
                .map(|pair| {
                    let (k, v) = pair.split_once('=').unwrap();
                    (k.to_owned(), v.trim_matches('"').to_owned())
                })
                .collect();
            let value = match value {
                "+Inf" => f64::INFINITY,
                v => v.parse().unwrap_or_else(|_| panic!("{line}")),
            };
            Sample {
                name: name.to_owned(),
                labels,
                value,
            }
        })
        .collect()
}

/// The value of the one sample `name` with exactly `labels`, if the scrape has it.
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let want: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    samples
        .iter()
        .find(|s| s.name == name && s.labels == want)
        .map(|s| s.value)
}

/// Asserts that the series is exported and reads `want`.
#[track_caller]
fn assert_series(scrape: &[Sample], name: &str, labels: &[(&str, &str)], want: f64) {
    assert_eq!(
        value(scrape, name, labels),
        Some(want),
        "{name}{labels:?} in the scrape"
    );
}

#[tokio::test]
async fn every_family_is_exported_from_the_first_scrape_at_zero_for_each_source_and_target() {
    let mut server = TestServer::start(SOURCES).await;
    let text = server.metrics().await;
    let scrape = samples(&text);
    assert_series(
        &scrape,
        "hookinbox_build_info",
        &[("version", env!("CARGO_PKG_VERSION"))],
        1.0,
    );
    let targets = [("sw", "app"), ("sw", "audit"), ("stripe", "app")];
    for source in ["sw", "stripe"] {
        for outcome in OUTCOMES {
            assert_series(
                &scrape,
                "hookinbox_requests_total",
                &[("source", source), ("outcome", outcome)],
                0.0,
            );
        }
        for reason in AUTH_REASONS {
            assert_series(
                &scrape,
                "hookinbox_signature_failures_total",
                &[("source", source), ("reason", reason)],
                0.0,
            );
        }
        for name in [
            "hookinbox_source_silent",
            "hookinbox_source_rejections_rising",
            "hookinbox_source_last_event_timestamp_seconds",
        ] {
            assert_series(&scrape, name, &[("source", source)], 0.0);
        }
    }
    for (source, target) in targets {
        let pair = [("source", source), ("target", target)];
        for result in RESULTS {
            assert_series(
                &scrape,
                "hookinbox_attempts_total",
                &[("source", source), ("target", target), ("result", result)],
                0.0,
            );
        }
        for name in [
            "hookinbox_ambiguous_attempts_total",
            "hookinbox_ambiguous_resolved_total",
            "hookinbox_target_failing",
            "hookinbox_target_paused",
        ] {
            assert_series(&scrape, name, &pair, 0.0);
        }
    }
    assert_series(&scrape, "hookinbox_alerts_active", &[], 0.0);
    // Nothing more than configured: no target of stripe's that sw has.
    assert_eq!(
        value(
            &scrape,
            "hookinbox_target_failing",
            &[("source", "stripe"), ("target", "audit")]
        ),
        None
    );

    // The process metrics, under the names every Prometheus client library uses.
    for name in PROCESS_METRICS {
        assert!(value(&scrape, name, &[]).is_some(), "{name} in\n{text}");
    }
    let process = |name| value(&scrape, name, &[]).unwrap();
    assert!(process("process_resident_memory_bytes") > 0.0);
    assert!(process("process_virtual_memory_bytes") >= process("process_resident_memory_bytes"));
    assert!(process("process_open_fds") >= 3.0);
    assert!(process("process_max_fds") >= process("process_open_fds"));
    assert!(process("process_cpu_seconds_total") >= 0.0);
    let now = hookinbox::clock::unix_now() as f64;
    let started = process("process_start_time_seconds");
    assert!(
        started > 1_500_000_000.0 && started <= now + 1.0,
        "{started}"
    );
    assert!(
        text.contains("# TYPE process_cpu_seconds counter\n"),
        "{text}"
    );

    // A reload gives a new source its zeros and takes a removed one's alert states away;
    // a removed source's counters stay, frozen.
    let renamed = SOURCES.replace("name = \"stripe\"", "name = \"shop\"");
    server.reload(&renamed).await.unwrap();
    let scrape = samples(&server.metrics().await);
    assert_series(
        &scrape,
        "hookinbox_requests_total",
        &[("source", "shop"), ("outcome", "accepted")],
        0.0,
    );
    assert_series(
        &scrape,
        "hookinbox_target_paused",
        &[("source", "shop"), ("target", "app")],
        0.0,
    );
    assert_series(
        &scrape,
        "hookinbox_source_silent",
        &[("source", "shop")],
        0.0,
    );
    assert_eq!(
        value(&scrape, "hookinbox_source_silent", &[("source", "stripe")]),
        None
    );
    assert_eq!(
        value(
            &scrape,
            "hookinbox_target_failing",
            &[("source", "stripe"), ("target", "app")]
        ),
        None
    );
    assert_series(
        &scrape,
        "hookinbox_requests_total",
        &[("source", "stripe"), ("outcome", "accepted")],
        0.0,
    );
    server.stop().await;
}

#[tokio::test]
async fn receipt_lag_keeps_the_fraction_of_a_second_and_the_accepted_event_is_timestamped() {
    let server = TestServer::start(SOURCES).await;
    // Signed two whole seconds before the current one: the lag is at least 2 s plus the
    // part of the current second gone by, which is a whole number only if the commit
    // returned within the very nanosecond a second began. Whole-second arithmetic can only
    // ever give a whole number.
    let before = hookinbox::clock::unix_f64(std::time::SystemTime::now());
    let signed = hookinbox::clock::unix_now() - 2;
    let req = server.sign_at("sw", "msg_lag", &event_body("msg_lag", ""), signed);
    assert_eq!(server.post("sw", &req).await.0, 200);
    let text = server.metrics().await;
    let scrape = samples(&text);
    let lag = |name| value(&scrape, name, &[]).unwrap_or_else(|| panic!("{name}\n{text}"));
    assert_eq!(lag("hookinbox_receipt_lag_seconds_count"), 1.0);
    let sum = lag("hookinbox_receipt_lag_seconds_sum");
    assert!(sum >= 2.0, "the lag is never read short: {sum}");
    assert_ne!(sum.fract(), 0.0, "the lag has its fraction: {sum}");
    assert_eq!(
        value(
            &scrape,
            "hookinbox_receipt_lag_seconds_bucket",
            &[("le", "1.0")]
        ),
        Some(0.0),
        "{text}"
    );
    // Stamped when it was accepted: after the request was made, to the fraction.
    let last = value(
        &scrape,
        "hookinbox_source_last_event_timestamp_seconds",
        &[("source", "sw")],
    )
    .unwrap();
    assert!(last >= before, "{last} < {before}");
    assert_series(
        &scrape,
        "hookinbox_source_last_event_timestamp_seconds",
        &[("source", "stripe")],
        0.0,
    );
    server.stop().await;
}
