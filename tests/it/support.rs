//! The test harness: a real hookinbox server on 127.0.0.1:0 (in-process, or the real binary
//! for crash tests), real signatures made with the configured secrets, and read-only looks
//! into the inbox file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hookinbox::commands::serve::{self, Running};
use hookinbox::config::{self, Config};
use hookinbox::scheme::Scheme;
use rusqlite::OptionalExtension;

/// The `[server]`/`[admin]` part of every test config: ephemeral ports, short timeouts.
pub const SERVER: &str = r#"
[server]
listen = "127.0.0.1:0"
max_body = "64KiB"
header_timeout = "1s"
body_timeout = "1s"

[admin]
listen = "127.0.0.1:0"
"#;

/// One Standard Webhooks source, `sw`, with one target: the shape most tests need.
pub const ONE_SOURCE: &str = r#"
[[sources]]
name = "sw"
scheme = "standard-webhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
[[sources.targets]]
name = "app"
url = "http://127.0.0.1:9/hooks"
"#;

/// The `sw` source forwarding to `url`; `settings` are more lines of its target's table.
pub fn forwarding(url: &str, settings: &str) -> String {
    format!(
        r#"
[[sources]]
name = "sw"
scheme = "standard-webhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
[[sources.targets]]
name = "app"
url = "{url}"
{settings}
"#
    )
}

/// One source of every scheme, each with two targets, so that one test server covers all.
pub const ALL_SCHEMES: &str = r#"
[[sources]]
name = "sw"
scheme = "standard-webhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
[[sources.targets]]
name = "app"
url = "http://127.0.0.1:9/hooks"
[[sources.targets]]
name = "audit"
command = ["/bin/true"]

[[sources]]
name = "stripe"
scheme = "stripe"
secrets = ["whsec_test_secret"]
[[sources.targets]]
name = "app"
url = "http://127.0.0.1:9/hooks"

[[sources]]
name = "github"
scheme = "github"
secrets = ["It's a Secret to Everybody"]
[[sources.targets]]
name = "app"
url = "http://127.0.0.1:9/hooks"

[[sources]]
name = "shopify"
scheme = "shopify"
secrets = ["hush"]
[[sources.targets]]
name = "app"
url = "http://127.0.0.1:9/hooks"

[[sources]]
name = "slack"
scheme = "slack"
secrets = ["8f742231b10e8888abcd99yyyzzz85a5"]
[[sources.targets]]
name = "app"
url = "http://127.0.0.1:9/hooks"

[[sources]]
name = "gitlab"
scheme = "gitlab"
secrets = ["glpat-shared-token"]
[[sources.targets]]
name = "app"
url = "http://127.0.0.1:9/hooks"

[[sources]]
name = "hmac"
scheme = "hmac"
secrets = ["generic-secret"]
id_header = "X-Event-Id"
hmac = { header = "X-Signature", algorithm = "sha512", encoding = "base64", prefix = "sha512=", timestamp_header = "X-Timestamp", signed = "{timestamp}:{body}" }
[[sources.targets]]
name = "app"
url = "http://127.0.0.1:9/hooks"
"#;

/// The header that carries each test source's signature (or token).
pub fn signature_header(source: &str) -> &'static str {
    match source {
        "sw" => "webhook-signature",
        "stripe" => "stripe-signature",
        "github" => "x-hub-signature-256",
        "shopify" => "x-shopify-hmac-sha256",
        "slack" => "x-slack-signature",
        "gitlab" => "x-gitlab-token",
        "hmac" => "x-signature",
        other => panic!("no test source {other}"),
    }
}

