//! Signature schemes: one module per provider, each a pure function from (request parts, raw
//! body, keys, now) to a [`Verdict`], listed once in [`providers::PROVIDERS`].
//!
//! Invariant: nothing here parses, logs or copies the body before its signature has been
//! checked over the exact raw bytes (a handshake that the provider does not sign is matched
//! by its shape only, and answered without storing anything), and every comparison of a
//! secret-derived value is constant time (`ring::hmac::verify`, or [`keys::same_token`]).
//! A [`Reject`] carries the precise reason for the log and the metrics; the HTTP answer built
//! from it stays generic.
//!
//! A provider is one module: a `PROVIDER` constant whose `build` reads the source's settings
//! (its own keys beside the common ones, through [`Setup`]), prepares its keys, and returns a
//! [`Verifier`]. The verifier owns everything scheme-specific: the check, the handshakes, the
//! default identity rule, the redelivery horizon `check` warns about, and the signer behind
//! `hookinbox sign`. What holds before any source is configured (public keys, a secret
//! learnt in a handshake, a recovery API) the `PROVIDER` declares.

pub mod hmac;
pub mod json;
pub mod keys;
pub mod providers;
pub mod setup;
pub mod template;
pub mod token;

use std::fmt;
use std::time::Duration;

use hyper::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};

pub use providers::{PROVIDERS, Provider};
pub use setup::Setup;

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

/// Only POST, what nearly every provider sends.
pub const POST: &[Method] = &[Method::POST];

/// What one request looks like to a scheme.
pub struct Input<'a> {
    pub method: &'a Method,
    /// The path as received, e.g. `/hooks/stripe`.
    pub path: &'a str,
    /// The raw query string after `?`, if any.
    pub query: Option<&'a str>,
    pub headers: &'a HeaderMap,
    pub body: &'a [u8],
    /// Unix seconds, passed in so that verification stays a pure function.
    pub now: i64,
}

impl<'a> Input<'a> {
    /// A POST without a query, as most providers send.
    pub fn post(headers: &'a HeaderMap, body: &'a [u8], now: i64) -> Input<'a> {
        Input {
            method: &Method::POST,
            path: "/hooks/test",
            query: None,
            headers,
            body,
            now,
        }
    }

    /// The first value of query parameter `name`, percent-decoded.
    pub fn query_param(&self, name: &str) -> Option<String> {
        form_urlencoded::parse(self.query?.as_bytes())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    }
}

