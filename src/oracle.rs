//! The oracle of the crash, fault and load tests: after any run, compare what the senders
//! were told, and what the target received, with what the inbox holds.
//!
//! It follows Jepsen's total-queue checker (reference/reliability-perf.md §5, §7):
//!
//! - **lost**: acknowledged (2xx) but not in the inbox: the promise broken;
//! - **altered**: in the inbox with other bytes than the ones acknowledged;
//! - **unexpected**: in the inbox but never sent;
//! - **duplicated**: one identity stored more than once;
//! - **recovered** (not a failure): the sender never heard an answer (the process died
//!   under it, or it gave up), yet the event is stored;
//!
//! and, with the target's receipts, once every delivery has finished:
//!
//! - **unfinished**: a delivery not `delivered`, `dead` or `superseded`;
//! - **never received**: `delivered`, but the target has no receipt under its key;
//! - **wrong key** or **wrong body**: a receipt under a delivery's idempotency key that
//!   names another event, or carries other bytes than the inbox holds;
//! - **unknown at the target**: a receipt under a key that no delivery has;
//! - **over-counted**: more receipts under a key than its delivery recorded attempts.
//!
//! Receipts are matched to deliveries by idempotency key (one per event and target), so
//! fan-out checks out. Receipts beyond one per key are allowed (at-least-once) and counted.
//! Identities are compared by event id: one source with one account per check.
//!
//! Used by the integration tests and by `hookinbox-loadgen check`, which reads the JSON
//! lines that `hookinbox-loadgen send --log` and `bare --log` write.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use rusqlite::{Connection, OpenFlags};
use serde::{Deserialize, Serialize};

/// What the senders saw: one entry per identity.
#[derive(Debug, Default)]
pub struct Ledger {
    /// Every id sent, with the SHA-256 (hex) of its body.
    sent: HashMap<String, String>,
    acked: HashSet<String>,
}

/// One request as `hookinbox-loadgen send --log` records it.
#[derive(Debug, Serialize, Deserialize)]
pub struct Sent {
    pub id: String,
    /// The HTTP status, or 0 when no answer came (an error or a dead server).
    pub status: u16,
    pub sha256: String,
}

impl Sent {
    pub fn new(id: String, body: &[u8], status: Option<u16>) -> Sent {
        Sent {
            id,
            status: status.unwrap_or(0),
            sha256: sha256_hex(body),
        }
    }
}

impl Ledger {
    /// Records a request and its outcome. The same id may be sent many times (a retry, a
    /// duplicate), always with the same bytes; it counts as acknowledged once any answer
    /// was a 2xx.
    pub fn record(&mut self, id: &str, body: &[u8], status: Option<u16>) {
        self.record_sha(id, &sha256_hex(body), status);
    }

    fn record_sha(&mut self, id: &str, sha256: &str, status: Option<u16>) {
        let known = self
            .sent
            .entry(id.to_owned())
            .or_insert_with(|| sha256.to_owned());
        assert_eq!(
            known, sha256,
            "the sender reused id {id} for other bytes: the harness is broken"
        );
        if let Some(200..=299) = status {
            self.acked.insert(id.to_owned());
        }
    }

    /// Adds the lines of a `send --log` file.
    pub fn read_log(&mut self, path: &Path) -> anyhow::Result<()> {
        let text = std::fs::read_to_string(path)?;
        for (n, line) in text.lines().enumerate() {
            let s: Sent = serde_json::from_str(line)
                .map_err(|e| anyhow::anyhow!("{}:{}: {e}", path.display(), n + 1))?;
            let status = (s.status != 0).then_some(s.status);
            self.record_sha(&s.id, &s.sha256, status);
        }
        Ok(())
    }

    pub fn acked(&self) -> usize {
        self.acked.len()
    }

    /// Whether any answer for `id` was a 2xx.
    pub fn is_acked(&self, id: &str) -> bool {
        self.acked.contains(id)
    }

    pub fn sent(&self) -> usize {
        self.sent.len()
    }
}

/// One request the target received.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Receipt {
    /// `X-Hookinbox-Event-Id`.
    pub event_id: String,
    /// `Idempotency-Key`.
    pub key: String,
    /// SHA-256 (hex) of the body received.
    pub sha256: String,
}

impl Receipt {
    pub fn new(event_id: &str, key: &str, body: &[u8]) -> Receipt {
        Receipt {
            event_id: event_id.to_owned(),
            key: key.to_owned(),
            sha256: sha256_hex(body),
        }
    }
}

