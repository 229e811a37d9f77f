//! PostgreSQL targets: each event inserted into a table of the app's own database, keyed by
//! its idempotency key. `INSERT … ON CONFLICT (idempotency_key) DO NOTHING`: a retry after
//! a lost answer, a replay or a crash between the insert and its record inserts nothing
//! twice, and either way the row is there, so the attempt is delivered. The app claims and
//! processes the rows in its own transactions, with its domain change (docs/consuming.md):
//! the transactional inbox without a webhook endpoint.
//!
//! One connection per target, made on first use and again after it broke; tokio-postgres
//! pipelines the target's concurrent attempts over it. TLS is rustls on ring: off to this
//! machine, else verified (the system's roots, or `ca`) with the host name checked.

use std::time::Duration;

use super::{Attempt, Result_, Verdict};
use crate::config::PostgresTarget;
use crate::store::postgres::connect::{Connector, Shared, connection_lost};

pub struct PgTarget {
    connector: Connector,
    /// The insert, with the table's name quoted once here.
    insert: String,
    timeout: Duration,
    client: Shared,
}

/// How much sooner than the attempt's timeout the server gives up a statement (or a lock it
/// waits for): it then says why, instead of the attempt timing out with the insert still
/// running, and a new connection piling up on the app's database each time.
const SERVER_MARGIN: Duration = Duration::from_millis(500);

impl PgTarget {
    pub fn new(target: &PostgresTarget, timeout: Duration) -> anyhow::Result<PgTarget> {
        let statement_ms = timeout
            .saturating_sub(SERVER_MARGIN)
            .max(SERVER_MARGIN)
            .as_millis();
        // A commit that returns is durable on the server whatever its default; the
        // server's own time limits end a stuck insert before hookinbox gives up on it.
        let options = format!(
            "-c synchronous_commit=on -c statement_timeout={statement_ms} \
             -c lock_timeout={statement_ms}"
        );
        Ok(PgTarget {
            connector: Connector::new(
                &target.url,
                target.password.as_ref(),
                &target.tls,
                timeout,
                &options,
            )?,
            insert: insert_statement(&target.table),
            timeout,
            client: Shared::default(),
        })
    }

    /// One attempt within the target's timeout. Connecting is never ambiguous (nothing was
    /// sent); once the insert is on its way, a timeout or a lost connection is: the row may
    /// have been committed without our hearing.
    pub async fn send(&self, a: &Attempt<'_>) -> Result_ {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let client = match tokio::time::timeout_at(deadline, self.client.get(&self.connector)).await
        {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Result_::failed(describe(&e)),
            Err(_) => {
                return Result_::failed(format!(
                    "could not connect to PostgreSQL within {}",
                    humantime::format_duration(self.timeout)
                ));
            }
        };
        let headers = serde_json::to_string(a.headers).expect("strings always serialise");
        // PostgreSQL's text holds no NUL, which a provider's id or type may (JSON allows
        // \u0000): the event must stay deliverable whatever they say.
        let event_type = a.event_type.map(crate::store::postgres::connect::text);
        let event_id = crate::store::postgres::connect::text(a.event_id);
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 8] = [
            &a.idempotency_key,
            &a.source,
            &event_id,
            &event_type,
            &a.received_at,
            &headers,
            &a.body,
            &a.origin,
        ];
        let insert = client.execute(&self.insert, &params);
        match tokio::time::timeout_at(deadline, insert).await {
            // Inserted now, or already there from an earlier attempt: delivered either way.
            Ok(Ok(_)) => Result_ {
                verdict: Verdict::Delivered,
                status: None,
                error: None,
                output: None,
                ambiguous: false,
            },
            Ok(Err(e)) if e.as_db_error().is_some() => {
                // The server's refusal: nothing committed. A standby or a server going
                // down is not to be asked again on this connection.
                if connection_lost(&e) {
                    self.client.forget(&client).await;
                }
                Result_::failed(describe(&e))
            }
            Ok(Err(e)) => {
                self.client.forget(&client).await;
                Result_::timed_out(format!(
                    "{} (the insert may have been committed)",
                    describe(&e)
                ))
            }
            Err(_) => {
                self.client.forget(&client).await;
                Result_::timed_out(format!(
                    "no answer from PostgreSQL within {}",
                    humantime::format_duration(self.timeout)
                ))
            }
        }
    }
}

/// The insert into `table` (already checked to be `name` or `schema.name`, each part an
/// identifier). Quoted, so that a name is taken as written.
fn insert_statement(table: &str) -> String {
    let quoted: Vec<String> = table.split('.').map(|p| format!("\"{p}\"")).collect();
    format!(
        "INSERT INTO {} (idempotency_key, source, event_id, event_type, received_at, headers, \
         body, origin) VALUES ($1, $2, $3, $4, $5::text::timestamptz, $6::text::jsonb, $7, $8) \
         ON CONFLICT (idempotency_key) DO NOTHING",
        quoted.join(".")
    )
}

/// PostgreSQL's message, with where to find the table's DDL when it is missing.
fn describe(e: &tokio_postgres::Error) -> String {
    let mut s = crate::store::postgres::connect::describe(e);
    if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) {
        s.push_str(" (create the table: docs/consuming.md has its DDL)");
    }
    s
}
