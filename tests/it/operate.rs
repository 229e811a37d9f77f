//! Operating hookinbox: replay, retention, backup, metrics, reload, logs. The commands are
//! run as the real binary against an inbox that a real server filled; replay, dead and
//! prune on SQLite and on PostgreSQL.

use std::sync::Arc;
use std::time::Duration;

use crate::sink::{Reply, Sink};
use crate::support::*;

fn config_arg(server: &TestServer) -> String {
    server.config.path.display().to_string()
}

fn delivery_state(server: &TestServer, event_id: &str) -> String {
    server.inbox().strings(&format!(
        "SELECT d.state FROM deliveries d JOIN events e ON e.id = d.event
          WHERE e.event_id = '{event_id}'"
    ))[0]
        .clone()
}

async fn replay_of_a_dead_delivery_reaches_the_target_again_under_the_same_key(backend: Backend) {
    let accept = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = accept.clone();
    let sink = Sink::start(move |_, _| {
        Reply::Status(if flag.load(std::sync::atomic::Ordering::SeqCst) {
            200
        } else {
            410
        })
    })
    .await;
    let test = "operate::replay_of_a_dead_delivery_reaches_the_target_again_under_the_same_key";
    let sources = forwarding(&sink.url(), "timeout = \"2s\"");
    let Some(server) = TestServer::on(backend, test, &sources).await else {
        return;
    };
    let req = server.sign("sw", "msg_dead", &event_body("msg_dead", ""));
    assert_eq!(server.post("sw", &req).await.0, 200);
    let dead = "SELECT count(*) FROM deliveries WHERE state = 'dead'";
    assert_eq!(server.wait_count(dead, 1).await, 1);

    // A dry run changes nothing.
    let config = config_arg(&server);
    let (code, out, err) = hookinbox(&[
        "replay",
        "--dead",
        "--dry-run",
        "--json",
        "--config",
        &config,
    ]);
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["requeued"], 1);
    assert_eq!(delivery_state(&server, "msg_dead"), "dead");

    accept.store(true, std::sync::atomic::Ordering::SeqCst);
    let (code, out, err) = hookinbox(&["replay", "--dead", "--source", "sw", "--config", &config]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("re-queued 1 deliveries"), "{out}");
    let delivered = "SELECT count(*) FROM deliveries WHERE state = 'delivered'";
    assert_eq!(server.wait_count(delivered, 1).await, 1);
    let seen = sink.received();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[0].key(),
        seen[1].key(),
        "the same idempotency key after a replay"
    );
    assert_eq!(
        seen[1].header("x-hookinbox-attempt"),
        "2",
        "attempt numbers count on"
    );
    assert_eq!(seen[0].body, seen[1].body);

    // One event by its provider id; an unknown one exits 4.
    let (code, _, err) = hookinbox(&["replay", "msg_dead", "--config", &config]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = hookinbox(&["replay", "no_such_event", "--config", &config]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("no event \"no_such_event\""), "{err}");
    server.stop().await;
}

