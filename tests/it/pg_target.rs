//! `postgres` targets against a real PostgreSQL (the throwaway cluster of
//! `scripts/pg-test-cluster.sh`, or `HOOKINBOX_TEST_PG_URL`), with the table created from
//! the DDL docs/consuming.md gives operators: every accepted event is a row once, with its
//! exact bytes, through duplicates, a replay, a missing table, and a SIGKILL mid-batch.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::proc::{Proc, deploy};
use crate::support::*;

fn pg_source(url: &str, extra: &str) -> String {
    format!(
        r#"
[[sources]]
name = "sw"
scheme = "standard-webhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
[[sources.targets]]
name = "db"
postgres = {{ url = "{url}" }}
retry = ["200ms", "200ms", "500ms", "1s", "1s", "1s", "1s", "1s", "1s", "1s"]
{extra}
"#
    )
}

async fn rows(db: &tokio_postgres::Client) -> Vec<(String, String, Vec<u8>, String)> {
    db.query(
        "SELECT idempotency_key, event_id, body, origin FROM webhook_inbox ORDER BY event_id",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
    .collect()
}

async fn wait_rows(db: &tokio_postgres::Client, want: usize, timeout: Duration) {
    let start = Instant::now();
    loop {
        let n: i64 = db
            .query_one("SELECT count(*) FROM webhook_inbox", &[])
            .await
            .unwrap()
            .get(0);
        if n as usize == want {
            return;
        }
        assert!(
            start.elapsed() < timeout,
            "{n} rows in webhook_inbox, waiting for {want}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_accepted_event_is_one_row_with_its_exact_bytes_through_duplicates_and_replays() {
    let Some(server_url) = postgres("pg_target::each_accepted_event_is_one_row") else {
        return;
    };
    let url = fresh_database(&server_url).await;
    let db = pg_connect(&url).await;
    db.batch_execute(&consuming_ddl()).await.unwrap();
    let server = TestServer::start(&pg_source(&url, "")).await;

    let mut sent = BTreeSet::new();
    for n in 0..30 {
        let id = format!("msg_pg_{n:02}");
        let body = event_body(&id, "to the app's table");
        let req = server.sign("sw", &id, &body);
        assert_eq!(server.post("sw", &req).await.0, 200);
        if n % 3 == 0 {
            // The provider's retry: acknowledged, and never a second row.
            assert_eq!(server.post("sw", &req).await.0, 200);
        }
        sent.insert((id, body));
    }
    wait_rows(&db, 30, Duration::from_secs(20)).await;
    let stored = rows(&db).await;
    let got: BTreeSet<(String, Vec<u8>)> = stored
        .iter()
        .map(|(_, id, body, _)| (id.clone(), body.clone()))
        .collect();
    assert_eq!(got, sent);
    assert!(
        stored
            .iter()
            .all(|(key, _, _, origin)| key.starts_with("hk_") && origin == "webhook")
    );
    // The idempotency key is the inbox's, for the same event and target.
    let keys: BTreeSet<String> = stored.iter().map(|r| r.0.clone()).collect();
    let inbox_keys: BTreeSet<String> = {
        let conn = server.read();
        let mut stmt = conn
            .prepare("SELECT idempotency_key FROM deliveries WHERE target = 'db'")
            .unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert_eq!(keys, inbox_keys);
    assert_eq!(
        server.count("SELECT count(*) FROM deliveries WHERE state = 'delivered'"),
        30
    );

    // A replay sends every event again: each insert finds its row, and is delivered.
    let config = server.config.path.to_str().unwrap().to_owned();
    let (code, out, err) = tokio::task::spawn_blocking(move || {
        hookinbox(&["replay", "--state", "delivered", "--config", &config])
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{out}{err}");
    let start = Instant::now();
    while server.count("SELECT count(*) FROM attempts") < 60 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the replay's attempts"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(rows(&db).await.len(), 30);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_missing_table_is_retried_with_postgres_own_words_until_it_exists() {
    let Some(server_url) = postgres("pg_target::a_missing_table_is_retried") else {
        return;
    };
    let url = fresh_database(&server_url).await;
    let db = pg_connect(&url).await;
    let server = TestServer::start(&pg_source(&url, "")).await;
    let body = event_body("msg_pg_early", "");
    assert_eq!(
        server
            .post("sw", &server.sign("sw", "msg_pg_early", &body))
            .await
            .0,
        200
    );
    let start = Instant::now();
    let error: String = loop {
        let e: Option<String> = server
            .read()
            .query_row("SELECT error FROM attempts ORDER BY id LIMIT 1", [], |r| {
                r.get(0)
            })
            .ok()
            .flatten();
        if let Some(e) = e {
            break e;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no failed attempt"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        error.contains("42P01") && error.contains("docs/consuming.md"),
        "{error}"
    );
    db.batch_execute(&consuming_ddl()).await.unwrap();
    wait_rows(&db, 1, Duration::from_secs(20)).await;
    assert_eq!(rows(&db).await[0].2, body);
    server.stop().await;
}

#[test]
fn a_sigkill_mid_batch_leaves_every_accepted_event_in_the_table_once() {
    let Some(server_url) = postgres("pg_target::a_sigkill_mid_batch") else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let url = runtime.block_on(fresh_database(&server_url));
    let db = runtime.block_on(pg_connect(&url));
    runtime
        .block_on(db.batch_execute(&consuming_ddl()))
        .unwrap();
    let deployed = deploy(&pg_source(
        &url,
        "concurrency = 8\ntimeout = \"2s\"\nlease = \"7s\"",
    ));

    let mut accepted = BTreeSet::new();
    let mut interrupted = 0;
    for round in 0..3 {
        let proc = Proc::spawn(&deployed.config);
        let base = format!("http://{}", proc.public);
        let answers = runtime.block_on(async {
            let client = client();
            let mut sends = tokio::task::JoinSet::new();
            for n in 0..200 {
                let id = format!("msg_kill_{round}_{n:03}");
                let body = event_body(&id, "");
                let req = sign_with(&deployed.scheme, &id, &body, hookinbox::clock::unix_now());
                let (client, base) = (client.clone(), base.clone());
                sends.spawn(async move {
                    let status = send(&client, &base, "sw", &req)
                        .await
                        .map_or(0, |r| r.status().as_u16());
                    (id, status)
                });
            }
            // Killed once this round's rows have begun to arrive: requests and inserts are
            // both in flight.
            let prefix = format!("msg_kill_{round}_%");
            let begun = Instant::now();
            loop {
                let n: i64 = db
                    .query_one(
                        "SELECT count(*) FROM webhook_inbox WHERE event_id LIKE $1",
                        &[&prefix],
                    )
                    .await
                    .unwrap()
                    .get(0);
                if n > 0 || begun.elapsed() > Duration::from_secs(10) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            proc.sigkill();
            let rows_at_kill: i64 = db
                .query_one("SELECT count(*) FROM webhook_inbox", &[])
                .await
                .unwrap()
                .get(0);
            (sends.join_all().await, rows_at_kill)
        });
        let (answers, rows_at_kill) = answers;
        accepted.extend(
            answers
                .into_iter()
                .filter(|(_, status)| *status == 200)
                .map(|(id, _)| id),
        );
        let stored: i64 = open_read(&deployed.db)
            .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
            .unwrap();
        if rows_at_kill < stored {
            interrupted += 1;
        }
    }
    assert!(
        interrupted > 0,
        "no kill came while stored events were still being inserted"
    );
    assert!(!accepted.is_empty());
    // Restarted, serve delivers what the killed ones left undelivered.
    let proc = Proc::spawn(&deployed.config);
    let inbox = open_read(&deployed.db);
    let in_inbox: BTreeSet<String> = {
        let mut stmt = inbox.prepare("SELECT event_id FROM events").unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let dead: i64 = inbox
        .query_row(
            "SELECT count(*) FROM deliveries WHERE state = 'dead'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(dead, 0, "deliveries gave up");
    runtime.block_on(wait_rows(&db, in_inbox.len(), Duration::from_secs(60)));
    let in_table: Vec<String> = runtime
        .block_on(rows(&db))
        .into_iter()
        .map(|r| r.1)
        .collect();
    let distinct: BTreeSet<String> = in_table.iter().cloned().collect();
    assert_eq!(distinct.len(), in_table.len(), "a row twice");
    assert!(
        accepted.is_subset(&distinct),
        "acknowledged but not in the app's table: {:?}",
        accepted.difference(&distinct).collect::<Vec<_>>()
    );
    assert_eq!(
        distinct, in_inbox,
        "the table holds exactly the stored events"
    );
    eprintln!(
        "sigkill mid-batch: {} acknowledged, {} stored, {} rows, each once; {interrupted} of 3 \
         kills with inserts still to make",
        accepted.len(),
        in_inbox.len(),
        in_table.len()
    );
    drop(proc);
}
