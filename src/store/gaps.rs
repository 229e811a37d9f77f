//! When each source was receiving, the windows in which it was not (gaps), and what recovery
//! asked providers for. `serve` writes a source's row at start, at every heartbeat and at a
//! clean stop (all through the writer); a start finds the window since the row was last
//! written and records it as a gap. `hookinbox gaps` reads them, `recover` fills them.
//!
//! Times are inbox text (`clock::iso`), so that `sqlite3` shows them and text order is time
//! order.

use std::collections::{HashMap, HashSet};

use rusqlite::{Connection, params};
use serde::Serialize;

use crate::store::db::{self, Db};

/// One window in which a source was not receiving.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Gap {
    pub id: i64,
    pub source: String,
    /// `down` (serve was not running) or `rejecting` (it refused every request).
    pub kind: String,
    pub started_at: String,
    pub ended_at: String,
    pub detail: String,
    pub recovered_at: Option<String>,
    pub recovery: Option<String>,
}

impl Gap {
    /// Logs the gap as found, `what` saying how (every place that records one says so).
    pub fn warn(&self, what: &str) {
        tracing::warn!(
            source = self.source,
            from = self.started_at,
            until = self.ended_at,
            detail = self.detail,
            "{what}"
        );
    }
}

/// A run of refused requests with no accepted one since: the receiving side's view, carried
/// by each heartbeat so that a crash in the middle of it still knows where it began.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub since: String,
    pub last: String,
    /// Refused requests in the run, by what they were answered (`401`, `503`).
    pub refused: Vec<(u16, u64)>,
}

impl Run {
    pub fn count(&self) -> u64 {
        self.refused.iter().map(|(_, n)| n).sum()
    }

    /// "refused 12 requests (401 ×10, 503 ×2)"
    pub fn describe(&self) -> String {
        let parts: Vec<String> = self
            .refused
            .iter()
            .map(|(status, n)| format!("{status} ×{n}"))
            .collect();
        let n = self.count();
        let requests = if n == 1 { "request" } else { "requests" };
        format!("refused {n} {requests} ({})", parts.join(", "))
    }

    fn encode(&self) -> String {
        let parts: Vec<String> = self
            .refused
            .iter()
            .map(|(status, n)| format!("{status}:{n}"))
            .collect();
        parts.join(",")
    }

    fn decode(since: String, last: String, text: &str) -> Run {
        let refused = text
            .split(',')
            .filter_map(|p| {
                let (s, n) = p.split_once(':')?;
                Some((s.parse().ok()?, n.parse().ok()?))
            })
            .collect();
        Run {
            since,
            last,
            refused,
        }
    }
}

/// What one heartbeat writes for a source.
#[derive(Debug, Clone)]
pub struct Beat {
    pub source: String,
    /// A run of refusals still open (no accepted request since it began).
    pub open: Option<Run>,
    /// Runs that ended (an accepted request came) since the last heartbeat: each is a gap.
    pub closed: Vec<Run>,
}

const GAP_COLUMNS: &str = "id, source, kind, started_at, ended_at, detail, recovered_at, recovery";

fn gap(r: &db::Row) -> rusqlite::Result<Gap> {
    Ok(Gap {
        id: r.get(0)?,
        source: r.get(1)?,
        kind: r.get(2)?,
        started_at: r.get(3)?,
        ended_at: r.get(4)?,
        detail: r.get(5)?,
        recovered_at: r.get(6)?,
        recovery: r.get(7)?,
    })
}

fn insert_gap(
    db: Db,
    source: &str,
    kind: &str,
    started_at: &str,
    ended_at: &str,
    detail: &str,
) -> Result<Gap, db::DbError> {
    db.row(
        &format!(
            "INSERT INTO gaps (source, kind, started_at, ended_at, detail)
             VALUES (?1, ?2, ?3, ?4, ?5) RETURNING {GAP_COLUMNS}"
        ),
        &[&source, &kind, &started_at, &ended_at, &detail],
        gap,
    )?
    .ok_or_else(|| db::DbError::Convert("INSERT … RETURNING gave no row".into()))
}

/// A source's row as the previous serve left it.
struct LastSeen {
    heartbeat: String,
    stopped: Option<String>,
    since: Option<String>,
    last: Option<String>,
    by: String,
}

