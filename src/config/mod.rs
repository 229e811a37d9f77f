//! The configuration file: TOML parsed strictly (an unknown key is an error), then validated
//! into a [`Config`] whose secrets are loaded and whose schemes are ready to verify.
//!
//! Two phases, as in ripgrep's low/high-level arguments: `Raw*` types mirror the file
//! exactly; [`Config`] is what the rest of the program uses. Every error names the file and
//! the key, and never a secret's value.
//!
//! - this module: the validated types, their limits and defaults, loading;
//! - `raw`: the serde mirror of the file, durations and sizes (a target's kind reads its
//!   own keys: `targets`);
//! - `validate`: raw → [`Config`], secrets loaded, schemes prepared, targets' kinds checked;
//! - `warnings`: what works but an operator should hear about;
//! - `reference`: every table and key with its default and meaning, for the man page.

mod raw;
pub mod reference;
mod tls;
mod validate;
mod warnings;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper::http::StatusCode;
use serde::Deserialize;

use crate::scheme::Scheme;
use crate::secret::{Provenance, Secret};
use crate::targets::Destination;

pub use crate::pgconn::PgTls;
use raw::RawConfig;
pub use raw::{parse_duration, parse_size};
pub use tls::CertInfo;
pub use validate::pg_store_from;

/// Where `--config` points when it is not given: the packaged location, else the current
/// directory.
pub const SYSTEM_PATH: &str = "/etc/hookinbox/hookinbox.toml";
pub const LOCAL_PATH: &str = "hookinbox.toml";

/// Largest body accepted by default. GitHub caps payloads at 25 MB, but nearly every
/// provider sends well under 1 MiB; an operator with large payloads raises it.
pub const DEFAULT_MAX_BODY: u64 = 1024 * 1024;
/// Hard ceiling on `max_body`: a body is held in memory while it is verified and committed.
pub const MAX_MAX_BODY: u64 = 64 * 1024 * 1024;
/// How long a client may take to send its request head; also the keep-alive idle timeout
/// (hyper restarts this timer while waiting for the next request on a connection).
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to send its body once the head arrived.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// Concurrent connections on the public listener; more wait in the kernel's accept queue.
/// Sized for a small VM: each connection costs a task, a buffer, and at most one body.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Upper bound on the server's timeouts: beyond an hour a setting is a mistake, and huge
/// values would overflow the timers.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);
/// Bytes of request bodies held in memory at once, all connections together: what bounds
/// hookinbox's memory, rather than `max_connections` times `max_body` (1,000 connections
/// with nearly complete 1 MiB bodies took a process without it to 1.08 GiB). 64 MiB keeps
/// a small VM safe and still holds 40,000 typical 1.5 KB bodies in flight.
pub const DEFAULT_BODY_BUDGET: u64 = 64 * 1024 * 1024;
/// The slowest a body may arrive, in bytes a second, after its first second
/// (`server.min_body_rate`). A provider's body comes in one or two packets; a client that
/// trickles one holds a slot and a share of the budget for nothing. 1 KiB/s is what a link
/// of the 1990s managed.
pub const DEFAULT_MIN_BODY_RATE: u64 = 1024;
/// Its ceiling: beyond a few GiB it no longer protects a VM this runs on.
pub const MAX_BODY_BUDGET: u64 = 4 * 1024 * 1024 * 1024;
/// Upper bound on `max_connections`: far beyond what a small VM's file descriptors allow.
pub const MAX_MAX_CONNECTIONS: usize = 65_536;
/// Bounds on a source's replay window. Zero would refuse everything but a perfect clock; a
/// week is already far wider than any provider's retry needs.
pub const MIN_TOLERANCE: Duration = Duration::from_secs(1);
pub const MAX_TOLERANCE: Duration = Duration::from_secs(7 * 86_400);
/// Bodies and headers of finished events are dropped after this long (DESIGN §4).
pub const DEFAULT_KEEP_PAYLOAD: Duration = Duration::from_secs(30 * 86_400);
/// The compact identity row stays this long, so that a late redelivery is still a duplicate.
pub const DEFAULT_KEEP_IDENTITY: Duration = Duration::from_secs(400 * 86_400);
/// The status answered to a same-id, different-bytes delivery.
pub const DEFAULT_ON_CONFLICT: u16 = 409;
/// Per-target delivery defaults (DESIGN §6); used by the delivery worker.
pub const DEFAULT_TARGET_TIMEOUT: Duration = Duration::from_secs(15);
pub const DEFAULT_TARGET_CONCURRENCY: usize = 4;
pub const DEFAULT_RETRY: [Duration; 7] = [
    Duration::from_secs(5),
    Duration::from_secs(5 * 60),
    Duration::from_secs(30 * 60),
    Duration::from_secs(2 * 3600),
    Duration::from_secs(5 * 3600),
    Duration::from_secs(10 * 3600),
    Duration::from_secs(10 * 3600),
];

/// The validated configuration.
#[derive(Debug)]
pub struct Config {
    /// The file it was read from, for messages.
    pub path: PathBuf,
    pub server: Server,
    pub admin: AdminSettings,
    pub store: StoreSettings,
    pub sources: Vec<Source>,
    /// `[[alerts]]`: where alerts are delivered, as targets of the internal source
    /// [`crate::event::ALERT_SOURCE`].
    pub alerts: Vec<Target>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// The public webhook listener.
    pub listen: SocketAddr,
    /// Largest accepted body in bytes; larger is answered 413 without reading past it.
    pub max_body: u64,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub max_connections: usize,
    /// Bytes of request bodies in memory at once; beyond it a body waits briefly, then 503.
    pub body_budget: u64,
    /// Bytes a second a body must average after its first second; 0 for no floor.
    pub min_body_rate: u64,
    /// Peers whose `X-Forwarded-For` is believed; empty means nobody's.
    pub trusted_proxies: Vec<crate::proxy::Cidr>,
    /// HTTPS on the public listener from certificate files; reloaded on SIGHUP and when
    /// the files change.
    pub tls: Option<Tls>,
    /// HTTPS on the public listener with certificates obtained by ACME.
    pub acme: Option<Acme>,
}

