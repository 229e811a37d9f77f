//! Stripe: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>…][,v0=<hex>]`.
//!
//! Each `v1` is lowercase hex HMAC-SHA256 over `{t}.{raw body}`, keyed with the endpoint
//! secret's bytes as they are, `whsec_` included (unlike Standard Webhooks, nothing is
//! base64-decoded). While a secret is being rolled Stripe sends one `v1` per active secret, so
//! any match is enough. `v0` (test mode's fake scheme) and unknown schemes are ignored, as
//! Stripe's docs ask, so that a forged entry of a weaker scheme cannot downgrade the check.
//! The event id is the body's `id` (`evt_…`). Sources: stripe-python `stripe/_webhook.py`,
//! stripe-node `Webhooks.js`.

use hyper::http::{HeaderName, HeaderValue};
use ring::hmac;

use super::MAX_SIGNATURES;
use super::standard_webhooks::value;
use super::{Ctx, IdRule, Identity, Input, Reject, Verdict};

const SIGNATURE_HEADER: &str = "Stripe-Signature";

pub fn verify(input: &Input, ctx: &Ctx) -> Result<Verdict, Reject> {
    let malformed = || Reject::MalformedHeader(SIGNATURE_HEADER);
    let header = super::header(input.headers, SIGNATURE_HEADER)?;

    let mut t = None;
    let mut candidates = Vec::new();
    for item in header.split(',') {
        // An item without '=' carries nothing usable; the official libraries skip it too.
        let Some((scheme, v)) = item.trim().split_once('=') else {
            continue;
        };
        match scheme {
            // Two timestamps are ambiguous: which one did the signer mean?
            "t" if t.is_some() => return Err(malformed()),
            "t" => t = Some(v),
            "v1" => candidates.push(v),
            // v0 and unknown schemes: skipped, see the module comment.
            _ => {}
        }
    }
    let t_text = t.ok_or_else(malformed)?;
    if candidates.is_empty() || candidates.len() > MAX_SIGNATURES {
        return Err(malformed());
    }
    let ts = super::parse_timestamp(t_text, SIGNATURE_HEADER)?;
    // Symmetric window, stricter than Stripe's libraries (they accept any future time): a
    // timestamp from the future is as suspicious as a stale one.
    ctx.check_time(ts, input.now)?;

    // Signed over `t` exactly as sent: that is the text the signer hashed.
    let signed = signed(t_text, input.body);
    // A candidate that is not hex cannot match; others in the list still may (rotation).
    let matched = candidates
        .iter()
        .any(|c| hex::decode(c).is_ok_and(|tag| ctx.any_key_matches(&signed, &tag)));
    if !matched {
        return Err(Reject::NoMatch);
    }
    Ok(Verdict::Event(Identity {
        event_id: ctx.event_id(input, &IdRule::Pointer("/id".into()))?,
        provider_time: Some(ts),
        event_type: super::json_str(input.body, "/type"),
    }))
}

fn signed(t: &str, body: &[u8]) -> Vec<u8> {
    let mut signed = Vec::with_capacity(t.len() + 1 + body.len());
    signed.extend_from_slice(t.as_bytes());
    signed.push(b'.');
    signed.extend_from_slice(body);
    signed
}

