//! The inbox is an ordinary SQLite file: the system's `sqlite3` (Debian 12 ships 3.40) opens
//! it while the server runs and answers an operator's questions through the views.

use std::process::Command;

use crate::support::*;

fn sqlite3(db: &std::path::Path, sql: &str) -> Option<String> {
    let out = match Command::new("sqlite3")
        .arg("-readonly")
        .arg(db)
        .arg(sql)
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            skip(
                "SQLITE3",
                "inbox_sqlite",
                &format!("no sqlite3 command ({e}); .ci/run installs it"),
            );
            return None;
        }
    };
    assert!(
        out.status.success(),
        "sqlite3 failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8(out.stdout).unwrap())
}

#[tokio::test]
async fn the_system_sqlite3_reads_the_live_inbox_through_its_views() {
    let server = TestServer::start(ONE_SOURCE).await;
    let body = event_body("msg_cli", "readable");
    assert_eq!(
        server
            .post("sw", &server.sign("sw", "msg_cli", &body))
            .await
            .0,
        200
    );
    let changed = event_body("msg_cli", "changed");
    assert_eq!(
        server
            .post("sw", &server.sign("sw", "msg_cli", &changed))
            .await
            .0,
        409
    );

    let Some(version) = sqlite3(&server.db, "SELECT sqlite_version()") else {
        return;
    };
    eprintln!("system sqlite3 {}", version.trim());
    let events = sqlite3(
        &server.db,
        "SELECT source, event_id, status, deliveries FROM recent_events",
    )
    .unwrap();
    // The worker is already trying the (unreachable) target: pending or in flight.
    assert!(
        events.trim().starts_with("sw|msg_cli|pending|app="),
        "{events}"
    );
    let pending = sqlite3(
        &server.db,
        "SELECT event_id, target, state, attempts FROM pending_deliveries",
    )
    .unwrap();
    assert!(pending.trim().starts_with("msg_cli|app|"), "{pending}");
    let conflicts = sqlite3(&server.db, "SELECT event_id, seen FROM recent_conflicts").unwrap();
    assert_eq!(conflicts.trim(), "msg_cli|1");
    // Bodies are readable text, and times are UTC ISO-8601.
    let row = sqlite3(&server.db, "SELECT body, received_at FROM event_payloads").unwrap();
    let (stored, received) = row.trim().rsplit_once('|').unwrap();
    assert_eq!(stored.as_bytes(), &body[..]);
    assert!(
        received.ends_with('Z') && received.len() == 24 && received.as_bytes()[10] == b'T',
        "{received}"
    );
    assert_eq!(
        sqlite3(&server.db, "PRAGMA journal_mode").unwrap().trim(),
        "wal"
    );
    // The README's queries on recovery: how each source is receiving, and what came how.
    let receiving = sqlite3(
        &server.db,
        "SELECT source, stopped_at IS NULL FROM receiving",
    )
    .unwrap();
    assert_eq!(receiving.trim(), "sw|1");
    let gaps = sqlite3(
        &server.db,
        "SELECT source, kind, started_at, ended_at, detail, recovery FROM gaps \
         ORDER BY started_at DESC LIMIT 10",
    )
    .unwrap();
    assert_eq!(gaps.trim(), "", "a fresh inbox has no gaps");
    let origins = sqlite3(&server.db, "SELECT event_id, origin FROM recent_events").unwrap();
    assert_eq!(origins.trim(), "msg_cli|webhook");
    server.stop().await;
}