/// Why a request was refused. The first group answers 401, the second 400.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Reject {
    #[error("missing header {0}")]
    MissingHeader(&'static str),
    #[error("malformed header {0}")]
    MalformedHeader(&'static str),
    /// More signatures in one header than [`MAX_SIGNATURES`]: each costs a comparison, and
    /// no provider sends that many.
    #[error("header {0} carries more than 8 signatures (providers send one per active secret)")]
    TooManySignatures(&'static str),
    #[error("no signature matched any configured secret")]
    NoMatch,
    #[error("timestamp older than the tolerance")]
    TooOld,
    #[error("timestamp further in the future than the tolerance")]
    TooNew,
    /// A handshake whose token does not match the configured one (Meta's `hub.verify_token`).
    #[error("handshake token does not match")]
    BadToken,
    /// A handshake that would teach the source its secret, with no window open.
    #[error("a handshake offered a secret but no window is open (run hookinbox arm)")]
    NotArmed,

    #[error("no event id: {0}")]
    NoEventId(&'static str),
    #[error("body is not what the scheme requires: {0}")]
    BadBody(&'static str),
}

impl Reject {
    /// The [`Reject::reason`] of every refusal that [`Reject::is_auth`]: the reasons
    /// `hookinbox_signature_failures_total` counts, from zero for every source.
    pub const AUTH_REASONS: [&'static str; 7] = [
        "missing_header",
        "malformed_header",
        "no_match",
        "timestamp_too_old",
        "timestamp_too_new",
        "bad_token",
        "not_armed",
    ];

    /// A short, stable label for metrics and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            Reject::MissingHeader(_) => "missing_header",
            Reject::MalformedHeader(_) | Reject::TooManySignatures(_) => "malformed_header",
            Reject::NoMatch => "no_match",
            Reject::TooOld => "timestamp_too_old",
            Reject::TooNew => "timestamp_too_new",
            Reject::BadToken => "bad_token",
            Reject::NotArmed => "not_armed",

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
    /// Answered with its reply and never stored.
    Handshake(Handshake),
}

/// A provider's handshake (a challenge, a ping, a subscription check) and the answer its
/// protocol requires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handshake {
    /// A short label for the metrics and the log: `url_verification`, `challenge`, `ping`.
    pub kind: &'static str,
    pub reply: Reply,
    /// What must be done before the reply may be sent.
    pub action: Option<Action>,
}

/// A handshake's side effect, done by the receive path before it answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Store the secret the handshake hands over (Asana's `X-Hook-Secret`), if the source's
    /// window is open (`hookinbox arm`); refuse the handshake otherwise.
    Learn(Learnt),
    /// Confirm a subscription with a GET of this URL (Amazon SNS's `SubscribeURL`, its host
    /// already checked); answer 503 if that fails, so that the provider asks again.
    Confirm(String),
}

/// A secret learnt from a handshake. Compared in constant time, never printed.
#[derive(Debug, Clone)]
pub struct Learnt(pub crate::secret::Secret);

impl PartialEq for Learnt {
    fn eq(&self, other: &Learnt) -> bool {
        keys::same_token(&self.0, other.0.expose())
    }
}

impl Eq for Learnt {}

/// The full answer to a handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: StatusCode,
    /// `None` for an empty answer (204).
    pub content_type: Option<&'static str>,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub body: Vec<u8>,
}

impl Reply {
    /// 200 with a JSON body.
    pub fn json(value: &serde_json::Value) -> Reply {
        Reply {
            status: StatusCode::OK,
            content_type: Some("application/json"),
            headers: Vec::new(),
            body: value.to_string().into_bytes(),
        }
    }

    /// 200 `text/plain` with the text exactly as given (a challenge echoed back), as
    /// Twitch, Dropbox and Microsoft Graph ask for it; `nosniff`, since some of those
    /// challenges are echoed to anyone and must never be read as HTML.
    pub fn text(body: impl Into<Vec<u8>>) -> Reply {
        Reply {
            status: StatusCode::OK,
            content_type: Some("text/plain"),
            headers: vec![(
                HeaderName::from_static("x-content-type-options"),
                HeaderValue::from_static("nosniff"),
            )],
            body: body.into(),
        }
    }

    /// An answer with no body.
    pub fn empty(status: StatusCode) -> Reply {
        Reply {
            status,
            content_type: None,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    pub fn with_header(mut self, name: &'static str, value: HeaderValue) -> Reply {
        self.headers.push((HeaderName::from_static(name), value));
        self
    }
}

impl Handshake {
    pub fn verdict(kind: &'static str, reply: Reply) -> Result<Verdict, Reject> {
        Ok(Verdict::Handshake(Handshake {
            kind,
            reply,
            action: None,
        }))
    }
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

/// Where an event's id comes from: a scheme's default, or the source's override.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdRule {
    Header(HeaderName),
    /// An RFC 6901 JSON pointer into the body, e.g. `/id`.
    Pointer(String),
    /// Several parts joined with `:`, for providers whose id is a combination
    /// (Calendly: the event and its time).
    Composite(Vec<IdRule>),
    /// A batch: the ids of every element of the array at `array` (a pointer; `""` is the
    /// body itself), each at `id` inside its element, joined with `,` (hashed when long).
    Each {
        array: String,
        id: String,
    },
    /// `sha256:` and the hex SHA-256 of the body, for providers that send no id at all: a
    /// retry is a duplicate only if it repeats the bytes exactly.
    BodySha256,
    /// The first of these rules that finds an id (GitLab: `Idempotency-Key`, else the older
    /// `X-Gitlab-Event-UUID`).
    FirstOf(Vec<IdRule>),
}

impl IdRule {
    pub fn pointer(p: &str) -> IdRule {
        IdRule::Pointer(p.to_owned())
    }

    pub fn header(name: &'static str) -> IdRule {
        IdRule::Header(HeaderName::from_static(name))
    }

    /// Every header the rule reads, at any depth: none of them is covered by a signature.
    pub fn headers(&self) -> Vec<&HeaderName> {
        match self {
            IdRule::Header(h) => vec![h],
            IdRule::Composite(rules) | IdRule::FirstOf(rules) => {
                rules.iter().flat_map(IdRule::headers).collect()
            }
            IdRule::Pointer(_) | IdRule::Each { .. } | IdRule::BodySha256 => Vec::new(),
        }
    }

    /// The header a signed sample carries its id in, where the rule reads one.
    pub fn sample_header(&self) -> Option<&HeaderName> {
        match self {
            IdRule::Header(h) => Some(h),
            IdRule::FirstOf(rules) => rules.first().and_then(IdRule::sample_header),
            _ => None,
        }
    }

    /// How the rule reads in `check` and the docs.
    pub fn describe(&self) -> String {
        match self {
            IdRule::Header(h) => format!("header {h}"),
            IdRule::Pointer(p) => format!("body {p}"),
            IdRule::Composite(parts) => {
                let parts: Vec<String> = parts.iter().map(IdRule::describe).collect();
                parts.join(" + ")
            }
            IdRule::Each { array, id } => format!("every {array}/*{id}, joined"),
            IdRule::BodySha256 => "SHA-256 of the body".into(),
            IdRule::FirstOf(rules) => {
                let rules: Vec<String> = rules.iter().map(IdRule::describe).collect();
                rules.join(", else ")
            }
        }
    }
}

/// How long after an event its provider may still send it again, with why, for `check`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Horizon {
    pub within: Duration,
    pub why: &'static str,
}

impl Horizon {
    pub const fn days(days: u64, why: &'static str) -> Option<Horizon> {
        Some(Horizon {
            within: Duration::from_secs(days * 86_400),
            why,
        })
    }
}

/// A request as its provider would send it, made by `hookinbox sign` and the tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    pub method: Method,
    /// The query string to send, without `?`.
    pub query: Option<String>,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub body: Vec<u8>,
}

impl Sample {
    pub fn post(headers: Vec<(HeaderName, HeaderValue)>, body: &[u8]) -> Sample {
        Sample {
            method: Method::POST,
            query: None,
            headers,
            body: body.to_vec(),
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.as_str().eq_ignore_ascii_case(name))
            .and_then(|(_, v)| v.to_str().ok())
    }
}

/// What a request to sign is about.
pub struct Draft<'a> {
    pub body: &'a [u8],
    /// The event id, for schemes that carry it in a header; schemes that read it from the
    /// body ignore it.
    pub id: &'a str,
    pub now: i64,
    /// Where the request goes, `/hooks/<source>`.
    pub path: &'a str,
    /// The private key for schemes verified with public keys (`hookinbox sign
    /// --signing-key`); a source's configuration holds only the public half.
    pub signing_key: Option<&'a crate::secret::Secret>,
}