/// The `Stripe-Signature` header Stripe would send for `body` at `now`, like stripe-python's
/// `WebhookSignature.generate_signature_header`.
pub fn sign(key: &hmac::Key, body: &[u8], now: i64) -> Vec<(HeaderName, HeaderValue)> {
    let t = now.to_string();
    let tag = hmac::sign(key, &signed(&t, body));
    let header = format!("t={t},v1={}", hex::encode(tag.as_ref()));
    vec![(HeaderName::from_static("stripe-signature"), value(&header))]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheme::{Kind, Scheme};
    use crate::secret::Secret;
    use hyper::http::HeaderMap;
    use std::time::Duration;

    fn scheme(secrets: &[&str]) -> Scheme {
        let secrets = secrets.iter().map(|s| Secret::new(*s)).collect();
        Scheme::new(Kind::Stripe, secrets, Duration::from_secs(300), None).unwrap()
    }

    fn headers(signature: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("stripe-signature", value(signature));
        h
    }

    // The library-generated vectors of signature-schemes.md §2, identical from stripe-python
    // 16.1.0 and stripe-node 23.1.0.
    const SECRET: &str = "whsec_test_secret";
    const T: i64 = 1700000000;
    const BODY_1: &[u8] = b"{\n  \"id\": \"evt_test_webhook\",\n  \"object\": \"event\"\n}";
    const HEADER_1: &str =
        "t=1700000000,v1=4f1cd7feda9826e746b7d482c4badebb657398df1099e1046364f6196a230150";
    const BODY_2: &[u8] = br#"{"id":"evt_1","object":"event"}"#;
    const HEADER_2: &str =
        "t=1700000000,v1=0c8670ed117751cc551a20e35839447075c42800ea3cf3e8a2fbda99cd1e6edd";

    fn verify_at(s: &Scheme, signature: &str, body: &[u8], now: i64) -> Result<Verdict, Reject> {
        s.verify(&Input {
            headers: &headers(signature),
            body,
            now,
        })
    }

    fn event(id: &str, event_type: Option<&str>) -> Verdict {
        Verdict::Event(Identity {
            event_id: id.into(),
            provider_time: Some(T),
            event_type: event_type.map(Into::into),
        })
    }

    #[test]
    fn published_vectors_sign_and_verify() {
        let s = scheme(&[SECRET]);
        for (body, header, id) in [
            (BODY_1, HEADER_1, "evt_test_webhook"),
            (BODY_2, HEADER_2, "evt_1"),
        ] {
            let signed = s.sign(body, "ignored", T);
            assert_eq!(
                signed,
                vec![(HeaderName::from_static("stripe-signature"), value(header))]
            );
            assert_eq!(verify_at(&s, header, body, T), Ok(event(id, None)));
        }
    }

    #[test]
    fn event_type_is_read_from_the_body() {
        let s = scheme(&[SECRET]);
        let body = br#"{"id":"evt_2","type":"invoice.paid"}"#;
        let (_, sig) = s.sign(body, "", T).remove(0);
        let v = verify_at(&s, sig.to_str().unwrap(), body, T);
        assert_eq!(v, Ok(event("evt_2", Some("invoice.paid"))));
    }

    #[test]
    fn rotation_either_secret_and_any_v1() {
        let old_new = scheme(&["whsec_old", SECRET]);
        assert!(verify_at(&old_new, HEADER_1, BODY_1, T).is_ok());
        let new_old = scheme(&[SECRET, "whsec_old"]);
        assert!(verify_at(&new_old, HEADER_1, BODY_1, T).is_ok());

        // What Stripe sends during a roll: one v1 per secret, plus test mode's v0.
        let good = HEADER_1.trim_start_matches("t=1700000000,v1=");
        let bad = "0".repeat(64);
        let several = format!("t=1700000000,v1={bad},v1=zz,v1={good},v0=deadbeef");
        assert!(verify_at(&scheme(&[SECRET]), &several, BODY_1, T).is_ok());
    }

    #[test]
    fn v0_and_unknown_schemes_are_never_believed() {
        let s = scheme(&[SECRET]);
        let good = HEADER_1.trim_start_matches("t=1700000000,v1=");
        for header in [format!("t={T},v0={good}"), format!("t={T},v2={good}")] {
            assert_eq!(
                verify_at(&s, &header, BODY_1, T),
                Err(Reject::MalformedHeader("Stripe-Signature"))
            );
        }
    }

    #[test]
    fn missing_header() {
        let s = scheme(&[SECRET]);
        let v = s.verify(&Input {
            headers: &HeaderMap::new(),
            body: BODY_1,
            now: T,
        });
        assert_eq!(v, Err(Reject::MissingHeader("Stripe-Signature")));
    }

    #[test]
    fn malformed_headers() {
        let s = scheme(&[SECRET]);
        let good = HEADER_1.trim_start_matches("t=1700000000,v1=");
        let too_many = format!("t={T}{}", format!(",v1={good}").repeat(MAX_SIGNATURES + 1));
        for header in [
            format!("v1={good}"),
            format!("t={T},t={T},v1={good}"),
            format!("t={T}"),
            format!("t=soon,v1={good}"),
            format!("t=-5,v1={good}"),
            String::new(),
            "garbage".into(),
            too_many,
        ] {
            assert_eq!(
                verify_at(&s, &header, BODY_1, T),
                Err(Reject::MalformedHeader("Stripe-Signature")),
                "{header}"
            );
        }
    }

    #[test]
    fn wrong_secret_and_flipped_character() {
        assert_eq!(
            verify_at(&scheme(&["whsec_other"]), HEADER_1, BODY_1, T),
            Err(Reject::NoMatch)
        );
        let s = scheme(&[SECRET]);
        let flipped = HEADER_1.replace("0150", "0151");
        assert_eq!(verify_at(&s, &flipped, BODY_1, T), Err(Reject::NoMatch));
        // The body is part of the signed bytes too.
        let body = String::from_utf8(BODY_1.to_vec())
            .unwrap()
            .replace("webhook", "webhooK");
        assert_eq!(
            verify_at(&s, HEADER_1, body.as_bytes(), T),
            Err(Reject::NoMatch)
        );
    }

    #[test]
    fn window_is_enforced_both_ways_before_the_signature() {
        let s = scheme(&[SECRET]);
        assert!(verify_at(&s, HEADER_1, BODY_1, T + 300).is_ok());
        assert_eq!(
            verify_at(&s, HEADER_1, BODY_1, T + 301),
            Err(Reject::TooOld)
        );
        assert!(verify_at(&s, HEADER_1, BODY_1, T - 300).is_ok());
        assert_eq!(
            verify_at(&s, HEADER_1, BODY_1, T - 301),
            Err(Reject::TooNew)
        );
        // A stale request is refused for its age even when its signature is also wrong.
        let wrong = format!("t={T},v1={}", "0".repeat(64));
        assert_eq!(verify_at(&s, &wrong, BODY_1, T + 301), Err(Reject::TooOld));
    }

    #[test]
    fn authentic_body_without_id_is_a_bad_request() {
        let s = scheme(&[SECRET]);
        for body in [&br#"{"object":"event"}"#[..], b"not json"] {
            let (_, sig) = s.sign(body, "", T).remove(0);
            let err = verify_at(&s, sig.to_str().unwrap(), body, T).unwrap_err();
            assert!(!err.is_auth(), "{err:?}");
        }
    }

    #[test]
    fn sign_then_verify_round_trip() {
        let s = scheme(&["whsec_round_trip"]);
        let body = br#"{"id":"evt_round","type":"charge.succeeded"}"#;
        let mut h = HeaderMap::new();
        for (k, v) in s.sign(body, "ignored", 1_800_000_000) {
            h.insert(k, v);
        }
        let v = s
            .verify(&Input {
                headers: &h,
                body,
                now: 1_800_000_000,
            })
            .unwrap();
        assert_eq!(
            v,
            Verdict::Event(Identity {
                event_id: "evt_round".into(),
                provider_time: Some(1_800_000_000),
                event_type: Some("charge.succeeded".into()),
            })
        );
    }
}
