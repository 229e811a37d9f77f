//! The inbox in PostgreSQL (`[store] backend = "postgres"`) against a real server: the
//! receive contract (2xx only after the commit, duplicates acknowledged and stored once,
//! conflicts quarantined), delivery with retries and per-key order, the same views as
//! SQLite, and replicas (several `serve` processes over one database, SIGKILLed at random).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::sink::{Reply, Sink};
use crate::support::*;

/// A fresh database on the test cluster, or None after `skip` said why there is none.
async fn database(test: &str) -> Option<String> {
    let server = postgres(test)?;
    Some(fresh_database(&server).await)
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
    let sources = format!(
        r#"
[[sources]]
name = "sw"
scheme = "standard-webhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
order = {{ key = "/data/n", version = "/v" }}
[[sources.targets]]
name = "app"
url = "{}"
retry = ["100ms", "100ms", "100ms"]
concurrency = 8
"#,
        sink.url()
    );
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
