//! Dead deliveries (`hookinbox dead`, the web inbox's dead page): the candidates for
//! replay, newest first, each with both ids a replay can take.

use rusqlite::types::Value;
use serde::Serialize;

use crate::store::db::{self, Db, Dialect};

#[derive(Debug, Serialize)]
pub struct Dead {
    /// The delivery's row id.
    pub delivery: i64,
    /// The event's row id, for `hookinbox show`.
    pub event: i64,
    /// When the delivery died (its last change of state).
    pub died_at: String,
    pub source: String,
    pub account: String,
    pub event_id: String,
    pub target: String,
    pub attempts: i64,
    pub last_error: Option<String>,
    pub idempotency_key: String,
    pub received_at: String,
}

impl Db<'_> {
    /// Dead deliveries, newest first. The tables rather than the `dead_deliveries` view: the view
    /// has no event row id or account, and `show` needs the one to follow up. Same filter and
    /// order as the view, read in that order from `deliveries_dead` (the planner, without
    /// statistics, would rather collect every dead row and sort them; PostgreSQL's has them).
    /// Only fixed fragments go into the SQL; values are parameters.
    pub fn dead(
        self,
        source: Option<&str>,
        target: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Dead>, db::DbError> {
        let deliveries = match self.dialect() {
            Dialect::Sqlite => "deliveries d INDEXED BY deliveries_dead",
            Dialect::Postgres => "deliveries d",
        };
        let mut sql = format!(
            "SELECT d.id, d.event, d.updated_at, d.source, e.account, e.event_id, d.target,
                    d.attempts, d.last_error, d.idempotency_key, e.received_at
               FROM {deliveries} JOIN events e ON e.id = d.event
              WHERE d.state = 'dead'"
        );
        let mut params: Vec<Value> = Vec::new();
        if let Some(s) = source {
            sql.push_str(" AND d.source = ?");
            params.push(Value::Text(s.to_owned()));
        }
        if let Some(t) = target {
            sql.push_str(" AND d.target = ?");
            params.push(Value::Text(t.to_owned()));
        }
        sql.push_str(" ORDER BY d.updated_at DESC, d.id DESC LIMIT ?");
        params.push(Value::Integer(limit.into()));
        self.rows(&sql, &db::refs(&params), |r| {
            Ok(Dead {
                delivery: r.get(0)?,
                event: r.get(1)?,
                died_at: r.get(2)?,
                source: r.get(3)?,
                account: r.get(4)?,
                event_id: r.get(5)?,
                target: r.get(6)?,
                attempts: r.get(7)?,
                last_error: r.get(8)?,
                idempotency_key: r.get(9)?,
                received_at: r.get(10)?,
            })
        })
    }
}
