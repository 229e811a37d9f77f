//! Forwarding: every stored event reaches its targets under one idempotency key, with the
//! exact bytes received, retried on the schedule until the target accepts it. The tests of
//! what the inbox decides (retries, dead, ordering) run on SQLite and on PostgreSQL.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;

use crate::sink::{Received, Reply, Sink};
use crate::support::*;

/// The `sw` source forwarding to `url` on a fast test schedule, plus `target_extra` lines.
fn to_url(url: &str, target_extra: &str) -> String {
    forwarding(
        url,
        &format!(
            "timeout = \"1s\"\nretry = [\"100ms\", \"100ms\", \"100ms\"]\nconcurrency = 8\n{target_extra}"
        ),
    )
}

/// The state of the delivery of `event_id` to `target`.
fn state(server: &TestServer, event_id: &str, target: &str) -> String {
    server.inbox().strings(&format!(
        "SELECT d.state FROM deliveries d JOIN events e ON e.id = d.event
          WHERE e.event_id = '{event_id}' AND d.target = '{target}'"
    ))[0]
        .clone()
}

/// Waits until the delivery of `event_id` to `target` is in `want`; returns the state.
async fn wait_state(server: &TestServer, event_id: &str, target: &str, want: &str) -> String {
    let sql = format!(
        "SELECT count(*) FROM deliveries d JOIN events e ON e.id = d.event
          WHERE e.event_id = '{event_id}' AND d.target = '{target}' AND d.state = '{want}'"
    );
    server.wait_count(&sql, 1).await;
    state(server, event_id, target)
}

/// (number, outcome, status, error) of every attempt of one delivery.
fn attempts(
    server: &TestServer,
    event_id: &str,
    target: &str,
) -> Vec<(i64, String, Option<i64>, Option<String>)> {
    // One text per row, so that the same query reads both databases.
    server
        .inbox()
        .strings(&format!(
            "SELECT CAST(a.number AS TEXT) || '|' || a.outcome || '|'
                    || coalesce(CAST(a.status AS TEXT), '') || '|' || coalesce(a.error, '')
               FROM attempts a
               JOIN deliveries d ON d.id = a.delivery JOIN events e ON e.id = d.event
              WHERE e.event_id = '{event_id}' AND d.target = '{target}' ORDER BY a.number"
        ))
        .iter()
        .map(|row| {
            let cells: Vec<&str> = row.splitn(4, '|').collect();
            (
                cells[0].parse().unwrap(),
                cells[1].to_owned(),
                cells[2].parse().ok(),
                Some(cells[3].to_owned()).filter(|e| !e.is_empty()),
            )
        })
        .collect()
}

fn key_of(server: &TestServer, event_id: &str, target: &str) -> String {
    server.inbox().strings(&format!(
        "SELECT d.idempotency_key FROM deliveries d JOIN events e ON e.id = d.event
          WHERE e.event_id = '{event_id}' AND d.target = '{target}'"
    ))[0]
        .clone()
}

async fn send(server: &TestServer, id: &str) -> Vec<u8> {
    let body = event_body(id, "forward me");
    assert_eq!(
        server.post("sw", &server.sign("sw", id, &body)).await.0,
        200
    );
    body
}

