//! The delivery queue on PostgreSQL: the states and rules of [`crate::store::sqlite::queue`], for
//! several replicas at once.
//!
//! The rows are taken `FOR NO KEY UPDATE SKIP LOCKED`: each due row goes to one replica, and a row
//! another replica is claiming, finishing or sweeping is left for the next turn. A target
//! whose source orders its events also takes the target's advisory lock for the claim's
//! transaction, without waiting (`pg_try_advisory_xact_lock`): while another replica claims
//! for it, this one claims nothing this turn and looks again. So the ordering rule (one
//! delivery of a key in flight, in version order) is judged on committed state by one
//! replica at a time, and no claim waits on another's.

use std::collections::HashMap;
use std::time::SystemTime;

use futures_util::future::{BoxFuture, try_join_all};
use tokio_postgres::{Client, Transaction};

use super::batch::{self, BatchError, Prepared, Slot};
use crate::pgconn::text as pg_text;
use crate::store::Paused;
use crate::store::WriteError;
use crate::store::retention::{self, Pruned, Rule};
use crate::store::{
    ClaimRequest, Claimed, Claims, EventData, Finished, Next, Recorded, SUPERSEDED,
};

pub enum Job {
    Claim(ClaimRequest, Slot<Claims>),
    Finish(Finished, Slot<Recorded>),
    Sweep(Slot<usize>),
    /// One chunk of a source's retention (see [`crate::store::retention`]).
    Prune(Rule, SystemTime, Slot<Pruned>),
}

pub struct Batch;

/// The sort key of an order version kept as `$num` (numeric) and `$text` (text COLLATE
/// "C"): a version compares as SQLite compares its dynamically typed column, numbers before
/// text, numbers by value, text byte by byte. The one definition every comparison uses:
/// `version_key!` as a row, `version_columns!` as the list `deliveries_order` ends in.
macro_rules! version_columns {
    ($num:literal, $text:literal) => {
        concat!(
            $text,
            " IS NOT NULL, coalesce(",
            $num,
            ", 0), coalesce(",
            $text,
            ", '')"
        )
    };
}
macro_rules! version_key {
    ($num:literal, $text:literal) => {
        concat!("(", version_columns!($num, $text), ")")
    };
}

/// As the SQLite queue's CLAIMABLE: unordered rows, and per order key the pending delivery
/// with the lowest version (then id), unless one of that key is in flight.
///
/// The second test asks for the key's first pending row in `deliveries_order`, which ends
/// in the version and the id: one seek, whatever the key holds. Written as SQLite's (no
/// pending row of the key before this one, `NOT EXISTS`), PostgreSQL's planner probed it
/// with a sequential scan, expecting a key that holds a third of the table to show an
/// earlier version within a few rows; they were all at the table's end: 64 s for one claim
/// over 20,000 pending versions of one key behind 30,000 delivered (BENCHMARKS.md,
/// "Forwarding").
const CLAIMABLE: &str = concat!(
    "(d.order_key IS NULL OR (
        NOT EXISTS (
        SELECT 1 FROM deliveries o
         WHERE o.source = d.source AND o.target = d.target
           AND o.order_key = d.order_key AND o.state = 'in_flight')
        AND d.id = (
        SELECT o.id FROM deliveries o
         WHERE o.source = d.source AND o.target = d.target
           AND o.order_key = d.order_key AND o.state = 'pending'
         ORDER BY ",
    version_columns!("o.order_version_num", "o.order_version_text"),
    ", o.id
         LIMIT 1)))"
);

