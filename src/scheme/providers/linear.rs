//! Linear: `Linear-Signature: <hex>`, HMAC-SHA256 of the raw body keyed with the webhook's
//! signing secret. Freshness comes from the signed body's `webhookTimestamp`
//! (milliseconds), which Linear asks receivers to check within a minute; the id is the
//! `Linear-Delivery` header, which the signature does not cover (the signed timestamp bounds
//! a replay with a new one to that minute). Sources: linear.app `developers/webhooks`.

use std::time::Duration;

use crate::scheme::hmac::{self, Preset, Spec, TimestampFormat, TypeAt};
use crate::scheme::{IdRule, Setup, Verifier};

const SIGNATURE_HEADER: &str = "Linear-Signature";

pub const PROVIDER: super::Provider = super::Provider::new("linear", build);

fn build(setup: &mut Setup) -> Result<Box<dyn Verifier>, String> {
    let spec = Spec {
        header: SIGNATURE_HEADER.into(),
        ..Spec::default()
    };
    let preset = Preset {
        id: Some(IdRule::header("linear-delivery")),
        event_type: Some(TypeAt::Header("Linear-Event")),
        body_timestamp: Some(("/webhookTimestamp", TimestampFormat::UnixMs)),
        tolerance: Some(Duration::from_secs(60)),
        ..Preset::default()
    };
    hmac::preset(
        setup,
        spec,
        [SIGNATURE_HEADER, SIGNATURE_HEADER],
        None,
        preset,
        LinearBody,
    )
}

/// The demo event carries its timestamp, as Linear's do.
#[derive(Debug)]
struct LinearBody;

impl hmac::Hooks for LinearBody {
    fn demo_body(&self, id: &str, now: i64) -> Vec<u8> {
        let ms = now * 1000;
        format!(r#"{{"action":"create","type":"Issue","data":{{"id":"{id}"}},"webhookTimestamp":{ms}}}"#)
            .into_bytes()
    }
}


#[cfg(test)]
mod tests {
    use crate::scheme::{Input, Reject, Verdict, test_headers, test_scheme};

    #[test]
    fn the_signed_body_timestamp_is_checked() {
        let s = test_scheme("linear", &["lin_wh_secret"], "", None);
        let body = br#"{"action":"create","type":"Issue","webhookTimestamp":1700000000123}"#;
        let sample = s.sign_post(body, "d-1", 1_700_000_000);
        let h: hyper::http::HeaderMap = sample.headers.into_iter().collect();
        match s.verify(&Input::post(&h, body, 1_700_000_060)) {
            Ok(Verdict::Event(i)) => {
                assert_eq!(i.event_id, "d-1");
                assert_eq!(i.provider_time, Some(1_700_000_000));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(s.verify(&Input::post(&h, body, 1_700_000_061)), Err(Reject::TooOld));
        let stale = br#"{"action":"create"}"#;
        let sample = s.sign_post(stale, "d-2", 0);
        let h = test_headers(&[
            ("Linear-Signature", sample.header("linear-signature").unwrap()),
            ("Linear-Delivery", "d-2"),
        ]);
        assert!(!s.verify(&Input::post(&h, stale, 0)).unwrap_err().is_auth());
    }
}