async fn a_thousand_events_are_each_delivered_with_their_bytes_and_key(backend: Backend) {
    let sink = Sink::start(|_, _| Reply::Status(200)).await;
    let test = "deliver::a_thousand_events_are_each_delivered_with_their_bytes_and_key";
    let Some(server) = TestServer::on(backend, test, &to_url(&sink.url(), "")).await else {
        return;
    };
    let server = Arc::new(server);
    let mut tasks = Vec::new();
    for c in 0..20 {
        let server = server.clone();
        tasks.push(tokio::spawn(async move {
            let mut sent = Vec::new();
            for n in 0..50 {
                let id = format!("msg_{c}_{n}");
                sent.push((id.clone(), send(&server, &id).await));
            }
            sent
        }));
    }
    let mut sent = Vec::new();
    for t in tasks {
        sent.extend(t.await.unwrap());
    }
    let total = 1000;
    let delivered = server
        .wait_count(
            "SELECT count(*) FROM deliveries WHERE state = 'delivered'",
            total,
        )
        .await;
    assert_eq!(delivered, total);
    let keys: std::collections::HashMap<String, String> = server
        .inbox()
        .strings(
            "SELECT e.event_id || ' ' || d.idempotency_key
               FROM deliveries d JOIN events e ON e.id = d.event",
        )
        .iter()
        .map(|row| {
            let (id, key) = row.split_once(' ').unwrap();
            (id.to_owned(), key.to_owned())
        })
        .collect();

    let received = sink.received();
    let mut per_key = std::collections::HashMap::<String, Vec<&Received>>::new();
    for r in &received {
        per_key.entry(r.key().to_owned()).or_default().push(r);
    }
    for (id, body) in &sent {
        let key = &keys[id];
        let got = per_key
            .get(key)
            .unwrap_or_else(|| panic!("{id} never reached the sink"));
        for r in got {
            assert_eq!(&r.body, body, "{id}: the bytes received, exactly");
            assert_eq!(r.header("x-hookinbox-event-id"), id);
            assert_eq!(r.header("x-hookinbox-source"), "sw");
            // The provider's own headers travel along.
            assert!(r.header("webhook-signature").starts_with("v1,"));
        }
    }
    let repeats = per_key.values().filter(|v| v.len() > 1).count();
    eprintln!(
        "{} requests at the sink for {} keys; {repeats} keys seen more than once",
        received.len(),
        per_key.len()
    );
    assert_eq!(per_key.len() as i64, total);
    Arc::try_unwrap(server).ok().unwrap().stop().await;
}

async fn failures_are_retried_under_the_same_key_until_accepted(backend: Backend) {
    let sink = Sink::start(|_, n| Reply::Status(if n < 2 { 500 } else { 200 })).await;
    let test = "deliver::failures_are_retried_under_the_same_key_until_accepted";
    let Some(server) = TestServer::on(backend, test, &to_url(&sink.url(), "")).await else {
        return;
    };
    send(&server, "msg_retry").await;
    assert_eq!(
        wait_state(&server, "msg_retry", "app", "delivered").await,
        "delivered"
    );
    let key = key_of(&server, "msg_retry", "app");
    let seen = sink.with_key(&key);
    assert_eq!(seen.len(), 3);
    for (i, r) in seen.iter().enumerate() {
        assert_eq!(r.header("x-hookinbox-attempt"), (i + 1).to_string());
    }
    let a = attempts(&server, "msg_retry", "app");
    let outcomes: Vec<(&str, Option<i64>)> =
        a.iter().map(|(_, o, s, _)| (o.as_str(), *s)).collect();
    assert_eq!(
        outcomes,
        [
            ("retry", Some(500)),
            ("retry", Some(500)),
            ("delivered", Some(200))
        ]
    );
    server.stop().await;
}

async fn retry_after_is_honoured_and_410_is_dead(backend: Backend) {
    let sink = Sink::start(|r, n| {
        if r.header("x-hookinbox-event-id") == "msg_gone" {
            Reply::Status(410)
        } else if n == 0 {
            Reply::With(429, vec![("retry-after", "2".into())])
        } else {
            Reply::Status(200)
        }
    })
    .await;
    let test = "deliver::retry_after_is_honoured_and_410_is_dead";
    let Some(server) = TestServer::on(backend, test, &to_url(&sink.url(), "")).await else {
        return;
    };
    send(&server, "msg_slow_down").await;
    send(&server, "msg_gone").await;
    assert_eq!(
        wait_state(&server, "msg_slow_down", "app", "delivered").await,
        "delivered"
    );
    let seen = sink.with_key(&key_of(&server, "msg_slow_down", "app"));
    let waited = seen[1].at - seen[0].at;
    assert!(
        waited >= Duration::from_secs(2),
        "Retry-After: 2 honoured, waited {waited:?}"
    );

    assert_eq!(wait_state(&server, "msg_gone", "app", "dead").await, "dead");
    assert_eq!(
        sink.with_key(&key_of(&server, "msg_gone", "app")).len(),
        1,
        "410 is not retried"
    );
    server.stop().await;
}

