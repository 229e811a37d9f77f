//! The oracle itself must be able to fail: a run that broke each rule is reported under
//! that rule, and a run that kept them all is reported clean.

use hookinbox::oracle::{self, Ledger, Receipt};

use crate::sink::{Reply, Sink};
use crate::support::*;

#[tokio::test]
async fn the_oracle_reports_each_kind_of_broken_promise_and_passes_a_clean_run() {
    let sink = Sink::start(|_, _| Reply::Status(200)).await;
    let server = TestServer::start(&forwarding(&sink.url(), "")).await;
    let mut clean = Ledger::default();
    let mut broken = Ledger::default();
    for id in ["kept", "unsent", "changed"] {
        let body = event_body(id, "stored");
        let (status, _) = server.post("sw", &server.sign("sw", id, &body)).await;
        assert_eq!(status, 200);
        clean.record(id, &body, Some(status));
        match id {
            "kept" => broken.record(id, &body, Some(status)),
            // Told 2xx for other bytes than the inbox holds.
            "changed" => broken.record(id, &event_body(id, "other bytes"), Some(200)),
            // Stored, but this ledger never sent it.
            _ => {}
        }
    }
    // Told 2xx, never stored.
    broken.record("ghost", b"{}", Some(200));
    wait_for_count(
        &server.read(),
        "SELECT count(*) FROM deliveries WHERE state = 'delivered'",
        3,
    )
    .await;
    let received = sink.receipts();

    let report = oracle::check(&server.db, "sw", &clean, Some(&received)).unwrap();
    assert!(report.problems().is_empty(), "{:?}", report.problems());

    let mut tampered = received.clone();
    let kept = tampered.iter_mut().find(|r| r.event_id == "kept").unwrap();
    kept.sha256 = "0".repeat(64);
    tampered.push(Receipt::new("stranger", "no-such-key", b"{}"));
    let report = oracle::check(&server.db, "sw", &broken, Some(&tampered)).unwrap();
    assert_eq!(report.lost, ["ghost"]);
    assert_eq!(report.altered, ["changed"]);
    assert_eq!(report.unexpected, ["unsent"]);
    let delivery = report.delivery.as_ref().unwrap();
    assert_eq!(delivery.wrong_body, ["kept"]);
    assert_eq!(delivery.unknown_at_target, ["stranger"]);
    assert_eq!(report.problems().len(), 5, "{:?}", report.problems());
    server.stop().await;
}
