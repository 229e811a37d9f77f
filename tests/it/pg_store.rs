//! The inbox in PostgreSQL (`[store] backend = "postgres"`) against a real server: the
//! receive contract (2xx only after the commit, duplicates acknowledged and stored once,
//! conflicts quarantined), delivery with retries and per-key order, the same views as
//! SQLite, and replicas (several `serve` processes over one database, SIGKILLed at random).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::sink::{Reply, Sink};
use crate::support::*;

/// `CREATE DATABASE` options for a collation that sorts text otherwise than byte by byte
/// (`'sub_alpha' < 'sub_Zeta'`, `'a2' < 'B1'`): hookinbox's comparisons must not care.
const ICU: &str = "LOCALE_PROVIDER icu ICU_LOCALE 'en' TEMPLATE template0";

/// A fresh database on the test cluster, or None after `skip` said why there is none.
async fn database(test: &str) -> Option<String> {
    database_with(test, "").await
}

/// [`database`] made with `CREATE DATABASE` options (see [`ICU`]).
async fn database_with(test: &str, options: &str) -> Option<String> {
    let server = postgres(test)?;
    Some(fresh_database_with(&server, options).await)
}

/// The stored body of the event with this id, byte for byte.
async fn payload(db: &tokio_postgres::Client, event_id: &str) -> Vec<u8> {
    db.query_one(
        "SELECT body FROM event_payloads WHERE event_id = $1",
        &[&event_id],
    )
    .await
    .unwrap()
    .get(0)
}

/// The `sw` source with ordering by `/data/n` and version `/v`; `targets` are its
/// `[[sources.targets]]` tables.
fn ordered_source(targets: &str) -> String {
    format!(
        r#"
[[sources]]
name = "sw"
scheme = "standard-webhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
order = {{ key = "/data/n", version = "/v" }}
{targets}"#
    )
}

