//! Copying a stopped SQLite inbox into an empty PostgreSQL one (`hookinbox migrate-store`) (identities, payloads, deliveries with their state and keys, attempts,
//! order keys, conflicts, paused targets), in one transaction, then reads everything back
//! and compares it with the file, table by table, before it commits.
//!
//! The inbox must be stopped: its lock is held for the copy, so that no event is committed
//! to the file after the copy began (it would be left behind), and no serve starts on it
//! meanwhile. Row ids are kept, so `hookinbox show 42` and the logs' ids still mean the same
//! event; the identity sequences continue after them.

use std::path::Path;

use anyhow::Context as _;
use ring::digest;
use rusqlite::types::ValueRef;
use tokio_postgres::types::ToSql;

use crate::config::PgStore;
use crate::terminal::Progress;

/// How a column's values travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Int,
    Text,
    Bytes,
    /// A number of SQLite's dynamically typed order version: numeric in PostgreSQL, carried
    /// as its text.
    Num,
}

/// One table to copy: its columns (SQLite expression, PostgreSQL column, kind), in the
/// order both sides read them back, and the order rows are compared in.
struct Table {
    name: &'static str,
    columns: &'static [(&'static str, &'static str, Kind)],
    order: &'static str,
    /// PostgreSQL's identity column, continued after the copied ids.
    identity: Option<&'static str>,
}

use Kind::*;

/// SQLite's one version column, split as PostgreSQL keeps it.
const NUMBER_VERSION: &str =
    "CASE WHEN typeof(order_version) IN ('integer', 'real') THEN order_version END";
const TEXT_VERSION: &str = "CASE WHEN typeof(order_version) = 'text' THEN order_version END";

