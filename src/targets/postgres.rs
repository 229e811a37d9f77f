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

use std::path::PathBuf;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde::de::MapAccess;

use super::{
    Attempt, AttemptResult, Context, Description, Destination, Forwarder, TargetKind, Disposition,
};
use crate::manual::{IfAbsent, Key, Section};
use crate::pgconn::{Connector, PgTls, Shared, connection_lost};
use crate::secret::Secret;

/// The table a `postgres` target inserts into when it names none.
pub const DEFAULT_PG_TABLE: &str = "webhook_inbox";

/// A postgres target's key, as written: its table.
#[derive(Default)]
pub struct Written {
    table: Option<RawPostgres>,
}

/// A target's `postgres` table: the app's database and the table events go into. (Its
/// name is in serde's messages: "expected struct RawPostgres".)
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPostgres {
    url: String,
    #[serde(default)]
    table: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    tls: Option<String>,
    #[serde(default)]
    ca: Option<PathBuf>,
}

impl TargetKind for Written {
    const KEYS: &'static [Key] = &[
        Key {
            name: "postgres",
            form: "table",
            if_absent: IfAbsent::Off,
            meaning: "Insert each event as a row of a table in the app's own PostgreSQL \
                          database, keyed by its idempotency key (see [sources.targets.postgres] \
                          and docs/consuming.md). One of url, command and postgres.",
        },
    ];
    const SECTIONS: &'static [Section] = &[
        Section {
            header: "[sources.targets.postgres]",
            about: "A target's table in the app's own database, also written inline: postgres = { \
                    url = \"postgres://app@127.0.0.1/app\", table = \"webhook_inbox\" }. Each event \
                    is inserted once (INSERT … ON CONFLICT (idempotency_key) DO NOTHING), and the \
                    app claims rows in its own transactions; docs/consuming.md has the table's \
                    DDL and a consuming transaction.",
            keys: &[
                Key {
                    name: "url",
                    form: "postgres:// URL",
                    if_absent: IfAbsent::Required,
                    meaning: "The database: postgres://USER@HOST[:PORT]/DATABASE, without a \
                              password (host=/run/postgresql for the local socket).",
                },
                Key {
                    name: "table",
                    form: "name or schema.name",
                    if_absent: IfAbsent::Default("\"webhook_inbox\""),
                    meaning: "The table the rows go into.",
                },
                Key {
                    name: "password",
                    form: "secret spec",
                    if_absent: IfAbsent::Off,
                    meaning: "The user's password (file:, env:, credential:).",
                },
                Key {
                    name: "tls",
                    form: "verify-full or off",
                    if_absent: IfAbsent::Derived("off to this machine, else verify-full"),
                    meaning: "verify-full: rustls, the certificate checked against the system's \
                              roots (or ca) and the host name. off: only to this machine.",
                },
                Key {
                    name: "ca",
                    form: "path",
                    if_absent: IfAbsent::Derived("the system's roots"),
                    meaning: "PEM certificates the server's must chain to (with verify-full).",
                },
            ],
        },
    ];

    const EXAMPLE: &'static str = "[sources.targets.postgres]\nurl = \"postgres://app@127.0.0.1/app\"";

    fn read<'de, A: MapAccess<'de>>(&mut self, _: &str, map: &mut A) -> Result<(), A::Error> {
        self.table = Some(map.next_value()?);
        Ok(())
    }

    fn check(self, cx: &Context) -> Result<Box<dyn Destination>, String> {
        Ok(Box::new(self.settings(cx)?))
    }
}

impl Written {
    /// A `postgres` target's table: checked here, so that an attempt never meets a name it
    /// cannot quote, and TLS decided by the host (off only to this machine).
    fn settings(self, cx: &Context) -> Result<PostgresSettings, String> {
            let pg = self.table.expect("a postgres target has its table");
            let at = format!("{}.postgres", cx.at);
            let (url, password, tls) = crate::pgconn::check_keys(
                crate::pgconn::ConnectionKeys {
                    url: pg.url,
                    password: pg.password,
                    tls: pg.tls,
                    ca: pg.ca,
                },
                &at,
                cx.base,
                cx.secret,
            )?;
        let table = pg.table.unwrap_or_else(|| DEFAULT_PG_TABLE.to_owned());
        // Lowercase only: the name is quoted, and PostgreSQL folds an unquoted CREATE TABLE
        // Inbox to inbox, which a quoted "Inbox" would never find.
        let part_ok = |p: &str| {
            !p.is_empty()
                && p.len() <= 63
                && p.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
                && !p.as_bytes()[0].is_ascii_digit()
        };
        let parts: Vec<&str> = table.split('.').collect();
        if parts.len() > 2 || !parts.iter().all(|p| part_ok(p)) {
            return Err(format!(
                "{at}.table {table:?} must be a table name or schema.name of lowercase letters, \
                 digits and _"
            ));
        }
        Ok(PostgresSettings {
            url,
            table,
            password,
            tls,
        })
    }
}

