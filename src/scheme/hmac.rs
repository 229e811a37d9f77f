//! The generic HMAC scheme, for providers without a module of their own: a configurable
//! header, digest (sha1/sha256/sha512), encoding (hex/base64) and prefix, over the body or a
//! template that includes a signed timestamp header.
//!
//! The header may carry several signatures separated by ',' or ' ' (PagerDuty sends one
//! `v1=<hex>` per active secret); each must start with the prefix, and any one match is
//! enough. There is no default event id: the source must configure where it is.

use std::borrow::Cow;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hyper::http::{HeaderName, HeaderValue};
use ring::hmac;
use serde::Deserialize;

use super::standard_webhooks::value;
use super::{Ctx, Identity, Input, MAX_SIGNATURES, Reject, Verdict};

/// `Reject` labels: the configured header names are not `'static`.
const SIGNATURE_LABEL: &str = "signature header";
const TIMESTAMP_LABEL: &str = "timestamp header";

/// The placeholders of [`Spec::signed`].
const BODY: &str = "{body}";
const TIMESTAMP: &str = "{timestamp}";

/// The `[sources.hmac]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// The header that carries the signature, e.g. `X-Signature`.
    pub header: String,
    #[serde(default)]
    pub algorithm: Algorithm,
    #[serde(default)]
    pub encoding: Encoding,
    /// Text before the signature in the header value, e.g. `sha256=`.
    #[serde(default)]
    pub prefix: Option<String>,
    /// A header with the unix-seconds timestamp that the provider signs; with it, the
    /// source's `tolerance` applies.
    #[serde(default)]
    pub timestamp_header: Option<String>,
    /// What is signed: `{body}` by default; `{timestamp}` stands for the timestamp header's
    /// value, e.g. `"{timestamp}.{body}"`.
    #[serde(default = "default_signed")]
    pub signed: String,
}

fn default_signed() -> String {
    "{body}".to_owned()
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
    fn decode(self, text: &str) -> Option<Vec<u8>> {
        match self {
            Encoding::Hex => hex::decode(text).ok(),
            Encoding::Base64 => STANDARD.decode(text).ok(),
        }
    }

    fn encode(self, tag: &[u8]) -> String {
        match self {
            Encoding::Hex => hex::encode(tag),
            Encoding::Base64 => STANDARD.encode(tag),
        }
    }
}

pub fn verify(spec: &Spec, input: &Input, ctx: &Ctx) -> Result<Verdict, Reject> {
    let signatures = super::header_as(input.headers, &spec.header, SIGNATURE_LABEL)?;
    let timestamp = match &spec.timestamp_header {
        Some(name) => {
            let text = super::header_as(input.headers, name, TIMESTAMP_LABEL)?;
            Some((text, super::parse_timestamp(text, TIMESTAMP_LABEL)?))
        }
        None => None,
    };

    let prefix = spec.prefix.as_deref().unwrap_or("");
    // An entry without the prefix is some other scheme's (like Stripe's `v0`): skipped.
    let candidates: Vec<&str> = signatures
        .split([',', ' '])
        .filter_map(|entry| entry.strip_prefix(prefix))
        .filter(|sig| !sig.is_empty())
        .collect();
    if candidates.is_empty() || candidates.len() > MAX_SIGNATURES {
        return Err(Reject::MalformedHeader(SIGNATURE_LABEL));
    }
    if let Some((_, ts)) = timestamp {
        ctx.check_time(ts, input.now)?;
    }

    let signed = signed_bytes(&spec.signed, timestamp.map(|(text, _)| text), input.body);
    let matched = candidates.iter().any(|sig| {
        spec.encoding
            .decode(sig)
            .is_some_and(|tag| ctx.any_key_matches(&signed, &tag))
    });
    if !matched {
        return Err(Reject::NoMatch);
    }
    // Checked only now, so an unauthenticated caller learns nothing about the configuration.
    let rule = ctx.id.ok_or(Reject::NoEventId("no id rule configured"))?;
    Ok(Verdict::Event(Identity {
        event_id: super::event_id(input, rule)?,
        provider_time: timestamp.map(|(_, ts)| ts),
        event_type: None,
    }))
}

