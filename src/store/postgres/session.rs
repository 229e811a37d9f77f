//! Blocking connections to a PostgreSQL inbox, for the operator's commands and the web
//! inbox: the same SQL as on SQLite (see [`super::super::Db`]), with `?` placeholders
//! rewritten to `$N`, rusqlite's values converted to the types PostgreSQL's statement asks
//! for, and rows read back into rusqlite's values, so that a row is read with the same
//! `r.get(i)?` on either side.
//!
//! Synchronous by design: the commands are short, one-off programs. A connection carries
//! its own single-threaded runtime and blocks on each statement.

use std::error::Error as _;

use rusqlite::ToSql;
use rusqlite::types::{ToSqlOutput, Value, ValueRef};
use tokio_postgres::types::{IsNull, ToSql as PgToSql, Type};

use crate::store::row::{DbError, Row};

/// A blocking PostgreSQL connection to the inbox, for the operator's commands.
pub struct PgConn {
    /// Always Some but while dropping (see the Drop impl).
    runtime: Option<tokio::runtime::Runtime>,
    pub(super) client: tokio_postgres::Client,
}

/// A runtime may not be dropped where blocking is not allowed, and `serve` drops its pool's
/// idle connections from its async shutdown: the runtime is let go without waiting for its
/// tasks (the connection's driver, which the dropped client ends anyway).
impl Drop for PgConn {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl PgConn {
    /// Connects to the inbox `store` names and checks that its schema is this binary's
    /// (`serve` creates and migrates it; a command only reads and steers).
    pub fn open(store: &crate::config::PgStore) -> anyhow::Result<PgConn> {
        let pg = PgConn::connect(store)?;
        let one = |sql: &str| -> anyhow::Result<Row> {
            pg.query(sql, &[])?
                .into_iter()
                .next()
                .ok_or_else(|| anyhow::anyhow!("no row from {sql}"))
        };
        let exists: bool = one("SELECT to_regclass('schema_migrations') IS NOT NULL")?.get(0)?;
        let found: i64 = if exists {
            one("SELECT coalesce(max(version), 0)::bigint FROM schema_migrations")?.get(0)?
        } else {
            0
        };
        super::schema::require_version(found)?;
        Ok(pg)
    }

    /// Connects, without looking at the schema: for `serve`'s pool (serve migrated or
    /// checked it at its start; a newer replica may have migrated it since, compatibly).
    pub(super) fn connect(store: &crate::config::PgStore) -> anyhow::Result<PgConn> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| anyhow::anyhow!("starting the runtime for PostgreSQL: {e}"))?;
        let connector = crate::pgconn::Connector::new(
            &store.url,
            store.password.as_ref(),
            &store.tls,
            std::time::Duration::from_secs(10),
            // An operator's command may scan: a minute, not serve's 5 s; a lock it waits
            // for (a claim's row) is given up soon, as serve's are.
            "-c statement_timeout=60000 -c lock_timeout=5000 -c timezone=UTC",
        )?;
        let client = runtime
            .block_on(connector.connect())
            .map_err(|e| anyhow::anyhow!("{}", crate::pgconn::describe(&e)))?;
        Ok(PgConn {
            runtime: Some(runtime),
            client,
        })
    }

    pub(super) fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.runtime
            .as_ref()
            .expect("taken only while dropping")
            .block_on(f)
    }

    pub(in crate::store) fn batch_execute(&self, sql: &str) -> Result<(), DbError> {
        Ok(self.block_on(self.client.batch_execute(sql))?)
    }

    fn prepare(
        &self,
        sql: &str,
        params: &[&dyn ToSql],
    ) -> Result<(tokio_postgres::Statement, Vec<Param>), DbError> {
        let stmt = self.block_on(self.client.prepare(&placeholders(sql)))?;
        if stmt.params().len() != params.len() {
            return Err(DbError::Convert(format!(
                "{} parameters for {} placeholders in {sql}",
                params.len(),
                stmt.params().len()
            )));
        }
        let values = stmt
            .params()
            .iter()
            .zip(params)
            .map(|(ty, p)| Param::convert(ty, *p))
            .collect::<Result<_, _>>()?;
        Ok((stmt, values))
    }

    pub(in crate::store) fn query(
        &self,
        sql: &str,
        params: &[&dyn ToSql],
    ) -> Result<Vec<Row>, DbError> {
        let (stmt, values) = self.prepare(sql, params)?;
        let refs: Vec<&(dyn PgToSql + Sync)> =
            values.iter().map(|v| v as &(dyn PgToSql + Sync)).collect();
        let rows = self.block_on(self.client.query(&stmt, &refs))?;
        rows.iter()
            .map(|r| {
                (0..r.len())
                    .map(|i| column(r, i))
                    .collect::<Result<_, _>>()
                    .map(Row)
            })
            .collect()
    }

    pub(in crate::store) fn execute(
        &self,
        sql: &str,
        params: &[&dyn ToSql],
    ) -> Result<usize, DbError> {
        let (stmt, values) = self.prepare(sql, params)?;
        let refs: Vec<&(dyn PgToSql + Sync)> =
            values.iter().map(|v| v as &(dyn PgToSql + Sync)).collect();
        let n = self.block_on(self.client.execute(&stmt, &refs))?;
        Ok(n as usize)
    }
}