/// A source's rows (`?1`), read by [`last_seen`]; PostgreSQL's starts add which replica's.
const LAST_SEEN: &str = "SELECT heartbeat_at, stopped_at, rejecting_since, rejecting_last,
                                coalesce(rejected_by, '')
                           FROM receiving WHERE source = ?1";

fn last_seen(r: &db::Row) -> rusqlite::Result<LastSeen> {
    Ok(LastSeen {
        heartbeat: r.get(0)?,
        stopped: r.get(1)?,
        since: r.get(2)?,
        last: r.get(3)?,
        by: r.get(4)?,
    })
}

/// A heartbeat's open run of refusals as `receiving` keeps it: since, last, how many, by
/// what.
fn open_run(b: &Beat) -> (Option<&str>, Option<&str>, i64, Option<String>) {
    match &b.open {
        Some(run) => (
            Some(run.since.as_str()),
            Some(run.last.as_str()),
            run.count() as i64,
            Some(run.encode()),
        ),
        None => (None, None, 0, None),
    }
}

/// At serve's start: for each configured source seen receiving before, the window since it
/// was last seen is recorded as a gap (from its clean stop, or from its last heartbeat after
/// a crash, or from the start of a run of refusals that was still open); from `now` it is
/// receiving again. Returns the gaps recorded.
pub fn start(conn: &Connection, sources: &[String], now: &str) -> rusqlite::Result<Vec<Gap>> {
    let mut gaps = Vec::new();
    for source in sources {
        let last = Db::Sqlite(conn).row(LAST_SEEN, &[source], last_seen)?;
        if let Some((from, detail)) = last.and_then(|l| down_since(l, now)) {
            gaps.push(insert_gap(
                Db::Sqlite(conn),
                source,
                "down",
                &from,
                now,
                &detail,
            )?);
        }
        conn.prepare_cached(
            "INSERT INTO receiving (source, started_at, heartbeat_at) VALUES (?1, ?2, ?2)
             ON CONFLICT (source) DO UPDATE SET
                 started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at,
                 stopped_at = NULL, rejecting_since = NULL, rejecting_last = NULL,
                 rejected = 0, rejected_by = NULL",
        )?
        .execute(params![source, now])?;
    }
    Ok(gaps)
}

/// A heartbeat: each source is receiving at `now`, with its open run of refusals if any;
/// the runs that closed are recorded as gaps, which are returned.
pub fn beat(conn: &Connection, beats: &[Beat], now: &str) -> rusqlite::Result<Vec<Gap>> {
    let mut gaps = Vec::new();
    for b in beats {
        let (since, last, count, by) = open_run(b);
        conn.prepare_cached(
            "INSERT INTO receiving (source, started_at, heartbeat_at, rejecting_since,
                                    rejecting_last, rejected, rejected_by)
             VALUES (?1, ?2, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (source) DO UPDATE SET
                 heartbeat_at = excluded.heartbeat_at, stopped_at = NULL,
                 rejecting_since = excluded.rejecting_since,
                 rejecting_last = excluded.rejecting_last,
                 rejected = excluded.rejected, rejected_by = excluded.rejected_by",
        )?
        .execute(params![b.source, now, since, last, count, by])?;
        for run in &b.closed {
            gaps.push(insert_gap(
                Db::Sqlite(conn),
                &b.source,
                "rejecting",
                &run.since,
                &run.last,
                &run.describe(),
            )?);
        }
    }
    Ok(gaps)
}

/// A clean stop: the next start counts the gap from here.
pub fn stop(conn: &Connection, sources: &[String], now: &str) -> rusqlite::Result<()> {
    let mut update = conn.prepare_cached(
        "UPDATE receiving SET stopped_at = ?2, heartbeat_at = ?2 WHERE source = ?1",
    )?;
    for source in sources {
        update.execute(params![source, now])?;
    }
    Ok(())
}

/// Gaps that ended at or after `since`, oldest first, optionally of one source.
pub fn list(db: Db, since: &str, source: Option<&str>) -> Result<Vec<Gap>, db::DbError> {
    db.rows(
        &format!(
            "SELECT {GAP_COLUMNS} FROM gaps
              WHERE ended_at >= ?1 AND (CAST(?2 AS TEXT) IS NULL OR source = ?2)
              ORDER BY started_at, id"
        ),
        &[&since, &source],
        gap,
    )
}

