//! The signature-scheme targets: one configured [`Scheme`] per provider family, shown
//! requests that start empty or correctly signed and are then edited by the fuzzer (headers
//! set, repeated, removed or changed byte by byte; the body and the clock changed), so that
//! libFuzzer explores garbage and near-valid requests alike.
//!
//! What must hold for every input:
//! - `verify` returns: no panic (libFuzzer's timeout catches a hang);
//! - what it accepts is authentic: [`authentic`], written from the providers' documents
//!   with `ring` directly, finds a valid MAC (or the GitLab token) over the exact header
//!   text and body, inside the replay window; the accepted id and time are the ones that
//!   signature covers; that signature header came once and held at most `MAX_SIGNATURES`
//!   entries (ARCHITECTURE §4);
//! - a refusal that means "authentic but unusable" (`!is_auth()`, answered 400) is authentic
//!   by that same check, so an unsigned request learns nothing about the configuration;
//! - a request exactly as `sign` made it, inside the window, with a usable id, is accepted
//!   with that id (or, for a Slack `url_verification`, answered with its challenge).

use std::sync::LazyLock;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hookinbox::scheme::{
    Handshake, IdRule, Identity, Input, MAX_EVENT_ID_LEN, MAX_SIGNATURES, Reject, Reply, Scheme,
    Verdict,
};
use hookinbox::secret::Secret;
use hyper::http::{HeaderMap, HeaderName, HeaderValue};
use ring::hmac;

use super::choices::Choices;

/// The verifier's clock when the fuzzer leaves it alone (unix seconds, in 2027).
pub const NOW: i64 = 1_800_000_000;
/// The replay window every timestamped setup uses: the default, as most sources run.
const TOLERANCE: Duration = hookinbox::scheme::DEFAULT_TOLERANCE;
/// Seconds per step of a fuzzed clock skew: ±128 steps reach past the window on both sides.
const SKEW_STEP: i64 = 3;
/// Edits applied to one request at most; more would only dilute each input's meaning.
const MAX_EDITS: usize = 16;
/// Bodies up to this size: past a few KiB a body only makes each MAC slower.
const MAX_BODY: usize = 4096;
/// What an edit may grow a value or a body to. Repeating a value is one edit, so without a
/// cap a few of them in a row would grow it exponentially, past any memory limit.
const MAX_GROWN: usize = 4 * MAX_BODY;
/// Bytes worth inserting into a header value: the separators and markers the parsers split
/// on, and characters of each encoding.
const INTERESTING: &[u8] = b" ,=.:;\tvt01fFaAzZ+/-_";
/// A header no scheme reads: editing it must change no verdict.
const UNRELATED: &str = "content-type";

/// The provider families the harness knows, with what it needs to judge each: written from
/// the providers' documents, not taken from the code under test.
#[derive(Debug, Clone)]
enum Kind {
    StandardWebhooks,
    Stripe,
    Github,
    Shopify,
    Slack,
    Gitlab,
    Hmac(Spec),
}

/// A generic HMAC source's `hmac` table.
#[derive(Debug, Clone)]
struct Spec {
    header: String,
    algorithm: Algorithm,
    encoding: Encoding,
    prefix: Option<String>,
    timestamp_header: Option<String>,
    signed: String,
}

#[derive(Debug, Clone, Copy)]
enum Algorithm {
    Sha1,
    Sha256,
    Sha512,
}

#[derive(Debug, Clone, Copy)]
enum Encoding {
    Hex,
    Base64,
}

impl Kind {
    fn name(&self) -> &'static str {
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

    fn signs_timestamp(&self) -> bool {
        match self {
            Kind::StandardWebhooks | Kind::Stripe | Kind::Slack => true,
            Kind::Hmac(spec) => spec.timestamp_header.is_some(),
            Kind::Github | Kind::Shopify | Kind::Gitlab => false,
        }
    }

