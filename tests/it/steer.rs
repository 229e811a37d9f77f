//! Steering deliveries: pausing and resuming a target (held across a restart of the real
//! binary), bulk replay with filters, a target's rate limit, and `events --follow`. Each
//! runs the real server with a real sink, and the commands as the real binary, on SQLite
//! and on PostgreSQL.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::proc::{Proc, deploy_on};
use crate::sink::{Reply, Sink};
use crate::support::*;

/// The `sw` source with two targets on one sink, told apart by path: `app`, one attempt at
/// a time (so its arrival order is its claim order), and `audit`, the control that is
/// never paused: once it has every event, `app`'s loop has had its chances too.
fn two_targets(sink: &Sink) -> String {
    format!(
        r#"
[[sources]]
name = "sw"
scheme = "standard-webhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
[[sources.targets]]
name = "app"
url = "http://{addr}/app"
timeout = "2s"
concurrency = 1
[[sources.targets]]
name = "audit"
url = "http://{addr}/audit"
timeout = "2s"
"#,
        addr = sink.addr
    )
}

/// Runs the real binary; the commands block, so not on the runtime's own thread.
async fn run(args: &[&str]) -> (i32, String, String) {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        hookinbox(&args.iter().map(String::as_str).collect::<Vec<_>>())
    })
    .await
    .unwrap()
}