/// Let's Encrypt's production directory, `[server.tls.acme]`'s default.
pub const LETS_ENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";

/// Certificates by ACME (RFC 8555) for the public listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acme {
    /// The names on the one certificate, lowercase, in the order written.
    pub domains: Vec<String>,
    /// The account's contact, a `mailto:` URL.
    pub contact: Option<String>,
    /// The ACME server's directory URL.
    pub directory: String,
    /// PEM certificates trusted for the ACME server instead of the system's store.
    pub directory_ca: Option<PathBuf>,
    /// Prove the names with HTTP-01 on this plain HTTP listener instead of TLS-ALPN-01.
    pub http01_listen: Option<SocketAddr>,
}

/// PEM files for the public listener's TLS.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tls {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// Its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminSettings {
    /// `/metrics`, `/healthz`, `/readyz` and the web inbox. Local by default; never meant
    /// to be public.
    pub listen: SocketAddr,
    /// Whether the web inbox may change anything (replay, pause, resume). Off by default:
    /// the inbox is read-only.
    pub actions: bool,
    /// Host names the web inbox answers to besides IP addresses and `localhost` (a name a
    /// reverse proxy forwards under). Any other Host is refused, so that a web page that
    /// rebinds its own name to 127.0.0.1 cannot read the inbox.
    pub hosts: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreSettings {
    pub path: PathBuf,
    pub synchronous: Synchronous,
    /// How often `serve` applies the retention windows and gives freed pages back.
    pub retention_interval: Duration,
    /// Where the inbox lives: the SQLite file at `path`, or a PostgreSQL database that
    /// several replicas share (then `path` only places serve's own local files).
    pub backend: Backend,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres(PgStore),
}

/// `[store] backend = "postgres"`: the inbox in a PostgreSQL database.
#[derive(Debug, Clone)]
pub struct PgStore {
    /// A libpq-style URL without a password (`postgres://hookinbox@db.internal/hookinbox`).
    pub url: String,
    pub password: Option<Secret>,
    pub tls: PgTls,
    /// Connections for claims, attempts' results and reads, besides the one that commits
    /// received events.
    pub pool: usize,
}

/// Compared without the password, which is never compared byte by byte (see [`Secret`]).
impl PartialEq for PgStore {
    fn eq(&self, other: &PgStore) -> bool {
        self.url == other.url && self.tls == other.tls && self.pool == other.pool
    }
}
impl Eq for PgStore {}

/// `store.pool` by default, and its bounds.
pub const DEFAULT_PG_POOL: usize = 4;
pub const MAX_PG_POOL: usize = 64;

/// `store.retention_interval` by default: often enough that a day's payloads go within
/// minutes of their window, rarely enough to cost nothing.
pub const DEFAULT_RETENTION_INTERVAL: Duration = Duration::from_secs(600);
/// Its bounds: below a second it would be a busy loop, above a day the windows would slip.
pub const MIN_RETENTION_INTERVAL: Duration = Duration::from_secs(1);
pub const MAX_RETENTION_INTERVAL: Duration = Duration::from_secs(86_400);

/// SQLite's `synchronous` in WAL mode: FULL fsyncs the WAL on every commit, so an
/// acknowledged event survives power loss; NORMAL survives only a process crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Synchronous {
    Full,
    Normal,
}

#[derive(Debug)]
pub struct Source {
    /// Served at `POST /hooks/<name>`.
    pub name: String,
    pub scheme: Scheme,
    /// Scope inside the identity, for one source serving several provider accounts.
    pub account: String,
    pub on_conflict: StatusCode,
    pub keep_payload: Duration,
    pub keep_identity: Duration,
    /// When set, the source is *silent* (an alert) after this long without a new event.
    pub expect_every: Option<Duration>,
    pub targets: Vec<Target>,
    pub order: Option<Order>,
    /// Where each secret came from, for `check`'s warnings.
    pub secret_origins: Vec<Provenance>,
    /// The provider API that fills this source's gaps (`hookinbox recover`).
    pub recover: Option<Recover>,
    /// The only addresses requests are taken from; None: any.
    pub allow_from: Option<AllowFrom>,
}

/// A source's `allow_from`: requests from anywhere else are answered 403 before their body
/// is read.
#[derive(Debug, Clone)]
pub struct AllowFrom {
    /// The addresses and ranges written in the file.
    pub ranges: Vec<crate::proxy::Cidr>,
    /// Providers whose published addresses are allowed too, fetched and kept by serve.
    pub lists: Vec<AllowList>,
}

/// A provider's published address list, and where it is fetched from.
#[derive(Debug, Clone)]
pub struct AllowList {
    pub provider: &'static crate::scheme::providers::Provider,
    /// The provider's own URL, or `server.allow_lists`' for it.
    pub url: reqwest::Url,
}

impl AllowList {
    /// The provider's name: the list's name in `allow_from`, the inbox and the metrics.
    pub fn name(&self) -> &'static str {
        self.provider.name
    }
}

