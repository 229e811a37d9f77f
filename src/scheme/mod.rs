//! Signature schemes: one module per provider family, each a pure function from
//! (headers, raw body, keys, now) to a verdict.
//!
//! Invariant: nothing here parses, logs or copies the body before its signature has been
//! checked over the exact raw bytes, and every comparison of a secret-derived value goes
//! through `ring::hmac::verify` (constant time). A [`Reject`] carries the precise reason for
//! the log and the metrics; the HTTP answer built from it stays generic.

pub mod github;
pub mod gitlab;
pub mod hmac;
pub mod json;
pub mod shopify;
pub mod slack;
pub mod standard_webhooks;
pub mod stripe;

use std::time::Duration;

use hyper::http::{HeaderMap, HeaderName, HeaderValue};
use ring::hmac as mac;

use crate::secret::Secret;

/// The longest event id we store. Provider ids are short (Stripe `evt_…` ~30 bytes, GitHub
/// GUIDs 36); anything far longer is not an id but an attack on the index.
pub const MAX_EVENT_ID_LEN: usize = 256;

/// The most signatures one header may carry. Each costs an HMAC over the whole body per
/// secret, so a header stuffed with thousands of entries would multiply the work; providers
/// send one per active secret (two during a rotation).
pub const MAX_SIGNATURES: usize = 8;

/// The default replay window where a scheme signs a timestamp: the 5 minutes that the
/// official Standard Webhooks, Stripe and Slack libraries all use.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

/// What one request looks like to a scheme.
pub struct Input<'a> {
    pub headers: &'a HeaderMap,
    pub body: &'a [u8],
    /// Unix seconds, passed in so that verification stays a pure function.
    pub now: i64,
}

/// Why a request was refused. The first group answers 401, the second 400.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Reject {
    #[error("missing header {0}")]
    MissingHeader(&'static str),
    #[error("malformed header {0}")]
    MalformedHeader(&'static str),
    #[error("no signature matched any configured secret")]
    NoMatch,
    #[error("timestamp older than the tolerance")]
    TooOld,
    #[error("timestamp further in the future than the tolerance")]
    TooNew,
    #[error("no event id: {0}")]
    NoEventId(&'static str),
    #[error("body is not what the scheme requires: {0}")]
    BadBody(&'static str),
}

impl Reject {
    /// A short, stable label for metrics and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            Reject::MissingHeader(_) => "missing_header",
            Reject::MalformedHeader(_) => "malformed_header",
            Reject::NoMatch => "no_match",
            Reject::TooOld => "timestamp_too_old",
            Reject::TooNew => "timestamp_too_new",
            Reject::NoEventId(_) => "no_event_id",
            Reject::BadBody(_) => "bad_body",
        }
    }

    /// True when the request failed authentication (401); false when it was authentic but
    /// unusable (400).
    pub fn is_auth(&self) -> bool {
        !matches!(self, Reject::NoEventId(_) | Reject::BadBody(_))
    }
}

/// A verified request: either an event to store, or a provider handshake to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Event(Identity),
    /// Answered with this JSON body and never stored (Slack's `url_verification`).
    Handshake(Vec<u8>),
}

/// What the scheme learned about a verified event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub event_id: String,
    /// The provider's signed timestamp (unix seconds), where the scheme has one.
    pub provider_time: Option<i64>,
    /// The provider's event type (`X-GitHub-Event`, Stripe's `type`, …), where known.
    pub event_type: Option<String>,
}

/// Where to find the event id when a source overrides the scheme's default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdRule {
    Header(HeaderName),
    /// An RFC 6901 JSON pointer into the body, e.g. `/id`.
    Pointer(String),
}

/// The signature kinds hookinbox knows, with their scheme-specific settings.
#[derive(Debug, Clone)]
pub enum Kind {
    StandardWebhooks,
    Stripe,
    Github,
    Shopify,
    Slack,
    Gitlab,
    Hmac(hmac::Spec),
}

impl Kind {
    /// The name used in configuration files.
    pub fn name(&self) -> &'static str {
        match self {
            Kind::StandardWebhooks => "standard-webhooks",
            Kind::Stripe => "stripe",
            Kind::Github => "github",
            Kind::Shopify => "shopify",
            Kind::Slack => "slack",
            Kind::Gitlab => "gitlab",
            Kind::Hmac(_) => "hmac",
        }
    }

    /// Whether this kind signs a timestamp, so that `tolerance` means something.
    pub fn signs_timestamp(&self) -> bool {
        match self {
            Kind::StandardWebhooks | Kind::Stripe | Kind::Slack => true,
            Kind::Hmac(spec) => spec.timestamp_header.is_some(),
            Kind::Github | Kind::Shopify | Kind::Gitlab => false,
        }
    }

    /// The headers that carry a secret itself rather than a signature over the body. They
    /// are never stored or forwarded.
    pub fn secret_headers(&self) -> &'static [&'static str] {
        match self {
            Kind::Gitlab => &[gitlab::TOKEN_HEADER],
            _ => &[],
        }
    }
}

