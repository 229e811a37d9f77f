//! Shopify: `X-Shopify-Hmac-Sha256: <base64>`, HMAC-SHA256 of the raw body keyed with the
//! app's client secret. Only the body is signed: the topic and shop headers are not
//! authenticated, and there is no timestamp. Shopify sends one signature, but for up to an hour
//! after a rotation it may still sign with the old secret, so both stay configured. The
//! "Events" delivery (developer preview) sends the same HMAC under unprefixed names
//! (`shopify-hmac-sha256`, …). Sources: shopify.dev `verify-deliveries`,
//! `@shopify/shopify-api` `lib/webhooks/validate.js`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hyper::http::HeaderName;
use ring::hmac;

use crate::scheme::keys::Keys;
use crate::scheme::{
    Ctx, Draft, Horizon, IdRule, Identity, Input, Reject, Sample, Setup, Verdict, Verifier, value,
};

/// The two header families, `[signature, event id, topic]`: the classic HTTPS delivery, then
/// the Events preview. Lowercase, as `HeaderName::from_static` requires.
const NAMES: [[&str; 3]; 2] = [
    [
        "x-shopify-hmac-sha256",
        "x-shopify-webhook-id",
        "x-shopify-topic",
    ],
    ["shopify-hmac-sha256", "shopify-webhook-id", "shopify-topic"],
];

pub const PROVIDER: super::Provider = super::Provider::new("shopify", build);

fn build(setup: &mut Setup) -> Result<Box<dyn Verifier>, String> {
    Ok(Box::new(Shopify {
        keys: Keys::raw(hmac::HMAC_SHA256, &setup.secrets()?),
    }))
}

#[derive(Debug)]
struct Shopify {
    keys: Keys,
}

impl Verifier for Shopify {
    fn verify(&self, input: &Input, ctx: &Ctx) -> Result<Verdict, Reject> {
        // The classic names win when both are present. Id and topic come from the same
        // family as the signature: a delivery uses one naming throughout.
        let [sig_name, id_name, topic_name] = NAMES
            .into_iter()
            .find(|[sig, _, _]| input.headers.contains_key(*sig))
            .ok_or(Reject::MissingHeader(NAMES[0][0]))?;
        let signature = crate::scheme::header(input.headers, sig_name)?;
        let tag = STANDARD
            .decode(signature)
            .map_err(|_| Reject::MalformedHeader(sig_name))?;
        if !self.keys.any_matches(input.body, &tag) {
            return Err(Reject::NoMatch);
        }
        Ok(Verdict::Event(Identity {
            event_id: ctx.event_id(input, &IdRule::header(id_name))?,
            provider_time: None,
            event_type: crate::scheme::optional_header(input.headers, topic_name),
        }))
    }

    /// The classic headers: the signature and the webhook id.
    fn sign(&self, draft: &Draft) -> Sample {
        let tag = STANDARD.encode(self.keys.sign(draft.body));
        Sample::post(
            vec![
                (HeaderName::from_static(NAMES[0][0]), value(&tag)),
                (HeaderName::from_static(NAMES[0][1]), value(draft.id)),
            ],
            draft.body,
        )
    }

    fn default_id(&self) -> Option<IdRule> {
        Some(IdRule::header(NAMES[0][1]))
    }