/// Reads the lines of a `bare --log` file.
pub fn read_receipts(path: &Path) -> anyhow::Result<Vec<Receipt>> {
    let text = std::fs::read_to_string(path)?;
    text.lines()
        .enumerate()
        .map(|(n, line)| {
            serde_json::from_str(line)
                .map_err(|e| anyhow::anyhow!("{}:{}: {e}", path.display(), n + 1))
        })
        .collect()
}

/// What the oracle found. Lists hold the offending event ids (at most [`SHOWN`] each).
#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub sent: usize,
    pub acked: usize,
    pub stored: usize,
    pub recovered: usize,
    pub integrity: String,
    pub lost: Vec<String>,
    pub altered: Vec<String>,
    pub unexpected: Vec<String>,
    pub duplicated: Vec<String>,
    pub delivery: Option<DeliveryReport>,
}

#[derive(Debug, Default, Serialize)]
pub struct DeliveryReport {
    pub deliveries: usize,
    pub delivered: usize,
    pub dead: usize,
    pub receipts: usize,
    /// Events the target received more than once (allowed: at-least-once).
    pub received_more_than_once: usize,
    pub unfinished: Vec<String>,
    pub never_received: Vec<String>,
    pub wrong_key: Vec<String>,
    pub wrong_body: Vec<String>,
    pub unknown_at_target: Vec<String>,
    pub over_counted: Vec<String>,
}

/// The most ids a report lists per kind of problem.
pub const SHOWN: usize = 20;

impl Report {
    /// Every broken rule, in words; empty when the run kept the promise.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut add = |what: &str, ids: &[String]| {
            if !ids.is_empty() {
                out.push(format!("{what}: {}", ids.join(", ")));
            }
        };
        add("acknowledged but lost", &self.lost);
        add("stored with other bytes than acknowledged", &self.altered);
        add("stored but never sent", &self.unexpected);
        add("stored more than once", &self.duplicated);
        if let Some(d) = &self.delivery {
            add("delivery neither delivered nor dead", &d.unfinished);
            add("delivered but never received", &d.never_received);
            add("received under another key", &d.wrong_key);
            add("received with other bytes", &d.wrong_body);
            add("received but not in the inbox", &d.unknown_at_target);
            add("received more often than attempted", &d.over_counted);
        }
        if self.integrity != "ok" {
            out.push(format!("integrity_check: {}", self.integrity));
        }
        out
    }

    /// Panics with every problem and the summary; for tests.
    pub fn assert_ok(&self) {
        let problems = self.problems();
        assert!(problems.is_empty(), "{}\n{self:#?}", problems.join("\n"));
    }
}

/// One stored event as the oracle reads it, from either backend.
#[derive(Debug, Clone)]
pub struct StoredRow {
    pub event_id: String,
    /// The `sha256` column.
    pub sha256: String,
    /// The payload; None once pruned.
    pub body: Option<Vec<u8>>,
}

/// One delivery row as the oracle reads it.
#[derive(Debug, Clone)]
pub struct DeliveryRow {
    pub event_id: String,
    pub idempotency_key: String,
    pub state: String,
    pub attempts: i64,
}

