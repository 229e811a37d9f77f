//! One connection to the inbox, whichever backend holds it: [`Db`], and [`Open`] that owns
//! one.
//!
//! SQL that reads the same on both backends is written once over [`Db`]: the two schemas
//! have the same tables, columns and views, and what differs is how a statement is sent,
//! which [`Db`] hides (on PostgreSQL, [`super::postgres::session`]). The few fragments that
//! are one dialect's only are chosen by [`Db::dialect`] where they are written.
//!
//! Outside `store/`, a [`Db`] offers only the typed questions and changes of
//! [`super::views`] and the topic modules: its SQL methods are the store's own.

use rusqlite::types::{FromSql, Value};
use rusqlite::{Connection, ToSql};

use super::postgres::session::PgConn;
pub use super::row::{DbError, Row};

/// An inbox connection of either backend.
#[derive(Clone, Copy)]
pub enum Db<'a> {
    Sqlite(&'a Connection),
    Postgres(&'a PgConn),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::store) enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    /// A condition that `column` matches `pattern`, a pattern of event types as operators
    /// write it (`invoice.*`: `*` is any run of characters, dots included, and nothing else
    /// is special), and the pattern as the condition's parameter. Case-sensitive, as
    /// providers' names are; without a `*` it is equality.
    pub(in crate::store) fn type_pattern(self, column: &str, pattern: &str) -> (String, String) {
        let mut bound = String::with_capacity(pattern.len());
        match self {
            // GLOB's other wildcards, `?` and `[`, become one-character classes.
            Dialect::Sqlite => {
                for c in pattern.chars() {
                    match c {
                        '?' => bound.push_str("[?]"),
                        '[' => bound.push_str("[[]"),
                        c => bound.push(c),
                    }
                }
                (format!("{column} GLOB ?"), bound)
            }
            Dialect::Postgres => {
                for c in pattern.chars() {
                    match c {
                        '*' => bound.push('%'),
                        '%' | '_' | '\\' => {
                            bound.push('\\');
                            bound.push(c);
                        }
                        c => bound.push(c),
                    }
                }
                (format!("{column} LIKE ? ESCAPE '\\'"), bound)
            }
        }
    }
}

impl<'a> Db<'a> {
    pub(in crate::store) fn dialect(self) -> Dialect {
        match self {
            Db::Sqlite(_) => Dialect::Sqlite,
            Db::Postgres(_) => Dialect::Postgres,
        }
    }

    /// Every row of `sql`, each read by `f`.
    pub(in crate::store) fn rows<T>(
        self,
        sql: &str,
        params: &[&dyn ToSql],
        mut f: impl FnMut(&Row) -> rusqlite::Result<T>,
    ) -> Result<Vec<T>, DbError> {
        match self {
            Db::Sqlite(conn) => {
                let mut stmt = conn.prepare_cached(sql)?;
                let n = stmt.column_count();
                let mut rows = stmt.query(params)?;
                let mut out = Vec::new();
                while let Some(r) = rows.next()? {
                    let row = Row((0..n).map(|i| r.get(i)).collect::<rusqlite::Result<_>>()?);
                    out.push(f(&row)?);
                }
                Ok(out)
            }
            Db::Postgres(pg) => pg
                .query(sql, params)?
                .iter()
                .map(|r| f(r).map_err(DbError::from))
                .collect(),
        }
    }

    /// The first row of `sql`, if it has any.
    pub(in crate::store) fn row<T>(
        self,
        sql: &str,
        params: &[&dyn ToSql],
        f: impl FnMut(&Row) -> rusqlite::Result<T>,
    ) -> Result<Option<T>, DbError> {
        Ok(self.rows(sql, params, f)?.into_iter().next())
    }

    /// The one value of a query that always returns one row (`count(*)`, `max(…)`).
    pub(in crate::store) fn value<T: FromSql>(
        self,
        sql: &str,
        params: &[&dyn ToSql],
    ) -> Result<T, DbError> {
        self.row(sql, params, |r| r.get(0))?
            .ok_or_else(|| DbError::Convert(format!("no row from {sql}")))
    }

    /// Runs a statement; how many rows it changed.
    pub(in crate::store) fn execute(
        self,
        sql: &str,
        params: &[&dyn ToSql],
    ) -> Result<usize, DbError> {
        match self {
            Db::Sqlite(conn) => Ok(conn.prepare_cached(sql)?.execute(params)?),
            Db::Postgres(pg) => pg.execute(sql, params),
        }
    }

    /// Runs `f` in one write transaction: SQLite's `BEGIN IMMEDIATE` (the write lock first,
    /// so a running serve's writer waits at most as long as `f` takes), PostgreSQL's
    /// `BEGIN`. Committed when `f` succeeds, rolled back when it fails.
    pub fn write<T, E: From<DbError>>(
        self,
        f: impl FnOnce(Db<'a>) -> Result<T, E>,
    ) -> Result<T, E> {
        let begin = match self {
            Db::Sqlite(_) => "BEGIN IMMEDIATE",
            Db::Postgres(_) => "BEGIN",
        };
        self.batch(begin)?;
        match f(self) {
            Ok(t) => {
                self.batch("COMMIT")?;
                Ok(t)
            }
            Err(e) => {
                // The error is the one to report; a failed rollback leaves the transaction
                // to die with the connection.
                let _ = self.batch("ROLLBACK");
                Err(e)
            }
        }
    }

    fn batch(self, sql: &str) -> Result<(), DbError> {
        match self {
            Db::Sqlite(conn) => Ok(conn.execute_batch(sql)?),
            Db::Postgres(pg) => Ok(pg.batch_execute(sql)?),
        }
    }
}

/// A list of values built at run time (the commands' filters), as the parameters [`Db`]
/// takes.
pub(in crate::store) fn refs(values: &[Value]) -> Vec<&dyn ToSql> {
    values.iter().map(|v| v as &dyn ToSql).collect()
}

/// An open inbox connection; [`Open::db`] queries it.
pub enum Open {
    Sqlite(Connection),
    Postgres(PgConn),
}

impl Open {
    pub fn db(&self) -> Db<'_> {
        match self {
            Open::Sqlite(c) => Db::Sqlite(c),
            Open::Postgres(p) => Db::Postgres(p),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sqlite_row_reads_as_rusqlite_reads_it() {
        let conn = Connection::open_in_memory().unwrap();
        let db = Db::Sqlite(&conn);
        let rows = db
            .rows("SELECT ?1, ?2, NULL, x'00ff'", &[&7_i64, &"text"], |r| {
                Ok((
                    r.get::<i64>(0)?,
                    r.get::<String>(1)?,
                    r.get::<Option<String>>(2)?,
                    r.get::<Vec<u8>>(3)?,
                ))
            })
            .unwrap();
        assert_eq!(rows, [(7, "text".to_owned(), None, vec![0, 255])]);
        assert!(db.value::<String>("SELECT 1", &[]).is_err());
    }
}