/// `EXPLAIN` of `statement` with `params`, as one text.
async fn plan_of(
    db: &tokio_postgres::Client,
    statement: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> String {
    let lines: Vec<String> = db
        .query(&format!("EXPLAIN {statement}"), params)
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    lines.join("\n")
}

async fn count(db: &tokio_postgres::Client, sql: &str) -> i64 {
    db.query_one(sql, &[]).await.unwrap().get(0)
}

async fn wait_count(db: &tokio_postgres::Client, sql: &str, want: i64, timeout: Duration) {
    let start = Instant::now();
    loop {
        let n = count(db, sql).await;
        if n == want {
            return;
        }
        assert!(start.elapsed() < timeout, "{sql}: {n}, waiting for {want}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn events_are_stored_once_duplicates_acknowledged_and_conflicts_quarantined() {
    let Some(url) = database("pg_store::events_are_stored_once").await else {
        return;
    };
    let server = TestServer::start_store(&pg_store(&url), ONE_SOURCE).await;
    let db = pg_connect(&url).await;

    let body = event_body("msg_pg_1", "first");
    let req = server.sign("sw", "msg_pg_1", &body);
    assert_eq!(server.post("sw", &req).await, (200, "accepted\n".into()));
    // The provider's retry: answered exactly like the first delivery, stored once.
    assert_eq!(server.post("sw", &req).await, (200, "accepted\n".into()));
    // Binary bytes are kept as they came.
    let binary: Vec<u8> = b"{\"id\":\"msg_pg_2\",\"b\":\"\xff\xfe\"}".to_vec();
    let bin_req = server.sign("sw", "msg_pg_2", &binary);
    assert_eq!(server.post("sw", &bin_req).await.0, 200);
    // Same id, other bytes: a conflict, quarantined, answered 409 by default; twice, seen 2.
    let other = event_body("msg_pg_1", "changed");
    let conflicting = server.sign("sw", "msg_pg_1", &other);
    assert_eq!(server.post("sw", &conflicting).await.0, 409);
    assert_eq!(server.post("sw", &conflicting).await.0, 409);

    assert_eq!(count(&db, "SELECT count(*) FROM events").await, 2);
    assert_eq!(count(&db, "SELECT count(*) FROM deliveries").await, 2);
    let row = db
        .query_one(
            "SELECT p.body, e.sha256, e.size FROM event_payloads p JOIN events e USING (id)
              WHERE p.event_id = 'msg_pg_2'",
            &[],
        )
        .await
        .unwrap();
    let (stored, sha, size): (Vec<u8>, String, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(stored, binary);
    assert_eq!(
        sha,
        hex::encode(ring::digest::digest(&ring::digest::SHA256, &binary))
    );
    assert_eq!(size, binary.len() as i64);
    let conflict = db
        .query_one(
            "SELECT c.seen, c.body, r.original_sha256 FROM conflicts c
               JOIN recent_conflicts r USING (id) WHERE c.event_id = 'msg_pg_1'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(conflict.get::<_, i64>(0), 2);
    assert_eq!(conflict.get::<_, Vec<u8>>(1), other);
    // The README's questions, asked of the same views.
    let status: String = db
        .query_one(
            "SELECT status FROM recent_events WHERE event_id = 'msg_pg_1'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(status, "pending");
    let metrics = server.metrics().await;
    // Its target refuses connections: both deliveries are waiting, or being tried.
    assert_eq!(
        metric(&metrics, "hookinbox_deliveries{state=\"pending\"}")
            + metric(&metrics, "hookinbox_deliveries{state=\"in_flight\"}"),
        2.0
    );
    let ready = server
        .client
        .get(format!("{}/readyz", server.admin))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deliveries_are_retried_under_one_key_and_ordered_per_key() {
    let Some(url) = database("pg_store::deliveries_are_retried").await else {
        return;
    };
    // Every event's first attempt fails: the retry carries the same key.
    let sink = Sink::start(|_, n| {
        if n == 0 {
            Reply::Status(503)
        } else {
            Reply::Status(200)
        }
    })
    .await;
    let sources = ordered_source(&format!(
        r#"
[[sources.targets]]
name = "app"
url = "{}"
retry = ["100ms", "100ms", "100ms"]
concurrency = 8
"#,
        sink.url()
    ));
    let server = TestServer::start_store(&pg_store(&url), &sources).await;
    let db = pg_connect(&url).await;
    // Two keys, three versions each, sent newest first for key "b".
    let mut sent = BTreeSet::new();
    for (id, key, version) in [
        ("e1", "a", 1),
        ("e2", "a", 2),
        ("e3", "a", 3),
        ("e6", "b", 3),
        ("e5", "b", 2),
        ("e4", "b", 1),
    ] {
        let body = format!(r#"{{"id":"{id}","v":{version},"data":{{"n":"{key}"}}}}"#);
        let req = server.sign("sw", id, body.as_bytes());
        assert_eq!(server.post("sw", &req).await.0, 200);
        sent.insert(id.to_owned());
    }
    wait_count(
        &db,
        "SELECT count(*) FROM deliveries WHERE state IN ('delivered', 'superseded')",
        6,
        Duration::from_secs(20),
    )
    .await;
    // Key a went out in version order; key b's newest was delivered, its older versions
    // superseded where they had not gone out before it.
    let received = sink.received();
    let delivered: Vec<String> = received
        .iter()
        .filter(|r| r.header("x-hookinbox-attempt") != "1")
        .map(|r| r.header("x-hookinbox-event-id").to_owned())
        .collect();
    let a: Vec<&String> = delivered
        .iter()
        .filter(|id| ["e1", "e2", "e3"].contains(&id.as_str()))
        .collect();
    assert_eq!(a, ["e1", "e2", "e3"]);
    // Every key's retry carried the key of its first attempt.
    let mut keys: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for r in &received {
        keys.entry(r.header("x-hookinbox-event-id").to_owned())
            .or_default()
            .insert(r.key().to_owned());
    }
    assert!(keys.values().all(|k| k.len() == 1), "{keys:?}");
    let inbox_keys: BTreeSet<String> = db
        .query("SELECT idempotency_key FROM deliveries", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let sent_keys: BTreeSet<String> = keys.values().flatten().cloned().collect();
    assert!(sent_keys.is_subset(&inbox_keys));
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM recent_attempts WHERE outcome = 'retry' AND status = 503"
        )
        .await,
        received
            .iter()
            .filter(|r| r.header("x-hookinbox-attempt") == "1")
            .count() as i64
    );
    server.stop().await;
}

/// Every stored event of source `sw` and its deliveries, in one snapshot, as the oracle
/// reads them.
async fn oracle_rows(
    db: &mut tokio_postgres::Client,
) -> (
    Vec<hookinbox::oracle::StoredRow>,
    Vec<hookinbox::oracle::DeliveryRow>,
) {
    let tx = db
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .start()
        .await
        .unwrap();
    let stored = tx
        .query(
            "SELECT e.event_id, e.sha256, p.body
               FROM events e LEFT JOIN payloads p ON p.event = e.id WHERE e.source = 'sw'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| hookinbox::oracle::StoredRow {
            event_id: r.get(0),
            sha256: r.get(1),
            body: r.get(2),
        })
        .collect();
    let deliveries = tx
        .query(
            "SELECT e.event_id, d.idempotency_key, d.state, d.attempts::bigint
               FROM deliveries d JOIN events e ON e.id = d.event WHERE e.source = 'sw'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| hookinbox::oracle::DeliveryRow {
            event_id: r.get(0),
            idempotency_key: r.get(1),
            state: r.get(2),
            attempts: r.get(3),
        })
        .collect();
    tx.commit().await.unwrap();
    (stored, deliveries)
}

/// Three `serve` processes over one database, behind no balancer: the client spreads each
/// event over them (a quarter sent to two replicas at once, as a provider's retry racing
/// its first try), while one replica at a time is SIGKILLed at a random moment and
/// restarted. Then the oracle: every acknowledged event stored once with its bytes, every
/// delivery finished and received under its one key, and never two attempts of one
/// delivery at once.
#[test]
fn three_replicas_share_one_inbox_through_sigkills() {
    use crate::proc::{Proc, deploy_store};
    use hookinbox::oracle::{Ledger, Rng};
    let Some(server_url) = postgres("pg_store::three_replicas_share_one_inbox") else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let url = runtime.block_on(fresh_database(&server_url));
    // Each answer takes a little while, so that two attempts at once would overlap.
    let sink = runtime.block_on(Sink::start(|_, _| Reply::Hang(Duration::from_millis(20))));
    let sources = forwarding(
        &sink.url(),
        "timeout = \"2s\"\nlease = \"7s\"\nconcurrency = 8\n\
         retry = [\"200ms\", \"200ms\", \"500ms\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\"]",
    );
    let replicas: Vec<_> = (0..3)
        .map(|_| deploy_store(&pg_store(&url), &sources))
        .collect();
    let mut procs: Vec<Proc> = replicas.iter().map(|d| Proc::spawn(&d.config)).collect();
    let scheme = replicas[0].scheme.clone();
    let seed = Rng::seed_from_env("HOOKINBOX_REPLICAS_SEED");
    eprintln!("replicas: seed {seed} (HOOKINBOX_REPLICAS_SEED replays it)");
    let mut rng = Rng(seed);
    let mut ledger = Ledger::default();
    let mut bodies = BTreeMap::new();
    let client = client();
    let rounds = count_from_env("HOOKINBOX_REPLICAS_ROUNDS", 4);
    let per_round = 150;
    let mut killed_mid_round = 0;
    for round in 0..rounds {
        let bases: Vec<String> = procs
            .iter()
            .map(|p| format!("http://{}", p.public))
            .collect();
        let victim = rng.below(3) as usize;
        // Killed once a random share of this round's answers came: requests, commits and
        // attempts are in flight.
        let kill_at = 10 + rng.below(per_round as u64 / 2) as usize;
        let plan: Vec<(String, Vec<usize>)> = (0..per_round)
            .map(|n| {
                let id = format!("msg_r{round}_{n:03}");
                let first = rng.below(3) as usize;
                let mut to = vec![first];
                if rng.below(4) == 0 {
                    to.push((first + 1 + rng.below(2) as usize) % 3);
                }
                (id, to)
            })
            .collect();
        let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut sends = tokio::task::JoinSet::new();
        let total = runtime.block_on(async {
            for (id, to) in &plan {
                let body = event_body(id, "replicated");
                bodies.insert(id.clone(), body.clone());
                let req = std::sync::Arc::new(sign_with(
                    &scheme,
                    id,
                    &body,
                    hookinbox::clock::unix_now(),
                ));
                for &r in to {
                    let (client, base, req, id, body, answered) = (
                        client.clone(),
                        bases[r].clone(),
                        req.clone(),
                        id.clone(),
                        body.clone(),
                        answered.clone(),
                    );
                    sends.spawn(async move {
                        let status = send(&client, &base, "sw", &req)
                            .await
                            .ok()
                            .map(|r| r.status().as_u16());
                        answered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        (id, body, status)
                    });
                }
            }
            let waiting = Instant::now();
            while answered.load(std::sync::atomic::Ordering::Relaxed) < kill_at
                && waiting.elapsed() < Duration::from_secs(10)
            {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            sends.len()
        });
        procs.remove(victim).sigkill();
        if answered.load(std::sync::atomic::Ordering::Relaxed) < total {
            killed_mid_round += 1;
        }
        let answers = runtime.block_on(sends.join_all());
        for (id, body, status) in &answers {
            ledger.record(id, body, *status);
        }
        procs.insert(victim, Proc::spawn(&replicas[victim].config));
    }
    assert!(
        killed_mid_round > 0,
        "no kill came while requests were in flight"
    );
    let acked_in_rounds = ledger.acked();
    // The providers retry what was never acknowledged, until it is.
    let bases: Vec<String> = procs
        .iter()
        .map(|p| format!("http://{}", p.public))
        .collect();
    runtime.block_on(async {
        for (id, body) in &bodies {
            if ledger.is_acked(id) {
                continue;
            }
            let req = sign_with(&scheme, id, body, hookinbox::clock::unix_now());
            let base = &bases[rng.below(3) as usize];
            let status = send(&client, base, "sw", &req)
                .await
                .ok()
                .map(|r| r.status().as_u16());
            assert_eq!(status, Some(200), "{id} after the kills");
            ledger.record(id, body, status);
        }
    });
    let mut db = runtime.block_on(pg_connect(&url));
    runtime.block_on(wait_count(
        &db,
        "SELECT count(*) FROM deliveries WHERE state NOT IN ('delivered', 'dead')",
        0,
        Duration::from_secs(60),
    ));
    let (stored, deliveries) = runtime.block_on(oracle_rows(&mut db));
    let receipts = sink.receipts();
    let report =
        hookinbox::oracle::judge(&ledger, "ok".into(), stored, Some((deliveries, &receipts)));
    eprintln!(
        "replicas: {} sent, {acked_in_rounds} acknowledged before the retries and {} after, \
         {} stored, {} receipts, {} received more than once",
        report.sent,
        report.acked,
        report.stored,
        receipts.len(),
        report
            .delivery
            .as_ref()
            .map_or(0, |d| d.received_more_than_once)
    );
    report.assert_ok();
    assert_eq!(report.stored, rounds * per_round);
    assert_eq!(report.delivery.as_ref().unwrap().dead, 0);
    assert_eq!(sink.overlaps(), 0, "two attempts of one delivery at once");
    for p in procs {
        assert!(p.sigterm().success());
    }
}

/// PostgreSQL stopped while 16 senders keep sending: requests are answered 503 with
/// Retry-After and `/readyz` says not ready, never 2xx; when the server is back, ingest
/// resumes without a restart, and every event acknowledged before, during or after is
/// stored once with its bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_stopped_under_load_answers_503_and_ingest_resumes() {
    const CLUSTER: &str = "outage";
    let test = "pg_store::postgres_stopped_under_load";
    let Some(server_url) = own_postgres(CLUSTER, test) else {
        return;
    };
    let url = fresh_database(&server_url).await;
    let server = TestServer::start_store(&pg_store(&url), ONE_SOURCE).await;
    let scheme = first_scheme(&server.config.path);
    let ledger = std::sync::Arc::new(std::sync::Mutex::new(hookinbox::oracle::Ledger::default()));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // (status, had Retry-After) of every answer, in order.
    let answers = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(u16, bool)>::new()));
    let mut senders = tokio::task::JoinSet::new();
    for s in 0..16 {
        let (scheme, ledger, stop, answers) = (
            scheme.clone(),
            ledger.clone(),
            stop.clone(),
            answers.clone(),
        );
        let (client, base) = (server.client.clone(), server.base.clone());
        senders.spawn(async move {
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let id = format!("msg_out_{s:02}_{n:05}");
                n += 1;
                let body = event_body(&id, "through an outage");
                let req = sign_with(&scheme, &id, &body, hookinbox::clock::unix_now());
                let answer = send(&client, &base, "sw", &req).await.ok();
                let status = answer.as_ref().map(|r| r.status().as_u16());
                let retry_after = answer
                    .as_ref()
                    .is_some_and(|r| r.headers().contains_key("retry-after"));
                ledger.lock().unwrap().record(&id, &body, status);
                answers
                    .lock()
                    .unwrap()
                    .push((status.unwrap_or(0), retry_after));
                if status != Some(200) {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        });
    }
    let seen = |status: u16| {
        answers
            .lock()
            .unwrap()
            .iter()
            .filter(|a| a.0 == status)
            .count()
    };
    let wait_for = |what: &str, done: &dyn Fn() -> bool| {
        let start = Instant::now();
        while !done() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "waiting for {what}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let ready = || async {
        server
            .client
            .get(format!("{}/readyz", server.admin))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    };
    tokio::task::block_in_place(|| wait_for("events stored", &|| seen(200) >= 200));
    assert_eq!(ready().await, 200);

    tokio::task::block_in_place(|| stop_own_postgres(CLUSTER));
    let before_outage = answers.lock().unwrap().len();
    tokio::task::block_in_place(|| {
        wait_for("503s during the outage", &|| {
            answers.lock().unwrap()[before_outage..]
                .iter()
                .filter(|a| a.0 == 503)
                .count()
                >= 50
        })
    });
    assert_eq!(ready().await, 503, "/readyz while PostgreSQL is down");
    {
        let during = &answers.lock().unwrap()[before_outage..];
        assert!(
            during.iter().filter(|a| a.0 == 503).all(|a| a.1),
            "a 503 without Retry-After"
        );
    }

    // Back: the next batches connect again.
    assert!(own_postgres(CLUSTER, test).is_some());
    let after_outage = answers.lock().unwrap().len();
    tokio::task::block_in_place(|| {
        wait_for("ingest to resume", &|| {
            answers.lock().unwrap()[after_outage..]
                .iter()
                .filter(|a| a.0 == 200)
                .count()
                >= 200
        })
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    senders.join_all().await;
    let start = Instant::now();
    while ready().await != 200 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "/readyz after the outage"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Idle, PostgreSQL goes away: /readyz finds out by itself (a probe write), and back.
    tokio::task::block_in_place(|| stop_own_postgres(CLUSTER));
    let start = Instant::now();
    while ready().await != 503 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "/readyz while idle and down"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(own_postgres(CLUSTER, test).is_some());
    let start = Instant::now();
    while ready().await != 200 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "/readyz once it is back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let statuses: BTreeSet<u16> = answers.lock().unwrap().iter().map(|a| a.0).collect();
    assert!(
        statuses.is_subset(&BTreeSet::from([200, 503])),
        "answers other than 200 and 503: {statuses:?}"
    );

    let mut db = pg_connect(&url).await;
    let (stored, _) = oracle_rows(&mut db).await;
    let report = hookinbox::oracle::judge(&ledger.lock().unwrap(), "ok".into(), stored, None);
    eprintln!(
        "outage: {} sent, {} acknowledged, {} stored ({} of them answered 503 or unanswered), \
         {} answered 503",
        report.sent,
        report.acked,
        report.stored,
        report.recovered,
        seen(503)
    );
    report.assert_ok();
    server.stop().await;
}

/// A claim takes a target's first due deliveries in `(next_attempt_at, id)` order
/// (`pg::queue::claim_up_to`); the index must give that order, or PostgreSQL reads and
/// sorts every due row of the target for each claim (26 ms at 48,000 pending,
/// BENCHMARKS.md). With sorting and the other scans priced out, the plan of the claim (the
/// statement the code runs, with and without ordering) shows a Sort node unless the index
/// serves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_reads_the_first_due_deliveries_off_the_index() {
    let Some(url) =
        database("pg_store::a_claim_reads_the_first_due_deliveries_off_the_index").await
    else {
        return;
    };
    let server = TestServer::start_store(&pg_store(&url), &ordered_source("")).await;
    let db = pg_connect(&url).await;
    db.batch_execute(
        "SET enable_seqscan = off; SET enable_bitmapscan = off;
         SET enable_sort = off; SET enable_incremental_sort = off",
    )
    .await
    .unwrap();
    let (lease, limit) = (30.0f64, 32i64);
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
        [&"sw", &"app", &"9999", &lease, &limit];
    for ordered in [false, true] {
        let plan = plan_of(
            &db,
            &hookinbox::store::postgres::claim_statement(ordered),
            &params,
        )
        .await;
        assert!(plan.contains("deliveries_due"), "{plan}");
        assert!(!plan.contains("Sort"), "{plan}");
    }
    server.stop().await;
}

/// One order key with 20,000 versions waiting behind 30,000 delivered, all at the table's
/// end and in falling versions, so that the key's first version is the last row: the claim
/// (the statement the code runs) finds that row and only it, each candidate's test a seek
/// in `deliveries_order`. Planned as a sequential scan per candidate, as the `NOT EXISTS`
/// form of the test was, one such claim took a minute.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_finds_a_busy_keys_first_version_with_a_seek_not_a_scan() {
    let Some(url) = database("pg_store::a_claim_finds_a_busy_keys_first_version").await else {
        return;
    };
    // Migrated by a real serve, then stopped: nothing else claims.
    TestServer::start_store(&pg_store(&url), &ordered_source(""))
        .await
        .stop()
        .await;
    let mut db = pg_connect(&url).await;
    db.batch_execute(
        "INSERT INTO events (id, source, event_id, sha256, size, received_at)
         SELECT i, 'sw', 'evt_' || i, '', 0, '2026-01-01T00:00:00.000Z'
           FROM generate_series(1, 50000) i;
         INSERT INTO deliveries (id, event, source, target, idempotency_key, state,
                                 next_attempt_at, order_key, order_version_num,
                                 created_at, updated_at)
         SELECT i, i, 'sw', 'app', 'key_' || i,
                CASE WHEN i <= 30000 THEN 'delivered' ELSE 'pending' END,
                '2026-01-01T00:00:00.000Z', 'hot',
                CASE WHEN i <= 30000 THEN i ELSE 100000 - i END,
                '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z'
           FROM generate_series(1, 50000) i;
         INSERT INTO order_keys (source, target, order_key, last_num, updated_at)
         VALUES ('sw', 'app', 'hot', 30000, '2026-01-01T00:00:00.000Z');
         ANALYZE",
    )
    .await
    .unwrap();
    let statement = hookinbox::store::postgres::claim_statement(true);
    let now = "2026-12-31T00:00:00.000Z";
    let (lease, limit) = (30.0f64, 64i64);
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
        [&"sw", &"app", &now, &lease, &limit];
    let plan = plan_of(&db, &statement, &params).await;
    assert!(!plan.contains("Seq Scan on deliveries"), "{plan}");
    assert!(plan.contains("Index Scan using deliveries_order"), "{plan}");
    // Run, then rolled back: the one row taken is the key's lowest version.
    let tx = db.transaction().await.unwrap();
    let taken: Vec<(i64, bool)> = tx
        .query(&statement, &params)
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(5)))
        .collect();
    assert_eq!(taken, vec![(50000, false)]);
    tx.rollback().await.unwrap();
}

/// A SQLite inbox with delivered, pending and paused deliveries, attempts, a conflict and
/// order keys, copied by `migrate-store` into an empty PostgreSQL database: every table the
/// same read back, and a serve on the copy goes on where the file left off (a duplicate is
/// still a duplicate, pending deliveries go out under their keys, new events get new ids).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn migrate_store_copies_a_sqlite_inbox_that_serve_then_continues_on_postgres() {
    // Keys of mixed case, which this collation sorts otherwise than SQLite: the tables read
    // back must still compare equal.
    let Some(url) = database_with("pg_store::migrate_store_copies", ICU).await else {
        return;
    };
    let accepting = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let gate = accepting.clone();
    let sink = Sink::start(move |_, _| {
        if gate.load(std::sync::atomic::Ordering::Relaxed) {
            Reply::Status(200)
        } else {
            Reply::Status(503)
        }
    })
    .await;
    let sources = ordered_source(&format!(
        r#"
[[sources.targets]]
name = "app"
url = "{0}"
retry = ["100ms", "1h"]
[[sources.targets]]
name = "audit"
url = "{0}"
"#,
        sink.url()
    ));
    let dir = tempfile::tempdir().unwrap();
    let db_path = dir.path().join("inbox.db");
    let config_path = dir.path().join("hookinbox.toml");
    std::fs::write(&config_path, config_text(SERVER, &db_path, &sources)).unwrap();
    let running = hookinbox::commands::serve::start(hookinbox::config::load(&config_path).unwrap())
        .await
        .unwrap();
    let base = format!("http://{}", running.public_addr);
    let scheme = first_scheme(&config_path);
    let http = client();
    let post = |id: &str, body: Vec<u8>| {
        let req = sign_with(&scheme, id, &body, hookinbox::clock::unix_now());
        let (http, base) = (http.clone(), base.clone());
        async move {
            send(&http, &base, "sw", &req)
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    let event = |id: &str, v: i64| {
        let key = ["sub_alpha", "sub_Zeta", "Sub_beta"][v as usize % 3];
        format!(r#"{{"id":"{id}","v":{v},"data":{{"n":"{key}"}}}}"#).into_bytes()
    };
    for n in 0..20 {
        let id = format!("msg_mig_{n:02}");
        assert_eq!(post(&id, event(&id, n)).await, 200);
    }
    let start = Instant::now();
    let read = open_read(&db_path);
    while read
        .query_row(
            "SELECT count(*) FROM deliveries WHERE state = 'delivered'",
            [],
            |r| r.get::<_, i64>(0),
        )
        .unwrap()
        < 40
    {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "first deliveries"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Now the app fails: these wait for a retry an hour away.
    accepting.store(false, std::sync::atomic::Ordering::Relaxed);
    let binary = b"{\"id\":\"msg_mig_bin\",\"v\":100,\"data\":{\"n\":\"\xff\"}}".to_vec();
    assert_eq!(post("msg_mig_bin", binary.clone()).await, 200);
    for n in 20..25 {
        let id = format!("msg_mig_{n:02}");
        assert_eq!(post(&id, event(&id, n)).await, 200);
    }
    assert_eq!(
        post("msg_mig_03", b"{\"changed\":true}".to_vec()).await,
        409
    );
    running.shutdown().await;
    let config = config_path.to_str().unwrap().to_owned();
    let (code, out, err) = tokio::task::spawn_blocking({
        let config = config.clone();
        move || hookinbox(&["pause", "sw/audit", "--config", &config])
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{out}{err}");
    // A secret learnt from a handshake and a gap, as serve would have written them.
    rusqlite::Connection::open(&db_path)
        .unwrap()
        .execute_batch(
            "INSERT INTO learnt_secrets VALUES ('sw', x'00ff7f', '2026-12-01T00:00:00.000Z', '::1');
             INSERT INTO kept VALUES ('acme:account', 'account json', '2026-12-01T00:00:00.000Z');
             INSERT INTO gaps (source, kind, started_at, ended_at, detail)
             VALUES ('sw', 'down', '2026-12-01T00:00:00.000Z', '2026-12-01T00:01:00.000Z',
                     'stopped cleanly');",
        )
        .unwrap();
    let tables = [
        "events",
        "payloads",
        "deliveries",
        "attempts",
        "order_keys",
        "conflicts",
        "paused_targets",
        "learnt_secrets",
        "kept",
        "gaps",
    ];
    let in_file: Vec<i64> = tables
        .iter()
        .map(|t| {
            read.query_row(&format!("SELECT count(*) FROM {t}"), [], |r| r.get(0))
                .unwrap()
        })
        .collect();
    assert!(in_file.iter().all(|n| *n > 0), "{in_file:?}");
    drop(read);

    let to = url.clone();
    let (code, out, err) = tokio::task::spawn_blocking({
        let config = config.clone();
        move || hookinbox(&["migrate-store", "--config", &config, "--to", &to])
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("backend = \"postgres\""), "{out}");
    assert!(out.contains(&format!("url = \"{url}\"")), "{out}");
    let db = pg_connect(&url).await;
    for (t, n) in tables.iter().zip(&in_file) {
        assert_eq!(
            count(&db, &format!("SELECT count(*) FROM {t}")).await,
            *n,
            "{t}"
        );
    }
    let body = payload(&db, "msg_mig_bin").await;
    assert_eq!(body, binary);
    let secret: Vec<u8> = db
        .query_one("SELECT secret FROM learnt_secrets", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(secret, [0, 0xff, 0x7f]);
    // Into a database that is no longer empty: refused, nothing written.
    let to = url.clone();
    let (code, _, err) = tokio::task::spawn_blocking({
        let config = config.clone();
        move || hookinbox(&["migrate-store", "--config", &config, "--to", &to])
    })
    .await
    .unwrap();
    assert_eq!(code, 1);
    assert!(err.contains("not empty"), "{err}");

    // Serve on the copy, as migrate-store said.
    accepting.store(true, std::sync::atomic::Ordering::Relaxed);
    let keys_before: BTreeSet<String> =
        sink.received().iter().map(|r| r.key().to_owned()).collect();
    let server = TestServer::start_store(&pg_store(&url), &sources).await;
    assert_eq!(
        server
            .post(
                "sw",
                &server.sign("sw", "msg_mig_05", &event("msg_mig_05", 5))
            )
            .await
            .0,
        200
    );
    assert_eq!(count(&db, "SELECT count(*) FROM events").await, in_file[0]);
    let fresh = event("msg_mig_new", 200);
    assert_eq!(
        server
            .post("sw", &server.sign("sw", "msg_mig_new", &fresh))
            .await
            .0,
        200
    );
    let new_id: i64 = db
        .query_one("SELECT id FROM events WHERE event_id = 'msg_mig_new'", &[])
        .await
        .unwrap()
        .get(0);
    assert!(
        new_id > in_file[0],
        "the new event's id {new_id} follows the copied ones"
    );
    // The paused target stays paused; the app's pending deliveries wait for their retry
    // (an hour away), so replay them the way an operator would, with SQL.
    db.execute(
        "UPDATE deliveries SET next_attempt_at = '2000-01-01T00:00:00.000Z'
          WHERE target = 'app' AND state = 'pending'",
        &[],
    )
    .await
    .unwrap();
    wait_count(
        &db,
        "SELECT count(*) FROM deliveries WHERE target = 'app' AND state NOT IN ('delivered', 'superseded')",
        0,
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM deliveries WHERE target = 'audit' AND state = 'pending'"
        )
        .await,
        7,
        "the audit target is still paused"
    );
    // The waiting deliveries went out under the keys the file had given them.
    let retried: BTreeSet<String> = sink
        .received()
        .iter()
        .map(|r| r.key().to_owned())
        .filter(|k| !keys_before.contains(k))
        .collect();
    let file_keys: BTreeSet<String> = db
        .query("SELECT idempotency_key FROM deliveries", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(retried.is_subset(&file_keys));
    server.stop().await;
}

/// Retention on PostgreSQL, as on SQLite: past keep_payload a finished event loses its
/// payload and keeps its identity (a redelivery is still a duplicate); past keep_identity
/// the identity goes too.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retention_prunes_payloads_then_identities_on_postgres() {
    let Some(url) = database("pg_store::retention_prunes").await else {
        return;
    };
    let sources = r#"
[[sources]]
name = "sw"
scheme = "standard-webhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
keep_payload = "1d"
keep_identity = "7d"
"#;
    let store = format!("{}\nretention_interval = \"1s\"", pg_store(&url));
    let server = TestServer::start_store(&store, sources).await;
    let db = pg_connect(&url).await;
    let mut requests = BTreeMap::new();
    for id in ["msg_keep", "msg_old", "msg_ancient"] {
        let req = server.sign("sw", id, &event_body(id, "retained"));
        assert_eq!(server.post("sw", &req).await.0, 200);
        requests.insert(id, req);
    }
    let ago = |days: u64| {
        hookinbox::clock::iso(std::time::SystemTime::now() - Duration::from_secs(days * 86_400))
    };
    for (id, days) in [("msg_old", 2), ("msg_ancient", 8)] {
        db.execute(
            "UPDATE events SET received_at = $2 WHERE event_id = $1",
            &[&id, &ago(days)],
        )
        .await
        .unwrap();
    }
    wait_count(
        &db,
        "SELECT count(*) FROM events WHERE event_id = 'msg_ancient'",
        0,
        Duration::from_secs(20),
    )
    .await;
    wait_count(
        &db,
        "SELECT count(*) FROM event_payloads WHERE event_id = 'msg_old'",
        0,
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM events WHERE event_id = 'msg_old' AND pruned_at IS NOT NULL"
        )
        .await,
        1
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM event_payloads WHERE event_id = 'msg_keep'"
        )
        .await,
        1
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM recent_events WHERE event_id = 'msg_old' AND pruned = 1"
        )
        .await,
        1
    );
    // The identity kept: a redelivery is a duplicate, nothing stored again.
    assert_eq!(
        server.post("sw", &requests["msg_old"]).await,
        (200, "accepted\n".into())
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM event_payloads WHERE event_id = 'msg_old'"
        )
        .await,
        0
    );
    server.stop().await;
}

/// The ```sql block of the README that follows `marker`, split into its statements.
fn readme_sql(marker: &str) -> Vec<String> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let (_, after) = readme
        .split_once(marker)
        .unwrap_or_else(|| panic!("README: {marker}"));
    let (_, block) = after.split_once("```sql\n").unwrap();
    let (block, _) = block.split_once("```").unwrap();
    // Comments first: one may hold a semicolon.
    let code: Vec<&str> = block
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .collect();
    code.join("\n")
        .split(';')
        .map(str::to_owned)
        .filter(|s| !s.trim().is_empty())
        .collect()
}

/// psql answers the README's questions with the README's queries; pause, resume and replay
/// steer a PostgreSQL inbox, and the README's SQL retires a removed target.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_readmes_queries_and_steering_sql_work_on_postgres() {
    let Some(url) = database("pg_store::the_readmes_queries").await else {
        return;
    };
    // The app says 410 (gone) at first: the delivery is dead at once.
    let gone = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let g = gone.clone();
    let sink = Sink::start(move |_, _| {
        Reply::Status(if g.load(std::sync::atomic::Ordering::Relaxed) {
            410
        } else {
            200
        })
    })
    .await;
    let sources = format!(
        r#"
[[sources]]
name = "stripe"
scheme = "standard-webhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
[[sources.targets]]
name = "app"
url = "{}"
"#,
        sink.url()
    );
    let server = TestServer::start_store(&pg_store(&url), &sources).await;
    let db = pg_connect(&url).await;
    let body = event_body("evt_readme", "asked about");
    assert_eq!(
        server
            .post("stripe", &server.sign("stripe", "evt_readme", &body))
            .await
            .0,
        200
    );
    wait_count(
        &db,
        "SELECT count(*) FROM dead_deliveries",
        1,
        Duration::from_secs(10),
    )
    .await;

    let questions = readme_sql("## Look inside the inbox");
    assert!(questions.len() >= 8, "{questions:?}");
    for q in &questions {
        let q = q
            .replace("'demo'", "'stripe'")
            .replace("'test_...'", "'evt_readme'");
        db.simple_query(&q)
            .await
            .unwrap_or_else(|e| panic!("the README's query fails on PostgreSQL: {q}\n{e}"));
    }
    let recent: String = db
        .query_one(
            "SELECT status FROM recent_events WHERE event_id = 'evt_readme'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(recent, "dead");

    // Steering is the commands', as on SQLite; retiring a removed target is the README's SQL.
    let config = server.config.path.display().to_string();
    let cli = |args: &[&str]| {
        let (code, out, err) = hookinbox(&[args, &["--config", &config]].concat());
        assert_eq!(code, 0, "{args:?}: {err}");
        out
    };
    assert!(cli(&["pause", "stripe/app"]).starts_with("paused stripe/app"));
    assert_eq!(count(&db, "SELECT count(*) FROM paused_targets").await, 1);
    cli(&["resume", "stripe/app"]);
    assert_eq!(count(&db, "SELECT count(*) FROM paused_targets").await, 0);
    gone.store(false, std::sync::atomic::Ordering::Relaxed);
    assert!(cli(&["replay", "--dead", "--source", "stripe"]).starts_with("re-queued 1"));
    wait_count(
        &db,
        "SELECT count(*) FROM deliveries WHERE state = 'delivered'",
        1,
        Duration::from_secs(10),
    )
    .await;
    let steering = readme_sql("One change is SQL");
    assert_eq!(steering.len(), 1, "{steering:?}");
    // Retiring a removed target touches that target's waiting deliveries only.
    db.batch_execute(&steering[0]).await.unwrap();
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM deliveries WHERE state = 'delivered'"
        )
        .await,
        1
    );
    let received = sink.received();
    assert_eq!(received.len(), 2);
    assert_eq!(
        received[0].key(),
        received[1].key(),
        "the replay kept its key"
    );
    assert_eq!(received[1].header("x-hookinbox-attempt"), "2");
    server.stop().await;
}

/// Two replicas over one database deliver an ordered source's keys one at a time, in
/// version order, whichever replica received each event and whichever claims it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn order_keys_go_one_at_a_time_in_version_order_across_two_replicas() {
    // A collation under which text does not sort byte by byte ('a2' before 'B1'): the
    // versions must still compare as SQLite compares them.
    let Some(url) = database_with("pg_store::order_keys_go_one_at_a_time", ICU).await else {
        return;
    };
    const HOLD: Duration = Duration::from_millis(30);
    let sink = Sink::start(|_, _| Reply::Hang(HOLD)).await;
    let sources = ordered_source(&format!(
        r#"
[[sources.targets]]
name = "app"
url = "{}"
concurrency = 8
"#,
        sink.url()
    ));
    let a = TestServer::start_store(&pg_store(&url), &sources).await;
    let b = TestServer::start_store(&pg_store(&url), &sources).await;
    let db = pg_connect(&url).await;
    let keys = ["k0", "k1", "k2"];
    for v in 0..30 {
        let key = keys[v % 3];
        let id = format!("evt_ord_{v:02}");
        let body = format!(r#"{{"id":"{id}","v":{v},"data":{{"n":"{key}"}}}}"#);
        let to = if v % 2 == 0 { &a } else { &b };
        assert_eq!(
            to.post("sw", &to.sign("sw", &id, body.as_bytes())).await.0,
            200
        );
    }
    // Text versions, both waiting when the target resumes: byte order, "B1" before "a2".
    db.batch_execute(
        "INSERT INTO paused_targets VALUES ('sw', 'app', '2026-01-01T00:00:00.000Z', 'test')",
    )
    .await
    .unwrap();
    for (id, v) in [("evt_ord_a2", "a2"), ("evt_ord_b1", "B1")] {
        let body = format!(r#"{{"id":"{id}","v":"{v}","data":{{"n":"kt"}}}}"#);
        assert_eq!(
            a.post("sw", &a.sign("sw", id, body.as_bytes())).await.0,
            200
        );
    }
    db.batch_execute("DELETE FROM paused_targets")
        .await
        .unwrap();
    // A key far longer than an index entry may hold is kept by its hash, stored and sent.
    let long = format!(
        r#"{{"id":"evt_ord_long","v":1,"data":{{"n":"{}"}}}}"#,
        "k".repeat(5000)
    );
    assert_eq!(
        a.post("sw", &a.sign("sw", "evt_ord_long", long.as_bytes()))
            .await
            .0,
        200
    );
    wait_count(
        &db,
        "SELECT count(*) FROM deliveries WHERE state IN ('delivered', 'superseded')",
        33,
        Duration::from_secs(30),
    )
    .await;
    let text_order: Vec<String> = sink
        .received()
        .iter()
        .map(|r| r.header("x-hookinbox-event-id").to_owned())
        .filter(|id| id.starts_with("evt_ord_") && (id.ends_with("a2") || id.ends_with("b1")))
        .collect();
    assert_eq!(text_order, ["evt_ord_b1", "evt_ord_a2"]);
    let mut per_key: BTreeMap<String, Vec<(Instant, i64)>> = BTreeMap::new();
    for r in sink.received() {
        let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        per_key
            .entry(body["data"]["n"].as_str().unwrap().to_owned())
            .or_default()
            .push((r.at, body["v"].as_i64().unwrap_or(0)));
    }
    per_key.remove("kt");
    for (key, mut sent) in per_key {
        sent.sort();
        for pair in sent.windows(2) {
            assert!(
                pair[1].1 > pair[0].1,
                "{key}: version {} after {}",
                pair[1].1,
                pair[0].1
            );
            assert!(
                pair[1].0 - pair[0].0 >= HOLD,
                "{key}: version {} began {:?} after {}, while it was still being answered",
                pair[1].1,
                pair[1].0 - pair[0].0,
                pair[0].1
            );
        }
    }
    a.stop().await;
    b.stop().await;
}

/// An attempt that timed out (the app may have acted) and the retry that succeeds: both
/// recorded on PostgreSQL, the retry under the same key resolving the ambiguity.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_timed_out_attempt_is_ambiguous_until_its_retry_is_delivered() {
    let Some(url) = database("pg_store::a_timed_out_attempt").await else {
        return;
    };
    let sink = Sink::start(|_, n| {
        if n == 0 {
            Reply::Hang(Duration::from_secs(3))
        } else {
            Reply::Status(200)
        }
    })
    .await;
    let server = TestServer::start_store(
        &pg_store(&url),
        &forwarding(&sink.url(), "timeout = \"1s\"\nretry = [\"100ms\"]"),
    )
    .await;
    let db = pg_connect(&url).await;
    let body = event_body("evt_amb", "slow app");
    assert_eq!(
        server
            .post("sw", &server.sign("sw", "evt_amb", &body))
            .await
            .0,
        200
    );
    wait_count(
        &db,
        "SELECT count(*) FROM deliveries WHERE state = 'delivered'",
        1,
        Duration::from_secs(15),
    )
    .await;
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM attempts WHERE ambiguous = 1 AND outcome = 'retry'"
        )
        .await,
        1
    );
    let metrics = server.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            "hookinbox_ambiguous_resolved_total{source=\"sw\",target=\"app\"}"
        ),
        1.0,
        "{metrics}"
    );
    let received = sink.received();
    assert_eq!(received.len(), 2);
    assert_eq!(received[0].key(), received[1].key());
    server.stop().await;
}