/// One provider's checks, built from a source's configuration by its [`Provider`].
pub trait Verifier: Send + Sync + fmt::Debug {
    /// Checks one request and extracts its identity, or answers its handshake.
    fn verify(&self, input: &Input, ctx: &Ctx) -> Result<Verdict, Reject>;

    /// A correctly signed request carrying `draft`, as the provider would send it.
    fn sign(&self, draft: &Draft) -> Sample;

    /// The provider's handshake request, for `hookinbox sign --handshake`; `None` when the
    /// provider has none.
    fn sign_handshake(&self, _draft: &Draft) -> Option<Sample> {
        None
    }

    /// The body `hookinbox sign` sends when none is given, in the provider's shape, sent
    /// at `now`.
    fn demo_body(&self, id: &str, _now: i64) -> Vec<u8> {
        demo_body(id)
    }

    /// The URL of a key the request names and the receive path must fetch before `verify`
    /// (Amazon SNS's `SigningCertURL`), checked against where the provider keeps its keys.
    /// The receive path fetches it, turns it into a key with [`Verifier::parse_key`], caches
    /// it, and hands it over in [`Ctx::fetched`].
    fn key_url(&self, _input: &Input) -> Result<Option<String>, Reject> {
        Ok(None)
    }

    /// The key in a fetched document (a certificate), checked at `now`.
    fn parse_key(&self, _fetched: &[u8], _now: i64) -> Result<Vec<u8>, String> {
        Err("this scheme fetches no keys".into())
    }

