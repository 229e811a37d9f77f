//! Time by event id, on SQLite. `events` has no index by time: ids are given in commit
//! order and `received_at` is the commit's time, so the ids below a moment are the events
//! received before it, found by a binary search over the rowid. Every query that uses the
//! boundary tests `received_at` as well, so a clock stepped back (times that do not follow
//! the ids for a while) can make a walk reach a row later than it would by time, never
//! act on a row that is too young. The listings' time filters ([`window`]) may for the
//! same reason leave out a row whose time is out of order with its id.

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension};

use crate::store::db::{self, Db};

/// The lowest and the highest id. Two subqueries, because SQLite reads a lone `min()` or
/// `max()` off the end of the b-tree, but `SELECT min(id), max(id)` with every row.
const ENDS: &str = "SELECT (SELECT min(id) FROM events), (SELECT max(id) FROM events)";

/// An id `b` such that, while times follow ids, every event with id < `b` was received
/// before `t` (inbox time text) and every event with id ≥ `b` at or after it. About 2·log₂ n
/// lookups by rowid; gaps left by deleted rows are fine.
pub fn first_id_at(conn: &Connection, t: &str) -> rusqlite::Result<i64> {
    let (min, max): (Option<i64>, Option<i64>) = conn
        .prepare_cached(ENDS)?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let (Some(mut lo), Some(max)) = (min, max) else {
        return Ok(0);
    };
    let mut hi = max + 1;
    let mut next = conn.prepare_cached(
        "SELECT id, received_at < ?2 FROM events WHERE id >= ?1 ORDER BY id LIMIT 1",
    )?;
    // Invariant: the rows below `lo` are before `t`, the rows from `hi` on are not.
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let found: Option<(i64, bool)> = next
            .query_row(rusqlite::params![mid, t], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        match found {
            Some((id, true)) => lo = id + 1,
            _ => hi = mid,
        }
    }
    Ok(lo)
}

/// Appends the filters "received at or after `since`" and "before `until`" on `v` (the
/// events, or a view of them, with `id` and `received_at`) to `sql`, their values to
/// `params`. On SQLite each also bounds `v.id` by [`first_id_at`], so that a page reads the
/// window's rows only: without it, a page walking the ids down from the newest read every
/// row after `until`, and every row before `since` when the window held less than a page.
/// PostgreSQL's planner chooses by its statistics (`events_age` serves one source's window).
pub fn window(
    db: Db,
    since: Option<&str>,
    until: Option<&str>,
    sql: &mut String,
    params: &mut Vec<Value>,
) -> Result<(), db::DbError> {
    for (t, time_test, id_test) in [
        (since, " AND v.received_at >= ?", " AND v.id >= ?"),
        (until, " AND v.received_at < ?", " AND v.id < ?"),
    ] {
        let Some(t) = t else { continue };
        sql.push_str(time_test);
        params.push(Value::Text(t.to_owned()));
        if let Db::Sqlite(conn) = db {
            sql.push_str(id_test);
            params.push(Value::Integer(first_id_at(conn, t)?));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inbox(times: &[(i64, &str)]) -> Connection {
        let c = Connection::open_in_memory().unwrap();
        c.execute_batch("CREATE TABLE events (id INTEGER PRIMARY KEY, received_at TEXT NOT NULL)")
            .unwrap();
        for (id, t) in times {
            c.execute(
                "INSERT INTO events VALUES (?1, ?2)",
                rusqlite::params![id, t],
            )
            .unwrap();
        }
        c
    }

    #[test]
    fn finds_the_first_id_at_or_after_a_time_across_gaps() {
        let c = inbox(&[
            (3, "a"),
            (4, "b"),
            (9, "b"),
            (10, "c"),
            (20, "d"),
            (21, "f"),
        ]);
        assert_eq!(first_id_at(&c, "0").unwrap(), 3);
        assert_eq!(first_id_at(&c, "a").unwrap(), 3);
        // Any id in the gap after the last row before "b" separates the two.
        let b = first_id_at(&c, "b").unwrap();
        assert_eq!(b, 4);
        let c_at = first_id_at(&c, "c").unwrap();
        assert!(c_at > 9 && c_at <= 10, "{c_at}");
        let e = first_id_at(&c, "e").unwrap();
        assert!(e > 20 && e <= 21, "{e}");
        assert_eq!(first_id_at(&c, "z").unwrap(), 22, "after every row");
        assert_eq!(first_id_at(&inbox(&[]), "a").unwrap(), 0, "no rows");
    }

    #[test]
    fn the_ends_are_read_off_the_b_tree_not_scanned() {
        // A scan here made every retention chunk and every overview read the whole
        // identity index: most of a second at 10 million events.
        let c = inbox(&[(1, "a"), (2, "b")]);
        let plan = crate::store::sqlite::schema::query_plan(&c, ENDS, []);
        assert!(
            plan.iter().all(|step| !step.starts_with("SCAN events")),
            "{plan:?}"
        );
        assert!(plan.iter().any(|step| step == "SEARCH events"), "{plan:?}");
    }

    #[test]
    fn every_time_of_a_long_run_is_found_exactly() {
        let times: Vec<(i64, String)> = (1..=1000)
            .map(|i| (i * 3, format!("{:06}", i / 7)))
            .collect();
        let owned: Vec<(i64, &str)> = times.iter().map(|(i, t)| (*i, t.as_str())).collect();
        let c = inbox(&owned);
        for (id, t) in &owned {
            let b = first_id_at(&c, t).unwrap();
            let first = owned.iter().find(|(_, u)| u == t).unwrap().0;
            assert!(
                b <= first && b > first - 3,
                "{t}: {b} for the first row {first} ({id})"
            );
        }
    }
}
