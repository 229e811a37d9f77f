//! Storing received events on PostgreSQL, a batch per transaction: the same decisions as
//! [`crate::store::sqlite::ingest`] (new, duplicate, conflict; an event fetched from an API never a
//! conflict), in three pipelined rounds rather than a round trip per statement.
//!
//! Two replicas may insert the same identity at once: the second insert waits for the
//! first transaction, then finds the row and hears "duplicate" (or stores a conflict). The
//! batch's events go in identity order, so two batches that share identities take their
//! row locks in the same order and cannot deadlock.

use std::sync::Arc;

use futures_util::future::{BoxFuture, try_join_all};
use tokio_postgres::Transaction;
use tokio_postgres::types::ToSql;

use super::batch::{self, BatchError, Prepared, Slot};
use crate::metrics::Metrics;
use crate::pgconn::text as pg_text;
use crate::store::WriteError;
use crate::store::{NewEvent, Origin, Stored, Version};

pub struct Job {
    event: NewEvent,
    slot: Slot<Stored>,
}

impl Job {
    pub fn new(
        event: NewEvent,
        reply: tokio::sync::oneshot::Sender<Result<Stored, WriteError>>,
    ) -> Job {
        Job {
            event,
            slot: Slot::new(reply),
        }
    }
}

pub struct Batch {
    pub metrics: Arc<Metrics>,
}

/// The event, its payload and its deliveries in one statement; a row back when it is new.
const INSERT: &str = "
WITH e AS (
    INSERT INTO events (source, account, event_id, sha256, size, event_type, provider_time,
                        received_at, remote_addr, origin)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
    ON CONFLICT (source, account, event_id) DO NOTHING
    RETURNING id
), p AS (
    INSERT INTO payloads (event, body, headers) SELECT id, $11, $12 FROM e
), d AS (
    INSERT INTO deliveries (event, source, target, idempotency_key, order_key,
                            order_version_num, order_version_text, next_attempt_at,
                            created_at, updated_at)
    SELECT e.id, $1, t.target, t.key, $13, $14::text::numeric, $15, $8, $8, $8
      FROM e, unnest($16::text[], $17::text[]) AS t (target, key)
)
SELECT id FROM e";

/// What the inbox holds under an identity that was already there; the payload only when it
/// was fetched from an API (the one case its bytes are compared by value).
const ORIGINAL: &str = "
SELECT e.id, e.sha256, e.origin, CASE WHEN e.origin = 'api' THEN p.body END
  FROM events e LEFT JOIN payloads p ON p.event = e.id
 WHERE e.source = $1 AND e.account = $2 AND e.event_id = $3";

const CONFLICT: &str = "
INSERT INTO conflicts (event, source, account, event_id, original_sha256, sha256, size, body,
                       headers, received_at, last_seen_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10)
ON CONFLICT (source, account, event_id, sha256)
DO UPDATE SET seen = conflicts.seen + 1, last_seen_at = excluded.last_seen_at";

/// An order version as PostgreSQL keeps it: (a number, as numeric's text) or (a text).
pub(super) fn version(v: &Version) -> (Option<String>, Option<String>) {
    match v {
        Version::Integer(i) => (Some(i.to_string()), None),
        Version::Real(f) => (Some(numeric_text(*f)), None),
        Version::Text(t) => (None, Some(pg_text(t).into_owned())),
    }
}

/// A float as numeric's input: beyond f64's range ("1e999" parses to infinity) it is
/// numeric's Infinity, which sorts above every number, as SQLite sorts its infinity.
pub fn numeric_text(f: f64) -> String {
    if f.is_nan() {
        "NaN".into()
    } else if f.is_infinite() {
        if f > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else {
        f.to_string()
    }
}

/// One event's values, cleaned for PostgreSQL's text.
struct Row<'a> {
    e: &'a NewEvent,
    source: &'a str,
    account: &'a str,
    origin: &'static str,
    body: &'a [u8],
    event_id: std::borrow::Cow<'a, str>,
    event_type: Option<std::borrow::Cow<'a, str>>,
    provider_time: Option<String>,
    size: i64,
    order_key: Option<std::borrow::Cow<'a, str>>,
    order_num: Option<String>,
    order_text: Option<String>,
    targets: Vec<&'a str>,
    keys: Vec<&'a str>,
}

