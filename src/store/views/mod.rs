//! Every question an operator asks of the inbox, and every change they make to it, as a
//! typed method of [`Db`]: the commands and the web inbox parse their input, call one of
//! these, and render what comes back. One file per question; each is written once over
//! [`Db`] and runs on either backend (a fragment only one dialect has is chosen inside).

pub mod conflicts;
pub mod dead;
pub mod event;
pub mod events;

use super::db::{Db, DbError};

/// Whether an event of this identity is stored.
const STORED: &str = "SELECT 1 FROM events WHERE source = ?1 AND account = ?2 AND event_id = ?3";

impl Db<'_> {
    /// Whether the inbox holds an event of this identity.
    pub fn is_stored(self, source: &str, account: &str, event_id: &str) -> Result<bool, DbError> {
        Ok(self
            .row(STORED, &[&source, &account, &event_id], |_| Ok(()))?
            .is_some())
    }
}

/// How many pages a SQLite inbox has, and how many of them are free.
#[derive(Debug, Clone, Copy)]
pub struct Pages {
    pub free: i64,
    pub all: i64,
    /// Free pages beyond the reserve kept for new events: what pruning can give back.
    pub releasable: i64,
}

impl Db<'_> {
    /// The file's pages, on SQLite; none on PostgreSQL.
    pub fn pages(self) -> Result<Option<Pages>, DbError> {
        use crate::store::sqlite::schema::{FREE_PAGE_RESERVE, page_counts};
        match self {
            Db::Sqlite(conn) => {
                let (free, all) = page_counts(conn)?;
                Ok(Some(Pages {
                    free,
                    all,
                    releasable: (free - FREE_PAGE_RESERVE).max(0),
                }))
            }
            Db::Postgres(_) => Ok(None),
        }
    }

    /// What pruning `rule` as of `now` would remove, counted in full (a dry run).
    pub fn prune_count(
        self,
        rule: &crate::store::retention::Rule,
        now: std::time::SystemTime,
    ) -> Result<crate::store::retention::Pruned, DbError> {
        crate::store::retention::count(self, rule, now)
    }
}

impl Db<'_> {
    /// Every (source, target) pair the inbox has deliveries for, in order: what an operator
    /// may name without a configuration at hand.
    pub fn delivery_targets(self) -> Result<Vec<(String, String)>, DbError> {
        self.rows(
            "SELECT DISTINCT source, target FROM deliveries ORDER BY 1, 2",
            &[],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
    }

    /// How many deliveries of a target wait (`pending`).
    pub fn pending_count(self, source: &str, target: &str) -> Result<i64, DbError> {
        self.value(
            "SELECT count(*) FROM deliveries
              WHERE source = ?1 AND target = ?2 AND state = 'pending'",
            &[&source, &target],
        )
    }

    /// Whether the inbox holds a delivery with this row id.
    pub fn has_delivery(self, id: i64) -> Result<bool, DbError> {
        Ok(self
            .row("SELECT 1 FROM deliveries WHERE id = ?1", &[&id], |_| Ok(()))?
            .is_some())
    }
}
