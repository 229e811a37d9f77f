//! The HMAC engine: the `hmac` scheme for providers without a preset, and the body of every
//! preset that is an HMAC with a particular header, template and id (Paddle, Zoom, Twitch…).
//!
//! A signature header is read one of two ways:
//!
//! - a list (the default): entries separated by `,` or ` `, each the `prefix` then the tag;
//!   PagerDuty sends one `v1=<hex>` per active secret. An entry without the prefix is some
//!   other scheme's and is skipped.
//! - `key=value` pairs (when `signature_key` is set): `t=…,v1=…` (Stripe, Calendly) or
//!   `ts=…;h1=…` (Paddle), separated by `,` or `;`, with the timestamp at `timestamp_key` and
//!   any number of signatures at `signature_key`. Other keys are skipped.
//!
//! Any one signature that matches any configured secret is enough. The timestamp, from its
//! own header or from the pairs, is unix seconds, unix milliseconds or RFC 3339, and is
//! checked against the source's tolerance before any MAC is computed.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hyper::http::{HeaderName, Method};
use ring::hmac;
use serde::Deserialize;

use super::keys::{KeyEncoding, Keys};
use super::template::{Fill, Template};
use super::{
    Ctx, Draft, Horizon, IdRule, Identity, Input, MAX_SIGNATURES, Reject, Sample, Setup, Verdict,
    Verifier,
};

/// `Reject` labels: configured header names are not `'static`.
const SIGNATURE_LABEL: &str = "signature header";
const TIMESTAMP_LABEL: &str = "timestamp";

/// The `hmac = { … }` table of a source, and the shape of every HMAC preset.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// The header that carries the signature, e.g. `X-Signature`.
    pub header: String,
    #[serde(default)]
    pub algorithm: Algorithm,
    #[serde(default)]
    pub encoding: Encoding,
    /// Text before each signature in a list, e.g. `sha256=`.
    #[serde(default)]
    pub prefix: Option<String>,
    /// The key of each signature in a `key=value` header (`v1`, `h1`); setting it reads the
    /// header as pairs.
    #[serde(default)]
    pub signature_key: Option<String>,
    /// The key of the timestamp in a `key=value` header (`t`, `ts`).
    #[serde(default)]
    pub timestamp_key: Option<String>,
    /// A header with the timestamp the provider signs.
    #[serde(default)]
    pub timestamp_header: Option<String>,
    #[serde(default)]
    pub timestamp_format: TimestampFormat,
    /// What is signed; see `template`. `{body}` by default.
    #[serde(default)]
    pub signed: Option<String>,
    /// How each secret's text becomes the key.
    #[serde(default)]
    pub key_encoding: KeyEncoding,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    Sha1,
    #[default]
    Sha256,
    Sha512,
}

