//! Replay: choosing deliveries by a [`Filter`], the [`ReplayPlan`] of what queuing them again
//! would do, and doing it a chunk at a time ([`requeue`]). Nothing is received again: a
//! replayed delivery keeps its idempotency key and its attempt numbering, and gets a fresh
//! retry schedule (`schedule_base = attempts`).
//!
//! Invariant: only an eligible delivery is changed, checked again inside the transaction
//! that changes it: not in flight (an attempt is running and will record its own result),
//! its payload still stored (retention may have dropped it), and under ordering not older
//! than the last version delivered for its key (it would only be superseded again).
//!
//! Callers: `hookinbox replay` plans on its own connection and requeues in short
//! `BEGIN IMMEDIATE` transactions of [`CHUNK`]; inside `serve`, plan on a read-only
//! connection and requeue through `Writer::job`, a chunk per job.

use rusqlite::types::Value;
use serde::Serialize;

use crate::store::db::{self, Db, Dialect};

/// Deliveries re-queued per transaction (one [`requeue`] call), so that a large replay never
/// holds the write lock for long: `serve`'s writer waits at most 2 s for a lock held by
/// another process, then answers webhooks 503, and a chunk is a few hundred row updates
/// by primary key.
pub const CHUNK: usize = 500;

/// The event of delivery `d` still has its body (retention did not prune it).
const HAS_PAYLOAD: &str = "EXISTS (SELECT 1 FROM payloads p WHERE p.event = d.event)";

/// What [`plan`] selects. Every field that is set must match (AND). Times are inbox text
/// (UTC ISO-8601 with milliseconds).
///
/// An empty filter selects nothing, not everything: see [`Filter::selects`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Every delivery of this event (its row id).
    pub event: Option<i64>,
    /// These deliveries (row ids).
    pub deliveries: Vec<i64>,
    pub source: Option<String>,
    pub target: Option<String>,
    /// The delivery's state word (`dead`, `delivered`, `pending`, `superseded`,
    /// `in_flight`).
    pub state: Option<String>,
    /// Events received at or after this time …
    pub since: Option<String>,
    /// … and before this one.
    pub until: Option<String>,
    /// The provider's event type, exactly.
    pub event_type: Option<String>,
    /// Text the delivery's `last_error` contains, ignoring ASCII case.
    pub error: Option<String>,
}

/// What the filter chose, as an operator would write it (`state=dead source=sw`), for logs.
impl std::fmt::Display for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        if let Some(e) = self.event {
            parts.push(format!("event={e}"));
        }
        if !self.deliveries.is_empty() {
            let ids: Vec<String> = self.deliveries.iter().map(i64::to_string).collect();
            parts.push(format!("deliveries={}", ids.join(",")));
        }
        for (name, value) in [
            ("source", &self.source),
            ("target", &self.target),
            ("state", &self.state),
            ("since", &self.since),
            ("until", &self.until),
            ("event_type", &self.event_type),
            ("error", &self.error),
        ] {
            if let Some(v) = value {
                parts.push(format!("{name}={v:?}"));
            }
        }
        f.write_str(&parts.join(" "))
    }
}

impl Filter {
    /// Whether the filter chooses deliveries by itself: an event, deliveries, a state, a
    /// start time, an event type or an error. A source, a target or an end time only narrow
    /// a choice; alone they would mean "everything of this target", which a slip of the
    /// keyboard must not replay. [`plan`] plans nothing for a filter that does not select.
    pub fn selects(&self) -> bool {
        self.event.is_some()
            || !self.deliveries.is_empty()
            || self.state.is_some()
            || self.since.is_some()
            || self.event_type.is_some()
            || self.error().is_some()
    }

    /// The error text, when it is text: an empty one would match every error (SQLite's
    /// `instr(x, '')` is 1), which is no choice at all.
    fn error(&self) -> Option<String> {
        self.error
            .as_deref()
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(str::to_owned)
    }