    /// The source's settings as a configuration file would write them.
    fn settings(&self) -> toml::Table {
        let mut table = toml::Table::new();
        if let Kind::Hmac(spec) = self {
            let mut hmac = toml::Table::new();
            hmac.insert("header".into(), spec.header.clone().into());
            let algorithm = match spec.algorithm {
                Algorithm::Sha1 => "sha1",
                Algorithm::Sha256 => "sha256",
                Algorithm::Sha512 => "sha512",
            };
            hmac.insert("algorithm".into(), algorithm.into());
            let encoding = match spec.encoding {
                Encoding::Hex => "hex",
                Encoding::Base64 => "base64",
            };
            hmac.insert("encoding".into(), encoding.into());
            if let Some(p) = &spec.prefix {
                hmac.insert("prefix".into(), p.clone().into());
            }
            if let Some(t) = &spec.timestamp_header {
                hmac.insert("timestamp_header".into(), t.clone().into());
            }
            hmac.insert("signed".into(), spec.signed.clone().into());
            table.insert("hmac".into(), hmac.into());
        }
        table
    }
}

/// A request as the scheme sees it.
struct Request {
    headers: HeaderMap,
    body: Vec<u8>,
    now: i64,
}

/// The body as text, so that a failure shows what was sent.
impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("headers", &self.headers)
            .field("body", &String::from_utf8_lossy(&self.body))
            .field("now", &self.now)
            .finish()
    }
}

/// One configured scheme and what the harness needs to drive and to judge it.
pub struct Setup {
    kind: Kind,
    scheme: Scheme,
    /// One scheme per configured secret, so that requests come signed with either (rotation).
    signers: Vec<Scheme>,
    /// The secrets' MAC keys as [`authentic`] derives them, independently of `Scheme::new`.
    keys: Vec<hmac::Key>,
    /// The secrets as configured (GitLab compares its token itself).
    secrets: Vec<&'static str>,
    /// Where the id is found when the source overrides the scheme's default.
    id: Option<IdRule>,
    /// The header names the fuzzer edits: every one the scheme reads, and one it ignores.
    headers: &'static [&'static str],
}

impl Setup {
    fn new(
        kind: Kind,
        secrets: &[&'static str],
        id: Option<IdRule>,
        headers: &'static [&'static str],
    ) -> Setup {
        let scheme_with = |secrets: &[&str]| {
            let secrets = secrets.iter().map(|s| Secret::new(*s)).collect();
            let setup = hookinbox::scheme::Setup::literal(kind.name(), secrets, kind.settings());
            // No tolerance given: the default, TOLERANCE, applies where a timestamp is signed.
            Scheme::build(setup, None, id.clone()).expect("a valid setup")
        };
        let keys = secrets.iter().map(|s| oracle_key(&kind, s)).collect();
        let scheme = scheme_with(secrets);
        let signers = secrets.iter().map(|s| scheme_with(&[s])).collect();
        Setup {
            kind,
            scheme,
            signers,
            keys,
            secrets: secrets.to_vec(),
            id,
            headers,
        }
    }

    /// The JSON pointer of the event id, where the scheme reads it from the (signed) body.
    fn body_id(&self) -> Option<&str> {
        match (&self.kind, &self.id) {
            (_, Some(IdRule::Pointer(p))) => Some(p.as_str()),
            (Kind::Stripe, _) => Some("/id"),
            (Kind::Slack, _) => Some("/event_id"),
            _ => None,
        }
    }

    fn mac_ok(&self, msg: &[u8], tag: &[u8]) -> bool {
        self.keys.iter().any(|k| hmac::verify(k, msg, tag).is_ok())
    }
}

/// The key a provider signs with, derived here from its documentation rather than taken
/// from the code under test.
fn oracle_key(kind: &Kind, secret: &str) -> hmac::Key {
    match kind {
        // whsec_ + base64 of the key bytes; the setups use canonical padding.
        Kind::StandardWebhooks => {
            let b64 = secret.strip_prefix("whsec_").unwrap_or(secret);
            let bytes = STANDARD.decode(b64).expect("a canonical test secret");
            hmac::Key::new(hmac::HMAC_SHA256, &bytes)
        }
        Kind::Hmac(spec) => {
            let algorithm = match spec.algorithm {
                Algorithm::Sha1 => hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY,
                Algorithm::Sha256 => hmac::HMAC_SHA256,
                Algorithm::Sha512 => hmac::HMAC_SHA512,
            };
            hmac::Key::new(algorithm, secret.as_bytes())
        }
        _ => hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes()),
    }
}

fn header(name: &'static str) -> Option<IdRule> {
    Some(IdRule::Header(HeaderName::from_static(name)))
}

