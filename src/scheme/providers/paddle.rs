//! Paddle Billing: `Paddle-Signature: ts=<unix>;h1=<hex>[;h1=<hex>…]`, HMAC-SHA256 of
//! `{ts}:{raw body}` keyed with the notification destination's secret key (`pdl_ntfset_…`,
//! its bytes as shown). Several `h1` may appear while a secret rotates; any one is enough
//! (the Node SDK keeps only the last, the Go SDK rejects two). Paddle's SDKs allow 5 seconds
//! of age, and so does this preset; the event id is the signed body's `event_id`. Sources:
//! developer.paddle.com `verify-webhook-signature`, PaddleHQ/paddle-go-sdk
//! `example_webhook_verifier_test.go` (the vector below).

use std::time::Duration;

use crate::scheme::hmac::{self, NoHooks, Preset, Spec, TypeAt};
use crate::scheme::{IdRule, Setup, Verifier};

const SIGNATURE_HEADER: &str = "Paddle-Signature";

pub const PROVIDER: super::Provider = super::Provider::new("paddle", build);

fn build(setup: &mut Setup) -> Result<Box<dyn Verifier>, String> {
    let spec = Spec {
        header: SIGNATURE_HEADER.into(),
        signature_key: Some("h1".into()),
        timestamp_key: Some("ts".into()),
        signed: Some("{timestamp}:{body}".into()),
        ..Spec::default()
    };
    let preset = Preset {
        id: Some(IdRule::pointer("/event_id")),
        signs_id: true,
        event_type: Some(TypeAt::Pointer("/event_type")),
        tolerance: Some(Duration::from_secs(5)),
        ..Preset::default()
    };
    hmac::preset(
        setup,
        spec,
        [SIGNATURE_HEADER, SIGNATURE_HEADER],
        None,
        preset,
        NoHooks,
    )
}

#[cfg(test)]
mod tests {
    use crate::scheme::{Identity, Input, Reject, Verdict, test_headers, test_scheme};

    const SECRET: &str = "pdl_ntfset_01hsdn8d43dt7mezr1ef2jtbaw_hKkRiCGyyRhbFwIUuqiTBgI7gnWoV0Gr";
    const TS: i64 = 1710929255;
    const SIG: &str = "ts=1710929255;h1=6c05ef8fa83c44d751be6d259ec955ce5638e2c54095bf128e408e2fce1589c8";
    pub const BODY: &str = r#"{"data":{"id":"pri_01hsdn96k2hxjzsq5yerecdj9j","name":null,"status":"active","quantity":{"maximum":999999,"minimum":1},"tax_mode":"account_setting","product_id":"pro_01hsdn8qp7yydry3x1yeg6a9rv","unit_price":{"amount":"1000","currency_code":"USD"},"custom_data":null,"description":"testing","import_meta":null,"trial_period":null,"billing_cycle":{"interval":"month","frequency":1},"unit_price_overrides":[]},"event_id":"evt_01hsdn97563968dy0szkmgjwh3","event_type":"price.created","occurred_at":"2024-03-20T10:07:35.590857Z","notification_id":"ntf_01hsdn977e920kbgzt6r6c9rqc"}"#;

    fn verify(sig: &str, now: i64) -> Result<Verdict, Reject> {
        let h = test_headers(&[("Paddle-Signature", sig)]);
        test_scheme("paddle", &[SECRET], "", None).verify(&Input::post(&h, BODY.as_bytes(), now))
    }

    #[test]
    fn published_vector_and_rotation() {
        let event = Ok(Verdict::Event(Identity {
            event_id: "evt_01hsdn97563968dy0szkmgjwh3".into(),
            provider_time: Some(TS),
            event_type: Some("price.created".into()),
        }));
        assert_eq!(verify(SIG, TS), event);
        let (ts, h1) = SIG.split_once(';').unwrap();
        let bad = format!("h1={}", "0".repeat(64));
        assert_eq!(verify(&format!("{ts};{bad};{h1}"), TS), event);
        assert_eq!(verify(&format!("{ts};{h1};{bad}"), TS), event);
        assert_eq!(verify(&format!("{ts};{bad}"), TS), Err(Reject::NoMatch));
    }

    #[test]
    fn five_seconds_of_age_as_paddle_documents() {
        assert!(verify(SIG, TS + 5).is_ok());
        assert_eq!(verify(SIG, TS + 6), Err(Reject::TooOld));
        assert_eq!(verify(SIG, TS - 6), Err(Reject::TooNew));
    }
}
