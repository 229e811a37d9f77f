//! What an event is, on the ground floor: its identity (source, account, provider event
//! id), its idempotency key per target, its order key and version, and the three ways one
//! is built: from a verified request ([`new_event`], the receive path), from a provider's
//! API (recovery, through the same [`new_event`], so that a fetched event is keyed and
//! ordered exactly as its webhook would have been), and from an alert
//! ([`NewEvent::notification`]).
//!
//! Invariant: an event's idempotency key at a target is a function of its identity and the
//! target's name alone ([`idempotency_key`]), so it is the same on every attempt, replay and
//! restart, on either backend. This module imports nothing above the configuration and
//! the schemes: the store, receive, recover and alerts all build on it.

use std::sync::Arc;

use bytes::Bytes;

use crate::config::{Order, Source};
use crate::scheme::Identity;

/// The internal source hookinbox's own notifications (alerts) are stored and delivered
/// under. A configured source cannot have this name (a '.' is not allowed in one), so the
/// two never mix.
pub const ALERT_SOURCE: &str = "hookinbox.alerts";

/// An event, verified and ready to store, with everything computed off the writer thread.
#[derive(Debug)]
pub struct NewEvent {
    pub source: Arc<str>,
    pub account: Arc<str>,
    pub event_id: String,
    pub sha256_hex: String,
    pub body: Bytes,
    /// Whether `body` is valid UTF-8 and so is stored as TEXT.
    pub body_is_text: bool,
    /// JSON `[[name, value], …]`.
    pub headers: String,
    pub event_type: Option<String>,
    /// Unix seconds.
    pub provider_time: Option<i64>,
    /// (target name, idempotency key), one delivery row each.
    pub deliveries: Vec<(String, String)>,
    /// With ordering on: the event's order key and version.
    pub order: Option<(String, Version)>,
    /// The sender's address (see `proxy::client`); for an event fetched from a provider's
    /// API, the API's host.
    pub remote_addr: String,
    /// How it reached hookinbox.
    pub origin: Origin,
    /// Top-level JSON members that record the delivery, not the event: left out when this
    /// webhook is compared with the same event fetched from the API.
    pub bookkeeping: &'static [&'static str],
    /// The body's room in the receiver's memory budget: held as long as the event is, so
    /// that an event still queued for a stalled disk after its request gave up still
    /// counts against the budget.
    pub memory: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// How an event reached the inbox (`events.origin`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Signed, through `/hooks/<source>`.
    Webhook,
    /// Fetched by `recover` from the provider's API, over TLS with the operator's key.
    Api,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Webhook => "webhook",
            Origin::Api => "api",
        }
    }
}

/// An event's version under ordering: a number or text. Versions compare only within one
/// kind (numbers with numbers, text with text), as SQLite compares its values; each backend
/// stores them so (SQLite in one dynamically typed column, PostgreSQL in two).
#[derive(Debug, Clone, PartialEq)]
pub enum Version {
    Integer(i64),
    Real(f64),
    Text(String),
}

/// The idempotency key of one event at one target: derived from the identity, so it is the
/// same on every attempt, replay and restart, and even if the identity row was pruned and
/// the provider sends the event once more.
pub fn idempotency_key(source: &str, account: &str, event_id: &str, target: &str) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for part in [source, account, event_id, target] {
        // Length-prefixed, so that no two different tuples hash the same bytes.
        ctx.update(&(part.len() as u64).to_be_bytes());
        ctx.update(part.as_bytes());
    }
    format!("hk_{}", hex::encode(&ctx.finish().as_ref()[..16]))
}

/// A body's SHA-256.
pub type Digest = [u8; 32];

/// A body's SHA-256: what the inbox stores (as hex) and a retry is compared by.
pub fn digest(body: &[u8]) -> Digest {
    let mut d = [0; 32];
    d.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, body).as_ref());
    d
}

/// A body with its SHA-256, computed once: the receive path compares it with the recent
/// identities before it builds the event. Only [`Hashed::new`] makes one, so the digest is
/// always the body's.
pub struct Hashed {
    body: Bytes,
    digest: Digest,
}

impl Hashed {
    pub fn new(body: Bytes) -> Hashed {
        let digest = digest(&body);
        Hashed { body, digest }
    }

    pub fn digest(&self) -> &Digest {
        &self.digest
    }
}

