//! The event listing: `hookinbox events` (a page, or `--follow`) and the web inbox's events
//! page and overview, newest first, with what became of each event's deliveries.
//!
//! The status is the `status` word of the `recent_events` view, so the listings, the view
//! and an operator's `sqlite3` always agree on what "dead" means. One statement reads a page
//! and, per event, its deliveries as a JSON array (the database's JSON functions), so that
//! status and deliveries come from the same snapshot without an explicit transaction.

use anyhow::Context as _;
use rusqlite::types::Value;
use serde::{Deserialize, Serialize};

use crate::store::db::{self, Db, Dialect};
use crate::store::sqlite::timeline;

/// The most events one page may ask for; a follower reads a burst in pages of this many.
pub const MAX_PAGE: i64 = 10_000;

/// Which events a listing shows. Every value is a parameter of the statement, never SQL.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventFilter {
    pub source: Option<String>,
    /// The status word of `recent_events`: stored, pending, delivered or dead.
    pub status: Option<String>,
    pub event_type: Option<String>,
    /// Only events whose provider event id contains this text.
    pub id_contains: Option<String>,
    /// Received at or after this time (inbox text).
    pub since: Option<String>,
    /// Received before this time (inbox text).
    pub until: Option<String>,
}

/// Which stretch of the filtered events to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Range {
    /// Newest first, at most `limit`, only ids below `before` when given.
    Page { before: Option<i64>, limit: i64 },
    /// Newest first, at most `limit`, ids up to and including `id`.
    UpTo { id: i64, limit: i64 },
    /// Oldest first, ids above `after` up to and including `upto`.
    Between { after: i64, upto: i64 },
    /// Oldest first, these ids.
    Ids(Vec<i64>),
}

/// One event as a listing shows it.
#[derive(Debug, Clone, Serialize)]
pub struct EventRow {
    pub id: i64,
    pub received_at: String,
    pub source: String,
    pub account: String,
    pub event_id: String,
    pub event_type: Option<String>,
    pub size: i64,
    pub status: String,
    pub pruned: bool,
    /// `webhook`, or `api` (fetched by `recover` from the provider's API).
    pub origin: String,
    pub deliveries: Vec<DeliveryState>,
}

/// Where one of an event's deliveries stands.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeliveryState {
    pub target: String,
    pub state: String,
    pub attempts: i64,
}

fn select(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Sqlite => {
            "
SELECT v.id, v.received_at, v.source, v.account, v.event_id, v.event_type, v.size,
       v.status, v.pruned, v.origin,
       (SELECT json_group_array(json_object('target', d.target, 'state', d.state,
                                            'attempts', d.attempts))
          FROM (SELECT target, state, attempts FROM deliveries
                 WHERE event = v.id ORDER BY id) d)
  FROM recent_events v
 WHERE TRUE"
        }
        Dialect::Postgres => {
            "
SELECT v.id, v.received_at, v.source, v.account, v.event_id, v.event_type, v.size,
       v.status, v.pruned, v.origin,
       (SELECT json_agg(json_build_object('target', d.target, 'state', d.state,
                                          'attempts', d.attempts) ORDER BY d.id)
          FROM deliveries d WHERE d.event = v.id)
  FROM recent_events v
 WHERE TRUE"
        }
    }
}