/// The headers such a provider would send: the signature (with its prefix), the timestamp if
/// the spec signs one, and `id` under `id_header` if given. A header name that is not a valid
/// name is left out; configuration loading refuses such specs.
pub fn sign(
    spec: &Spec,
    key: &hmac::Key,
    body: &[u8],
    id: &str,
    now: i64,
    id_header: Option<&HeaderName>,
) -> Vec<(HeaderName, HeaderValue)> {
    let ts = now.to_string();
    let signed_ts = spec.timestamp_header.as_ref().map(|_| ts.as_str());
    let tag = hmac::sign(key, &signed_bytes(&spec.signed, signed_ts, body));
    let signature = format!(
        "{}{}",
        spec.prefix.as_deref().unwrap_or(""),
        spec.encoding.encode(tag.as_ref())
    );

    let mut headers = Vec::new();
    let named =
        |name: &str, text: &str| Some((HeaderName::from_bytes(name.as_bytes()).ok()?, value(text)));
    headers.extend(named(&spec.header, &signature));
    if let Some(name) = &spec.timestamp_header {
        headers.extend(named(name, &ts));
    }
    if let Some(name) = id_header {
        headers.push((name.clone(), value(id)));
    }
    headers
}

/// The bytes the provider MACs: `template` with `{timestamp}` replaced by the timestamp
/// header's text as sent, and `{body}` by the raw body. Borrows the body for the common
/// `{body}` template.
fn signed_bytes<'a>(template: &str, ts: Option<&str>, body: &'a [u8]) -> Cow<'a, [u8]> {
    // Configuration loading ensures one `{body}`; without it, sign the body alone rather than
    // panic here. Without a timestamp header, `{timestamp}` is left as written (also refused
    // at load).
    let Some((before, after)) = template.split_once(BODY) else {
        return Cow::Borrowed(body);
    };
    if before.is_empty() && after.is_empty() {
        return Cow::Borrowed(body);
    }
    let fill = |part: &str| match ts {
        Some(ts) => part.replace(TIMESTAMP, ts),
        None => part.to_owned(),
    };
    let (before, after) = (fill(before), fill(after));
    let mut signed = Vec::with_capacity(before.len() + body.len() + after.len());
    signed.extend_from_slice(before.as_bytes());
    signed.extend_from_slice(body);
    signed.extend_from_slice(after.as_bytes());
    Cow::Owned(signed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheme::{IdRule, Kind, Scheme};
    use crate::secret::Secret;
    use hyper::http::HeaderMap;
    use std::time::Duration;

    fn spec(header: &str, algorithm: Algorithm, encoding: Encoding, prefix: Option<&str>) -> Spec {
        Spec {
            header: header.into(),
            algorithm,
            encoding,
            prefix: prefix.map(Into::into),
            timestamp_header: None,
            signed: default_signed(),
        }
    }

    /// Slack's scheme written as a generic spec.
    fn slack_like() -> Spec {
        Spec {
            timestamp_header: Some("X-Slack-Request-Timestamp".into()),
            signed: "v0:{timestamp}:{body}".into(),
            ..spec(
                "X-Slack-Signature",
                Algorithm::Sha256,
                Encoding::Hex,
                Some("v0="),
            )
        }
    }

    fn scheme(spec: Spec, secrets: &[&str]) -> Scheme {
        let secrets = secrets.iter().map(|s| Secret::new(*s)).collect();
        let id = IdRule::Header(HeaderName::from_static("x-request-id"));
        Scheme::new(
            Kind::Hmac(spec),
            secrets,
            Duration::from_secs(300),
            Some(id),
        )
        .unwrap()
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        crate::scheme::test_headers(pairs)
    }

    const ID: &str = "req-1";
    const NOW: i64 = 1_800_000_000;

    // The GitHub docs vector, as a generic spec.
    const GH_SECRET: &str = "It's a Secret to Everybody";
    const GH_BODY: &[u8] = b"Hello, World!";
    const GH_SIG: &str = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
    // The Slack docs vector: a slash command, signed with a timestamp.
    const SLACK_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
    const SLACK_TS: i64 = 1531420618;
    const SLACK_BODY: &[u8] = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    const SLACK_SIG: &str = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";

    fn github_like() -> Spec {
        spec(
            "X-Hub-Signature-256",
            Algorithm::Sha256,
            Encoding::Hex,
            Some("sha256="),
        )
    }

    fn verify_gh(s: &Scheme, signature: &str, body: &[u8]) -> Result<Verdict, Reject> {
        let h = headers(&[("X-Hub-Signature-256", signature), ("X-Request-Id", ID)]);
        s.verify(&Input {
            headers: &h,
            body,
            now: NOW,
        })
    }

    fn verify_slack(s: &Scheme, signature: &str, now: i64) -> Result<Verdict, Reject> {
        let h = headers(&[
            ("X-Slack-Signature", signature),
            ("X-Slack-Request-Timestamp", "1531420618"),
            ("X-Request-Id", ID),
        ]);
        s.verify(&Input {
            headers: &h,
            body: SLACK_BODY,
            now,
        })
    }

    fn event(provider_time: Option<i64>) -> Verdict {
        Verdict::Event(Identity {
            event_id: ID.into(),
            provider_time,
            event_type: None,
        })
    }

    #[test]
    fn published_vectors_through_the_generic_spec() {
        let gh = scheme(github_like(), &[GH_SECRET]);
        assert_eq!(verify_gh(&gh, GH_SIG, GH_BODY), Ok(event(None)));
        let slack = scheme(slack_like(), &[SLACK_SECRET]);
        assert_eq!(
            verify_slack(&slack, SLACK_SIG, SLACK_TS),
            Ok(event(Some(SLACK_TS)))
        );

        // Shopify's `hush` vector: base64, no prefix.
        let shopify = scheme(
            spec(
                "X-Shopify-Hmac-Sha256",
                Algorithm::Sha256,
                Encoding::Base64,
                None,
            ),
            &["hush"],
        );
        let body = br#"{"id":820982911946154508,"email":"jon@example.com"}"#;
        let h = headers(&[
            (
                "X-Shopify-Hmac-Sha256",
                "D0UMXmhjwBRi4y66TmhJrDlhQABD7zI2fm3p6/QLMo8=",
            ),
            ("X-Request-Id", ID),
        ]);
        assert_eq!(
            shopify.verify(&Input {
                headers: &h,
                body,
                now: NOW
            }),
            Ok(event(None))
        );
    }

    #[test]
    fn sign_reproduces_the_published_vectors() {
        let gh = scheme(github_like(), &[GH_SECRET]);
        assert_eq!(
            gh.sign(GH_BODY, ID, NOW),
            vec![
                (
                    HeaderName::from_static("x-hub-signature-256"),
                    value(GH_SIG)
                ),
                (HeaderName::from_static("x-request-id"), value(ID)),
            ]
        );
        let slack = scheme(slack_like(), &[SLACK_SECRET]);
        assert_eq!(
            slack.sign(SLACK_BODY, ID, SLACK_TS),
            vec![
                (
                    HeaderName::from_static("x-slack-signature"),
                    value(SLACK_SIG)
                ),
                (
                    HeaderName::from_static("x-slack-request-timestamp"),
                    value("1531420618")
                ),
                (HeaderName::from_static("x-request-id"), value(ID)),
            ]
        );
    }

    #[test]
    fn rotation_either_secret_and_any_signature() {
        assert!(verify_gh(&scheme(github_like(), &["old", GH_SECRET]), GH_SIG, GH_BODY).is_ok());
        assert!(verify_gh(&scheme(github_like(), &[GH_SECRET, "old"]), GH_SIG, GH_BODY).is_ok());

        // PagerDuty-style: `v1=<hex>` per active secret, comma-separated; also space-separated.
        let pd = scheme(
            spec(
                "X-PagerDuty-Signature",
                Algorithm::Sha256,
                Encoding::Hex,
                Some("v1="),
            ),
            &[GH_SECRET],
        );
        let good = &GH_SIG[7..];
        let bad = "0".repeat(64);
        for list in [
            format!("v1={bad},v1={good}"),
            format!("v1=zz v1={good}"),
            format!("v0={bad}, v1={good}"),
        ] {
            let h = headers(&[("X-PagerDuty-Signature", &list), ("X-Request-Id", ID)]);
            assert_eq!(
                pd.verify(&Input {
                    headers: &h,
                    body: GH_BODY,
                    now: NOW
                }),
                Ok(event(None)),
                "{list}"
            );
        }
    }

    #[test]
    fn missing_headers() {
        let gh = scheme(github_like(), &[GH_SECRET]);
        let h = headers(&[("X-Request-Id", ID)]);
        let v = gh.verify(&Input {
            headers: &h,
            body: GH_BODY,
            now: NOW,
        });
        assert_eq!(v, Err(Reject::MissingHeader("signature header")));

        let slack = scheme(slack_like(), &[SLACK_SECRET]);
        let h = headers(&[("X-Slack-Signature", SLACK_SIG), ("X-Request-Id", ID)]);
        let v = slack.verify(&Input {
            headers: &h,
            body: SLACK_BODY,
            now: SLACK_TS,
        });
        assert_eq!(v, Err(Reject::MissingHeader("timestamp header")));
    }

    #[test]
    fn malformed_headers() {
        let gh = scheme(github_like(), &[GH_SECRET]);
        let hex = &GH_SIG[7..];
        let too_many = [GH_SIG; MAX_SIGNATURES + 1].join(",");
        for sig in [hex, "sha1=abcd", "sha256=", "", &too_many] {
            assert_eq!(
                verify_gh(&gh, sig, GH_BODY),
                Err(Reject::MalformedHeader("signature header")),
                "{sig}"
            );
        }
        let slack = scheme(slack_like(), &[SLACK_SECRET]);
        let h = headers(&[
            ("X-Slack-Signature", SLACK_SIG),
            ("X-Slack-Request-Timestamp", "later"),
            ("X-Request-Id", ID),
        ]);
        let v = slack.verify(&Input {
            headers: &h,
            body: SLACK_BODY,
            now: SLACK_TS,
        });
        assert_eq!(v, Err(Reject::MalformedHeader("timestamp header")));
    }

    #[test]
    fn wrong_secret_flipped_character_and_bad_encoding() {
        assert_eq!(
            verify_gh(&scheme(github_like(), &["other"]), GH_SIG, GH_BODY),
            Err(Reject::NoMatch)
        );
        let gh = scheme(github_like(), &[GH_SECRET]);
        assert_eq!(
            verify_gh(&gh, &GH_SIG.replace("3e17", "3e18"), GH_BODY),
            Err(Reject::NoMatch)
        );
        assert_eq!(
            verify_gh(&gh, GH_SIG, b"Hello, World?"),
            Err(Reject::NoMatch)
        );
        // Well-formed but not hex: it cannot match.
        assert_eq!(
            verify_gh(&gh, "sha256=not-hex", GH_BODY),
            Err(Reject::NoMatch)
        );
    }

    #[test]
    fn window_is_enforced_both_ways_before_the_signature() {
        let slack = scheme(slack_like(), &[SLACK_SECRET]);
        assert!(verify_slack(&slack, SLACK_SIG, SLACK_TS + 300).is_ok());
        assert_eq!(
            verify_slack(&slack, SLACK_SIG, SLACK_TS + 301),
            Err(Reject::TooOld)
        );
        assert!(verify_slack(&slack, SLACK_SIG, SLACK_TS - 300).is_ok());
        assert_eq!(
            verify_slack(&slack, SLACK_SIG, SLACK_TS - 301),
            Err(Reject::TooNew)
        );
        let wrong = format!("v0={}", "0".repeat(64));
        assert_eq!(
            verify_slack(&slack, &wrong, SLACK_TS + 301),
            Err(Reject::TooOld)
        );
    }

    #[test]
    fn no_id_rule_is_a_bad_request_after_the_signature() {
        let secrets = vec![Secret::new(GH_SECRET)];
        let s = Scheme::new(
            Kind::Hmac(github_like()),
            secrets,
            Duration::from_secs(300),
            None,
        )
        .unwrap();
        assert_eq!(
            verify_gh(&s, GH_SIG, GH_BODY),
            Err(Reject::NoEventId("no id rule configured"))
        );
        assert_eq!(
            verify_gh(&s, &GH_SIG.replace("3e17", "3e18"), GH_BODY),
            Err(Reject::NoMatch)
        );
    }

    #[test]
    fn id_from_a_json_pointer() {
        let secrets = vec![Secret::new("k")];
        let rule = Some(IdRule::Pointer("/data/id".into()));
        let s = Scheme::new(
            Kind::Hmac(github_like()),
            secrets,
            Duration::from_secs(300),
            rule,
        )
        .unwrap();
        let body = br#"{"data":{"id":42}}"#;
        let h: HeaderMap = s.sign(body, "ignored", NOW).into_iter().collect();
        let v = s.verify(&Input {
            headers: &h,
            body,
            now: NOW,
        });
        assert_eq!(
            v,
            Ok(Verdict::Event(Identity {
                event_id: "42".into(),
                provider_time: None,
                event_type: None
            }))
        );
    }

    #[test]
    fn template_without_body_placeholder_signs_the_body_alone() {
        assert_eq!(
            signed_bytes("{timestamp}", Some("1"), b"b"),
            Cow::Borrowed(&b"b"[..])
        );
        assert_eq!(
            signed_bytes("{timestamp}.{body}", Some("1"), b"b").as_ref(),
            b"1.b"
        );
        assert_eq!(
            signed_bytes("{timestamp}.{body}", None, b"b").as_ref(),
            b"{timestamp}.b"
        );
    }

    #[test]
    fn sign_then_verify_round_trip_for_every_digest_and_encoding() {
        for algorithm in [Algorithm::Sha1, Algorithm::Sha256, Algorithm::Sha512] {
            for encoding in [Encoding::Hex, Encoding::Base64] {
                for with_ts in [false, true] {
                    let mut spec = spec("X-Signature", algorithm, encoding, Some("sig="));
                    if with_ts {
                        spec.timestamp_header = Some("X-Timestamp".into());
                        spec.signed = "{timestamp}.{body}".into();
                    }
                    let s = scheme(spec, &["round trip"]);
                    let body = b"\x00 any bytes \xff";
                    let h: HeaderMap = s.sign(body, ID, NOW).into_iter().collect();
                    let v = s.verify(&Input {
                        headers: &h,
                        body,
                        now: NOW,
                    });
                    let expected = event(with_ts.then_some(NOW));
                    assert_eq!(v, Ok(expected), "{algorithm:?} {encoding:?} {with_ts}");
                }
            }
        }
    }
}
