//! Paused targets (`paused_targets`): an operator holds a target's deliveries back while its
//! app is down or being migrated, and releases them later in their order.
//!
//! Invariant: a paused target's deliveries are never claimed. The claim
//! ([`super::sqlite::queue::claim`]) tests this table in its own statement, so a pause that
//! committed before a claim always wins; attempts already in flight finish and record
//! their result (a retry stays pending, held back like the rest). Nothing else changes a
//! delivery: resuming is deleting the row, and the deliveries, still `pending` and long
//! due, go out in the order a claim takes them (due time, then id).
//!
//! `serve` writes here through [`super::sqlite::writer::Writer::job`]; the CLI in its own short
//! `BEGIN IMMEDIATE` transaction, next to a running serve. Reads need no more than a
//! read-only connection. A target's loop sees a change within its idle poll (a second);
//! inside `serve`, `Writer::commits().all()` after the job wakes every loop at once.

use crate::store::Paused;
use crate::store::db::{Db, DbError};

/// Pauses (`paused`) or resumes a target; true when that changed something. Pausing a
/// paused target keeps the first pause's time and name (the queue has been held since
/// then), and resuming one that is not paused does nothing.
pub fn set(
    db: Db,
    source: &str,
    target: &str,
    paused: bool,
    by: &str,
    now: &str,
) -> Result<bool, DbError> {
    let changed = if paused {
        db.execute(
            "INSERT INTO paused_targets (source, target, paused_at, paused_by)
             VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (source, target) DO NOTHING",
            &[&source, &target, &now, &by],
        )?
    } else {
        db.execute(
            "DELETE FROM paused_targets WHERE source = ?1 AND target = ?2",
            &[&source, &target],
        )?
    };
    Ok(changed == 1)
}

/// Every paused target, by source and target. The table holds one row per paused pair,
/// a handful at most, so callers filter this rather than asking for one pair.
pub fn all(db: Db) -> Result<Vec<Paused>, DbError> {
    db.rows(
        "SELECT source, target, paused_at, paused_by FROM paused_targets ORDER BY source, target",
        &[],
        |r| {
            Ok(Paused {
                source: r.get(0)?,
                target: r.get(1)?,
                paused_at: r.get(2)?,
                paused_by: r.get(3)?,
            })
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Synchronous;

    #[test]
    fn set_says_whether_it_changed_anything_and_keeps_the_first_pause() {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::store::sqlite::schema::open_writer(
            &dir.path().join("inbox.db"),
            Synchronous::Full,
            true,
        )
        .unwrap();
        let conn = Db::Sqlite(&conn);
        let (t1, t2) = ("2026-11-30T07:00:00.000Z", "2026-11-30T08:00:00.000Z");
        assert!(set(conn, "sw", "app", true, "alice", t1).unwrap());
        assert!(!set(conn, "sw", "app", true, "bob", t2).unwrap());
        assert!(set(conn, "sw", "audit", true, "bob", t2).unwrap());
        assert_eq!(
            all(conn).unwrap(),
            [
                Paused {
                    source: "sw".into(),
                    target: "app".into(),
                    paused_at: t1.into(),
                    paused_by: "alice".into()
                },
                Paused {
                    source: "sw".into(),
                    target: "audit".into(),
                    paused_at: t2.into(),
                    paused_by: "bob".into()
                },
            ]
        );
        assert!(set(conn, "sw", "app", false, "carol", t2).unwrap());
        assert!(!set(conn, "sw", "app", false, "carol", t2).unwrap());
        assert_eq!(all(conn).unwrap().len(), 1);
    }
}