/// `?` and `?N` as PostgreSQL's `$N`; quoted text and identifiers are left alone.
fn placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    // As SQLite numbers them: a bare `?` is one more than the largest number so far.
    let mut largest: u64 = 0;
    let mut quote: Option<char> = None;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '?') => {
                let mut digits = String::new();
                while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                    digits.push(*d);
                    chars.next();
                }
                if digits.is_empty() {
                    largest += 1;
                    digits = largest.to_string();
                } else {
                    largest = largest.max(digits.parse().unwrap_or(0));
                }
                out.push('$');
                out.push_str(&digits);
                continue;
            }
            _ => {}
        }
        out.push(c);
    }
    out
}

/// A rusqlite value in the type PostgreSQL's statement asks for.
#[derive(Debug)]
enum Param {
    Null,
    Bool(bool),
    I16(i16),
    I32(i32),
    I64(i64),
    F64(f64),
    Text(String),
    Bytes(Vec<u8>),
}

impl Param {
    fn convert(ty: &Type, p: &dyn ToSql) -> Result<Param, DbError> {
        let out = p.to_sql()?;
        let value = match &out {
            ToSqlOutput::Borrowed(v) => *v,
            ToSqlOutput::Owned(v) => ValueRef::from(v),
            _ => return Err(DbError::Convert("an unsupported SQLite value".into())),
        };
        let wrong = || {
            DbError::Convert(format!(
                "a {:?} value for a parameter of type {ty}",
                value.data_type()
            ))
        };
        Ok(match value {
            ValueRef::Null => Param::Null,
            ValueRef::Integer(i) => match *ty {
                Type::INT8 => Param::I64(i),
                Type::INT4 => Param::I32(i32::try_from(i).map_err(|_| wrong())?),
                Type::INT2 => Param::I16(i16::try_from(i).map_err(|_| wrong())?),
                Type::BOOL => Param::Bool(i != 0),
                Type::FLOAT8 => Param::F64(i as f64),
                Type::TEXT | Type::VARCHAR | Type::NAME => Param::Text(i.to_string()),
                _ => return Err(wrong()),
            },
            ValueRef::Real(f) => match *ty {
                Type::FLOAT8 => Param::F64(f),
                _ => return Err(wrong()),
            },
            ValueRef::Text(t) => {
                let t = std::str::from_utf8(t).map_err(|_| wrong())?;
                match *ty {
                    Type::TEXT | Type::VARCHAR | Type::NAME | Type::BPCHAR => {
                        Param::Text(crate::pgconn::text(t).into_owned())
                    }
                    Type::BYTEA => Param::Bytes(t.as_bytes().to_vec()),
                    _ => return Err(wrong()),
                }
            }
            ValueRef::Blob(b) => match *ty {
                Type::BYTEA => Param::Bytes(b.to_vec()),
                _ => return Err(wrong()),
            },
        })
    }
}

