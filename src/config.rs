//! The configuration file: TOML parsed strictly (an unknown key is an error), then validated
//! into a [`Config`] whose secrets are loaded and whose schemes are ready to verify.
//!
//! Two phases, as in ripgrep's low/high-level arguments: `Raw*` types mirror the file
//! exactly; [`Config`] is what the rest of the program uses. Every error names the file and
//! the key, and never a secret's value.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper::http::{HeaderName, StatusCode};
use serde::{Deserialize, Deserializer};

use crate::scheme::{self, IdRule, Kind, Scheme};
use crate::secret::{self, Origin, Secret};

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
    pub admin: Admin,
    pub store: Store,
    pub sources: Vec<Source>,
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
    /// Peers whose `X-Forwarded-For` is believed; empty means nobody's.
    pub trusted_proxies: Vec<crate::proxy::Cidr>,
    /// HTTPS on the public listener; reloaded on SIGHUP.
    pub tls: Option<Tls>,
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

impl Server {
    /// The settings a reload cannot change (TLS files and trusted proxies it can).
    pub fn fixed(&self) -> (SocketAddr, u64, Duration, Duration, usize, bool) {
        (
            self.listen,
            self.max_body,
            self.header_timeout,
            self.body_timeout,
            self.max_connections,
            self.tls.is_some(),
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admin {
    /// `/metrics`, `/healthz`, `/readyz`. Local by default; never meant to be public.
    pub listen: SocketAddr,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Store {
    pub path: PathBuf,
    pub synchronous: Synchronous,
}

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
    pub targets: Vec<Target>,
    pub order: Option<Order>,
    /// Where each secret came from, for `check`'s warnings.
    pub secret_origins: Vec<Origin>,
}

#[derive(Debug)]
pub struct Target {
    pub name: String,
    pub kind: TargetKind,
    /// The whole attempt: connect, send, answer (or the command's run time).
    pub timeout: Duration,
    /// Waits between attempts; one attempt more than entries, then `dead`.
    pub retry: Vec<Duration>,
    /// Attempts in flight at once for this target.
    pub concurrency: usize,
    /// How long a claimed delivery stays claimed; after that the sweeper returns it to the
    /// queue (a crash mid-attempt). Always longer than `timeout`.
    pub lease: Duration,
    /// When set, forwarded requests carry a Standard Webhooks signature made with it.
    pub sign_secret: Option<Secret>,
}

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

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetKind {
    Url(String),
    /// argv; run without a shell.
    Command(Vec<String>),
}

// ---- the file as written -------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    server: RawServer,
    #[serde(default)]
    admin: RawAdmin,
    store: RawStore,
    #[serde(default)]
    sources: Vec<RawSource>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    #[serde(default = "default_listen")]
    listen: SocketAddr,
    #[serde(default = "default_max_body", deserialize_with = "de_size")]
    max_body: u64,
    #[serde(default = "default_header_timeout", deserialize_with = "de_duration")]
    header_timeout: Duration,
    #[serde(default = "default_body_timeout", deserialize_with = "de_duration")]
    body_timeout: Duration,
    #[serde(default = "default_max_connections")]
    max_connections: usize,
    #[serde(default)]
    trusted_proxies: Vec<String>,
    #[serde(default)]
    tls: Option<Tls>,
}

impl Default for RawServer {
    fn default() -> Self {
        RawServer {
            listen: default_listen(),
            max_body: DEFAULT_MAX_BODY,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            trusted_proxies: Vec::new(),
            tls: None,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAdmin {
    #[serde(default = "default_admin_listen")]
    listen: SocketAddr,
}

impl Default for RawAdmin {
    fn default() -> Self {
        RawAdmin {
            listen: default_admin_listen(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStore {
    path: PathBuf,
    #[serde(default = "default_synchronous")]
    synchronous: Synchronous,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSource {
    name: String,
    scheme: String,
    secrets: Vec<String>,
    #[serde(default)]
    account: String,
    #[serde(default, deserialize_with = "de_opt_duration")]
    tolerance: Option<Duration>,
    #[serde(default = "default_on_conflict")]
    on_conflict: u16,
    #[serde(default = "default_keep_payload", deserialize_with = "de_duration")]
    keep_payload: Duration,
    #[serde(default = "default_keep_identity", deserialize_with = "de_duration")]
    keep_identity: Duration,
    /// Overrides the scheme's event id: a header name…
    #[serde(default)]
    id_header: Option<String>,
    /// …or a JSON pointer into the body.
    #[serde(default)]
    id_pointer: Option<String>,
    #[serde(default)]
    hmac: Option<scheme::hmac::Spec>,
    #[serde(default)]
    order: Option<Order>,
    #[serde(default)]
    targets: Vec<RawTarget>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTarget {
    name: String,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    command: Option<Vec<String>>,
    #[serde(default = "default_target_timeout", deserialize_with = "de_duration")]
    timeout: Duration,
    #[serde(default, deserialize_with = "de_opt_durations")]
    retry: Option<Vec<Duration>>,
    #[serde(default = "default_target_concurrency")]
    concurrency: usize,
    #[serde(default)]
    sign_secret: Option<String>,
    #[serde(default, deserialize_with = "de_opt_duration")]
    lease: Option<Duration>,
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8080))
}
fn default_admin_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9180))
}
fn default_max_body() -> u64 {
    DEFAULT_MAX_BODY
}
fn default_header_timeout() -> Duration {
    DEFAULT_HEADER_TIMEOUT
}
fn default_body_timeout() -> Duration {
    DEFAULT_BODY_TIMEOUT
}
fn default_max_connections() -> usize {
    DEFAULT_MAX_CONNECTIONS
}
fn default_synchronous() -> Synchronous {
    Synchronous::Full
}
fn default_on_conflict() -> u16 {
    DEFAULT_ON_CONFLICT
}
fn default_keep_payload() -> Duration {
    DEFAULT_KEEP_PAYLOAD
}
fn default_keep_identity() -> Duration {
    DEFAULT_KEEP_IDENTITY
}
fn default_target_timeout() -> Duration {
    DEFAULT_TARGET_TIMEOUT
}
fn default_target_concurrency() -> usize {
    DEFAULT_TARGET_CONCURRENCY
}

fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    parse_duration(&text).map_err(serde::de::Error::custom)
}

fn de_opt_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    de_duration(d).map(Some)
}

fn de_opt_durations<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<Duration>>, D::Error> {
    let texts = Vec::<String>::deserialize(d)?;
    texts
        .iter()
        .map(|t| parse_duration(t))
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
        .map_err(serde::de::Error::custom)
}

fn de_size<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let text = String::deserialize(d)?;
    parse_size(&text).map_err(serde::de::Error::custom)
}

/// A human duration: `"5m"`, `"30d"`, `"1h 30m"`, `"500ms"`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|e| {
        format!("bad duration {text:?} ({e}); write a number and a unit, like \"30s\", \"5m\" or \"30d\"")
    })
}

