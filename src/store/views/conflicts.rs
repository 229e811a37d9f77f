//! Quarantined versions (`hookinbox conflicts`, the web inbox's conflicts pages): requests
//! that reused a stored event's identity with different bytes.

use rusqlite::types::Value;
use serde::Serialize;

use crate::store::db::{self, Db};

#[derive(Debug, Serialize)]
pub struct Conflict {
    pub id: i64,
    pub last_seen_at: String,
    /// When this version first arrived.
    pub received_at: String,
    pub source: String,
    pub account: String,
    pub event_id: String,
    /// How many times this version arrived.
    pub seen: i64,
    /// The stored event's hash, and this version's.
    pub original_sha256: String,
    pub sha256: String,
    pub size: i64,
    /// The stored event's row id (for `hookinbox show`); null once it was pruned away.
    pub original_event: Option<i64>,
}

impl Db<'_> {
    /// Quarantined versions, newest first: the `recent_conflicts` view, so that this listing, the
    /// web inbox and `sqlite3` agree. Only fixed fragments go into the SQL; values are
    /// parameters.
    pub fn conflicts(self, source: Option<&str>, limit: u32) -> Result<Vec<Conflict>, db::DbError> {
        let mut sql = String::from(
            "SELECT id, last_seen_at, received_at, source, account, event_id, seen,
                    original_sha256, sha256, size, original_event
               FROM recent_conflicts WHERE TRUE",
        );
        let mut params: Vec<Value> = Vec::new();
        if let Some(s) = source {
            sql.push_str(" AND source = ?");
            params.push(Value::Text(s.to_owned()));
        }
        sql.push_str(" ORDER BY last_seen_at DESC, id DESC LIMIT ?");
        params.push(Value::Integer(limit.into()));
        self.rows(&sql, &db::refs(&params), |r| {
            Ok(Conflict {
                id: r.get(0)?,
                last_seen_at: r.get(1)?,
                received_at: r.get(2)?,
                source: r.get(3)?,
                account: r.get(4)?,
                event_id: r.get(5)?,
                seen: r.get(6)?,
                original_sha256: r.get(7)?,
                sha256: r.get(8)?,
                size: r.get(9)?,
                original_event: r.get(10)?,
            })
        })
    }

    /// One quarantined version beside the stored original, for comparing them.
    pub fn conflict(self, id: i64) -> Result<Option<ConflictDetail>, db::DbError> {
        self.row(
            "SELECT c.source, c.event_id, c.event, c.seen,
                    c.original_sha256, e.size, o.body, o.headers, e.received_at,
                    c.sha256, c.size, c.body, c.headers, c.received_at
               FROM conflicts c
               LEFT JOIN events e ON e.id = c.event
               LEFT JOIN payloads o ON o.event = c.event
              WHERE c.id = ?1",
            &[&id],
            |r| {
                let bytes = |i| -> rusqlite::Result<Option<Vec<u8>>> {
                    Ok(r.get_ref(i)?.as_bytes_or_null()?.map(<[u8]>::to_vec))
                };
                Ok(ConflictDetail {
                    source: r.get(0)?,
                    event_id: r.get(1)?,
                    original_event: r.get(2)?,
                    seen: r.get(3)?,
                    original: ConflictSide {
                        sha256: r.get(4)?,
                        size: r.get::<Option<i64>>(5)?.unwrap_or(0),
                        body: bytes(6)?,
                        headers: r.get(7)?,
                        at: r.get::<Option<String>>(8)?.unwrap_or_default(),
                    },
                    quarantined: ConflictSide {
                        sha256: r.get(9)?,
                        size: r.get(10)?,
                        body: bytes(11)?,
                        headers: r.get(12)?,
                        at: r.get(13)?,
                    },
                })
            },
        )
    }
}

/// A quarantined version and the original it differs from.
#[derive(Debug)]
pub struct ConflictDetail {
    pub source: String,
    pub event_id: String,
    /// The stored event's row id; none once it was pruned away.
    pub original_event: Option<i64>,
    /// How many times this version arrived.
    pub seen: i64,
    pub original: ConflictSide,
    pub quarantined: ConflictSide,
}

/// One side of a conflict: the bytes as they arrived, while they are kept.
#[derive(Debug)]
pub struct ConflictSide {
    pub sha256: String,
    pub size: i64,
    /// None once retention dropped it.
    pub body: Option<Vec<u8>>,
    /// JSON `[[name, value], …]`.
    pub headers: Option<String>,
    /// When it arrived (inbox text; empty when the original is gone).
    pub at: String,
}