async fn dead_prints_the_ids_replay_takes_and_replay_lists_what_it_requeues(backend: Backend) {
    let sink = Sink::start(|_, _| Reply::Status(410)).await;
    // Two targets per event, so that delivery ids and event ids part ways: event 1 has
    // deliveries 1 and 2, event 2 has 3 and 4.
    let sources = forwarding(&sink.url(), "timeout = \"2s\"")
        + "[[sources.targets]]\nname = \"audit\"\ncommand = [\"/bin/true\"]\n";
    let test = "operate::dead_prints_the_ids_replay_takes_and_replay_lists_what_it_requeues";
    let Some(server) = TestServer::on(backend, test, &sources).await else {
        return;
    };
    for id in ["evt_a", "evt_b"] {
        let req = server.sign("sw", id, &event_body(id, ""));
        assert_eq!(server.post("sw", &req).await.0, 200);
    }
    let dead = "SELECT count(*) FROM deliveries WHERE state = 'dead'";
    assert_eq!(server.wait_count(dead, 2).await, 2);
    let config = config_arg(&server);

    let (code, out, err) = hookinbox(&["dead", "--json", "--config", &config]);
    assert_eq!(code, 0, "{err}");
    let listed: serde_json::Value = serde_json::from_str(&out).unwrap();
    let b = listed["dead"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["event_id"] == "evt_b")
        .unwrap()
        .clone();
    let (delivery, event) = (
        b["delivery"].as_i64().unwrap(),
        b["event"].as_i64().unwrap(),
    );
    assert_ne!(delivery, event, "{listed}");
    let (_, table, _) = hookinbox(&["dead", "--config", &config]);
    assert!(table.starts_with("DELIVERY  EVENT  DIED"), "{table}");
    assert!(table.contains("replay --delivery DELIVERY"), "{table}");

    // --delivery takes the DELIVERY column: exactly that delivery, of evt_b.
    let (code, out, err) = hookinbox(&[
        "replay",
        "--delivery",
        &delivery.to_string(),
        "--dry-run",
        "--config",
        &config,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("would re-queue 1 deliveries"), "{out}");
    let row = out
        .lines()
        .find(|l| l.contains("evt_b"))
        .unwrap_or_else(|| panic!("{out}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells,
        [
            &delivery.to_string()[..],
            &event.to_string()[..],
            "sw",
            "evt_b",
            "app",
            "dead"
        ],
        "{out}"
    );
    assert!(!out.contains("evt_a"), "{out}");
    // The EVENT column, with the event's every delivery that can be replayed.
    let (_, out, _) = hookinbox(&[
        "replay",
        &event.to_string(),
        "--dry-run",
        "--json",
        "--config",
        &config,
    ]);
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let targets: Vec<&str> = report["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["target"].as_str().unwrap())
        .collect();
    assert_eq!(targets, ["app", "audit"], "{report}");
    // Nothing changed in the dry runs; now for real.
    assert_eq!(server.count(dead), 2);
    let (code, out, err) = hookinbox(&[
        "replay",
        "--delivery",
        &delivery.to_string(),
        "--config",
        &config,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("re-queued 1 deliveries") && out.contains("evt_b"),
        "{out}"
    );
    let (code, _, err) = hookinbox(&["replay", "--delivery", "999", "--config", &config]);
    assert_eq!(code, 4, "{err}");

    // Unknown names are errors that say what there is.
    let (code, _, err) = hookinbox(&["replay", "--dead", "--source", "strpe", "--config", &config]);
    assert_eq!(code, 1);
    assert!(
        err.contains("no source \"strpe\"") && err.contains("sources are: sw"),
        "{err}"
    );
    let (code, _, err) = hookinbox(&["replay", "--dead", "--target", "ap", "--config", &config]);
    assert_eq!(code, 1);
    assert!(err.contains("targets are: sw/app, sw/audit"), "{err}");
    if backend == Backend::Postgres {
        // A SQLite file's backup says what to use instead.
        let (code, _, err) = hookinbox(&["backup", "copy.db", "--config", &config]);
        assert_eq!(code, 1, "{err}");
        assert!(
            err.contains("works on a SQLite inbox") && err.contains("pg_dump"),
            "{err}"
        );
        server.stop().await;
        return;
    }
    let db = server.db.display().to_string();
    let (code, _, err) = hookinbox(&["replay", "--dead", "--target", "ap", "--db", &db]);
    assert_eq!(code, 1);
    assert!(
        err.contains("in the inbox") && err.contains("sw/app, sw/audit"),
        "{err}"
    );
    // prune says what it needs beyond the inbox.
    let (code, _, err) = hookinbox(&["prune", "--db", &db]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("--config"), "{err}");
    server.stop().await;
}

/// Checks the exposition format line by line: comments, `name{labels} value` samples with
/// numeric values, and the closing `# EOF`.
fn assert_valid_prometheus_text(text: &str) {
    assert!(text.ends_with("# EOF\n"), "ends with # EOF");
    for line in text.lines() {
        if line.starts_with('#') {
            let kind = line.split_whitespace().nth(1).unwrap_or("");
            assert!(matches!(kind, "HELP" | "TYPE" | "UNIT" | "EOF"), "{line}");
            continue;
        }
        let (name_labels, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("no value: {line}"));
        assert!(value.parse::<f64>().is_ok() || value == "+Inf", "{line}");
        let name = name_labels.split('{').next().unwrap();
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "{line}"
        );
        if let Some(labels) = name_labels.strip_prefix(name) {
            assert!(
                labels.is_empty() || (labels.starts_with('{') && labels.ends_with('}')),
                "{line}"
            );
        }
    }
}

#[tokio::test]
async fn metrics_are_valid_and_count_each_kind_of_request() {
    let server = TestServer::start(ONE_SOURCE).await;
    let m = server.metrics().await;
    assert_valid_prometheus_text(&m);
    let count = |m: &str, outcome: &str| {
        metric(
            m,
            &format!(r#"hookinbox_requests_total{{source="sw",outcome="{outcome}"}}"#),
        )
    };

    let first = server.sign("sw", "msg_m", &event_body("msg_m", "one"));
    assert_eq!(server.post("sw", &first).await.0, 200);
    let m1 = server.metrics().await;
    assert_eq!(count(&m1, "accepted"), 1.0);

    assert_eq!(server.post("sw", &first).await.0, 200);
    let m2 = server.metrics().await;
    assert_eq!(count(&m2, "duplicate"), 1.0);
    assert_eq!(count(&m2, "accepted"), 1.0);

    let other = server.sign("sw", "msg_m", &event_body("msg_m", "two"));
    assert_eq!(server.post("sw", &other).await.0, 409);
    let m3 = server.metrics().await;
    assert_eq!(count(&m3, "conflict"), 1.0);

    let mut forged = server.sign("sw", "msg_f", &event_body("msg_f", ""));
    forged.set(
        "webhook-signature",
        "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
    );
    assert_eq!(server.post("sw", &forged).await.0, 401);
    let m4 = server.metrics().await;
    assert_eq!(count(&m4, "rejected"), 1.0);
    assert_eq!(
        metric(
            &m4,
            r#"hookinbox_signature_failures_total{source="sw",reason="no_match"}"#
        ),
        1.0
    );
    assert!(metric(&m4, "hookinbox_receipt_lag_seconds_count") >= 1.0);
    for name in [
        "hookinbox_deliveries",
        "hookinbox_oldest_pending_seconds",
        "hookinbox_wal_bytes",
        "hookinbox_writer_batch_size",
    ] {
        assert!(
            m4.contains(&format!("# TYPE {name} ")),
            "{name} is exported"
        );
    }
    assert_valid_prometheus_text(&m4);
    server.stop().await;
}

async fn retention_drops_payloads_keeps_identities_and_still_recognises_redeliveries(
    backend: Backend,
) {
    let sources = r#"
[[sources]]
name = "sw"
scheme = "standard-webhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
keep_payload = "1s"
keep_identity = "4s"
"#;
    let test = "operate::retention_drops_payloads_keeps_identities";
    let Some(server) = TestServer::on(backend, test, sources).await else {
        return;
    };
    let req = server.sign("sw", "msg_old", &event_body("msg_old", "payload"));
    assert_eq!(server.post("sw", &req).await.0, 200);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let config = config_arg(&server);

    let (code, out, err) = hookinbox(&["prune", "--dry-run", "--json", "--config", &config]);
    assert_eq!(code, 0, "{err}");
    let dry: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(dry["sources"][0]["payloads"], 1);
    assert!(
        server.stored_body("sw", "msg_old").is_some(),
        "a dry run changes nothing"
    );

    let (code, out, err) = hookinbox(&["prune", "--config", &config]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("removed"), "{out}");
    assert_eq!(
        server.stored_body("sw", "msg_old"),
        None,
        "the payload is gone"
    );
    assert_eq!(
        server.count("SELECT count(*) FROM events WHERE event_id = 'msg_old'"),
        1,
        "the identity stays"
    );

    // The provider sends it again: still a duplicate, not a new event.
    let again = server.sign("sw", "msg_old", &event_body("msg_old", "payload"));
    assert_eq!(server.post("sw", &again).await.0, 200);
    assert_eq!(server.count("SELECT count(*) FROM events"), 1);
    let m = server.metrics().await;
    assert_eq!(
        metric(
            &m,
            r#"hookinbox_requests_total{source="sw",outcome="duplicate"}"#
        ),
        1.0
    );

    // Past keep_identity the row goes too.
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let (code, _, err) = hookinbox(&["prune", "--config", &config]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(server.count("SELECT count(*) FROM events"), 0);
    server.stop().await;
}

/// What `prune --dry-run` says it would remove is what `prune` then reports, also for the
/// attempts of identity rows that go with them (both windows passed at once).
async fn a_dry_run_counts_what_prune_then_removes(backend: Backend) {
    let sink = Sink::start(|_, _| Reply::Status(200)).await;
    let sources = format!(
        r#"
[[sources]]
name = "sw"
scheme = "standard-webhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
keep_payload = "1s"
keep_identity = "1s"
[[sources.targets]]
name = "app"
url = "{}"
"#,
        sink.url()
    );
    let test = "operate::a_dry_run_counts_what_prune_then_removes";
    let Some(server) = TestServer::on(backend, test, &sources).await else {
        return;
    };
    for i in 0..5 {
        let id = format!("msg_p{i}");
        let req = server.sign("sw", &id, &event_body(&id, ""));
        assert_eq!(server.post("sw", &req).await.0, 200);
    }
    let delivered = "SELECT count(*) FROM deliveries WHERE state = 'delivered'";
    assert_eq!(server.wait_count(delivered, 5).await, 5);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let config = config_arg(&server);
    let report = |args: &[&str]| {
        let (code, out, err) = hookinbox(args);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["sources"][0].clone()
    };
    let would = report(&["prune", "--dry-run", "--json", "--config", &config]);
    let did = report(&["prune", "--json", "--config", &config]);
    assert_eq!(would["attempts"], 5, "{would}");
    for kind in ["payloads", "events", "attempts", "conflicts"] {
        assert_eq!(
            would[kind], did[kind],
            "{kind}: dry run {would}, prune {did}"
        );
    }
    assert_eq!(server.count("SELECT count(*) FROM attempts"), 0);
    assert_eq!(server.count("SELECT count(*) FROM events"), 0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn backup_under_load_is_intact_and_holds_everything_acknowledged_before_it() {
    let server = Arc::new(TestServer::start(ONE_SOURCE).await);
    let acked = Arc::new(std::sync::Mutex::new(Vec::<(String, Vec<u8>)>::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut load = Vec::new();
    for c in 0..4 {
        let (server, acked, stop) = (server.clone(), acked.clone(), stop.clone());
        load.push(tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let id = format!("msg_b_{c}_{n}");
                let body = event_body(&id, "backup");
                if server.post("sw", &server.sign("sw", &id, &body)).await.0 == 200 {
                    acked.lock().unwrap().push((id, body));
                }
                n += 1;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before: Vec<(String, Vec<u8>)> = acked.lock().unwrap().clone();
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("backup.db");
    let (db, copy_arg) = (server.db.display().to_string(), copy.display().to_string());
    let (code, out, err) =
        tokio::task::spawn_blocking(move || hookinbox(&["backup", &copy_arg, "--db", &db]))
            .await
            .unwrap();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for t in load {
        t.await.unwrap();
    }
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("integrity_check: ok"), "{out}");
    let conn = open_read(&copy);
    assert_eq!(integrity_check(&conn), "ok");
    assert!(!before.is_empty());
    for (id, body) in &before {
        assert_eq!(
            stored_body(&conn, "sw", id).as_deref(),
            Some(&body[..]),
            "{id} is in the backup"
        );
    }
    eprintln!(
        "backup held {} events acknowledged before it began",
        before.len()
    );
    // It never overwrites.
    let (code, _, err) = hookinbox(&[
        "backup",
        copy.to_str().unwrap(),
        "--db",
        server.db.to_str().unwrap(),
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("already exists"), "{err}");
    Arc::try_unwrap(server).ok().unwrap().stop().await;
}

/// The real binary with `args` on a pseudo-terminal (util-linux `script`), as an operator
/// runs it; returns what the terminal showed, stdout and stderr together. `None` when the
/// machine has no `script`.
fn on_a_terminal(args: &[&str]) -> Option<String> {
    let quote = |s: &str| format!("'{}'", s.replace('\'', "'\\''"));
    let command: Vec<String> = std::iter::once(env!("CARGO_BIN_EXE_hookinbox"))
        .chain(args.iter().copied())
        .map(quote)
        .collect();
    let out = std::process::Command::new("script")
        .args(["-qec", &command.join(" "), "/dev/null"])
        .env_remove("HOOKINBOX_CONFIG")
        .stdin(std::process::Stdio::null())
        .output()
        .ok()?;
    assert!(
        out.status.success(),
        "{args:?} on a terminal: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[tokio::test]
async fn prune_and_backup_show_progress_on_a_terminal_and_stay_quiet_when_piped() {
    // No targets, so every event is finished, and payloads are due at once.
    let sources = r#"
[[sources]]
name = "sw"
scheme = "standard-webhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
keep_payload = "0s"
"#;
    let server = TestServer::start(sources).await;
    for n in 0..5 {
        let id = format!("msg_progress_{n}");
        let req = server.sign("sw", &id, &event_body(&id, "progress"));
        assert_eq!(server.post("sw", &req).await.0, 200);
    }
    let config = config_arg(&server);
    let db = server.db.display().to_string();
    let dir = tempfile::tempdir().unwrap();
    let erase_line = "\x1b[K";

    // Piped: stdout is the report alone, and stderr has no progress line.
    let (code, out, err) = hookinbox(&["prune", "--config", &config]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("removed (per source):\nSOURCE"), "{out:?}");
    assert!(out.contains("\nsw ") && out.contains("gave "), "{out:?}");
    assert!(
        !out.contains('\x1b') && !err.contains(erase_line),
        "{out:?} {err:?}"
    );
    assert_eq!(server.count("SELECT count(*) FROM payloads"), 0);
    let (code, out, err) = hookinbox(&["prune", "--json", "--config", &config]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str::<serde_json::Value>(&out).expect("stdout is the JSON alone");
    assert!(!err.contains(erase_line), "{err:?}");

    let copy = dir.path().join("piped.db");
    let (code, out, err) = hookinbox(&["backup", "--json", copy.to_str().unwrap(), "--db", &db]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains(erase_line), "{err:?}");
    let written: serde_json::Value = serde_json::from_str(&out).expect("stdout is the JSON alone");
    assert_eq!(written["path"], copy.display().to_string());
    assert_eq!(written["inbox"], db);
    assert_eq!(written["events"], 5);
    assert_eq!(written["integrity_check"], "ok");
    assert!(written["duration_ms"].is_u64(), "{written}");
    let conn = open_read(&copy);
    let page_size: i64 = conn
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .unwrap();
    let bytes = std::fs::metadata(&copy).unwrap().len();
    assert_eq!(written["bytes"], bytes);
    assert_eq!(written["pages"].as_i64().unwrap() * page_size, bytes as i64);
    assert_eq!(
        conn.query_row("SELECT count(*) FROM events", [], |r| r.get::<_, i64>(0))
            .unwrap(),
        5
    );

    // On a terminal: a progress line on stderr, erased before the report.
    let Some(shown) = on_a_terminal(&["prune", "--config", &config]) else {
        skip(
            "SCRIPT",
            "prune_and_backup_show_progress_on_a_terminal_and_stay_quiet_when_piped",
            "no `script` (util-linux) to run the binary on a pseudo-terminal; the piped half ran",
        );
        return server.stop().await;
    };
    assert!(
        shown.contains("\r\x1b[Kpruning, rows removed: "),
        "{shown:?}"
    );
    assert!(shown.contains("\r\x1b[Kremoved (per source):"), "{shown:?}");
    let copy = dir.path().join("shown.db");
    let shown = on_a_terminal(&["backup", copy.to_str().unwrap(), "--db", &db]).unwrap();
    assert!(shown.contains("\r\x1b[Kcopying pages: "), "{shown:?}");
    assert!(shown.contains("\r\x1b[Kbacked up "), "{shown:?}");
    server.stop().await;
}

#[tokio::test]
async fn check_warns_about_short_retention_and_readable_secret_files() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("stripe.secret");
    std::fs::write(&secret, "whsec_abc\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
    // A public key may be read by anyone: no warning for it.
    use hookinbox::commands::keypair::{KeyScheme, generate};
    let (public, _) = generate(KeyScheme::named("discord").unwrap()).unwrap();
    let public_file = dir.path().join("discord.pub");
    std::fs::write(&public_file, format!("{public}\n")).unwrap();
    std::fs::set_permissions(&public_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let config = dir.path().join("hookinbox.toml");
    std::fs::write(
        &config,
        format!(
            "[store]\npath = \"inbox.db\"\n[admin]\nlisten = \"0.0.0.0:9180\"\n\n\
             [[sources]]\nname = \"stripe\"\nscheme = \"stripe\"\nsecrets = [\"file:{}\"]\nkeep_payload = \"1d\"\nkeep_identity = \"2d\"\n\
             [[sources]]\nname = \"discord\"\nscheme = \"discord\"\nsecrets = [\"file:{}\"]\n",
            secret.display(),
            public_file.display()
        ),
    )
    .unwrap();
    let (code, out, err) = hookinbox(&["check", "--config", config.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("keep_identity 2days") && out.contains("Stripe's 3 days"),
        "{out}"
    );
    assert!(out.contains("readable by every user"), "{out}");
    assert!(
        !out.contains("source \"discord\": secret file"),
        "a public key is not a secret: {out}"
    );
    assert!(out.contains("not a loopback address"), "{out}");
}

#[tokio::test]
async fn the_wal_is_checkpointed_and_truncated_once_the_writer_is_idle() {
    let no_targets = "[[sources]]\nname = \"sw\"\nscheme = \"standard-webhooks\"\nsecrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]\n";
    let server = TestServer::start(no_targets).await;
    for n in 0..20 {
        let id = format!("msg_wal_{n}");
        assert_eq!(
            server
                .post("sw", &server.sign("sw", &id, &event_body(&id, "")))
                .await
                .0,
            200
        );
    }
    let wal = |m: &str| metric(m, "hookinbox_wal_bytes");
    assert!(wal(&server.metrics().await) > 0.0);
    // Idle for 5 s, offered every 10 s: within 15 s the WAL must be empty.
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    loop {
        if wal(&server.metrics().await) == 0.0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the WAL was never truncated while idle"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    server.stop().await;
}

/// A reload whose last step fails (here: retiring a removed target's deliveries while an
/// operator holds the write lock) must leave the running configuration whole, secrets
/// included, not half switched.
#[tokio::test]
async fn a_reload_that_fails_late_switches_nothing() {
    const OLD: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const NEW: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    let mut server = TestServer::start(ONE_SOURCE).await;
    let old_scheme = hookinbox::config::from_str(
        &config_text(SERVER, &server.db, ONE_SOURCE),
        &server.config.path,
        None,
    )
    .unwrap()
    .sources
    .remove(0)
    .scheme;
    let lock = rusqlite::Connection::open(&server.db).unwrap();
    lock.execute_batch("BEGIN IMMEDIATE").unwrap();
    let changed = ONE_SOURCE.replace(OLD, NEW);
    let err = server.reload(&changed).await.unwrap_err();
    assert!(format!("{err:#}").contains("retiring"), "{err:#}");
    lock.execute_batch("ROLLBACK").unwrap();
    drop(lock);

    let id = "after_failed_reload";
    let req = sign_with(
        &old_scheme,
        id,
        &event_body(id, ""),
        hookinbox::clock::unix_now(),
    );
    assert_eq!(
        server.post("sw", &req).await.0,
        200,
        "the old secret still verifies: nothing was switched"
    );
    server.stop().await;
}

on_both_backends!(
    replay_of_a_dead_delivery_reaches_the_target_again_under_the_same_key,
    dead_prints_the_ids_replay_takes_and_replay_lists_what_it_requeues,
    retention_drops_payloads_keeps_identities_and_still_recognises_redeliveries,
    a_dry_run_counts_what_prune_then_removes,
);