/// A running server with its own temporary directory and inbox.
pub struct TestServer {
    /// Holds the temporary directory (config and inbox) until the server is dropped.
    _dir: tempfile::TempDir,
    /// The directory of the server this one restarted, whose inbox it still uses.
    _keep: Option<tempfile::TempDir>,
    pub db: PathBuf,
    pub base: String,
    pub admin: String,
    /// The config as the server loaded it, for signing requests the way a provider would.
    pub config: Config,
    pub client: reqwest::Client,
    running: Option<Running>,
    /// The `[store]` lines besides its path (kept across [`TestServer::reload`]).
    store: String,
    /// With the inbox in PostgreSQL: its database's URL, where the queries below go.
    pub pg: Option<String>,
}

/// Which inbox a contract test runs on: each such test runs once on each (see
/// [`on_both_backends`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// `on_both_backends!(name);` after `async fn name(backend: Backend)`: a module `name` with
/// the tests `sqlite` and `postgres`, each running it on its backend (the PostgreSQL one
/// skips, saying so, where there is no server; `HOOKINBOX_REQUIRE_POSTGRES` makes that a
/// failure).
macro_rules! on_both_backends {
    ($($name:ident),+ $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$name(crate::support::Backend::Sqlite).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                super::$name(crate::support::Backend::Postgres).await
            }
        }
    )+};
}
pub(crate) use on_both_backends;

/// A request as a provider would send it.
pub struct Signed {
    pub method: hyper::http::Method,
    /// The query string, without `?`.
    pub query: Option<String>,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Signed {
    /// A POST of `body` with `headers`.
    pub fn post(headers: Vec<(String, String)>, body: Vec<u8>) -> Signed {
        Signed {
            method: hyper::http::Method::POST,
            query: None,
            headers,
            body,
        }
    }

    /// What the scheme made, as text headers.
    pub fn from_sample(sample: hookinbox::scheme::Sample) -> Signed {
        Signed {
            method: sample.method,
            query: sample.query,
            headers: sample
                .headers
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
                .collect(),
            body: sample.body,
        }
    }

    pub fn set(&mut self, name: &str, value: &str) {
        self.remove(name);
        self.headers.push((name.to_owned(), value.to_owned()));
    }

    pub fn remove(&mut self, name: &str) {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

impl TestServer {
    /// Starts a server on `sources` (TOML `[[sources]]` tables) with [`SERVER`] settings.
    pub async fn start(sources: &str) -> TestServer {
        Self::start_with(SERVER, sources).await
    }

    pub async fn start_with(server: &str, sources: &str) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("inbox.db");
        Self::start_at(dir, db, server, sources).await
    }

    pub async fn start_at(
        dir: tempfile::TempDir,
        db: PathBuf,
        server: &str,
        sources: &str,
    ) -> TestServer {
        Self::start_full(dir, db, server, "", sources).await
    }

    /// A server on `sources` with its inbox on `backend` (a fresh database for `test` on
    /// PostgreSQL); None when there is no PostgreSQL server, after [`skip`] said so.
    pub async fn on(backend: Backend, test: &str, sources: &str) -> Option<TestServer> {
        Self::on_with(backend, test, SERVER, sources).await
    }

    /// [`TestServer::on`] with other `server` settings than [`SERVER`].
    pub async fn on_with(
        backend: Backend,
        test: &str,
        server: &str,
        sources: &str,
    ) -> Option<TestServer> {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("inbox.db");
        match backend {
            Backend::Sqlite => Some(Self::start_full(dir, db, server, "", sources).await),
            Backend::Postgres => {
                let url = fresh_database(&postgres(test)?).await;
                let mut started = Self::start_full(dir, db, server, &pg_store(&url), sources).await;
                started.pg = Some(url);
                Some(started)
            }
        }
    }

    /// A server whose `[store]` has `store` besides its path (see [`pg_store`]).
    pub async fn start_store(store: &str, sources: &str) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("inbox.db");
        Self::start_full(dir, db, SERVER, store, sources).await
    }

    async fn start_full(
        dir: tempfile::TempDir,
        db: PathBuf,
        server: &str,
        store: &str,
        sources: &str,
    ) -> TestServer {
        let (running, config) = launch(&dir, &config_text_store(server, &db, store, sources)).await;
        TestServer {
            base: format!("http://{}", running.public_addr),
            admin: format!("http://{}", running.admin_addr),
            config,
            client: client(),
            running: Some(running),
            _dir: dir,
            _keep: None,
            db,
            store: store.to_owned(),
            pg: None,
        }
    }

    /// Stops the server and starts another on the same inbox (file or database) with
    /// `sources`, as a restart of the service would.
    pub async fn restart(mut self, sources: &str) -> TestServer {
        if let Some(r) = self.running.take() {
            r.shutdown().await;
        }
        let dir = tempfile::tempdir().unwrap();
        let text = config_text_store(SERVER, &self.db, &self.store, sources);
        let (running, config) = launch(&dir, &text).await;
        TestServer {
            base: format!("http://{}", running.public_addr),
            admin: format!("http://{}", running.admin_addr),
            config,
            running: Some(running),
            // The old directory holds the SQLite inbox: kept until this server is dropped.
            _keep: Some(self._dir),
            _dir: dir,
            ..self
        }
    }

    /// Rewrites the config with `sources` and applies it as SIGHUP would.
    pub async fn reload(&mut self, sources: &str) -> anyhow::Result<()> {
        let text = config_text_store(SERVER, &self.db, &self.store, sources);
        std::fs::write(&self.config.path, text).unwrap();
        let config = config::load(&self.config.path)?;
        self.running.as_ref().unwrap().reload(config).await?;
        self.config = config::load(&self.config.path)?;
        Ok(())
    }

    pub async fn stop(mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown().await;
        }
    }