    /// Whether signing needs [`Draft::signing_key`]: the source holds public keys only.
    fn needs_signing_key(&self) -> bool {
        false
    }

    /// The methods the provider sends (handshakes included).
    fn methods(&self) -> &'static [Method] {
        POST
    }

    /// Whether a timestamp is signed, so that `tolerance` means something.
    fn signs_timestamp(&self) -> bool {
        false
    }

    /// Whether the default id is authenticated (a signed header or the signed body), so that
    /// an `id_header` override, which is not, would weaken it.
    fn signs_id(&self) -> bool {
        false
    }

    /// Whether the proof covers every byte of the body: not where it covers only some of
    /// its fields (SNS), nor where nothing of the body is signed (a token or Basic
    /// credentials sent as they are, Microsoft Graph's `clientState`, Mailgun's signed
    /// timestamp and token).
    fn signs_whole_body(&self) -> bool {
        true
    }

    /// The id rule when the source sets none; `None` when the source must set one.
    fn default_id(&self) -> Option<IdRule>;

    /// Headers that carry a secret itself rather than a signature: never stored or forwarded.
    fn secret_headers(&self) -> &[HeaderName] {
        &[]
    }

    /// What to answer once the event is committed, where the provider's protocol wants more
    /// than a 200 (Discord's deferred interaction); `None`: the plain `accepted`.
    fn stored_reply(&self, _input: &Input) -> Option<Reply> {
        None
    }

    /// The replay window when the source sets no `tolerance`.
    fn default_tolerance(&self) -> Duration {
        DEFAULT_TOLERANCE
    }

    /// How long the provider may redeliver an event, for `check`.
    fn redelivery(&self) -> Option<Horizon> {
        None
    }

    /// Top-level members of an event's JSON that record its delivery rather than the event
    /// (Stripe's `pending_webhooks` counts down as endpoints answer), so that an event
    /// fetched from the API and its webhook compare as the same event (`recover`).
    fn bookkeeping(&self) -> &'static [&'static str] {
        &[]
    }

    /// Holes in the provider's protocol that `check` should name.
    fn caveats(&self) -> Vec<String> {
        Vec::new()
    }
}

/// The body sent when none is given: carries the id where schemes read it from the body
/// (Stripe `/id`, Slack `/event_id`).
pub fn demo_body(id: &str) -> Vec<u8> {
    format!(
        r#"{{"id":"{id}","event_id":"{id}","type":"hookinbox.test","data":{{"hello":"world"}}}}"#
    )
    .into_bytes()
}

/// A configured scheme: the provider's verifier and the source's common rules.
#[derive(Debug)]
pub struct Scheme {
    provider: &'static Provider,
    verifier: Box<dyn Verifier>,
    tolerance: Duration,
    id: Option<IdRule>,
}