/// A human size: `"1MiB"`, `"512KiB"`, `"1000000"` (bytes), `"2 MB"`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad =
        || format!("bad size {text:?}; write a number and a unit, like \"1MiB\" or \"512KiB\"");
    let n: u64 = num.parse().map_err(|_| bad())?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KB" | "kB" => 1000,
        "KiB" => 1024,
        "MB" => 1000 * 1000,
        "MiB" => 1024 * 1024,
        "GB" => 1000 * 1000 * 1000,
        "GiB" => 1024 * 1024 * 1024,
        _ => return Err(bad()),
    };
    n.checked_mul(mult).ok_or_else(bad)
}

// ---- loading and validation ----------------------------------------------------------

/// The path `--config` means when it is not given.
pub fn default_path() -> PathBuf {
    if Path::new(SYSTEM_PATH).exists() {
        PathBuf::from(SYSTEM_PATH)
    } else {
        PathBuf::from(LOCAL_PATH)
    }
}

/// Reads, parses and validates the configuration at `path`, loading every secret.
pub fn load(path: &Path) -> anyhow::Result<Config> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        anyhow::anyhow!(
            "cannot read config file {}: {e} (pass --config FILE; examples/quickstart.toml is a start)",
            path.display()
        )
    })?;
    let credentials = std::env::var_os("CREDENTIALS_DIRECTORY").map(PathBuf::from);
    from_str(&text, path, credentials.as_deref())
}

/// What the operator commands need from the config (the inbox and the retention windows),
/// read without loading any secret: `events`, `replay` or `prune` work in a shell where
/// `env:` or `credential:` secrets are not available.
#[derive(Debug, Clone)]
pub struct Offline {
    pub path: PathBuf,
    pub store: Store,
    /// (source, keep_payload, keep_identity), as configured.
    pub retention: Vec<(String, Duration, Duration)>,
}