impl PgToSql for Param {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Param::Null => Ok(IsNull::Yes),
            Param::Bool(v) => PgToSql::to_sql(v, ty, out),
            Param::I16(v) => PgToSql::to_sql(v, ty, out),
            Param::I32(v) => PgToSql::to_sql(v, ty, out),
            Param::I64(v) => PgToSql::to_sql(v, ty, out),
            Param::F64(v) => PgToSql::to_sql(v, ty, out),
            Param::Text(v) => PgToSql::to_sql(v, ty, out),
            Param::Bytes(v) => PgToSql::to_sql(v, ty, out),
        }
    }

    /// Checked in [`Param::convert`], against the statement's own types.
    fn accepts(_: &Type) -> bool {
        true
    }

    tokio_postgres::types::to_sql_checked!();
}

/// Column `i` as the SQLite value a query of the same text would have returned.
fn column(row: &tokio_postgres::Row, i: usize) -> Result<Value, DbError> {
    let ty = row.columns()[i].type_();
    let get = |e: tokio_postgres::Error| e;
    Ok(match *ty {
        Type::INT8 => opt(
            row.try_get::<_, Option<i64>>(i).map_err(get)?,
            Value::Integer,
        ),
        Type::INT4 => opt(row.try_get::<_, Option<i32>>(i).map_err(get)?, |v| {
            Value::Integer(v.into())
        }),
        Type::INT2 => opt(row.try_get::<_, Option<i16>>(i).map_err(get)?, |v| {
            Value::Integer(v.into())
        }),
        Type::BOOL => opt(row.try_get::<_, Option<bool>>(i).map_err(get)?, |v| {
            Value::Integer(v.into())
        }),
        Type::FLOAT8 => opt(row.try_get::<_, Option<f64>>(i).map_err(get)?, Value::Real),
        Type::FLOAT4 => opt(row.try_get::<_, Option<f32>>(i).map_err(get)?, |v| {
            Value::Real(v.into())
        }),
        Type::BYTEA => opt(
            row.try_get::<_, Option<Vec<u8>>>(i).map_err(get)?,
            Value::Blob,
        ),
        Type::JSON | Type::JSONB => opt(row.try_get::<_, Option<Json>>(i).map_err(get)?, |j| {
            Value::Text(j.0)
        }),
        _ => match row.try_get::<_, Option<String>>(i) {
            Ok(v) => opt(v, Value::Text),
            Err(e) => {
                return Err(DbError::Convert(format!(
                    "column {:?} has PostgreSQL type {ty}, which the commands do not read \
                     ({})",
                    row.columns()[i].name(),
                    e.source().map_or_else(|| e.to_string(), |s| s.to_string())
                )));
            }
        },
    })
}

fn opt<T>(v: Option<T>, f: impl FnOnce(T) -> Value) -> Value {
    v.map_or(Value::Null, f)
}

/// `json` and `jsonb` as their text (tokio-postgres reads them only through serde_json).
struct Json(String);

impl<'a> tokio_postgres::types::FromSql<'a> for Json {
    fn from_sql(
        ty: &Type,
        raw: &'a [u8],
    ) -> Result<Json, Box<dyn std::error::Error + Sync + Send>> {
        // jsonb's binary form is a version byte (1) before the text.
        let raw = match (*ty == Type::JSONB, raw.split_first()) {
            (true, Some((1, rest))) => rest,
            (true, _) => return Err("an unknown jsonb version".into()),
            (false, _) => raw,
        };
        Ok(Json(std::str::from_utf8(raw)?.to_owned()))
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::JSON || *ty == Type::JSONB
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_numbered_outside_quotes() {
        assert_eq!(
            placeholders("SELECT ? , x FROM t WHERE a = ? AND b = '?' AND \"c?\" = ?"),
            "SELECT $1 , x FROM t WHERE a = $2 AND b = '?' AND \"c?\" = $3"
        );
        assert_eq!(
            placeholders("WHERE a = ?1 AND (?2 IS NULL OR s = ?2) LIMIT ?3"),
            "WHERE a = $1 AND ($2 IS NULL OR s = $2) LIMIT $3"
        );
        assert_eq!(
            placeholders("a = 'it''s ?' OR b = ?"),
            "a = 'it''s ?' OR b = $1"
        );
        assert_eq!(
            placeholders("SET a = ?1 WHERE (x, y) IN (VALUES (?, ?), (?, ?))"),
            "SET a = $1 WHERE (x, y) IN (VALUES ($2, $3), ($4, $5))"
        );
    }
}