/// Parents before children, so that every reference finds its row.
const TABLES: &[Table] = &[
    Table {
        name: "events",
        columns: &[
            ("id", "id", Int),
            ("source", "source", Text),
            ("account", "account", Text),
            ("event_id", "event_id", Text),
            ("sha256", "sha256", Text),
            ("size", "size", Int),
            ("event_type", "event_type", Text),
            ("provider_time", "provider_time", Text),
            ("received_at", "received_at", Text),
            ("remote_addr", "remote_addr", Text),
            ("pruned_at", "pruned_at", Text),
            ("origin", "origin", Text),
        ],
        order: "id",
        identity: Some("id"),
    },
    Table {
        name: "payloads",
        columns: &[
            ("event", "event", Int),
            ("CAST(body AS BLOB)", "body", Bytes),
            ("headers", "headers", Text),
        ],
        order: "event",
        identity: None,
    },
    Table {
        name: "deliveries",
        columns: &[
            ("id", "id", Int),
            ("event", "event", Int),
            ("source", "source", Text),
            ("target", "target", Text),
            ("idempotency_key", "idempotency_key", Text),
            ("state", "state", Text),
            ("attempts", "attempts", Int),
            ("schedule_base", "schedule_base", Int),
            ("next_attempt_at", "next_attempt_at", Text),
            ("lease_until", "lease_until", Text),
            ("last_error", "last_error", Text),
            ("order_key", "order_key", Text),
            (NUMBER_VERSION, "order_version_num", Num),
            (TEXT_VERSION, "order_version_text", Text),
            ("created_at", "created_at", Text),
            ("updated_at", "updated_at", Text),
        ],
        order: "id",
        identity: Some("id"),
    },
    Table {
        name: "attempts",
        columns: &[
            ("id", "id", Int),
            ("delivery", "delivery", Int),
            ("number", "number", Int),
            ("started_at", "started_at", Text),
            ("duration_ms", "duration_ms", Int),
            ("outcome", "outcome", Text),
            ("status", "status", Int),
            ("error", "error", Text),
            ("output", "output", Text),
            ("ambiguous", "ambiguous", Int),
        ],
        order: "id",
        identity: Some("id"),
    },
    Table {
        name: "order_keys",
        columns: &[
            ("source", "source", Text),
            ("target", "target", Text),
            ("order_key", "order_key", Text),
            (
                "CASE WHEN typeof(last_version) IN ('integer', 'real') THEN last_version END",
                "last_num",
                Num,
            ),
            (
                "CASE WHEN typeof(last_version) = 'text' THEN last_version END",
                "last_text",
                Text,
            ),
            ("updated_at", "updated_at", Text),
        ],
        order: "source, target, order_key",
        identity: None,
    },
    Table {
        name: "conflicts",
        columns: &[
            ("id", "id", Int),
            ("event", "event", Int),
            ("source", "source", Text),
            ("account", "account", Text),
            ("event_id", "event_id", Text),
            ("original_sha256", "original_sha256", Text),
            ("sha256", "sha256", Text),
            ("size", "size", Int),
            ("CAST(body AS BLOB)", "body", Bytes),
            ("headers", "headers", Text),
            ("received_at", "received_at", Text),
            ("last_seen_at", "last_seen_at", Text),
            ("seen", "seen", Int),
        ],
        order: "id",
        identity: Some("id"),
    },
    Table {
        name: "paused_targets",
        columns: &[
            ("source", "source", Text),
            ("target", "target", Text),
            ("paused_at", "paused_at", Text),
            ("paused_by", "paused_by", Text),
        ],
        order: "source, target",
        identity: None,
    },
    Table {
        name: "learnt_secrets",
        columns: &[
            ("source", "source", Text),
            ("CAST(secret AS BLOB)", "secret", Bytes),
            ("learnt_at", "learnt_at", Text),
            ("remote_addr", "remote_addr", Text),
        ],
        order: "source",
        identity: None,
    },
    Table {
        name: "kept",
        columns: &[
            ("name", "name", Text),
            ("value", "value", Text),
            ("updated_at", "updated_at", Text),
        ],
        order: "name",
        identity: None,
    },
    Table {
        name: "gaps",
        columns: &[
            ("id", "id", Int),
            ("source", "source", Text),
            ("kind", "kind", Text),
            ("started_at", "started_at", Text),
            ("ended_at", "ended_at", Text),
            ("detail", "detail", Text),
            ("recovered_at", "recovered_at", Text),
            ("recovery", "recovery", Text),
        ],
        order: "id",
        identity: Some("id"),
    },
    // The stopped serve's rows, as those of a replica that stopped: the first replica to
    // start on the copy records the move's window as a gap, then drops them.
    Table {
        name: "receiving",
        columns: &[
            ("source", "source", Text),
            ("started_at", "started_at", Text),
            ("heartbeat_at", "heartbeat_at", Text),
            ("stopped_at", "stopped_at", Text),
            ("rejecting_since", "rejecting_since", Text),
            ("rejecting_last", "rejecting_last", Text),
            ("rejected", "rejected", Int),
            ("rejected_by", "rejected_by", Text),
        ],
        order: "source",
        identity: None,
    },
    Table {
        name: "recovery_requests",
        columns: &[
            ("source", "source", Text),
            ("account", "account", Text),
            ("event_id", "event_id", Text),
            ("requested_at", "requested_at", Text),
            ("delivery", "delivery", Int),
            ("asked", "asked", Int),
        ],
        order: "source, account, event_id",
        identity: None,
    },
];

/// Rows per INSERT, and the bytes at which a chunk goes out sooner (1 MiB bodies).
const CHUNK_ROWS: usize = 1000;
const CHUNK_BYTES: usize = 16 * 1024 * 1024;

/// One value as both sides hold it (after PostgreSQL's text rules: no NUL).
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Null,
    Int(i64),
    Text(String),
    Bytes(Vec<u8>),
}

impl Value {
    fn len(&self) -> usize {
        match self {
            Value::Null | Value::Int(_) => 8,
            Value::Text(t) => t.len(),
            Value::Bytes(b) => b.len(),
        }
    }