/// How often `serve` recovers the recent past of a source even without a known gap: a
/// safety net for what no gap shows (a network path that dropped requests before they
/// reached hookinbox).
pub const DEFAULT_RECOVER_EVERY: Duration = Duration::from_secs(3600);
/// The bounds of `recover.every`: each run costs a few API calls; a week is past what the
/// providers keep for redelivery.
pub const MIN_RECOVER_EVERY: Duration = Duration::from_secs(60);
pub const MAX_RECOVER_EVERY: Duration = Duration::from_secs(7 * 86_400);

/// A source's `recover` table, validated.
#[derive(Debug)]
pub struct Recover {
    pub api: RecoverApi,
    /// The API's base URL: the provider's, or `api_url` (GitHub Enterprise Server, tests).
    pub base: reqwest::Url,
    /// How often serve recovers the last stretch of time as a safety net.
    pub every: Duration,
}

#[derive(Debug)]
pub enum RecoverApi {
    /// List the hook's deliveries and ask for redelivery of the missing ones.
    GitHub { hook: GitHubHook, auth: GitHubAuth },
    /// List events and store the missing ones with origin `api`; `types` narrows the list
    /// to what the endpoint subscribes to.
    Stripe { key: Secret, types: Vec<String> },
}

impl RecoverApi {
    /// The provider's name in metrics and logs.
    pub fn provider(&self) -> &'static str {
        match self {
            RecoverApi::GitHub { .. } => "github",
            RecoverApi::Stripe { .. } => "stripe",
        }
    }
}

/// Which GitHub hook a source is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GitHubHook {
    /// A repository's hook: `owner/name` and the hook's id.
    Repo { repo: String, hook_id: u64 },
    /// An organisation's hook.
    Org { org: String, hook_id: u64 },
    /// A GitHub App's own hook (`/app/hook`), reached with the App's JWT.
    App,
}

#[derive(Debug)]
pub enum GitHubAuth {
    /// A fine-grained (or classic) token with read and write access to the hook.
    Token(Secret),
    /// A GitHub App: its id and its private key (PEM), for a JWT.
    App { app_id: u64, private_key: Secret },
}

#[derive(Debug)]
pub struct Target {
    pub name: String,
    /// Where it forwards to, as its kind checked it: a URL, a program, a table
    /// ([`crate::targets`]).
    pub destination: Box<dyn Destination>,
    /// The whole attempt: connect, send, answer (or the command's run time).
    pub timeout: Duration,
    /// Waits between attempts; one attempt more than entries, then `dead`.
    pub retry: Vec<Duration>,
    /// Attempts in flight at once for this target.
    pub concurrency: usize,
    /// How fast attempts may start (`rate = "50/s"`); None: as fast as `concurrency` allows.
    pub rate: Option<Rate>,
    /// How long a claimed delivery stays claimed; after that the sweeper returns it to the
    /// queue (a crash mid-attempt). Always longer than `timeout`.
    pub lease: Duration,
    /// The target is *failing* (an alert) when this share of its recent attempts failed…
    pub alert_failure_share: f64,
    /// …or its oldest pending delivery is older than this.
    pub alert_pending_age: Duration,
}

/// A target is failing when half its attempts of the last minutes failed: one flaky
/// answer is not an alert, an app that refuses most of what it gets is.
pub const DEFAULT_ALERT_FAILURE_SHARE: f64 = 0.5;
/// …or when a delivery has waited this long: well past the first retries of the default
/// schedule, short enough that an operator hears of it before a provider's own alarm.
pub const DEFAULT_ALERT_PENDING_AGE: Duration = Duration::from_secs(15 * 60);

/// How much longer than the attempt timeout a lease lasts by default: time to record the
/// result after the attempt ended.
/// The longest wait between two attempts.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(7 * 86_400);
/// The most attempts in flight for one target.
pub const MAX_CONCURRENCY: usize = 256;

pub const LEASE_MARGIN: Duration = Duration::from_secs(30);
/// The least a lease may exceed the timeout: an attempt ends within its timeout plus half a
/// second for its output, and its result then queues in the writer's FIFO ahead of any sweep
/// that could hand the delivery to a second attempt.
pub const MIN_LEASE_MARGIN: Duration = Duration::from_secs(5);

/// A target's rate limit: at most `count` attempts start per `per` (a second, a minute or
/// an hour), as `rate = "50/s"` writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub count: u32,
    pub per: Duration,
}

/// The largest count a rate may give, whatever its unit: beyond it the limit would mean
/// nothing next to `concurrency`, and the spacing (a microsecond) would be below what the
/// timers keep.
pub const MAX_RATE_COUNT: u32 = 1_000_000;

/// How much of a rate may start at once: what it allows in this long, and at least one
/// attempt. So `50/s` starts up to 5 together and `600/m` one every 100 ms, and after an
/// outage the backlog drains at the rate rather than in a burst of a minute's or an
/// hour's worth; in any second at most a tenth more than the rate starts. Not smaller,
/// because every claim is a commit of its own: at high rates a claim takes a few.
pub const RATE_BURST_WINDOW: Duration = Duration::from_millis(100);

impl Rate {
    /// The time one attempt uses up: `per / count`, rounded up to the nanosecond, so that
    /// rounding never makes the rate faster than written.
    pub fn interval(&self) -> Duration {
        let nanos = self.per.as_nanos().div_ceil(u128::from(self.count.max(1)));
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// How many attempts may start at once (see [`RATE_BURST_WINDOW`]).
    pub fn burst(&self) -> u32 {
        let window = u128::from(self.count) * RATE_BURST_WINDOW.as_nanos();
        let burst = window.div_ceil(self.per.as_nanos().max(1));
        u32::try_from(burst)
            .unwrap_or(u32::MAX)
            .clamp(1, self.count.max(1))
    }
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let unit = match self.per.as_secs() {
            1 => "s",
            60 => "m",
            _ => "h",
        };
        write!(f, "{}/{unit}", self.count)
    }
}

