//! The configuration file exactly as written: serde types that mirror the TOML (an unknown
//! key is an error), their defaults, and the parsers for human durations and sizes.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use serde::de::value::{BorrowedStrDeserializer, MapAccessDeserializer};
use serde::de::{DeserializeSeed, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::*;
use crate::targets::{self, WrittenKinds};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    #[serde(default)]
    pub(super) server: RawServer,
    #[serde(default)]
    pub(super) admin: RawAdmin,
    pub(super) store: RawStore,
    #[serde(default)]
    pub(super) sources: Vec<RawSource>,
    /// Where alerts are sent: targets of their own, under the internal source
    /// [`crate::event::ALERT_SOURCE`].
    #[serde(default)]
    pub(super) alerts: Vec<RawTarget>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
    #[serde(default = "default_listen")]
    pub(super) listen: SocketAddr,
    #[serde(default = "default_max_body", deserialize_with = "de_size")]
    pub(super) max_body: u64,
    #[serde(default = "default_header_timeout", deserialize_with = "de_duration")]
    pub(super) header_timeout: Duration,
    #[serde(default = "default_body_timeout", deserialize_with = "de_duration")]
    pub(super) body_timeout: Duration,
    #[serde(default = "default_max_connections")]
    pub(super) max_connections: usize,
    #[serde(default = "default_body_budget", deserialize_with = "de_size")]
    pub(super) body_budget: u64,
    #[serde(default = "default_min_body_rate", deserialize_with = "de_rate")]
    pub(super) min_body_rate: u64,
    #[serde(default)]
    pub(super) trusted_proxies: Vec<String>,
    /// Where a provider's address list is fetched from instead of the provider's own URL,
    /// by provider name.
    #[serde(default)]
    pub(super) allow_lists: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    pub(super) tls: Option<RawTls>,
}

/// `[server.tls]`: certificate files, or `[server.tls.acme]`; validation says which.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTls {
    pub(super) cert: Option<PathBuf>,
    pub(super) key: Option<PathBuf>,
    pub(super) acme: Option<RawAcme>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAcme {
    pub(super) domains: Vec<String>,
    pub(super) contact: Option<String>,
    #[serde(default = "default_acme_directory")]
    pub(super) directory: String,
    pub(super) directory_ca: Option<PathBuf>,
    pub(super) http01_listen: Option<SocketAddr>,
}

fn default_acme_directory() -> String {
    LETS_ENCRYPT.to_owned()
}