impl Algorithm {
    pub fn ring(self) -> hmac::Algorithm {
        match self {
            Algorithm::Sha1 => hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY,
            Algorithm::Sha256 => hmac::HMAC_SHA256,
            Algorithm::Sha512 => hmac::HMAC_SHA512,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    #[default]
    Hex,
    Base64,
}

impl Encoding {
    /// A tag from the header; `None` when it is not in this encoding (it cannot match).
    pub fn decode(self, text: &str) -> Option<Vec<u8>> {
        match self {
            Encoding::Hex => hex::decode(text).ok(),
            Encoding::Base64 => STANDARD.decode(text).ok(),
        }
    }

    pub fn encode(self, tag: &[u8]) -> String {
        match self {
            Encoding::Hex => hex::encode(tag),
            Encoding::Base64 => STANDARD.encode(tag),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimestampFormat {
    /// Unix seconds, as digits.
    #[default]
    Unix,
    /// Unix milliseconds (HubSpot).
    UnixMs,
    /// RFC 3339, `2021-03-25T05:09:27Z` (Zendesk, Twitch).
    Rfc3339,
}

impl TimestampFormat {
    /// The timestamp in unix seconds.
    pub fn parse(self, text: &str) -> Result<i64, Reject> {
        let bad = Reject::MalformedHeader(TIMESTAMP_LABEL);
        match self {
            TimestampFormat::Unix => super::parse_timestamp(text, TIMESTAMP_LABEL),
            TimestampFormat::UnixMs => {
                let v = text.trim();
                if v.is_empty() || v.len() > 15 || !v.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad);
                }
                v.parse::<i64>().map(|ms| ms / 1000).map_err(|_| bad)
            }
            TimestampFormat::Rfc3339 => {
                time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
                    .map(|t| t.unix_timestamp())
                    .map_err(|_| bad)
            }
        }
    }

    /// How the provider writes `now`.
    pub fn format(self, now: i64) -> String {
        match self {
            TimestampFormat::Unix => now.to_string(),
            TimestampFormat::UnixMs => (now * 1000).to_string(),
            TimestampFormat::Rfc3339 => time::OffsetDateTime::from_unix_timestamp(now)
                .ok()
                .and_then(|t| {
                    t.format(&time::format_description::well_known::Rfc3339)
                        .ok()
                })
                .unwrap_or_default(),
        }
    }
}

/// How the signature header is laid out.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Layout {
    List {
        prefix: String,
    },
    Pairs {
        signature: String,
        timestamp: Option<String>,
    },
}

/// Where the timestamp is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum TimestampAt {
    Header(HeaderName),
    Pair,
}

/// A checked spec, ready to verify.
#[derive(Debug, Clone)]
pub struct Engine {
    header: HeaderName,
    layout: Layout,
    timestamp: Option<(TimestampAt, TimestampFormat)>,
    template: Template,
    algorithm: Algorithm,
    encoding: Encoding,
    public_url: Option<String>,
    keys: std::sync::Arc<Keys>,
    /// How rejections name the signature and timestamp headers.
    labels: [&'static str; 2],
}

impl Engine {
    /// Checks `spec` (errors name `{at}.hmac.<key>`) and prepares the keys.
    pub fn new(
        setup: &Setup,
        spec: &Spec,
        public_url: Option<String>,
        table: &str,
    ) -> Result<Engine, String> {
        let at = format!("{}.{table}", setup.at());
        let header_name = |key: &str, name: &str| {
            HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("{at}.{key} {name:?} is not a valid header name"))
        };
        let header = header_name("header", &spec.header)?;
        let template = Template::compile(spec.signed.as_deref().unwrap_or("{body}"))
            .map_err(|e| format!("{at}.signed: {e}"))?;
        let layout = match (&spec.signature_key, &spec.prefix) {
            (Some(_), Some(_)) => {
                return Err(format!(
                    "{at}: set prefix (a list of signatures) or signature_key (key=value \
                     pairs), not both"
                ));
            }
            (Some(key), None) => Layout::Pairs {
                signature: key.clone(),
                timestamp: spec.timestamp_key.clone(),
            },
            (None, prefix) => {
                if spec.timestamp_key.is_some() {
                    return Err(format!(
                        "{at}.timestamp_key is for key=value signature headers; set \
                         signature_key too (like \"v1\")"
                    ));
                }
                let prefix = prefix.clone().unwrap_or_default();
                if prefix.contains([',', ' ']) {
                    return Err(format!(
                        "{at}.prefix cannot contain ',' or ' ' (they separate signatures)"
                    ));
                }
                Layout::List { prefix }
            }
        };
        let timestamp = match (&spec.timestamp_header, &spec.timestamp_key) {
            (Some(_), Some(_)) => {
                return Err(format!(
                    "{at}: the timestamp is in timestamp_header or at timestamp_key, not both"
                ));
            }
            (Some(h), None) => Some((
                TimestampAt::Header(header_name("timestamp_header", h)?),
                spec.timestamp_format,
            )),
            (None, Some(_)) => Some((TimestampAt::Pair, spec.timestamp_format)),
            (None, None) => None,
        };
        match (timestamp.is_some(), template.uses_timestamp()) {
            (false, true) => {
                return Err(format!(
                    "{at}.signed uses {{timestamp}} but neither timestamp_header nor \
                     timestamp_key is set"
                ));
            }
            // A timestamp that is checked but not signed protects nothing: a replay would
            // just carry a fresh one.
            (true, false) => {
                return Err(format!(
                    "{at}: a timestamp is set but signed does not include {{timestamp}}; write \
                     what the provider signs, e.g. \"{{timestamp}}.{{body}}\""
                ));
            }
            _ => {}
        }
        if template.uses_url() && public_url.is_none() {
            return Err(format!(
                "{}: signed uses {{url}}, so set public_url to the exact URL the provider \
                 calls (hookinbox cannot learn it from Host, which the client chooses)",
                setup.at()
            ));
        }
        let encoding = spec.key_encoding;
        let keys =
            setup.keys(|s| Ok(hmac::Key::new(spec.algorithm.ring(), &encoding.decode(s)?)))?;
        Ok(Engine {
            header,
            layout,
            timestamp,
            template,
            algorithm: spec.algorithm,
            encoding: spec.encoding,
            public_url,
            keys: std::sync::Arc::new(Keys::new(keys)),
            labels: [SIGNATURE_LABEL, TIMESTAMP_LABEL],
        })
    }

