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

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio_postgres::Client;

use super::{Attempt, Result_, Verdict};
use crate::config::{PgTls, PostgresTarget};

pub struct PgTarget {
    config: tokio_postgres::Config,
    tls: Option<tls::MakeRustls>,
    /// The insert, with the table's name quoted once here.
    insert: String,
    timeout: Duration,
    client: Mutex<Option<Arc<Client>>>,
}

/// How much sooner than the attempt's timeout the server gives up a statement (or a lock it
/// waits for): it then says why, instead of the attempt timing out with the insert still
/// running, and a new connection piling up on the app's database each time.
const SERVER_MARGIN: Duration = Duration::from_millis(500);

impl PgTarget {
    pub fn new(target: &PostgresTarget, timeout: Duration) -> anyhow::Result<PgTarget> {
        use tokio_postgres::config::{SslMode, TargetSessionAttrs};
        let mut config: tokio_postgres::Config = target.url.parse()?;
        if let Some(password) = &target.password {
            config.password(password.expose());
        }
        config.connect_timeout(timeout);
        config.application_name("hookinbox");
        // `tls` decides, not libpq's default `prefer`, which goes on in clear when the
        // server (or someone in between) declines TLS.
        let tls = match &target.tls {
            PgTls::Off => {
                config.ssl_mode(SslMode::Disable);
                None
            }
            PgTls::VerifyFull { ca } => {
                config.ssl_mode(SslMode::Require);
                Some(tls::MakeRustls::new(ca.as_deref())?)
            }
        };
        // Rows go to a primary: after a failover, the next host that takes writes.
        config.target_session_attrs(TargetSessionAttrs::ReadWrite);
        let statement_ms = timeout
            .saturating_sub(SERVER_MARGIN)
            .max(SERVER_MARGIN)
            .as_millis();
        // A commit that returns is durable on the server whatever its default; the
        // server's own time limits end a stuck insert before hookinbox gives up on it.
        let ours = format!(
            "-c synchronous_commit=on -c statement_timeout={statement_ms} \
             -c lock_timeout={statement_ms}"
        );
        let options = match config.get_options() {
            Some(theirs) => format!("{theirs} {ours}"),
            None => ours,
        };
        config.options(options);
        Ok(PgTarget {
            config,
            tls,
            insert: insert_statement(&target.table),
            timeout,
            client: Mutex::new(None),
        })
    }

    /// The connection, made if there is none (or it closed).
    async fn client(&self) -> Result<Arc<Client>, tokio_postgres::Error> {
        let mut held = self.client.lock().await;
        if let Some(c) = held.as_ref().filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        let client = match &self.tls {
            None => {
                let (client, connection) = self.config.connect(tokio_postgres::NoTls).await?;
                tokio::spawn(drive(connection));
                client
            }
            Some(tls) => {
                let (client, connection) = self.config.connect(tls.clone()).await?;
                tokio::spawn(drive(connection));
                client
            }
        };
        let client = Arc::new(client);
        *held = Some(client.clone());
        Ok(client)
    }

    /// Forgets `used`, unless another attempt has already replaced it.
    async fn forget(&self, used: &Arc<Client>) {
        let mut held = self.client.lock().await;
        if held.as_ref().is_some_and(|c| Arc::ptr_eq(c, used)) {
            *held = None;
        }
    }

    /// One attempt within the target's timeout. Connecting is never ambiguous (nothing was
    /// sent); once the insert is on its way, a timeout or a lost connection is: the row may
    /// have been committed without our hearing.
    pub async fn send(&self, a: &Attempt<'_>) -> Result_ {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let client = match tokio::time::timeout_at(deadline, self.client()).await {
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
        // PostgreSQL's text holds no NUL, which a provider's type may (JSON allows \u0000):
        // the event must stay deliverable whatever its type says.
        let event_type = a.event_type.map(|t| t.replace('\0', "\u{fffd}"));
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 8] = [
            &a.idempotency_key,
            &a.source,
            &a.event_id,
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
                let code = e.code().map_or("", |c| c.code());
                if ["25", "57P", "08"]
                    .iter()
                    .any(|class| code.starts_with(class))
                {
                    self.forget(&client).await;
                }
                Result_::failed(describe(&e))
            }
            Ok(Err(e)) => {
                self.forget(&client).await;
                Result_::timed_out(format!(
                    "{} (the insert may have been committed)",
                    describe(&e)
                ))
            }
            Err(_) => {
                self.forget(&client).await;
                Result_::timed_out(format!(
                    "no answer from PostgreSQL within {}",
                    humantime::format_duration(self.timeout)
                ))
            }
        }
    }
}