impl Db<'_> {
    /// The events `filter` selects, in `range`.
    ///
    /// Plans, so that a page of a large inbox stays a short query: by default SQLite walks
    /// the primary key downwards from `before` and stops after a page of matches. The unary
    /// `+` keeps it from using the identity index for the source, which would collect
    /// every match and sort them all, on every page. A time window bounds the ids walked
    /// ([`timeline::window`]). PostgreSQL's planner has statistics to choose by, and no
    /// unary `+` on text.
    pub fn events(self, filter: &EventFilter, range: &Range) -> anyhow::Result<Vec<EventRow>> {
        let mut sql = String::from(select(self.dialect()));
        let (unindexed, contains) = match self.dialect() {
            Dialect::Sqlite => ("+", "instr(v.event_id, ?) > 0"),
            Dialect::Postgres => ("", "strpos(v.event_id, ?) > 0"),
        };
        let mut params: Vec<Value> = Vec::new();
        let mut test = |clause: &str, value: Value| {
            sql.push_str(clause);
            params.push(value);
        };
        if let Some(s) = &filter.source {
            test(&format!(" AND {unindexed}v.source = ?"), s.clone().into());
        }
        if let Some(t) = &filter.event_type {
            let (matches, pattern) = self.dialect().type_pattern("v.event_type", t);
            test(&format!(" AND {matches}"), pattern.into());
        }
        if let Some(s) = &filter.status {
            test(" AND v.status = ?", s.clone().into());
        }
        if let Some(q) = &filter.id_contains {
            test(&format!(" AND {contains}"), q.clone().into());
        }
        match range {
            Range::Page { before, .. } => {
                if let Some(id) = before {
                    test(" AND v.id < ?", (*id).into());
                }
            }
            Range::UpTo { id, .. } => test(" AND v.id <= ?", (*id).into()),
            Range::Between { after, upto } => {
                test(" AND v.id > ?", (*after).into());
                test(" AND v.id <= ?", (*upto).into());
            }
            Range::Ids(ids) => {
                let marks = vec!["?"; ids.len()].join(", ");
                sql.push_str(&format!(" AND v.id IN ({marks})"));
                params.extend(ids.iter().map(|id| Value::Integer(*id)));
            }
        }
        timeline::window(
            self,
            filter.since.as_deref(),
            filter.until.as_deref(),
            &mut sql,
            &mut params,
        )
        .context("finding the time window's events")?;
        match range {
            Range::Page { limit, .. } | Range::UpTo { limit, .. } => {
                sql.push_str(" ORDER BY v.id DESC LIMIT ?");
                params.push(Value::Integer(*limit));
            }
            Range::Between { .. } | Range::Ids(_) => sql.push_str(" ORDER BY v.id"),
        }
        // Collected before returning, so that the statement is reset and holds no read
        // snapshot open (which would keep the WAL from being checkpointed while a follower
        // waits).
        self.rows(&sql, &db::refs(&params), |r| {
            Ok((
                EventRow {
                    id: r.get(0)?,
                    received_at: r.get(1)?,
                    source: r.get(2)?,
                    account: r.get(3)?,
                    event_id: r.get(4)?,
                    event_type: r.get(5)?,
                    size: r.get(6)?,
                    status: r.get(7)?,
                    pruned: r.get(8)?,
                    origin: r.get(9)?,
                    deliveries: Vec::new(),
                },
                r.get::<Option<String>>(10)?,
            ))
        })?
        .into_iter()
        .map(|(mut e, deliveries)| {
            // Built by the database's JSON functions just above, so it parses; an empty
            // list when there is nothing.
            e.deliveries = match deliveries {
                Some(json) => serde_json::from_str(&json)
                    .with_context(|| format!("reading the deliveries of event {}", e.id))?,
                None => Vec::new(),
            };
            Ok(e)
        })
        .collect()
    }

    /// The highest event id in the inbox, 0 when it has none.
    pub fn newest_event_id(self) -> Result<i64, db::DbError> {
        self.value("SELECT coalesce(max(id), 0) FROM events", &[])
    }

    /// Whether the inbox holds an event with this row id.
    pub fn has_event(self, id: i64) -> Result<bool, db::DbError> {
        Ok(self
            .row("SELECT 1 FROM events WHERE id = ?1", &[&id], |_| Ok(()))?
            .is_some())
    }
}