/// What `/metrics` says of the delivery rows: the backlog's states (pending, in flight,
/// dead) as they are at each scrape; delivered and superseded, which only pile up and cost
/// a walk of every row to count, at the first scrape and then at most once a minute.
async fn scrapes_count_the_backlog_every_time_and_settled_rows_once_a_minute(backend: Backend) {
    let sink = Sink::start(|r, _| {
        Reply::Status(if r.header("x-hookinbox-event-id") == "msg_gone" {
            410
        } else {
            200
        })
    })
    .await;
    let test = "deliver::scrapes_count_the_backlog_every_time_and_settled_rows_once_a_minute";
    let Some(server) = TestServer::on(backend, test, &to_url(&sink.url(), "")).await else {
        return;
    };
    let rows =
        |m: &str, state: &str| metric(m, &format!(r#"hookinbox_deliveries{{state="{state}"}}"#));
    send(&server, "msg_early").await;
    wait_state(&server, "msg_early", "app", "delivered").await;
    let first = server.metrics().await;
    let first_at = std::time::Instant::now();
    assert_eq!(rows(&first, "delivered"), 1.0, "{first}");
    assert_eq!(rows(&first, "dead"), 0.0, "{first}");

    send(&server, "msg_late").await;
    send(&server, "msg_gone").await;
    wait_state(&server, "msg_late", "app", "delivered").await;
    wait_state(&server, "msg_gone", "app", "dead").await;
    let second = server.metrics().await;
    assert_eq!(
        rows(&second, "dead"),
        1.0,
        "a dead delivery shows at once: {second}"
    );
    assert_eq!(
        rows(&second, "pending") + rows(&second, "in_flight"),
        0.0,
        "{second}"
    );
    // Unless this machine took a minute between the two scrapes, when the recount is due.
    let want = if first_at.elapsed() < Duration::from_secs(60) {
        1.0
    } else {
        2.0
    };
    assert_eq!(
        rows(&second, "delivered"),
        want,
        "delivered rows are recounted a minute after the first scrape, not at each: {second}"
    );
    server.stop().await;
}

async fn a_redirect_is_not_followed_and_a_hang_is_retried(backend: Backend) {
    let sink = Sink::start(|r, n| match (r.header("x-hookinbox-event-id"), n) {
        (_, _) if r.path != "/hook" => Reply::Status(200),
        ("msg_redirect", 0) => Reply::With(302, vec![("location", "/elsewhere".into())]),
        ("msg_hang", 0) => Reply::Hang(Duration::from_secs(3)),
        _ => Reply::Status(200),
    })
    .await;
    let test = "deliver::a_redirect_is_not_followed_and_a_hang_is_retried";
    let Some(server) = TestServer::on(backend, test, &to_url(&sink.url(), "")).await else {
        return;
    };
    send(&server, "msg_redirect").await;
    send(&server, "msg_hang").await;
    assert_eq!(
        wait_state(&server, "msg_redirect", "app", "delivered").await,
        "delivered"
    );
    assert_eq!(
        wait_state(&server, "msg_hang", "app", "delivered").await,
        "delivered"
    );
    assert!(
        sink.received().iter().all(|r| r.path == "/hook"),
        "the redirect was followed"
    );
    let a = attempts(&server, "msg_redirect", "app");
    assert_eq!((a[0].1.as_str(), a[0].2), ("retry", Some(302)));
    let a = attempts(&server, "msg_hang", "app");
    assert_eq!(a[0].1, "retry");
    assert!(
        a[0].3.as_deref().unwrap_or("").contains("timed out"),
        "{a:?}"
    );
    assert_eq!(a.len(), 2);
    server.stop().await;
}

async fn one_failing_target_never_holds_back_another(backend: Backend) {
    let sink = Sink::start(|r, _| Reply::Status(if r.path == "/broken" { 500 } else { 200 })).await;
    let broken = format!("http://{}/broken", sink.addr);
    let extra = format!(
        "[[sources.targets]]\nname = \"broken\"\nurl = \"{broken}\"\ntimeout = \"1s\"\nretry = [\"100ms\", \"100ms\"]"
    );
    let test = "deliver::one_failing_target_never_holds_back_another";
    let Some(server) = TestServer::on(backend, test, &to_url(&sink.url(), &extra)).await else {
        return;
    };
    send(&server, "msg_fanout").await;
    assert_eq!(
        wait_state(&server, "msg_fanout", "app", "delivered").await,
        "delivered"
    );
    assert_eq!(
        wait_state(&server, "msg_fanout", "broken", "dead").await,
        "dead"
    );
    assert_eq!(
        attempts(&server, "msg_fanout", "broken").len(),
        3,
        "1 attempt + 2 retries"
    );
    assert_ne!(
        key_of(&server, "msg_fanout", "app"),
        key_of(&server, "msg_fanout", "broken")
    );
    let m = server.metrics().await;
    assert_eq!(
        metric(
            &m,
            r#"hookinbox_attempts_total{source="sw",target="broken",result="dead"}"#
        ),
        1.0
    );
    server.stop().await;
}

#[tokio::test]
async fn re_signed_requests_verify_with_an_independent_implementation() {
    let sink = Sink::start(|_, _| Reply::Status(200)).await;
    let secret = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    let server =
        TestServer::start(&to_url(&sink.url(), &format!("sign_secret = \"{secret}\""))).await;
    let body = send(&server, "msg_signed").await;
    assert_eq!(
        wait_state(&server, "msg_signed", "app", "delivered").await,
        "delivered"
    );
    let r = &sink.with_key(&key_of(&server, "msg_signed", "app"))[0];

    // Standard Webhooks verification written out here from the spec, not hookinbox's code:
    // HMAC-SHA256 keyed with base64(secret minus "whsec_") over "{id}.{timestamp}.{body}".
    let key = base64::engine::general_purpose::STANDARD
        .decode(&secret["whsec_".len()..])
        .unwrap();
    let (id, ts) = (r.header("webhook-id"), r.header("webhook-timestamp"));
    let mut signed = format!("{id}.{ts}.").into_bytes();
    signed.extend_from_slice(&r.body);
    let tag = ring::hmac::sign(
        &ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &key),
        &signed,
    );
    let expected = format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(tag.as_ref())
    );
    assert_eq!(
        r.header("webhook-signature"),
        expected,
        "our signature, not the provider's"
    );
    assert_eq!(id, r.key(), "webhook-id is the idempotency key");
    assert!((ts.parse::<i64>().unwrap() - hookinbox::clock::unix_now()).abs() < 60);
    assert_eq!(r.body, body);
    server.stop().await;
}