/// A postgres target, checked. Its `Debug` prints no password (see [`Secret`]).
#[derive(Debug)]
pub struct PostgresSettings {
    /// A libpq-style URL without a password (`postgres://app@db.internal/app`).
    url: String,
    /// `name` or `schema.name`.
    table: String,
    password: Option<Secret>,
    tls: PgTls,
}

impl Destination for PostgresSettings {
    fn describe(&self) -> Description {
        let to = format!("{} table {}", self.url, self.table);
        Description {
            key: Written::NAME,
            json: to.clone().into(),
            text: to,
        }
    }

    fn forwarder(&self, timeout: Duration) -> anyhow::Result<Box<dyn Forwarder>> {
        Ok(Box::new(PgTarget::new(self, timeout)?))
    }
}

/// A postgres target, running: its connection.
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
    pub fn new(target: &PostgresSettings, timeout: Duration) -> anyhow::Result<PgTarget> {
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
    pub async fn insert(&self, a: &Attempt<'_>) -> AttemptResult {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let client = match tokio::time::timeout_at(deadline, self.client.get(&self.connector)).await
        {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return AttemptResult::failed(error_text(&e)),
            Err(_) => {
                return AttemptResult::failed(format!(
                    "could not connect to PostgreSQL within {}",
                    humantime::format_duration(self.timeout)
                ));
            }
        };
        let headers = serde_json::to_string(a.headers).expect("strings always serialise");
        // PostgreSQL's text holds no NUL, which a provider's id or type may (JSON allows
        // \u0000): the event must stay deliverable whatever they say.
        let event_type = a.event_type.map(crate::pgconn::text);
        let event_id = crate::pgconn::text(a.event_id);
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
            Ok(Ok(_)) => AttemptResult {
                disposition: Disposition::Delivered,
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
                AttemptResult::failed(error_text(&e))
            }
            Ok(Err(e)) => {
                self.client.forget(&client).await;
                AttemptResult::timed_out(format!(
                    "{} (the insert may have been committed)",
                    error_text(&e)
                ))
            }
            Err(_) => {
                self.client.forget(&client).await;
                AttemptResult::timed_out(format!(
                    "no answer from PostgreSQL within {}",
                    humantime::format_duration(self.timeout)
                ))
            }
        }
    }
}

impl Forwarder for PgTarget {
    fn send<'a>(&'a self, a: &'a Attempt<'_>) -> BoxFuture<'a, AttemptResult> {
        Box::pin(self.insert(a))
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
fn error_text(e: &tokio_postgres::Error) -> String {
    let mut s = crate::pgconn::describe(e);
    if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) {
        s.push_str(" (create the table: docs/consuming.md has its DDL)");
    }
    s
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// A table and TLS by default: `webhook_inbox`, off to this machine, verified elsewhere.
    #[test]
    fn a_target_naming_only_its_database_gets_the_default_table_and_tls_by_its_host() {
        let no_secrets = |_: &str| -> Result<Secret, String> { unreachable!("none is named") };
        let cx = Context {
            at: "sources[0] (\"demo\").targets[0] (\"db\")",
            base: Path::new("/etc/hookinbox"),
            secret: &no_secrets,
        };
        let written = |url: &str| Written {
            table: Some(RawPostgres {
                url: url.to_owned(),
                table: None,
                password: None,
                tls: None,
                ca: None,
            }),
        };
        let local = written("postgres://app@127.0.0.1/app").settings(&cx).unwrap();
        assert_eq!((local.table.as_str(), &local.tls), ("webhook_inbox", &PgTls::Off));
        let verified = written("postgres://app@db.internal/app").settings(&cx).unwrap();
        assert_eq!(verified.tls, PgTls::VerifyFull { ca: None });
    }
}
