//! How each source and target is doing, read from the inbox: the queries behind the web
//! inbox's overview (over the last hour) and the alert conditions (over their own windows).
//! The source queries read a time window (on SQLite the rows after its boundary by id,
//! [`super::timeline`], and the newest event per source from `latest_received`; on
//! PostgreSQL the index `events_age`), the attempt query the index `attempts_started`;
//! the queue's (pending and dead per target) read every pending or dead row of the target,
//! on SQLite its stretch of `deliveries_due` ([`super::sqlite::read::backlog`]), on PostgreSQL
//! through `deliveries_state`; either stays short while the backlog and the dead rows kept
//! are thousands, not millions.

use crate::store::db::{Db, DbError, Dialect};

/// One source over a window.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceStats {
    pub source: String,
    /// Events committed within the window.
    pub events: i64,
    /// When the newest event was committed: on SQLite even after retention removed it
    /// (`latest_received`), on PostgreSQL while its row is left.
    pub last_received: Option<String>,
}

/// One target over a window, and its queue now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TargetStats {
    pub source: String,
    pub target: String,
    /// Attempts started within the window, and how many of them failed (retry or dead).
    pub attempts: i64,
    pub failed: i64,
    /// Deliveries pending or in flight now, and when the oldest of them was created.
    pub pending: i64,
    pub oldest_pending: Option<String>,
    /// Dead deliveries now.
    pub dead: i64,
}

impl TargetStats {
    /// The failed share of the window's attempts, if there were any.
    pub fn failure_share(&self) -> Option<f64> {
        (self.attempts > 0).then(|| self.failed as f64 / self.attempts as f64)
    }
}

/// Each named source since `since` (inbox time text).
pub fn sources(db: Db, names: &[String], since: &str) -> Result<Vec<SourceStats>, DbError> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let (counts, latest) = match db {
        // No index by time on SQLite: the window is the rows after its boundary by id.
        // The newest event of each source is the window's newest or, before the window,
        // `latest_received`, which the writer moves on once a minute (`ingest::store`):
        // the windows asked for here are minutes long.
        Db::Sqlite(conn) => {
            let mut counts = Vec::new();
            let mut latest = db.rows(
                "SELECT source, received_at FROM latest_received",
                &[],
                |r| Ok((r.get::<String>(0)?, r.get::<String>(1)?)),
            )?;
            for (source, n, newest) in db.rows(
                // `+source`: grouping by the identity index would read every row.
                "SELECT source, count(*), max(received_at) FROM events
                  WHERE id >= ?1 AND received_at >= ?2 GROUP BY +source",
                &[&super::sqlite::timeline::first_id_at(conn, since)?, &since],
                |r| Ok((r.get::<String>(0)?, r.get::<i64>(1)?, r.get::<String>(2)?)),
            )? {
                match latest.iter_mut().find(|(s, _)| *s == source) {
                    Some((_, t)) if *t >= newest => {}
                    Some((_, t)) => *t = newest,
                    None => latest.push((source.clone(), newest)),
                }
                counts.push((source, n));
            }
            (counts, latest)
        }
        Db::Postgres(_) => {
            let (mut counts, mut latest) = (Vec::new(), Vec::new());
            for name in names {
                counts.push((
                    name.clone(),
                    db.value(
                        "SELECT count(*) FROM events WHERE source = ?1 AND received_at >= ?2",
                        &[name, &since],
                    )?,
                ));
                let last: Option<String> = db.value(
                    "SELECT max(received_at) FROM events WHERE source = ?1",
                    &[name],
                )?;
                latest.extend(last.map(|t| (name.clone(), t)));
            }
            (counts, latest)
        }
    };
    Ok(names
        .iter()
        .map(|name| SourceStats {
            source: name.clone(),
            events: counts
                .iter()
                .find(|(s, _)| s == name)
                .map_or(0, |(_, n)| *n),
            last_received: latest
                .iter()
                .find(|(s, _)| s == name)
                .map(|(_, t)| t.clone()),
        })
        .collect())
}