static STANDARD_WEBHOOKS: LazyLock<Setup> = LazyLock::new(|| {
    Setup::new(
        Kind::StandardWebhooks,
        &[
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "whsec_ZnV6eiByb3RhdGlvbiBzZWNyZXQgMDAy",
        ],
        None,
        &[
            "webhook-id",
            "webhook-timestamp",
            "webhook-signature",
            "svix-id",
            "svix-timestamp",
            "svix-signature",
            UNRELATED,
        ],
    )
});

static STRIPE: LazyLock<Setup> = LazyLock::new(|| {
    Setup::new(
        Kind::Stripe,
        &["whsec_fuzz_stripe_one", "whsec_fuzz_stripe_two"],
        None,
        &["stripe-signature", UNRELATED],
    )
});

static GITHUB: LazyLock<Setup> = LazyLock::new(|| {
    Setup::new(
        Kind::Github,
        &["fuzz github one", "fuzz github two"],
        None,
        &[
            "x-hub-signature-256",
            "x-hub-signature",
            "x-github-delivery",
            "x-github-event",
            UNRELATED,
        ],
    )
});

static SHOPIFY: LazyLock<Setup> = LazyLock::new(|| {
    Setup::new(
        Kind::Shopify,
        &["fuzz shopify one", "fuzz shopify two"],
        None,
        &[
            "x-shopify-hmac-sha256",
            "x-shopify-webhook-id",
            "x-shopify-topic",
            "shopify-hmac-sha256",
            "shopify-webhook-id",
            UNRELATED,
        ],
    )
});

static SLACK: LazyLock<Setup> = LazyLock::new(|| {
    Setup::new(
        Kind::Slack,
        &["fuzz slack one", "fuzz slack two"],
        None,
        &["x-slack-signature", "x-slack-request-timestamp", UNRELATED],
    )
});

static GITLAB: LazyLock<Setup> = LazyLock::new(|| {
    Setup::new(
        Kind::Gitlab,
        &["glpat-fuzz-token-one", "glpat-fuzz-token-two"],
        None,
        &[
            "x-gitlab-token",
            "x-gitlab-event-uuid",
            "idempotency-key",
            "x-gitlab-event",
            UNRELATED,
        ],
    )
});

/// Three generic HMAC sources that `config` would accept, between them covering every
/// digest, both encodings, a prefix or none, a timestamp or none (one signed twice), and an
/// id from a header or from the body.
static HMAC: LazyLock<[Setup; 3]> = LazyLock::new(|| {
    let spec = |header: &str,
                algorithm,
                encoding,
                prefix: Option<&str>,
                ts: Option<&str>,
                signed: &str| {
        Kind::Hmac(Spec {
            header: header.into(),
            algorithm,
            encoding,
            prefix: prefix.map(Into::into),
            timestamp_header: ts.map(Into::into),
            signed: signed.into(),
        })
    };
    [
        Setup::new(
            spec(
                "X-Signature",
                Algorithm::Sha256,
                Encoding::Hex,
                Some("sha256="),
                Some("X-Timestamp"),
                "{timestamp}.{body}",
            ),
            &["fuzz hmac one", "fuzz hmac two"],
            header("x-event-id"),
            &["x-signature", "x-timestamp", "x-event-id", UNRELATED],
        ),
        Setup::new(
            spec(
                "X-Hook-Signature",
                Algorithm::Sha512,
                Encoding::Base64,
                None,
                None,
                "{body}",
            ),
            &["fuzz hmac three"],
            Some(IdRule::Pointer("/id".into())),
            &["x-hook-signature", UNRELATED],
        ),
        Setup::new(
            spec(
                "X-Sig",
                Algorithm::Sha1,
                Encoding::Hex,
                Some("v1="),
                Some("X-Sig-Time"),
                "v1:{timestamp}:{body}:{timestamp}",
            ),
            &["fuzz hmac four", "fuzz hmac five"],
            header("x-sig-id"),
            &["x-sig", "x-sig-time", "x-sig-id", UNRELATED],
        ),
    ]
});

pub fn standard_webhooks(data: &[u8]) {
    run(&STANDARD_WEBHOOKS, data);
}

pub fn stripe(data: &[u8]) {
    run(&STRIPE, data);
}

pub fn github(data: &[u8]) {
    run(&GITHUB, data);
}