/// As the SQLite queue's `OUTDATED`: a delivery `d` under ordering whose key already
/// delivered a version at least as new, of the same kind (numbers with numbers, text with
/// text, as SQLite compares them there). The claim supersedes it; replay leaves it alone.
pub(crate) const OUTDATED: &str = concat!(
    "(d.order_key IS NOT NULL
      AND (d.order_version_num IS NOT NULL OR d.order_version_text IS NOT NULL)
      AND EXISTS (
        SELECT 1 FROM order_keys k
         WHERE k.source = d.source AND k.target = d.target AND k.order_key = d.order_key
           AND (k.last_text IS NOT NULL) = (d.order_version_text IS NOT NULL)
           AND ",
    version_key!("k.last_num", "k.last_text"),
    " >= ",
    version_key!("d.order_version_num", "d.order_version_text"),
    "))"
);

/// In the upsert of `order_keys`: the version being recorded is newer than the one kept
/// (SQLite's `max`).
const NEWER: &str = concat!(
    version_key!("excluded.last_num", "excluded.last_text"),
    " > ",
    version_key!("order_keys.last_num", "order_keys.last_text")
);

/// The database's clock as inbox text, and that plus `$4` seconds (a lease).
macro_rules! inbox_text {
    ($timestamp:literal) => {
        concat!(
            "to_char(",
            $timestamp,
            ", 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
        )
    };
}
const DB_NOW: &str = inbox_text!("now() AT TIME ZONE 'UTC'");
const DB_NOW_PLUS_SECONDS_4: &str =
    inbox_text!("now() AT TIME ZONE 'UTC' + $4::float8 * interval '1 second'");

const NOT_PAUSED: &str =
    "NOT EXISTS (SELECT 1 FROM paused_targets p WHERE p.source = $1 AND p.target = $2)";

impl batch::BatchKind for Batch {
    type Job = Job;

    fn run<'a>(
        &'a self,
        tx: &'a Transaction<'a>,
        prepared: &'a Prepared,
        jobs: &'a mut [Job],
        now: &'a str,
    ) -> BoxFuture<'a, Result<(), BatchError>> {
        Box::pin(async move {
            // Pipelined: every job's statements go out without waiting for the others'
            // answers (a batch of 32 results is a round trip or two, not 32). The server
            // runs them in the order sent; a claim that runs before a finish of its key
            // only finds the key busy, and claims it next turn.
            try_join_all(jobs.iter_mut().map(|job| async move {
                match job {
                    Job::Claim(req, slot) => slot.set(claim(tx, prepared, req, now).await?),
                    Job::Finish(f, slot) => slot.set(finish(tx, prepared, f, now).await?),
                    Job::Sweep(slot) => slot.set(sweep(tx, now).await?),
                    Job::Prune(rule, at, slot) => slot.set(prune(tx, rule, *at).await?),
                }
                Ok::<(), tokio_postgres::Error>(())
            }))
            .await?;
            Ok(())
        })
    }

    fn answer(&self, job: Job, batch_error: Option<WriteError>) {
        match job {
            Job::Claim(_, slot) => slot.answer(batch_error),
            Job::Finish(_, slot) => slot.answer(batch_error),
            Job::Sweep(slot) => slot.answer(batch_error),
            Job::Prune(_, _, slot) => slot.answer(batch_error),
        }
    }
}

async fn claim(
    tx: &Transaction<'_>,
    prepared: &Prepared,
    req: &ClaimRequest,
    now: &str,
) -> Result<Claims, tokio_postgres::Error> {
    let Some(rate) = &req.rate else {
        return claim_up_to(tx, prepared, req, req.limit, now).await;
    };
    // The shared bucket (`target_paces`): what is owed of it now, in seconds. Its row is
    // taken without waiting; a replica claiming this target right now has it, and this one
    // claims nothing this turn.
    let (source, target) = (&req.source, &req.target);
    let owed = "SELECT greatest(extract(epoch FROM full_at - now()), 0)::float8";
    let mut row = tx
        .query_opt(
            &format!(
                "{owed} FROM target_paces WHERE source = $1 AND target = $2
                 FOR UPDATE SKIP LOCKED"
            ),
            &[source, target],
        )
        .await?;
    if row.is_none() {
        // Its first claim (the row is made by whoever claims first), or locked.
        row = tx
            .query_opt(
                "INSERT INTO target_paces (source, target, full_at) VALUES ($1, $2, now())
                 ON CONFLICT DO NOTHING RETURNING 0::float8",
                &[source, target],
            )
            .await?;
    }
    let interval = rate.interval().as_secs_f64();
    let Some(row) = row else {
        return Ok(Claims {
            rate_wait: Some(rate.interval()),
            ..Claims::default()
        });
    };
    let owed: f64 = row.get(0);
    let capacity = interval * f64::from(rate.burst());
    // A nanosecond's slack, so that rounding never refuses a whole interval's room.
    let room = ((capacity - owed) / interval + 1e-9).floor().max(0.0) as usize;
    let allowed = room.min(req.limit);
    let mut claims = if allowed > 0 {
        claim_up_to(tx, prepared, req, allowed, now).await?
    } else {
        Claims::default()
    };
    let sent = claims.claimed.len();
    if sent > 0 {
        tx.execute(
            "UPDATE target_paces
                SET full_at = greatest(full_at, now()) + $3::float8 * interval '1 second'
              WHERE source = $1 AND target = $2",
            &[source, target, &(interval * sent as f64)],
        )
        .await?;
    }
    // Fewer than asked because of the rate (it gave less than asked, and all it gave was
    // used; fewer due is no reason to wait): when one more may start. Rows superseded or
    // given up send nothing, so they cost no room.
    claims.rate_wait = (allowed < req.limit && claims.taken() == allowed).then(|| {
        let owed = owed + interval * sent as f64;
        std::time::Duration::from_secs_f64((owed - (capacity - interval)).max(0.0))
    });
    Ok(claims)
}