    /// Names the headers in rejections, as a preset knows them (`Stripe-Signature`).
    pub fn labelled(mut self, signature: &'static str, timestamp: &'static str) -> Engine {
        self.labels = [signature, timestamp];
        self
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    pub fn signs_timestamp(&self) -> bool {
        self.timestamp.is_some()
    }

    /// Checks the signature (and the timestamp) of `input`; returns the timestamp in unix
    /// seconds, where one is signed.
    pub fn check(&self, input: &Input, ctx: &Ctx) -> Result<Option<i64>, Reject> {
        let [sig_label, ts_label] = self.labels;
        let value = super::header_as(input.headers, self.header.as_str(), sig_label)?;
        let malformed = || Reject::MalformedHeader(sig_label);
        let mut pair_ts = None;
        let candidates: Vec<&str> = match &self.layout {
            Layout::List { prefix } => value
                .split([',', ' '])
                .filter_map(|entry| entry.strip_prefix(prefix.as_str()))
                .filter(|sig| !sig.is_empty())
                .collect(),
            Layout::Pairs {
                signature,
                timestamp,
            } => {
                let mut sigs = Vec::new();
                for item in value.split([',', ';']) {
                    // An item without '=' carries nothing usable; Stripe's libraries skip it.
                    let Some((k, v)) = item.trim().split_once('=') else {
                        continue;
                    };
                    if Some(k) == timestamp.as_deref() {
                        // Two timestamps are ambiguous: which one did the signer mean?
                        if pair_ts.replace(v).is_some() {
                            return Err(malformed());
                        }
                    } else if k == signature {
                        sigs.push(v);
                    }
                }
                sigs
            }
        };
        if candidates.is_empty() {
            return Err(malformed());
        }
        if candidates.len() > MAX_SIGNATURES {
            return Err(Reject::TooManySignatures(sig_label));
        }
        let timestamp = match &self.timestamp {
            None => None,
            Some((at, format)) => {
                let text = match at {
                    TimestampAt::Header(name) => {
                        super::header_as(input.headers, name.as_str(), ts_label)?
                    }
                    TimestampAt::Pair => pair_ts.ok_or_else(malformed)?,
                };
                let ts = format
                    .parse(text)
                    .map_err(|_| Reject::MalformedHeader(ts_label))?;
                ctx.check_time(ts, input.now)?;
                Some((text, ts))
            }
        };
        let fill = Fill {
            timestamp: timestamp.map(|(text, _)| text),
            public_url: self.public_url.as_deref(),
        };
        let signed = self.template.render(input, &fill)?;
        let macs = self.keys.macs(&signed);
        let matched = candidates.iter().any(|sig| {
            self.encoding
                .decode(sig)
                .is_some_and(|tag| macs.matches(&tag))
        });
        if !matched {
            return Err(Reject::NoMatch);
        }
        Ok(timestamp.map(|(_, ts)| ts))
    }

    /// A request as the provider would send it: `method`, `query` and `headers` (the signed
    /// headers the template names, which the caller sets) plus the signature and timestamp.
    pub fn sign(
        &self,
        draft: &Draft,
        method: Method,
        query: Option<String>,
        mut headers: Vec<(HeaderName, hyper::http::HeaderValue)>,
    ) -> Sample {
        let ts = self
            .timestamp
            .as_ref()
            .map(|(_, format)| format.format(draft.now));
        // Headers the template signs that the caller did not set carry the event id: that
        // is what providers sign them for (Twitch's message id).
        for name in self.template.headers() {
            if !headers.iter().any(|(n, _)| n == name) {
                headers.push((name.clone(), super::value(draft.id)));
            }
        }
        let map: hyper::http::HeaderMap = headers.iter().cloned().collect();
        let input = Input {
            method: &method,
            path: draft.path,
            query: query.as_deref(),
            headers: &map,
            body: draft.body,
            now: draft.now,
        };
        let fill = Fill {
            timestamp: ts.as_deref(),
            public_url: self.public_url.as_deref(),
        };
        let signed = self.template.render(&input, &fill).unwrap_or_default();
        let tag = self.encoding.encode(&self.keys.sign(&signed));
        let value = match &self.layout {
            Layout::List { prefix } => format!("{prefix}{tag}"),
            Layout::Pairs {
                signature,
                timestamp,
            } => match (timestamp, &ts) {
                (Some(key), Some(ts)) => format!("{key}={ts},{signature}={tag}"),
                _ => format!("{signature}={tag}"),
            },
        };
        headers.push((self.header.clone(), super::value(&value)));
        if let (Some((TimestampAt::Header(name), _)), Some(ts)) = (&self.timestamp, &ts) {
            headers.push((name.clone(), super::value(ts)));
        }
        Sample {
            method,
            query,
            headers,
            body: draft.body.to_vec(),
        }
    }

    /// The MAC of `msg` under the first key, in hex: a computed handshake answer (Zoom).
    pub fn mac_hex(&self, msg: &[u8]) -> String {
        hex::encode(self.keys.sign(msg))
    }

    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }
}

/// Where a preset finds the event type.
#[derive(Debug, Clone, Copy)]
pub enum TypeAt {
    Header(&'static str),
    Pointer(&'static str),
}

impl TypeAt {
    pub fn read(self, input: &Input) -> Option<String> {
        match self {
            TypeAt::Header(h) => super::optional_header(input.headers, h),
            TypeAt::Pointer(p) => super::json_str(input.body, p),
        }
    }
}

/// What a preset adds to the engine: where its id and type are, what it may resend.
#[derive(Debug, Clone, Default)]
pub struct Preset {
    pub id: Option<IdRule>,
    /// The default id is covered by the signature.
    pub signs_id: bool,
    pub event_type: Option<TypeAt>,
    /// A timestamp inside the signed body (Linear's `webhookTimestamp`), checked against
    /// the tolerance like a signed header.
    pub body_timestamp: Option<(&'static str, TimestampFormat)>,
    /// The replay window the provider documents, when it is not the 5-minute default.
    pub tolerance: Option<std::time::Duration>,
    pub redelivery: Option<Horizon>,
    pub caveats: &'static [&'static str],
    /// Top-level members of the body that record the delivery, not the event (see
    /// [`crate::scheme::Verifier::bookkeeping`]).
    pub bookkeeping: &'static [&'static str],
    /// The body `hookinbox sign` sends by default, where the generic demo lacks what the
    /// provider's id rule reads.
    pub demo_body: Option<fn(&str, i64) -> Vec<u8>>,
}

impl Preset {
    /// The verified request as an event: its id by the source's rule or the preset's (the
    /// source's rule is required where the preset has none, and checked only now, so that
    /// an unauthenticated caller learns nothing about the configuration), its type.
    pub fn event(
        &self,
        input: &Input,
        ctx: &Ctx,
        provider_time: Option<i64>,
    ) -> Result<Verdict, Reject> {
        let event_id = match &self.id {
            Some(default) => ctx.event_id(input, default)?,
            None => ctx.configured_id(input)?,
        };
        Ok(Verdict::Event(Identity {
            event_id,
            provider_time,
            event_type: self.event_type.and_then(|t| t.read(input)),
        }))
    }