/// Two replicas over one database, 50 identical deliveries at once spread over both: one
/// event stored, every answer 200. Then 40 racing versions of one id: one stored, the other
/// quarantined once with every sighting counted, its senders answered 409, wherever they
/// landed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_duplicates_and_racing_versions_across_two_replicas() {
    let Some(url) = database("pg_store::concurrent_duplicates").await else {
        return;
    };
    let replicas = std::sync::Arc::new([
        TestServer::start_store(&pg_store(&url), ONE_SOURCE).await,
        TestServer::start_store(&pg_store(&url), ONE_SOURCE).await,
    ]);
    let db = pg_connect(&url).await;
    let storm =
        std::sync::Arc::new(replicas[0].sign("sw", "msg_storm", &event_body("msg_storm", "storm")));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..50 {
        let (replicas, req) = (replicas.clone(), storm.clone());
        tasks.spawn(async move { replicas[i % 2].post("sw", &req).await });
    }
    for answer in tasks.join_all().await {
        assert_eq!(answer, (200, "accepted\n".into()));
    }
    assert_eq!(count(&db, "SELECT count(*) FROM events").await, 1);
    assert_eq!(count(&db, "SELECT count(*) FROM deliveries").await, 1);
    assert_eq!(count(&db, "SELECT count(*) FROM conflicts").await, 0);

    let a = std::sync::Arc::new(replicas[0].sign(
        "sw",
        "msg_race",
        &event_body("msg_race", "version-a"),
    ));
    let b = std::sync::Arc::new(replicas[0].sign(
        "sw",
        "msg_race",
        &event_body("msg_race", "version-b"),
    ));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..40 {
        let replicas = replicas.clone();
        let req = if i % 2 == 0 { a.clone() } else { b.clone() };
        // Each version goes to both replicas.
        tasks.spawn(async move { (i % 2, replicas[(i / 2) % 2].post("sw", &req).await.0) });
    }
    let mut statuses = [Vec::new(), Vec::new()];
    for (which, status) in tasks.join_all().await {
        statuses[which].push(status);
    }
    let stored = payload(&db, "msg_race").await;
    assert!(stored == a.body || stored == b.body);
    let winner = if stored == a.body { 0 } else { 1 };
    assert!(statuses[winner].iter().all(|s| *s == 200), "{statuses:?}");
    assert!(
        statuses[1 - winner].iter().all(|s| *s == 409),
        "{statuses:?}"
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM events WHERE event_id = 'msg_race'"
        )
        .await,
        1
    );
    assert_eq!(count(&db, "SELECT count(*) FROM conflicts").await, 1);
    assert_eq!(count(&db, "SELECT seen FROM conflicts").await, 20);
    let replicas = std::sync::Arc::try_unwrap(replicas).ok().unwrap();
    for r in replicas {
        r.stop().await;
    }
}