/// The statement that claims a target's due deliveries: `$1` source, `$2` target, `$3` the
/// inbox time now, `$4` the lease in seconds, `$5` how many. Public for the test that
/// reads its plan.
///
/// The lease runs on the database's clock, as the sweep reads it: a replica whose clock
/// is ahead cannot take another's live lease for expired. As on SQLite, a row taken
/// whose key already delivered a version at least as new is superseded instead, judged
/// in the same statement and so on the same snapshot as the ordering rule.
pub fn claim_statement(ordered: bool) -> String {
    let outdated = if ordered { OUTDATED } else { "false" };
    format!(
        "UPDATE deliveries
            SET state = CASE WHEN c.outdated THEN 'superseded' ELSE 'in_flight' END,
                attempts = attempts + CASE WHEN c.outdated THEN 0 ELSE 1 END,
                lease_until = CASE WHEN c.outdated THEN NULL
                                   ELSE {DB_NOW_PLUS_SECONDS_4} END,
                last_error = CASE WHEN c.outdated THEN '{SUPERSEDED}'
                                  ELSE deliveries.last_error END,
                updated_at = $3
           FROM (SELECT d.id, {outdated} AS outdated FROM deliveries d
                  WHERE d.source = $1 AND d.target = $2 AND d.state = 'pending'
                    AND d.next_attempt_at <= $3 AND {CLAIMABLE} AND {NOT_PAUSED}
                  ORDER BY d.next_attempt_at, d.id
                  LIMIT $5
                    FOR NO KEY UPDATE SKIP LOCKED) AS c
          WHERE deliveries.id = c.id
         RETURNING deliveries.id, event, attempts, schedule_base, idempotency_key,
                   c.outdated"
    )
}

/// Claims at most `limit` due deliveries of the target; with them, how many of the rows it
/// took it superseded or gave up instead.
async fn claim_up_to(
    tx: &Transaction<'_>,
    prepared: &Prepared,
    req: &ClaimRequest,
    limit: usize,
    now: &str,
) -> Result<Claims, tokio_postgres::Error> {
    // Only ordering needs the lock: without it, SKIP LOCKED alone gives each row to one
    // replica.
    if req.ordered {
        let locked: bool = tx
            .query_one(
                "SELECT pg_try_advisory_xact_lock(hashtextextended($1 || '/' || $2, 0))",
                &[&req.source, &req.target],
            )
            .await?
            .get(0);
        if !locked {
            return Ok(Claims::default());
        }
    }
    let lease_seconds = req.lease.as_secs_f64();
    let limit = limit as i64;
    let update = prepared.get(tx, &claim_statement(req.ordered)).await?;
    let rows = tx
        .query(
            &update,
            &[&req.source, &req.target, &now, &lease_seconds, &limit],
        )
        .await?;
    let (superseded, taken): (Vec<_>, Vec<_>) = rows.iter().partition(|r| r.get::<_, bool>(5));
    let claimed = taken.into_iter().map(|r| Claimed {
        delivery: r.get(0),
        event: r.get(1),
        attempt: u32::try_from(r.get::<_, i32>(2)).unwrap_or(0),
        schedule_base: u32::try_from(r.get::<_, i32>(3)).unwrap_or(0),
        idempotency_key: r.get(4),
    });
    // As on SQLite: an attempt beyond the schedule comes only from leases that expired on
    // the last attempt every time; it is given up rather than tried forever.
    let (exhausted, ready): (Vec<Claimed>, Vec<Claimed>) =
        claimed.partition(|c| c.in_schedule() > req.max_attempts);
    let given_up = exhausted.len();
    for c in exhausted {
        tx.execute(
            "UPDATE deliveries SET state = 'dead', lease_until = NULL, updated_at = $2,
                    last_error = 'gave up: the last attempt never finished (its lease expired)'
              WHERE id = $1",
            &[&c.delivery, &now],
        )
        .await?;
    }
    Ok(Claims {
        claimed: ready,
        superseded: superseded.len(),
        given_up,
        rate_wait: None,
    })
}