/// One source's row: when it was last seen receiving.
#[derive(Debug, Clone, Serialize)]
pub struct Receiving {
    pub source: String,
    pub started_at: String,
    pub heartbeat_at: String,
    pub stopped_at: Option<String>,
    pub rejecting_since: Option<String>,
    pub rejected: i64,
}

/// Every source's rows (on PostgreSQL one per replica that received it), by source.
pub fn receiving(db: Db) -> Result<Vec<Receiving>, db::DbError> {
    db.rows(
        "SELECT source, started_at, heartbeat_at, stopped_at, rejecting_since, rejected
           FROM receiving ORDER BY source, heartbeat_at DESC",
        &[],
        |r| {
            Ok(Receiving {
                source: r.get(0)?,
                started_at: r.get(1)?,
                heartbeat_at: r.get(2)?,
                stopped_at: r.get(3)?,
                rejecting_since: r.get(4)?,
                rejected: r.get(5)?,
            })
        },
    )
}

/// How often `serve` writes "still receiving" for every source. A crash is known to have
/// begun at most this long before the last heartbeat's time; recovery asks providers for a
/// window that starts earlier anyway (see `recover::MARGIN`). One small row update per source
/// every 10 s is nothing next to the events.
pub const HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(10);

/// With replicas on PostgreSQL: a replica whose heartbeat is older than this, and that did
/// not stop cleanly, is taken for gone (three heartbeats missed).
pub const LIVE: std::time::Duration = std::time::Duration::from_secs(3 * HEARTBEAT.as_secs());

/// [`start`] for one of several replicas on PostgreSQL, whose rows are each replica's
/// (`replica`): a source was not receiving only while no replica was. So for each source, in
/// one transaction under a lock of its own (two replicas starting together look one after
/// the other): if another replica is receiving it now (not stopped, a heartbeat within
/// [`LIVE`]), there is no gap; otherwise the gap runs from the last moment any replica was
/// seen receiving it, as [`start`] finds it from one row. The rows of replicas that are gone
/// are then deleted (the gap accounts for them), and this replica's row written. The caller
/// holds the transaction (`Db::write`).
pub fn start_replica(
    db: Db,
    replica: &str,
    sources: &[String],
    now: &str,
) -> Result<(Vec<Gap>, Vec<Unconfirmed>), db::DbError> {
    let live_since = crate::clock::iso(
        humantime::parse_rfc3339(now)
            .map(|t| t - LIVE)
            .unwrap_or(std::time::UNIX_EPOCH),
    );
    let mut gaps = Vec::new();
    let mut unconfirmed = Vec::new();
    // In one order on every replica, so that two starting together cannot deadlock.
    let mut sources = sources.to_vec();
    sources.sort();
    for source in &sources {
        db.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('hookinbox receiving ' || ?1, 0))",
            &[source],
        )?;
        let others = db.rows(
            &format!("{LAST_SEEN} AND replica <> ?2"),
            &[source, &replica],
            last_seen,
        )?;
        let own = db.row(
            &format!("{LAST_SEEN} AND replica = ?2"),
            &[source, &replica],
            last_seen,
        )?;
        let live = |l: &LastSeen| l.stopped.is_none() && l.heartbeat >= live_since;
        if others.iter().any(live) {
            // Live by their last heartbeat, which is a guess: a replica killed a moment
            // ago looks the same. Confirmed (or not) once LIVE has passed: [`confirm`].
            let replicas = db.rows(
                "SELECT replica, heartbeat_at FROM receiving
                  WHERE source = ?1 AND replica <> ?2 AND stopped_at IS NULL
                    AND heartbeat_at >= ?3",
                &[source, &replica, &live_since],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
            unconfirmed.push(Unconfirmed {
                source: source.clone(),
                replicas,
                started_at: now.to_owned(),
            });
        } else {
            // The last one seen receiving: its clean stop or its last heartbeat.
            let seen = |l: &LastSeen| l.stopped.clone().unwrap_or_else(|| l.heartbeat.clone());
            if let Some((from, detail)) = others
                .into_iter()
                .chain(own)
                .max_by_key(seen)
                .and_then(|last| down_since(last, now))
            {
                let detail = format!("no replica was receiving: {detail}");
                gaps.push(insert_gap(db, source, "down", &from, now, &detail)?);
            }
        }
        db.execute(
            "DELETE FROM receiving
              WHERE source = ?1 AND replica <> ?2
                AND (stopped_at IS NOT NULL OR heartbeat_at < ?3)",
            &[source, &replica, &live_since],
        )?;
        db.execute(
            "INSERT INTO receiving (source, replica, started_at, heartbeat_at)
             VALUES (?1, ?2, ?3, ?3)
             ON CONFLICT (source, replica) DO UPDATE SET
                 started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at,
                 stopped_at = NULL, rejecting_since = NULL, rejecting_last = NULL,
                 rejected = 0, rejected_by = NULL",
            &[source, &replica, &now],
        )?;
    }
    Ok((gaps, unconfirmed))
}