    /// On SQLite, the state as a fixed condition when it has a partial index of its own
    /// (`deliveries_dead`, `deliveries_leases`): the planner uses such an index only for a
    /// condition it can read, not a bound value, and no index leads with the state since
    /// schema 8. Other states are a parameter, and without a source and target a walk of
    /// the table.
    fn partial_state(&self, dialect: Dialect) -> Option<&'static str> {
        match (dialect, self.state.as_deref()) {
            (Dialect::Sqlite, Some("dead")) => Some("d.state = 'dead'"),
            (Dialect::Sqlite, Some("in_flight")) => Some("d.state = 'in_flight'"),
            _ => None,
        }
    }

    /// The WHERE clause over `d` (deliveries) and `e` (events) and its parameters. Only
    /// fixed fragments go into the SQL; every value is a parameter.
    fn clause(&self, dialect: Dialect) -> (String, Vec<Value>) {
        let mut clauses: Vec<String> = Vec::new();
        let mut values: Vec<Value> = Vec::new();
        let mut text = |clause: &str, value: &Option<String>| {
            if let Some(v) = value {
                clauses.push(clause.to_owned());
                values.push(Value::Text(v.clone()));
            }
        };
        let fixed_state = self.partial_state(dialect);
        text("d.source = ?", &self.source);
        text("d.target = ?", &self.target);
        if fixed_state.is_none() {
            text("d.state = ?", &self.state);
        }
        text("e.received_at >= ?", &self.since);
        text("e.received_at < ?", &self.until);
        if let Some(t) = &self.event_type {
            let (matches, pattern) = dialect.type_pattern("e.event_type", t);
            text(&matches, &Some(pattern));
        }
        // instr rather than LIKE: the operator's text may hold % or _, which LIKE would
        // take as wildcards.
        let contains = match dialect {
            Dialect::Sqlite => "instr(lower(d.last_error), lower(?)) > 0",
            Dialect::Postgres => "strpos(lower(d.last_error), lower(?)) > 0",
        };
        text(contains, &self.error());
        clauses.extend(fixed_state.map(str::to_owned));
        if let Some(event) = self.event {
            clauses.push("d.event = ?".to_owned());
            values.push(Value::Integer(event));
        }
        if !self.deliveries.is_empty() {
            clauses.push(format!(
                "d.id IN ({})",
                vec!["?"; self.deliveries.len()].join(", ")
            ));
            values.extend(self.deliveries.iter().map(|id| Value::Integer(*id)));
        }
        if clauses.is_empty() {
            clauses.push("TRUE".to_owned());
        }
        (clauses.join(" AND "), values)
    }
}

/// What replaying a [`Filter`] would do.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReplayPlan {
    /// Matching deliveries left alone because an attempt is running now.
    pub in_flight: usize,
    /// Matching deliveries whose payload retention already dropped: they cannot be sent.
    pub pruned: usize,
    /// Matching deliveries under ordering whose key has a version at least as new
    /// delivered: sending them again would break the order.
    pub superseded: usize,
    /// What would be queued again, by delivery id.
    pub eligible: Vec<Listed>,
}

/// One delivery, by every name an operator may know it by.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Listed {
    pub delivery: i64,
    /// The event's row id.
    pub event: i64,
    pub source: String,
    /// The provider's event id.
    pub event_id: String,
    pub target: String,
    /// Its state now (before the replay).
    pub state: String,
}

/// The deliveries `f` selects, counted by why some cannot be replayed, and listed where
/// they can. Only reads. The counts and the list are separate short statements, so a
/// delivery that changes between them can be counted in one and listed in the other;
/// [`requeue`] checks eligibility again in its own transaction, which is what counts.
pub fn plan(db: Db, f: &Filter) -> Result<ReplayPlan, db::DbError> {
    if !f.selects() {
        return Ok(ReplayPlan::default());
    }
    let (filter, values) = f.clause(db.dialect());
    let params = db::refs(&values);
    let outdated = outdated(db.dialect());
    let count = |extra: &str| -> Result<usize, db::DbError> {
        let sql = format!(
            "SELECT count(*) FROM deliveries d JOIN events e ON e.id = d.event
              WHERE {filter} AND {extra}"
        );
        let n: i64 = db.value(&sql, &params)?;
        Ok(usize::try_from(n).unwrap_or(0))
    };
    let in_flight = count("d.state = 'in_flight'")?;
    let pruned = count(&format!("d.state <> 'in_flight' AND NOT {HAS_PAYLOAD}"))?;
    let superseded = count(&format!(
        "d.state <> 'in_flight' AND {HAS_PAYLOAD} AND {outdated}"
    ))?;
    let sql = listing(f, &filter, db.dialect());
    let eligible = db.rows(&sql, &params, |r| {
        Ok(Listed {
            delivery: r.get(0)?,
            event: r.get(1)?,
            source: r.get(2)?,
            event_id: r.get(3)?,
            target: r.get(4)?,
            state: r.get(5)?,
        })
    })?;
    Ok(ReplayPlan {
        in_flight,
        pruned,
        superseded,
        eligible,
    })
}