/// A rate as written in a target's `rate`: `N/s`, `N/m` or `N/h`, N a whole number from 1
/// to [`MAX_RATE_COUNT`].
pub fn parse_rate(text: &str) -> Result<Rate, String> {
    let bad = || {
        format!(
            "{text:?} is not a rate: write N/s, N/m or N/h, N a whole number from 1 to \
             {MAX_RATE_COUNT}, like \"50/s\" or \"600/m\""
        )
    };
    let (count, unit) = text.trim().split_once('/').ok_or_else(bad)?;
    let per = match unit {
        "s" => Duration::from_secs(1),
        "m" => Duration::from_secs(60),
        "h" => Duration::from_secs(3600),
        _ => return Err(bad()),
    };
    // Digits only: `parse` alone would take "+5".
    if count.is_empty() || !count.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    match count.parse::<u32>() {
        Ok(count) if (1..=MAX_RATE_COUNT).contains(&count) => Ok(Rate { count, per }),
        _ => Err(bad()),
    }
}

/// Per-source ordering: events with the same key are delivered one at a time, in version
/// order; an event not newer than the last delivered version of its key is superseded.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Order {
    /// JSON pointer to the key, e.g. `/data/object/id`.
    pub key: String,
    /// JSON pointer to the version, a number or a string that sorts, e.g. `/created`.
    pub version: String,
}

/// Where a config that could not be read was looked for, when it is the default: the
/// system's file comes first, and an error naming only the second would hide that.
fn looked_for(path: &Path) -> String {
    if path == Path::new(LOCAL_PATH) && !Path::new(SYSTEM_PATH).exists() {
        format!("; without --config, hookinbox reads {SYSTEM_PATH}, else ./{LOCAL_PATH}")
    } else {
        String::new()
    }
}

/// The path `--config` means when it is not given.
pub fn default_path() -> PathBuf {
    if Path::new(SYSTEM_PATH).exists() {
        PathBuf::from(SYSTEM_PATH)
    } else {
        PathBuf::from(LOCAL_PATH)
    }
}

/// What a configuration is loaded for, which decides how strict loading secrets is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose<'a> {
    /// Every secret must load.
    Serve,
    /// `check`: a `credential:` secret outside systemd (no `$CREDENTIALS_DIRECTORY`) is
    /// noted, not an error; `serve` reads it when systemd starts it.
    Check,
    /// `sign --source NAME`: only that source's secrets are needed; another source's
    /// secret that cannot be loaded here is left out.
    Sign(&'a str),
}

/// Reads, parses and validates the configuration at `path`, loading every secret.
pub fn load(path: &Path) -> anyhow::Result<Config> {
    load_for(path, Purpose::Serve)
}

/// [`load`], with secrets loaded as `purpose` needs them.
pub fn load_for(path: &Path, purpose: Purpose) -> anyhow::Result<Config> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        anyhow::anyhow!(
            "cannot read config file {}: {e}{} (pass --config FILE; examples/quickstart.toml \
             is a start)",
            path.display(),
            looked_for(path)
        )
    })?;
    let credentials = std::env::var_os("CREDENTIALS_DIRECTORY").map(PathBuf::from);
    parse(&text, path, credentials.as_deref(), purpose)
}

/// What the operator commands need from the config (the inbox and the retention windows),
/// read without loading any secret: `events`, `replay` or `prune` work in a shell where
/// `env:` or `credential:` secrets are not available.
#[derive(Debug, Clone)]
pub struct Offline {
    pub path: PathBuf,
    pub store: StoreSettings,
    pub sources: Vec<OfflineSource>,
}

/// One source as the operator commands see it.
#[derive(Debug, Clone)]
pub struct OfflineSource {
    pub name: String,
    /// Its scheme's name, as written.
    pub scheme: String,
    pub keep_payload: Duration,
    pub keep_identity: Duration,
    /// Its targets' names.
    pub targets: Vec<String>,
}

/// The config file could not be read, for an operator command ([`load_offline`]); most of
/// them can take the inbox alone instead.
#[derive(Debug)]
pub struct Unreadable {
    pub path: PathBuf,
    pub error: std::io::Error,
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cannot read config file {}: {}{} (pass --config FILE, or --db FILE for the inbox \
             alone)",
            self.path.display(),
            self.error,
            looked_for(&self.path)
        )
    }
}

impl std::error::Error for Unreadable {}

/// Reads the config for the operator commands: the same parsing, no source secrets (only
/// the PostgreSQL inbox's password, with `backend = "postgres"`).
pub fn load_offline(path: &Path) -> anyhow::Result<Offline> {
    let text = std::fs::read_to_string(path).map_err(|error| Unreadable {
        path: path.to_owned(),
        error,
    })?;
    let raw: RawConfig = toml::from_str(&text)
        .map_err(|e| anyhow::anyhow!("config file {}: {e}", path.display()))?;
    let store_path = validate::store_path(&raw.store)
        .map_err(|e| anyhow::anyhow!("config file {}: {e}", path.display()))?;
    let base = path.parent().unwrap_or(Path::new("."));
    let backend = validate::offline_backend(&raw.store, base)
        .map_err(|e| anyhow::anyhow!("config file {}: {e}", path.display()))?;
    Ok(Offline {
        path: path.to_owned(),
        store: StoreSettings {
            path: base.join(store_path),
            synchronous: raw.store.synchronous,
            retention_interval: raw.store.retention_interval,
            backend,
        },
        sources: raw
            .sources
            .into_iter()
            .map(|s| OfflineSource {
                name: s.name,
                scheme: s.scheme.unwrap_or_default(),
                keep_payload: s.keep_payload,
                keep_identity: s.keep_identity,
                targets: s.targets.into_iter().map(|t| t.name).collect(),
            })
            .collect(),
    })
}