/// Waits until the process has logged a line containing every one of `words`.
async fn wait_for_log(proc: &Proc, words: &[&str]) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if proc
            .logs
            .lock()
            .unwrap()
            .iter()
            .any(|l| words.iter().all(|w| l.contains(w)))
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no log line with {words:?}: {:#?}",
            proc.logs.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// `serve` as the real binary, with the delivery loops' logs.
fn spawn(config: &std::path::Path) -> Proc {
    Proc::spawn_env(
        config,
        &[],
        &[(
            "RUST_LOG",
            "warn,hookinbox::commands::serve=info,hookinbox::deliver=info",
        )],
    )
}

/// Deliveries of `target` in `state`.
fn count(inbox: &Inbox, target: &str, state: &str) -> i64 {
    inbox.count(&format!(
        "SELECT count(*) FROM deliveries WHERE target = '{target}' AND state = '{state}'"
    ))
}

async fn a_paused_target_holds_its_deliveries_across_a_restart_and_resume_sends_them_in_order(
    backend: Backend,
) {
    let sink = Sink::start(|_, _| Reply::Status(200)).await;
    let test = "steer::a_paused_target_holds_its_deliveries_across_a_restart";
    let Some(d) = deploy_on(backend, test, &two_targets(&sink)).await else {
        return;
    };
    let config = d.config.display().to_string();
    let client = client();
    let post = |proc: &Proc, id: &str| {
        let req = sign_with(
            &d.scheme,
            id,
            &event_body(id, ""),
            hookinbox::clock::unix_now(),
        );
        let (client, base) = (client.clone(), format!("http://{}", proc.public));
        async move {
            let status = send(&client, &base, "sw", &req).await.unwrap().status();
            assert_eq!(status, 200);
        }
    };

    let proc = spawn(&d.config);
    let conn = &d.inbox;
    // A name that is not configured is refused with the names there are.
    let (code, _, err) = run(&["pause", "sw/ap", "--config", &config]).await;
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("no target \"sw/ap\"") && err.contains("targets are: sw/app, sw/audit"),
        "{err}"
    );
    let (code, _, err) = run(&["pause", "app", "--config", &config]).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("is not SOURCE/TARGET"), "{err}");

    let (code, out, err) = run(&["pause", "sw/app", "--by", "tester", "--config", &config]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("paused sw/app: its 0 pending"), "{out}");
    // The loop noticed before anything is sent.
    wait_for_log(&proc, &["target is paused", "target=app", "tester"]).await;

    let ids: Vec<String> = (0..6).map(|n| format!("evt_held_{n}")).collect();
    for id in &ids[..3] {
        post(&proc, id).await;
    }
    // The control target has them all: the paused one attempted none.
    assert_eq!(
        conn.wait_count(
            "SELECT count(*) FROM deliveries WHERE target = 'audit' AND state = 'delivered'",
            3
        )
        .await,
        3
    );
    assert_eq!(count(conn, "app", "pending"), 3);
    assert_eq!(
        conn.count("SELECT CAST(sum(attempts) AS BIGINT) FROM deliveries WHERE target = 'app'"),
        0
    );
    let (code, out, err) = run(&["events", "--json", "--config", &config]).await;
    assert_eq!(code, 0, "{err}");
    let page: Value = serde_json::from_str(&out).unwrap();
    for e in page["events"].as_array().unwrap() {
        assert_eq!(e["status"], "pending", "{e}");
    }
    let (_, shown, _) = run(&["show", "evt_held_0", "--config", &config]).await;
    assert!(
        shown.contains("paused since ") && shown.contains(" by tester"),
        "{shown}"
    );
    let (_, shown, _) = run(&["show", "evt_held_0", "--json", "--config", &config]).await;
    let shown: Value = serde_json::from_str(&shown).unwrap();
    let by_target = |t: &str| {
        shown["deliveries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["target"] == t)
            .unwrap()
            .clone()
    };
    assert_eq!(by_target("app")["paused_by"], "tester");
    assert_eq!(by_target("audit")["paused_by"], Value::Null);
    // Pausing again changes nothing, and says so.
    let (code, out, _) = run(&["pause", "sw/app", "--json", "--config", &config]).await;
    assert_eq!(code, 0);
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (&report["changed"], &report["paused_by"], &report["pending"]),
        (&Value::Bool(false), &Value::from("tester"), &Value::from(3))
    );

    // A restart keeps the pause: it is a row in the inbox.
    assert!(proc.sigterm().success());
    let proc = spawn(&d.config);
    wait_for_log(&proc, &["target is paused", "target=app"]).await;
    for id in &ids[3..] {
        post(&proc, id).await;
    }
    assert_eq!(
        conn.wait_count(
            "SELECT count(*) FROM deliveries WHERE target = 'audit' AND state = 'delivered'",
            6
        )
        .await,
        6
    );
    assert_eq!(count(conn, "app", "pending"), 6);
    assert!(
        sink.received().iter().all(|r| r.path == "/audit"),
        "nothing reached the paused target"
    );

    // Events keep arriving while it is resumed, each commit waking the paused loop more
    // often than its idle poll: the resume must still be seen.
    let flowing = async {
        for n in 0.. {
            post(&proc, &format!("evt_flow_{n}")).await;
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    let resumed = async {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let (code, out, err) = run(&["resume", "sw/app", "--config", &config]).await;
        assert_eq!(code, 0, "{err}");
        let pending: i64 = out
            .split_once("its ")
            .and_then(|(_, rest)| rest.split_once(" pending"))
            .and_then(|(n, _)| n.parse().ok())
            .unwrap_or_else(|| panic!("{out}"));
        assert!(
            out.starts_with("resumed sw/app (paused since ") && pending >= 6,
            "the six held and the flowing ones: {out}"
        );
        assert_eq!(
            conn.wait_count(
                "SELECT count(*) FROM deliveries d JOIN events e ON e.id = d.event
                  WHERE d.target = 'app' AND d.state = 'delivered'
                    AND e.event_id LIKE 'evt_held_%'",
                6
            )
            .await,
            6
        );
        wait_for_log(&proc, &["target resumed", "target=app"]).await;
    };
    tokio::select! {
        () = flowing => unreachable!("it sends until the resume is seen"),
        () = resumed => {}
    }
    let order: Vec<String> = sink
        .received()
        .iter()
        .filter(|r| r.path == "/app")
        .map(|r| r.header("x-hookinbox-event-id").to_owned())
        .collect();
    assert_eq!(order[..6], ids, "released in the order they arrived");
    let (code, out, _) = run(&["resume", "sw/app", "--config", &config]).await;
    assert_eq!(code, 0);
    assert_eq!(out, "sw/app is not paused; nothing changed\n");
    assert!(proc.sigterm().success());
}

/// A body of the `sw` source with this event type.
fn typed(id: &str, event_type: &str) -> Vec<u8> {
    format!(r#"{{"id":"{id}","type":"{event_type}","data":{{}}}}"#).into_bytes()
}

/// The provider ids `replay --json` lists, sorted.
fn listed(report: &str) -> Vec<String> {
    let report: Value = serde_json::from_str(report).unwrap_or_else(|e| panic!("{e}: {report}"));
    let mut ids: Vec<String> = report["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["event_id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

async fn replay_selects_by_state_event_type_and_error_and_requeues_only_those(backend: Backend) {
    // Until told otherwise the app refuses one type for good (410) and fails on another
    // (500, and with no retries that is dead at once); it takes the rest.
    let accept = Arc::new(AtomicBool::new(false));
    let flag = accept.clone();
    let sink = Sink::start(move |r, _| {
        let body = String::from_utf8_lossy(&r.body);
        Reply::Status(match () {
            _ if flag.load(Ordering::SeqCst) => 200,
            _ if body.contains("invoice.gone") => 410,
            _ if body.contains("invoice.broken") => 500,
            _ => 200,
        })
    })
    .await;
    let test = "steer::replay_selects_by_state_event_type_and_error_and_requeues_only_those";
    let sources = forwarding(&sink.url(), "timeout = \"2s\"\nretry = []");
    let Some(server) = TestServer::on(backend, test, &sources).await else {
        return;
    };
    for (id, ty) in [
        ("g1", "invoice.gone"),
        ("g2", "invoice.gone"),
        ("b1", "invoice.broken"),
        ("b2", "invoice.broken"),
        ("k1", "invoice.ok"),
    ] {
        let req = server.sign("sw", id, &typed(id, ty));
        assert_eq!(server.post("sw", &req).await.0, 200);
    }
    let done = "SELECT count(*) FROM deliveries WHERE state IN ('dead', 'delivered')";
    assert_eq!(server.wait_count(done, 5).await, 5);
    let config = server.config.path.display().to_string();
    let dry = |filters: &[&str]| {
        let mut args = vec!["replay", "--dry-run", "--json", "--config", &config];
        args.extend_from_slice(filters);
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        async move {
            let (code, out, err) = run(&args.iter().map(String::as_str).collect::<Vec<_>>()).await;
            assert_eq!(code, 0, "{args:?}: {err}");
            listed(&out)
        }
    };
    assert_eq!(dry(&["--error", "ANSWERED 500"]).await, ["b1", "b2"]);
    assert_eq!(dry(&["--event-type", "invoice.gone"]).await, ["g1", "g2"]);
    // `*` is any run of characters, dots included; nothing else is a wildcard, and case
    // counts, on both backends.
    assert_eq!(
        dry(&["--type", "invoice.*"]).await,
        ["b1", "b2", "g1", "g2", "k1"]
    );
    assert_eq!(dry(&["--type", "*.gone"]).await, ["g1", "g2"]);
    assert_eq!(dry(&["--type", "inv*g*e"]).await, ["g1", "g2"]);
    for nothing in [
        "invoice_gone",
        "invoice.?one",
        "invoice.%",
        "INVOICE.*",
        "[i]nvoice.*",
    ] {
        assert_eq!(
            dry(&["--type", nothing]).await,
            Vec::<String>::new(),
            "{nothing}"
        );
    }
    let (code, out, err) = run(&[
        "events",
        "--type",
        "invoice.b*",
        "--json",
        "--config",
        &config,
    ])
    .await;
    assert_eq!(code, 0, "{err}");
    let listing: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let mut typed_ids: Vec<String> = listing["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_id"].as_str().unwrap().to_owned())
        .collect();
    typed_ids.sort();
    assert_eq!(typed_ids, ["b1", "b2"]);
    assert_eq!(dry(&["--state", "delivered"]).await, ["k1"]);
    assert_eq!(dry(&["--dead"]).await, ["b1", "b2", "g1", "g2"]);
    // Filters narrow each other.
    assert_eq!(
        dry(&["--state", "dead", "--error", "410", "--source", "sw"]).await,
        ["g1", "g2"]
    );
    assert_eq!(
        dry(&["--event-type", "invoice.ok", "--state", "dead"]).await,
        Vec::<String>::new()
    );
    // A source or a target alone chooses nothing: that would be everything.
    let (code, _, err) = run(&["replay", "--source", "sw", "--config", &config]).await;
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = run(&[
        "replay", "--dead", "--state", "pending", "--config", &config,
    ])
    .await;
    assert_eq!(code, 2, "{err}");
    assert_eq!(
        server.count("SELECT count(*) FROM deliveries WHERE state = 'dead'"),
        4,
        "the dry runs changed nothing"
    );

    accept.store(true, Ordering::SeqCst);
    let (code, out, err) = run(&["replay", "--error", "answered 500", "--config", &config]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("re-queued 2 deliveries"), "{out}");
    let delivered = "SELECT count(*) FROM deliveries WHERE state = 'delivered'";
    assert_eq!(server.wait_count(delivered, 3).await, 3);
    let dead = server
        .inbox()
        .strings("SELECT event_id FROM dead_deliveries ORDER BY event_id");
    assert_eq!(dead, ["g1", "g2"], "only the chosen ones were replayed");
    for id in ["b1", "b2"] {
        let seen: Vec<_> = sink
            .received()
            .into_iter()
            .filter(|r| r.header("x-hookinbox-event-id") == id)
            .collect();
        assert_eq!(seen.len(), 2, "{id}: once failed, once replayed");
        assert_eq!(seen[0].key(), seen[1].key(), "{id}: the same key");
    }
    server.stop().await;
}

async fn a_rate_limited_target_gets_its_attempts_spaced_out(backend: Backend) {
    let sink = Sink::start(|_, _| Reply::Status(200)).await;
    // Enough slots for all six at once: only the rate can spread them out.
    let sources = forwarding(&sink.url(), "concurrency = 16\nrate = \"2/s\"");
    let test = "steer::a_rate_limited_target_gets_its_attempts_spaced_out";
    let Some(server) = TestServer::on(backend, test, &sources).await else {
        return;
    };
    let (code, out, err) = run(&[
        "check",
        "--config",
        &server.config.path.display().to_string(),
    ])
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("rate=2/s (at most 1 at once)"), "{out}");
    for n in 0..6 {
        let id = format!("evt_rate_{n}");
        let req = server.sign("sw", &id, &event_body(&id, ""));
        assert_eq!(server.post("sw", &req).await.0, 200);
    }
    let delivered = "SELECT count(*) FROM deliveries WHERE state = 'delivered'";
    assert_eq!(server.wait_count(delivered, 6).await, 6);
    let at: Vec<Instant> = sink.received().iter().map(|r| r.at).collect();
    assert_eq!(at.len(), 6, "each attempt once");
    // At 2/s, one at a time, six starts span 2.5 s; without the limit they all arrive
    // within milliseconds. A slow machine only spreads them further; to fall below this
    // bound the first request alone would have to take 1.5 s longer than the last.
    let spread = *at.iter().max().unwrap() - *at.iter().min().unwrap();
    assert!(
        spread >= Duration::from_secs(1),
        "six attempts at 2/s arrived within {spread:?}"
    );
    // The leases never ran out while waiting for the rate: nothing was swept back.
    assert_eq!(
        server.count("SELECT count(*) FROM attempts"),
        6,
        "one attempt per delivery"
    );
    server.stop().await;
}

/// Two Standard Webhooks sources, `sw` and `other`, storing without targets.
const TWO_SOURCES: &str = r#"
[[sources]]
name = "sw"
scheme = "standard-webhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
[[sources]]
name = "other"
scheme = "standard-webhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
"#;

/// `hookinbox events --follow` as a child process, its stdout read line by line on a thread
/// of its own (so that a wait for a line can time out). Killed when dropped, so that a test
/// that fails leaves nothing running.
struct Follower {
    child: std::process::Child,
    /// None once the test stopped reading: the thread then ends at the next line, closing
    /// the pipe as `| head` would.
    lines: Option<std::sync::mpsc::Receiver<String>>,
}

impl Follower {
    /// `hookinbox events --follow ARGS… --config CONFIG`, its stdout a pipe.
    fn spawn(config: &std::path::Path, args: &[&str]) -> std::process::Child {
        Command::new(env!("CARGO_BIN_EXE_hookinbox"))
            .args(["events", "--follow"])
            .args(args)
            .arg("--config")
            .arg(config)
            .env_remove("HOOKINBOX_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap()
    }

    /// [`Follower::spawn`], its lines read on a thread of their own.
    fn start(config: &std::path::Path, args: &[&str]) -> Follower {
        let mut child = Follower::spawn(config, args);
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Follower {
            child,
            lines: Some(rx),
        }
    }

    /// The next line it printed.
    async fn line(&self) -> String {
        let lines = self.lines.as_ref().expect("still reading");
        tokio::task::block_in_place(|| lines.recv_timeout(PATIENCE))
            .expect("events --follow printed a line")
    }

    fn signal(&self, name: &str) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args([&format!("-{name}"), &pid])
            .status();
        assert!(sent.unwrap().success());
    }

    /// Its exit code, once it has ended.
    fn exited(&mut self) -> Option<Option<i32>> {
        self.child.try_wait().unwrap().map(|status| status.code())
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn events_follow_prints_new_events_as_they_commit_and_ends_cleanly(backend: Backend) {
    let test = "steer::events_follow_prints_new_events_as_they_commit_and_ends_cleanly";
    let Some(server) = TestServer::on(backend, test, TWO_SOURCES).await else {
        return;
    };
    let post = |source: &'static str, id: &'static str| {
        let req = server.sign(source, id, &event_body(id, ""));
        let server = &server;
        async move { assert_eq!(server.post(source, &req).await.0, 200) }
    };
    post("sw", "evt_before").await;

    let mut json = Follower::start(&server.config.path, &["--json", "--source", "sw"]);
    // The newest page first, one JSON object per line.
    let first: Value = serde_json::from_str(&json.line().await).unwrap();
    assert_eq!(first["event_id"], "evt_before", "{first}");
    post("sw", "evt_new_1").await;
    post("other", "evt_elsewhere").await;
    post("sw", "evt_new_2").await;
    let mut followed = Vec::new();
    for _ in 0..2 {
        let line = json.line().await;
        let e: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(e["source"], "sw", "the filter holds: {line}");
        followed.push(e["event_id"].as_str().unwrap().to_owned());
    }
    assert_eq!(followed, ["evt_new_1", "evt_new_2"]);
    if let Some(url) = &server.pg {
        // With replicas, ids are taken in one order and committed in another: an event
        // whose transaction took its id first and committed last is still printed.
        let late = pg_connect(url).await;
        late.batch_execute(
            "BEGIN;
             INSERT INTO events (source, event_id, sha256, size, received_at)
             VALUES ('sw', 'evt_late', 'none', 0, '2026-12-01T00:00:00.000Z');",
        )
        .await
        .unwrap();
        post("sw", "evt_new_3").await;
        let line = json.line().await;
        assert!(line.contains("evt_new_3"), "{line}");
        late.batch_execute("COMMIT").await.unwrap();
        let line = json.line().await;
        assert!(
            line.contains("evt_late"),
            "the late commit is printed: {line}"
        );
    }
    // Ctrl-C ends it with success.
    json.signal("INT");
    let deadline = Instant::now() + PATIENCE;
    let code = loop {
        if let Some(code) = json.exited() {
            break code;
        }
        assert!(
            Instant::now() < deadline,
            "SIGINT did not end events --follow"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    assert_eq!(code, Some(0), "interrupted is a clean end");

    // A reader that goes away (`| head -2`) ends it too, when it next writes: exit 0, no
    // panic. New events keep coming until it has noticed.
    let mut text = Follower::start(&server.config.path, &["--limit", "1"]);
    assert!(text.line().await.starts_with("ID  "), "the header");
    let newest = if server.pg.is_some() {
        "evt_new_3"
    } else {
        "evt_new_2"
    };
    assert!(text.line().await.contains(newest));
    text.lines = None;
    let code = loop {
        if let Some(code) = text.exited() {
            break code;
        }
        let id = format!("evt_unread_{}", server.count("SELECT count(*) FROM events"));
        let req = server.sign("sw", &id, &event_body(&id, ""));
        assert_eq!(server.post("sw", &req).await.0, 200);
        assert!(
            server.count("SELECT count(*) FROM events") < 100,
            "a closed pipe did not end events --follow"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(code, Some(0), "a closed pipe is a clean end");

    // A reader that goes away while no event comes (`| head -1` on a quiet source) ends it
    // too, without waiting for an event to write.
    let mut child = Follower::spawn(&server.config.path, &["--json", "--limit", "1"]);
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        let _ = reader.read_line(&mut line);
        // The read end goes back to the test, which closes it.
        let _ = tx.send((line, reader));
    });
    let (line, reader) = tokio::task::block_in_place(|| rx.recv_timeout(PATIENCE))
        .expect("events --follow printed its first line");
    assert!(line.contains("evt_"), "{line}");
    let events_before = server.count("SELECT count(*) FROM events");
    drop(reader);
    let deadline = Instant::now() + PATIENCE;
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("events --follow outlived its reader on a quiet source");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(code, Some(0), "a closed pipe is a clean end");
    assert_eq!(
        server.count("SELECT count(*) FROM events"),
        events_before,
        "no event came meanwhile"
    );
    server.stop().await;
}

on_both_backends!(
    a_paused_target_holds_its_deliveries_across_a_restart_and_resume_sends_them_in_order,
    replay_selects_by_state_event_type_and_error_and_requeues_only_those,
    a_rate_limited_target_gets_its_attempts_spaced_out,
    events_follow_prints_new_events_as_they_commit_and_ends_cleanly,
);