async fn ordering_delivers_the_newest_and_supersedes_older_versions_per_key(backend: Backend) {
    // Key A is slow at the target; key B must not wait for it.
    let sink = Sink::start(|r, _| {
        let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        if body["data"]["key"] == "A" {
            Reply::Hang(Duration::from_millis(1500))
        } else {
            Reply::Status(200)
        }
    })
    .await;
    let config = to_url(&sink.url(), "")
        .replace("timeout = \"1s\"", "timeout = \"5s\"")
        .replace(
            "[[sources.targets]]",
            "order = { key = \"/data/key\", version = \"/data/version\" }\n[[sources.targets]]",
        );
    let test = "deliver::ordering_delivers_the_newest_and_supersedes_older_versions_per_key";
    let Some(server) = TestServer::on(backend, test, &config).await else {
        return;
    };
    let post = |id: &'static str, key: &'static str, version: i64| {
        let body =
            format!(r#"{{"type":"thing.updated","data":{{"key":"{key}","version":{version}}}}}"#);
        let req = server.sign("sw", id, body.as_bytes());
        let server = &server;
        async move { assert_eq!(server.post("sw", &req).await.0, 200) }
    };
    post("a3", "A", 3).await;
    post("b1", "B", 1).await;
    assert_eq!(
        wait_state(&server, "b1", "app", "delivered").await,
        "delivered"
    );
    assert_eq!(
        state(&server, "a3", "app"),
        "in_flight",
        "B overtook the slow A"
    );
    assert_eq!(
        wait_state(&server, "a3", "app", "delivered").await,
        "delivered"
    );
    post("a1", "A", 1).await;
    post("a2", "A", 2).await;
    assert_eq!(
        wait_state(&server, "a1", "app", "superseded").await,
        "superseded"
    );
    assert_eq!(
        wait_state(&server, "a2", "app", "superseded").await,
        "superseded"
    );
    let ids: Vec<String> = sink
        .received()
        .iter()
        .map(|r| r.header("x-hookinbox-event-id").to_owned())
        .collect();
    assert!(
        !ids.contains(&"a1".to_owned()) && !ids.contains(&"a2".to_owned()),
        "{ids:?}"
    );
    // Replaying a superseded version would only supersede it again: left alone, counted.
    let config = server.config.path.display().to_string();
    let (code, out, err) = hookinbox(&["replay", "a1", "--dry-run", "--json", "--config", &config]);
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (report["requeued"].as_i64(), report["superseded"].as_i64()),
        (Some(0), Some(1)),
        "{report}"
    );
    server.stop().await;
}