/// The event to store for `source` (its name and account as shared text): one delivery per
/// target under its idempotency key, and the order key where ordering is on. The receive
/// path and recovery build their events here, so that an event fetched from an API is
/// keyed and ordered exactly as its webhook would have been.
pub fn new_event(
    source: &Source,
    (name, account): (Arc<str>, Arc<str>),
    identity: Identity,
    Hashed { body, digest }: Hashed,
    headers: String,
    remote_addr: String,
    origin: Origin,
) -> NewEvent {
    let event_id = identity.event_id;
    NewEvent {
        sha256_hex: hex::encode(digest),
        body_is_text: std::str::from_utf8(&body).is_ok(),
        headers,
        event_type: identity.event_type,
        provider_time: identity.provider_time,
        deliveries: source
            .targets
            .iter()
            .map(|t| {
                let key = idempotency_key(&name, &account, &event_id, &t.name);
                (t.name.clone(), key)
            })
            .collect(),
        order: source.order.as_ref().and_then(|order| {
            let key = order_key(order, &body);
            if key.is_none() {
                tracing::warn!(source = %name, event_id, "ordering: no key or version \
                    at the configured pointers; this event is delivered without ordering");
            }
            key
        }),
        source: name,
        account,
        event_id,
        remote_addr,
        origin,
        bookkeeping: source.scheme.verifier().bookkeeping(),
        body,
        memory: None,
    }
}

impl NewEvent {
    /// A notification of hookinbox's own (an alert) as an event of the internal `source`,
    /// with a JSON `body`, for each of `targets` under its idempotency key. Its `event_id`
    /// is what makes a notification stored twice one event, delivered once.
    pub fn notification(
        source: &str,
        event_id: String,
        event_type: String,
        body: Vec<u8>,
        targets: &[String],
    ) -> NewEvent {
        NewEvent {
            source: source.into(),
            account: "".into(),
            sha256_hex: hex::encode(digest(&body)),
            body: body.into(),
            body_is_text: true,
            headers: r#"[["content-type","application/json"]]"#.into(),
            event_type: Some(event_type),
            provider_time: None,
            deliveries: targets
                .iter()
                .map(|t| (t.clone(), idempotency_key(source, "", &event_id, t)))
                .collect(),
            event_id,
            order: None,
            remote_addr: "hookinbox".into(),
            origin: Origin::Webhook,
            bookkeeping: &[],
            memory: None,
        }
    }
}

/// The longest order key stored as it is (see [`order_key`]).
const MAX_ORDER_KEY_LEN: usize = 256;

/// The order key and version of a body, when both are at their pointers. A key is text
/// (a number keeps its exact text); a version is a number or text, compared as SQLite does.
fn order_key(order: &Order, body: &[u8]) -> Option<(String, Version)> {
    use crate::scheme::json::{self, Field};
    let key = match json::field(body, &order.key).ok()?? {
        Field::Text(s) => s,
        Field::Number(n) => n.to_owned(),
        Field::Other => return None,
    };
    // A key is indexed: one far longer than an id stands for itself by its hash, as
    // PostgreSQL's index entries cannot hold more than about 2.7 KB (equal keys still
    // have equal hashes, so the order is the same).
    let key = if key.len() > MAX_ORDER_KEY_LEN {
        format!(
            "sha256:{}",
            hex::encode(ring::digest::digest(&ring::digest::SHA256, key.as_bytes()))
        )
    } else {
        key
    };
    // A string of digits is a number ("10" after "9"), as providers often send int64
    // versions as strings; other text (ISO times) compares as text.
    let version = match json::field(body, &order.version).ok()?? {
        Field::Text(s) => match s.parse::<i64>() {
            Ok(i) => Version::Integer(i),
            Err(_) => Version::Text(s),
        },
        Field::Number(n) => match n.parse::<i64>() {
            Ok(i) => Version::Integer(i),
            Err(_) => Version::Real(n.parse::<f64>().ok()?),
        },
        Field::Other => return None,
    };
    Some((key, version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idempotency_keys_are_stable_and_distinct() {
        let a = idempotency_key("stripe", "", "evt_1", "app");
        assert_eq!(a, idempotency_key("stripe", "", "evt_1", "app"));
        assert_ne!(a, idempotency_key("stripe", "", "evt_1", "audit"));
        assert_ne!(
            idempotency_key("ab", "c", "e", "t"),
            idempotency_key("a", "bc", "e", "t")
        );
        assert_eq!(a.len(), 3 + 32);
    }

    #[test]
    fn an_order_key_longer_than_an_id_is_kept_by_its_hash() {
        let order = Order {
            key: "/k".into(),
            version: "/v".into(),
        };
        let short = br#"{"k":"cus_1","v":"7"}"#;
        assert_eq!(
            order_key(&order, short),
            Some(("cus_1".into(), Version::Integer(7)))
        );
        let long = format!(r#"{{"k":"{}","v":1}}"#, "x".repeat(5000));
        let other = format!(r#"{{"k":"{}y","v":2}}"#, "x".repeat(5000));
        let (a, _) = order_key(&order, long.as_bytes()).unwrap();
        let (b, _) = order_key(&order, other.as_bytes()).unwrap();
        assert!(a.starts_with("sha256:") && a.len() == 7 + 64, "{a}");
        assert_ne!(a, b);
        assert_eq!(a, order_key(&order, long.as_bytes()).unwrap().0);
    }
}
