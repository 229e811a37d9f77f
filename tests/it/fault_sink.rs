//! The fault-injecting target (reference/reliability-perf.md §7, scenario 15): many events
//! through the real server to a target that answers each event's first attempts with one
//! kind of fault, chosen from a printed seed, then the oracle over the inbox, the attempts
//! and everything the target received.

use std::sync::Arc;
use std::time::Duration;

use hookinbox::oracle::{self, Ledger, Rng};

use crate::sink::{Received, Reply, Sink};
use crate::support::*;

const EVENTS: usize = 120;

/// What the target does to an event's first attempts before it accepts one.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    Accept,
    ServerError,
    Unavailable,
    TooMany,
    Redirect,
    Reset,
    /// Accepts, but only after the attempt's timeout (3 s: a slow machine must not turn a
    /// prompt 200 into a timeout, or the per-event counts below would be off).
    SlowAccept,
    /// 410: dead at once, never retried.
    Gone,
}

const FAULTS: [Fault; 8] = [
    Fault::Accept,
    Fault::ServerError,
    Fault::Unavailable,
    Fault::TooMany,
    Fault::Redirect,
    Fault::Reset,
    Fault::SlowAccept,
    Fault::Gone,
];

/// The fault of an event, and for how many of its first attempts (1 or 2).
fn plan(seed: u64, n: usize) -> (Fault, usize) {
    let mut rng = Rng(seed ^ (n as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let fault = FAULTS[rng.below(FAULTS.len() as u64) as usize];
    (fault, 1 + rng.below(2) as usize)
}

fn number_of(r: &Received) -> usize {
    r.header("x-hookinbox-event-id")
        .strip_prefix("fault_")
        .and_then(|n| n.parse().ok())
        .unwrap_or(usize::MAX)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_fault_of_the_target_ends_delivered_or_dead_under_one_key() {
    let seed = Rng::seed_from_env("HOOKINBOX_FAULT_SEED");
    eprintln!("fault sink: HOOKINBOX_FAULT_SEED={seed}");
    let sink = Sink::start(move |r, before| {
        if r.path != "/hook" {
            // Only a followed redirect would come here; the test fails on it below.
            return Reply::Status(200);
        }
        let (fault, times) = plan(seed, number_of(r));
        if fault == Fault::Gone {
            return Reply::Status(410);
        }
        if before >= times {
            return Reply::Status(200);
        }
        match fault {
            Fault::Accept | Fault::Gone => Reply::Status(200),
            Fault::ServerError => Reply::Status(500),
            Fault::Unavailable => Reply::With(503, vec![("retry-after", "1".into())]),
            Fault::TooMany => Reply::With(429, vec![("retry-after", "1".into())]),
            Fault::Redirect => Reply::With(302, vec![("location", "/elsewhere".into())]),
            Fault::Reset => Reply::Reset,
            Fault::SlowAccept => Reply::Hang(Duration::from_secs(4)),
        }
    })
    .await;
    let server = Arc::new(
        TestServer::start(&forwarding(
            &sink.url(),
            "timeout = \"3s\"\nretry = [\"100ms\", \"100ms\", \"100ms\", \"100ms\"]\nconcurrency = 16",
        ))
        .await,
    );

    let ledger = Arc::new(std::sync::Mutex::new(Ledger::default()));
    let mut senders = tokio::task::JoinSet::new();
    for s in 0..8 {
        let (server, ledger) = (server.clone(), ledger.clone());
        senders.spawn(async move {
            for n in (s..EVENTS).step_by(8) {
                let id = format!("fault_{n}");
                let body = event_body(&id, "target faults");
                let (status, _) = server.post("sw", &server.sign("sw", &id, &body)).await;
                ledger.lock().unwrap().record(&id, &body, Some(status));
                assert_eq!(status, 200, "{id}");
            }
        });
    }
    while let Some(done) = senders.join_next().await {
        done.unwrap();
    }

    let finished = wait_for_count(
        &server.read(),
        "SELECT count(*) FROM deliveries WHERE state IN ('delivered', 'dead')",
        EVENTS as i64,
    )
    .await;
    assert_eq!(finished as usize, EVENTS, "every delivery finished");

    let received = sink.received();
    let receipts = sink.receipts();
    let report = {
        let ledger = ledger.lock().unwrap();
        oracle::check(&server.db, "sw", &ledger, Some(&receipts)).unwrap()
    };
    report.assert_ok();
    assert!(
        received.iter().all(|r| r.path == "/hook"),
        "a redirect was followed"
    );

    // Per event: the outcome its fault calls for, one attempt recorded per request the
    // target saw, and Retry-After waited out.
    let conn = server.read();
    let mut tally = std::collections::BTreeMap::<String, usize>::new();
    for n in 0..EVENTS {
        let id = format!("fault_{n}");
        let (fault, times) = plan(seed, n);
        *tally.entry(format!("{fault:?}")).or_default() += 1;
        let (state, attempts): (String, i64) = conn
            .query_row(
                "SELECT d.state, d.attempts FROM deliveries d JOIN events e ON e.id = d.event
                  WHERE e.event_id = ?1",
                [&id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        let seen: Vec<&Received> = received.iter().filter(|r| number_of(r) == n).collect();
        let (want_state, want_seen) = match fault {
            Fault::Gone => ("dead", 1),
            Fault::Accept => ("delivered", 1),
            _ => ("delivered", times + 1),
        };
        assert_eq!(state, want_state, "{id} ({fault:?})");
        assert_eq!(
            seen.len(),
            want_seen,
            "{id} ({fault:?} ×{times}): requests seen"
        );
        assert_eq!(
            attempts as usize,
            seen.len(),
            "{id}: one attempt per request"
        );
        if matches!(fault, Fault::Unavailable | Fault::TooMany) {
            let waited = seen[1].at - seen[0].at;
            assert!(
                waited >= Duration::from_millis(950),
                "{id}: Retry-After: 1 honoured, waited {waited:?}"
            );
        }
    }
    eprintln!("fault sink: {tally:?}, {} requests in all", received.len());
    Arc::into_inner(server).unwrap().stop().await;
}