    /// Feeds the value to the table's digest, unambiguously (kind, length, bytes).
    fn digest(&self, d: &mut digest::Context) {
        let (tag, bytes): (u8, std::borrow::Cow<[u8]>) = match self {
            Value::Null => (0, (&[][..]).into()),
            Value::Int(i) => (1, i.to_le_bytes().to_vec().into()),
            Value::Text(t) => (2, t.as_bytes().into()),
            Value::Bytes(b) => (3, b.as_slice().into()),
        };
        d.update(&[tag]);
        d.update(&(bytes.len() as u64).to_le_bytes());
        d.update(&bytes);
    }
}

/// Reads one SQLite value of a column of `kind`; `cleaned` counts text whose NUL became
/// U+FFFD (PostgreSQL's text holds no NUL).
fn from_sqlite(v: ValueRef<'_>, kind: Kind, cleaned: &mut u64) -> anyhow::Result<Value> {
    let text = |s: &[u8], cleaned: &mut u64| {
        let s = String::from_utf8_lossy(s);
        match crate::pgconn::text(&s) {
            std::borrow::Cow::Borrowed(_) => s.into_owned(),
            std::borrow::Cow::Owned(replaced) => {
                *cleaned += 1;
                replaced
            }
        }
    };
    Ok(match (kind, v) {
        (_, ValueRef::Null) => Value::Null,
        (Num, ValueRef::Integer(i)) => Value::Text(i.to_string()),
        (Num, ValueRef::Real(f)) => Value::Text(super::postgres::numeric_text(f)),
        (Int, ValueRef::Integer(i)) => Value::Int(i),
        (Text, ValueRef::Text(t)) => Value::Text(text(t, cleaned)),
        (Bytes, ValueRef::Blob(b) | ValueRef::Text(b)) => Value::Bytes(b.to_vec()),
        (kind, other) => anyhow::bail!(
            "a value of type {:?} where the schema has {kind:?}; the inbox is damaged \
             (sqlite3 inbox.db 'PRAGMA integrity_check')",
            other.data_type()
        ),
    })
}

/// What one table's copy came to.
#[derive(Debug, serde::Serialize)]
pub struct CopiedTable {
    pub table: &'static str,
    pub rows: u64,
    /// SHA-256 over every row, the same read from the file and read back from PostgreSQL.
    pub digest: String,
}

/// What the copy came to.
#[derive(Debug, serde::Serialize)]
pub struct Migrated {
    pub from: String,
    pub to: String,
    pub tables: Vec<CopiedTable>,
    /// Text values whose NUL characters were stored as U+FFFD.
    pub nul_replaced: u64,
}

/// Copies the stopped SQLite inbox at `db` into the empty PostgreSQL inbox `target` (its
/// schema made if missing), reads it back and compares, then commits. Holds the file's
/// lock meanwhile: an event committed after the copy began would be left behind.
pub fn sqlite_to_postgres(db: &Path, target: &PgStore) -> anyhow::Result<Migrated> {
    let _lock = super::sqlite::lock::InboxLock::acquire(db).context(
        "migrate-store copies a stopped inbox (an event stored after the copy began would be \
         left behind): stop serve first, e.g. systemctl stop hookinbox",
    )?;
    let conn = super::sqlite::read::open_current(db)
        .with_context(|| format!("opening the inbox {}", db.display()))?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(copy(&conn, db, target))
}

