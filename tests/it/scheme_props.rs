//! Properties of every signature scheme, over random requests:
//!
//! - whatever arrives in the headers a scheme reads (absent, repeated, any text, any bytes a
//!   `HeaderValue` accepts, or a well-formed header around a random signature) and whatever
//!   the body holds, `verify` neither panics nor accepts;
//! - whatever `sign` produces, `verify` accepts, anywhere inside the window, with the id it
//!   was given.
//!
//! Failing cases are shrunk and saved by proptest in `scheme_props.proptest-regressions`
//! beside this file, so they replay on the next run.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hookinbox::scheme::{IdRule, Identity, Input, Scheme, Setup, Verdict};
use hookinbox::secret::Secret;
use hyper::http::{HeaderMap, HeaderName, HeaderValue};
use proptest::collection::vec;
use proptest::prelude::*;

const NOW: i64 = 1_800_000_000;
/// Ids that every scheme accepts: no '.', which Standard Webhooks forbids.
const SAFE_ID: &str = "[A-Za-z0-9_-]{1,64}";

/// One configured scheme and what it reads.
struct Case {
    scheme: Scheme,
    /// Every header the scheme looks at, lowercase.
    headers: &'static [&'static str],
    /// Whether the event id comes from the body (`/id` or `/event_id`) rather than a header.
    id_in_body: bool,
}

/// `scheme` with one secret and its settings (a TOML table body), as a config would give.
fn case(
    scheme: &str,
    settings: &str,
    secret: &str,
    id: Option<IdRule>,
    headers: &'static [&'static str],
) -> Case {
    let id_in_body = matches!(scheme, "stripe" | "slack");
    let settings: toml::Table = toml::from_str(settings).expect("test settings are TOML");
    let setup = Setup::literal(scheme, vec![Secret::new(secret)], settings);
    let scheme = Scheme::build(setup, None, id).expect("valid test scheme");
    Case {
        scheme,
        headers,
        id_in_body,
    }
}

fn id_header(name: &'static str) -> Option<IdRule> {
    Some(IdRule::Header(HeaderName::from_static(name)))
}

fn cases() -> Vec<Case> {
    let timestamped = r#"hmac = { header = "X-Signature", prefix = "sha256=", timestamp_header = "X-Timestamp", signed = "{timestamp}.{body}" }"#;
    let plain =
        r#"hmac = { header = "X-Signature-B64", algorithm = "sha512", encoding = "base64" }"#;
    vec![
        case(
            "standard-webhooks",
            "",
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            None,
            &[
                "webhook-id",
                "webhook-timestamp",
                "webhook-signature",
                "svix-id",
                "svix-timestamp",
                "svix-signature",
            ],
        ),
        case("stripe", "", "whsec_props", None, &["stripe-signature"]),
        case(
            "github",
            "",
            "github props",
            None,
            &["x-hub-signature-256", "x-github-delivery", "x-github-event"],
        ),
        case(
            "shopify",
            "",
            "shopify props",
            None,
            &[
                "x-shopify-hmac-sha256",
                "x-shopify-webhook-id",
                "x-shopify-topic",
                "shopify-hmac-sha256",
                "shopify-webhook-id",
            ],
        ),
        case(
            "slack",
            "",
            "slack props",
            None,
            &["x-slack-signature", "x-slack-request-timestamp"],
        ),
        // Longer than any token the strategies below produce, so none can equal it by chance.
        case(
            "gitlab",
            "",
            "gitlab-props-token-that-no-strategy-generates-9f2c41d7e5a8b3c6d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b6",
            None,
            &[
                "x-gitlab-token",
                "x-gitlab-event-uuid",
                "idempotency-key",
                "x-gitlab-event",
            ],
        ),
        case(
            "hmac",
            timestamped,
            "hmac props",
            id_header("x-request-id"),
            &["x-signature", "x-timestamp", "x-request-id"],
        ),
        case(
            "hmac",
            plain,
            "hmac b64 props",
            id_header("x-hook-id"),
            &["x-signature-b64", "x-hook-id"],
        ),
    ]
}

/// Bytes `HeaderValue::from_bytes` accepts: tab, visible ASCII and space, and obs-text.
fn header_byte() -> impl Strategy<Value = u8> {
    prop_oneof![Just(b'\t'), 0x20u8..0x7f, 0x80u8..=0xff]
}