/// Checks the inbox at `db` (source `source`) against the ledger, and, given receipts,
/// the deliveries against what the target received. Opens the file read-only.
pub fn check(
    db: &Path,
    source: &str,
    ledger: &Ledger,
    receipts: Option<&[Receipt]>,
) -> rusqlite::Result<Report> {
    let conn = Connection::open_with_flags(
        db,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    // One snapshot for every query.
    conn.execute_batch("BEGIN")?;
    let integrity: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
    let stored = conn
        .prepare(
            "SELECT e.event_id, e.sha256, CAST(p.body AS BLOB)
               FROM events e LEFT JOIN payloads p ON p.event = e.id WHERE e.source = ?1",
        )?
        .query_map([source], |row| {
            Ok(StoredRow {
                event_id: row.get(0)?,
                sha256: row.get(1)?,
                body: row.get(2)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let deliveries = match receipts {
        None => None,
        Some(receipts) => {
            let rows = conn
                .prepare(
                    "SELECT e.event_id, d.idempotency_key, d.state, d.attempts
                       FROM deliveries d JOIN events e ON e.id = d.event WHERE e.source = ?1",
                )?
                .query_map([source], |row| {
                    Ok(DeliveryRow {
                        event_id: row.get(0)?,
                        idempotency_key: row.get(1)?,
                        state: row.get(2)?,
                        attempts: row.get(3)?,
                    })
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Some((rows, receipts))
        }
    };
    Ok(judge(ledger, integrity, stored, deliveries))
}

/// The oracle's rules over rows read from any backend in one snapshot: `integrity` is the
/// store's own check ("ok" when it has none to offer).
pub fn judge(
    ledger: &Ledger,
    integrity: String,
    rows: Vec<StoredRow>,
    deliveries: Option<(Vec<DeliveryRow>, &[Receipt])>,
) -> Report {
    let mut r = Report {
        sent: ledger.sent.len(),
        acked: ledger.acked.len(),
        integrity,
        ..Report::default()
    };

    // event_id -> sha256 of the stored bytes; pruned rows count by column.
    let mut stored: HashMap<String, String> = HashMap::new();
    for row in rows {
        let actual = row.body.as_deref().map_or(row.sha256.clone(), sha256_hex);
        if actual != row.sha256 {
            r.altered.push(row.event_id.clone());
        }
        if stored.insert(row.event_id.clone(), actual).is_some() {
            r.duplicated.push(row.event_id);
        }
    }
    r.stored = stored.len();
    for id in &ledger.acked {
        match stored.get(id) {
            None => r.lost.push(id.clone()),
            Some(sha) if *sha != ledger.sent[id] => r.altered.push(id.clone()),
            Some(_) => {}
        }
    }
    for id in stored.keys() {
        if !ledger.sent.contains_key(id) {
            r.unexpected.push(id.clone());
        } else if !ledger.acked.contains(id) {
            r.recovered += 1;
        }
    }
    if let Some((rows, receipts)) = deliveries {
        r.delivery = Some(check_deliveries(&stored, rows, receipts));
    }
    for list in [
        &mut r.lost,
        &mut r.altered,
        &mut r.unexpected,
        &mut r.duplicated,
    ] {
        list.sort();
        list.truncate(SHOWN);
    }
    r
}

fn check_deliveries(
    stored: &HashMap<String, String>,
    rows: Vec<DeliveryRow>,
    receipts: &[Receipt],
) -> DeliveryReport {
    let mut d = DeliveryReport {
        receipts: receipts.len(),
        ..DeliveryReport::default()
    };
    let mut by_key: HashMap<&str, Vec<&Receipt>> = HashMap::new();
    for receipt in receipts {
        by_key.entry(&receipt.key).or_default().push(receipt);
    }
    d.received_more_than_once = by_key.values().filter(|v| v.len() > 1).count();
    let mut keys = HashSet::new();
    for row in rows {
        let DeliveryRow {
            event_id: id,
            idempotency_key: key,
            state,
            attempts,
        } = row;
        d.deliveries += 1;
        let seen = by_key.get(key.as_str()).map_or(&[][..], Vec::as_slice);
        match state.as_str() {
            "delivered" => d.delivered += 1,
            "dead" => d.dead += 1,
            // Left alone because a newer version of its order key was delivered.
            "superseded" => {}
            _ => d.unfinished.push(id.clone()),
        }
        if state == "delivered" && seen.is_empty() {
            d.never_received.push(id.clone());
        }
        if seen.iter().any(|r| r.event_id != id) {
            d.wrong_key.push(id.clone());
        }
        if seen.iter().any(|r| Some(&r.sha256) != stored.get(&id)) {
            d.wrong_body.push(id.clone());
        }
        if seen.len() as i64 > attempts {
            d.over_counted.push(id.clone());
        }
        keys.insert(key);
    }
    d.unknown_at_target = receipts
        .iter()
        .filter(|r| !keys.contains(&r.key))
        .map(|r| r.event_id.clone())
        .collect();
    for list in [
        &mut d.unfinished,
        &mut d.never_received,
        &mut d.wrong_key,
        &mut d.wrong_body,
        &mut d.unknown_at_target,
        &mut d.over_counted,
    ] {
        list.sort();
        list.dedup();
        list.truncate(SHOWN);
    }
    d
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(ring::digest::digest(&ring::digest::SHA256, bytes))
}

/// A small xorshift generator for the harnesses: deterministic from a printed seed.
pub struct Rng(pub u64);

impl Rng {
    /// A seed from `var` when set (to replay a failure), else from the clock.
    pub fn seed_from_env(var: &str) -> u64 {
        std::env::var(var)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
                    | 1
            })
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}