/// The statement listing the deliveries a filter (its clause `filter`) would queue again.
fn listing(f: &Filter, filter: &str, dialect: Dialect) -> String {
    // `+d.id` keeps SQLite from walking the table in id order to spare the sort, where a
    // partial index holds the few rows wanted.
    let order = match f.partial_state(dialect) {
        Some(_) => "+d.id",
        None => "d.id",
    };
    format!(
        "SELECT d.id, d.event, d.source, e.event_id, d.target, d.state
           FROM deliveries d JOIN events e ON e.id = d.event
          WHERE {filter} AND {} ORDER BY {order}",
        eligible(dialect)
    )
}

/// Queues these planned deliveries again, due now, under their keys; returns how many it
/// changed. One chunk (at most [`CHUNK`]): the caller owns the transaction. Each is checked
/// again here, since an attempt may have started, or retention run, after the plan; and
/// only while it is still in the state it was planned in, so that one delivered meanwhile
/// (chosen as `pending`, or by its last error) is not sent again.
pub fn requeue(db: Db, planned: &[Listed], now: &str) -> Result<usize, db::DbError> {
    if planned.is_empty() {
        return Ok(0);
    }
    // The cast is PostgreSQL's: it types a VALUES list from its text parameters otherwise.
    let marks = vec!["(CAST(? AS BIGINT), ?)"; planned.len()].join(", ");
    // A new schedule starts (schedule_base = attempts so far); the attempt numbers the
    // target sees count on. Eligibility is checked row by row, correlated, so the update
    // touches only the chunk's rows rather than scanning the table.
    let sql = format!(
        "UPDATE deliveries AS d
            SET state = 'pending', next_attempt_at = ?1, schedule_base = attempts,
                lease_until = NULL, last_error = 'replayed by the operator', updated_at = ?1
          WHERE (d.id, d.state) IN (VALUES {marks}) AND {}",
        eligible(db.dialect())
    );
    let mut params: Vec<Value> = vec![Value::Text(now.to_owned())];
    for d in planned {
        params.push(Value::Integer(d.delivery));
        params.push(Value::Text(d.state.clone()));
    }
    db.execute(&sql, &db::refs(&params))
}

/// A delivery `d` that replay may change.
fn eligible(dialect: Dialect) -> String {
    format!(
        "d.state <> 'in_flight' AND {HAS_PAYLOAD} AND NOT {}",
        outdated(dialect)
    )
}

/// Under ordering, a delivery whose key already delivered a version at least as new: queued
/// again, it would only be superseded.
fn outdated(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Sqlite => super::sqlite::queue::OUTDATED,
        Dialect::Postgres => super::postgres::OUTDATED,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_reads_in_a_log_line_as_the_operator_wrote_it() {
        let f = Filter {
            deliveries: vec![3, 4],
            source: Some("sw".into()),
            state: Some("dead".into()),
            error: Some("status 503".into()),
            ..Filter::default()
        };
        assert_eq!(
            f.to_string(),
            r#"deliveries=3,4 source="sw" state="dead" error="status 503""#
        );
        assert_eq!(Filter::default().to_string(), "");
    }

    #[test]
    fn dead_and_in_flight_are_read_off_their_partial_indexes() {
        // No index leads with the state since schema 8: a bound state made every replay of
        // dead deliveries walk the whole table.
        let (_dir, conn) = crate::store::sqlite::schema::temp_inbox();
        for (state, index) in [
            ("dead", "deliveries_dead"),
            ("in_flight", "deliveries_leases"),
        ] {
            let f = Filter {
                state: Some(state.into()),
                ..Filter::default()
            };
            let (filter, values) = f.clause(Dialect::Sqlite);
            assert!(values.is_empty(), "{values:?}");
            let sql = listing(&f, &filter, Dialect::Sqlite);
            let plan = crate::store::sqlite::schema::query_plan(&conn, &sql, []);
            assert!(
                plan.iter()
                    .any(|step| step == &format!("SCAN d USING INDEX {index}")),
                "{state}: {plan:?}"
            );
        }
    }

    #[test]
    fn only_a_filter_that_chooses_something_selects() {
        let narrowing = Filter {
            source: Some("sw".into()),
            target: Some("app".into()),
            until: Some("2026-11-30T08:00:00.000Z".into()),
            ..Filter::default()
        };
        assert!(!Filter::default().selects());
        assert!(!narrowing.selects());
        for chosen in [
            Filter {
                state: Some("dead".into()),
                ..narrowing.clone()
            },
            Filter {
                error: Some("refused".into()),
                ..narrowing.clone()
            },
            Filter {
                deliveries: vec![3],
                ..narrowing.clone()
            },
        ] {
            assert!(chosen.selects(), "{chosen:?}");
        }
    }
}
