//! The PostgreSQL inbox's schema (`schema-postgres.sql`) and its migrations, applied under an
//! advisory lock so that replicas starting together migrate once; the operator's commands
//! only check the version ([`require_version`]).

use tokio_postgres::Client;

pub const SCHEMA: &str = include_str!("../../../schema-postgres.sql");

/// The advisory lock key that migrations hold ("hookinbo" in ASCII): any number would do, as
/// long as no other application on the database uses it.
const MIGRATION_LOCK: i64 = 0x686f_6f6b_696e_626f;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("connecting to PostgreSQL: {0}")]
    Connect(String),
    #[error("PostgreSQL: {0}")]
    Db(String),
    #[error(
        "the PostgreSQL inbox has schema version {found}, newer than this hookinbox knows \
         ({known}); run the newer hookinbox, or migrate-store from a backup"
    )]
    TooNew { found: i64, known: i64 },
}

impl From<tokio_postgres::Error> for StartError {
    fn from(e: tokio_postgres::Error) -> StartError {
        StartError::Db(crate::pgconn::describe(&e))
    }
}

/// The schema version this binary writes.
pub fn schema_version() -> i64 {
    crate::store::schema_sections(SCHEMA)
        .last()
        .map_or(0, |(v, _)| *v)
}

/// Refuses a schema version other than this binary's, for what must not migrate (the
/// operator commands), with what to do.
pub fn require_version(found: i64) -> anyhow::Result<()> {
    let known = schema_version();
    match found.cmp(&known) {
        std::cmp::Ordering::Equal => Ok(()),
        std::cmp::Ordering::Less => anyhow::bail!(
            "the PostgreSQL inbox has schema version {found}, this hookinbox writes {known}: \
             start `hookinbox serve` with this binary once, which migrates it"
        ),
        std::cmp::Ordering::Greater => anyhow::bail!(
            "the PostgreSQL inbox has schema version {found}, newer than this hookinbox knows \
             ({known}); run the newer hookinbox"
        ),
    }
}

/// Applies the migrations this database lacks, each in one transaction that holds
/// [`MIGRATION_LOCK`]: a second replica starting at the same moment waits, then finds them
/// applied.
pub async fn migrate(client: &mut Client) -> Result<(), StartError> {
    let encoding: String = client
        .query_one("SELECT current_setting('server_encoding')", &[])
        .await?
        .get(0);
    if encoding != "UTF8" {
        return Err(StartError::Db(format!(
            "the database's encoding is {encoding}, which cannot hold every event's text; \
             create it with UTF8: createdb --encoding UTF8 --template template0 …"
        )));
    }
    let known = schema_version();
    // The version found before the first step: 0 for a new inbox.
    let mut first_found: Option<i64> = None;
    for (version, sql) in crate::store::schema_sections(SCHEMA) {
        let tx = client.transaction().await?;
        // A migration may rewrite a large table: not under the sessions' 5 s limits. The
        // lock waits for a replica migrating at the same moment.
        tx.batch_execute("SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = '10min'")
            .await?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .await?;
        let exists: bool = tx
            .query_one("SELECT to_regclass('schema_migrations') IS NOT NULL", &[])
            .await?
            .get(0);
        let found: i64 = if exists {
            tx.query_one(
                "SELECT coalesce(max(version), 0)::bigint FROM schema_migrations",
                &[],
            )
            .await?
            .get(0)
        } else {
            0
        };
        if found > known {
            return Err(StartError::TooNew { found, known });
        }
        if version <= found {
            continue;
        }
        tx.batch_execute(sql).await?;
        tx.execute(
            "INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)",
            &[&(version as i32), &crate::clock::iso_now()],
        )
        .await?;
        tx.commit().await?;
        // A new inbox goes through every step: one line for it.
        if *first_found.get_or_insert(found) > 0 {
            tracing::info!(version, "migrated the PostgreSQL inbox");
        } else if version == known {
            tracing::info!(version, "created the PostgreSQL inbox");
        }
    }
    Ok(())
}