impl<'a> Row<'a> {
    fn new(e: &'a NewEvent) -> Row<'a> {
        let (order_num, order_text) = e.order.as_ref().map_or((None, None), |(_, v)| version(v));
        Row {
            e,
            source: &e.source,
            account: &e.account,
            origin: e.origin.as_str(),
            body: &e.body,
            event_id: pg_text(&e.event_id),
            event_type: e.event_type.as_deref().map(pg_text),
            provider_time: e.provider_time.map(crate::clock::iso_from_unix),
            size: e.body.len() as i64,
            order_key: e.order.as_ref().map(|(k, _)| pg_text(k)),
            order_num,
            order_text,
            targets: e.deliveries.iter().map(|(t, _)| t.as_str()).collect(),
            keys: e.deliveries.iter().map(|(_, k)| k.as_str()).collect(),
        }
    }
}

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
            jobs.sort_by(|a, b| {
                let key = |j: &Job| {
                    (
                        j.event.source.clone(),
                        j.event.account.clone(),
                        j.event.event_id.clone(),
                    )
                };
                key(a).cmp(&key(b))
            });
            let outcomes = store(tx, prepared, jobs, now).await?;
            for (job, stored) in jobs.iter_mut().zip(outcomes) {
                job.slot.set(stored);
            }
            Ok(())
        })
    }

    fn answer(&self, job: Job, batch_error: Option<WriteError>) {
        job.slot.answer(batch_error);
    }

    fn committed(&self, jobs: usize, seconds: f64) {
        self.metrics.writer_batch_size.observe(jobs as f64);
        self.metrics.writer_commit_seconds.observe(seconds);
    }

    fn failed(&self) {
        self.metrics.writer_commit_failures.inc();
    }
}

/// What became of each job's event, in the jobs' order.
async fn store(
    tx: &Transaction<'_>,
    prepared: &Prepared,
    jobs: &[Job],
    now: &str,
) -> Result<Vec<Stored>, BatchError> {
    let insert = prepared.get(tx, INSERT).await?;
    let rows: Vec<Row> = jobs.iter().map(|j| Row::new(&j.event)).collect();
    let inserted = try_join_all(rows.iter().map(|r| {
        let insert = &insert;
        async move {
            let params: [&(dyn ToSql + Sync); 17] = [
                &r.source,
                &r.account,
                &r.event_id,
                &r.e.sha256_hex,
                &r.size,
                &r.event_type,
                &r.provider_time,
                &now,
                &r.e.remote_addr,
                &r.origin,
                &r.body,
                &r.e.headers,
                &r.order_key,
                &r.order_num,
                &r.order_text,
                &r.targets,
                &r.keys,
            ];
            tx.query_opt(insert, &params).await
        }
    }))
    .await?;
    // The rest were there already: duplicates or conflicts.
    let original = prepared.get(tx, ORIGINAL).await?;
    let seen: Vec<usize> = (0..rows.len()).filter(|&i| inserted[i].is_none()).collect();
    let originals = try_join_all(seen.iter().map(|&i| {
        let r = &rows[i];
        let original = &original;
        async move {
            tx.query_opt(original, &[&r.source, &r.account, &r.event_id])
                .await
        }
    }))
    .await?;
    let mut outcomes: Vec<Stored> = inserted
        .iter()
        .map(|new| {
            if new.is_some() {
                Stored::New
            } else {
                Stored::Conflict
            }
        })
        .collect();
    let mut conflicts = Vec::new();
    for (i, row) in seen.iter().zip(&originals) {
        let e = &jobs[*i].event;
        // Gone between the insert and this read: retention deleted it meanwhile. A new
        // transaction (the job alone, see `batch`) stores it afresh.
        let Some(row) = row else {
            return Err(BatchError::Job(format!(
                "event {:?} was deleted while it was compared; try again",
                e.event_id
            )));
        };
        let (id, sha, origin, fetched): (i64, String, String, Option<Vec<u8>>) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        let duplicate = sha == e.sha256_hex
            || e.origin == Origin::Api
            || (origin == Origin::Api.as_str()
                && fetched
                    .is_some_and(|f| crate::scheme::json::same_value(&f, &e.body, e.bookkeeping)));
        if duplicate {
            outcomes[*i] = Stored::Duplicate;
        } else {
            conflicts.push((*i, id, sha));
        }
    }
    if !conflicts.is_empty() {
        let conflict = prepared.get(tx, CONFLICT).await?;
        try_join_all(conflicts.iter().map(|(i, id, sha)| {
            let r = &rows[*i];
            let conflict = &conflict;
            async move {
                tx.execute(
                    conflict,
                    &[
                        id,
                        &r.source,
                        &r.account,
                        &r.event_id,
                        sha,
                        &r.e.sha256_hex,
                        &r.size,
                        &r.body,
                        &r.e.headers,
                        &now,
                    ],
                )
                .await
            }
        }))
        .await?;
    }
    Ok(outcomes)
}