/// A configured scheme with its keys prepared once at start-up.
#[derive(Debug)]
pub struct Scheme {
    kind: Kind,
    keys: Vec<mac::Key>,
    /// The secrets as configured, kept for `sign` (tests and the `sign` subcommand).
    secrets: Vec<Secret>,
    tolerance: Duration,
    id: Option<IdRule>,
}

impl Scheme {
    /// Prepares the keys for `kind`. Fails with a message naming the problem when a secret
    /// cannot be used (for example a `whsec_` secret that is not base64).
    pub fn new(
        kind: Kind,
        secrets: Vec<Secret>,
        tolerance: Duration,
        id: Option<IdRule>,
    ) -> Result<Scheme, String> {
        if secrets.is_empty() {
            return Err("at least one secret is required".into());
        }
        let keys = secrets
            .iter()
            .map(|s| key_for(&kind, s))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Scheme {
            kind,
            keys,
            secrets,
            tolerance,
            id,
        })
    }

    pub fn kind(&self) -> &Kind {
        &self.kind
    }

    pub fn tolerance(&self) -> Duration {
        self.tolerance
    }

    /// Checks the request and extracts its identity.
    pub fn verify(&self, input: &Input) -> Result<Verdict, Reject> {
        let ctx = Ctx {
            keys: &self.keys,
            tolerance: i64::try_from(self.tolerance.as_secs()).unwrap_or(i64::MAX),
            id: self.id.as_ref(),
        };
        match &self.kind {
            Kind::StandardWebhooks => standard_webhooks::verify(input, &ctx),
            Kind::Stripe => stripe::verify(input, &ctx),
            Kind::Github => github::verify(input, &ctx),
            Kind::Shopify => shopify::verify(input, &ctx),
            Kind::Slack => slack::verify(input, &ctx),
            Kind::Gitlab => gitlab::verify(input, &ctx),
            Kind::Hmac(spec) => hmac::verify(spec, input, &ctx),
        }
    }

    /// The headers of a correctly signed request for `body`, signed with the first secret.
    /// `id` is the event id for schemes that carry it in a header; schemes that read it from
    /// the body ignore it.
    pub fn sign(&self, body: &[u8], id: &str, now: i64) -> Vec<(HeaderName, HeaderValue)> {
        let key = &self.keys[0];
        let secret = &self.secrets[0];
        match &self.kind {
            Kind::StandardWebhooks => standard_webhooks::sign(key, body, id, now),
            Kind::Stripe => stripe::sign(key, body, now),
            Kind::Github => github::sign(key, body, id),
            Kind::Shopify => shopify::sign(key, body, id, self.id_header()),
            Kind::Slack => slack::sign(key, body, now),
            Kind::Gitlab => gitlab::sign(secret, id, self.id_header()),
            Kind::Hmac(spec) => hmac::sign(spec, key, body, id, now, self.id_header()),
        }
    }

    fn id_header(&self) -> Option<&HeaderName> {
        match &self.id {
            Some(IdRule::Header(h)) => Some(h),
            _ => None,
        }
    }
}

/// The prepared key for one secret: the bytes each scheme keys its HMAC with.
fn key_for(kind: &Kind, secret: &Secret) -> Result<mac::Key, String> {
    Ok(match kind {
        Kind::StandardWebhooks => {
            mac::Key::new(mac::HMAC_SHA256, &standard_webhooks::decode_secret(secret)?)
        }
        Kind::Hmac(spec) => mac::Key::new(spec.algorithm.ring(), secret.expose()),
        // GitLab sends the shared token itself. Keyed with the token, this key MACs a fixed
        // message that `gitlab::verify` also MACs under the presented token: equal tags mean
        // equal tokens, and `hmac::verify` compares them in constant time.
        Kind::Gitlab => mac::Key::new(mac::HMAC_SHA256, secret.expose()),
        Kind::Stripe | Kind::Github | Kind::Shopify | Kind::Slack => {
            mac::Key::new(mac::HMAC_SHA256, secret.expose())
        }
    })
}

/// What a scheme's `verify` needs besides the request.
pub struct Ctx<'a> {
    pub keys: &'a [mac::Key],
    /// Seconds; where the scheme signs a timestamp, |now − ts| must not exceed it.
    pub tolerance: i64,
    pub id: Option<&'a IdRule>,
}