pub fn shopify(data: &[u8]) {
    run(&SHOPIFY, data);
}

pub fn slack(data: &[u8]) {
    run(&SLACK, data);
}

pub fn gitlab(data: &[u8]) {
    run(&GITLAB, data);
}

/// The first byte picks one of the [`HMAC`] setups.
pub fn hmac(data: &[u8]) {
    let (&which, rest) = data.split_first().unwrap_or((&0, &[]));
    run(&HMAC[usize::from(which) % HMAC.len()], rest);
}

/// Builds one request from `data`, verifies it, and checks the verdict.
fn run(setup: &Setup, data: &[u8]) {
    let mut c = Choices::new(data);
    let signed = c.flag();
    let signer = &setup.signers[c.below(setup.signers.len())];
    let skew = i64::from(c.byte() as i8) * SKEW_STEP;
    let (id, safe_id) = event_id(&mut c);
    let body = body(&mut c, &id);
    let mut req = Request {
        headers: HeaderMap::new(),
        body,
        now: NOW,
    };
    if signed {
        for (name, value) in signer.sign_post(&req.body, &id, NOW + skew).headers {
            req.headers.append(name, value);
        }
    }
    let mut edits = 0;
    while !c.is_empty() && edits < MAX_EDITS {
        edit(&mut c, setup, &mut req);
        edits += 1;
    }

    let verdict = setup
        .scheme
        .verify(&Input::post(&req.headers, &req.body, req.now));
    let name = setup.kind.name();
    let witnesses = authentic(setup, &req);
    match &verdict {
        Ok(Verdict::Event(identity)) => {
            assert!(
                witnesses.iter().any(|w| w.covers(identity, &req.headers)),
                "{name} accepted a request that is not authentic: {req:?} -> {identity:?}; \
                 authentic signatures: {witnesses:?}"
            );
            assert!(
                usable(&identity.event_id),
                "{name} accepted the id {:?}",
                identity.event_id
            );
        }
        Ok(Verdict::Handshake(answer)) => {
            assert!(
                matches!(setup.kind, Kind::Slack) && !witnesses.is_empty(),
                "{name} answered a handshake to a request that is not authentic: {req:?}"
            );
            assert_eq!(Some(answer.clone()), challenge_answer(&req.body), "{req:?}");
        }
        Err(reject) if !reject.is_auth() => assert!(
            !witnesses.is_empty(),
            "{name} refused as authentic but unusable ({reject}) a request that is not \
             authentic: {req:?}"
        ),
        Err(_) => {}
    }

    let pristine = signed
        && safe_id
        && edits == 0
        && (!setup.kind.signs_timestamp() || skew.abs() <= TOLERANCE.as_secs() as i64);
    if pristine {
        expect_accepted(setup, &req, &id, &verdict);
    }
}

/// A request exactly as a provider signs it, inside the window: accepted with its id.
fn expect_accepted(setup: &Setup, req: &Request, id: &str, verdict: &Result<Verdict, Reject>) {
    let name = setup.kind.name();
    if matches!(setup.kind, Kind::Slack)
        && let Some(answer) = challenge_answer(&req.body)
    {
        assert_eq!(
            verdict,
            &Ok(Verdict::Handshake(answer)),
            "{name} refused its own handshake: {req:?}"
        );
        return;
    }
    let expected = match setup.body_id() {
        Some(pointer) => json_id(&req.body, pointer),
        None => Some(id.to_owned()),
    };
    let Some(expected) = expected else {
        return;
    };
    match verdict {
        Ok(Verdict::Event(identity)) => assert_eq!(identity.event_id, expected, "{name}"),
        other => panic!("{name} refused what it signed: {req:?} -> {other:?}"),
    }
}

/// An event id, and whether every scheme must accept it: from a safe alphabet (so signed
/// requests are mostly usable), or any text, to see what the schemes make of it.
fn event_id(c: &mut Choices) -> (String, bool) {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-";
    if c.flag() {
        (String::from_utf8_lossy(c.short()).into_owned(), false)
    } else {
        let len = 1 + c.below(40);
        let id = (0..len)
            .map(|_| char::from(ALPHABET[c.below(ALPHABET.len())]))
            .collect();
        (id, true)
    }
}