    pub fn caveats(&self) -> Vec<String> {
        self.caveats.iter().map(|c| (*c).to_owned()).collect()
    }
}

/// A provider's handshakes around the engine's check.
pub trait Hooks: Send + Sync + std::fmt::Debug + 'static {
    /// A handshake the provider does not sign, matched by its shape before any signature is
    /// looked for (Meta's GET, WooCommerce's ping). `None`: not a handshake.
    fn unsigned(&self, _input: &Input, _engine: &Engine) -> Option<Result<Verdict, Reject>> {
        None
    }

    /// A handshake inside a verified request (Zoom's `endpoint.url_validation`).
    fn signed(&self, _input: &Input, _engine: &Engine) -> Option<Result<Verdict, Reject>> {
        None
    }

    fn methods(&self) -> &'static [Method] {
        super::POST
    }

    /// The handshake request, for `hookinbox sign --handshake`.
    fn sign_handshake(&self, _engine: &Engine, _draft: &Draft) -> Option<Sample> {
        None
    }

    fn demo_body(&self, id: &str, _now: i64) -> Vec<u8> {
        super::demo_body(id)
    }
}

/// Builds a preset: `spec` under the provider's own header names (for rejections), with
/// `public_url` where its template signs `{url}`.
pub fn preset<H: Hooks>(
    setup: &Setup,
    spec: Spec,
    labels: [&'static str; 2],
    public_url: Option<String>,
    preset: Preset,
    hooks: H,
) -> Result<Box<dyn Verifier>, String> {
    let public_url = public_url
        .map(|u| super::setup::public_url(setup.at(), &u))
        .transpose()?;
    let engine =
        Engine::new(setup, &spec, public_url, setup.scheme())?.labelled(labels[0], labels[1]);
    Ok(Hmac::boxed(engine, preset, hooks))
}

/// The settings of a preset that signs its URL: only `public_url`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UrlSettings {
    pub public_url: Option<String>,
}

impl UrlSettings {
    /// `public_url`, required: the preset signs its URL.
    pub fn required(setup: &mut Setup) -> Result<String, String> {
        let s: UrlSettings = setup.settings()?;
        s.public_url.ok_or_else(|| {
            format!(
                "{}: scheme {:?} signs the URL it calls, so set public_url to it exactly as \
                 configured at the provider (like \"https://hooks.example.com/hooks/{}\")",
                setup.at(),
                setup.scheme(),
                setup.scheme()
            )
        })
    }
}

/// A provider without handshakes.
#[derive(Debug, Clone, Copy)]
pub struct NoHooks;