async fn copy(
    conn: &rusqlite::Connection,
    db: &Path,
    target: &crate::config::PgStore,
) -> anyhow::Result<Migrated> {
    let connector = crate::pgconn::Connector::new(
        &target.url,
        target.password.as_ref(),
        &target.tls,
        std::time::Duration::from_secs(10),
        "-c synchronous_commit=on",
    )?;
    let mut client = connector.connect().await.map_err(|e| {
        anyhow::anyhow!(
            "connecting to {}: {}",
            target.url,
            crate::pgconn::describe(&e)
        )
    })?;
    super::postgres::migrate(&mut client).await?;
    for t in TABLES {
        let n: i64 = client
            .query_one(&format!("SELECT count(*) FROM {}", t.name), &[])
            .await?
            .get(0);
        if n > 0 {
            anyhow::bail!(
                "the PostgreSQL inbox at {} is not empty ({n} rows in {}): migrate-store copies \
                 into an empty one; point --to at a new database",
                target.url,
                t.name
            );
        }
    }
    // One snapshot of the file for every table.
    conn.execute_batch("BEGIN")?;
    let tx = client.transaction().await?;
    let mut outcome = Migrated {
        from: db.display().to_string(),
        to: target.url.clone(),
        tables: Vec::new(),
        nul_replaced: 0,
    };
    for t in TABLES {
        let total: i64 = conn.query_row(&format!("SELECT count(*) FROM {}", t.name), [], |r| {
            r.get(0)
        })?;
        let mut progress = Progress::new(t.name, Some(total as u64));
        let (rows, sent) =
            copy_table(conn, &tx, t, &mut outcome.nul_replaced, &mut progress).await?;
        progress.finish();
        let back = read_back(&tx, t).await?;
        if back != sent {
            anyhow::bail!(
                "{}: {rows} rows copied, but what PostgreSQL holds differs from the file \
                 (SHA-256 {} read back, {} sent); nothing was committed",
                t.name,
                hex::encode(&back[..8]),
                hex::encode(&sent[..8])
            );
        }
        if let Some(column) = t.identity {
            tx.execute(
                &format!(
                    "SELECT setval(pg_get_serial_sequence('{0}', '{column}'), \
                     coalesce(max({column}), 0) + 1, false) FROM {0}",
                    t.name
                ),
                &[],
            )
            .await?;
        }
        outcome.tables.push(CopiedTable {
            table: t.name,
            rows,
            digest: hex::encode(sent),
        });
    }
    tx.commit().await?;
    conn.execute_batch("COMMIT")?;
    Ok(outcome)
}

/// Copies one table in chunks; returns its row count and the digest of what was sent.
async fn copy_table(
    conn: &rusqlite::Connection,
    tx: &tokio_postgres::Transaction<'_>,
    t: &Table,
    cleaned: &mut u64,
    progress: &mut Progress,
) -> anyhow::Result<(u64, Vec<u8>)> {
    let select: Vec<&str> = t.columns.iter().map(|c| c.0).collect();
    let mut stmt = conn.prepare(&format!(
        "SELECT {} FROM {} ORDER BY {}",
        select.join(", "),
        t.name,
        t.order
    ))?;
    let insert = insert_statement(t);
    let mut rows = stmt.query([])?;
    let mut d = digest::Context::new(&digest::SHA256);
    let mut chunk: Vec<Vec<Value>> = Vec::with_capacity(CHUNK_ROWS);
    let (mut bytes, mut copied) = (0, 0u64);
    while let Some(row) = rows.next()? {
        let mut values = Vec::with_capacity(t.columns.len());
        for (i, (_, _, kind)) in t.columns.iter().enumerate() {
            let v = from_sqlite(row.get_ref(i)?, *kind, cleaned)
                .with_context(|| format!("{}.{}", t.name, t.columns[i].1))?;
            bytes += v.len();
            v.digest(&mut d);
            values.push(v);
        }
        chunk.push(values);
        if chunk.len() == CHUNK_ROWS || bytes >= CHUNK_BYTES {
            copied += insert_chunk(tx, &insert, t, &mut chunk).await?;
            progress.set(copied);
            bytes = 0;
        }
    }
    copied += insert_chunk(tx, &insert, t, &mut chunk).await?;
    Ok((copied, d.finish().as_ref().to_vec()))
}

/// `INSERT … SELECT … FROM unnest($1::bigint[], $2::text[], …)`: one statement per chunk.
fn insert_statement(t: &Table) -> String {
    let names: Vec<&str> = t.columns.iter().map(|c| c.1).collect();
    let arrays: Vec<String> = t
        .columns
        .iter()
        .enumerate()
        .map(|(i, (_, _, kind))| {
            let ty = match kind {
                Int => "bigint",
                Text | Num => "text",
                Bytes => "bytea",
            };
            format!("${}::{ty}[]", i + 1)
        })
        .collect();
    let picks: Vec<String> = t
        .columns
        .iter()
        .enumerate()
        .map(|(i, (_, _, kind))| match kind {
            Num => format!("c{i}::numeric"),
            _ => format!("c{i}"),
        })
        .collect();
    let aliases: Vec<String> = (0..t.columns.len()).map(|i| format!("c{i}")).collect();
    format!(
        "INSERT INTO {} ({}) SELECT {} FROM unnest({}) AS u ({})",
        t.name,
        names.join(", "),
        picks.join(", "),
        arrays.join(", "),
        aliases.join(", ")
    )
}