    fn redelivery(&self) -> Option<Horizon> {
        Horizon::days(2, "Shopify's retries")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheme::{Scheme, test_scheme};
    use hyper::http::HeaderMap;

    fn scheme(secrets: &[&str], id: Option<IdRule>) -> Scheme {
        let secrets: Vec<&str> = secrets.to_vec();
        test_scheme("shopify", &secrets, "", id)
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        crate::scheme::test_headers(pairs)
    }

    // signature-schemes.md §4: generated with @shopify/shopify-api's getHmac and checked
    // with its validate().
    const SECRET: &str = "hush";
    const BODY: &[u8] = br#"{"id":820982911946154508,"email":"jon@example.com"}"#;
    const SIG: &str = "D0UMXmhjwBRi4y66TmhJrDlhQABD7zI2fm3p6/QLMo8=";
    const WEBHOOK_ID: &str = "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043";
    const NOW: i64 = 1_800_000_000;

    fn verify(s: &Scheme, signature: &str, body: &[u8]) -> Result<Verdict, Reject> {
        let h = headers(&[
            ("X-Shopify-Hmac-Sha256", signature),
            ("X-Shopify-Webhook-Id", WEBHOOK_ID),
            ("X-Shopify-Topic", "orders/create"),
        ]);
        s.verify(&Input::post(&h, body, NOW))
    }

    fn event(id: &str, topic: Option<&str>) -> Verdict {
        Verdict::Event(Identity {
            event_id: id.into(),
            provider_time: None,
            event_type: topic.map(Into::into),
        })
    }

    #[test]
    fn published_vector_signs_and_verifies() {
        let s = scheme(&[SECRET], None);
        assert_eq!(
            s.sign_post(BODY, WEBHOOK_ID, NOW).headers,
            vec![
                (HeaderName::from_static("x-shopify-hmac-sha256"), value(SIG)),
                (
                    HeaderName::from_static("x-shopify-webhook-id"),
                    value(WEBHOOK_ID)
                ),
            ]
        );
        assert_eq!(
            verify(&s, SIG, BODY),
            Ok(event(WEBHOOK_ID, Some("orders/create")))
        );
    }

    #[test]
    fn events_preview_names() {
        let s = scheme(&[SECRET], None);
        let h = headers(&[
            ("shopify-hmac-sha256", SIG),
            ("shopify-webhook-id", "w-2"),
            ("shopify-topic", "orders/paid"),
        ]);
        let v = s.verify(&Input::post(&h, BODY, NOW));
        assert_eq!(v, Ok(event("w-2", Some("orders/paid"))));
    }

    #[test]
    fn configured_id_header_overrides_the_default() {
        let event_id = HeaderName::from_static("x-shopify-event-id");
        let s = scheme(&[SECRET], Some(IdRule::Header(event_id.clone())));
        let mut h = HeaderMap::new();
        for (k, v) in s.sign_post(BODY, "e-1", NOW).headers {
            h.insert(k, v);
        }
        assert!(h.contains_key(&event_id));
        assert_eq!(
            s.verify(&Input::post(&h, BODY, NOW)),
            Ok(event("e-1", None))
        );
    }

    #[test]
    fn rotation_either_secret_works() {
        assert!(verify(&scheme(&["old", SECRET], None), SIG, BODY).is_ok());
        assert!(verify(&scheme(&[SECRET, "old"], None), SIG, BODY).is_ok());
    }

    #[test]
    fn missing_header() {
        let s = scheme(&[SECRET], None);
        let h = headers(&[("X-Shopify-Webhook-Id", WEBHOOK_ID)]);
        let v = s.verify(&Input::post(&h, BODY, NOW));
        assert_eq!(v, Err(Reject::MissingHeader("x-shopify-hmac-sha256")));
    }

    #[test]
    fn malformed_headers() {
        let s = scheme(&[SECRET], None);
        // Not base64; padding missing; trailing bits set (non-canonical); a prefix.
        for sig in [
            "not base64!",
            "D0UMXmhjwBRi4y66TmhJrDlhQABD7zI2fm3p6/QLMo8",
            "D0UMXmhjwBRi4y66TmhJrDlhQABD7zI2fm3p6/QLMo9=",
            "sha256=D0UM",
        ] {
            assert_eq!(
                verify(&s, sig, BODY),
                Err(Reject::MalformedHeader("x-shopify-hmac-sha256")),
                "{sig}"
            );
        }
    }

    #[test]
    fn wrong_secret_and_flipped_character() {
        assert_eq!(
            verify(&scheme(&["Hush"], None), SIG, BODY),
            Err(Reject::NoMatch)
        );
        let s = scheme(&[SECRET], None);
        let flipped = SIG.replace("D0UM", "D1UM");
        assert_eq!(verify(&s, &flipped, BODY), Err(Reject::NoMatch));
        assert_eq!(verify(&s, SIG, &BODY[1..]), Err(Reject::NoMatch));
    }

    #[test]
    fn authentic_without_webhook_id_is_a_bad_request() {
        let s = scheme(&[SECRET], None);
        let h = headers(&[("X-Shopify-Hmac-Sha256", SIG)]);
        let v = s.verify(&Input::post(&h, BODY, NOW));
        assert_eq!(v, Err(Reject::NoEventId("id header missing")));
    }

    #[test]
    fn sign_then_verify_round_trip() {
        let s = scheme(&["shpss_round_trip"], None);
        let body = b"\x00 any bytes \xff";
        let mut h = HeaderMap::new();
        for (k, v) in s.sign_post(body, "w-round", NOW).headers {
            h.insert(k, v);
        }
        assert_eq!(
            s.verify(&Input::post(&h, body, NOW)),
            Ok(event("w-round", None))
        );
    }
}