/// A well-formed value for `name` whose signature or token is random, with a timestamp
/// mostly inside the window, so that verification gets as far as the MAC comparison.
fn plausible(name: &'static str) -> impl Strategy<Value = String> {
    (-400i64..400, vec(any::<u8>(), 20..=64), SAFE_ID).prop_map(move |(offset, tag, id)| {
        let ts = NOW + offset;
        match name {
            "stripe-signature" => format!("t={ts},v1={}", hex::encode(&tag)),
            "x-hub-signature-256" | "x-signature" => format!("sha256={}", hex::encode(&tag)),
            "x-slack-signature" => format!("v0={}", hex::encode(&tag)),
            "webhook-signature" | "svix-signature" => format!("v1,{}", STANDARD.encode(&tag)),
            "x-shopify-hmac-sha256" | "shopify-hmac-sha256" | "x-signature-b64" => {
                STANDARD.encode(&tag)
            }
            "webhook-timestamp"
            | "svix-timestamp"
            | "x-slack-request-timestamp"
            | "x-timestamp" => ts.to_string(),
            "x-gitlab-token" => hex::encode(&tag),
            // Ids and event types.
            _ => id,
        }
    })
}

/// One value for `name`: any text, any accepted bytes, or a plausible value.
fn one_value(name: &'static str) -> impl Strategy<Value = HeaderValue> + Clone {
    prop_oneof![
        1 => "\\PC{0,80}".prop_filter_map("not a header value", |s| HeaderValue::from_str(&s).ok()),
        1 => vec(header_byte(), 0..80).prop_filter_map("not a header value", |b| HeaderValue::from_bytes(&b).ok()),
        // Weighted so that every scheme regularly gets as far as comparing its MAC.
        6 => plausible(name).prop_filter_map("not a header value", |s| HeaderValue::from_str(&s).ok()),
    ]
}

/// All values of `name` in one request: absent, once, or (ambiguously) twice.
fn values(name: &'static str) -> impl Strategy<Value = (&'static str, Vec<HeaderValue>)> {
    let one = one_value(name);
    prop_oneof![
        1 => Just(Vec::new()),
        10 => one.clone().prop_map(|v| vec![v]),
        1 => (one.clone(), one).prop_map(|(a, b)| vec![a, b]),
    ]
    .prop_map(move |vs| (name, vs))
}

/// Every header any scheme reads, each with random values: one request, shown to all.
fn request_headers() -> impl Strategy<Value = HeaderMap> {
    let mut names: Vec<&'static str> = cases()
        .iter()
        .flat_map(|c| c.headers.iter().copied())
        .collect();
    names.sort_unstable();
    names.dedup();
    names
        .into_iter()
        .map(values)
        .collect::<Vec<_>>()
        .prop_map(|all| {
            let mut map = HeaderMap::new();
            for (name, vs) in all {
                for v in vs {
                    map.append(HeaderName::from_static(name), v);
                }
            }
            map
        })
}

/// Raw bytes, or JSON with everything the schemes look for in a body (ids, types, a Slack
/// challenge), so that a bad signature is the only thing standing between it and `Ok`.
fn body() -> impl Strategy<Value = Vec<u8>> {
    let json = (SAFE_ID, "\\PC{0,40}", prop_oneof![Just("event_callback"), Just("url_verification")]).prop_map(
        |(id, text, kind)| {
            serde_json::json!({ "id": id, "event_id": id, "type": kind, "challenge": text, "data": text })
                .to_string()
                .into_bytes()
        },
    );
    prop_oneof![vec(any::<u8>(), 0..256), json]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_requests_never_verify(headers in request_headers(), body in body(), skew in -400i64..400) {
        for case in cases() {
            let verdict = case.scheme.verify(&Input::post(&headers, &body, NOW + skew));
            prop_assert!(
                verdict.is_err(),
                "{} accepted a random request: {:?}",
                case.scheme.name(),
                verdict
            );
        }
    }

    #[test]
    fn what_sign_produces_verify_accepts(
        raw in vec(any::<u8>(), 0..512),
        id in SAFE_ID,
        text in "\\PC{0,64}",
        skew in -300i64..=300,
    ) {
        for case in cases() {
            let body = if case.id_in_body {
                serde_json::json!({ "id": id, "event_id": id, "type": "props", "data": text })
                    .to_string()
                    .into_bytes()
            } else {
                raw.clone()
            };
            let headers: HeaderMap = case.scheme.sign_post(&body, &id, NOW).headers.into_iter().collect();
            let verdict = case.scheme.verify(&Input::post(&headers, &body, NOW + skew));
            let name = case.scheme.name();
            match verdict {
                Ok(Verdict::Event(Identity { event_id, .. })) => prop_assert_eq!(&event_id, &id, "{}", name),
                other => prop_assert!(false, "{} refused its own signature: {:?}", name, other),
            }
        }
    }
}