/// Reads the config for the operator commands: the same parsing, no secrets.
pub fn load_offline(path: &Path) -> anyhow::Result<Offline> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        anyhow::anyhow!(
            "cannot read config file {}: {e} (pass --config FILE, or --db FILE for the inbox alone)",
            path.display()
        )
    })?;
    let raw: RawConfig = toml::from_str(&text)
        .map_err(|e| anyhow::anyhow!("config file {}: {e}", path.display()))?;
    if raw.store.path.as_os_str().is_empty() {
        anyhow::bail!("config file {}: store.path is empty", path.display());
    }
    let base = path.parent().unwrap_or(Path::new("."));
    Ok(Offline {
        path: path.to_owned(),
        store: Store {
            path: base.join(&raw.store.path),
            synchronous: raw.store.synchronous,
        },
        retention: raw
            .sources
            .into_iter()
            .map(|s| (s.name, s.keep_payload, s.keep_identity))
            .collect(),
    })
}

/// Parses and validates configuration text; `path` is used in messages and to resolve a
/// relative store path.
pub fn from_str(text: &str, path: &Path, credentials: Option<&Path>) -> anyhow::Result<Config> {
    let raw: RawConfig =
        toml::from_str(text).map_err(|e| anyhow::anyhow!("config file {}: {e}", path.display()))?;
    validate(raw, path, credentials)
        .map_err(|e| anyhow::anyhow!("config file {}: {e}", path.display()))
}

/// Where relative paths and `credential:` secrets are found.
struct Paths<'a> {
    /// The config file's directory.
    base: &'a Path,
    /// systemd's `$CREDENTIALS_DIRECTORY`.
    credentials: Option<&'a Path>,
}