/// Replicas that looked live when this one started receiving a source: their ids and
/// last heartbeats then, and when that start was.
#[derive(Debug, Clone)]
pub struct Unconfirmed {
    pub source: String,
    pub replicas: Vec<(String, String)>,
    pub started_at: String,
}

/// After [`LIVE`] has passed since a start that found `u`'s replicas live: if one of them
/// wrote a heartbeat or a clean stop since, it was receiving and there was no gap;
/// otherwise they were gone already (killed a moment before), and the window from the
/// last of their heartbeats to the start is a gap, recorded now, and their rows are
/// dropped. A row gone meanwhile was found gone by another replica's start, which saw
/// this one live: it does not count as moving on.
pub fn confirm(db: Db, u: &Unconfirmed) -> Result<Option<Gap>, db::DbError> {
    for (replica, heartbeat) in &u.replicas {
        let moved = db.row(
            "SELECT 1 FROM receiving
              WHERE source = ?1 AND replica = ?2
                AND (heartbeat_at > ?3 OR stopped_at IS NOT NULL)",
            &[&u.source, replica, heartbeat],
            |_| Ok(()),
        )?;
        if moved.is_some() {
            return Ok(None);
        }
    }
    let Some(from) = u.replicas.iter().map(|(_, h)| h).max() else {
        return Ok(None);
    };
    for (replica, _) in &u.replicas {
        db.execute(
            "DELETE FROM receiving WHERE source = ?1 AND replica = ?2",
            &[&u.source, replica],
        )?;
    }
    if from.as_str() >= u.started_at.as_str() {
        return Ok(None);
    }
    let detail = "no replica was receiving: no heartbeat since (a crash, a kill or a power \
                  loss), found when the next replica's start was confirmed";
    Ok(Some(insert_gap(
        db,
        &u.source,
        "down",
        from,
        &u.started_at,
        detail,
    )?))
}

/// [`beat`] for one of several replicas on PostgreSQL: its own rows; a closed run of
/// refusals is a gap of this replica's (others may have accepted the source meanwhile),
/// and says so.
pub fn beat_replica(
    db: Db,
    replica: &str,
    beats: &[Beat],
    now: &str,
) -> Result<Vec<Gap>, db::DbError> {
    let mut gaps = Vec::new();
    for b in beats {
        let (since, last, count, by) = open_run(b);
        db.execute(
            "INSERT INTO receiving (source, replica, started_at, heartbeat_at, rejecting_since,
                                    rejecting_last, rejected, rejected_by)
             VALUES (?1, ?2, ?3, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT (source, replica) DO UPDATE SET
                 heartbeat_at = excluded.heartbeat_at, stopped_at = NULL,
                 rejecting_since = excluded.rejecting_since,
                 rejecting_last = excluded.rejecting_last,
                 rejected = excluded.rejected, rejected_by = excluded.rejected_by",
            &[&b.source, &replica, &now, &since, &last, &count, &by],
        )?;
        for run in &b.closed {
            let detail = format!("{} (replica {replica})", run.describe());
            gaps.push(insert_gap(
                db,
                &b.source,
                "rejecting",
                &run.since,
                &run.last,
                &detail,
            )?);
        }
    }
    Ok(gaps)
}

/// [`stop`] for one of several replicas on PostgreSQL: its own rows.
pub fn stop_replica(
    db: Db,
    replica: &str,
    sources: &[String],
    now: &str,
) -> Result<(), db::DbError> {
    for source in sources {
        db.execute(
            "UPDATE receiving SET stopped_at = ?3, heartbeat_at = ?3
              WHERE source = ?1 AND replica = ?2",
            &[source, &replica, &now],
        )?;
    }
    Ok(())
}