impl Default for RawServer {
    fn default() -> Self {
        RawServer {
            listen: default_listen(),
            max_body: DEFAULT_MAX_BODY,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            body_budget: DEFAULT_BODY_BUDGET,
            min_body_rate: DEFAULT_MIN_BODY_RATE,
            trusted_proxies: Vec::new(),
            allow_lists: Default::default(),
            tls: None,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAdmin {
    #[serde(default = "default_admin_listen")]
    pub(super) listen: SocketAddr,
    #[serde(default)]
    pub(super) actions: bool,
    #[serde(default)]
    pub(super) hosts: Vec<String>,
}

impl Default for RawAdmin {
    fn default() -> Self {
        RawAdmin {
            listen: default_admin_listen(),
            actions: false,
            hosts: Vec::new(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStore {
    /// Optional here so that a missing path gets an error that says what it is for, which
    /// with `backend = "postgres"` is not obvious.
    #[serde(default)]
    pub(super) path: Option<PathBuf>,
    #[serde(default = "default_synchronous")]
    pub(super) synchronous: Synchronous,
    #[serde(
        default = "default_retention_interval",
        deserialize_with = "de_duration"
    )]
    pub(super) retention_interval: Duration,
    /// "sqlite" (the default) or "postgres"; the keys below are for "postgres".
    #[serde(default)]
    pub(super) backend: Option<String>,
    #[serde(default)]
    pub(super) url: Option<String>,
    #[serde(default)]
    pub(super) password: Option<String>,
    #[serde(default)]
    pub(super) tls: Option<String>,
    #[serde(default)]
    pub(super) ca: Option<PathBuf>,
    #[serde(default)]
    pub(super) pool: Option<usize>,
}

/// One `[[sources]]` table. Not `deny_unknown_fields`: the keys it does not know are the
/// scheme's settings, which the scheme reads and checks (an unknown key is still an error,
/// naming the key).
#[derive(Deserialize)]
pub(super) struct RawSource {
    pub(super) name: String,
    /// Optional here so that a misspelt key (`shceme`) is named in the error, rather than
    /// "missing field".
    #[serde(default)]
    pub(super) scheme: Option<String>,
    #[serde(default)]
    pub(super) secrets: Vec<String>,
    #[serde(default)]
    pub(super) account: String,
    #[serde(default, deserialize_with = "de_opt_duration")]
    pub(super) tolerance: Option<Duration>,
    #[serde(default = "default_on_conflict")]
    pub(super) on_conflict: u16,
    #[serde(default = "default_keep_payload", deserialize_with = "de_duration")]
    pub(super) keep_payload: Duration,
    #[serde(default = "default_keep_identity", deserialize_with = "de_duration")]
    pub(super) keep_identity: Duration,
    #[serde(default, deserialize_with = "de_opt_duration")]
    pub(super) expect_every: Option<Duration>,
    /// Overrides the scheme's event id: a header name…
    #[serde(default)]
    pub(super) id_header: Option<String>,
    /// …or a JSON pointer into the body.
    #[serde(default)]
    pub(super) id_pointer: Option<String>,
    /// …or a list of parts joined (`["/event", "header:X-Id"]`), or `"sha256"` (the body's
    /// hash).
    #[serde(default)]
    pub(super) id: Option<RawId>,
    #[serde(default)]
    pub(super) order: Option<Order>,
    #[serde(default)]
    pub(super) recover: Option<RawRecover>,
    /// Addresses, ranges and provider names; None (any address) differs from an empty list.
    #[serde(default)]
    pub(super) allow_from: Option<Vec<String>>,
    #[serde(default)]
    pub(super) targets: Vec<RawTarget>,
    /// Everything else: the scheme's own settings.
    #[serde(flatten)]
    pub(super) settings: toml::Table,
}

/// A source's `recover` table: which provider API fills its gaps, and how to reach it. One
/// table for every API; which keys an API takes is checked in validation, naming the key.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRecover {
    pub(super) api: String,
    #[serde(default)]
    pub(super) api_url: Option<String>,
    #[serde(default = "default_recover_every", deserialize_with = "de_duration")]
    pub(super) every: Duration,
    #[serde(default)]
    pub(super) repo: Option<String>,
    #[serde(default)]
    pub(super) org: Option<String>,
    #[serde(default)]
    pub(super) hook_id: Option<u64>,
    #[serde(default)]
    pub(super) token: Option<String>,
    #[serde(default)]
    pub(super) app_id: Option<u64>,
    #[serde(default)]
    pub(super) private_key: Option<String>,
    #[serde(default)]
    pub(super) key: Option<String>,
    #[serde(default)]
    pub(super) types: Vec<String>,
}

pub(super) fn default_recover_every() -> Duration {
    DEFAULT_RECOVER_EVERY
}

/// The `id` key: one rule written as text, or several parts joined.
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RawId {
    One(String),
    Parts(Vec<String>),
}

/// One target's table (`[[sources.targets]]`, `[[alerts]]`): the keys every target takes,
/// and in `kinds` those of its kind (`url`, `sign_secret`, `command`, `postgres`), each read
/// by its kind ([`crate::targets`]) as its type says.
///
/// Deserialized by hand only to hand each key to its reader: serde's messages stay what
/// the derived code says, at the line of the mistake (a key nobody takes is refused with
/// every key a target takes, in [`target_keys`]'s order).
pub(super) struct RawTarget {
    pub(super) name: String,
    pub(super) timeout: Duration,
    pub(super) retry: Option<Vec<Duration>>,
    pub(super) concurrency: usize,
    /// `"50/s"`, `"600/m"`, `"100/h"`; parsed by `parse_rate` during validation, so that
    /// the error names the key.
    pub(super) rate: Option<String>,
    pub(super) lease: Option<Duration>,
    pub(super) alert_failure_share: f64,
    pub(super) alert_pending_age: Duration,
    pub(super) kinds: WrittenKinds,
}

/// The keys every target takes, whatever its kind, in the order of [`TargetCommon`]'s
/// fields (a test holds them together).
const COMMON_TARGET_KEYS: &[&str] = &[
    "name",
    "timeout",
    "retry",
    "concurrency",
    "rate",
    "lease",
    "alert_failure_share",
    "alert_pending_age",
];

/// Every key a target's table takes, as the unknown-key error lists them: `name`, each
/// kind's keys, then the rest.
fn target_keys() -> &'static [&'static str] {
    static KEYS: OnceLock<Vec<&'static str>> = OnceLock::new();
    KEYS.get_or_init(|| {
        let (name, rest) = COMMON_TARGET_KEYS.split_first().expect("name is a key");
        let kinds = targets::KEYS
            .iter()
            .flat_map(|keys| keys.iter().map(|k| k.name));
        std::iter::once(*name)
            .chain(kinds)
            .chain(rest.iter().copied())
            .collect()
    })
}

/// The keys every target takes, as serde derives them.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TargetCommon {
    name: String,
    #[serde(default = "default_target_timeout", deserialize_with = "de_duration")]
    timeout: Duration,
    #[serde(default, deserialize_with = "de_opt_durations")]
    retry: Option<Vec<Duration>>,
    #[serde(default = "default_target_concurrency")]
    concurrency: usize,
    #[serde(default)]
    rate: Option<String>,
    #[serde(default, deserialize_with = "de_opt_duration")]
    lease: Option<Duration>,
    #[serde(default = "default_alert_failure_share")]
    alert_failure_share: f64,
    #[serde(
        default = "default_alert_pending_age",
        deserialize_with = "de_duration"
    )]
    alert_pending_age: Duration,
}