    pub fn public_addr(&self) -> std::net::SocketAddr {
        self.running.as_ref().unwrap().public_addr
    }

    pub fn scheme(&self, source: &str) -> &Scheme {
        &self
            .config
            .source(source)
            .unwrap_or_else(|| panic!("no source {source}"))
            .scheme
    }

    /// A request for `source` signed at `now` (unix seconds) with the source's first secret.
    pub fn sign_at(&self, source: &str, id: &str, body: &[u8], now: i64) -> Signed {
        sign_with(self.scheme(source), id, body, now)
    }

    pub fn sign(&self, source: &str, id: &str, body: &[u8]) -> Signed {
        self.sign_at(source, id, body, hookinbox::clock::unix_now())
    }

    /// Sends `req` to `/hooks/<source>`; returns the status and the body.
    pub async fn post(&self, source: &str, req: &Signed) -> (u16, String) {
        let resp = send(&self.client, &self.base, source, req)
            .await
            .expect("request reached the server");
        let status = resp.status().as_u16();
        (status, resp.text().await.unwrap())
    }

    pub async fn metrics(&self) -> String {
        self.admin_page("/metrics").await
    }

    /// The text the admin listener answers at `path` (a web inbox page, `/metrics`).
    pub async fn admin_page(&self, path: &str) -> String {
        self.client
            .get(format!("{}{path}", self.admin))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// A read-only connection to the inbox, as an operator's `sqlite3 -readonly` would be.
    pub fn read(&self) -> rusqlite::Connection {
        open_read(&self.db)
    }

    /// The inbox as an operator's `sqlite3` or `psql` sees it.
    pub fn inbox(&self) -> Inbox {
        match &self.pg {
            None => Inbox::Sqlite(self.db.clone()),
            Some(url) => Inbox::Postgres(url.clone()),
        }
    }

    /// Runs a query that returns one integer (see [`Inbox::count`]).
    pub fn count(&self, sql: &str) -> i64 {
        self.inbox().count(sql)
    }

    /// See [`Inbox::wait_count`].
    pub async fn wait_count(&self, sql: &str, want: i64) -> i64 {
        self.inbox().wait_count(sql, want).await
    }

    /// See [`Inbox::execute`].
    pub fn execute(&self, sql: &str) {
        self.inbox().execute(sql)
    }

    /// The stored body of an event, byte for byte.
    pub fn stored_body(&self, source: &str, event_id: &str) -> Option<Vec<u8>> {
        self.inbox().stored_body(source, event_id)
    }
}

/// Writes `text` as the config in `dir` and starts serve on it.
async fn launch(dir: &tempfile::TempDir, text: &str) -> (Running, Config) {
    let path = dir.path().join("hookinbox.toml");
    std::fs::write(&path, text).unwrap();
    let running = serve::start(config::load(&path).unwrap()).await.unwrap();
    (running, config::load(&path).unwrap())
}

/// A test's inbox, in whichever database holds it, asked as an operator would ask it by
/// hand (`sqlite3`, `psql`): the same tables and views on both.
#[derive(Debug, Clone)]
pub enum Inbox {
    Sqlite(PathBuf),
    /// The database's URL.
    Postgres(String),
}

impl Inbox {
    /// Runs a query that returns one integer.
    pub fn count(&self, sql: &str) -> i64 {
        match self {
            Inbox::Sqlite(db) => open_read(db).query_row(sql, [], |r| r.get(0)).unwrap(),
            Inbox::Postgres(url) => pg_rows(url, sql)[0].get(0),
        }
    }

