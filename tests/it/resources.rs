//! Bounded resources on a small VM: pruning gives disk back to the file system, and an
//! inbox under retention stays within a bound however long it runs.

use std::time::Duration;

use crate::support::*;

/// One source whose payloads may go after a second, and whose identities stay.
const SHORT_PAYLOADS: &str = r#"
[[sources]]
name = "sw"
scheme = "standard-webhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
keep_payload = "1s"
keep_identity = "400d"
"#;

/// A server for [`SHORT_PAYLOADS`] that applies retention every `interval`.
async fn start(interval: &str) -> TestServer {
    // config_text ends with `[store]` and its path: a line before the sources is in it.
    TestServer::start(&format!(
        "retention_interval = {interval:?}\n{SHORT_PAYLOADS}"
    ))
    .await
}

/// Posts `n` events of about 1.5 KB each, 16 at a time; every one must be stored.
async fn post_many(server: &TestServer, prefix: &str, n: usize) {
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let id = format!("{prefix}_{i}");
        let req = server.sign("sw", &id, &event_body(&id, &"p".repeat(1400)));
        let (client, base) = (server.client.clone(), server.base.clone());
        tasks.spawn(async move {
            send(&client, &base, "sw", &req)
                .await
                .unwrap()
                .status()
                .as_u16()
        });
        if tasks.len() >= 16 {
            assert_eq!(tasks.join_next().await.unwrap().unwrap(), 200);
        }
    }
    while let Some(status) = tasks.join_next().await {
        assert_eq!(status.unwrap(), 200);
    }
}

/// The inbox's size as SQLite counts it (pages × page size), whatever is still in the WAL.
fn logical_size(server: &TestServer) -> i64 {
    server.count("SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()")
}

/// Moves the WAL into the file and truncates it, so that the file's length is the truth.
fn checkpoint(server: &TestServer) -> u64 {
    let conn = rusqlite::Connection::open(&server.db).unwrap();
    conn.busy_timeout(PATIENCE).unwrap();
    let busy: i64 = conn
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
        .unwrap();
    assert_eq!(busy, 0, "a checkpoint with no reader in the way");
    std::fs::metadata(&server.db).unwrap().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruning_most_payloads_shrinks_the_inbox_file_by_half_or_more() {
    // Retention in serve stays out of the way: the CLI prunes.
    let server = start("1d").await;
    post_many(&server, "old", 3000).await;
    let before = checkpoint(&server);
    tokio::time::sleep(Duration::from_millis(1100)).await;

    let config = server.config.path.display().to_string();
    let (code, out, err) = hookinbox(&["prune", "--json", "--config", &config]);
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["sources"][0]["payloads"], 3000, "{report}");
    assert!(report["released_pages"].as_i64().unwrap() > 0, "{report}");
    let after = checkpoint(&server);
    eprintln!("inbox file: {before} bytes with 3000 payloads, {after} after pruning them");
    assert!(after * 2 <= before, "{after} is more than half of {before}");
    // The identities stay: a redelivery is still a duplicate.
    assert_eq!(server.count("SELECT count(*) FROM events"), 3000);
    let m = server.metrics().await;
    let free = metric(&m, "hookinbox_inbox_free_pages");
    assert!(
        free <= hookinbox::store::sqlite::schema::FREE_PAGE_RESERVE as f64,
        "{m}"
    );
    assert!(metric(&m, "hookinbox_inbox_pages") > 0.0, "{m}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inbox_under_retention_stays_within_a_bound() {
    let server = start("1s").await;
    let mut sizes = Vec::new();
    for round in 0..8 {
        post_many(&server, &format!("r{round}"), 500).await;
        // Past keep_payload, and at least one retention run and its page release.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        sizes.push(logical_size(&server));
    }
    eprintln!("inbox size after each round of 500 events: {sizes:?}");
    let payloads_left = server.count("SELECT count(*) FROM payloads");
    assert!(
        payloads_left < 500,
        "retention kept up: {payloads_left} payloads left"
    );
    // From the third round on only the identity rows grow (a few hundred bytes an event,
    // against 1.5 KB of payload): the inbox must not grow with what was pruned.
    let (third, last) = (sizes[2], sizes[7]);
    assert!(
        last * 2 < third * 3,
        "the inbox grew from {third} to {last} bytes while every payload was pruned"
    );

    // A burst bigger than the free-page reserve: serve's own retention gives its pages back
    // (retention runs meanwhile, so the peak is never seen whole). Had they only gone to the
    // free list, about 1,200 pages would stay there, far above the reserve.
    post_many(&server, "burst", 3000).await;
    let deadline = std::time::Instant::now() + PATIENCE;
    let free = loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let m = server.metrics().await;
        let free = metric(&m, "hookinbox_inbox_free_pages");
        let pruned = server.count("SELECT count(*) FROM payloads") == 0;
        if pruned && free <= hookinbox::store::sqlite::schema::FREE_PAGE_RESERVE as f64 {
            break free;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "free pages stayed at {free}"
        );
    };
    let released = logical_size(&server);
    eprintln!("after a burst of 3000 and retention: {released} bytes, {free} free pages");
    // Only the burst's identity rows (a few hundred bytes each) stay, and the reserve.
    let reserve = hookinbox::store::sqlite::schema::FREE_PAGE_RESERVE * 4096;
    let bound = last + 3000 * 512 + reserve + 512 * 1024;
    assert!(
        released <= bound,
        "{released} bytes after the burst, above {bound}"
    );
    server.stop().await;
}

