//! The failpoint sweep (reference/reliability-perf.md §7, scenario 3): for every durability
//! boundary and every fault there, run the real binary (built with `--features
//! failpoints`) with that fault armed at the k-th pass, drive events through it like a
//! provider would (retrying until 2xx, restarting the process when it dies, as systemd
//! would), let every delivery finish, then ask the oracle: nothing acknowledged lost or
//! altered, nothing unexpected, every delivered event received under its one key and
//! bytes, no delivery left unfinished.
//!
//! `HOOKINBOX_FAILPOINT_SEED` replays the printed choice of k; `HOOKINBOX_FAILPOINT_ROUNDS`
//! (or `scripts/failpoint-sweep.sh N`) runs N rounds of fresh k's.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hookinbox::failpoint::POINTS;
use hookinbox::oracle::{self, Ledger, Rng};

use crate::proc::{Proc, deploy, forwarding_to};
use crate::sink::{Reply, Sink};
use crate::support::*;

const ACTIONS: [&str; 3] = ["return(error)", "return(crash)", "panic"];
const EVENTS: usize = 40;
const SENDERS: usize = 4;

/// The server, restarted (without failpoints) whenever it died, as systemd's
/// `Restart=on-failure` would.
struct Supervisor {
    config: PathBuf,
    scheme: Arc<hookinbox::scheme::Scheme>,
    current: Mutex<Proc>,
    logs: Mutex<Vec<String>>,
    restarts: Mutex<usize>,
}

impl Supervisor {
    fn addr(&self) -> SocketAddr {
        self.current.lock().unwrap().public
    }

    /// Starts a fresh process if the current one has ended.
    fn revive(&self) {
        let mut current = self.current.lock().unwrap();
        if current.exited().is_some() {
            let fresh = tokio::task::block_in_place(|| Proc::spawn(&self.config));
            let dead = std::mem::replace(&mut *current, fresh);
            self.logs.lock().unwrap().extend(dead.last_logs());
            *self.restarts.lock().unwrap() += 1;
        }
    }
}

/// Sends one event until it is acknowledged, re-signing each retry as providers do.
async fn send_until_acked(sup: &Supervisor, ledger: &Mutex<Ledger>, id: &str) {
    let client = client();
    let body = event_body(id, "failpoint sweep");
    for _ in 0..200 {
        let req = sign_with(&sup.scheme, id, &body, hookinbox::clock::unix_now());
        let base = format!("http://{}", sup.addr());
        let status = send(&client, &base, "sw", &req)
            .await
            .ok()
            .map(|r| r.status().as_u16());
        ledger.lock().unwrap().record(id, &body, status);
        match status {
            Some(200) => return,
            // Refused before or after the commit: the provider tries again.
            Some(503) => {}
            Some(other) => panic!("{id}: unexpected answer {other}"),
            None => sup.revive(),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{id} was never acknowledged");
}

async fn sweep_point(point: &str) {
    let seed = Rng::seed_from_env("HOOKINBOX_FAILPOINT_SEED");
    let mut rng = Rng(seed);
    // Each round arms every action at a fresh k; the suite runs one round,
    // scripts/failpoint-sweep.sh as many as it is told.
    let rounds = count_from_env("HOOKINBOX_FAILPOINT_ROUNDS", 1);
    for action in (0..rounds).flat_map(|_| ACTIONS) {
        // Fail at the k-th pass, so that the fault lands among work; claims are few (each
        // takes a batch of deliveries), so that point fails at the first or second.
        let skip = if point == "deliver.after_claim" {
            rng.below(2)
        } else {
            rng.below(8)
        };
        let armed = if skip == 0 {
            format!("{point}=1*{action}")
        } else {
            format!("{point}={skip}*off->1*{action}")
        };
        eprintln!("failpoint sweep: FAILPOINTS={armed} (HOOKINBOX_FAILPOINT_SEED={seed})");
        run_one(point, action, &armed).await;
    }
}

async fn run_one(point: &str, action: &str, armed: &str) {
    let sink = Sink::start(|_, _| Reply::Status(200)).await;
    let deployed = deploy(&forwarding_to(&sink.url()));
    let first = Proc::spawn_env(&deployed.config, &[], &[("FAILPOINTS", armed)]);
    let sup = Arc::new(Supervisor {
        config: deployed.config.clone(),
        scheme: deployed.scheme.clone(),
        current: Mutex::new(first),
        logs: Mutex::default(),
        restarts: Mutex::new(0),
    });
    let ledger = Arc::new(Mutex::new(Ledger::default()));

    let mut senders = tokio::task::JoinSet::new();
    for s in 0..SENDERS {
        let (sup, ledger) = (sup.clone(), ledger.clone());
        senders.spawn(async move {
            for n in (s..EVENTS).step_by(SENDERS) {
                send_until_acked(&sup, &ledger, &format!("fp_{n}")).await;
            }
        });
    }
    while let Some(done) = senders.join_next().await {
        done.unwrap();
    }

    // Every delivery finishes: after a crash the restarted process's sweeper returns the
    // leases of the attempts that died with it.
    let conn = open_read(&deployed.db);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        sup.revive();
        let finished: i64 = conn
            .query_row(
                "SELECT count(*) FROM deliveries WHERE state IN ('delivered', 'dead')",
                [],
                |r| r.get(0),
            )
            .unwrap();
        if finished as usize == EVENTS || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let sup = Arc::into_inner(sup).unwrap();
    let last = sup.current.into_inner().unwrap();
    let mut logs = sup.logs.into_inner().unwrap();
    logs.extend(last.logs.lock().unwrap().drain(..));
    assert!(last.sigterm().success(), "{armed}: clean exit at the end");
    let restarts = sup.restarts.into_inner().unwrap();

    let receipts = sink.receipts();
    let ledger = Arc::into_inner(ledger).unwrap().into_inner().unwrap();
    let report = oracle::check(&deployed.db, "sw", &ledger, Some(&receipts)).unwrap();
    let delivery = report.delivery.as_ref().unwrap();
    eprintln!(
        "  {armed}: {} acked, {} stored, {} restarts, {} delivered, {} receipts, {} received more than once",
        report.acked,
        report.stored,
        restarts,
        delivery.delivered,
        delivery.receipts,
        delivery.received_more_than_once
    );
    report.assert_ok();
    assert_eq!(report.acked, EVENTS, "{armed}: every event acknowledged");
    assert_eq!(delivery.delivered, EVENTS, "{armed}: every event delivered");

    // The fault really happened, and did what it says.
    assert!(
        logs.iter().any(|l| l.contains(point)),
        "{armed}: the failpoint never fired:\n{}",
        logs.join("\n")
    );
    if action != "return(error)" {
        assert!(restarts >= 1, "{armed}: the process should have died");
    }
    if point == "deliver.after_send" {
        assert!(
            delivery.received_more_than_once >= 1,
            "{armed}: the attempt whose answer was lost is delivered again, under its key"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writer_before_commit() {
    sweep_point(POINTS[0]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writer_after_commit() {
    sweep_point(POINTS[1]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliver_after_claim() {
    sweep_point(POINTS[2]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliver_after_send() {
    sweep_point(POINTS[3]).await;
}