impl Scheme {
    /// Builds `setup`'s scheme and checks the source's common rules against it: a tolerance
    /// only where a timestamp is signed, no unsigned id header over a signed id, an id rule
    /// where the provider has none.
    pub fn build(
        mut setup: Setup,
        tolerance: Option<Duration>,
        id: Option<IdRule>,
    ) -> Result<Scheme, String> {
        let provider = providers::find(setup.scheme()).ok_or_else(|| {
            format!(
                "{}.scheme {:?} is unknown; use one of {}",
                setup.at(),
                setup.scheme(),
                providers::names().join(", ")
            )
        })?;
        let verifier = (provider.build)(&mut setup)?;
        setup.finish()?;
        let at = setup.at();
        if tolerance.is_some() && !verifier.signs_timestamp() {
            return Err(format!(
                "{at}.tolerance: scheme {:?} signs no timestamp, so a tolerance cannot apply",
                provider.name
            ));
        }
        // An id from an unsigned header over a signed one would let a captured request,
        // replayed with a new id, pass as a new event.
        if id.as_ref().is_some_and(|r| !r.headers().is_empty()) && verifier.signs_id() {
            return Err(format!(
                "{at}.id_header: scheme {:?} signs its own event id; an id from an unsigned \
                 header would let a replayed request pass as new (id_pointer into the signed \
                 body is allowed)",
                provider.name
            ));
        }
        // Where only some fields of the body are signed (SNS), the provider's id is one of
        // them and another pointer might not be.
        if id.is_some() && verifier.signs_id() && !verifier.signs_whole_body() {
            return Err(format!(
                "{at}: scheme {:?} signs only some fields of its body, its own event id among \
                 them; remove id_header, id_pointer and id",
                provider.name
            ));
        }
        if id.is_none() && verifier.default_id().is_none() {
            return Err(format!(
                "{at}: scheme {:?} has no standard event id; set id_header, id_pointer or id",
                provider.name
            ));
        }
        Ok(Scheme {
            provider,
            tolerance: tolerance.unwrap_or(verifier.default_tolerance()),
            verifier,
            id,
        })
    }

    /// The scheme's name in configuration files.
    pub fn name(&self) -> &'static str {
        self.provider.name
    }

    /// The provider as the registry knows it, with what it declares.
    pub fn provider(&self) -> &'static Provider {
        self.provider
    }

    pub fn tolerance(&self) -> Duration {
        self.tolerance
    }

    pub fn verifier(&self) -> &dyn Verifier {
        self.verifier.as_ref()
    }

    /// The id rule in force: the source's, else the provider's.
    pub fn id_rule(&self) -> Option<IdRule> {
        self.id.clone().or_else(|| self.verifier.default_id())
    }

    /// Checks the request and extracts its identity.
    pub fn verify(&self, input: &Input) -> Result<Verdict, Reject> {
        self.verify_with(input, None, None)
    }

    /// [`Scheme::verify`] with what the receive path holds for the source: a secret it
    /// learnt from a handshake, a key it fetched.
    pub fn verify_with(
        &self,
        input: &Input,
        learnt: Option<&crate::secret::Secret>,
        fetched: Option<&[u8]>,
    ) -> Result<Verdict, Reject> {
        let ctx = Ctx {
            tolerance: i64::try_from(self.tolerance.as_secs()).unwrap_or(i64::MAX),
            id: self.id.as_ref(),
            learnt,
            fetched,
        };
        self.verifier.verify(input, &ctx)
    }

    /// A correctly signed request for `draft`, signed with the first secret. Where the id
    /// rule in force reads a header, the id is sent there.
    pub fn sign(&self, draft: &Draft) -> Sample {
        let mut sample = self.verifier.sign(draft);
        if let Some(name) = self.id_rule().as_ref().and_then(IdRule::sample_header)
            && !sample.headers.iter().any(|(n, _)| n == name)
        {
            sample.headers.push((name.clone(), value(draft.id)));
        }
        sample
    }

    /// The provider's demo body, with `id` also where the source's `id_pointer` reads it
    /// (a generic source's id lives wherever its provider puts it).
    pub fn demo_body(&self, id: &str, now: i64) -> Vec<u8> {
        let body = self.verifier.demo_body(id, now);
        let Some(IdRule::Pointer(pointer)) = &self.id else {
            return body;
        };
        let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(&body) else {
            return body;
        };
        let mut at = &mut value;
        for token in pointer.split('/').skip(1) {
            let Some(object) = at.as_object_mut() else {
                return body;
            };
            at = object
                .entry(json::unescape(token).into_owned())
                .or_insert_with(|| serde_json::Value::Object(Default::default()));
        }
        *at = serde_json::Value::String(id.to_owned());
        value.to_string().into_bytes()
    }

    /// A POST of `body` signed at `now`, for tests.
    pub fn sign_post(&self, body: &[u8], id: &str, now: i64) -> Sample {
        self.sign(&Draft {
            body,
            id,
            now,
            path: "/hooks/test",
            signing_key: None,
        })
    }
}