/// Raw bytes, a JSON event with the id where Stripe (`/id`) and Slack (`/event_id`) read it,
/// or a Slack `url_verification` handshake.
fn body(c: &mut Choices, id: &str) -> Vec<u8> {
    match c.below(3) {
        0 => c.long(MAX_BODY).to_vec(),
        1 => {
            let text = String::from_utf8_lossy(c.short());
            serde_json::json!({ "id": id, "event_id": id, "type": "fuzz.event", "data": text })
                .to_string()
                .into_bytes()
        }
        _ => {
            let challenge = String::from_utf8_lossy(c.short());
            serde_json::json!({ "token": "t", "challenge": challenge, "type": "url_verification" })
                .to_string()
                .into_bytes()
        }
    }
}

/// One edit of the request.
fn edit(c: &mut Choices, setup: &Setup, req: &mut Request) {
    let name = HeaderName::from_static(c.pick(setup.headers));
    match c.below(7) {
        // Any value, replacing the header's.
        0 => {
            let value = header_value(c.short());
            req.headers.insert(name, value);
        }
        // Any value, as one more copy of the header.
        1 => {
            let value = header_value(c.short());
            req.headers.append(name, value);
        }
        // The same header twice, with the same value.
        2 => {
            if let Some(value) = req.headers.get(&name).cloned() {
                req.headers.append(name, value);
            }
        }
        3 => {
            req.headers.remove(&name);
        }
        // The value changed a little: the near misses.
        4 => {
            let mut bytes = req
                .headers
                .get(&name)
                .map(|v| v.as_bytes().to_vec())
                .unwrap_or_default();
            mutate(c, &mut bytes);
            req.headers.insert(name, header_value(&bytes));
        }
        5 => mutate(c, &mut req.body),
        // The verifier's clock: a small step, or an extreme.
        _ => {
            req.now = match c.below(4) {
                0 => c.pick(&[i64::MIN, -1, 0, i64::MAX]),
                _ => req
                    .now
                    .saturating_add(i64::from(c.byte() as i8) * SKEW_STEP),
            }
        }
    }
}

/// A small change to `bytes`.
fn mutate(c: &mut Choices, bytes: &mut Vec<u8>) {
    let at = usize::from(u16::from_le_bytes([c.byte(), c.byte()])) % (bytes.len() + 1);
    match c.below(6) {
        0 if at < bytes.len() => bytes[at] ^= c.byte().max(1),
        1 => bytes.truncate(at),
        2 => bytes.insert(at, c.pick(INTERESTING)),
        // The value repeated: many signatures, or many copies of one.
        3 => {
            let separator = c.pick::<&[u8]>(&[b" ", b",", b", "]);
            let copy = bytes.clone();
            for _ in 0..=c.below(12) {
                if bytes.len() + separator.len() + copy.len() > MAX_GROWN {
                    break;
                }
                bytes.extend_from_slice(separator);
                bytes.extend_from_slice(&copy);
            }
        }
        4 => bytes.make_ascii_uppercase(),
        _ => {
            let end = (at + c.below(8)).min(bytes.len());
            bytes.splice(at..end, c.short().iter().copied());
        }
    }
}

/// `bytes` without those no header value may hold (control characters but tab).
fn header_value(bytes: &[u8]) -> HeaderValue {
    let kept: Vec<u8> = bytes
        .iter()
        .copied()
        .filter(|&b| b == b'\t' || (b' '..0x7f).contains(&b) || b >= 0x80)
        .collect();
    HeaderValue::from_bytes(&kept).expect("only bytes a header value may hold")
}

/// An id any scheme would accept, as `scheme::check_id` defines it.
fn usable(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_EVENT_ID_LEN && !id.chars().any(char::is_control)
}

