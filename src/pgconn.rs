//! Connections to PostgreSQL, for the inbox (`[store] backend = "postgres"`) and for
//! `postgres` targets alike: the URL and password from the configuration, TLS decided by
//! `tls` alone (rustls on ring, never libpq's `prefer`, which goes on in clear when the
//! server or someone in between declines TLS), read-write sessions only, and the session
//! settings the caller needs.
//!
//! The keys that say how to reach a server are checked here too ([`check_keys`]), once for
//! both: no password in the URL, no `sslmode`, and TLS off only to this machine.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio_postgres::Client;
use tokio_postgres::config::{SslMode, TargetSessionAttrs};

use crate::secret::Secret;

/// TLS to a PostgreSQL server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PgTls {
    /// Plain TCP (or a Unix socket): for this machine.
    Off,
    /// rustls, the certificate verified against the system's roots or `ca`, and the host
    /// name checked (libpq's `sslmode=verify-full`).
    VerifyFull { ca: Option<PathBuf> },
}

/// The keys that say how to reach a PostgreSQL server, as written (`[store]` and a
/// `postgres` target share them).
pub struct ConnectionKeys {
    pub url: String,
    pub password: Option<String>,
    pub tls: Option<String>,
    pub ca: Option<PathBuf>,
}

/// Checks a server's URL and decides TLS by its hosts: off only to this machine, verified
/// otherwise. `at` names the table the keys are in, `base` the directory a relative `ca` is
/// in, and `secret` loads the password from its secret spec.
pub fn check_keys(
    pg: ConnectionKeys,
    at: &str,
    base: &Path,
    secret: &dyn Fn(&str) -> Result<Secret, String>,
) -> Result<(String, Option<Secret>, PgTls), String> {
    let config: tokio_postgres::Config = pg.url.parse().map_err(|e| {
        format!(
            "{at}.url {:?} is not a PostgreSQL URL ({e}); write postgres://USER@HOST/DATABASE",
            pg.url
        )
    })?;
    if config.get_password().is_some() {
        return Err(format!(
            "{at}.url holds a password; put it in password = \"file:/etc/hookinbox/secrets/…\" \
             (any secret spec) so that it is never printed"
        ));
    }
    if config.get_user().is_none() {
        return Err(format!(
            "{at}.url names no user: postgres://USER@HOST/DATABASE"
        ));
    }
    if config.get_ssl_mode() != tokio_postgres::config::SslMode::Prefer {
        return Err(format!(
            "{at}.url sets sslmode; set {at}.tls instead (\"verify-full\" or \"off\")"
        ));
    }
    if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
        return Err(format!(
            "{at}.url names no host: postgres://USER@HOST/DATABASE (host=/run/postgresql \
             for the local socket)"
        ));
    }
    use tokio_postgres::config::Host;
    let unix = config
        .get_hosts()
        .iter()
        .any(|h| matches!(h, Host::Unix(_)));
    // Every address the connection may go to: a hostaddr, if given, is where it goes.
    let local = config.get_hosts().iter().all(|h| match h {
        Host::Unix(_) => true,
        Host::Tcp(name) => is_this_machine(name),
    }) && config.get_hostaddrs().iter().all(|ip| ip.is_loopback());
    let tls = match pg.tls.as_deref() {
        Some("off") => {
            if !local {
                return Err(format!(
                    "{at}.tls = \"off\" is only for a server on this machine; the events and \
                     the password would cross the network in clear"
                ));
            }
            PgTls::Off
        }
        Some("verify-full") => PgTls::VerifyFull {
            ca: pg.ca.as_ref().map(|c| base.join(c)),
        },
        None if local && pg.ca.is_none() => PgTls::Off,
        None => PgTls::VerifyFull {
            ca: pg.ca.as_ref().map(|c| base.join(c)),
        },
        Some(other) => {
            return Err(format!(
                "{at}.tls {other:?} is not a mode; write \"verify-full\" (the default to another \
                 host) or \"off\" (the default to this machine)"
            ));
        }
    };
    match &tls {
        PgTls::VerifyFull { ca } => {
            if unix {
                return Err(format!(
                    "{at}: a Unix socket has no host name to verify; use tls = \"off\" for it"
                ));
            }
            if let Some(ca) = ca
                && !ca.exists()
            {
                return Err(format!("{at}.ca {} does not exist", ca.display()));
            }
        }
        PgTls::Off if pg.ca.is_some() => {
            return Err(format!("{at}.ca is for tls = \"verify-full\""));
        }
        PgTls::Off => {}
    }
    let password = match pg.password {
        None => None,
        Some(reference) => Some(secret(&reference).map_err(|e| format!("{at}.password: {e}"))?),
    };
    Ok((pg.url, password, tls))
}

