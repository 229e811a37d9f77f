//! Storing one verified event: the event row, its payload and its delivery rows, or a
//! duplicate, or a conflict. Runs on the writer thread, inside the batch's transaction.

use rusqlite::{Connection, OptionalExtension, params};

use crate::clock;
use crate::store::{NewEvent, Origin, Stored, Version};

/// Stores `e`; `now` is the batch's commit time as inbox text.
pub fn store(conn: &Connection, e: &NewEvent, now: &str) -> rusqlite::Result<Stored> {
    // Valid UTF-8 is bound as TEXT so that `sqlite3` shows it; the bytes are the same.
    let text = if e.body_is_text {
        std::str::from_utf8(&e.body).ok()
    } else {
        None
    };
    let raw: &[u8] = &e.body;
    let body: &dyn rusqlite::ToSql = match &text {
        Some(t) => t,
        None => &raw,
    };
    let provider_time = e.provider_time.map(clock::iso_from_unix);
    let inserted: Option<i64> = conn
        .prepare_cached(
            "INSERT INTO events (source, account, event_id, sha256, size, event_type,
                                 provider_time, received_at, remote_addr, origin)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
             ON CONFLICT (source, account, event_id) DO NOTHING
             RETURNING id",
        )?
        .query_row(
            params![
                &*e.source,
                &*e.account,
                e.event_id,
                e.sha256_hex,
                e.body.len() as i64,
                e.event_type,
                provider_time,
                now,
                e.remote_addr,
                e.origin.as_str()
            ],
            |r| r.get(0),
        )
        .optional()?;
    if let Some(id) = inserted {
        conn.prepare_cached("INSERT INTO payloads (event, body, headers) VALUES (?1, ?2, ?3)")?
            .execute(params![id, body, e.headers])?;
        // Moved on once a minute (the time's first 16 characters, to the minute), so that
        // its page is not in every commit; the newest rows themselves cover the minute
        // (`stats::sources`).
        conn.prepare_cached(
            "INSERT INTO latest_received (source, received_at) VALUES (?1, ?2)
             ON CONFLICT (source) DO UPDATE SET received_at = excluded.received_at
              WHERE substr(excluded.received_at, 1, 16) > substr(latest_received.received_at, 1, 16)",
        )?
        .execute(params![&*e.source, now])?;
        let mut insert = conn.prepare_cached(
            "INSERT INTO deliveries (event, source, target, idempotency_key, order_key,
                                     order_version, next_attempt_at, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?7)",
        )?;
        let (order_key, order_version) = match &e.order {
            Some((key, version)) => (Some(key.as_str()), Some(value(version))),
            None => (None, None),
        };
        for (target, key) in &e.deliveries {
            insert.execute(params![
                id,
                &*e.source,
                target,
                key,
                order_key,
                order_version,
                now
            ])?;
        }
        return Ok(Stored::New);
    }
    let (original, original_sha, original_origin): (i64, String, String) = conn
        .prepare_cached(
            "SELECT id, sha256, origin FROM events
              WHERE source = ?1 AND account = ?2 AND event_id = ?3",
        )?
        .query_row(params![&*e.source, &*e.account, e.event_id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?;
    if original_sha == e.sha256_hex {
        return Ok(Stored::Duplicate);
    }
    // An event fetched from an API is never a conflict: the inbox already holds this
    // identity (signed, or fetched before), and that stays what is forwarded.
    if e.origin == Origin::Api {
        return Ok(Stored::Duplicate);
    }
    // A webhook of an event first fetched from the API: the API renders the same event with
    // its own layout, so the same JSON value is the same event. A real difference is still a
    // conflict; so is any difference once the fetched payload was pruned.
    if original_origin == Origin::Api.as_str() {
        let fetched: Option<Vec<u8>> = conn
            .prepare_cached("SELECT CAST(body AS BLOB) FROM payloads WHERE event = ?1")?
            .query_row([original], |r| r.get(0))
            .optional()?;
        if fetched.is_some_and(|f| crate::scheme::json::same_value(&f, &e.body, e.bookkeeping)) {
            return Ok(Stored::Duplicate);
        }
    }
    conn.prepare_cached(
        "INSERT INTO conflicts (event, source, account, event_id, original_sha256, sha256, size,
                                body, headers, received_at, last_seen_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10)
         ON CONFLICT (source, account, event_id, sha256)
         DO UPDATE SET seen = seen + 1, last_seen_at = excluded.last_seen_at",
    )?
    .execute(params![
        original,
        &*e.source,
        &*e.account,
        e.event_id,
        original_sha,
        e.sha256_hex,
        e.body.len() as i64,
        body,
        e.headers,
        now
    ])?;
    Ok(Stored::Conflict)
}

/// An order version as SQLite keeps it: in one column, a number or text, which SQLite
/// compares within its kind.
fn value(v: &Version) -> rusqlite::types::Value {
    use rusqlite::types::Value;
    match v {
        Version::Integer(i) => Value::Integer(*i),
        Version::Real(f) => Value::Real(*f),
        Version::Text(t) => Value::Text(t.clone()),
    }
}
