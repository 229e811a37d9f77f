//! Calendly: `Calendly-Webhook-Signature: t=<unix>,v1=<hex>`, HMAC-SHA256 of
//! `{t}.{raw body}` keyed with the webhook signing key: Stripe's construction under another
//! header. Calendly sends no event id, so the id is the signed body's event name, its
//! invitee (or other resource) URI and its creation time, joined. Calendly suggests a
//! 3-minute window. Sources: developer.calendly.com `webhook-signatures`.

use std::time::Duration;

use crate::scheme::hmac::{self, NoHooks, Preset, Spec, TypeAt};
use crate::scheme::{IdRule, Setup, Verifier};

const SIGNATURE_HEADER: &str = "Calendly-Webhook-Signature";

pub const PROVIDER: super::Provider = super::Provider::new("calendly", build);

fn build(setup: &mut Setup) -> Result<Box<dyn Verifier>, String> {
    let spec = Spec {
        header: SIGNATURE_HEADER.into(),
        signature_key: Some("v1".into()),
        timestamp_key: Some("t".into()),
        signed: Some("{timestamp}.{body}".into()),
        ..Spec::default()
    };
    let preset = Preset {
        id: Some(IdRule::Composite(vec![
            IdRule::pointer("/event"),
            IdRule::pointer("/payload/uri"),
            IdRule::pointer("/created_at"),
        ])),
        signs_id: true,
        event_type: Some(TypeAt::Pointer("/event")),
        tolerance: Some(Duration::from_secs(180)),
        demo_body: Some(|id, _| {
            serde_json::json!({ "event": "invitee.created", "created_at": "2024-05-01T10:00:00.000000Z",
                                "payload": { "uri": format!("https://api.calendly.com/scheduled_events/E/invitees/{id}") } })
            .to_string()
            .into_bytes()
        }),
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
    use crate::scheme::{Input, Reject, Verdict, test_headers, test_scheme};

    const BODY: &[u8] = br#"{"created_at":"2024-05-01T10:00:00.000000Z","created_by":"https://api.calendly.com/users/U1","event":"invitee.created","payload":{"uri":"https://api.calendly.com/scheduled_events/E1/invitees/I1"}}"#;

    #[test]
    fn composite_id_from_the_signed_body() {
        let s = test_scheme("calendly", &["calendly-key"], "", None);
        let sample = s.sign_post(BODY, "ignored", 1_700_000_000);
        let sig = sample.header("calendly-webhook-signature").unwrap();
        assert!(sig.starts_with("t=1700000000,v1="), "{sig}");
        let h = test_headers(&[("Calendly-Webhook-Signature", sig)]);
        match s.verify(&Input::post(&h, BODY, 1_700_000_000 + 180)) {
            Ok(Verdict::Event(i)) => assert_eq!(
                i.event_id,
                "invitee.created:https://api.calendly.com/scheduled_events/E1/invitees/I1:2024-05-01T10:00:00.000000Z"
            ),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            s.verify(&Input::post(&h, BODY, 1_700_000_000 + 181)),
            Err(Reject::TooOld)
        );
    }
}