/// Whether a host name (or an address, IPv6 in brackets or not) is this machine: where a
/// credential may travel without TLS.
pub fn is_this_machine(host: &str) -> bool {
    host == "localhost"
        || host
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// How to reach one server: made once from the configuration, used for every connection.
#[derive(Clone)]
pub struct Connector {
    config: tokio_postgres::Config,
    tls: Option<tls::MakeRustls>,
}

impl Connector {
    /// `options` are server settings for every session (`-c name=value …`), after any the
    /// URL gives.
    pub fn new(
        url: &str,
        password: Option<&Secret>,
        tls: &PgTls,
        connect_timeout: Duration,
        options: &str,
    ) -> anyhow::Result<Connector> {
        let mut config: tokio_postgres::Config = url.parse()?;
        if let Some(password) = password {
            config.password(password.expose());
        }
        config.connect_timeout(connect_timeout);
        config.application_name("hookinbox");
        // A dead server behind a live route is found by TCP keepalives, not only by the
        // statement timeout.
        config.keepalives_idle(Duration::from_secs(30));
        config.keepalives_interval(Duration::from_secs(10));
        config.keepalives_retries(3);
        let tls = match tls {
            PgTls::Off => {
                config.ssl_mode(SslMode::Disable);
                None
            }
            PgTls::VerifyFull { ca } => {
                config.ssl_mode(SslMode::Require);
                Some(tls::MakeRustls::new(ca.as_deref())?)
            }
        };
        // Writes go to a primary: after a failover, the next host that takes writes.
        config.target_session_attrs(TargetSessionAttrs::ReadWrite);
        let options = match config.get_options() {
            Some(theirs) => format!("{theirs} {options}"),
            None => options.to_owned(),
        };
        config.options(options);
        Ok(Connector { config, tls })
    }

    /// A new connection; its driver runs as a task of its own until the client is dropped
    /// or the connection breaks.
    pub async fn connect(&self) -> Result<Client, tokio_postgres::Error> {
        match &self.tls {
            None => {
                let (client, connection) = self.config.connect(tokio_postgres::NoTls).await?;
                tokio::spawn(drive(connection));
                Ok(client)
            }
            Some(tls) => {
                let (client, connection) = self.config.connect(tls.clone()).await?;
                tokio::spawn(drive(connection));
                Ok(client)
            }
        }
    }
}

/// One connection shared by concurrent callers (tokio-postgres pipelines their queries),
/// made on first use and again after it broke.
#[derive(Default)]
pub struct Shared(tokio::sync::Mutex<Option<std::sync::Arc<Client>>>);

impl Shared {
    /// The connection, made through `connector` if there is none or it closed.
    pub async fn get(
        &self,
        connector: &Connector,
    ) -> Result<std::sync::Arc<Client>, tokio_postgres::Error> {
        let mut held = self.0.lock().await;
        if let Some(c) = held.as_ref().filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        let client = std::sync::Arc::new(connector.connect().await?);
        *held = Some(client.clone());
        Ok(client)
    }

    /// Forgets `used` (it broke, or timed out), unless another caller already replaced it.
    pub async fn forget(&self, used: &std::sync::Arc<Client>) {
        let mut held = self.0.lock().await;
        if held
            .as_ref()
            .is_some_and(|c| std::sync::Arc::ptr_eq(c, used))
        {
            *held = None;
        }
    }
}

async fn drive<T>(connection: T)
where
    T: std::future::Future<Output = Result<(), tokio_postgres::Error>>,
{
    if let Err(e) = connection.await {
        tracing::debug!(error = %e, "a PostgreSQL connection ended");
    }
}

/// PostgreSQL's text holds no NUL, which JSON (`\u0000`) and an HTTP answer may: such text
/// is written with U+FFFD in its place, so that the event stays storable and deliverable
/// (the inbox, a `postgres` target's table, a migrated inbox alike).
pub fn text(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains('\0') {
        s.replace('\0', "\u{fffd}").into()
    } else {
        s.into()
    }
}

/// Whether the error says this connection is no use any more (a standby, a server shutting
/// down, a broken connection), as opposed to one statement failing.
pub fn connection_lost(e: &tokio_postgres::Error) -> bool {
    match e.code() {
        None => true,
        Some(code) => ["25", "57P", "08"]
            .iter()
            .any(|class| code.code().starts_with(class)),
    }
}

/// The error as an operator reads it: PostgreSQL's own message and hint where it gave one
/// (a missing table, a refused password), else what failed on the way.
pub fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let mut s = format!("postgres {}: {}", db.code().code(), db.message());
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
pub mod tls {
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
