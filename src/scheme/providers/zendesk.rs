//! Zendesk: `X-Zendesk-Webhook-Signature: <base64>`, HMAC-SHA256 of the timestamp then the
//! raw body, keyed with the webhook's signing secret, where
//! `X-Zendesk-Webhook-Signature-Timestamp` is RFC 3339 (`2021-03-25T05:09:27Z`). Trigger
//! webhooks may use PUT or PATCH, which are served too; GET and DELETE, whose data is in the
//! URL, are not (hookinbox does not store the query yet).
//! The id is `X-Zendesk-Webhook-Invocation-Id`, which the signature does not cover; the
//! signed timestamp limits a replay with a new one to the tolerance. Requests from an
//! unsaved webhook's "Test" button are signed with Zendesk's fixed test secret
//! `dGhpc19zZWNyZXRfaXNfZm9yX3Rlc3Rpbmdfb25seQ==`: add it to `secrets` while testing.
//! (An older docs page gives a vector that verifies only as body + timestamp; the current
//! docs and every implementation sign timestamp + body.) Sources: developer.zendesk.com
//! `verifying-webhook-authenticity`.

use hyper::http::Method;

use crate::scheme::hmac::{self, Encoding, Hooks, Preset, Spec, TimestampFormat};
use crate::scheme::{IdRule, Setup, Verifier};

const SIGNATURE_HEADER: &str = "X-Zendesk-Webhook-Signature";
const TIMESTAMP_HEADER: &str = "X-Zendesk-Webhook-Signature-Timestamp";

pub const PROVIDER: super::Provider = super::Provider {
    // developer.zendesk.com `public_ips`: `GET /ips` on any Zendesk subdomain, anonymous,
    // answers `egress.all`, "the list of IPs Zendesk will connect to your systems" from
    // (CIDR text). The endpoint wraps it in `ips` (as scripts that read it show), the
    // reference's schema does not: both are read. Its `specific` list is the account's
    // pod's only, and changes when the account moves: not used. An account's own
    // subdomain can be set in `[server.allow_lists]`.
    addresses: Some(super::Addresses {
        url: "https://support.zendesk.com/ips",
        what: "the `egress` addresses of Zendesk's public IPs API",
        parse: |body| {
            super::ranges_at(body, &["ips", "egress", "all"])
                .or_else(|wrapped| super::ranges_at(body, &["egress", "all"]).map_err(|_| wrapped))
        },
    }),
    ..super::Provider::new("zendesk", build)
};

fn build(setup: &mut Setup) -> Result<Box<dyn Verifier>, String> {
    let spec = Spec {
        header: SIGNATURE_HEADER.into(),
        encoding: Encoding::Base64,
        timestamp_header: Some(TIMESTAMP_HEADER.into()),
        timestamp_format: TimestampFormat::Rfc3339,
        signed: Some("{timestamp}{body}".into()),
        ..Spec::default()
    };
    let preset = Preset {
        id: Some(IdRule::header("x-zendesk-webhook-invocation-id")),
        ..Preset::default()
    };
    hmac::preset(
        setup,
        spec,
        [SIGNATURE_HEADER, TIMESTAMP_HEADER],
        None,
        preset,
        Methods,
    )
}

/// Trigger webhooks may use these with a body. (GET and DELETE carry their data in the
/// URL, which hookinbox does not store yet, so they are not served.)
#[derive(Debug)]
struct Methods;

impl Hooks for Methods {
    fn methods(&self) -> &'static [Method] {
        &[Method::POST, Method::PUT, Method::PATCH]
    }
}

#[cfg(test)]
mod tests {
    use crate::scheme::{Input, Reject, Verdict, test_headers, test_scheme};
    use base64::Engine as _;
    use ring::hmac;

    const SECRET: &str = "zendesk-signing-secret";

    fn sig(ts: &str, body: &[u8]) -> String {
        let key = hmac::Key::new(hmac::HMAC_SHA256, SECRET.as_bytes());
        let tag = hmac::sign(&key, &[ts.as_bytes(), body].concat());
        base64::engine::general_purpose::STANDARD.encode(tag.as_ref())
    }

    #[test]
    fn timestamp_then_body_rfc3339_any_method() {
        let s = test_scheme("zendesk", &[SECRET], "", None);
        let ts = "2021-03-25T05:09:27Z";
        let body = br#"{"say": "hello"}"#;
        let h = test_headers(&[
            ("X-Zendesk-Webhook-Signature", &sig(ts, body)),
            ("X-Zendesk-Webhook-Signature-Timestamp", ts),
            ("X-Zendesk-Webhook-Invocation-Id", "inv-1"),
        ]);
        let now = 1_616_648_967;
        match s.verify(&Input::post(&h, body, now)) {
            Ok(Verdict::Event(i)) => assert_eq!(i.event_id, "inv-1"),
            other => panic!("{other:?}"),
        }
        // Body + timestamp, the order of the old docs' sample, does not verify.
        let old = sig("", &[&body[..], ts.as_bytes()].concat());
        let h2 = test_headers(&[
            ("X-Zendesk-Webhook-Signature", &old),
            ("X-Zendesk-Webhook-Signature-Timestamp", ts),
            ("X-Zendesk-Webhook-Invocation-Id", "inv-1"),
        ]);
        assert_eq!(s.verify(&Input::post(&h2, body, now)), Err(Reject::NoMatch));
        assert_eq!(s.verify(&Input::post(&h, body, now + 301)), Err(Reject::TooOld));
        // A PUT trigger.
        let h3 = test_headers(&[
            ("X-Zendesk-Webhook-Signature", &sig(ts, body)),
            ("X-Zendesk-Webhook-Signature-Timestamp", ts),
            ("X-Zendesk-Webhook-Invocation-Id", "inv-2"),
        ]);
        let mut put = Input::post(&h3, body, now);
        put.method = &hyper::http::Method::PUT;
        assert!(s.verify(&put).is_ok());
        assert!(!s.verifier().methods().contains(&hyper::http::Method::GET));
    }
}
