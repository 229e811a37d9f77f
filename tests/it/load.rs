//! Load for the crash and fault scenarios: unique signed events from several keep-alive
//! connections until told to stop, each outcome recorded in the oracle's ledger and in a
//! timed list of answers.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use hookinbox::oracle::{self, Ledger, Rng};
use hookinbox::scheme::Scheme;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::support::*;

/// When each answer came, and its status (`None`: no answer, the server went away).
pub type Answers = Vec<(Instant, Option<u16>)>;

/// The oracle over the inbox (no receipts), and the promise's other half: an event is
/// stored with its delivery row (the `sw` source has one target) or not at all.
pub fn check_inbox(db: &Path, ledger: &Ledger) {
    let report = oracle::check(db, "sw", ledger, None).unwrap();
    report.assert_ok();
    let deliveries: i64 = open_read(db)
        .query_row("SELECT count(*) FROM deliveries", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        deliveries as usize, report.stored,
        "each event has its delivery row"
    );
}

pub struct Load {
    stop: watch::Sender<bool>,
    senders: JoinSet<()>,
    answers: Arc<Mutex<Answers>>,
}

impl Load {
    /// Starts `connections` senders posting to `{base}/hooks/sw`, with ids
    /// `msg_{tag}_{connection}_{n}` and bodies padded by 0–2000 bytes drawn from `seed`.
    /// A sender stops at the first request without an answer: the server died under it.
    pub fn start(
        base: &str,
        scheme: Arc<Scheme>,
        tag: &str,
        connections: usize,
        seed: u64,
        ledger: Arc<Mutex<Ledger>>,
    ) -> Load {
        let (stop, stopped) = watch::channel(false);
        let answers: Arc<Mutex<Answers>> = Arc::default();
        let mut senders = JoinSet::new();
        for c in 0..connections {
            let (scheme, ledger, stopped, answers) = (
                scheme.clone(),
                ledger.clone(),
                stopped.clone(),
                answers.clone(),
            );
            let (url, tag) = (format!("{base}/hooks/sw"), tag.to_owned());
            senders.spawn(async move {
                // Never wait forever: once the server is gone, its port may be taken by
                // another test's listener that does not answer this request.
                let client = client_builder()
                    .timeout(std::time::Duration::from_secs(30))
                    .build()
                    .unwrap();
                let mut rng = Rng(seed ^ ((c as u64 + 1) << 32));
                for n in 0.. {
                    if *stopped.borrow() {
                        return;
                    }
                    let id = format!("msg_{tag}_{c}_{n}");
                    let pad = "b".repeat(rng.below(2000) as usize);
                    let req = sign_with(
                        &scheme,
                        &id,
                        &event_body(&id, &pad),
                        hookinbox::clock::unix_now(),
                    );
                    let mut r = client.post(&url).body(req.body.clone());
                    for (k, v) in &req.headers {
                        r = r.header(k, v);
                    }
                    let status = r.send().await.ok().map(|resp| resp.status().as_u16());
                    ledger.lock().unwrap().record(&id, &req.body, status);
                    answers.lock().unwrap().push((Instant::now(), status));
                    match status {
                        // Acknowledged, or refused honestly (the inbox cannot commit, or a
                        // shutdown is under way).
                        Some(200 | 503) => {}
                        Some(other) => panic!("unexpected answer {other} for {id}"),
                        None => return,
                    }
                }
            });
        }
        Load {
            stop,
            senders,
            answers,
        }
    }

    /// How many answers with `status` came at or after `since`, so far.
    pub fn answered_since(&self, since: Instant, status: u16) -> usize {
        let answers = self.answers.lock().unwrap();
        answers
            .iter()
            .filter(|(at, s)| *at >= since && *s == Some(status))
            .count()
    }

    /// Stops the senders and returns every answer.
    pub async fn stop(mut self) -> Answers {
        let _ = self.stop.send(true);
        while let Some(done) = self.senders.join_next().await {
            done.unwrap();
        }
        std::mem::take(&mut self.answers.lock().unwrap())
    }
}