impl Hooks for NoHooks {}

/// An HMAC provider: the engine, its preset, its handshakes.
#[derive(Debug)]
pub struct Hmac<H: Hooks = NoHooks> {
    pub engine: Engine,
    pub preset: Preset,
    pub hooks: H,
}

impl<H: Hooks> Hmac<H> {
    /// A boxed verifier, as `build` returns.
    pub fn boxed(engine: Engine, preset: Preset, hooks: H) -> Box<dyn Verifier> {
        Box::new(Hmac {
            engine,
            preset,
            hooks,
        })
    }
}

impl<H: Hooks> Verifier for Hmac<H> {
    fn verify(&self, input: &Input, ctx: &Ctx) -> Result<Verdict, Reject> {
        if let Some(v) = self.hooks.unsigned(input, &self.engine) {
            return v;
        }
        let mut provider_time = self.engine.check(input, ctx)?;
        if let Some((pointer, format)) = self.preset.body_timestamp {
            let text = super::json::field(input.body, pointer)
                .ok()
                .flatten()
                .and_then(|f| f.text_or_integer())
                .ok_or(Reject::BadBody("no timestamp where the provider signs one"))?;
            let ts = format
                .parse(&text)
                .map_err(|_| Reject::BadBody("the signed timestamp is not a time"))?;
            ctx.check_time(ts, input.now)?;
            provider_time = Some(ts);
        }
        if let Some(v) = self.hooks.signed(input, &self.engine) {
            return v;
        }
        self.preset.event(input, ctx, provider_time)
    }

    fn sign(&self, draft: &Draft) -> Sample {
        self.engine.sign(draft, Method::POST, None, Vec::new())
    }

    fn sign_handshake(&self, draft: &Draft) -> Option<Sample> {
        self.hooks.sign_handshake(&self.engine, draft)
    }

    fn demo_body(&self, id: &str, now: i64) -> Vec<u8> {
        match self.preset.demo_body {
            Some(demo) => demo(id, now),
            None => self.hooks.demo_body(id, now),
        }
    }