/// A target's `rate` holds for the replicas together: two of them over one database start
/// no more attempts than the rate allows, not the rate each.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_targets_rate_is_shared_by_the_replicas() {
    let Some(url) = database("pg_store::a_targets_rate_is_shared_by_the_replicas").await else {
        return;
    };
    let sink = Sink::start(|_, _| Reply::Status(200)).await;
    // Slots for all at once on each replica: only the rate can spread them out.
    let sources = forwarding(&sink.url(), "concurrency = 16\nrate = \"2/s\"");
    let a = TestServer::start_store(&pg_store(&url), &sources).await;
    let b = TestServer::start_store(&pg_store(&url), &sources).await;
    let db = pg_connect(&url).await;
    // Held back while they arrive, so that both replicas find all of them due at once.
    db.batch_execute(
        "INSERT INTO paused_targets VALUES ('sw', 'app', '2026-01-01T00:00:00.000Z', 'test')",
    )
    .await
    .unwrap();
    for n in 0..8 {
        let id = format!("evt_rate_{n}");
        let to = if n % 2 == 0 { &a } else { &b };
        let req = to.sign("sw", &id, &event_body(&id, ""));
        assert_eq!(to.post("sw", &req).await.0, 200);
    }
    db.batch_execute("DELETE FROM paused_targets")
        .await
        .unwrap();
    wait_count(
        &db,
        "SELECT count(*) FROM deliveries WHERE state = 'delivered'",
        8,
        Duration::from_secs(30),
    )
    .await;
    let at: Vec<Instant> = sink.received().iter().map(|r| r.at).collect();
    assert_eq!(at.len(), 8, "each attempt once");
    // At 2/s, one at a time, eight starts span 3.5 s; each replica at 2/s of its own would
    // send its four within 1.5 s. A slow machine only spreads them further.
    let spread = *at.iter().max().unwrap() - *at.iter().min().unwrap();
    assert!(
        spread >= Duration::from_secs(3),
        "eight attempts at 2/s over two replicas arrived within {spread:?}"
    );
    assert_eq!(count(&db, "SELECT count(*) FROM attempts").await, 8);
    a.stop().await;
    b.stop().await;
}

