//! HubSpot (signature v3): `X-HubSpot-Signature-v3: <base64>`, HMAC-SHA256 of
//! `{method}{url}{body}{timestamp}` keyed with the app's client secret, where the URL is the
//! one HubSpot calls (`public_url`, then the query as sent) and `X-HubSpot-Request-Timestamp`
//! is in milliseconds; the SDKs refuse requests older than 5 minutes.
//!
//! HubSpot batches up to 100 events in one request, a JSON array whose elements each carry
//! an `eventId`: the request is stored as one event, its bytes exact, under the element ids
//! joined (signed, as the body is). A retry carries a new `attemptNumber` in each element,
//! so it arrives with the same id and different bytes: it is quarantined as a conflict
//! (answered 200 by default here, so HubSpot stops) while the first stays deliverable.
//! HubSpot's docs ask a receiver to decode some `%xx` escapes in the URL before signing; a
//! `public_url` written exactly as configured at HubSpot needs none. Sources:
//! developers.hubspot.com `validating-requests`, hubspot-api-python `utils/signature.py` and
//! its tests (the vector below).

use crate::scheme::hmac::{
    self, Encoding, NoHooks, Preset, Spec, TimestampFormat, TypeAt, UrlSettings,
};
use crate::scheme::{IdRule, Setup, Verifier};

const SIGNATURE_HEADER: &str = "X-HubSpot-Signature-v3";
const TIMESTAMP_HEADER: &str = "X-HubSpot-Request-Timestamp";

pub const PROVIDER: super::Provider = super::Provider::new("hubspot", build);

fn build(setup: &mut Setup) -> Result<Box<dyn Verifier>, String> {
    let public_url = UrlSettings::required(setup)?;
    let spec = Spec {
        header: SIGNATURE_HEADER.into(),
        encoding: Encoding::Base64,
        timestamp_header: Some(TIMESTAMP_HEADER.into()),
        timestamp_format: TimestampFormat::UnixMs,
        signed: Some("{method}{url}{body}{timestamp}".into()),
        ..Spec::default()
    };
    let preset = Preset {
        id: Some(IdRule::Each {
            array: String::new(),
            id: "/eventId".into(),
        }),
        signs_id: true,
        event_type: Some(TypeAt::Pointer("/0/subscriptionType")),
        caveats: &[
            "HubSpot retries a batch with a new attemptNumber in each element: the retry is \
             quarantined as a conflict (see `hookinbox conflicts`) and the first delivery \
             stays the one forwarded; set on_conflict = 200 so HubSpot stops retrying",
        ],
        demo_body: Some(|id, now| {
            serde_json::json!([{ "eventId": id, "subscriptionType": "contact.creation",
                                 "objectId": 1, "occurredAt": now * 1000, "attemptNumber": 0 }])
            .to_string()
            .into_bytes()
        }),
        ..Preset::default()
    };
    hmac::preset(
        setup,
        spec,
        [SIGNATURE_HEADER, TIMESTAMP_HEADER],
        Some(public_url),
        preset,
        NoHooks,
    )
}

#[cfg(test)]
mod tests {
    use crate::scheme::{Input, Reject, Verdict, test_headers, test_scheme};

    const SECRET: &str = "yyyyyyyy-yyyy-yyyy-yyyy-yyyyyyyyyyyy";
    const URL: &str = "https://www.example.com/webhook_uri";

    fn scheme() -> crate::scheme::Scheme {
        test_scheme("hubspot", &[SECRET], &format!("public_url = {URL:?}"), None)
    }

    #[test]
    fn published_vector_verifies_at_its_time() {
        let h = test_headers(&[
            ("X-HubSpot-Signature-v3", "RnbPH7+UMKVkbV32P8bz450N4M56aPmcru1+D3kSDtw="),
            ("X-HubSpot-Request-Timestamp", "1700000300000"),
        ]);
        // The SDK's test body is not a batch: authentic (400, not 401), but without ids.
        let v = scheme().verify(&Input::post(&h, b"{'example_field':'example_value'}", 1_700_000_300));
        assert_eq!(v, Err(Reject::BadBody("body is not JSON, so the event ids cannot be read")));
        let v = scheme().verify(&Input::post(&h, b"{'example_field':'example_valuE'}", 1_700_000_300));
        assert_eq!(v, Err(Reject::NoMatch));
        let v = scheme().verify(&Input::post(&h, b"{'example_field':'example_value'}", 1_700_000_601));
        assert_eq!(v, Err(Reject::TooOld));
    }

    #[test]
    fn a_batch_is_one_event_under_its_element_ids() {
        let body = br#"[{"eventId":100,"subscriptionType":"contact.creation","attemptNumber":0},{"eventId":101,"subscriptionType":"contact.creation","attemptNumber":0}]"#;
        let s = scheme();
        let sample = s.sign_post(body, "", 1_700_000_000);
        assert_eq!(sample.header("x-hubspot-request-timestamp"), Some("1700000000000"));
        let h: hyper::http::HeaderMap = sample.headers.into_iter().collect();
        match s.verify(&Input::post(&h, body, 1_700_000_000)) {
            Ok(Verdict::Event(i)) => {
                assert_eq!(i.event_id, "100,101");
                assert_eq!(i.event_type.as_deref(), Some("contact.creation"));
            }
            other => panic!("{other:?}"),
        }
    }
}