/// Where a gap begins after `last` was seen receiving, and why, as of `now`: from its clean
/// stop, or its last heartbeat after a crash, or the start of a run of refusals it still
/// had open; None when that is not before `now`.
fn down_since(last: LastSeen, now: &str) -> Option<(String, String)> {
    let LastSeen {
        heartbeat,
        stopped,
        since,
        last,
        by,
    } = last;
    let (from, mut detail) = match stopped {
        Some(at) => (at, "stopped cleanly".to_owned()),
        None => (
            heartbeat,
            "no heartbeat since: a crash, a kill or a power loss".to_owned(),
        ),
    };
    let from = match (since, last) {
        (Some(since), Some(last)) if since < from => {
            let run = Run::decode(since.clone(), last, &by);
            detail = format!("{}, then down ({detail})", run.describe());
            since
        }
        _ => from,
    };
    (from.as_str() < now).then_some((from, detail))
}

/// Records that a recovery covered these gaps, and what it did.
pub fn recovered(db: Db, ids: &[i64], summary: &str, now: &str) -> Result<(), db::DbError> {
    for id in ids {
        db.execute(
            "UPDATE gaps SET recovered_at = ?2, recovery = ?3 WHERE id = ?1",
            &[id, &now, &summary],
        )?;
    }
    Ok(())
}

/// Records what a recovery of these gaps did without marking them recovered (it failed, or
/// partly): the next one tries again.
pub fn note(db: Db, ids: &[i64], summary: &str) -> Result<(), db::DbError> {
    for id in ids {
        db.execute(
            "UPDATE gaps SET recovery = ?2 WHERE id = ?1",
            &[id, &summary],
        )?;
    }
    Ok(())
}

/// Which of `ids` the inbox holds for this source and account.
pub fn known(
    db: Db,
    source: &str,
    account: &str,
    ids: &[String],
) -> Result<HashSet<String>, db::DbError> {
    let mut found = HashSet::new();
    for id in ids {
        let exists = db.row(
            "SELECT 1 FROM events WHERE source = ?1 AND account = ?2 AND event_id = ?3",
            &[&source, &account, id],
            |_| Ok(()),
        )?;
        if exists.is_some() {
            found.insert(id.clone());
        }
    }
    Ok(found)
}

/// A redelivery asked for earlier: when last, of which delivery, and how often.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requested {
    pub at: String,
    /// The provider's id of the delivery asked for; its redelivery gets a higher one.
    pub delivery: i64,
    pub asked: i64,
}

/// The redeliveries asked for earlier among `ids`.
pub fn requests(
    db: Db,
    source: &str,
    account: &str,
    ids: &[String],
) -> Result<HashMap<String, Requested>, db::DbError> {
    let mut found = HashMap::new();
    for id in ids {
        let row = db.row(
            "SELECT requested_at, delivery, asked FROM recovery_requests
              WHERE source = ?1 AND account = ?2 AND event_id = ?3",
            &[&source, &account, id],
            |r| {
                Ok(Requested {
                    at: r.get(0)?,
                    delivery: r.get(1)?,
                    asked: r.get(2)?,
                })
            },
        )?;
        if let Some(r) = row {
            found.insert(id.clone(), r);
        }
    }
    Ok(found)
}

