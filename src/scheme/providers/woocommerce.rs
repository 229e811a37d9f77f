//! WooCommerce: `X-WC-Webhook-Signature: <base64>`, HMAC-SHA256 of the raw body keyed with
//! the webhook's secret. Saving a webhook, WooCommerce sends an unsigned ping, a form body
//! `webhook_id=<N>` without the signature header, and needs exactly 200: it is answered and
//! not stored (it proves nothing, so it gets nothing but the 200). WooCommerce's delivery id
//! is new on every delivery, even a manual resend, so the id is the SHA-256 of the body: a
//! resend of the same resource state is a duplicate, a change is a new event. WooCommerce
//! does not retry on its own. Sources: woocommerce `includes/class-wc-webhook.php`.

use hyper::http::StatusCode;

use crate::scheme::hmac::{self, Encoding, Engine, Hooks, Preset, Spec, TypeAt};
use crate::scheme::{Draft, Handshake, IdRule, Input, Reject, Reply, Sample, Setup, Verdict, Verifier};

const SIGNATURE_HEADER: &str = "X-WC-Webhook-Signature";

pub const PROVIDER: super::Provider = super::Provider::new("woocommerce", build);

fn build(setup: &mut Setup) -> Result<Box<dyn Verifier>, String> {
    let spec = Spec {
        header: SIGNATURE_HEADER.into(),
        encoding: Encoding::Base64,
        ..Spec::default()
    };
    let preset = Preset {
        id: Some(IdRule::BodySha256),
        signs_id: true,
        event_type: Some(TypeAt::Header("X-WC-Webhook-Topic")),
        ..Preset::default()
    };
    hmac::preset(
        setup,
        spec,
        [SIGNATURE_HEADER, SIGNATURE_HEADER],
        None,
        preset,
        Ping,
    )
}

#[derive(Debug)]
struct Ping;

/// `webhook_id=<digits>`, the whole body.
fn is_ping(body: &[u8]) -> bool {
    body.strip_prefix(b"webhook_id=")
        .is_some_and(|n| !n.is_empty() && n.len() <= 20 && n.iter().all(u8::is_ascii_digit))
}

impl Hooks for Ping {
    fn unsigned(&self, input: &Input, _engine: &Engine) -> Option<Result<Verdict, Reject>> {
        if input.headers.contains_key(SIGNATURE_HEADER) || !is_ping(input.body) {
            return None;
        }
        let mut reply = Reply::text("ok\n");
        reply.status = StatusCode::OK;
        Some(Handshake::verdict("ping", reply))
    }

    fn sign_handshake(&self, _engine: &Engine, _draft: &Draft) -> Option<Sample> {
        let content_type = (
            hyper::header::CONTENT_TYPE,
            hyper::http::HeaderValue::from_static("application/x-www-form-urlencoded"),
        );
        Some(Sample::post(vec![content_type], b"webhook_id=1"))
    }
}

#[cfg(test)]
mod tests {
    use super::is_ping;
    use crate::scheme::{Input, Reject, Verdict, test_headers, test_scheme};

    #[test]
    fn the_unsigned_ping_is_answered_and_nothing_else_unsigned() {
        let s = test_scheme("woocommerce", &["woo-secret"], "", None);
        let none = test_headers(&[]);
        assert!(matches!(s.verify(&Input::post(&none, b"webhook_id=42", 0)), Ok(Verdict::Handshake(_))));
        for body in [&b"webhook_id="[..], b"webhook_id=4x", b"{\"id\":1}", b"webhook_id=1&x=2"] {
            assert!(!is_ping(body));
            assert_eq!(
                s.verify(&Input::post(&none, body, 0)),
                Err(Reject::MissingHeader("X-WC-Webhook-Signature"))
            );
        }
        let body = br#"{"id":7,"status":"processing"}"#;
        let h: hyper::http::HeaderMap = s.sign_post(body, "", 0).headers.into_iter().collect();
        assert!(matches!(s.verify(&Input::post(&h, body, 0)), Ok(Verdict::Event(_))));
        // A signed request whose body looks like a ping is an ordinary, checked request.
        let sig = test_headers(&[("X-WC-Webhook-Signature", "AAAA")]);
        assert_eq!(s.verify(&Input::post(&sig, b"webhook_id=42", 0)), Err(Reject::NoMatch));
    }
}