/// Only `store.path` of the file at `path`, read as loosely as the TOML allows (unknown or
/// invalid keys elsewhere do not matter): `hookinbox reload` must find the inbox of a
/// running serve even when the file was just broken.
pub fn inbox_path(path: &Path) -> anyhow::Result<PathBuf> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read config file {}: {e}", path.display()))?;
    let table: toml::Table = toml::from_str(&text)
        .map_err(|e| anyhow::anyhow!("config file {}: {e}", path.display()))?;
    let store = table
        .get("store")
        .and_then(|s| s.get("path"))
        .and_then(|p| p.as_str())
        .filter(|p| !p.is_empty())
        .ok_or_else(|| anyhow::anyhow!("config file {}: no store.path", path.display()))?;
    Ok(path.parent().unwrap_or(Path::new(".")).join(store))
}

/// Parses and validates configuration text; `path` is used in messages and to resolve a
/// relative store path.
pub fn from_str(text: &str, path: &Path, credentials: Option<&Path>) -> anyhow::Result<Config> {
    parse(text, path, credentials, Purpose::Serve)
}

fn parse(
    text: &str,
    path: &Path,
    credentials: Option<&Path>,
    purpose: Purpose,
) -> anyhow::Result<Config> {
    let raw: RawConfig =
        toml::from_str(text).map_err(|e| anyhow::anyhow!("config file {}: {e}", path.display()))?;
    validate::validate(raw, path, credentials, purpose)
        .map_err(|e| anyhow::anyhow!("config file {}: {e}", path.display()))
}

impl Config {
    pub fn source(&self, name: &str) -> Option<&Source> {
        self.sources.iter().find(|s| s.name == name)
    }

    /// The settings only a restart applies.
    pub fn restart_only(&self) -> RestartOnly {
        RestartOnly {
            listen: self.server.listen,
            max_body: self.server.max_body,
            header_timeout: self.server.header_timeout,
            body_timeout: self.server.body_timeout,
            max_connections: self.server.max_connections,
            body_budget: self.server.body_budget,
            min_body_rate: self.server.min_body_rate,
            tls: self.server.tls.is_some(),
            acme: self.server.acme.clone(),
            admin: self.admin.clone(),
            store: self.store.clone(),
        }
    }
}

/// What a reload cannot change: the listeners, their limits, the store (TLS files and
/// trusted proxies it can, and everything about sources). A reload compares the whole and
/// names what differs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestartOnly {
    pub listen: SocketAddr,
    pub max_body: u64,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub max_connections: usize,
    pub body_budget: u64,
    pub min_body_rate: u64,
    /// Whether the listener speaks TLS (its files reload; switching it on or off does not).
    pub tls: bool,
    /// Certificates by ACME: their settings take a restart (the files' TLS reloads).
    pub acme: Option<Acme>,
    pub admin: AdminSettings,
    pub store: StoreSettings,
}

impl RestartOnly {
    /// The keys whose values differ in `other`, as the file names them.
    pub fn differences(&self, other: &RestartOnly) -> Vec<&'static str> {
        let RestartOnly {
            listen,
            max_body,
            header_timeout,
            body_timeout,
            max_connections,
            body_budget,
            min_body_rate,
            tls,
            acme,
            admin:
                AdminSettings {
                    listen: admin_listen,
                    actions,
                    hosts,
                },
            store:
                StoreSettings {
                    path,
                    synchronous,
                    retention_interval,
                    backend,
                },
        } = self;
        // Destructured above, to the last field, so that a new one cannot be forgotten.
        [
            ("server.listen", *listen != other.listen),
            ("server.max_body", *max_body != other.max_body),
            (
                "server.header_timeout",
                *header_timeout != other.header_timeout,
            ),
            ("server.body_timeout", *body_timeout != other.body_timeout),
            (
                "server.max_connections",
                *max_connections != other.max_connections,
            ),
            ("server.body_budget", *body_budget != other.body_budget),
            (
                "server.min_body_rate",
                *min_body_rate != other.min_body_rate,
            ),
            ("server.tls", *tls != other.tls),
            ("server.tls.acme", *acme != other.acme),
            ("admin.listen", *admin_listen != other.admin.listen),
            ("admin.actions", *actions != other.admin.actions),
            ("admin.hosts", *hosts != other.admin.hosts),
            ("store.path", *path != other.store.path),
            ("store.synchronous", *synchronous != other.store.synchronous),
            ("store.backend", *backend != other.store.backend),
            (
                "store.retention_interval",
                *retention_interval != other.store.retention_interval,
            ),
        ]
        .into_iter()
        .filter_map(|(name, differs)| differs.then_some(name))
        .collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The smallest configuration: one source, one url target.
    pub(crate) const MINIMAL: &str = r#"
[store]
path = "inbox.db"

[[sources]]
name = "demo"
scheme = "standard-webhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]

[[sources.targets]]
name = "app"
url = "http://127.0.0.1:3000/hooks"
"#;

    fn load(text: &str) -> anyhow::Result<Config> {
        from_str(text, Path::new("/etc/hookinbox/test.toml"), None)
    }

    fn err(text: &str) -> String {
        format!("{:#}", load(text).unwrap_err())
    }