async fn finish(
    tx: &Transaction<'_>,
    prepared: &Prepared,
    f: &Finished,
    now: &str,
) -> Result<Recorded, tokio_postgres::Error> {
    let attempt = i32::try_from(f.attempt).unwrap_or(i32::MAX);
    let schedule_base = i32::try_from(f.schedule_base).unwrap_or(i32::MAX);
    let error = f.error.as_deref().map(pg_text);
    let output = f.output.as_deref().map(pg_text);
    let (state, next_at) = match &f.next {
        Next::Delivered => ("delivered", None),
        Next::Retry(at) => ("pending", Some(at.as_str())),
        Next::Dead => ("dead", None),
    };
    // One statement, as SQLite's four: the attempt; the delivery's next state, if the
    // attempt still owns it (nothing claimed it since); on delivery, its key's last
    // version; and whether an earlier attempt of it had timed out.
    let statement = prepared
        .get(
            tx,
            &format!(
                "WITH attempt AS (
                     INSERT INTO attempts (delivery, number, started_at, duration_ms, outcome,
                                           status, error, output, ambiguous)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                 ), moved AS (
                     UPDATE deliveries
                        SET state = $10, next_attempt_at = coalesce($11, next_attempt_at),
                            lease_until = NULL, last_error = $7, updated_at = $12
                      WHERE id = $1 AND attempts = $2 AND schedule_base = $13
                        AND state IN ('in_flight', 'pending')
                     RETURNING id
                 ), kept AS (
                     INSERT INTO order_keys (source, target, order_key, last_num, last_text,
                                             updated_at)
                     SELECT d.source, d.target, d.order_key, d.order_version_num,
                            d.order_version_text, $12
                       FROM deliveries d
                      WHERE d.id = $1 AND $10 = 'delivered' AND EXISTS (SELECT 1 FROM moved)
                        AND d.order_key IS NOT NULL
                        AND (d.order_version_num IS NOT NULL OR d.order_version_text IS NOT NULL)
                     ON CONFLICT (source, target, order_key) DO UPDATE
                        SET last_num = CASE WHEN {NEWER} THEN excluded.last_num
                                            ELSE order_keys.last_num END,
                            last_text = CASE WHEN {NEWER} THEN excluded.last_text
                                             ELSE order_keys.last_text END,
                            updated_at = excluded.updated_at
                 )
                 SELECT EXISTS (SELECT 1 FROM moved),
                        $10 = 'delivered' AND EXISTS (SELECT 1 FROM moved)
                            AND EXISTS (SELECT 1 FROM attempts
                                         WHERE delivery = $1 AND number < $2 AND ambiguous = 1)"
            ),
        )
        .await?;
    let row = tx
        .query_one(
            &statement,
            &[
                &f.delivery,
                &attempt,
                &f.started_at,
                &f.duration_ms,
                &f.next.word(),
                &f.status,
                &error,
                &output,
                &i32::from(f.ambiguous),
                &state,
                &next_at,
                &now,
                &schedule_base,
            ],
        )
        .await?;
    Ok(Recorded {
        applied: row.get(0),
        resolved_ambiguity: row.get(1),
    })
}

/// Returns expired leases to the queue. Rows another replica holds are skipped: it is
/// recording their result, or sweeping them itself.
async fn sweep(tx: &Transaction<'_>, now: &str) -> Result<usize, tokio_postgres::Error> {
    let n = tx
        .execute(
            &format!(
                "UPDATE deliveries
                SET state = 'pending', lease_until = NULL, next_attempt_at = $1, updated_at = $1,
                    last_error = 'the attempt''s lease expired before its result was recorded'
              WHERE id IN (SELECT id FROM deliveries
                            WHERE state = 'in_flight' AND lease_until < {DB_NOW}
                              FOR NO KEY UPDATE SKIP LOCKED)"
            ),
            &[&now],
        )
        .await?;
    Ok(n as usize)
}