impl<'de> Deserialize<'de> for RawTarget {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RawTarget, D::Error> {
        d.deserialize_struct("RawTarget", target_keys(), TargetVisitor)
    }
}

struct TargetVisitor;

impl<'de> Visitor<'de> for TargetVisitor {
    type Value = RawTarget;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("struct RawTarget")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawTarget, A::Error> {
        let mut kinds = WrittenKinds::default();
        let aside = KindsAside {
            map,
            kinds: &mut kinds,
        };
        let common = TargetCommon::deserialize(MapAccessDeserializer::new(aside))?;
        Ok(RawTarget {
            name: common.name,
            timeout: common.timeout,
            retry: common.retry,
            concurrency: common.concurrency,
            rate: common.rate,
            lease: common.lease,
            alert_failure_share: common.alert_failure_share,
            alert_pending_age: common.alert_pending_age,
            kinds,
        })
    }
}

/// A target's table as [`TargetCommon`] reads it: the kinds' keys are read on the way by
/// their kinds, and a key nobody takes is refused.
struct KindsAside<'k, A> {
    map: A,
    kinds: &'k mut WrittenKinds,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for KindsAside<'_, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        while let Some(key) = self.map.next_key_seed(TargetKey)? {
            match key {
                Taker::Kind(key) => self.kinds.read(key, &mut self.map)?,
                Taker::Common(key) => {
                    return seed
                        .deserialize(BorrowedStrDeserializer::new(key))
                        .map(Some);
                }
            }
        }
        Ok(None)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.map.next_value_seed(seed)
    }
}

/// Reads a key of a target's table and says who takes it. A key nobody takes is refused
/// here, while it is read, so that the error points at it.
struct TargetKey;