impl Ctx<'_> {
    /// True when `tag` is the MAC of `msg` under any configured key (rotation).
    pub fn any_key_matches(&self, msg: &[u8], tag: &[u8]) -> bool {
        self.keys.iter().any(|k| mac::verify(k, msg, tag).is_ok())
    }

    /// Checks a signed timestamp against the window, in both directions: a timestamp from
    /// the future is as suspicious as a stale one, and providers' clocks are NTP-synced.
    pub fn check_time(&self, ts: i64, now: i64) -> Result<(), Reject> {
        if now.saturating_sub(ts) > self.tolerance {
            Err(Reject::TooOld)
        } else if ts.saturating_sub(now) > self.tolerance {
            Err(Reject::TooNew)
        } else {
            Ok(())
        }
    }

    /// The event id: the source's override if it has one, else the scheme's default rule.
    pub fn event_id(&self, input: &Input, default: &IdRule) -> Result<String, Reject> {
        event_id(input, self.id.unwrap_or(default))
    }
}

/// One header as text. Missing → `MissingHeader`; present twice or not visible ASCII →
/// `MalformedHeader` (two signature headers are ambiguous, so neither is believed).
pub fn header<'a>(headers: &'a HeaderMap, name: &'static str) -> Result<&'a str, Reject> {
    header_as(headers, name, name)
}

/// [`header`] for a configured name, which cannot be the `'static` label of a [`Reject`]:
/// `label` names it in the reason instead.
pub fn header_as<'a>(
    headers: &'a HeaderMap,
    name: &str,
    label: &'static str,
) -> Result<&'a str, Reject> {
    let mut values = headers.get_all(name).iter();
    let first = values.next().ok_or(Reject::MissingHeader(label))?;
    if values.next().is_some() {
        return Err(Reject::MalformedHeader(label));
    }
    first.to_str().map_err(|_| Reject::MalformedHeader(label))
}

/// A unix-seconds timestamp header value.
pub fn parse_timestamp(value: &str, name: &'static str) -> Result<i64, Reject> {
    let v = value.trim();
    if v.is_empty() || v.len() > 12 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Reject::MalformedHeader(name));
    }
    v.parse().map_err(|_| Reject::MalformedHeader(name))
}

/// Extracts the event id by `rule`, and checks that it is a sane id.
pub fn event_id(input: &Input, rule: &IdRule) -> Result<String, Reject> {
    let id = match rule {
        IdRule::Header(name) => {
            let mut values = input.headers.get_all(name).iter();
            let v = values
                .next()
                .ok_or(Reject::NoEventId("id header missing"))?;
            if values.next().is_some() {
                return Err(Reject::NoEventId("id header present twice"));
            }
            v.to_str()
                .map_err(|_| Reject::NoEventId("id header is not text"))?
                .trim()
                .to_owned()
        }
        IdRule::Pointer(pointer) => match json::field(input.body, pointer) {
            Err(json::NotJson) => {
                return Err(Reject::BadBody(
                    "body is not JSON, so the event id cannot be read",
                ));
            }
            Ok(None) => return Err(Reject::NoEventId("nothing at the id pointer")),
            Ok(Some(field)) => field.text_or_integer().ok_or(Reject::NoEventId(
                "the id pointer names neither a string nor an integer",
            ))?,
        },
    };
    check_id(id)
}

/// An id must be non-empty, bounded and free of control characters, so it is safe in logs,
/// terminals and file names.
pub fn check_id(id: String) -> Result<String, Reject> {
    if id.is_empty() {
        return Err(Reject::NoEventId("empty event id"));
    }
    if id.len() > MAX_EVENT_ID_LEN {
        return Err(Reject::NoEventId("event id too long"));
    }
    if id.chars().any(char::is_control) {
        return Err(Reject::NoEventId("event id has control characters"));
    }
    Ok(id)
}

/// A string field at `pointer` of a JSON body, for event types; absent, not a string or not
/// JSON is simply unknown.
pub fn json_str(body: &[u8], pointer: &str) -> Option<String> {
    json::text(body, pointer).map(|s| informational(&s))
}

/// An optional header as text, for informational fields such as the event type.
pub fn optional_header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(informational)
}

/// The longest informational field (an event type) kept, in characters.
pub const MAX_INFO_CHARS: usize = 200;

/// Provider text kept beside the event rather than in its signed bytes (the event type),
/// shortened. It is kept as sent, control characters included: whoever shows it escapes it
/// for where it goes (`terminal::escape`, a command's environment).
fn informational(s: &str) -> String {
    s.chars().take(MAX_INFO_CHARS).collect()
}

/// Builds a header map for the schemes' unit tests.
#[cfg(test)]
pub(crate) fn test_headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}