async fn pending_versions_of_a_key_go_one_at_a_time_in_version_order(backend: Backend) {
    // The target is down while three versions arrive out of order; when it comes back they
    // must arrive in version order, one at a time.
    let up = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let up2 = up.clone();
    let sink = Sink::start(move |_, _| {
        if up2.load(std::sync::atomic::Ordering::SeqCst) {
            Reply::Status(200)
        } else {
            Reply::Status(503)
        }
    })
    .await;
    let config = to_url(&sink.url(), "")
        .replace(
            "retry = [\"100ms\", \"100ms\", \"100ms\"]",
            "retry = [\"300ms\", \"300ms\", \"300ms\", \"300ms\", \"300ms\"]",
        )
        .replace(
            "[[sources.targets]]",
            "order = { key = \"/k\", version = \"/v\" }\n[[sources.targets]]",
        );
    let test = "deliver::pending_versions_of_a_key_go_one_at_a_time_in_version_order";
    let Some(server) = TestServer::on(backend, test, &config).await else {
        return;
    };
    for (id, v) in [("v3", 3), ("v1", 1), ("v2", 2)] {
        let body = format!(r#"{{"k":"K","v":{v}}}"#).into_bytes();
        assert_eq!(
            server.post("sw", &server.sign("sw", id, &body)).await.0,
            200
        );
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let flipped = std::time::Instant::now();
    up.store(true, std::sync::atomic::Ordering::SeqCst);
    for id in ["v1", "v2", "v3"] {
        assert_eq!(
            wait_state(&server, id, "app", "delivered").await,
            "delivered",
            "{id}"
        );
    }
    let after: Vec<String> = sink
        .received()
        .iter()
        .filter(|r| r.at > flipped)
        .map(|r| r.header("x-hookinbox-event-id").to_owned())
        .collect();
    assert_eq!(
        after,
        ["v1", "v2", "v3"],
        "in version order, each once, not in arrival order"
    );
    server.stop().await;
}

const SCRIPT_TARGETS: &str = r#"
[[sources]]
name = "sw"
scheme = "standard-webhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
[[sources.targets]]
name = "ok"
command = ["/bin/sh", "-c", "cat > \"$OUT/$HOOKINBOX_EVENT_ID.body\"; env > \"$OUT/$HOOKINBOX_EVENT_ID.env\"", "sh"]
timeout = "5s"
retry = ["100ms", "100ms"]
[[sources.targets]]
name = "flaky"
command = ["/bin/sh", "-c", "if [ -e \"$OUT/$HOOKINBOX_IDEMPOTENCY_KEY\" ]; then exit 0; fi; touch \"$OUT/$HOOKINBOX_IDEMPOTENCY_KEY\"; echo not yet >&2; exit 1", "sh"]
timeout = "5s"
retry = ["100ms", "100ms"]
[[sources.targets]]
name = "sleepy"
command = ["/bin/sh", "-c", "sleep 30 & echo $! > \"$OUT/sleepy.pid\"; sleep 30", "sh"]
timeout = "500ms"
retry = ["100ms"]
[[sources.targets]]
name = "deaf"
command = ["/bin/true"]
timeout = "5s"
"#;

#[tokio::test]
async fn command_targets_get_the_body_on_stdin_and_a_clean_environment() {
    let out = tempfile::tempdir().unwrap();
    // The commands find their output directory through the one variable we put in the
    // config: hookinbox passes nothing of its own environment.
    let config = SCRIPT_TARGETS
        .replace("\"$OUT", &format!("\"{}", out.path().display()))
        .replace("$OUT", &out.path().display().to_string());
    let server = TestServer::start(&config).await;
    let big = format!(r#"{{"id":"msg_cmd","pad":"{}"}}"#, "x".repeat(60_000)).into_bytes();
    assert_eq!(
        server
            .post("sw", &server.sign("sw", "msg_cmd", &big))
            .await
            .0,
        200
    );

    assert_eq!(
        wait_state(&server, "msg_cmd", "ok", "delivered").await,
        "delivered"
    );
    assert_eq!(
        std::fs::read(out.path().join("msg_cmd.body")).unwrap(),
        big,
        "the body, on stdin"
    );
    let env = std::fs::read_to_string(out.path().join("msg_cmd.env")).unwrap();
    let key = key_of(&server, "msg_cmd", "ok");
    assert!(
        env.contains(&format!("HOOKINBOX_IDEMPOTENCY_KEY={key}")),
        "{env}"
    );
    assert!(
        env.contains("HOOKINBOX_EVENT_ID=msg_cmd") && env.contains("HOOKINBOX_SOURCE=sw"),
        "{env}"
    );
    assert!(
        env.contains("HOOKINBOX_ATTEMPT=1") && env.contains("HOOKINBOX_RECEIVED_AT="),
        "{env}"
    );
    assert!(
        !env.contains("CARGO") && !env.contains("HOME="),
        "nothing of hookinbox's environment: {env}"
    );

    assert_eq!(
        wait_state(&server, "msg_cmd", "flaky", "delivered").await,
        "delivered"
    );
    let a = attempts(&server, "msg_cmd", "flaky");
    assert_eq!(
        a.iter().map(|x| (x.1.as_str(), x.2)).collect::<Vec<_>>(),
        [("retry", Some(1)), ("delivered", Some(0))]
    );
    let output: String = server
        .read()
        .query_row("SELECT output FROM attempts a JOIN deliveries d ON d.id = a.delivery WHERE d.target = 'flaky' AND a.number = 1", [], |r| r.get(0))
        .unwrap();
    assert!(
        output.contains("not yet"),
        "stderr is kept with the attempt: {output}"
    );

    assert_eq!(
        wait_state(&server, "msg_cmd", "deaf", "delivered").await,
        "delivered",
        "a command that ignores stdin"
    );

    assert_eq!(
        wait_state(&server, "msg_cmd", "sleepy", "dead").await,
        "dead"
    );
    let a = attempts(&server, "msg_cmd", "sleepy");
    assert!(
        a.iter()
            .all(|x| x.3.as_deref().unwrap_or("").contains("timed out")),
        "{a:?}"
    );
    let pid = std::fs::read_to_string(out.path().join("sleepy.pid")).unwrap();
    // Gone, or a zombie waiting for init to reap it: either way, no longer running.
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).unwrap_or_default();
    let state = stat.rsplit_once(") ").map(|(_, rest)| &rest[..1]);
    assert!(
        matches!(state, None | Some("Z") | Some("X")),
        "the command's background child was killed with its process group: {stat}"
    );
    server.stop().await;
}

#[tokio::test]
async fn an_event_type_holding_control_characters_is_still_delivered_to_a_command() {
    let out = tempfile::tempdir().unwrap();
    let config = format!(
        r#"
[[sources]]
name = "sw"
scheme = "standard-webhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
[[sources.targets]]
name = "ok"
command = ["/bin/sh", "-c", "env > \"{}/$HOOKINBOX_EVENT_ID.env\"", "sh"]
timeout = "5s"
retry = ["100ms", "100ms"]
"#,
        out.path().display()
    );
    let server = TestServer::start(&config).await;
    // JSON allows any character escaped; an environment cannot hold a NUL at all.
    let body = br#"{"id":"msg_nul","type":"invoice.paid\u0000\nX-Injected: 1"}"#;
    assert_eq!(
        server
            .post("sw", &server.sign("sw", "msg_nul", body))
            .await
            .0,
        200
    );
    assert_eq!(
        wait_state(&server, "msg_nul", "ok", "delivered").await,
        "delivered",
        "{:?}",
        attempts(&server, "msg_nul", "ok")
    );
    let env = std::fs::read_to_string(out.path().join("msg_nul.env")).unwrap();
    assert!(
        env.lines()
            .any(|l| l == r"HOOKINBOX_EVENT_TYPE=invoice.paid\x00\nX-Injected: 1"),
        "the type arrives with its control characters written out: {env}"
    );
    // Only the environment escapes it: the stored body keeps the exact bytes.
    assert_eq!(server.stored_body("sw", "msg_nul").unwrap(), body);
    server.stop().await;
}

async fn versions_sent_as_digit_strings_compare_as_numbers(backend: Backend) {
    let sink = Sink::start(|_, _| Reply::Status(200)).await;
    let config = to_url(&sink.url(), "").replace(
        "[[sources.targets]]",
        "order = { key = \"/k\", version = \"/v\" }\n[[sources.targets]]",
    );
    let test = "deliver::versions_sent_as_digit_strings_compare_as_numbers";
    let Some(server) = TestServer::on(backend, test, &config).await else {
        return;
    };
    for (id, v, want) in [
        ("n9", "9", "delivered"),
        ("n10", "10", "delivered"),
        ("n8", "8", "superseded"),
    ] {
        let body = format!(r#"{{"k":"K","v":"{v}"}}"#).into_bytes();
        assert_eq!(
            server.post("sw", &server.sign("sw", id, &body)).await.0,
            200
        );
        assert_eq!(
            wait_state(&server, id, "app", want).await,
            want,
            "version {v:?}"
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn a_reload_applies_new_targets_and_retires_deliveries_of_removed_ones() {
    let sink = Sink::start(|r, _| Reply::Status(if r.path == "/down" { 503 } else { 200 })).await;
    let down = format!("http://{}/down", sink.addr);
    let mut server = TestServer::start(&forwarding(&down, "retry = [\"30s\"]")).await;
    send(&server, "msg_before").await;
    // The first attempt fails; the retry is half a minute away.
    assert_eq!(
        wait_for_count(&server.read(), "SELECT count(*) FROM attempts", 1).await,
        1
    );

    // A short lease sweeps often (every half lease), for the last step below.
    let renamed =
        to_url(&sink.url(), "lease = \"6s\"").replace("name = \"app\"", "name = \"app2\"");
    server.reload(&renamed).await.unwrap();
    assert_eq!(
        wait_state(&server, "msg_before", "app", "dead").await,
        "dead"
    );
    let error: String = server
        .read()
        .query_row(
            "SELECT last_error FROM deliveries WHERE target = 'app'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(error.contains("no longer in the configuration"), "{error}");

    // New events go to the new target.
    send(&server, "msg_after").await;
    assert_eq!(
        wait_state(&server, "msg_after", "app2", "delivered").await,
        "delivered"
    );

    // A delivery of the removed target that comes back to pending after the reload (an
    // old attempt's retry, an expired lease, a request in flight on the old sources) is
    // retired again by the sweeper, not left pending with nobody to claim it.
    let conn = rusqlite::Connection::open(&server.db).unwrap();
    conn.busy_timeout(PATIENCE).unwrap();
    conn.execute(
        "UPDATE deliveries SET state = 'pending', last_error = 'came back' WHERE target = 'app'",
        [],
    )
    .unwrap();
    drop(conn);
    assert_eq!(
        wait_state(&server, "msg_before", "app", "dead").await,
        "dead"
    );
    server.stop().await;
}

on_both_backends!(
    a_thousand_events_are_each_delivered_with_their_bytes_and_key,
    failures_are_retried_under_the_same_key_until_accepted,
    retry_after_is_honoured_and_410_is_dead,
    scrapes_count_the_backlog_every_time_and_settled_rows_once_a_minute,
    a_redirect_is_not_followed_and_a_hang_is_retried,
    one_failing_target_never_holds_back_another,
    ordering_delivers_the_newest_and_supersedes_older_versions_per_key,
    pending_versions_of_a_key_go_one_at_a_time_in_version_order,
    versions_sent_as_digit_strings_compare_as_numbers,
);
