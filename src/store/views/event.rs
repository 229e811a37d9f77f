//! One event with everything the inbox knows about it (`hookinbox show`, the web inbox's
//! event page): identity, stored headers and body, and every delivery with every attempt.

use base64::Engine as _;
use serde::Serialize;

use crate::store::db::{self, Db};

/// The JSON output, and what the text output prints.
#[derive(Debug, Serialize)]
pub struct EventDetail {
    pub id: i64,
    pub source: String,
    pub account: String,
    pub event_id: String,
    pub event_type: Option<String>,
    pub size: i64,
    pub sha256: String,
    pub received_at: String,
    pub provider_time: Option<String>,
    /// `webhook` (signed, received) or `api` (fetched by `recover` from the provider's API).
    pub origin: String,
    /// True once retention dropped the body and headers.
    pub pruned: bool,
    pub pruned_at: Option<String>,
    /// `[[name, value], …]` as stored (credentials removed at receipt); null once pruned.
    pub headers: Option<serde_json::Value>,
    /// The body as text when it is UTF-8, else base64 (see `body_encoding`); null once
    /// pruned.
    pub body: Option<String>,
    /// "utf-8" or "base64"; null when there is no body.
    pub body_encoding: Option<&'static str>,
    pub deliveries: Vec<DeliveryDetail>,
    #[serde(skip)]
    pub raw_body: Option<Vec<u8>>,
}

#[derive(Debug, Serialize)]
pub struct DeliveryDetail {
    pub id: i64,
    pub target: String,
    pub state: String,
    pub attempts: i64,
    pub next_attempt_at: String,
    pub lease_until: Option<String>,
    pub last_error: Option<String>,
    pub idempotency_key: String,
    pub created_at: String,
    pub updated_at: String,
    /// While its target is paused (`hookinbox pause`): since when, and by whom; null when
    /// it is not.
    pub paused_since: Option<String>,
    pub paused_by: Option<String>,
    /// Every attempt, oldest first (`attempts` is their count, kept in the delivery row).
    pub history: Vec<AttemptDetail>,
}

#[derive(Debug, Serialize)]
pub struct AttemptDetail {
    pub number: i64,
    pub started_at: String,
    pub outcome: String,
    /// The HTTP status, or the command's exit code.
    pub status: Option<i64>,
    pub duration_ms: i64,
    pub error: Option<String>,
    pub output: Option<String>,
}

/// Events listed when a provider event id matches several: enough to see which sources and
/// accounts are involved.
pub const MAX_MATCHES: i64 = 20;