/// What a verifier needs besides the request: the source's common rules.
pub struct Ctx<'a> {
    /// Seconds; where the scheme signs a timestamp, |now − ts| must not exceed it.
    pub tolerance: i64,
    /// The source's id rule, overriding the scheme's default.
    pub id: Option<&'a IdRule>,
    /// The secret the source learnt from a handshake, if its scheme learns one.
    pub learnt: Option<&'a crate::secret::Secret>,
    /// The key fetched from [`Verifier::key_url`], if the scheme names one.
    pub fetched: Option<&'a [u8]>,
}

impl Ctx<'_> {
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

    /// The event id where the scheme has no default: the source's rule is required (and
    /// checked at load, so this refuses only a request to a misbuilt scheme).
    pub fn configured_id(&self, input: &Input) -> Result<String, Reject> {
        let rule = self.id.ok_or(Reject::NoEventId("no id rule configured"))?;
        event_id(input, rule)
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

/// The part of an id rule that names one place.
fn id_part(input: &Input, rule: &IdRule) -> Result<String, Reject> {
    match rule {
        IdRule::Header(name) => {
            let mut values = input.headers.get_all(name).iter();
            let v = values
                .next()
                .ok_or(Reject::NoEventId("id header missing"))?;
            if values.next().is_some() {
                return Err(Reject::NoEventId("id header present twice"));
            }
            Ok(v.to_str()
                .map_err(|_| Reject::NoEventId("id header is not text"))?
                .trim()
                .to_owned())
        }
        IdRule::Pointer(pointer) => pointer_id(input.body, pointer),
        IdRule::Composite(parts) => {
            let parts = parts
                .iter()
                .map(|p| id_part(input, p))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(shorten(parts.join(":")))
        }
        IdRule::Each { array, id } => {
            let ids = json::each(input.body, array, id).map_err(|e| match e {
                json::EachError::NotJson => {
                    Reject::BadBody("body is not JSON, so the event ids cannot be read")
                }
                json::EachError::NotArray => {
                    Reject::NoEventId("no array of events at the id pointer")
                }
                json::EachError::Empty => Reject::NoEventId("the batch holds no events"),
                json::EachError::NoId => {
                    Reject::NoEventId("an element of the batch has no id at the pointer")
                }
            })?;
            Ok(shorten(ids.join(",")))
        }
        IdRule::FirstOf(rules) => {
            let mut last = Reject::NoEventId("no id rule");
            for rule in rules {
                match id_part(input, rule) {
                    Err(e @ Reject::NoEventId(_)) => last = e,
                    other => return other,
                }
            }
            Err(last)
        }
        IdRule::BodySha256 => Ok(format!(
            "sha256:{}",
            hex::encode(ring::digest::digest(&ring::digest::SHA256, input.body))
        )),
    }
}

fn pointer_id(body: &[u8], pointer: &str) -> Result<String, Reject> {
    match json::field(body, pointer) {
        Err(json::NotJson) => Err(Reject::BadBody(
            "body is not JSON, so the event id cannot be read",
        )),
        Ok(None) => Err(Reject::NoEventId("nothing at the id pointer")),
        Ok(Some(field)) => field.text_or_integer().ok_or(Reject::NoEventId(
            "the id pointer names neither a string nor an integer",
        )),
    }
}

/// A joined id that would not fit is kept recognisable: its start, then the SHA-256 of the
/// whole, so that the same parts always give the same id.
fn shorten(id: String) -> String {
    if id.len() <= MAX_EVENT_ID_LEN {
        return id;
    }
    const JOIN: &str = "…sha256:";
    let digest = hex::encode(ring::digest::digest(&ring::digest::SHA256, id.as_bytes()));
    let mut keep = MAX_EVENT_ID_LEN - digest.len() - JOIN.len();
    while !id.is_char_boundary(keep) {
        keep -= 1;
    }
    format!("{}{JOIN}{digest}", &id[..keep])
}

/// Extracts the event id by `rule`, and checks that it is a sane id.
pub fn event_id(input: &Input, rule: &IdRule) -> Result<String, Reject> {
    check_id(id_part(input, rule)?)
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

/// A header value from text the scheme made itself; text that cannot be a value (which a
/// configured secret or id might be) becomes `invalid`, which then fails verification.
pub fn value(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}

/// A header name from a static, lowercase name.
pub fn name(s: &'static str) -> HeaderName {
    HeaderName::from_static(s)
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

/// A scheme for unit tests: `scheme` with these secrets and settings (a TOML table body).
#[cfg(test)]
pub(crate) fn test_scheme(
    scheme: &str,
    secrets: &[&str],
    settings: &str,
    id: Option<IdRule>,
) -> Scheme {
    let settings: toml::Table = toml::from_str(settings).unwrap();
    let secrets = secrets
        .iter()
        .map(|s| crate::secret::Secret::new(*s))
        .collect();
    Scheme::build(Setup::literal(scheme, secrets, settings), None, id).unwrap()
}

#[cfg(test)]
mod id_tests {
    use super::*;

    #[test]
    fn a_long_joined_id_is_shortened_within_the_limit_and_stays_stable() {
        for n in [10usize, 24, 100, 1000] {
            let ids: Vec<String> = (0..n)
                .map(|i| format!("{:012}", 1_000_000_000 + i))
                .collect();
            let joined = shorten(ids.join(","));
            assert!(joined.len() <= MAX_EVENT_ID_LEN, "{n}: {}", joined.len());
            assert_eq!(check_id(joined.clone()).as_deref(), Ok(joined.as_str()));
            assert_eq!(shorten(ids.join(",")), joined);
        }
        // Multi-byte text is cut on a character boundary.
        let wide = "é".repeat(300);
        assert!(shorten(wide).len() <= MAX_EVENT_ID_LEN);
    }
}

#[cfg(test)]
mod reject_tests {
    use super::*;

    #[test]
    fn auth_reasons_are_the_reasons_of_every_authentication_failure() {
        let rejects = [
            Reject::MissingHeader("x"),
            Reject::MalformedHeader("x"),
            Reject::NoMatch,
            Reject::TooOld,
            Reject::TooNew,
            Reject::BadToken,
            Reject::NotArmed,
            Reject::NoEventId("x"),
            Reject::BadBody("x"),
        ];
        let auth: Vec<&str> = rejects
            .iter()
            .filter(|r| r.is_auth())
            .map(Reject::reason)
            .collect();
        assert_eq!(auth, Reject::AUTH_REASONS);
    }
}
