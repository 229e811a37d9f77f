//! A row and an error as the SQL written once over [`super::Db`] sees them, whichever
//! backend ran it: a row's values as SQLite would have given them, read with the same
//! `r.get(i)?` on either side.

use rusqlite::types::{FromSql, Value, ValueRef};

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    #[error("{}", crate::pgconn::describe(.0))]
    Postgres(#[from] tokio_postgres::Error),
    /// A value that the other side's type cannot hold (a mistake in the SQL, not input).
    #[error("{0}")]
    Convert(String),
}

/// One row, its values as SQLite would have given them.
pub struct Row(pub(in crate::store) Vec<Value>);

impl Row {
    pub(in crate::store) fn get<T: FromSql>(&self, i: usize) -> rusqlite::Result<T> {
        let value = self.get_ref(i)?;
        T::column_result(value).map_err(|e| match e {
            rusqlite::types::FromSqlError::InvalidType => {
                rusqlite::Error::InvalidColumnType(i, format!("column {i}"), value.data_type())
            }
            other => {
                rusqlite::Error::FromSqlConversionFailure(i, value.data_type(), Box::new(other))
            }
        })
    }

    pub(in crate::store) fn get_ref(&self, i: usize) -> rusqlite::Result<ValueRef<'_>> {
        self.0
            .get(i)
            .map(ValueRef::from)
            .ok_or(rusqlite::Error::InvalidColumnIndex(i))
    }
}

/// For the serve's writer jobs, whose closures answer in rusqlite's error: on a SQLite
/// connection every error is SQLite's.
impl From<DbError> for rusqlite::Error {
    fn from(e: DbError) -> rusqlite::Error {
        match e {
            DbError::Sqlite(e) => e,
            other => rusqlite::Error::ToSqlConversionFailure(Box::new(other)),
        }
    }
}