/// With replicas, a source was down only while no replica was receiving it: one replica
/// restarting while another receives is no gap; all stopped, then one started, is one, from
/// the last stop. A run of refusals on one replica is a gap of its own, named so.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gap_is_a_window_in_which_no_replica_was_receiving() {
    let Some(url) = database("pg_store::a_gap_is_a_window_in_which_no_replica").await else {
        return;
    };
    let db = pg_connect(&url).await;
    let a = TestServer::start_store(&pg_store(&url), ONE_SOURCE).await;
    let b = TestServer::start_store(&pg_store(&url), ONE_SOURCE).await;
    let a = a.restart(ONE_SOURCE).await;
    assert_eq!(
        count(&db, "SELECT count(*) FROM gaps").await,
        0,
        "b was receiving"
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM receiving").await,
        2,
        "the restarted replica's old row went with its start"
    );
    // Refused, then accepted, on one replica: written by its last heartbeat at the stop.
    let mut forged = a.sign("sw", "evt_forged", &event_body("evt_forged", ""));
    forged.set(
        "webhook-signature",
        "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
    );
    assert_eq!(a.post("sw", &forged).await.0, 401);
    let good = a.sign("sw", "evt_good", &event_body("evt_good", ""));
    assert_eq!(a.post("sw", &good).await.0, 200);
    a.stop().await;
    b.stop().await;
    let last_stop: String = db
        .query_one("SELECT max(stopped_at) FROM receiving", &[])
        .await
        .unwrap()
        .get(0);
    let c = TestServer::start_store(&pg_store(&url), ONE_SOURCE).await;
    let rows = db
        .query(
            "SELECT kind, started_at, detail FROM gaps ORDER BY started_at",
            &[],
        )
        .await
        .unwrap();
    let gaps: Vec<(String, String, String)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(gaps.len(), 2, "{gaps:?}");
    assert_eq!(gaps[0].0, "rejecting");
    assert!(
        gaps[0]
            .2
            .starts_with("refused 1 request (401 ×1) (replica "),
        "{gaps:?}"
    );
    assert_eq!(gaps[1].0, "down");
    assert_eq!(gaps[1].1, last_stop, "from the last replica's stop");
    assert_eq!(gaps[1].2, "no replica was receiving: stopped cleanly");
    assert_eq!(
        count(&db, "SELECT count(*) FROM receiving").await,
        1,
        "the stopped replicas' rows are accounted for"
    );
    // The operator's view: both gaps, and the source receiving now.
    let config = c.config.path.display().to_string();
    let (code, out, err) = hookinbox(&["gaps", "--json", "--config", &config]);
    assert_eq!(code, 0, "{err}");
    let listed: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(listed["gaps"].as_array().unwrap().len(), 2, "{listed}");
    assert_eq!(listed["now"], serde_json::json!([]), "{listed}");
    let page = c.admin_page("/gaps").await;
    assert!(page.contains("no replica was receiving"), "{page}");
    c.stop().await;
}