async fn insert_chunk(
    tx: &tokio_postgres::Transaction<'_>,
    insert: &str,
    t: &Table,
    chunk: &mut Vec<Vec<Value>>,
) -> anyhow::Result<u64> {
    if chunk.is_empty() {
        return Ok(0);
    }
    let mut columns: Vec<Box<dyn ToSql + Sync + Send>> = Vec::with_capacity(t.columns.len());
    for (i, (_, _, kind)) in t.columns.iter().enumerate() {
        let column: Box<dyn ToSql + Sync + Send> = match kind {
            Int => Box::new(
                chunk
                    .iter()
                    .map(|r| match &r[i] {
                        Value::Int(n) => Some(*n),
                        _ => None,
                    })
                    .collect::<Vec<Option<i64>>>(),
            ),
            Text | Num => Box::new(
                chunk
                    .iter_mut()
                    .map(|r| match std::mem::replace(&mut r[i], Value::Null) {
                        Value::Text(s) => Some(s),
                        _ => None,
                    })
                    .collect::<Vec<Option<String>>>(),
            ),
            Bytes => Box::new(
                chunk
                    .iter_mut()
                    .map(|r| match std::mem::replace(&mut r[i], Value::Null) {
                        Value::Bytes(b) => Some(b),
                        _ => None,
                    })
                    .collect::<Vec<Option<Vec<u8>>>>(),
            ),
        };
        columns.push(column);
    }
    let params: Vec<&(dyn ToSql + Sync)> = columns
        .iter()
        .map(|c| c.as_ref() as &(dyn ToSql + Sync))
        .collect();
    let n = tx
        .execute(insert, &params)
        .await
        .with_context(|| format!("copying {}", t.name))?;
    chunk.clear();
    Ok(n)
}

/// The digest of the table as PostgreSQL holds it, row by row in the same order.
async fn read_back(tx: &tokio_postgres::Transaction<'_>, t: &Table) -> anyhow::Result<Vec<u8>> {
    let select: Vec<String> = t
        .columns
        .iter()
        .map(|(_, name, kind)| match kind {
            Int => format!("{name}::bigint"),
            Num => format!("{name}::text"),
            _ => (*name).to_owned(),
        })
        .collect();
    // In the file's order: SQLite compares text byte by byte, which is collation "C".
    let order: Vec<String> = t
        .order
        .split(", ")
        .map(|column| match t.columns.iter().find(|c| c.1 == column) {
            Some((_, _, Text)) => format!("{column} COLLATE \"C\""),
            _ => column.to_owned(),
        })
        .collect();
    let portal_sql = format!(
        "SELECT {} FROM {} ORDER BY {}",
        select.join(", "),
        t.name,
        order.join(", ")
    );
    let statement = tx.prepare(&portal_sql).await?;
    let portal = tx.bind(&statement, &[]).await?;
    let mut d = digest::Context::new(&digest::SHA256);
    loop {
        let rows = tx.query_portal(&portal, CHUNK_ROWS as i32).await?;
        if rows.is_empty() {
            break;
        }
        for row in &rows {
            for (i, (_, _, kind)) in t.columns.iter().enumerate() {
                let v = match kind {
                    Int => row.get::<_, Option<i64>>(i).map_or(Value::Null, Value::Int),
                    Text | Num => row
                        .get::<_, Option<String>>(i)
                        .map_or(Value::Null, Value::Text),
                    Bytes => row
                        .get::<_, Option<Vec<u8>>>(i)
                        .map_or(Value::Null, Value::Bytes),
                };
                v.digest(&mut d);
            }
        }
    }
    Ok(d.finish().as_ref().to_vec())
}