pub async fn look(
    client: &Client,
    source: &str,
    target: &str,
) -> Result<(Option<Paused>, Option<String>), tokio_postgres::Error> {
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&source, &target];
    let paused = client.query_opt(
        "SELECT paused_at, paused_by FROM paused_targets WHERE source = $1 AND target = $2",
        &params,
    );
    let due_sql = format!(
        "SELECT d.next_attempt_at FROM deliveries d
          WHERE d.source = $1 AND d.target = $2 AND d.state = 'pending' AND {CLAIMABLE}
            AND {NOT_PAUSED}
          ORDER BY d.next_attempt_at LIMIT 1"
    );
    let due = client.query_opt(&due_sql, &params);
    let (paused, due) = futures_util::future::try_join(paused, due).await?;
    Ok((
        paused.map(|r| Paused {
            source: source.to_owned(),
            target: target.to_owned(),
            paused_at: r.get(0),
            paused_by: r.get(1),
        }),
        due.map(|r| r.get(0)),
    ))
}

pub async fn events(
    client: &Client,
    ids: &[i64],
) -> Result<HashMap<i64, EventData>, tokio_postgres::Error> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = client
        .query(
            "SELECT e.id, e.source, e.event_id, p.body, p.headers, e.event_type, e.received_at,
                    e.remote_addr, e.origin
               FROM events e LEFT JOIN payloads p ON p.event = e.id WHERE e.id = ANY($1)",
            &[&ids],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| {
            (
                r.get(0),
                EventData {
                    source: r.get(1),
                    event_id: r.get(2),
                    body: r.get(3),
                    headers: r.get(4),
                    event_type: r.get(5),
                    received_at: r.get(6),
                    remote_addr: r.get(7),
                    origin: r.get(8),
                },
            )
        })
        .collect())
}

/// As on SQLite ([`crate::store::sqlite::read::gauges`]): every state only if `settled`.
pub async fn gauges(
    client: &Client,
    settled: bool,
) -> Result<crate::store::Gauges, tokio_postgres::Error> {
    let backlog = crate::metrics::BACKLOG_STATES.as_slice();
    let counts = async {
        if settled {
            client
                .query("SELECT state, count(*) FROM deliveries GROUP BY state", &[])
                .await
        } else {
            client
                .query(
                    "SELECT state, count(*) FROM deliveries WHERE state = ANY($1) GROUP BY state",
                    &[&backlog],
                )
                .await
        }
    };
    let oldest = client.query_one(
        "SELECT min(created_at) FROM deliveries WHERE state IN ('pending', 'in_flight')",
        &[],
    );
    let paused = client.query(
        "SELECT source, target, paused_at, paused_by FROM paused_targets ORDER BY source, target",
        &[],
    );
    let (counts, oldest, paused) = futures_util::future::try_join3(counts, oldest, paused).await?;
    Ok(crate::store::Gauges {
        counts: counts.iter().map(|r| (r.get(0), r.get(1))).collect(),
        oldest_pending: oldest.get(0),
        paused: paused
            .iter()
            .map(|r| Paused {
                source: r.get(0),
                target: r.get(1),
                paused_at: r.get(2),
                paused_by: r.get(3),
            })
            .collect(),
        pages: None,
    })
}

