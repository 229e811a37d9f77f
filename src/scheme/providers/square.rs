//! Square: `x-square-hmacsha256-signature: <base64>`, HMAC-SHA256 of the notification URL
//! followed by the raw body, keyed with the subscription's signature key. The URL is the one
//! configured at Square, exactly, so it comes from `public_url` (never from `Host`). The id
//! is the signed body's `event_id`. Sources: developer.squareup.com `validate-notifications`,
//! the Square SDKs' `WebhooksHelper` tests (the vector below, identical in every SDK).

use crate::scheme::hmac::{self, Encoding, NoHooks, Preset, Spec, TypeAt, UrlSettings};
use crate::scheme::{Horizon, IdRule, Setup, Verifier};

const SIGNATURE_HEADER: &str = "x-square-hmacsha256-signature";

pub const PROVIDER: super::Provider = super::Provider::new("square", build);

fn build(setup: &mut Setup) -> Result<Box<dyn Verifier>, String> {
    let public_url = UrlSettings::required(setup)?;
    let spec = Spec {
        header: SIGNATURE_HEADER.into(),
        encoding: Encoding::Base64,
        signed: Some("{url}{body}".into()),
        ..Spec::default()
    };
    let preset = Preset {
        id: Some(IdRule::pointer("/event_id")),
        signs_id: true,
        event_type: Some(TypeAt::Pointer("/type")),
        redelivery: Horizon::days(3, "Square's retries over 72 hours"),
        ..Preset::default()
    };
    hmac::preset(
        setup,
        spec,
        [SIGNATURE_HEADER, SIGNATURE_HEADER],
        Some(public_url),
        preset,
        NoHooks,
    )
}

#[cfg(test)]
mod tests {
    use crate::scheme::{Input, Reject, Verdict, test_headers, test_scheme};

    const KEY: &str = "Ibxx_5AKakO-3qeNVR61Dw";
    const URL: &str = "https://webhook.site/679a4f3a-dcfa-49ee-bac5-9d0edad886b9";
    const BODY: &[u8] = br#"{"merchant_id":"MLEFBHHSJGVHD","type":"webhooks.test_notification","event_id":"ac3ac95b-f97d-458c-a6e6-18981597e05f","created_at":"2022-07-13T20:30:59.037339943Z","data":{"type":"webhooks","id":"bc368e64-01aa-407e-b46e-3231809b1129"}}"#;
    const SIG: &str = "GF4YkrJgGBDZ9NIYbNXBnMzqb2HoL4RW/S6vkZ9/2N4=";

    #[test]
    fn published_vector_needs_the_exact_url() {
        let s = test_scheme("square", &[KEY], &format!("public_url = {URL:?}"), None);
        let h = test_headers(&[("x-square-hmacsha256-signature", SIG)]);
        match s.verify(&Input::post(&h, BODY, 0)) {
            Ok(Verdict::Event(i)) => {
                assert_eq!(i.event_id, "ac3ac95b-f97d-458c-a6e6-18981597e05f");
                assert_eq!(i.event_type.as_deref(), Some("webhooks.test_notification"));
            }
            other => panic!("{other:?}"),
        }
        let other = test_scheme("square", &[KEY], &format!("public_url = \"{URL}/\""), None);
        assert_eq!(other.verify(&Input::post(&h, BODY, 0)), Err(Reject::NoMatch));
        // A query the request carries is part of the URL Square signed.
        let mut input = Input::post(&h, BODY, 0);
        input.query = Some("x=1");
        assert_eq!(s.verify(&input), Err(Reject::NoMatch));
        assert_eq!(s.sign_post(BODY, "", 0).header(super::SIGNATURE_HEADER), Some(SIG));
    }

    #[test]
    fn public_url_is_required() {
        let setup = crate::scheme::Setup::literal(
            "square",
            vec![crate::secret::Secret::new(KEY)],
            toml::Table::new(),
        );
        let e = crate::scheme::Scheme::build(setup, None, None).unwrap_err();
        assert!(e.contains("set public_url"), "{e}");
    }
}