/// A replica killed a moment before another starts looks live by its last heartbeat: the
/// start records no gap then, and confirms once three heartbeats have passed that the other
/// never wrote again, recording the window from its last heartbeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_that_looked_live_at_a_start_but_was_dead_leaves_a_gap() {
    let Some(url) = database("pg_store::a_replica_that_looked_live").await else {
        return;
    };
    let db = pg_connect(&url).await;
    // The schema first (a server's start), then a replica's row as its last heartbeat,
    // five seconds ago, left it when it was killed.
    let first = TestServer::start_store(&pg_store(&url), ONE_SOURCE).await;
    first.stop().await;
    db.batch_execute("DELETE FROM receiving").await.unwrap();
    let beat = hookinbox::clock::iso(std::time::SystemTime::now() - Duration::from_secs(5));
    db.execute(
        "INSERT INTO receiving (source, replica, started_at, heartbeat_at)
         VALUES ('sw', 'killed/127.0.0.1:1', $1, $1)",
        &[&beat],
    )
    .await
    .unwrap();
    let server = TestServer::start_store(&pg_store(&url), ONE_SOURCE).await;
    assert_eq!(
        count(&db, "SELECT count(*) FROM gaps").await,
        0,
        "it looked live"
    );
    wait_count(
        &db,
        "SELECT count(*) FROM gaps WHERE kind = 'down'",
        1,
        Duration::from_secs(60),
    )
    .await;
    let row = db
        .query_one("SELECT started_at, detail FROM gaps", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), beat, "from its last heartbeat");
    assert!(
        row.get::<_, String>(1)
            .contains("found when the next replica's start was confirmed"),
        "{}",
        row.get::<_, String>(1)
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM receiving WHERE replica = 'killed/127.0.0.1:1'"
        )
        .await,
        0
    );
    server.stop().await;
}