/// Each named (source, target) pair: attempts since `since`, and the queue now.
pub fn targets(
    db: Db,
    pairs: &[(String, String)],
    since: &str,
) -> Result<Vec<TargetStats>, DbError> {
    let mut out: Vec<TargetStats> = pairs
        .iter()
        .map(|(source, target)| TargetStats {
            source: source.clone(),
            target: target.clone(),
            ..TargetStats::default()
        })
        .collect();
    let find = |source: String, target: String| -> Option<usize> {
        out.iter()
            .position(|t| t.source == source && t.target == target)
    };
    let mut updates: Vec<(usize, Update)> = Vec::new();
    // CASE, not a sum of the comparison: PostgreSQL has no sum of booleans.
    for (s, t, n, failed) in db.rows(
        "SELECT d.source, d.target, count(*),
                sum(CASE WHEN a.outcome <> 'delivered' THEN 1 ELSE 0 END)
           FROM attempts a JOIN deliveries d ON d.id = a.delivery
          WHERE a.started_at >= ?1 GROUP BY 1, 2",
        &[&since],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
    )? {
        if let Some(i) = find(s, t) {
            updates.push((i, Update::Attempts(n, failed)));
        }
    }
    match db {
        // Per target, from its stretch of `deliveries_due`: no index leads with the state.
        Db::Sqlite(conn) => {
            for (i, t) in out.iter().enumerate() {
                let b = super::sqlite::read::backlog(conn, &t.source, &t.target)?;
                if let Some((_, created)) = b.first {
                    updates.push((i, Update::Pending(b.pending + b.in_flight, created)));
                }
                updates.push((i, Update::Dead(b.dead)));
            }
        }
        Db::Postgres(_) => {
            for (s, t, n, oldest) in db.rows(
                "SELECT source, target, count(*), min(created_at) FROM deliveries
                  WHERE state IN ('pending', 'in_flight') GROUP BY 1, 2",
                &[],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )? {
                if let Some(i) = find(s, t) {
                    updates.push((i, Update::Pending(n, oldest)));
                }
            }
            for (s, t, n) in db.rows(
                "SELECT source, target, count(*) FROM deliveries WHERE state = 'dead' GROUP BY 1, 2",
                &[],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )? {
                if let Some(i) = find(s, t) {
                    updates.push((i, Update::Dead(n)));
                }
            }
        }
    }
    for (i, update) in updates {
        let t = &mut out[i];
        match update {
            Update::Attempts(n, failed) => (t.attempts, t.failed) = (n, failed),
            Update::Pending(n, oldest) => (t.pending, t.oldest_pending) = (n, Some(oldest)),
            Update::Dead(n) => t.dead = n,
        }
    }
    Ok(out)
}

enum Update {
    Attempts(i64, i64),
    Pending(i64, String),
    Dead(i64),
}

/// Per source, the conflicts seen since `since` (inbox text): how many, and the first
/// time one was seen.
pub fn new_conflicts(db: Db, since: &str) -> Result<Vec<(String, i64, String)>, DbError> {
    db.rows(
        "SELECT source, count(*), min(last_seen_at) FROM conflicts
          WHERE last_seen_at >= ?1 GROUP BY source ORDER BY source",
        &[&since],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )
}

/// Per (source, target), the deliveries that died since `since` (inbox text), but those of
/// `except` (a source whose dead deliveries are not news): how many, and when the first
/// died. Read from `deliveries_dead` on SQLite, which the planner would not choose alone.
pub fn new_dead(
    db: Db,
    since: &str,
    except: &str,
) -> Result<Vec<(String, String, i64, String)>, DbError> {
    let deliveries = match db.dialect() {
        Dialect::Sqlite => "deliveries INDEXED BY deliveries_dead",
        Dialect::Postgres => "deliveries",
    };
    db.rows(
        &format!(
            "SELECT source, target, count(*), min(updated_at) FROM {deliveries}
              WHERE state = 'dead' AND updated_at >= ?1 AND source <> ?2
              GROUP BY 1, 2 ORDER BY 1, 2"
        ),
        &[&since, &except],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
    )
}
