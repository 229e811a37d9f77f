//! Zoom: `x-zm-signature: v0=<hex>`, HMAC-SHA256 of `v0:{x-zm-request-timestamp}:{raw body}`
//! keyed with the app's secret token. The `endpoint.url_validation` event (sent when the
//! endpoint is saved, and every 72 hours) is answered after its signature check with
//! `{"plainToken": P, "encryptedToken": hex(HMAC-SHA256(secret token, P))}` and not stored.
//!
//! Zoom sends no event id: the id is the SHA-256 of the body, so a retry is a duplicate when
//! it repeats the body byte for byte (the timestamp is a header, outside the body). Sources:
//! developers.zoom.us `webhooks#verify-webhook-events`, `#validate-your-webhook-endpoint`.

use hyper::http::Method;

use crate::scheme::hmac::{self, Engine, Hooks, Preset, Spec, TypeAt};
use crate::scheme::{
    Draft, Handshake, IdRule, Input, Reject, Reply, Sample, Setup, Verdict, Verifier,
};

const SIGNATURE_HEADER: &str = "x-zm-signature";
const TIMESTAMP_HEADER: &str = "x-zm-request-timestamp";

pub const PROVIDER: super::Provider = super::Provider::new("zoom", build);

fn build(setup: &mut Setup) -> Result<Box<dyn Verifier>, String> {
    let spec = Spec {
        header: SIGNATURE_HEADER.into(),
        prefix: Some("v0=".into()),
        timestamp_header: Some(TIMESTAMP_HEADER.into()),
        signed: Some("v0:{timestamp}:{body}".into()),
        ..Spec::default()
    };
    let preset = Preset {
        id: Some(IdRule::BodySha256),
        signs_id: true,
        event_type: Some(TypeAt::Pointer("/event")),
        ..Preset::default()
    };
    hmac::preset(
        setup,
        spec,
        [SIGNATURE_HEADER, TIMESTAMP_HEADER],
        None,
        preset,
        UrlValidation,
    )
}

#[derive(Debug)]
struct UrlValidation;

impl Hooks for UrlValidation {
    fn signed(&self, input: &Input, engine: &Engine) -> Option<Result<Verdict, Reject>> {
        if crate::scheme::json::text(input.body, "/event").as_deref() != Some("endpoint.url_validation")
        {
            return None;
        }
        let Some(plain) = crate::scheme::json::text(input.body, "/payload/plainToken") else {
            return Some(Err(Reject::BadBody("url_validation without a plainToken string")));
        };
        let answer = serde_json::json!({
            "plainToken": plain,
            "encryptedToken": engine.mac_hex(plain.as_bytes()),
        });
        Some(Handshake::verdict("url_validation", Reply::json(&answer)))
    }

    fn sign_handshake(&self, engine: &Engine, draft: &Draft) -> Option<Sample> {
        let body = serde_json::json!({
            "payload": { "plainToken": draft.id },
            "event_ts": draft.now * 1000,
            "event": "endpoint.url_validation",
        })
        .to_string();
        let draft = Draft {
            body: body.as_bytes(),
            ..*draft
        };
        Some(engine.sign(&draft, Method::POST, None, Vec::new()))
    }
}

#[cfg(test)]
mod tests {
    use crate::scheme::{Handshake, Input, Reject, Reply, Verdict, test_headers, test_scheme};

    // Derived (reference/providers-catalogue.md A5): Zoom publishes no vector.
    const SECRET: &str = "zoom-secret";

    #[test]
    fn derived_vector_and_url_validation() {
        let s = test_scheme("zoom", &[SECRET], "", None);
        let body = br#"{"event":"meeting.started"}"#;
        let h = test_headers(&[
            ("x-zm-signature", "v0=d705b082281cee2311d2e389868a233b4dd62f901e25efb1fcc5420d63af4067"),
            ("x-zm-request-timestamp", "1700000000"),
        ]);
        match s.verify(&Input::post(&h, body, 1_700_000_000)) {
            Ok(Verdict::Event(i)) => {
                assert!(i.event_id.starts_with("sha256:"));
                assert_eq!(i.event_type.as_deref(), Some("meeting.started"));
            }
            other => panic!("{other:?}"),
        }
        let body = br#"{"payload":{"plainToken":"plain-abc"},"event_ts":1700000000000,"event":"endpoint.url_validation"}"#;
        let sample = s.sign_post(body, "", 1_700_000_000);
        let h: hyper::http::HeaderMap = sample.headers.into_iter().collect();
        assert_eq!(
            s.verify(&Input::post(&h, body, 1_700_000_000)),
            Handshake::verdict(
                "url_validation",
                Reply::json(&serde_json::json!({
                    "plainToken": "plain-abc",
                    "encryptedToken": "455e13e419a3b9b9df8b6242e80f64148e8253aa41c683fffa832507db3364fd",
                }))
            )
        );
        let forged = test_scheme("zoom", &["other"], "", None);
        assert_eq!(forged.verify(&Input::post(&h, body, 1_700_000_000)), Err(Reject::NoMatch));
    }
}