    #[test]
    fn an_unsigned_header_cannot_hide_inside_a_composite_id() {
        let with = |scheme: &str, extra: &str| {
            MINIMAL.replace("standard-webhooks", scheme).replace(
                "[[sources.targets]]",
                &format!("{extra}\n[[sources.targets]]"),
            )
        };
        let e = err(&with("stripe", "id = [\"header:X-Any\", \"/id\"]"));
        assert!(e.contains("signs its own event id"), "{e}");
        let sns = with(
            "sns",
            "topics = [\"arn:aws:sns:us-east-1:123456789012:t\"]\nid_pointer = \"/Message\"",
        )
        .replace("secrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]", "");
        let e = err(&sns);
        assert!(e.contains("signs only some fields"), "{e}");
    }

    #[test]
    fn check_names_the_holes_a_protocol_leaves() {
        let holes = |scheme: &str, extra: &str| {
            let text = MINIMAL.replace("standard-webhooks", scheme).replace(
                "[[sources.targets]]",
                &format!("{extra}\n[[sources.targets]]"),
            );
            let c = load(&text).unwrap();
            c.warnings()
                .into_iter()
                .filter(|w| !w.contains("written in the config file"))
                .collect::<Vec<_>>()
        };
        let github = holes("github", "");
        assert!(
            github.iter().any(|w| w.contains("signs no timestamp")),
            "{github:?}"
        );
        assert_eq!(holes("standard-webhooks", ""), Vec::<String>::new());
        // A signed timestamp bounds the replay: Zendesk's unsigned id header is no hole.
        assert_eq!(holes("zendesk", ""), Vec::<String>::new());
        // A signed body id is none either (and swapping it for a header is refused).
        assert_eq!(holes("intercom", ""), Vec::<String>::new());
        let generic = holes(
            "hmac",
            "id_header = \"X-Request-Id\"\nhmac = { header = \"S\" }",
        );
        assert!(
            generic.iter().any(|w| w.contains("x-request-id")),
            "{generic:?}"
        );
        let timed = holes(
            "hmac",
            "id_header = \"X-Request-Id\"\nhmac = { header = \"S\", timestamp_header = \"T\", \
             signed = \"{timestamp}.{body}\" }",
        );
        assert_eq!(timed, Vec::<String>::new());
        let mailgun = holes("mailgun", "");
        assert!(
            mailgun
                .iter()
                .any(|w| w.contains("does not sign the event data")),
            "{mailgun:?}"
        );
    }

    #[test]
    fn allow_from_takes_ranges_and_the_providers_that_publish_theirs() {
        let with = |entries: &str, server: &str| {
            format!("[server]\n{server}\n{MINIMAL}").replace(
                "[[sources.targets]]",
                &format!("allow_from = {entries}\n[[sources.targets]]"),
            )
        };
        let c = load(&with(
            r#"["192.30.252.0/22", "2a0a:a440::/29", "203.0.113.7", "github", "stripe", "github"]"#,
            "",
        ))
        .unwrap();
        let allow = c.sources[0].allow_from.as_ref().unwrap();
        assert_eq!(allow.ranges.len(), 3);
        let lists: Vec<(&str, &str)> = allow
            .lists
            .iter()
            .map(|l| (l.name(), l.url.as_str()))
            .collect();
        assert_eq!(
            lists,
            [
                ("github", "https://api.github.com/meta"),
                ("stripe", "https://stripe.com/files/ips/ips_webhooks.json")
            ]
        );
        assert!(load(MINIMAL).unwrap().sources[0].allow_from.is_none());
        let mirrored = load(&with(
            r#"["github"]"#,
            "allow_lists = { github = \"http://127.0.0.1:8001/meta\" }",
        ))
        .unwrap();
        assert_eq!(
            mirrored.sources[0].allow_from.as_ref().unwrap().lists[0]
                .url
                .as_str(),
            "http://127.0.0.1:8001/meta"
        );
        for (entries, server, why) in [
            (
                r#"["gihtub"]"#,
                "",
                "allow_from[0]: \"gihtub\" is not an address",
            ),
            (
                r#"["gihtub"]"#,
                "",
                "publishes its webhook addresses (github, stripe, zendesk)",
            ),
            (r#"["slack"]"#, "", "allow_from[0]"),
            ("[]", "", "allow_from is empty"),
            (
                r#"["github"]"#,
                "allow_lists = { slack = \"https://x.example/\" }",
                "server.allow_lists.slack",
            ),
            (
                r#"["github"]"#,
                "allow_lists = { github = \"http://mirror.example/meta\" }",
                "must be https://",
            ),
        ] {
            let e = err(&with(entries, server));
            assert!(e.contains(why), "{entries} {server}: {e}");
        }
    }

    #[test]
    fn minimal_config_gets_defaults() {
        let c = load(MINIMAL).unwrap();
        assert_eq!(c.server.max_body, DEFAULT_MAX_BODY);
        assert_eq!(c.store.path, Path::new("/etc/hookinbox/inbox.db"));
        assert_eq!(c.store.synchronous, Synchronous::Full);
        let s = &c.sources[0];
        assert_eq!(s.on_conflict, StatusCode::CONFLICT);
        assert_eq!(s.scheme.tolerance(), Duration::from_secs(300));
        assert_eq!(s.targets[0].retry, DEFAULT_RETRY.to_vec());
        assert_eq!(c.warnings().len(), 1, "the literal secret is warned about");
    }

    #[test]
    fn unknown_key_is_named_with_the_file() {
        let e = err(&MINIMAL.replace("scheme =", "shceme = \"x\"\nscheme ="));
        assert!(
            e.contains("/etc/hookinbox/test.toml") && e.contains("shceme"),
            "{e}"
        );
    }

    #[test]
    fn bad_duration_is_named() {
        let e = err(&MINIMAL.replace(
            "[[sources.targets]]",
            "keep_payload = \"30 fortnights\"\n[[sources.targets]]",
        ));
        assert!(
            e.contains("keep_payload") || e.contains("30 fortnights"),
            "{e}"
        );
        assert!(e.contains("bad duration"), "{e}");
    }

    #[test]
    fn missing_secret_names_key_and_variable() {
        let e = err(&MINIMAL.replace(
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "env:HOOKINBOX_TEST_NOPE",
        ));
        assert!(
            e.contains("sources[0]")
                && e.contains("secrets[0]")
                && e.contains("HOOKINBOX_TEST_NOPE"),
            "{e}"
        );
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("512 KiB"), Ok(512 << 10));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert!(parse_size("1 parsec").is_err());
        assert!(parse_size("99999999999999999999GiB").is_err());
    }