/// A memory figure of a process from `/proc/PID/status`, in KiB: `VmHWM:` (its peak
/// resident memory) or `VmSize:` (what it has reserved, touched or not).
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// 200 unauthenticated connections each send all but the last byte of a 1 MiB body. With
/// a 4 MiB budget they cannot take the process's memory with them: the first few fill
/// the budget, the rest wait a second and get 503, and a signed request afterwards is
/// stored. Without the budget this held 200 MiB of bodies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_in_flight_stay_within_the_memory_budget() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let settings = SERVER
        .replace(
            "max_body = \"64KiB\"",
            "max_body = \"1MiB\"\nbody_budget = \"4MiB\"\nmax_connections = 400",
        )
        .replace("body_timeout = \"1s\"", "body_timeout = \"5s\"");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("inbox.db");
    let config = dir.path().join("hookinbox.toml");
    std::fs::write(&config, config_text(&settings, &db, ONE_SOURCE)).unwrap();
    let proc = crate::proc::Proc::spawn(&config);
    let before = status_kib(proc.pid(), "VmHWM:");

    const BODY: usize = 1024 * 1024;
    let mut attackers = tokio::task::JoinSet::new();
    for _ in 0..200 {
        let addr = proc.public;
        attackers.spawn(async move {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            let head = format!(
                "POST /hooks/sw HTTP/1.1\r\nHost: t\r\nContent-Length: {BODY}\r\nwebhook-id: x\r\n\r\n"
            );
            s.write_all(head.as_bytes()).await.unwrap();
            let chunk = vec![b'a'; 64 * 1024];
            let mut sent = 0;
            while sent + chunk.len() < BODY {
                match tokio::time::timeout(Duration::from_secs(8), s.write_all(&chunk)).await {
                    Ok(Ok(())) => sent += chunk.len(),
                    _ => break,
                }
            }
            // Hold the connection; whatever the server answered (503), read it.
            let mut answer = vec![0u8; 256];
            let n = tokio::time::timeout(Duration::from_secs(8), s.read(&mut answer))
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or(0);
            String::from_utf8_lossy(&answer[..n]).into_owned()
        });
    }
    let mut refused = 0;
    while let Some(answer) = attackers.join_next().await {
        let answer = answer.unwrap();
        if answer.starts_with("HTTP/1.1 503") {
            assert!(
                answer.to_ascii_lowercase().contains("retry-after: 5"),
                "{answer}"
            );
            refused += 1;
        }
    }
    let peak = status_kib(proc.pid(), "VmHWM:");
    eprintln!(
        "200 nearly complete 1 MiB bodies, budget 4 MiB: peak RSS {} MiB (at start {} MiB), {refused} answered 503",
        peak / 1024,
        before / 1024
    );
    assert!(
        refused > 150,
        "most attackers found the budget full: {refused}"
    );
    assert!(peak < 96 * 1024, "peak RSS {peak} KiB");

    // The budget is free again: a signed request is stored.
    let scheme = first_scheme(&config);
    let req = sign_with(
        &scheme,
        "after_attack",
        &event_body("after_attack", ""),
        hookinbox::clock::unix_now(),
    );
    let resp = send(&client(), &format!("http://{}", proc.public), "sw", &req)
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
}

/// 300 connections each declare a 1 MiB body and send one byte of it. The server holds
/// what arrived: 300 bytes of bodies in its budget, and no buffer sized by the declared
/// length (before, each request reserved its declared length up front, 300 MiB here, and
/// the allocator kept what the bodies wrote into it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_length_reserves_nothing_before_the_bytes_arrive() {
    use tokio::io::AsyncWriteExt;
    let settings = SERVER
        .replace(
            "max_body = \"64KiB\"",
            "max_body = \"1MiB\"\nmax_connections = 400\nmin_body_rate = \"0/s\"",
        )
        .replace("body_timeout = \"1s\"", "body_timeout = \"60s\"");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hookinbox.toml");
    std::fs::write(
        &config,
        config_text(&settings, &dir.path().join("inbox.db"), ONE_SOURCE),
    )
    .unwrap();
    let proc = crate::proc::Proc::spawn(&config);
    let admin = {
        let logs = proc.logs.lock().unwrap();
        logs.iter()
            .find_map(|l| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix("admin="))
                    .map(str::to_owned)
            })
            .expect("the listening line names the admin address")
    };
    let in_memory = || async {
        let text = client()
            .get(format!("http://{admin}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        metric(&text, "hookinbox_body_bytes_in_memory")
    };
    let before = status_kib(proc.pid(), "VmSize:");
    let mut held = Vec::new();
    for _ in 0..300 {
        let mut s = tokio::net::TcpStream::connect(proc.public).await.unwrap();
        s.write_all(b"POST /hooks/sw HTTP/1.1\r\nHost: t\r\nContent-Length: 1048576\r\n\r\na")
            .await
            .unwrap();
        held.push(s);
    }
    let deadline = std::time::Instant::now() + PATIENCE;
    let mut bytes = in_memory().await;
    while bytes < 300.0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        bytes = in_memory().await;
    }
    let grown = status_kib(proc.pid(), "VmSize:").saturating_sub(before);
    eprintln!(
        "300 bodies declaring 1 MiB, one byte each: {bytes} bytes held, VmSize grew {} MiB",
        grown / 1024
    );
    assert_eq!(bytes, 300.0, "the bytes that arrived, and only those");
    assert!(grown < 100 * 1024, "VmSize grew {grown} KiB");
    drop(held);
}