/// Under ordering the claim judges each row it takes: an older version than its key's last
/// delivered one is superseded, not claimed, in the same statement (one snapshot, so no
/// version committed in between can slip through), and the rest of the claim goes ahead.
/// A row another transaction holds is skipped, neither claimed nor superseded, and holds
/// its key's newer versions back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_supersedes_the_outdated_versions_it_takes_and_claims_the_rest() {
    use hookinbox::store::ClaimRequest;
    let Some(url) = database("pg_store::a_claim_supersedes_the_outdated_versions").await else {
        return;
    };
    let store = hookinbox::config::PgStore {
        url: url.clone(),
        password: None,
        tls: hookinbox::config::PgTls::Off,
        pool: 2,
    };
    let inbox = hookinbox::store::postgres::PostgresStore::start(&store, Default::default())
        .await
        .unwrap();
    let db = pg_connect(&url).await;
    let pending = |event_id: &'static str, key: &'static str, version: i64| {
        let db = &db;
        async move {
            db.query_one(
                "WITH e AS (
                     INSERT INTO events (source, event_id, sha256, size, received_at)
                     VALUES ('sw', $1, 'x', 1, '2026-01-01T00:00:00.000Z') RETURNING id)
                 INSERT INTO deliveries (event, source, target, idempotency_key, order_key,
                                         order_version_num, next_attempt_at, created_at,
                                         updated_at)
                 SELECT id, 'sw', 'app', $1, $2, $3::bigint, '2026-01-01T00:00:00.000Z',
                        '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z' FROM e
                 RETURNING id",
                &[&event_id, &key, &version],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
        }
    };
    // Key "k" was delivered at version 3; versions 1 and 2 arrived late, 5 is news. Key "j"
    // has nothing delivered.
    db.batch_execute(
        "INSERT INTO order_keys (source, target, order_key, last_num, updated_at)
         VALUES ('sw', 'app', 'k', 3, '2026-01-01T00:00:00.000Z')",
    )
    .await
    .unwrap();
    let (k1, k2, k5, j1) = (
        pending("k1", "k", 1).await,
        pending("k2", "k", 2).await,
        pending("k5", "k", 5).await,
        pending("j1", "j", 1).await,
    );
    let claim = || {
        inbox.claim(ClaimRequest {
            source: "sw".into(),
            target: "app".into(),
            limit: 10,
            lease: Duration::from_secs(30),
            max_attempts: 5,
            ordered: true,
            rate: None,
        })
    };
    let row = |id: i64| {
        let db = &db;
        async move {
            let r = db
                .query_one(
                    "SELECT state, attempts, last_error, lease_until IS NULL
                       FROM deliveries WHERE id = $1",
                    &[&id],
                )
                .await
                .unwrap();
            (
                r.get::<_, String>(0),
                r.get::<_, i32>(1),
                r.get::<_, Option<String>>(2),
                r.get::<_, bool>(3),
            )
        }
    };
    let ids = |claims: &hookinbox::store::Claims| -> Vec<i64> {
        claims.claimed.iter().map(|c| c.delivery).collect()
    };

    // Another transaction holds version 1: skipped, and it still holds 2 and 5 back.
    let mut holder = pg_connect(&url).await;
    let hold = holder.transaction().await.unwrap();
    hold.execute("SELECT 1 FROM deliveries WHERE id = $1 FOR UPDATE", &[&k1])
        .await
        .unwrap();
    let first = claim().await.unwrap();
    assert_eq!((ids(&first), first.superseded), (vec![j1], 0));
    assert_eq!(row(k1).await.0, "pending");
    hold.rollback().await.unwrap();

    // Then one version of "k" a claim: 1 and 2 are superseded, never attempted; 5 goes.
    let second = claim().await.unwrap();
    assert_eq!((ids(&second), second.superseded), (vec![], 1));
    let (state, attempts, error, no_lease) = row(k1).await;
    assert_eq!(
        (state.as_str(), attempts, no_lease),
        ("superseded", 0, true)
    );
    assert!(error.unwrap().starts_with("superseded: "));
    let third = claim().await.unwrap();
    assert_eq!((ids(&third), third.superseded), (vec![], 1));
    assert_eq!(row(k2).await.0, "superseded");
    let fourth = claim().await.unwrap();
    assert_eq!((ids(&fourth), fourth.superseded), (vec![k5], 0));
    assert_eq!(row(k5).await.0, "in_flight");
}