enum Taker {
    Kind(&'static str),
    Common(&'static str),
}

impl<'de> DeserializeSeed<'de> for TargetKey {
    type Value = Taker;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Taker, D::Error> {
        d.deserialize_identifier(self)
    }
}

impl<'de> Visitor<'de> for TargetKey {
    type Value = Taker;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("field identifier")
    }

    fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<Taker, E> {
        if let Some(key) = targets::key_of(key) {
            return Ok(Taker::Kind(key));
        }
        match COMMON_TARGET_KEYS.iter().find(|k| **k == key) {
            Some(key) => Ok(Taker::Common(key)),
            None => Err(E::unknown_field(key, target_keys())),
        }
    }
}

pub(super) fn default_alert_failure_share() -> f64 {
    DEFAULT_ALERT_FAILURE_SHARE
}
pub(super) fn default_alert_pending_age() -> Duration {
    DEFAULT_ALERT_PENDING_AGE
}

pub(super) fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8080))
}
pub(super) fn default_admin_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9180))
}
pub(super) fn default_max_body() -> u64 {
    DEFAULT_MAX_BODY
}
pub(super) fn default_header_timeout() -> Duration {
    DEFAULT_HEADER_TIMEOUT
}
pub(super) fn default_body_timeout() -> Duration {
    DEFAULT_BODY_TIMEOUT
}
pub(super) fn default_body_budget() -> u64 {
    DEFAULT_BODY_BUDGET
}
pub(super) fn default_min_body_rate() -> u64 {
    DEFAULT_MIN_BODY_RATE
}
pub(super) fn default_max_connections() -> usize {
    DEFAULT_MAX_CONNECTIONS
}
pub(super) fn default_synchronous() -> Synchronous {
    Synchronous::Full
}
pub(super) fn default_retention_interval() -> Duration {
    DEFAULT_RETENTION_INTERVAL
}
pub(super) fn default_on_conflict() -> u16 {
    DEFAULT_ON_CONFLICT
}
pub(super) fn default_keep_payload() -> Duration {
    DEFAULT_KEEP_PAYLOAD
}
pub(super) fn default_keep_identity() -> Duration {
    DEFAULT_KEEP_IDENTITY
}
pub(super) fn default_target_timeout() -> Duration {
    DEFAULT_TARGET_TIMEOUT
}
pub(super) fn default_target_concurrency() -> usize {
    DEFAULT_TARGET_CONCURRENCY
}

pub(super) fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    parse_duration(&text).map_err(serde::de::Error::custom)
}

pub(super) fn de_opt_duration<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Duration>, D::Error> {
    de_duration(d).map(Some)
}

pub(super) fn de_opt_durations<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<Duration>>, D::Error> {
    let texts = Vec::<String>::deserialize(d)?;
    texts
        .iter()
        .map(|t| parse_duration(t))
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
        .map_err(serde::de::Error::custom)
}

pub(super) fn de_size<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let text = String::deserialize(d)?;
    parse_size(&text).map_err(serde::de::Error::custom)
}

fn de_rate<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let text = String::deserialize(d)?;
    parse_rate(&text).map_err(serde::de::Error::custom)
}

/// A rate in bytes a second: `"1KiB/s"`, `"500/s"`; `"0/s"` is no floor.
pub fn parse_rate(text: &str) -> Result<u64, String> {
    let bad = || format!("bad rate {text:?}; write a size a second, like \"1KiB/s\"");
    let size = text.trim().strip_suffix("/s").ok_or_else(bad)?;
    parse_size(size).map_err(|_| bad())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// [`COMMON_TARGET_KEYS`] are [`TargetCommon`]'s fields, in their order, as serde names
    /// them when it meets a key that is not one of them.
    #[test]
    fn the_common_target_keys_are_the_derived_fields() {
        let error = toml::from_str::<TargetCommon>("name = \"x\"\nnot_a_key = 1")
            .err()
            .unwrap()
            .to_string();
        let expected = error
            .split_once("expected one of ")
            .unwrap()
            .1
            .lines()
            .next();
        let listed: Vec<&str> = expected.unwrap().split('`').skip(1).step_by(2).collect();
        assert_eq!(listed, COMMON_TARGET_KEYS);
    }
}