    #[test]
    fn hmac_needs_an_id_rule_and_a_body_placeholder() {
        let base = MINIMAL.replace("standard-webhooks", "hmac").replace(
            "[[sources.targets]]",
            "hmac = { header = \"X-Sig\" }\n[[sources.targets]]",
        );
        assert!(
            err(&base).contains("set id_header, id_pointer or id"),
            "{}",
            err(&base)
        );
        let with_id = base.replace(
            "scheme = \"hmac\"",
            "scheme = \"hmac\"\nid_header = \"X-Id\"",
        );
        load(&with_id).unwrap();
        let no_body = with_id.replace("header = \"X-Sig\"", "header = \"X-Sig\", signed = \"x\"");
        assert!(err(&no_body).contains("{body}"), "{}", err(&no_body));
    }

    #[test]
    fn replay_windows_cannot_be_switched_off_or_unsigned() {
        let e = err(&MINIMAL.replace(
            "[[sources.targets]]",
            "tolerance = \"0s\"\n[[sources.targets]]",
        ));
        assert!(e.contains("tolerance must be between"), "{e}");
        let e = err(&MINIMAL.replace(
            "[[sources.targets]]",
            "id_header = \"X-Id\"\n[[sources.targets]]",
        ));
        assert!(e.contains("signs its own event id"), "{e}");
        let hmac = MINIMAL.replace("standard-webhooks", "hmac").replace(
            "[[sources.targets]]",
            "id_header = \"X-Id\"\nhmac = { header = \"X-Sig\", timestamp_header = \"X-Ts\" }\n[[sources.targets]]",
        );
        assert!(
            err(&hmac).contains("does not include {timestamp}"),
            "{}",
            err(&hmac)
        );
        let comma = hmac.replace("timestamp_header = \"X-Ts\"", "prefix = \"a,b\"");
        assert!(
            err(&comma).contains("prefix cannot contain"),
            "{}",
            err(&comma)
        );
    }

    #[test]
    fn a_lease_must_leave_time_to_record_the_result() {
        let e = err(&MINIMAL.replace(
            "url = \"http://127.0.0.1:3000/hooks\"",
            "url = \"http://127.0.0.1:3000/hooks\"\ntimeout = \"30s\"\nlease = \"31s\"",
        ));
        assert!(e.contains("lease must exceed timeout"), "{e}");
        let e = err(&MINIMAL.replace("url = \"http://127.0.0.1:3000/hooks\"", "url = \"ftp://x\""));
        assert!(e.contains("must be http:// or https://"), "{e}");
    }

    #[test]
    fn server_limits_are_bounded() {
        let with = |line: &str| format!("[server]\n{line}\n{MINIMAL}");
        assert!(err(&with("header_timeout = \"1000000h\"")).contains("at most 1h"));
        assert!(err(&with("max_connections = 0")).contains("max_connections"));
        assert!(
            err(&MINIMAL.replace("path = \"inbox.db\"", "path = \"\""))
                .contains("store.path is empty")
        );
    }

    #[test]
    fn a_rate_is_n_per_second_minute_or_hour() {
        let rate = |text: &str| parse_rate(text).map(|r| (r.count, r.per.as_secs()));
        assert_eq!(rate("50/s"), Ok((50, 1)));
        assert_eq!(rate(" 600/m "), Ok((600, 60)));
        assert_eq!(rate("1/h"), Ok((1, 3600)));
        for bad in [
            "",
            "50",
            "50/d",
            "0/s",
            "-1/s",
            "+5/s",
            "1.5/s",
            "50 /s",
            "2000000/s",
        ] {
            assert!(parse_rate(bad).is_err(), "{bad:?}");
        }
        let r = parse_rate("50/s").unwrap();
        assert_eq!((r.interval(), r.burst()), (Duration::from_millis(20), 5));
        assert_eq!(r.to_string(), "50/s");
        // Rounded up: never faster than written.
        assert_eq!(
            parse_rate("3/s").unwrap().interval().as_nanos(),
            333_333_334
        );
        let slow = parse_rate("600/m").unwrap();
        assert_eq!(
            (slow.interval(), slow.burst()),
            (Duration::from_millis(100), 1)
        );
        assert_eq!(parse_rate("1/h").unwrap().burst(), 1);

        let e = err(&MINIMAL.replace(
            "url = \"http://127.0.0.1:3000/hooks\"",
            "url = \"http://127.0.0.1:3000/hooks\"\nrate = \"fast\"",
        ));
        assert!(
            e.contains("targets[0]") && e.contains(".rate") && e.contains("N/s, N/m or N/h"),
            "{e}"
        );
        let c = load(&MINIMAL.replace(
            "url = \"http://127.0.0.1:3000/hooks\"",
            "url = \"http://127.0.0.1:3000/hooks\"\nrate = \"2/s\"",
        ))
        .unwrap();
        assert_eq!(
            c.sources[0].targets[0].rate.map(|r| r.to_string()),
            Some("2/s".into())
        );
        assert_eq!(load(MINIMAL).unwrap().sources[0].targets[0].rate, None);
    }