async fn drive<T>(connection: T)
where
    T: std::future::Future<Output = Result<(), tokio_postgres::Error>>,
{
    if let Err(e) = connection.await {
        tracing::debug!(error = %e, "postgres target connection ended");
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

/// The error as an operator reads it: PostgreSQL's own message and hint where it gave one
/// (a missing table, a refused password), else what failed on the way.
fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let mut s = format!("postgres {}: {}", db.code().code(), db.message());
            if db.code() == &tokio_postgres::error::SqlState::UNDEFINED_TABLE {
                s.push_str(" (create the table: docs/consuming.md has its DDL)");
            }
            if let Some(hint) = db.hint() {
                s.push_str(&format!(" (hint: {hint})"));
            }
            s
        }
        None => {
            let mut s = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(inner) = source {
                s.push_str(&format!(": {inner}"));
                source = inner.source();
            }
            s
        }
    }
}

/// tokio-postgres over tokio-rustls: the server's certificate verified against the system's
/// roots (or the `ca` file) and the host name, as libpq's `sslmode=verify-full`.
mod tls {
    use std::future::Future;
    use std::io;
    use std::path::Path;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::task::{Context, Poll};

    use rustls::pki_types::ServerName;
    use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
    use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect};

    #[derive(Clone)]
    pub struct MakeRustls(tokio_rustls::TlsConnector);

    impl MakeRustls {
        pub fn new(ca: Option<&Path>) -> anyhow::Result<MakeRustls> {
            let builder = rustls::ClientConfig::builder();
            let config = match ca {
                Some(path) => {
                    use rustls::pki_types::pem::PemObject as _;
                    let mut roots = rustls::RootCertStore::empty();
                    for cert in rustls::pki_types::CertificateDer::pem_file_iter(path)
                        .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?
                    {
                        roots.add(
                            cert.map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?,
                        )?;
                    }
                    builder.with_root_certificates(roots).with_no_client_auth()
                }
                None => {
                    use rustls_platform_verifier::BuilderVerifierExt as _;
                    builder.with_platform_verifier()?.with_no_client_auth()
                }
            };
            Ok(MakeRustls(tokio_rustls::TlsConnector::from(Arc::new(
                config,
            ))))
        }
    }

    impl<S> MakeTlsConnect<S> for MakeRustls
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        type Stream = Stream<S>;
        type TlsConnect = Connect;
        type Error = io::Error;

        fn make_tls_connect(&mut self, domain: &str) -> io::Result<Connect> {
            let name = ServerName::try_from(domain.to_owned())
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
            Ok(Connect(self.0.clone(), name))
        }
    }

    pub struct Connect(tokio_rustls::TlsConnector, ServerName<'static>);

    impl<S> TlsConnect<S> for Connect
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        type Stream = Stream<S>;
        type Error = io::Error;
        type Future = Pin<Box<dyn Future<Output = io::Result<Stream<S>>> + Send>>;

        fn connect(self, stream: S) -> Self::Future {
            let Connect(connector, name) = self;
            Box::pin(async move { Ok(Stream(connector.connect(name, stream).await?)) })
        }
    }

    pub struct Stream<S>(tokio_rustls::client::TlsStream<S>);

    impl<S> tokio_postgres::tls::TlsStream for Stream<S>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        // SCRAM's channel binding is not offered; the certificate check is what binds.
        fn channel_binding(&self) -> ChannelBinding {
            ChannelBinding::none()
        }
    }

    impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Stream<S> {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Pin::new(&mut self.0).poll_read(cx, buf)
        }
    }

    impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Stream<S> {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            Pin::new(&mut self.0).poll_write(cx, buf)
        }
        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.0).poll_flush(cx)
        }
        fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.0).poll_shutdown(cx)
        }
    }
}