fn validate(raw: RawConfig, path: &Path, credentials: Option<&Path>) -> Result<Config, String> {
    let paths = Paths {
        base: path.parent().unwrap_or(Path::new(".")),
        credentials,
    };
    let s = &raw.server;
    if s.max_body == 0 || s.max_body > MAX_MAX_BODY {
        return Err(format!(
            "server.max_body must be between 1 byte and {} MiB",
            MAX_MAX_BODY / 1024 / 1024
        ));
    }
    for (key, value) in [
        ("header_timeout", s.header_timeout),
        ("body_timeout", s.body_timeout),
    ] {
        if value.is_zero() || value > MAX_TIMEOUT {
            return Err(format!(
                "server.{key} must be more than zero and at most 1h"
            ));
        }
    }
    if s.max_connections == 0 || s.max_connections > MAX_MAX_CONNECTIONS {
        return Err(format!(
            "server.max_connections must be between 1 and {MAX_MAX_CONNECTIONS}"
        ));
    }
    if raw.store.path.as_os_str().is_empty() {
        return Err(
            "store.path is empty; name the inbox file, e.g. \"/var/lib/hookinbox/inbox.db\"".into(),
        );
    }
    // A relative store path is relative to the config file, so that a config works from any
    // working directory (systemd starts services in /).
    // (Joining an absolute path yields it unchanged.)
    let store_path = paths.base.join(&raw.store.path);
    let trusted_proxies = s
        .trusted_proxies
        .iter()
        .map(|t| crate::proxy::Cidr::parse(t).map_err(|e| format!("server.trusted_proxies: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let tls = s.tls.as_ref().map(|t| Tls {
        cert: paths.base.join(&t.cert),
        key: paths.base.join(&t.key),
    });
    if let Some(t) = &tls {
        crate::receive::tls::server_config(t).map_err(|e| format!("server.tls: {e}"))?;
    }

    let mut names = HashSet::new();
    let mut sources = Vec::with_capacity(raw.sources.len());
    for (i, rs) in raw.sources.into_iter().enumerate() {
        let at = format!("sources[{i}] ({:?})", rs.name);
        if !valid_name(&rs.name) {
            return Err(format!(
                "{at}.name must be 1-64 characters of a-z, 0-9, '-' or '_' (it is a URL path segment)"
            ));
        }
        if !names.insert(rs.name.clone()) {
            return Err(format!("{at}.name is used by two sources"));
        }
        sources.push(validate_source(rs, &at, &paths)?);
    }
    Ok(Config {
        path: path.to_owned(),
        server: Server {
            listen: s.listen,
            max_body: s.max_body,
            header_timeout: s.header_timeout,
            body_timeout: s.body_timeout,
            max_connections: s.max_connections,
            trusted_proxies,
            tls,
        },
        admin: Admin {
            listen: raw.admin.listen,
        },
        store: Store {
            path: store_path,
            synchronous: raw.store.synchronous,
        },
        sources,
    })
}

fn validate_source(rs: RawSource, at: &str, paths: &Paths) -> Result<Source, String> {
    let kind = match (rs.scheme.as_str(), rs.hmac) {
        ("standard-webhooks", None) => Kind::StandardWebhooks,
        ("stripe", None) => Kind::Stripe,
        ("github", None) => Kind::Github,
        ("shopify", None) => Kind::Shopify,
        ("slack", None) => Kind::Slack,
        ("gitlab", None) => Kind::Gitlab,
        ("hmac", Some(spec)) => Kind::Hmac(validate_hmac(spec, at)?),
        ("hmac", None) => {
            return Err(format!(
                "{at}: scheme \"hmac\" needs an [sources.hmac] table"
            ));
        }
        (_, Some(_)) if is_known_scheme(&rs.scheme) => {
            return Err(format!("{at}.hmac is only for scheme = \"hmac\""));
        }
        (other, _) => {
            return Err(format!(
                "{at}.scheme {other:?} is unknown; use one of standard-webhooks, stripe, github, \
                 shopify, slack, gitlab, hmac"
            ));
        }
    };
    let id = match (rs.id_header, rs.id_pointer) {
        (Some(_), Some(_)) => return Err(format!("{at}: set id_header or id_pointer, not both")),
        (Some(h), None) => Some(IdRule::Header(
            HeaderName::from_bytes(h.as_bytes())
                .map_err(|_| format!("{at}.id_header {h:?} is not a valid header name"))?,
        )),
        (None, Some(p)) => {
            if !p.starts_with('/') {
                return Err(format!(
                    "{at}.id_pointer {p:?} must be a JSON pointer like \"/id\""
                ));
            }
            Some(IdRule::Pointer(p))
        }
        (None, None) => None,
    };
    // These schemes sign their own event id (Standard Webhooks signs webhook-id; Stripe and
    // Slack carry it in the signed body). An id from another header would be unsigned, so a
    // captured request replayed with a new id would pass as a new event.
    if matches!(id, Some(IdRule::Header(_)))
        && matches!(kind, Kind::StandardWebhooks | Kind::Stripe | Kind::Slack)
    {
        return Err(format!(
            "{at}.id_header: scheme {:?} signs its own event id; an id from an unsigned header \
             would let a replayed request pass as new (id_pointer into the signed body is allowed)",
            kind.name()
        ));
    }
    if let Some(order) = &rs.order
        && !(order.key.starts_with('/') && order.version.starts_with('/'))
    {
        return Err(format!(
            "{at}.order: key and version are JSON pointers like \"/data/object/id\""
        ));
    }
    if matches!(kind, Kind::Hmac(_)) && id.is_none() {
        return Err(format!(
            "{at}: scheme \"hmac\" has no standard event id; set id_header or id_pointer"
        ));
    }
    let tolerance = rs.tolerance.unwrap_or(scheme::DEFAULT_TOLERANCE);
    if !(MIN_TOLERANCE..=MAX_TOLERANCE).contains(&tolerance) {
        return Err(format!("{at}.tolerance must be between 1s and 7d"));
    }
    if rs.tolerance.is_some() && !kind.signs_timestamp() {
        return Err(format!(
            "{at}.tolerance: scheme {:?} signs no timestamp, so a tolerance cannot apply",
            kind.name()
        ));
    }
    let on_conflict = StatusCode::from_u16(rs.on_conflict)
        .ok()
        .filter(|c| (200..600).contains(&c.as_u16()))
        .ok_or_else(|| format!("{at}.on_conflict must be an HTTP status between 200 and 599"))?;
    if rs.keep_identity < rs.keep_payload {
        return Err(format!(
            "{at}: keep_identity must be at least keep_payload (the identity row outlives the body)"
        ));
    }
    if rs.secrets.is_empty() {
        return Err(format!(
            "{at}.secrets is empty; give at least one (several = rotation)"
        ));
    }
    let mut secrets = Vec::with_capacity(rs.secrets.len());
    let mut secret_origins = Vec::with_capacity(rs.secrets.len());
    for (j, reference) in rs.secrets.iter().enumerate() {
        let (secret, origin) = secret::resolve(reference, paths.credentials)
            .map_err(|e| format!("{at}.secrets[{j}]: {e}"))?;
        secrets.push(secret);
        secret_origins.push(origin);
    }
    let scheme =
        Scheme::new(kind, secrets, tolerance, id).map_err(|e| format!("{at}.secrets: {e}"))?;

    let mut target_names = HashSet::new();
    let mut targets = Vec::with_capacity(rs.targets.len());
    for (j, rt) in rs.targets.into_iter().enumerate() {
        let tat = format!("{at}.targets[{j}] ({:?})", rt.name);
        if !valid_name(&rt.name) {
            return Err(format!(
                "{tat}.name must be 1-64 characters of a-z, 0-9, '-' or '_'"
            ));
        }
        if !target_names.insert(rt.name.clone()) {
            return Err(format!("{tat}.name is used by two targets of this source"));
        }
        targets.push(validate_target(rt, &tat, paths)?);
    }
    Ok(Source {
        name: rs.name,
        scheme,
        account: rs.account,
        on_conflict,
        keep_payload: rs.keep_payload,
        keep_identity: rs.keep_identity,
        targets,
        order: rs.order,
        secret_origins,
    })
}

fn validate_hmac(spec: scheme::hmac::Spec, at: &str) -> Result<scheme::hmac::Spec, String> {
    HeaderName::from_bytes(spec.header.as_bytes()).map_err(|_| {
        format!(
            "{at}.hmac.header {:?} is not a valid header name",
            spec.header
        )
    })?;
    if let Some(h) = &spec.timestamp_header {
        HeaderName::from_bytes(h.as_bytes())
            .map_err(|_| format!("{at}.hmac.timestamp_header {h:?} is not a valid header name"))?;
    }
    if spec.signed.matches("{body}").count() != 1 {
        return Err(format!(
            "{at}.hmac.signed must contain {{body}} exactly once"
        ));
    }
    if spec.signed.contains("{timestamp}") && spec.timestamp_header.is_none() {
        return Err(format!(
            "{at}.hmac.signed uses {{timestamp}} but hmac.timestamp_header is not set"
        ));
    }
    // A timestamp that is checked but not signed protects nothing: a replay would just
    // carry a fresh one.
    if spec.timestamp_header.is_some() && !spec.signed.contains("{timestamp}") {
        return Err(format!(
            "{at}.hmac.timestamp_header is set but hmac.signed does not include {{timestamp}}; \
             write what the provider signs, e.g. \"{{timestamp}}.{{body}}\""
        ));
    }
    if spec
        .prefix
        .as_deref()
        .is_some_and(|p| p.contains([',', ' ']))
    {
        return Err(format!(
            "{at}.hmac.prefix cannot contain ',' or ' ' (they separate signatures)"
        ));
    }
    Ok(spec)
}

fn validate_target(rt: RawTarget, at: &str, paths: &Paths) -> Result<Target, String> {
    let kind = match (rt.url, rt.command) {
        (Some(url), None) => {
            let parsed = reqwest::Url::parse(&url)
                .map_err(|e| format!("{at}.url {url:?} is not a URL: {e}"))?;
            if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
                return Err(format!(
                    "{at}.url {url:?} must be http:// or https:// with a host"
                ));
            }
            TargetKind::Url(url)
        }
        (None, Some(mut argv)) => {
            if argv.is_empty() || argv[0].is_empty() {
                return Err(format!(
                    "{at}.command must name a program: [\"/path/to/program\", \"arg\", …]"
                ));
            }
            // A relative program path is relative to the config file, like the store path;
            // a bare name is looked up on PATH.
            if argv[0].contains('/') && Path::new(&argv[0]).is_relative() {
                argv[0] = paths.base.join(&argv[0]).display().to_string();
            }
            TargetKind::Command(argv)
        }
        _ => return Err(format!("{at}: set exactly one of url or command")),
    };
    if rt.timeout.is_zero() {
        return Err(format!("{at}.timeout must be more than zero"));
    }
    if rt.concurrency == 0 || rt.concurrency > MAX_CONCURRENCY {
        return Err(format!(
            "{at}.concurrency must be between 1 and {MAX_CONCURRENCY}"
        ));
    }
    if rt.timeout > MAX_TIMEOUT {
        return Err(format!("{at}.timeout must be at most 1h"));
    }
    let lease = rt.lease.unwrap_or(rt.timeout + LEASE_MARGIN);
    if lease < rt.timeout + MIN_LEASE_MARGIN || lease > MAX_TIMEOUT * 2 {
        return Err(format!(
            "{at}.lease must exceed timeout ({:?}) by at least {MIN_LEASE_MARGIN:?} (time to \
             record the result, or a second attempt could start while the first still runs) \
             and be at most 2h",
            rt.timeout
        ));
    }
    let retry = rt.retry.unwrap_or_else(|| DEFAULT_RETRY.to_vec());
    if retry.iter().any(|d| *d > MAX_RETRY_DELAY) {
        return Err(format!("{at}.retry: each wait must be at most 7d"));
    }
    if rt.sign_secret.is_some() && matches!(kind, TargetKind::Command(_)) {
        return Err(format!(
            "{at}.sign_secret is for url targets; a command runs locally and gets its metadata \
             in HOOKINBOX_* variables"
        ));
    }
    let sign_secret = match rt.sign_secret {
        None => None,
        Some(reference) => {
            let (secret, _) = secret::resolve(&reference, paths.credentials)
                .map_err(|e| format!("{at}.sign_secret: {e}"))?;
            scheme::standard_webhooks::decode_secret(&secret)
                .map_err(|e| format!("{at}.sign_secret: {e}"))?;
            Some(secret)
        }
    };
    Ok(Target {
        name: rt.name,
        kind,
        timeout: rt.timeout,
        retry,
        concurrency: rt.concurrency,
        lease,
        sign_secret,
    })
}