/// The id at `pointer` in a JSON body: a string, or a number as text.
fn json_id(body: &[u8], pointer: &str) -> Option<String> {
    let json: serde_json::Value = serde_json::from_slice(body).ok()?;
    match json.pointer(pointer)? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Slack's answer to a `url_verification` body, when it is one.
fn challenge_answer(body: &[u8]) -> Option<Handshake> {
    let json: serde_json::Value = serde_json::from_slice(body).ok()?;
    if json.get("type")?.as_str()? != "url_verification" {
        return None;
    }
    let challenge = json.get("challenge")?.as_str()?;
    Some(Handshake {
        kind: "url_verification",
        reply: Reply::json(&serde_json::json!({ "challenge": challenge })),
        action: None,
    })
}

/// One reason a request is authentic: a valid MAC (or the token) that [`authentic`] found.
#[derive(Debug)]
struct Witness {
    /// The header that carried it.
    header: String,
    /// How many signatures that header's value holds.
    entries: usize,
    /// The signed timestamp, where the scheme signs one.
    time: Option<i64>,
    /// The event id the signature covers; `None` where the id is not signed (GitHub,
    /// Shopify, GitLab, and ids from headers: the known limit in ARCHITECTURE §4).
    id: Option<String>,
}

impl Witness {
    /// Whether this signature is one that `identity` may rest on: same time, same id, a
    /// header sent once with no more than `MAX_SIGNATURES` entries.
    fn covers(&self, identity: &Identity, headers: &HeaderMap) -> bool {
        self.time == identity.provider_time
            && self.id.as_ref().is_none_or(|id| *id == identity.event_id)
            && headers.get_all(self.header.as_str()).iter().count() == 1
            && self.entries <= MAX_SIGNATURES
    }
}

/// Every way `req` is authentic for `setup`. Deliberately liberal (every value of a
/// repeated header, any signature entry, any plausible timestamp text), so that it never
/// refuses what a provider could have signed: whatever the scheme accepts must be here.
fn authentic(setup: &Setup, req: &Request) -> Vec<Witness> {
    let body = req.body.as_slice();
    let body_id = setup
        .body_id()
        .map(|p| json_id(body, p).unwrap_or_default());
    let mut found = Vec::new();
    match &setup.kind {
        // HMAC-SHA256 of `{id}.{timestamp}.{body}`, `v1,<base64>` entries separated by spaces.
        Kind::StandardWebhooks => {
            for [id_name, ts_name, sig_name] in [
                ["webhook-id", "webhook-timestamp", "webhook-signature"],
                ["svix-id", "svix-timestamp", "svix-signature"],
            ] {
                for id in values(&req.headers, id_name) {
                    for ts in values(&req.headers, ts_name) {
                        let Some(time) = in_window(ts, req.now) else {
                            continue;
                        };
                        let msg = [id.as_bytes(), b".", ts.as_bytes(), b".", body].concat();
                        for sig in values(&req.headers, sig_name) {
                            let entries: Vec<&str> =
                                sig.split(' ').filter(|e| !e.is_empty()).collect();
                            let matched = entries
                                .iter()
                                .filter_map(|e| e.strip_prefix("v1,"))
                                .filter_map(|b64| STANDARD.decode(b64).ok())
                                .any(|tag| setup.mac_ok(&msg, &tag));
                            if matched {
                                found.push(Witness {
                                    header: sig_name.into(),
                                    entries: entries.len(),
                                    time: Some(time),
                                    id: Some(id.trim().to_owned()),
                                });
                            }
                        }
                    }
                }
            }
        }
        // HMAC-SHA256 of `{t}.{body}`, `t=` and `v1=` items separated by commas.
        Kind::Stripe => {
            for header in values(&req.headers, "stripe-signature") {
                let items: Vec<(&str, &str)> = header
                    .split(',')
                    .filter_map(|item| item.trim().split_once('='))
                    .collect();
                let v1: Vec<&str> = items
                    .iter()
                    .filter(|(k, _)| *k == "v1")
                    .map(|(_, v)| *v)
                    .collect();
                for (_, t) in items.iter().filter(|(k, _)| *k == "t") {
                    let Some(time) = in_window(t, req.now) else {
                        continue;
                    };
                    let msg = [t.as_bytes(), b".", body].concat();
                    let matched = v1
                        .iter()
                        .filter_map(|v| hex::decode(v).ok())
                        .any(|tag| setup.mac_ok(&msg, &tag));
                    if matched {
                        found.push(Witness {
                            header: "stripe-signature".into(),
                            entries: v1.len(),
                            time: Some(time),
                            id: body_id.clone(),
                        });
                    }
                }
            }
        }
        // HMAC-SHA256 of the body, `sha256=<hex>`.
        Kind::Github => {
            for sig in values(&req.headers, "x-hub-signature-256") {
                let tag = sig
                    .strip_prefix("sha256=")
                    .and_then(|h| hex::decode(h).ok());
                if tag.is_some_and(|tag| setup.mac_ok(body, &tag)) {
                    found.push(Witness::unsigned("x-hub-signature-256"));
                }
            }
        }
        // HMAC-SHA256 of the body in base64, under either family of names.
        Kind::Shopify => {
            for name in ["x-shopify-hmac-sha256", "shopify-hmac-sha256"] {
                for sig in values(&req.headers, name) {
                    if STANDARD
                        .decode(sig)
                        .is_ok_and(|tag| setup.mac_ok(body, &tag))
                    {
                        found.push(Witness::unsigned(name));
                    }
                }
            }
        }
        // HMAC-SHA256 of `v0:{ts}:{body}`, `v0=<hex>`.
        Kind::Slack => {
            for ts in values(&req.headers, "x-slack-request-timestamp") {
                let Some(time) = in_window(ts, req.now) else {
                    continue;
                };
                let msg = [b"v0:", ts.as_bytes(), b":", body].concat();
                for sig in values(&req.headers, "x-slack-signature") {
                    let tag = sig.strip_prefix("v0=").and_then(|h| hex::decode(h).ok());
                    if tag.is_some_and(|tag| setup.mac_ok(&msg, &tag)) {
                        found.push(Witness {
                            header: "x-slack-signature".into(),
                            entries: 1,
                            time: Some(time),
                            id: body_id.clone(),
                        });
                    }
                }
            }
        }
        // The token itself.
        Kind::Gitlab => {
            for token in values(&req.headers, "x-gitlab-token") {
                if setup.secrets.contains(&token) {
                    found.push(Witness::unsigned("x-gitlab-token"));
                }
            }
        }
        // The spec's digest of its template, prefixed entries separated by ',' or ' '.
        Kind::Hmac(spec) => {
            let times: Vec<(Option<&str>, Option<i64>)> = match &spec.timestamp_header {
                None => vec![(None, None)],
                Some(name) => values(&req.headers, name)
                    .filter_map(|t| Some((Some(t), Some(in_window(t, req.now)?))))
                    .collect(),
            };
            let prefix = spec.prefix.as_deref().unwrap_or("");
            for (ts, time) in times {
                let msg = fill(&spec.signed, ts, body);
                for sig in values(&req.headers, &spec.header) {
                    let candidates: Vec<&str> = sig
                        .split([',', ' '])
                        .filter_map(|e| e.strip_prefix(prefix))
                        .filter(|e| !e.is_empty())
                        .collect();
                    let matched = candidates
                        .iter()
                        .filter_map(|c| match spec.encoding {
                            Encoding::Hex => hex::decode(c).ok(),
                            Encoding::Base64 => STANDARD.decode(c).ok(),
                        })
                        .any(|tag| setup.mac_ok(&msg, &tag));
                    if matched {
                        found.push(Witness {
                            header: spec.header.clone(),
                            entries: candidates.len(),
                            time,
                            id: body_id.clone(),
                        });
                    }
                }
            }
        }
    }
    found
}

impl Witness {
    /// A single signature over the body alone, no time, no signed id.
    fn unsigned(header: &str) -> Witness {
        Witness {
            header: header.into(),
            entries: 1,
            time: None,
            id: None,
        }
    }
}

/// Every value of `name` that is text.
fn values<'h>(headers: &'h HeaderMap, name: &str) -> impl Iterator<Item = &'h str> {
    headers
        .get_all(name)
        .into_iter()
        .filter_map(|v| v.to_str().ok())
}

/// The time in a timestamp's text, if it is within [`TOLERANCE`] of `now`.
fn in_window(text: &str, now: i64) -> Option<i64> {
    let t: i64 = text.trim().parse().ok()?;
    let apart = (i128::from(now) - i128::from(t)).unsigned_abs();
    (apart <= u128::from(TOLERANCE.as_secs())).then_some(t)
}

/// A generic HMAC template with `{timestamp}` and `{body}` filled in.
fn fill(template: &str, ts: Option<&str>, body: &[u8]) -> Vec<u8> {
    let (before, after) = template
        .split_once("{body}")
        .expect("the setups' templates hold {body}");
    let ts = |part: &str| match ts {
        Some(ts) => part.replace("{timestamp}", ts),
        None => part.to_owned(),
    };
    [ts(before).as_bytes(), body, ts(after).as_bytes()].concat()
}
