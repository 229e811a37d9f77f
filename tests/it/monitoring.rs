//! What an operator's Prometheus and Grafana see: every family from the first scrape, at
//! zero for each configured source and target; the build and process metrics; receipt lag
//! with its fraction of a second; the shipped alerting rules under `promtool`; and every
//! metric name the rules and the dashboard use, exported by the real server.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

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
# Its recovery series from the first scrape; nothing is asked of this API in a test's time.
recover = { api = "stripe", key = "rk_test_monitoring", api_url = "http://127.0.0.1:9" }
# Its address list's series from the first scrape; the list is never had (nothing listens).
allow_from = ["127.0.0.1", "stripe"]
[[sources.targets]]
name = "app"
url = "http://127.0.0.1:9/hooks"

[server.allow_lists]
stripe = "http://127.0.0.1:9/ips_webhooks.json"
"#;

/// Every outcome a request to a source is counted under (README, "Operating it").
const OUTCOMES: [&str; 11] = [
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
    "forbidden",
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
    // The address list stripe's allow_from names: never had, and none of a provider that
    // no source names.
    let stripe = [("provider", "stripe")];
    assert_series(
        &scrape,
        "hookinbox_allow_list_updated_timestamp_seconds",
        &stripe,
        0.0,
    );
    assert!(
        value(
            &scrape,
            "hookinbox_allow_list_refreshes_total",
            &[("provider", "stripe"), ("result", "ok")]
        )
        .is_some()
    );
    assert_eq!(
        value(
            &scrape,
            "hookinbox_allow_list_updated_timestamp_seconds",
            &[("provider", "github")]
        ),
        None
    );
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

/// The shipped monitoring files, in the source tree.
fn packaging(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("packaging")
        .join(path)
}

/// Runs `promtool` with `args` in `dir`; `None` (after saying so) when there is none.
fn promtool(dir: &Path, args: &[&str]) -> Option<(bool, String)> {
    match Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
    {
        Ok(out) => Some((
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )),
        Err(e) => {
            skip(
                "PROMTOOL",
                "monitoring::the_rules_and_the_dashboard_pass_promtool",
                &format!(
                    "no promtool command ({e}); .ci/run installs the Debian package prometheus"
                ),
            );
            None
        }
    }
}

#[test]
fn the_rules_and_the_dashboard_pass_promtool() {
    let rules = packaging("prometheus");
    let Some((ok, out)) = promtool(&rules, &["check", "rules", "hookinbox.rules.yml"]) else {
        return;
    };
    assert!(ok, "promtool check rules:\n{out}");
    let (ok, out) = promtool(&rules, &["test", "rules", "hookinbox.rules.test.yml"]).unwrap();
    assert!(ok, "promtool test rules:\n{out}");
    assert!(out.contains("SUCCESS"), "{out}");

    // Grafana's queries are PromQL once its variables are filled in: promtool parses each
    // as a recording rule.
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::from("groups:\n  - name: dashboard\n    rules:\n");
    let exprs = dashboard_exprs();
    let mut queries = 0;
    for expr in exprs.iter().filter(|e| !e.starts_with("label_values(")) {
        let promql = expr
            .replace("$__rate_interval", "5m")
            .replace("$instance", ".*")
            .replace("$source", ".*");
        // A JSON string is a YAML double-quoted scalar.
        text.push_str(&format!(
            "      - record: dashboard:query_{queries}\n        expr: {}\n",
            serde_json::to_string(&promql).unwrap()
        ));
        queries += 1;
    }
    assert!(
        queries >= 20,
        "only {queries} queries found in the dashboard"
    );
    std::fs::write(dir.path().join("dashboard.rules.yml"), text).unwrap();
    let (ok, out) = promtool(dir.path(), &["check", "rules", "dashboard.rules.yml"]).unwrap();
    assert!(ok, "the dashboard's queries:\n{out}");
}

/// Every query of the dashboard: panel targets' `expr`, variables' `query` and
/// `definition`, wherever they are nested.
fn dashboard_exprs() -> Vec<String> {
    fn walk(value: &serde_json::Value, out: &mut Vec<String>) {
        match value {
            serde_json::Value::Object(map) => {
                for (key, v) in map {
                    match (key.as_str(), v) {
                        ("expr" | "query" | "definition", serde_json::Value::String(s)) => {
                            out.push(s.clone())
                        }
                        _ => walk(v, out),
                    }
                }
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let text = std::fs::read_to_string(packaging("grafana/hookinbox-dashboard.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let mut out = Vec::new();
    walk(&json, &mut out);
    out
}

/// The values of every `key:` in a YAML file, read line by line: plain or quoted, folded
/// over the lines indented deeper than the key, or a block scalar (`|`, `>`). Enough for
/// the rules files, whose structure promtool checks.
fn yaml_values(text: &str, key: &str) -> Vec<String> {
    let indent = |l: &str| l.len() - l.trim_start().len();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let content = line.trim_start().trim_start_matches("- ");
        let Some(value) = content.strip_prefix(key).and_then(|r| r.strip_prefix(':')) else {
            continue;
        };
        let column = line.len() - content.len();
        let more: Vec<&str> = lines[i + 1..]
            .iter()
            .take_while(|l| l.trim().is_empty() || indent(l) > column)
            .map(|l| l.trim())
            .collect();
        let value = value.trim();
        if value.starts_with('|') || value.starts_with('>') {
            out.push(more.join("\n"));
            continue;
        }
        let value = [value]
            .into_iter()
            .chain(more.into_iter().filter(|l| !l.is_empty()))
            .collect::<Vec<_>>()
            .join(" ");
        if let Some(quoted) = value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')) {
            out.push(quoted.replace("''", "'"));
        } else if value.starts_with('"') {
            out.push(serde_json::from_str(&value).expect("a double-quoted YAML string"));
        } else {
            out.push(value);
        }
    }
    out
}

/// A metric a query selects, with the label matchers written beside it.
#[derive(Debug)]
struct Selector {
    name: String,
    /// (label, operator, value)
    matchers: Vec<(String, String, String)>,
}

/// The `hookinbox_*` and `process_*` metric names in a PromQL expression, each with its
/// matchers. Quoted strings are skipped, so label values and Grafana legends never count
/// as names.
fn selectors(expr: &str) -> Vec<Selector> {
    let chars: Vec<char> = expr.chars().collect();
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' || c == '`' {
            i += 1;
            while i < chars.len() && chars[i] != c {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            continue;
        }
        if !(c.is_ascii_alphabetic() || c == '_' || c == ':') {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && ident(chars[i]) {
            i += 1;
        }
        let name: String = chars[start..i].iter().collect();
        if !(name.starts_with("hookinbox_") || name.starts_with("process_")) {
            continue;
        }
        let mut matchers = Vec::new();
        let mut j = i;
        while j < chars.len() && chars[j] == ' ' {
            j += 1;
        }
        if chars.get(j) == Some(&'{') {
            let end = j + chars[j..]
                .iter()
                .position(|c| *c == '}')
                .unwrap_or_else(|| panic!("no closing }} in {expr}"));
            let inside: String = chars[j + 1..end].iter().collect();
            for matcher in inside.split(',').map(str::trim).filter(|m| !m.is_empty()) {
                let at = matcher.find(['=', '!']).expect("a label matcher");
                let (label, rest) = matcher.split_at(at);
                let op_len = if rest.starts_with("=~") || rest.starts_with("!") {
                    2
                } else {
                    1
                };
                let (op, value) = rest.split_at(op_len);
                matchers.push((
                    label.trim().to_owned(),
                    op.to_owned(),
                    value.trim().trim_matches('"').to_owned(),
                ));
            }
            i = end + 1;
        }
        out.push(Selector { name, matchers });
    }
    out
}

#[tokio::test]
async fn every_metric_the_rules_and_the_dashboard_use_is_exported() {
    let server = TestServer::start(SOURCES).await;
    let scrape = samples(&server.metrics().await);
    server.stop().await;
    let exported: BTreeSet<&str> = scrape.iter().map(|s| s.name.as_str()).collect();
    // What a series of each name carries, label by label.
    let mut labels: BTreeMap<&str, BTreeMap<&str, BTreeSet<&str>>> = BTreeMap::new();
    for s in &scrape {
        for (k, v) in &s.labels {
            labels
                .entry(s.name.as_str())
                .or_default()
                .entry(k.as_str())
                .or_default()
                .insert(v.as_str());
        }
    }
    // Prometheus adds these to every scraped series.
    let target_labels = ["job", "instance"];

    let rules = std::fs::read_to_string(packaging("prometheus/hookinbox.rules.yml")).unwrap();
    let tests = std::fs::read_to_string(packaging("prometheus/hookinbox.rules.test.yml")).unwrap();
    let recorded: BTreeSet<String> = yaml_values(&rules, "record").into_iter().collect();
    let mut queries: Vec<(&str, String)> = Vec::new();
    queries.extend(
        yaml_values(&rules, "expr")
            .into_iter()
            .map(|e| ("rules", e)),
    );
    queries.extend(
        yaml_values(&tests, "expr")
            .into_iter()
            .map(|e| ("rule tests", e)),
    );
    queries.extend(dashboard_exprs().into_iter().map(|e| ("dashboard", e)));

    let mut used: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (file, expr) in &queries {
        for selector in selectors(expr) {
            let name = selector.name.as_str();
            used.entry(file).or_default().insert(name.to_owned());
            if recorded.contains(name) {
                continue;
            }
            assert!(
                exported.contains(name),
                "{file}: {name} is not exported, in: {expr}"
            );
            for (label, op, value) in &selector.matchers {
                if target_labels.contains(&label.as_str()) {
                    continue;
                }
                let values = labels.get(name).and_then(|l| l.get(label.as_str()));
                assert!(
                    values.is_some(),
                    "{file}: {name} has no label {label}: {expr}"
                );
                // An exact value must be one hookinbox exports from the first scrape.
                if op == "=" {
                    assert!(
                        values.unwrap().contains(value.as_str()),
                        "{file}: {name}{{{label}=\"{value}\"}} is not exported: {expr}"
                    );
                }
            }
        }
    }
    // The rule tests' input series: real names with real label names (their values are
    // made up: other sources, other instances).
    for series in yaml_values(&tests, "series") {
        let selector = selectors(&series);
        if series.starts_with("up{") {
            continue;
        }
        let [selector] = &selector[..] else {
            panic!("rule tests: not one hookinbox series: {series}");
        };
        assert!(
            exported.contains(selector.name.as_str()),
            "rule tests: {} is not exported",
            selector.name
        );
        for (label, _, _) in &selector.matchers {
            assert!(
                target_labels.contains(&label.as_str())
                    || labels
                        .get(selector.name.as_str())
                        .is_some_and(|l| l.contains_key(label.as_str())),
                "rule tests: {} has no label {label}",
                selector.name
            );
        }
        used.entry("rule tests")
            .or_default()
            .insert(selector.name.clone());
    }
    // The reading above found something to check in each file.
    for (file, least) in [("rules", 10), ("rule tests", 10), ("dashboard", 20)] {
        let n = used.get(file).map_or(0, BTreeSet::len);
        assert!(n >= least, "{file}: only {n} metric names found: {used:?}");
    }
}
