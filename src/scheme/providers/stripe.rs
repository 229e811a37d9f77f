//! Stripe: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>…][,v0=<hex>]`.
//!
//! Each `v1` is lowercase hex HMAC-SHA256 over `{t}.{raw body}`, keyed with the endpoint
//! secret's bytes as they are, `whsec_` included (unlike Standard Webhooks, nothing is
//! base64-decoded). While a secret is being rolled Stripe sends one `v1` per active secret, so
//! any match is enough. `v0` (test mode's fake scheme) and unknown schemes are ignored, as
//! Stripe's docs ask, so that a forged entry of a weaker scheme cannot downgrade the check.
//! The window is symmetric, stricter than Stripe's libraries (they accept any future time).
//! The event id is the body's `id` (`evt_…`). Sources: stripe-python `stripe/_webhook.py`,
//! stripe-node `Webhooks.js`.

use crate::scheme::hmac::{Engine, Hmac, NoHooks, Preset, Spec, TypeAt};
use crate::scheme::{Horizon, IdRule, Setup, Verifier};

const SIGNATURE_HEADER: &str = "Stripe-Signature";

pub const PROVIDER: super::Provider = super::Provider {
    recovery: Some(super::Recovery {
        api: super::RecoveryApi::StripeEvents,
        url: "https://api.stripe.com",
        // Stripe retries for 3 days by itself (the redelivery horizon below).
        unrecovered: None,
    }),
    // https://docs.stripe.com/ips#webhook-notifications: single addresses under `WEBHOOKS`;
    // Stripe announces changes seven days ahead.
    addresses: Some(super::Addresses {
        url: "https://stripe.com/files/ips/ips_webhooks.json",
        what: "Stripe's published webhook addresses",
        parse: |body| super::ranges_at(body, &["WEBHOOKS"]),
    }),
    ..super::Provider::new("stripe", build)
};

fn build(setup: &mut Setup) -> Result<Box<dyn Verifier>, String> {
    let spec = Spec {
        header: SIGNATURE_HEADER.into(),
        signature_key: Some("v1".into()),
        timestamp_key: Some("t".into()),
        signed: Some("{timestamp}.{body}".into()),
        ..Spec::default()
    };
    let engine =
        Engine::new(setup, &spec, None, "stripe")?.labelled(SIGNATURE_HEADER, SIGNATURE_HEADER);
    let preset = Preset {
        id: Some(IdRule::pointer("/id")),
        signs_id: true,
        event_type: Some(TypeAt::Pointer("/type")),
        redelivery: Horizon::days(3, "Stripe's 3 days of retries"),
        // The number of endpoints yet to answer, when the event was rendered: the webhook
        // and a later API read of one event differ in it.
        bookkeeping: &["pending_webhooks"],
        ..Preset::default()
    };
    Ok(Hmac::boxed(engine, preset, NoHooks))
}

#[cfg(test)]
mod tests {
    use crate::scheme::{
        Identity, Input, MAX_SIGNATURES, Reject, Scheme, Verdict, test_scheme, value,
    };
    use hyper::http::HeaderMap;

    fn scheme(secrets: &[&str]) -> Scheme {
        let secrets: Vec<&str> = secrets.to_vec();
        test_scheme("stripe", &secrets, "", None)
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
        s.verify(&Input::post(&headers(signature), body, now))
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
            let signed = s.sign_post(body, "ignored", T);
            assert_eq!(signed.header("stripe-signature"), Some(header));
            assert_eq!(signed.headers.len(), 1);
            assert_eq!(verify_at(&s, header, body, T), Ok(event(id, None)));
        }
    }

    #[test]
    fn event_type_is_read_from_the_body() {
        let s = scheme(&[SECRET]);
        let body = br#"{"id":"evt_2","type":"invoice.paid"}"#;
        let (_, sig) = s.sign_post(body, "", T).headers.remove(0);
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
        let v = s.verify(&Input::post(&HeaderMap::new(), BODY_1, T));
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
        ] {
            assert_eq!(
                verify_at(&s, &header, BODY_1, T),
                Err(Reject::MalformedHeader("Stripe-Signature")),
                "{header}"
            );
        }
        assert_eq!(
            verify_at(&s, &too_many, BODY_1, T),
            Err(Reject::TooManySignatures("Stripe-Signature"))
        );
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
            let (_, sig) = s.sign_post(body, "", T).headers.remove(0);
            let err = verify_at(&s, sig.to_str().unwrap(), body, T).unwrap_err();
            assert!(!err.is_auth(), "{err:?}");
        }
    }

    #[test]
    fn sign_then_verify_round_trip() {
        let s = scheme(&["whsec_round_trip"]);
        let body = br#"{"id":"evt_round","type":"charge.succeeded"}"#;
        let mut h = HeaderMap::new();
        for (k, v) in s.sign_post(body, "ignored", 1_800_000_000).headers {
            h.insert(k, v);
        }
        let v = s
            .verify(&Input::post(&h, body, 1_800_000_000))
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