/// One chunk of retention for `rule`, as on SQLite (the same windows and the same rules of
/// what may go), at most [`retention::CHUNK`] rows of each kind. Rows another replica holds
/// (pruning too, or delivering) are skipped this time.
async fn prune(
    tx: &Transaction<'_>,
    rule: &Rule,
    now: SystemTime,
) -> Result<Pruned, tokio_postgres::Error> {
    let cutoff = |keep| crate::clock::iso(now.checked_sub(keep).unwrap_or(SystemTime::UNIX_EPOCH));
    let (payload_cut, identity_cut) = (cutoff(rule.keep_payload), cutoff(rule.keep_identity));
    let stamp = crate::clock::iso(now);
    let chunk = retention::CHUNK;
    let (finished, payload_done) = (retention::FINISHED, retention::PAYLOAD_DONE);
    // The batchers' sessions plan no sequential scans (`BATCH_SESSION`), which their
    // prepared statements never want. These are planned afresh each time and some look for
    // the old rows of a table with no index by age (`order_keys`, `gaps`), where a scan
    // that stops at its chunk is the right plan: allowed for this job, then back to the
    // session's setting for the rest of the batch's transaction.
    tx.batch_execute("SET LOCAL enable_seqscan = on").await?;
    let payloads = tx
        .execute(
            &format!(
                "WITH due AS (
                     SELECT e.id FROM events e
                      WHERE e.source = $1 AND e.received_at < $2 AND e.pruned_at IS NULL
                        AND {payload_done}
                      LIMIT $3 FOR NO KEY UPDATE SKIP LOCKED
                 ), gone AS (
                     DELETE FROM payloads WHERE event IN (SELECT id FROM due)
                 )
                 UPDATE events SET pruned_at = $4 WHERE id IN (SELECT id FROM due)"
            ),
            &[&rule.source, &payload_cut, &chunk, &stamp],
        )
        .await?;
    // The identity rows take their attempts with them; those past keep_payload are counted
    // as attempts, as the dry run counts them (SQLite's `retention::walk_chunk` does the
    // same). The count reads the statement's snapshot, before the delete.
    let gone = tx
        .query_one(
            &format!(
                "WITH due AS (
                     SELECT e.id FROM events e
                      WHERE e.source = $1 AND e.received_at < $2 AND {finished}
                      LIMIT $3 FOR UPDATE SKIP LOCKED
                 ), gone AS (
                     DELETE FROM events WHERE id IN (SELECT id FROM due) RETURNING 1
                 )
                 SELECT (SELECT count(*) FROM gone),
                        (SELECT count(*) FROM attempts a JOIN deliveries d ON d.id = a.delivery
                          WHERE d.event IN (SELECT id FROM due) AND a.started_at < $4
                            AND d.state NOT IN ('pending', 'in_flight'))"
            ),
            &[&rule.source, &identity_cut, &chunk, &payload_cut],
        )
        .await?;
    let (events, aged_attempts): (i64, i64) = (gone.get(0), gone.get(1));
    let conflicts = tx
        .execute(
            "DELETE FROM conflicts WHERE id IN (
                 SELECT id FROM conflicts WHERE source = $1 AND last_seen_at < $2
                  LIMIT $3 FOR UPDATE SKIP LOCKED)",
            &[&rule.source, &payload_cut, &chunk],
        )
        .await?;
    let attempts = tx
        .execute(
            "DELETE FROM attempts WHERE id IN (
                 SELECT a.id FROM attempts a JOIN deliveries d ON d.id = a.delivery
                  WHERE d.source = $1 AND a.started_at < $2
                    AND d.state NOT IN ('pending', 'in_flight')
                  LIMIT $3 FOR UPDATE OF a SKIP LOCKED)",
            &[&rule.source, &payload_cut, &chunk],
        )
        .await?;
    let order_keys = tx
        .execute(
            "DELETE FROM order_keys WHERE (source, target, order_key) IN (
                 SELECT source, target, order_key FROM order_keys
                  WHERE source = $1 AND updated_at < $2
                  LIMIT $3 FOR UPDATE SKIP LOCKED)",
            &[&rule.source, &identity_cut, &chunk],
        )
        .await?;
    // Recovery's record, with the same windows as SQLite's: gaps past keep_identity,
    // redeliveries asked for past keep_payload.
    let gaps = tx
        .execute(
            "DELETE FROM gaps WHERE id IN (
                 SELECT id FROM gaps WHERE source = $1 AND ended_at < $2
                  LIMIT $3 FOR UPDATE SKIP LOCKED)",
            &[&rule.source, &identity_cut, &chunk],
        )
        .await?;
    let requests = tx
        .execute(
            "DELETE FROM recovery_requests WHERE (source, account, event_id) IN (
                 SELECT source, account, event_id FROM recovery_requests
                  WHERE source = $1 AND requested_at < $2
                  LIMIT $3 FOR UPDATE SKIP LOCKED)",
            &[&rule.source, &payload_cut, &chunk],
        )
        .await?;
    tx.batch_execute("SET LOCAL enable_seqscan TO DEFAULT")
        .await?;
    let n = |x: u64| i64::try_from(x).unwrap_or(i64::MAX);
    Ok(Pruned {
        payloads: n(payloads),
        events,
        conflicts: n(conflicts),
        attempts: n(attempts) + aged_attempts,
        order_keys: n(order_keys),
        recovery: n(gaps) + n(requests),
        ..Pruned::default()
    })
}