    fn methods(&self) -> &'static [Method] {
        self.hooks.methods()
    }

    fn signs_timestamp(&self) -> bool {
        self.engine.signs_timestamp() || self.preset.body_timestamp.is_some()
    }

    fn signs_id(&self) -> bool {
        self.preset.signs_id
    }

    fn default_tolerance(&self) -> std::time::Duration {
        self.preset.tolerance.unwrap_or(super::DEFAULT_TOLERANCE)
    }

    fn default_id(&self) -> Option<IdRule> {
        self.preset.id.clone()
    }

    fn redelivery(&self) -> Option<Horizon> {
        self.preset.redelivery
    }

    fn bookkeeping(&self) -> &'static [&'static str] {
        self.preset.bookkeeping
    }

    fn caveats(&self) -> Vec<String> {
        self.preset.caveats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheme::{Scheme, test_headers, test_scheme};
    use hyper::http::HeaderMap;

    const ID: &str = "req-1";
    const NOW: i64 = 1_800_000_000;

    fn scheme(spec: &str, secrets: &[&str]) -> Scheme {
        test_scheme(
            "hmac",
            secrets,
            &format!("hmac = {{ {spec} }}"),
            Some(IdRule::header("x-request-id")),
        )
    }

    fn verify(
        s: &Scheme,
        pairs: &[(&str, &str)],
        body: &[u8],
        now: i64,
    ) -> Result<Verdict, Reject> {
        let mut pairs = pairs.to_vec();
        pairs.push(("X-Request-Id", ID));
        let h = test_headers(&pairs);
        s.verify(&Input::post(&h, body, now))
    }

    fn event(provider_time: Option<i64>) -> Verdict {
        Verdict::Event(Identity {
            event_id: ID.into(),
            provider_time,
            event_type: None,
        })
    }

    // The GitHub docs vector, as a generic spec.
    const GH_SECRET: &str = "It's a Secret to Everybody";
    const GH_BODY: &[u8] = b"Hello, World!";
    const GH_SIG: &str = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
    const GH: &str = r#"header = "X-Hub-Signature-256", prefix = "sha256=""#;
    // The Slack docs vector: a slash command, signed with a timestamp.
    const SLACK_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
    const SLACK_TS: i64 = 1531420618;
    const SLACK_BODY: &[u8] = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    const SLACK_SIG: &str = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
    const SLACK: &str = r#"header = "X-Slack-Signature", prefix = "v0=", timestamp_header = "X-Slack-Request-Timestamp", signed = "v0:{timestamp}:{body}""#;

    fn slack_at(s: &Scheme, sig: &str, now: i64) -> Result<Verdict, Reject> {
        verify(
            s,
            &[
                ("X-Slack-Signature", sig),
                ("X-Slack-Request-Timestamp", "1531420618"),
            ],
            SLACK_BODY,
            now,
        )
    }

    #[test]
    fn published_vectors_through_the_generic_spec() {
        let gh = scheme(GH, &[GH_SECRET]);
        let sig = [("X-Hub-Signature-256", GH_SIG)];
        assert_eq!(verify(&gh, &sig, GH_BODY, NOW), Ok(event(None)));
        let slack = scheme(SLACK, &[SLACK_SECRET]);
        assert_eq!(
            slack_at(&slack, SLACK_SIG, SLACK_TS),
            Ok(event(Some(SLACK_TS)))
        );

        // Shopify's `hush` vector: base64, no prefix.
        let shopify = scheme(
            r#"header = "X-Shopify-Hmac-Sha256", encoding = "base64""#,
            &["hush"],
        );
        let body = br#"{"id":820982911946154508,"email":"jon@example.com"}"#;
        let sig = [(
            "X-Shopify-Hmac-Sha256",
            "D0UMXmhjwBRi4y66TmhJrDlhQABD7zI2fm3p6/QLMo8=",
        )];
        assert_eq!(verify(&shopify, &sig, body, NOW), Ok(event(None)));
    }

    #[test]
    fn sign_reproduces_the_published_vectors() {
        let gh = scheme(GH, &[GH_SECRET]);
        let sample = gh.sign_post(GH_BODY, ID, NOW);
        assert_eq!(sample.header("x-hub-signature-256"), Some(GH_SIG));
        assert_eq!(sample.header("x-request-id"), Some(ID));
        let slack = scheme(SLACK, &[SLACK_SECRET]);
        let sample = slack.sign_post(SLACK_BODY, ID, SLACK_TS);
        assert_eq!(sample.header("x-slack-signature"), Some(SLACK_SIG));
        assert_eq!(
            sample.header("x-slack-request-timestamp"),
            Some("1531420618")
        );
    }

    #[test]
    fn rotation_either_secret_and_any_signature() {
        let sig = [("X-Hub-Signature-256", GH_SIG)];
        assert!(verify(&scheme(GH, &["old", GH_SECRET]), &sig, GH_BODY, NOW).is_ok());
        assert!(verify(&scheme(GH, &[GH_SECRET, "old"]), &sig, GH_BODY, NOW).is_ok());

        // PagerDuty-style: `v1=<hex>` per active secret, comma-separated; also space-separated.
        let pd = scheme(
            r#"header = "X-PagerDuty-Signature", prefix = "v1=""#,
            &[GH_SECRET],
        );
        let good = &GH_SIG[7..];
        let bad = "0".repeat(64);
        for list in [
            format!("v1={bad},v1={good}"),
            format!("v1=zz v1={good}"),
            format!("v0={bad}, v1={good}"),
        ] {
            let sig = [("X-PagerDuty-Signature", list.as_str())];
            assert_eq!(verify(&pd, &sig, GH_BODY, NOW), Ok(event(None)), "{list}");
        }
    }

    #[test]
    fn key_value_pairs_stripe_and_paddle_layouts() {
        // Stripe's construction under the generic engine: `t=…,v1=…`, several v1.
        let stripe = scheme(
            r#"header = "Sig", signature_key = "v1", timestamp_key = "t", signed = "{timestamp}.{body}""#,
            &["k"],
        );
        let sample = stripe.sign_post(b"{}", ID, NOW);
        let good = sample.header("sig").unwrap().to_owned();
        assert!(good.starts_with(&format!("t={NOW},v1=")), "{good}");
        let tag = good.rsplit_once("v1=").unwrap().1;
        let bad = "0".repeat(64);
        for v in [
            good.clone(),
            format!("t={NOW},v1={bad},v1={tag}"),
            format!("v0={bad}, t={NOW} ,v1={tag}"),
            format!("t={NOW};v1={tag}"),
        ] {
            assert_eq!(
                verify(&stripe, &[("Sig", &v)], b"{}", NOW),
                Ok(event(Some(NOW))),
                "{v}"
            );
        }
        for v in [
            format!("t={NOW},t={NOW},v1={tag}"),
            format!("v1={tag}"),
            format!("t={NOW}"),
        ] {
            assert_eq!(
                verify(&stripe, &[("Sig", &v)], b"{}", NOW),
                Err(Reject::MalformedHeader("signature header")),
                "{v}"
            );
        }
        assert_eq!(
            verify(&stripe, &[("Sig", &good)], b"{}", NOW + 301),
            Err(Reject::TooOld)
        );
    }

    #[test]
    fn timestamp_formats() {
        assert_eq!(TimestampFormat::Unix.parse("1700000000"), Ok(1_700_000_000));
        assert_eq!(
            TimestampFormat::UnixMs.parse("1700000300000"),
            Ok(1_700_000_300)
        );
        assert_eq!(
            TimestampFormat::Rfc3339.parse("2021-03-25T05:09:27Z"),
            Ok(1_616_648_967)
        );
        assert_eq!(
            TimestampFormat::Rfc3339.parse("2020-12-13T14:15:16.1718Z"),
            Ok(1_607_868_916)
        );
        assert_eq!(
            TimestampFormat::Rfc3339.parse("2021-03-25T07:09:27+02:00"),
            Ok(1_616_648_967)
        );
        for bad in ["", "soon", "2021-03-25", "1e9"] {
            assert!(TimestampFormat::Rfc3339.parse(bad).is_err(), "{bad}");
            assert!(TimestampFormat::UnixMs.parse(bad).is_err() || bad == "1e9");
        }
        for f in [
            TimestampFormat::Unix,
            TimestampFormat::UnixMs,
            TimestampFormat::Rfc3339,
        ] {
            assert_eq!(f.parse(&f.format(NOW)), Ok(NOW), "{f:?}");
        }
    }

    #[test]
    fn key_encodings() {
        // "secret" as base64 and hex keys the same MAC as the raw text.
        let raw = scheme(GH, &["secret"]).sign_post(b"x", ID, NOW);
        for (enc, key) in [("base64", "c2VjcmV0"), ("hex", "736563726574")] {
            let s = scheme(&format!("{GH}, key_encoding = \"{enc}\""), &[key]);
            let sig = [(
                "X-Hub-Signature-256",
                raw.header("x-hub-signature-256").unwrap(),
            )];
            assert_eq!(verify(&s, &sig, b"x", NOW), Ok(event(None)), "{enc}");
        }
    }

    #[test]
    fn missing_and_malformed_headers() {
        let gh = scheme(GH, &[GH_SECRET]);
        assert_eq!(
            verify(&gh, &[], GH_BODY, NOW),
            Err(Reject::MissingHeader("signature header"))
        );
        let too_many = [GH_SIG; MAX_SIGNATURES + 1].join(",");
        for sig in [&GH_SIG[7..], "sha1=abcd", "sha256=", ""] {
            assert_eq!(
                verify(&gh, &[("X-Hub-Signature-256", sig)], GH_BODY, NOW),
                Err(Reject::MalformedHeader("signature header")),
                "{sig}"
            );
        }
        assert_eq!(
            verify(&gh, &[("X-Hub-Signature-256", &too_many)], GH_BODY, NOW),
            Err(Reject::TooManySignatures("signature header"))
        );
        let slack = scheme(SLACK, &[SLACK_SECRET]);
        assert_eq!(
            verify(
                &slack,
                &[("X-Slack-Signature", SLACK_SIG)],
                SLACK_BODY,
                SLACK_TS
            ),
            Err(Reject::MissingHeader("timestamp"))
        );
        let h = [
            ("X-Slack-Signature", SLACK_SIG),
            ("X-Slack-Request-Timestamp", "later"),
        ];
        assert_eq!(
            verify(&slack, &h, SLACK_BODY, SLACK_TS),
            Err(Reject::MalformedHeader("timestamp"))
        );
    }

    #[test]
    fn wrong_secret_flipped_character_and_bad_encoding() {
        let sig = |s: &str| [("X-Hub-Signature-256", s.to_owned())];
        let check = |s: &Scheme, v: &str, body: &[u8]| {
            let h = sig(v);
            verify(s, &[(h[0].0, h[0].1.as_str())], body, NOW)
        };
        assert_eq!(
            check(&scheme(GH, &["other"]), GH_SIG, GH_BODY),
            Err(Reject::NoMatch)
        );
        let gh = scheme(GH, &[GH_SECRET]);
        assert_eq!(
            check(&gh, &GH_SIG.replace("3e17", "3e18"), GH_BODY),
            Err(Reject::NoMatch)
        );
        assert_eq!(check(&gh, GH_SIG, b"Hello, World?"), Err(Reject::NoMatch));
        // Well-formed but not hex: it cannot match.
        assert_eq!(check(&gh, "sha256=not-hex", GH_BODY), Err(Reject::NoMatch));
    }

    #[test]
    fn window_is_enforced_both_ways_before_the_signature() {
        let slack = scheme(SLACK, &[SLACK_SECRET]);
        assert!(slack_at(&slack, SLACK_SIG, SLACK_TS + 300).is_ok());
        assert_eq!(
            slack_at(&slack, SLACK_SIG, SLACK_TS + 301),
            Err(Reject::TooOld)
        );
        assert!(slack_at(&slack, SLACK_SIG, SLACK_TS - 300).is_ok());
        assert_eq!(
            slack_at(&slack, SLACK_SIG, SLACK_TS - 301),
            Err(Reject::TooNew)
        );
        let wrong = format!("v0={}", "0".repeat(64));
        assert_eq!(
            slack_at(&slack, &wrong, SLACK_TS + 301),
            Err(Reject::TooOld)
        );
    }

    #[test]
    fn id_from_a_json_pointer_and_composites() {
        let s = test_scheme(
            "hmac",
            &["k"],
            &format!("hmac = {{ {GH} }}"),
            Some(IdRule::pointer("/data/id")),
        );
        let body = br#"{"data":{"id":42},"at":"2024"}"#;
        let h: HeaderMap = s
            .sign_post(body, "ignored", NOW)
            .headers
            .into_iter()
            .collect();
        let id = |s: &Scheme| match s.verify(&Input::post(&h, body, NOW)) {
            Ok(Verdict::Event(i)) => i.event_id,
            other => panic!("{other:?}"),
        };
        assert_eq!(id(&s), "42");
        let composite =
            IdRule::Composite(vec![IdRule::pointer("/data/id"), IdRule::pointer("/at")]);
        let s = test_scheme(
            "hmac",
            &["k"],
            &format!("hmac = {{ {GH} }}"),
            Some(composite),
        );
        assert_eq!(id(&s), "42:2024");
        let s = test_scheme(
            "hmac",
            &["k"],
            &format!("hmac = {{ {GH} }}"),
            Some(IdRule::BodySha256),
        );
        assert_eq!(
            id(&s),
            format!(
                "sha256:{}",
                hex::encode(ring::digest::digest(&ring::digest::SHA256, body))
            )
        );
    }

    #[test]
    fn configuration_refusals_name_the_key() {
        let build = |spec: &str, extra: &str| {
            let settings: toml::Table =
                toml::from_str(&format!("hmac = {{ {spec} }}\n{extra}")).unwrap();
            let secrets = vec![crate::secret::Secret::new("k")];
            Scheme::build(
                Setup::literal("hmac", secrets, settings),
                None,
                Some(IdRule::header("x-id")),
            )
            .unwrap_err()
        };
        for (spec, extra, want) in [
            (r#"header = "bad header""#, "", "hmac.header"),
            (
                r#"header = "S", signed = "{timestamp}{body}""#,
                "",
                "neither timestamp_header",
            ),
            (
                r#"header = "S", timestamp_header = "T""#,
                "",
                "signed does not include {timestamp}",
            ),
            (r#"header = "S", prefix = "a,b""#, "", "cannot contain"),
            (
                r#"header = "S", prefix = "v1=", signature_key = "v1""#,
                "",
                "not both",
            ),
            (
                r#"header = "S", timestamp_key = "t", signed = "{timestamp}{body}""#,
                "",
                "set signature_key",
            ),
            (
                r#"header = "S", signed = "{url}{body}""#,
                "",
                "set public_url",
            ),
            (
                r#"header = "S", signed = "{url}{body}""#,
                r#"public_url = "https://x/?a=1""#,
                "leave out the query",
            ),
            (r#"header = "S", key_encoding = "hex""#, "", "not hex"),
            (
                r#"header = "S", colour = "red""#,
                "",
                "unknown field `colour`",
            ),
        ] {
            let e = build(spec, extra);
            assert!(e.contains(want), "{spec}: {e}");
        }
    }

    #[test]
    fn sign_then_verify_round_trip_for_every_digest_encoding_and_layout() {
        for algorithm in ["sha1", "sha256", "sha512"] {
            for encoding in ["hex", "base64"] {
                for layout in [
                    String::new(),
                    r#", timestamp_header = "X-Ts", signed = "{timestamp}.{body}""#.into(),
                    r#", timestamp_header = "X-Ts", timestamp_format = "rfc3339", signed = "{method}{url}{header:x-request-id}{timestamp}{body}""#.into(),
                    r#", signature_key = "h1", timestamp_key = "ts", timestamp_format = "unix_ms", signed = "{timestamp}:{body}""#.into(),
                ] {
                    let spec = format!(
                        r#"header = "X-Signature", algorithm = "{algorithm}", encoding = "{encoding}"{layout}"#
                    );
                    let s = test_scheme(
                        "hmac",
                        &["round trip"],
                        &format!("hmac = {{ {spec} }}\npublic_url = \"https://example.com/in\""),
                        Some(IdRule::header("x-request-id")),
                    );
                    let body = b"\x00 any bytes \xff";
                    let h: HeaderMap = s.sign_post(body, ID, NOW).headers.into_iter().collect();
                    let v = s.verify(&Input::post(&h, body, NOW));
                    let expected = event((!layout.is_empty()).then_some(NOW));
                    assert_eq!(v, Ok(expected), "{spec}");
                }
            }
        }
    }
}