/// Records that a redelivery of `id` (the provider's delivery `delivery`) was asked for at
/// `now`.
pub fn requested(
    db: Db,
    source: &str,
    account: &str,
    id: &str,
    delivery: i64,
    now: &str,
) -> Result<(), db::DbError> {
    // `recovery_requests.asked`, not `asked` alone: PostgreSQL's DO UPDATE names the row.
    db.execute(
        "INSERT INTO recovery_requests (source, account, event_id, requested_at, delivery)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (source, account, event_id)
         DO UPDATE SET requested_at = excluded.requested_at, delivery = excluded.delivery,
                       asked = recovery_requests.asked + 1",
        &[&source, &account, &id, &now, &delivery],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inbox() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("inbox.db");
        let conn = crate::store::sqlite::schema::open_writer(
            &path,
            crate::config::Synchronous::Full,
            true,
        )
        .unwrap();
        (dir, conn)
    }

    fn run(since: &str, last: &str) -> Run {
        Run {
            since: since.into(),
            last: last.into(),
            refused: vec![(401, 3)],
        }
    }

    #[test]
    fn a_start_finds_the_window_since_the_last_heartbeat_or_the_clean_stop() {
        let (_dir, conn) = inbox();
        let sources = ["a".to_owned(), "b".to_owned()];
        // Never seen receiving: no gap, whatever the clock says.
        assert!(
            start(&conn, &sources, "2026-12-01T10:00:00.000Z")
                .unwrap()
                .is_empty()
        );
        let beats: Vec<Beat> = sources
            .iter()
            .map(|s| Beat {
                source: s.clone(),
                open: None,
                closed: vec![],
            })
            .collect();
        beat(&conn, &beats, "2026-12-01T10:00:10.000Z").unwrap();
        stop(&conn, &sources[..1], "2026-12-01T10:00:12.000Z").unwrap();
        let gaps = start(&conn, &sources, "2026-12-01T11:00:00.000Z").unwrap();
        assert_eq!(gaps.len(), 2);
        assert_eq!(
            (gaps[0].source.as_str(), gaps[0].started_at.as_str()),
            ("a", "2026-12-01T10:00:12.000Z")
        );
        assert_eq!(gaps[0].detail, "stopped cleanly");
        assert_eq!(gaps[1].started_at, "2026-12-01T10:00:10.000Z");
        assert!(gaps[1].detail.contains("crash"), "{}", gaps[1].detail);
        assert!(
            gaps.iter()
                .all(|g| g.ended_at == "2026-12-01T11:00:00.000Z")
        );
        // Listed oldest first.
        let listed = list(Db::Sqlite(&conn), "2026-01-01T00:00:00.000Z", None).unwrap();
        assert_eq!(listed, [gaps[1].clone(), gaps[0].clone()]);
        assert_eq!(
            list(Db::Sqlite(&conn), "2026-12-01T11:00:00.001Z", None).unwrap(),
            []
        );
        assert_eq!(
            list(Db::Sqlite(&conn), "2026-01-01T00:00:00.000Z", Some("a")).unwrap(),
            gaps[..1]
        );
    }

    #[test]
    fn an_open_run_of_refusals_extends_the_gap_and_a_closed_one_is_a_gap() {
        let (_dir, conn) = inbox();
        let sources = ["a".to_owned()];
        start(&conn, &sources, "2026-12-01T09:00:00.000Z").unwrap();
        let closed = beat(
            &conn,
            &[Beat {
                source: "a".into(),
                open: Some(run("2026-12-01T09:30:00.000Z", "2026-12-01T09:59:00.000Z")),
                closed: vec![run("2026-12-01T09:10:00.000Z", "2026-12-01T09:20:00.000Z")],
            }],
            "2026-12-01T10:00:00.000Z",
        )
        .unwrap();
        assert_eq!(closed.len(), 1);
        assert_eq!(closed[0].kind, "rejecting");
        assert_eq!(closed[0].detail, "refused 3 requests (401 ×3)");
        let gaps = start(&conn, &sources, "2026-12-01T11:00:00.000Z").unwrap();
        assert_eq!(gaps[0].started_at, "2026-12-01T09:30:00.000Z");
        assert!(
            gaps[0]
                .detail
                .starts_with("refused 3 requests (401 ×3), then down")
        );
        let row = &receiving(Db::Sqlite(&conn)).unwrap()[0];
        assert_eq!((row.rejecting_since.as_deref(), row.rejected), (None, 0));
    }

    #[test]
    fn requests_count_how_often_a_redelivery_was_asked_for() {
        let (_dir, conn) = inbox();
        let ids = ["g1".to_owned(), "g2".to_owned()];
        requested(
            Db::Sqlite(&conn),
            "gh",
            "",
            "g1",
            7,
            "2026-12-01T10:00:00.000Z",
        )
        .unwrap();
        requested(
            Db::Sqlite(&conn),
            "gh",
            "",
            "g1",
            9,
            "2026-12-01T10:05:00.000Z",
        )
        .unwrap();
        let found = requests(Db::Sqlite(&conn), "gh", "", &ids).unwrap();
        assert_eq!(
            found.get("g1"),
            Some(&Requested {
                at: "2026-12-01T10:05:00.000Z".into(),
                delivery: 9,
                asked: 2
            })
        );
        assert!(!found.contains_key("g2"));
        assert!(
            requests(Db::Sqlite(&conn), "gh", "other", &ids)
                .unwrap()
                .is_empty()
        );
    }
}