fn is_known_scheme(name: &str) -> bool {
    matches!(
        name,
        "standard-webhooks" | "stripe" | "github" | "shopify" | "slack" | "gitlab" | "hmac"
    )
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// How long after an event its provider may still send it again, for `check`'s warning.
fn redelivery_horizon(kind: &Kind) -> Option<(Duration, &'static str)> {
    const DAY: u64 = 86_400;
    Some(match kind {
        Kind::Stripe => (Duration::from_secs(3 * DAY), "Stripe's 3 days of retries"),
        Kind::Github => (
            Duration::from_secs(3 * DAY),
            "the 3 days in which GitHub deliveries can be redelivered by hand",
        ),
        Kind::StandardWebhooks => (
            Duration::from_secs(4 * DAY),
            "the Standard Webhooks retry schedule (up to about 3 days) plus manual resends",
        ),
        Kind::Shopify => (Duration::from_secs(2 * DAY), "Shopify's retries"),
        Kind::Slack => (Duration::from_secs(3600), "Slack's retries"),
        Kind::Gitlab => (
            Duration::from_secs(DAY),
            "GitLab's retries and manual resends",
        ),
        Kind::Hmac(_) => return None,
    })
}

/// Whether others than the owner and group may read `path`.
fn world_readable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o004 != 0)
}

