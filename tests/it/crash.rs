//! Crash safety of the real binary: send signed events from several connections, SIGKILL
//! the process at a random moment, restart it, and check that every event that got a 2xx
//! is in the inbox exactly once with byte-identical body, that nothing is there that was
//! never sent, and that `PRAGMA integrity_check` is ok.
//!
//! A few iterations run in the suite; `scripts/crash-loop.sh N` runs N of them.
//! `HOOKINBOX_CRASH_SEED` replays a printed seed.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

use crate::support::*;

const CONNECTIONS: usize = 8;

/// The real `hookinbox serve`, with its stderr drained so that it never blocks on a pipe.
struct Proc {
    child: Child,
    public: SocketAddr,
}

impl Proc {
    fn spawn(config: &Path) -> Proc {
        let mut child = Command::new(env!("CARGO_BIN_EXE_hookinbox"))
            .args(["serve", "--config"])
            .arg(config)
            .env("RUST_LOG", "warn,hookinbox::commands::serve=info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the hookinbox binary starts");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let public = loop {
            let line = lines
                .next()
                .unwrap_or_else(|| {
                    panic!("hookinbox exited before listening: {:?}", child.try_wait())
                })
                .unwrap();
            if let Some(addr) = line
                .split_whitespace()
                .find_map(|w| w.strip_prefix("public="))
            {
                break addr.parse().unwrap();
            }
        };
        std::thread::spawn(move || lines.for_each(drop));
        Proc { child, public }
    }

    fn sigkill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// SIGTERM, and the exit status of a graceful shutdown.
    fn sigterm(mut self) -> std::process::ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        self.child.wait().unwrap()
    }
}

/// A small xorshift generator: deterministic from a printed seed, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What the load generator saw: every id it sent, and the bodies that were acknowledged.
#[derive(Default)]
struct Ledger {
    sent: HashSet<String>,
    acked: HashMap<String, Vec<u8>>,
}

/// Sends unique signed events on `CONNECTIONS` keep-alive connections until `stop` or
/// until the server goes away.
async fn load(
    public: SocketAddr,
    scheme: Arc<hookinbox::scheme::Scheme>,
    iteration: usize,
    seed: u64,
    ledger: Arc<Mutex<Ledger>>,
    stop: watch::Receiver<bool>,
) {
    let mut tasks = Vec::new();
    for c in 0..CONNECTIONS {
        let (scheme, ledger, stop) = (scheme.clone(), ledger.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::builder().no_proxy().build().unwrap();
            let mut rng = Rng(seed ^ ((c as u64 + 1) << 32) ^ iteration as u64);
            for n in 0.. {
                if *stop.borrow() {
                    return;
                }
                let id = format!("msg_{iteration}_{c}_{n}");
                let pad = "b".repeat(rng.below(2000) as usize);
                let req = sign_with(
                    &scheme,
                    &id,
                    &event_body(&id, &pad),
                    hookinbox::clock::unix_now(),
                );
                ledger.lock().unwrap().sent.insert(id.clone());
                let mut r = client
                    .post(format!("http://{public}/hooks/sw"))
                    .body(req.body.clone());
                for (k, v) in &req.headers {
                    r = r.header(k, v);
                }
                match r.send().await {
                    Ok(resp) if resp.status().is_success() => {
                        ledger.lock().unwrap().acked.insert(id, req.body);
                    }
                    Ok(resp) => panic!("unexpected answer {} for {id}", resp.status()),
                    // The process was killed under us: this request's fate is unknown.
                    Err(_) => return,
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// Checks the inbox against the ledger: nothing acknowledged lost or altered, nothing
/// unexpected, the file intact.
fn check(db: &Path, ledger: &Ledger) {
    let conn = open_read(db);
    assert_eq!(integrity_check(&conn), "ok");
    let mut stmt = conn.prepare("SELECT event_id, body FROM events").unwrap();
    let stored: HashMap<String, Vec<u8>> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get_ref(1)?.as_bytes()?.to_vec())))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    for (id, body) in &ledger.acked {
        let found = stored
            .get(id)
            .unwrap_or_else(|| panic!("acknowledged event {id} is lost"));
        assert_eq!(found, body, "acknowledged event {id} changed");
    }
    for id in stored.keys() {
        assert!(
            ledger.sent.contains(id),
            "{id} is in the inbox but was never sent"
        );
    }
    let deliveries: i64 = conn
        .query_row("SELECT count(*) FROM deliveries", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        deliveries as usize,
        stored.len(),
        "each event has its delivery row"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_moments_loses_no_acknowledged_event() {
    let iterations: usize = std::env::var("HOOKINBOX_CRASH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let seed: u64 = std::env::var("HOOKINBOX_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("crash test: {iterations} iterations, HOOKINBOX_CRASH_SEED={seed}");
    let mut rng = Rng(seed);

    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("inbox.db");
    let config_path = dir.path().join("hookinbox.toml");
    std::fs::write(&config_path, config_text(SERVER, &db, ONE_SOURCE)).unwrap();
    let scheme = Arc::new(
        hookinbox::config::load(&config_path)
            .unwrap()
            .sources
            .remove(0)
            .scheme,
    );
    let ledger = Arc::new(Mutex::new(Ledger::default()));

    for iteration in 0..iterations {
        let proc = Proc::spawn(&config_path);
        let (stop_tx, stop_rx) = watch::channel(false);
        let generator = tokio::spawn(load(
            proc.public,
            scheme.clone(),
            iteration,
            seed,
            ledger.clone(),
            stop_rx,
        ));
        let delay = Duration::from_millis(200 + rng.below(1300));
        tokio::time::sleep(delay).await;
        proc.sigkill();
        let _ = stop_tx.send(true);
        generator.await.unwrap();

        // Restart on the same inbox: WAL recovery runs, then the server must serve again.
        let proc = Proc::spawn(&config_path);
        {
            let ledger = ledger.lock().unwrap();
            eprintln!(
                "iteration {iteration}: killed after {delay:?}; {} acknowledged of {} sent so far",
                ledger.acked.len(),
                ledger.sent.len()
            );
            check(&db, &ledger);
        }
        let status = proc.sigterm();
        assert!(
            status.success(),
            "graceful shutdown after restart exits 0: {status:?}"
        );
    }
    let ledger = ledger.lock().unwrap();
    assert!(
        !ledger.acked.is_empty(),
        "the load generator got some events acknowledged"
    );
    check(&db, &ledger);
}