impl Db<'_> {
    /// Reads the event, its deliveries, the paused targets and the attempts. Short queries, not one
    /// transaction (reads never hold one open): an attempt that lands between them can show in
    /// a delivery's history before its `attempts` count; the next `show` agrees again.
    pub fn event(self, id: i64) -> Result<Option<EventDetail>, db::DbError> {
        let Some(mut shown) = self.row(
            "SELECT e.id, e.source, e.account, e.event_id, e.event_type, e.size, e.sha256,
                    e.received_at, e.provider_time, e.pruned_at, p.headers, p.body, e.origin
               FROM events e LEFT JOIN payloads p ON p.event = e.id WHERE e.id = ?1",
            &[&id],
            |r| {
                // TEXT when the body was UTF-8, BLOB otherwise, NULL once pruned: the bytes
                // either way.
                let raw_body = r.get_ref(11)?.as_bytes_or_null()?.map(<[u8]>::to_vec);
                let headers: Option<String> = r.get(10)?;
                Ok(EventDetail {
                    id: r.get(0)?,
                    source: r.get(1)?,
                    account: r.get(2)?,
                    event_id: r.get(3)?,
                    event_type: r.get(4)?,
                    size: r.get(5)?,
                    sha256: r.get(6)?,
                    received_at: r.get(7)?,
                    provider_time: r.get(8)?,
                    origin: r.get(12)?,
                    pruned: raw_body.is_none(),
                    pruned_at: r.get(9)?,
                    // Written by hookinbox as JSON; anything else is shown as the text it is.
                    headers: headers
                        .map(|h| serde_json::from_str(&h).unwrap_or(serde_json::Value::String(h))),
                    body: None,
                    body_encoding: None,
                    deliveries: Vec::new(),
                    raw_body,
                })
            },
        )?
        else {
            return Ok(None);
        };
        (shown.body, shown.body_encoding) = match &shown.raw_body {
            None => (None, None),
            Some(b) => match std::str::from_utf8(b) {
                Ok(text) => (Some(text.to_owned()), Some("utf-8")),
                Err(_) => (
                    Some(base64::engine::general_purpose::STANDARD.encode(b)),
                    Some("base64"),
                ),
            },
        };

        shown.deliveries = self.rows(
            "SELECT id, target, state, attempts, next_attempt_at, lease_until, last_error,
                    idempotency_key, created_at, updated_at
               FROM deliveries WHERE event = ?1 ORDER BY id",
            &[&id],
            |r| {
                Ok(DeliveryDetail {
                    id: r.get(0)?,
                    target: r.get(1)?,
                    state: r.get(2)?,
                    attempts: r.get(3)?,
                    next_attempt_at: r.get(4)?,
                    lease_until: r.get(5)?,
                    last_error: r.get(6)?,
                    idempotency_key: r.get(7)?,
                    created_at: r.get(8)?,
                    updated_at: r.get(9)?,
                    paused_since: None,
                    paused_by: None,
                    history: Vec::new(),
                })
            },
        )?;
        let paused = crate::store::pause::all(self)?;
        for d in &mut shown.deliveries {
            if let Some(p) = paused
                .iter()
                .find(|p| p.source == shown.source && p.target == d.target)
            {
                d.paused_since = Some(p.paused_at.clone());
                d.paused_by = Some(p.paused_by.clone());
            }
        }

        let attempts = self.rows(
            "SELECT a.delivery, a.number, a.started_at, a.outcome, a.status, a.duration_ms,
                    a.error, a.output
               FROM attempts a JOIN deliveries d ON d.id = a.delivery
              WHERE d.event = ?1 ORDER BY a.delivery, a.number, a.id",
            &[&id],
            |r| {
                Ok((
                    r.get::<i64>(0)?,
                    AttemptDetail {
                        number: r.get(1)?,
                        started_at: r.get(2)?,
                        outcome: r.get(3)?,
                        status: r.get(4)?,
                        duration_ms: r.get(5)?,
                        error: r.get(6)?,
                        output: r.get(7)?,
                    },
                ))
            },
        )?;
        for (delivery, attempt) in attempts {
            // A delivery inserted after the query above is not shown; its attempts neither.
            if let Some(d) = shown.deliveries.iter_mut().find(|d| d.id == delivery) {
                d.history.push(attempt);
            }
        }
        Ok(Some(shown))
    }

    /// The events whose provider event id is `event_id` (of `source`, when given), oldest
    /// first, at most [`MAX_MATCHES`] + 1: (row id, source, account). No index on the
    /// event id alone (the unique index leads with source): without a source this scans
    /// the events table, which is fine for an operator's one-off command.
    pub fn events_with_id(
        self,
        event_id: &str,
        source: Option<&str>,
    ) -> Result<Vec<(i64, String, String)>, db::DbError> {
        self.rows(
            "SELECT id, source, account FROM events
              WHERE event_id = ?1 AND (CAST(?2 AS TEXT) IS NULL OR source = ?2)
              ORDER BY id LIMIT ?3",
            &[&event_id, &source, &(MAX_MATCHES + 1)],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
    }

    /// The exact stored body of an event; none once retention dropped it (or no such
    /// event).
    pub fn body(self, id: i64) -> Result<Option<Vec<u8>>, db::DbError> {
        self.row("SELECT body FROM payloads WHERE event = ?1", &[&id], |r| {
            Ok(r.get_ref(0)?.as_bytes()?.to_vec())
        })
    }

    /// The stored bodies of `source`'s newest events, newest first, at most `limit`; the
    /// pruned ones are left out.
    pub fn newest_bodies(self, source: &str, limit: i64) -> Result<Vec<Vec<u8>>, db::DbError> {
        self.rows(
            "SELECT p.body FROM events e JOIN payloads p ON p.event = e.id
              WHERE e.source = ?1 ORDER BY e.id DESC LIMIT ?2",
            &[&source, &limit],
            |r| Ok(r.get_ref(0)?.as_bytes()?.to_vec()),
        )
    }
}