    /// [`Inbox::count`] until it is `want`, or [`PATIENCE`] passed; the last count.
    pub async fn wait_count(&self, sql: &str, want: i64) -> i64 {
        let deadline = std::time::Instant::now() + PATIENCE;
        loop {
            let n = self.count(sql);
            if n == want || std::time::Instant::now() > deadline {
                return n;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The first column of every row of `sql`, as text (NULL as "NULL").
    pub fn strings(&self, sql: &str) -> Vec<String> {
        match self {
            Inbox::Sqlite(db) => open_read(db)
                .prepare(sql)
                .unwrap()
                .query_map([], |r| {
                    Ok(r.get::<_, Option<String>>(0)?
                        .unwrap_or_else(|| "NULL".into()))
                })
                .unwrap()
                .map(Result::unwrap)
                .collect(),
            Inbox::Postgres(url) => pg_rows(url, sql)
                .iter()
                .map(|r| {
                    r.get::<_, Option<String>>(0)
                        .unwrap_or_else(|| "NULL".into())
                })
                .collect(),
        }
    }

    /// Runs statements next to the running server.
    pub fn execute(&self, sql: &str) {
        match self {
            Inbox::Sqlite(db) => {
                let conn = rusqlite::Connection::open(db).unwrap();
                conn.busy_timeout(PATIENCE).unwrap();
                conn.execute_batch(sql).unwrap();
            }
            Inbox::Postgres(url) => {
                pg_blocking(url, sql, |client, sql| async move {
                    client
                        .batch_execute(&sql)
                        .await
                        .unwrap_or_else(|e| panic!("{sql}: {e}"))
                });
            }
        }
    }

    /// The stored body of an event, byte for byte.
    pub fn stored_body(&self, source: &str, event_id: &str) -> Option<Vec<u8>> {
        match self {
            Inbox::Sqlite(db) => stored_body(&open_read(db), source, event_id),
            Inbox::Postgres(_) => self.bytes(&format!(
                "SELECT body FROM event_payloads WHERE source = '{source}' AND event_id = '{}'",
                event_id.replace('\'', "''")
            )),
        }
    }

    /// The first column of the first row of `sql` as bytes (a body: SQLite's TEXT or BLOB,
    /// PostgreSQL's bytea); None without a row or for NULL.
    pub fn bytes(&self, sql: &str) -> Option<Vec<u8>> {
        match self {
            Inbox::Sqlite(db) => open_read(db)
                .query_row(sql, [], |r| {
                    Ok(r.get_ref(0)?.as_bytes_or_null()?.map(<[u8]>::to_vec))
                })
                .optional()
                .unwrap()
                .flatten(),
            Inbox::Postgres(url) => pg_rows(url, sql).first().and_then(|r| r.get(0)),
        }
    }
}

/// The rows of `sql` on the database at `url`, from a thread of its own: callers are sync
/// code on a test's runtime, which cannot block on another.
pub fn pg_rows(url: &str, sql: &str) -> Vec<tokio_postgres::Row> {
    pg_blocking(url, sql, |client, sql| async move {
        client
            .query(&sql, &[])
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    })
}

/// `f(client, sql)` on a connection to `url`, run to its end on a thread and runtime of
/// its own.
fn pg_blocking<T, F, Fut>(url: &str, sql: &str, f: F) -> T
where
    T: Send + 'static,
    F: FnOnce(std::sync::Arc<tokio_postgres::Client>, String) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = T>,
{
    let (url, sql) = (url.to_owned(), sql.to_owned());
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async move { f(std::sync::Arc::new(pg_connect(&url).await), sql).await })
    })
    .join()
    .unwrap()
}

/// An HTTP client for the tests: plain HTTP, no proxy from the environment. reqwest is built
/// without a default crypto provider (only ring is in the tree), so install ring first, as
/// `serve` does.
pub fn client() -> reqwest::Client {
    client_builder().build().unwrap()
}

pub fn client_builder() -> reqwest::ClientBuilder {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().no_proxy()
}

/// Sends a signed request to `{base}/hooks/{source}` on `client`'s connections, with its
/// method and query.
pub async fn send(
    client: &reqwest::Client,
    base: &str,
    source: &str,
    req: &Signed,
) -> reqwest::Result<reqwest::Response> {
    let mut url = format!("{base}/hooks/{source}");
    if let Some(q) = &req.query {
        url.push('?');
        url.push_str(q);
    }
    let mut r = client.request(req.method.clone(), url);
    if !req.body.is_empty() || req.method == hyper::http::Method::POST {
        r = r.body(req.body.clone());
    }
    for (k, v) in &req.headers {
        r = r.header(k, v);
    }
    r.send().await
}

/// The scheme of `source` in `sources` (TOML `[[sources]]` tables), keyed with `secrets`
/// instead of its configured ones: a provider's signer with another, or a second, secret.
pub fn scheme_of(sources: &str, source: &str, secrets: &[&str]) -> Scheme {
    let doc: toml::Table = toml::from_str(sources).expect("test sources are TOML");
    let table = doc["sources"]
        .as_array()
        .expect("[[sources]]")
        .iter()
        .filter_map(|t| t.as_table())
        .find(|t| t["name"].as_str() == Some(source))
        .unwrap_or_else(|| panic!("no source {source}"));
    let mut settings = table.clone();
    settings.retain(|k, _| !hookinbox::scheme::setup::COMMON_KEYS.contains(&k));
    let id = table
        .get("id_header")
        .and_then(|h| h.as_str())
        .map(|h| hookinbox::scheme::IdRule::Header(h.to_ascii_lowercase().parse().unwrap()))
        .or_else(|| {
            table
                .get("id_pointer")
                .and_then(|p| p.as_str())
                .map(hookinbox::scheme::IdRule::pointer)
        })
        .or_else(|| match table.get("id").and_then(|i| i.as_str()) {
            Some("sha256") => Some(hookinbox::scheme::IdRule::BodySha256),
            Some(p) => Some(hookinbox::scheme::IdRule::pointer(p)),
            None => None,
        });
    let secrets = secrets
        .iter()
        .map(|s| hookinbox::secret::Secret::new(*s))
        .collect();
    let scheme = table["scheme"].as_str().expect("a scheme");
    let setup = hookinbox::scheme::Setup::literal(scheme, secrets, settings);
    Scheme::build(setup, None, id).expect("a valid test source")
}

/// A request signed by `scheme` as its provider would sign it.
pub fn sign_with(scheme: &Scheme, id: &str, body: &[u8], now: i64) -> Signed {
    let path = "/hooks/test";
    Signed::from_sample(scheme.sign(&hookinbox::scheme::Draft {
        body,
        id,
        now,
        path,
        signing_key: None,
    }))
}

/// The body every scheme accepts: JSON carrying the id where schemes read it from the body
/// (Stripe `/id`, Slack `/event_id`).
pub fn event_body(id: &str, extra: &str) -> Vec<u8> {
    format!(r#"{{"id":"{id}","event_id":"{id}","type":"test.event","data":{{"n":"{extra}"}}}}"#)
        .into_bytes()
}

pub fn config_text(server: &str, db: &Path, sources: &str) -> String {
    config_text_store(server, db, "", sources)
}

/// [`config_text`] with more lines in `[store]` (the PostgreSQL backend's).
pub fn config_text_store(server: &str, db: &Path, store: &str, sources: &str) -> String {
    format!(
        "{server}\n[store]\npath = {:?}\n{store}\n\n{sources}",
        db.display().to_string()
    )
}

/// The `[store]` lines of an inbox in the PostgreSQL database at `url`.
pub fn pg_store(url: &str) -> String {
    format!("backend = \"postgres\"\nurl = \"{url}\"")
}

/// The scheme of the config file's first source, to sign requests as its provider would.
pub fn first_scheme(config: &Path) -> std::sync::Arc<Scheme> {
    std::sync::Arc::new(config::load(config).unwrap().sources.remove(0).scheme)
}

/// A count that the long scripts raise through the environment, `default` in the suite.
pub fn count_from_env(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub fn open_read(db: &Path) -> rusqlite::Connection {
    let c = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .unwrap();
    c.busy_timeout(Duration::from_secs(10)).unwrap();
    c
}

pub fn stored_body(conn: &rusqlite::Connection, source: &str, event_id: &str) -> Option<Vec<u8>> {
    conn.query_row(
        "SELECT body FROM event_payloads WHERE source = ?1 AND event_id = ?2",
        [source, event_id],
        |r| Ok(r.get_ref(0)?.as_bytes_or_null()?.map(<[u8]>::to_vec)),
    )
    .optional()
    .unwrap()
    .flatten()
}

/// The value of a counter or gauge line in Prometheus text, 0 when absent.
pub fn metric(text: &str, name_and_labels: &str) -> f64 {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(name_and_labels)
                .and_then(|rest| rest.strip_prefix(' '))
        })
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

/// Polls `sql` (one integer) until it equals `want`, for up to `PATIENCE`; returns the last
/// value, so the caller's assertion shows what it was.
pub async fn wait_for_count(conn: &rusqlite::Connection, sql: &str, want: i64) -> i64 {
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let n: i64 = conn.query_row(sql, [], |r| r.get(0)).unwrap();
        if n == want || std::time::Instant::now() > deadline {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// How long a test waits for something the server does in the background before failing.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// `PRAGMA integrity_check`'s verdict: "ok" or the problems found.
pub fn integrity_check(conn: &rusqlite::Connection) -> String {
    conn.query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap()
}

/// Runs the real binary with `args` (no HOOKINBOX_CONFIG from the environment); returns
/// (exit code, stdout bytes, stderr).
pub fn run_binary(args: &[&str]) -> (i32, Vec<u8>, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookinbox"))
        .args(args)
        .env_remove("HOOKINBOX_CONFIG")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// [`run_binary`] with stdout as text.
pub fn hookinbox(args: &[&str]) -> (i32, String, String) {
    let (code, out, err) = run_binary(args);
    (code, String::from_utf8_lossy(&out).into_owned(), err)
}

/// A test that needs something this machine lacks (root, `/dev/fuse`, the `sqlite3`
/// command) says so and returns, unless `HOOKINBOX_REQUIRE_<REQUIREMENT>` is set: `.ci/run`
/// sets it where the machine can, so that a skip there is a failure. A passing test's output
/// is not shown, so every skip is also appended to `$HOOKINBOX_SKIP_LOG`, which `.ci/run`
/// prints at its end.
pub fn skip(requirement: &str, test: &str, why: &str) {
    let var = format!("HOOKINBOX_REQUIRE_{requirement}");
    if std::env::var_os(&var).is_some() {
        panic!("{test} cannot run: {why}; and {var} is set, so this machine must run it");
    }
    let line = format!("SKIPPED {test}: {why}");
    eprintln!("{line}");
    if let Some(log) = std::env::var_os("HOOKINBOX_SKIP_LOG") {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        writeln!(file, "{line}").unwrap();
    }
}

/// The PostgreSQL server the tests use: `HOOKINBOX_TEST_PG_URL`, else the throwaway cluster
/// `scripts/pg-test-cluster.sh` starts (or finds running), one per checkout. None, after
/// [`skip`] said so, where neither can be had.
pub fn postgres(test: &str) -> Option<String> {
    static SERVER: std::sync::OnceLock<Result<String, String>> = std::sync::OnceLock::new();
    let server = SERVER.get_or_init(|| {
        if let Ok(url) = std::env::var("HOOKINBOX_TEST_PG_URL") {
            return Ok(url);
        }
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/pg-test-cluster.sh");
        let out = std::process::Command::new(script)
            .output()
            .map_err(|e| format!("{script}: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_owned());
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    });
    match server {
        Ok(url) => Some(url.clone()),
        Err(why) => {
            skip("POSTGRES", test, why);
            None
        }
    }
}

/// A test cluster of its own, named `name` (`HOOKINBOX_PG_CLUSTER`), for a test that stops
/// and starts its server: started (or found running) by `scripts/pg-test-cluster.sh`, which
/// keeps its port across a stop. None, after [`skip`] said so, where it cannot be had.
pub fn own_postgres(name: &str, test: &str) -> Option<String> {
    match pg_cluster(name, None) {
        Ok(url) => Some(url),
        Err(why) => {
            skip("POSTGRES", test, &why);
            None
        }
    }
}

/// Stops the cluster `own_postgres(name, …)` started (a fast shutdown: sessions are cut).
pub fn stop_own_postgres(name: &str) {
    pg_cluster(name, Some("stop")).unwrap();
}

fn pg_cluster(name: &str, arg: Option<&str>) -> Result<String, String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/pg-test-cluster.sh");
    let out = std::process::Command::new(script)
        .args(arg)
        .env("HOOKINBOX_PG_CLUSTER", name)
        .output()
        .map_err(|e| format!("{script}: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// A database of its own for one test on the server at `server` (a superuser's URL), as a
/// URL for the same user.
pub async fn fresh_database(server: &str) -> String {
    fresh_database_with(server, "").await
}

/// [`fresh_database`] created with `options` (`CREATE DATABASE name options`), e.g. an ICU
/// collation under which text sorts otherwise than byte by byte.
pub async fn fresh_database_with(server: &str, options: &str) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let name = format!(
        "t{}_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let client = pg_connect(server).await;
    // The cluster outlives test runs: the databases of runs that are over go first.
    let old: Vec<String> = client
        .query(
            "SELECT datname FROM pg_database WHERE datname LIKE 't%\\_%'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    for db in old {
        let pid = db[1..].split('_').next().unwrap_or("");
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = client
                .batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))
                .await;
        }
    }
    client
        .batch_execute(&format!("CREATE DATABASE {name} {options}"))
        .await
        .unwrap();
    let (base, _) = server.rsplit_once('/').unwrap();
    format!("{base}/{name}")
}

/// A client of `url`, its connection driven in the background.
pub async fn pg_connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("connecting to {url}: {e}"));
    tokio::spawn(connection);
    client
}

/// The first ```sql block of docs/consuming.md: the DDL of a `postgres` target's table, as
/// the document gives it to operators.
pub fn consuming_ddl() -> String {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/consuming.md")).unwrap();
    let (_, rest) = doc.split_once("```sql\n").unwrap();
    rest.split_once("```").unwrap().0.to_owned()
}
