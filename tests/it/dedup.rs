//! One event per identity: replays are acknowledged without a second row, and the same id
//! with different bytes is quarantined, never stored over the original. On SQLite and on
//! PostgreSQL.

use std::sync::Arc;

use crate::support::*;

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
name = "strict"
scheme = "github"
secrets = ["gh-secret"]
on_conflict = 422
[[sources.targets]]
name = "app"
url = "http://127.0.0.1:9/hooks"
"#;

async fn the_exact_raw_request_replayed_is_200_and_adds_no_row(backend: Backend) {
    let test = "dedup::the_exact_raw_request_replayed_is_200_and_adds_no_row";
    let Some(server) = TestServer::on(backend, test, SOURCES).await else {
        return;
    };
    let req = server.sign("sw", "msg_replay", &event_body("msg_replay", "x"));
    assert_eq!(server.post("sw", &req).await, (200, "accepted\n".into()));
    for _ in 0..3 {
        // Byte for byte the same request, as a provider's retry would be.
        assert_eq!(server.post("sw", &req).await, (200, "accepted\n".into()));
    }
    assert_eq!(server.count("SELECT count(*) FROM events"), 1);
    assert_eq!(server.count("SELECT count(*) FROM deliveries"), 2);
    let m = server.metrics().await;
    assert_eq!(
        metric(
            &m,
            r#"hookinbox_requests_total{source="sw",outcome="duplicate"}"#
        ),
        3.0
    );
    // Both rows, whatever the worker has made of them by now.
    let rows: f64 = ["pending", "in_flight", "delivered", "dead", "superseded"]
        .iter()
        .map(|s| metric(&m, &format!(r#"hookinbox_deliveries{{state="{s}"}}"#)))
        .sum();
    assert_eq!(rows, 2.0, "{m}");
    if backend == Backend::Sqlite {
        assert!(metric(&m, "hookinbox_wal_bytes") > 0.0, "{m}");
    }
    server.stop().await;
}

async fn fifty_concurrent_identical_deliveries_store_one_event(backend: Backend) {
    let test = "dedup::fifty_concurrent_identical_deliveries_store_one_event";
    let Some(server) = TestServer::on(backend, test, SOURCES).await else {
        return;
    };
    let server = Arc::new(server);
    let req = Arc::new(server.sign("sw", "msg_storm", &event_body("msg_storm", "storm")));
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let (server, req) = (server.clone(), req.clone());
        tasks.push(tokio::spawn(async move { server.post("sw", &req).await }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), (200, "accepted\n".into()));
    }
    assert_eq!(server.count("SELECT count(*) FROM events"), 1);
    assert_eq!(
        server.count("SELECT count(*) FROM deliveries"),
        2,
        "one delivery row per target"
    );
    assert_eq!(server.count("SELECT count(*) FROM conflicts"), 0);
    Arc::try_unwrap(server).ok().unwrap().stop().await;
}

async fn same_id_different_bytes_is_a_conflict_and_the_original_is_untouched(backend: Backend) {
    let test = "dedup::same_id_different_bytes_is_a_conflict_and_the_original_is_untouched";
    let Some(server) = TestServer::on(backend, test, SOURCES).await else {
        return;
    };
    let original = event_body("msg_c", "original");
    let changed = event_body("msg_c", "changed");
    assert_eq!(
        server
            .post("sw", &server.sign("sw", "msg_c", &original))
            .await
            .0,
        200
    );
    let (status, body) = server
        .post("sw", &server.sign("sw", "msg_c", &changed))
        .await;
    assert_eq!((status, body.as_str()), (409, "conflict\n"));
    // The same conflicting bytes again: still a conflict, counted, not a second row.
    assert_eq!(
        server
            .post("sw", &server.sign("sw", "msg_c", &changed))
            .await
            .0,
        409
    );

    assert_eq!(
        server.stored_body("sw", "msg_c").as_deref(),
        Some(&original[..])
    );
    let inbox = server.inbox();
    let conflict = "FROM conflicts WHERE event_id = 'msg_c'";
    assert_eq!(
        inbox.strings(&format!(
            "SELECT original_sha256 || ' ' || sha256 {conflict}"
        )),
        [format!(
            "{} {}",
            sha256_hex(&original),
            sha256_hex(&changed)
        )]
    );
    assert_eq!(inbox.count(&format!("SELECT seen {conflict}")), 2);
    assert_eq!(
        inbox.bytes(&format!("SELECT body {conflict}")),
        Some(changed.clone())
    );
    assert_eq!(
        server.count("SELECT count(*) FROM deliveries"),
        2,
        "no delivery for the conflict"
    );

    // A source's on_conflict status is what it answers.
    let first = server.sign("strict", "delivery-1", b"{\"a\":1}");
    let second = server.sign("strict", "delivery-1", b"{\"a\":2}");
    assert_eq!(server.post("strict", &first).await.0, 200);
    assert_eq!(server.post("strict", &second).await.0, 422);
    let m = server.metrics().await;
    assert_eq!(
        metric(
            &m,
            r#"hookinbox_requests_total{source="sw",outcome="conflict"}"#
        ),
        2.0
    );
    server.stop().await;
}

async fn racing_versions_of_one_id_store_exactly_one_and_quarantine_the_other(backend: Backend) {
    let test = "dedup::racing_versions_of_one_id_store_exactly_one_and_quarantine_the_other";
    let Some(server) = TestServer::on(backend, test, SOURCES).await else {
        return;
    };
    let server = Arc::new(server);
    let a = Arc::new(server.sign("sw", "msg_race", &event_body("msg_race", "version-a")));
    let b = Arc::new(server.sign("sw", "msg_race", &event_body("msg_race", "version-b")));
    let mut tasks = Vec::new();
    for i in 0..40 {
        let server = server.clone();
        let req = if i % 2 == 0 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(async move {
            (i % 2, server.post("sw", &req).await.0)
        }));
    }
    let mut statuses = [Vec::new(), Vec::new()];
    for t in tasks {
        let (which, status) = t.await.unwrap();
        statuses[which].push(status);
    }
    let stored = server.stored_body("sw", "msg_race").unwrap();
    let winner = if stored == a.body { 0 } else { 1 };
    assert!(stored == a.body || stored == b.body);
    assert!(statuses[winner].iter().all(|s| *s == 200), "{statuses:?}");
    assert!(
        statuses[1 - winner].iter().all(|s| *s == 409),
        "{statuses:?}"
    );
    assert_eq!(server.count("SELECT count(*) FROM events"), 1);
    assert_eq!(server.count("SELECT count(*) FROM conflicts"), 1);
    assert_eq!(server.count("SELECT seen FROM conflicts"), 20);
    Arc::try_unwrap(server).ok().unwrap().stop().await;
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(ring::digest::digest(&ring::digest::SHA256, bytes))
}

/// A source whose ids are JSON numbers in the signed body, as some providers send them.
const NUMERIC_IDS: &str = r#"
[[sources]]
name = "numeric"
scheme = "hmac"
secrets = ["numeric-secret"]
id_pointer = "/id"
hmac = { header = "X-Signature" }
"#;

async fn numeric_ids_are_exact_integers_and_equal_to_their_text(backend: Backend) {
    let test = "dedup::numeric_ids_are_exact_integers_and_equal_to_their_text";
    let Some(owned) = TestServer::on(backend, test, NUMERIC_IDS).await else {
        return;
    };
    let server = &owned;
    let post = |body: &'static str| async move {
        let req = server.sign("numeric", "-", body.as_bytes());
        server.post("numeric", &req).await.0
    };
    // Two ids that one float cannot tell apart: both are new events.
    assert_eq!(post(r#"{"id":123456789012345678901234,"n":1}"#).await, 200);
    assert_eq!(post(r#"{"id":123456789012345678901235,"n":2}"#).await, 200);
    assert_eq!(server.count("SELECT count(*) FROM conflicts"), 0);
    let ids = server
        .inbox()
        .strings("SELECT event_id FROM events ORDER BY id");
    assert_eq!(
        ids,
        ["123456789012345678901234", "123456789012345678901235"]
    );
    // Not an integer: refused, nothing stored.
    for body in [r#"{"id":1.5}"#, r#"{"id":1e3}"#, r#"{"id":true}"#] {
        assert_eq!(post(body).await, 400, "{body}");
    }
    // The documented rule: an integer id is its decimal text, so 10 and "10" are one
    // identity, and different bytes under it are a conflict.
    assert_eq!(post(r#"{"id":10}"#).await, 200);
    assert_eq!(post(r#"{"id":"10"}"#).await, 409);
    assert_eq!(server.count("SELECT count(*) FROM events"), 3);
    owned.stop().await;
}

on_both_backends!(
    the_exact_raw_request_replayed_is_200_and_adds_no_row,
    same_id_different_bytes_is_a_conflict_and_the_original_is_untouched,
    numeric_ids_are_exact_integers_and_equal_to_their_text,
    fifty_concurrent_identical_deliveries_store_one_event,
    racing_versions_of_one_id_store_exactly_one_and_quarantine_the_other,
);
