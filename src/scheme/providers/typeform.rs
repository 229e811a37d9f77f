//! Typeform: `Typeform-Signature: sha256=<base64>`, HMAC-SHA256 of the raw body keyed with
//! the webhook's secret. The id is the signed body's `event_id`. Sources:
//! typeform.com `developers/webhooks/secure-your-webhooks`.

use crate::scheme::hmac::{self, Encoding, NoHooks, Preset, Spec, TypeAt};
use crate::scheme::{IdRule, Setup, Verifier};

const SIGNATURE_HEADER: &str = "Typeform-Signature";

pub const PROVIDER: super::Provider = super::Provider::new("typeform", build);

fn build(setup: &mut Setup) -> Result<Box<dyn Verifier>, String> {
    let spec = Spec {
        header: SIGNATURE_HEADER.into(),
        encoding: Encoding::Base64,
        prefix: Some("sha256=".into()),
        ..Spec::default()
    };
    let preset = Preset {
        id: Some(IdRule::pointer("/event_id")),
        signs_id: true,
        event_type: Some(TypeAt::Pointer("/event_type")),
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
    fn base64_with_a_prefix() {
        let s = test_scheme("typeform", &["tf-secret"], "", None);
        let body = br#"{"event_id":"01HX","event_type":"form_response"}"#;
        let sig = s.sign_post(body, "", 0).header("typeform-signature").unwrap().to_owned();
        assert!(sig.starts_with("sha256=") && sig.ends_with('='), "{sig}");
        let h = test_headers(&[("Typeform-Signature", &sig)]);
        assert!(matches!(s.verify(&Input::post(&h, body, 0)), Ok(Verdict::Event(i)) if i.event_id == "01HX"));
    }
}