    #[test]
    fn target_needs_exactly_one_kind() {
        // Two kinds in one target: `targets`'s tests, beside the list of kinds that
        // the message spells.
        let pg = |table: &str| {
            MINIMAL.replace(
                "url = \"http://127.0.0.1:3000/hooks\"",
                &format!("postgres = {{ url = \"postgres://app@127.0.0.1/app\"{table} }}"),
            )
        };
        // The table and the TLS it gets: `targets::postgres`'s tests.
        load(&pg("")).unwrap();
        assert!(err(&pg(", table = \"x; drop\"")).contains("must be a table name"));
        let remote = MINIMAL.replace(
            "url = \"http://127.0.0.1:3000/hooks\"",
            "postgres = { url = \"postgres://app:hunter2@db.internal/app\" }",
        );
        assert!(
            err(&remote).contains("holds a password"),
            "{}",
            err(&remote)
        );
        let clear = remote
            .replace("app:hunter2@", "app@")
            .replace(" }", ", tls = \"off\" }");
        assert!(
            err(&clear).contains("only for a server on this machine"),
            "{}",
            err(&clear)
        );
        load(&clear.replace(", tls = \"off\"", "")).unwrap();
        // Where the connection really goes decides, and tls, not sslmode, decides TLS.
        for (url, why) in [
            (
                "postgres://app@localhost/app?hostaddr=10.0.0.5",
                "only for a server on this machine",
            ),
            (
                "postgres://app@localhost/app?sslmode=disable",
                "sets sslmode",
            ),
            ("postgres://app@/app", "names no host"),
        ] {
            let text = MINIMAL.replace(
                "url = \"http://127.0.0.1:3000/hooks\"",
                &format!("postgres = {{ url = \"{url}\", tls = \"off\" }}"),
            );
            assert!(err(&text).contains(why), "{url}: {}", err(&text));
        }
        assert!(err(&pg(", table = \"Inbox\"")).contains("lowercase"));
    }

    #[test]
    fn a_postgres_store_is_checked_like_a_postgres_target_and_names_what_it_lacks() {
        let store = |keys: &str| {
            MINIMAL.replace(
                "path = \"inbox.db\"",
                &format!("path = \"inbox.db\"\n{keys}"),
            )
        };
        let c = load(&store(
            "backend = \"postgres\"\nurl = \"postgres://hookinbox@127.0.0.1/hookinbox\"",
        ))
        .unwrap();
        let Backend::Postgres(pg) = &c.store.backend else {
            panic!("a postgres store")
        };
        assert_eq!((&pg.tls, pg.pool), (&PgTls::Off, DEFAULT_PG_POOL));
        let remote = load(&store(
            "backend = \"postgres\"\nurl = \"postgres://hookinbox@db.internal/hookinbox\"\npool = 8",
        ))
        .unwrap();
        let Backend::Postgres(pg) = &remote.store.backend else {
            panic!("a postgres store")
        };
        assert_eq!((&pg.tls, pg.pool), (&PgTls::VerifyFull { ca: None }, 8));
        for (keys, why) in [
            ("backend = \"postgres\"", "needs store.url"),
            (
                "url = \"postgres://hookinbox@127.0.0.1/h\"",
                "store.url is for backend = \"postgres\"",
            ),
            ("backend = \"mysql\"", "is not a backend"),
            (
                "backend = \"postgres\"\nurl = \"postgres://h:pw@127.0.0.1/h\"",
                "store.url holds a password",
            ),
            (
                "backend = \"postgres\"\nurl = \"postgres://h@127.0.0.1/h\"\nsynchronous = \"normal\"",
                "synchronous_commit = on",
            ),
            (
                "backend = \"postgres\"\nurl = \"postgres://h@127.0.0.1/h\"\npool = 0",
                "store.pool must be between",
            ),
        ] {
            assert!(
                err(&store(keys)).contains(why),
                "{keys}: {}",
                err(&store(keys))
            );
        }
        // A missing path says what it is for, on either backend.
        let without_path = |keys: &str| MINIMAL.replace("path = \"inbox.db\"", keys);
        let e = err(&without_path(""));
        assert!(
            e.contains("store.path is missing; name the inbox file"),
            "{e}"
        );
        let e = err(&without_path(
            "backend = \"postgres\"\nurl = \"postgres://h@127.0.0.1/h\"",
        ));
        assert!(
            e.contains("store.path is missing: with backend = \"postgres\"")
                && e.contains("reload status"),
            "{e}"
        );
        // Alerts and recovery work on either.
        let on_pg = store("backend = \"postgres\"\nurl = \"postgres://h@127.0.0.1/h\"");
        let alerts =
            format!("{on_pg}\n[[alerts]]\nname = \"ops\"\nurl = \"http://127.0.0.1:9/alerts\"\n");
        assert!(load(&alerts).is_ok(), "{:?}", load(&alerts).err());
        let recovering = on_pg
            .replace("scheme = \"standard-webhooks\"", "scheme = \"stripe\"")
            .replace(
                "secrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]",
                "secrets = [\"whsec_x\"]\nrecover = { api = \"stripe\", key = \"rk_test_x\" }",
            );
        assert!(load(&recovering).is_ok(), "{:?}", load(&recovering).err());
    }
}
