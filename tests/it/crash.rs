//! Crash safety of the real binary: send signed events from several connections, SIGKILL
//! the process at a random moment, restart it, and check that every event that got a 2xx
//! is in the inbox exactly once with byte-identical body, that nothing is there that was
//! never sent, and that `PRAGMA integrity_check` is ok.
//!
//! A few iterations run in the suite; `scripts/crash-loop.sh N` runs N of them.
//! `HOOKINBOX_CRASH_SEED` replays a printed seed.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hookinbox::oracle::{Ledger, Rng};

use crate::load::{Load, check_inbox};
use crate::proc::{Proc, deploy, forwarding_to};
use crate::sink::{Reply, Sink};
use crate::support::*;

const CONNECTIONS: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_moments_loses_no_acknowledged_event() {
    let iterations = count_from_env("HOOKINBOX_CRASH_ITERATIONS", 3);
    let seed = Rng::seed_from_env("HOOKINBOX_CRASH_SEED");
    eprintln!("crash test: {iterations} iterations, HOOKINBOX_CRASH_SEED={seed}");
    let mut rng = Rng(seed);

    let d = deploy(ONE_SOURCE);
    let (db, config_path, scheme) = (d.db.clone(), d.config.clone(), d.scheme.clone());
    let ledger = Arc::new(Mutex::new(Ledger::default()));

    for iteration in 0..iterations {
        let proc = Proc::spawn(&config_path);
        let load = Load::start(
            &format!("http://{}", proc.public),
            scheme.clone(),
            &iteration.to_string(),
            CONNECTIONS,
            seed ^ iteration as u64,
            ledger.clone(),
        );
        let delay = Duration::from_millis(200 + rng.below(1300));
        tokio::time::sleep(delay).await;
        proc.sigkill();
        load.stop().await;

        // Restart on the same inbox: WAL recovery runs, then the server must serve again.
        let proc = Proc::spawn(&config_path);
        {
            let ledger = ledger.lock().unwrap();
            eprintln!(
                "iteration {iteration}: killed after {delay:?}; {} acknowledged of {} sent so far",
                ledger.acked(),
                ledger.sent()
            );
            check_inbox(&db, &ledger);
        }
        let status = proc.sigterm();
        assert!(
            status.success(),
            "graceful shutdown after restart exits 0: {status:?}"
        );
    }
    let ledger = ledger.lock().unwrap();
    assert!(
        ledger.acked() > 0,
        "the load generator got some events acknowledged"
    );
    check_inbox(&db, &ledger);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_with_deliveries_in_flight_then_every_event_is_delivered_under_its_key() {
    // A slow target, so that many attempts are in flight when the process dies.
    let sink = Sink::start(|_, _| Reply::Hang(Duration::from_millis(800))).await;
    let d = deploy(&forwarding_to(&sink.url()));
    let (db, config_path, scheme) = (d.db.clone(), d.config.clone(), d.scheme.clone());

    let proc = Proc::spawn(&config_path);
    let client = client();
    let base = format!("http://{}", proc.public);
    let mut ids = Vec::new();
    for n in 0..40 {
        let id = format!("msg_inflight_{n}");
        let req = sign_with(
            &scheme,
            &id,
            &event_body(&id, ""),
            hookinbox::clock::unix_now(),
        );
        assert_eq!(
            send(&client, &base, "sw", &req).await.unwrap().status(),
            200
        );
        ids.push(id);
    }
    // Wait until attempts are running, then kill the process under them.
    while sink.received().len() < 8 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    proc.sigkill();
    let conn = open_read(&db);
    let in_flight: i64 = conn
        .query_row(
            "SELECT count(*) FROM deliveries WHERE state = 'in_flight'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    eprintln!("killed with {in_flight} deliveries in flight");
    assert!(
        in_flight > 0,
        "the kill should land while attempts are in flight"
    );

    let proc = Proc::spawn(&config_path);
    let delivered = wait_for_count(
        &conn,
        "SELECT count(*) FROM deliveries WHERE state = 'delivered'",
        40,
    )
    .await;
    assert_eq!(
        delivered, 40,
        "every event ends delivered after the restart"
    );
    assert_eq!(
        conn.query_row(
            "SELECT count(*) FROM deliveries WHERE state = 'in_flight'",
            [],
            |r| r.get::<_, i64>(0)
        )
        .unwrap(),
        0,
        "nothing stays in flight past its lease"
    );
    // Every request the sink saw for an event, before and after the crash, carried that
    // event's one key.
    for id in &ids {
        let key: String = conn
            .query_row(
                "SELECT d.idempotency_key FROM deliveries d JOIN events e ON e.id = d.event WHERE e.event_id = ?1",
                [id],
                |r| r.get(0),
            )
            .unwrap();
        let seen: Vec<_> = sink
            .received()
            .into_iter()
            .filter(|r| r.header("x-hookinbox-event-id") == id)
            .collect();
        assert!(!seen.is_empty(), "{id} reached the sink");
        assert!(
            seen.iter().all(|r| r.key() == key),
            "{id}: one key across the crash"
        );
    }
    let redelivered = ids
        .iter()
        .filter(|id| {
            sink.received()
                .iter()
                .filter(|r| r.header("x-hookinbox-event-id") == id.as_str())
                .count()
                > 1
        })
        .count();
    eprintln!("{redelivered} events reached the sink more than once (at-least-once, same key)");
    assert!(proc.sigterm().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_exits_0_in_time_and_loses_nothing() {
    let sink = Sink::start(|_, _| Reply::Status(200)).await;
    let d = deploy(&forwarding_to(&sink.url()));
    let (db, config_path, scheme) = (d.db.clone(), d.config.clone(), d.scheme.clone());
    let ledger = Arc::new(Mutex::new(Ledger::default()));

    let proc = Proc::spawn(&config_path);
    let load = Load::start(
        &format!("http://{}", proc.public),
        scheme,
        "term",
        CONNECTIONS,
        7,
        ledger.clone(),
    );
    tokio::time::sleep(Duration::from_millis(800)).await;
    let asked = std::time::Instant::now();
    let status = tokio::task::spawn_blocking(move || proc.sigterm())
        .await
        .unwrap();
    let took = asked.elapsed();
    load.stop().await;
    eprintln!("SIGTERM under load: exited {status:?} after {took:?}");
    assert!(status.success(), "exit 0 after SIGTERM: {status:?}");
    // The drain allows 10 s for requests and 10 s for attempts, run side by side.
    assert!(took < Duration::from_secs(25), "shutdown took {took:?}");
    let ledger = ledger.lock().unwrap();
    assert!(ledger.acked() > 0);
    check_inbox(&db, &ledger);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_secrets_keeps_requests_in_flight_and_refuses_a_broken_file() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const OLD: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const NEW: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    let d = deploy(ONE_SOURCE);
    let proc = Proc::spawn_with(&d.config, &["--log-format", "json"]);
    let base = format!("http://{}", proc.public);
    let client = client();
    let scheme_with = |secret: &str| {
        let text = std::fs::read_to_string(&d.config)
            .unwrap()
            .replace(OLD, secret)
            .replace(NEW, secret);
        let path = d.config.with_extension("probe.toml");
        std::fs::write(&path, text).unwrap();
        first_scheme(&path)
    };
    let (old, new) = (scheme_with(OLD), scheme_with(NEW));
    let post = |scheme: &hookinbox::scheme::Scheme, id: &str| {
        let req = sign_with(
            scheme,
            id,
            &event_body(id, ""),
            hookinbox::clock::unix_now(),
        );
        let (client, base) = (client.clone(), base.clone());
        async move {
            send(&client, &base, "sw", &req)
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(post(&old, "before").await, 200);
    assert_eq!(post(&new, "before_new").await, 401);

    // A request signed with the old secret is half-sent when the reload happens.
    let slow = sign_with(
        &old,
        "in_flight",
        &event_body("in_flight", "slow"),
        hookinbox::clock::unix_now(),
    );
    let mut stream = tokio::net::TcpStream::connect(proc.public).await.unwrap();
    let mut head = format!(
        "POST /hooks/sw HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n",
        slow.body.len()
    );
    for (k, v) in &slow.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&slow.body[..10]).await.unwrap();

    let text = std::fs::read_to_string(&d.config).unwrap();
    std::fs::write(&d.config, text.replace(OLD, NEW)).unwrap();
    proc.signal("HUP");
    let reloaded = async {
        loop {
            if post(&new, "after").await == 200 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), reloaded)
        .await
        .expect("the new secret works after SIGHUP");
    assert_eq!(post(&old, "after_old").await, 401, "the old secret is gone");

    stream.write_all(&slow.body[10..]).await.unwrap();
    let mut answer = vec![0u8; 64];
    let n = stream.read(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]).into_owned();
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "the request in flight kept its configuration: {answer}"
    );

    // A broken file is refused and the running configuration stays.
    std::fs::write(&d.config, "this is [not toml").unwrap();
    proc.signal("HUP");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(post(&new, "after_broken").await, 200);
    let logs = proc.logs.lock().unwrap().clone();
    assert!(
        logs.iter().any(|l| l.contains("reload refused")),
        "{logs:?}"
    );
    // --log-format json: every line is a JSON object.
    for line in &logs {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(v["level"].is_string() && v["fields"].is_object(), "{line}");
    }
    assert!(proc.sigterm().success());
}

#[test]
fn a_second_serve_on_one_inbox_exits_naming_it_and_a_sigkilled_one_leaves_no_stale_lock() {
    let d = deploy(ONE_SOURCE);
    let first = Proc::spawn(&d.config);
    let (code, _, err) = hookinbox(&["serve", "--config", d.config.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&d.db.display().to_string())
            && err.contains(&format!("PID {}", first.pid()))
            && err.contains("already served"),
        "{err}"
    );
    // Readers are welcome while it serves.
    let (code, _, err) = hookinbox(&["events", "--config", d.config.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    first.sigkill();
    // The kernel released the lock with the process: the next serve starts at once.
    let second = Proc::spawn(&d.config);
    assert!(second.sigterm().success());
}