/// Which events a follower (`events --follow`) has not looked at yet. Another process
/// cannot be told of a commit, so a follower polls, and each look is one read of the ids
/// above what it has seen.
pub enum Follow {
    /// SQLite: ids only grow, since the one writer inserts them in commit order, so "above
    /// the last id seen" is exactly "new". (Retention deleting the newest row could let its
    /// id be used again, which this would not see; it deletes only events older than
    /// `keep_identity`, so only after an inbox had no new event for that long.)
    Last(i64),
    /// PostgreSQL: replicas take ids from one sequence as they insert, and their
    /// transactions commit in another order, so an id below the highest seen can still
    /// appear, until every transaction that took one has ended: a batch commits within
    /// [`crate::store::postgres::BATCH_TIMEOUT`] or is rolled back. So the ids above `settled`
    /// that were looked at are remembered, and `settled` moves up to the highest id seen
    /// [`LOOK_BACK`] ago.
    Window {
        settled: i64,
        looked: std::collections::BTreeSet<i64>,
        marks: std::collections::VecDeque<(std::time::Instant, i64)>,
    },
}

/// Past this, no transaction that took an id then is still open (twice the batch timeout).
const LOOK_BACK: std::time::Duration =
    std::time::Duration::from_secs(2 * crate::store::postgres::BATCH_TIMEOUT.as_secs());

impl Follow {
    /// After a first page, which showed the events up to `seen`.
    pub fn start(db: Db, seen: i64) -> Result<Follow, db::DbError> {
        Ok(match db.dialect() {
            Dialect::Sqlite => Follow::Last(seen),
            Dialect::Postgres => {
                // Events committed before the start are taken as looked at; ids just below
                // `seen` may still be in flight, so the window starts a page of ids back.
                let settled = seen.saturating_sub(MAX_PAGE).max(0);
                let looked = db.rows(
                    "SELECT id FROM events WHERE id > ? AND id <= ?",
                    &[&settled, &seen],
                    |r| r.get(0),
                )?;
                Follow::Window {
                    settled,
                    looked: looked.into_iter().collect(),
                    marks: [(std::time::Instant::now(), seen)].into(),
                }
            }
        })
    }

    /// Events already printed (the first page).
    pub fn looked_at(&mut self, ids: impl Iterator<Item = i64>) {
        if let Follow::Window {
            settled, looked, ..
        } = self
        {
            looked.extend(ids.filter(|id| id > settled));
        }
    }

    /// The events committed since the last look, as ranges to read (oldest first, a page
    /// each at most): each event is handed out once, when its id first appears.
    pub fn new_events(&mut self, db: Db) -> Result<Vec<Range>, db::DbError> {
        match self {
            Follow::Last(seen) => {
                let newest = db.newest_event_id()?;
                // Retention deleted every event since the last look (row ids are reused
                // once the newest row is gone): count on from what is there now.
                if newest < *seen {
                    *seen = newest;
                }
                let mut ranges = Vec::new();
                while *seen < newest {
                    let upto = newest.min(seen.saturating_add(MAX_PAGE));
                    ranges.push(Range::Between { after: *seen, upto });
                    *seen = upto;
                }
                Ok(ranges)
            }
            Follow::Window {
                settled,
                looked,
                marks,
            } => {
                let ids: Vec<i64> = db.rows(
                    "SELECT id FROM events WHERE id > ? ORDER BY id",
                    &[&*settled],
                    |r| r.get(0),
                )?;
                let new: Vec<i64> = ids.into_iter().filter(|id| !looked.contains(id)).collect();
                looked.extend(&new);
                let highest = looked.last().copied().unwrap_or(*settled);
                marks.push_back((std::time::Instant::now(), highest));
                while let Some(&(at, id)) = marks.front()
                    && at.elapsed() > LOOK_BACK
                {
                    *settled = (*settled).max(id);
                    marks.pop_front();
                }
                *looked = looked.split_off(&(*settled + 1));
                Ok(new
                    .chunks(crate::store::replay::CHUNK)
                    .map(|c| Range::Ids(c.to_vec()))
                    .collect())
            }
        }
    }
}