impl Config {
    pub fn source(&self, name: &str) -> Option<&Source> {
        self.sources.iter().find(|s| s.name == name)
    }

    /// Things that work but that an operator should know about. `check` prints them;
    /// `serve` logs them at start-up.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        for s in &self.sources {
            for (j, origin) in s.secret_origins.iter().enumerate() {
                match origin {
                    Origin::Literal => out.push(format!(
                        "source {:?}: secrets[{j}] is written in the config file; prefer \
                         \"file:/etc/hookinbox/secrets/{}\", \"env:NAME\" or \"credential:NAME\"",
                        s.name, s.name
                    )),
                    Origin::File(path) if world_readable(path) => out.push(format!(
                        "source {:?}: secret file {} is readable by every user; chmod 600 it \
                         (owned by the service user)",
                        s.name,
                        path.display()
                    )),
                    _ => {}
                }
            }
            if let Some((horizon, why)) = redelivery_horizon(s.scheme.kind())
                && s.keep_identity < horizon
            {
                out.push(format!(
                    "source {:?}: keep_identity {} is shorter than {why}; a redelivery after \
                         that would be stored and forwarded again as a new event",
                    s.name,
                    humantime::format_duration(s.keep_identity)
                ));
            }
        }
        if !self.admin.listen.ip().is_loopback() {
            out.push(format!(
                "admin.listen {} is not a loopback address; /metrics and /readyz should not be public",
                self.admin.listen
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
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
            err(&base).contains("id_header or id_pointer"),
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
    fn target_needs_exactly_one_kind() {
        let e = err(&MINIMAL.replace("url = ", "command = [\"/bin/true\"]\nurl = "));
        assert!(e.contains("exactly one of url or command"), "{e}");
    }
}
