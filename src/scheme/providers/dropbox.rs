//! Dropbox: `X-Dropbox-Signature: <hex>`, HMAC-SHA256 of the raw body keyed with the app
//! secret. Enabling the webhook, Dropbox sends `GET ?challenge=C`, which must be echoed as
//! `text/plain` with `X-Content-Type-Options: nosniff`; Dropbox signs nothing there, so any
//! caller can have a challenge echoed (bounded, and never stored). A notification only says
//! which accounts changed and carries no id: the id is the SHA-256 of the body. Sources:
//! dropbox.com `developers/reference/webhooks`; the vector is from npm hapi-dropbox-webhooks.

use hyper::http::Method;

use crate::scheme::hmac::{self, Engine, Hooks, Preset, Spec};
use crate::scheme::{Draft, Handshake, IdRule, Input, Reject, Reply, Sample, Setup, Verdict, Verifier};

const SIGNATURE_HEADER: &str = "X-Dropbox-Signature";
/// Dropbox's challenges are short random strings; anything far longer is not one.
const MAX_CHALLENGE: usize = 1024;

pub const PROVIDER: super::Provider = super::Provider::new("dropbox", build);

fn build(setup: &mut Setup) -> Result<Box<dyn Verifier>, String> {
    let spec = Spec {
        header: SIGNATURE_HEADER.into(),
        ..Spec::default()
    };
    let preset = Preset {
        id: Some(IdRule::BodySha256),
        signs_id: true,
        ..Preset::default()
    };
    hmac::preset(
        setup,
        spec,
        [SIGNATURE_HEADER, SIGNATURE_HEADER],
        None,
        preset,
        Challenge,
    )
}

#[derive(Debug)]
struct Challenge;

impl Hooks for Challenge {
    fn unsigned(&self, input: &Input, _engine: &Engine) -> Option<Result<Verdict, Reject>> {
        if *input.method != Method::GET {
            return None;
        }
        Some(match input.query_param("challenge") {
            // Reply::text carries the X-Content-Type-Options: nosniff Dropbox asks for.
            Some(c) if !c.is_empty() && c.len() <= MAX_CHALLENGE => {
                Handshake::verdict("challenge", Reply::text(c))
            }
            _ => Err(Reject::BadBody("a GET without a challenge")),
        })
    }

    fn methods(&self) -> &'static [Method] {
        &[Method::GET, Method::POST]
    }

    fn sign_handshake(&self, _engine: &Engine, draft: &Draft) -> Option<Sample> {
        Some(Sample {
            method: Method::GET,
            query: Some(format!("challenge={}", draft.id)),
            headers: Vec::new(),
            body: Vec::new(),
        })
    }

    fn demo_body(&self, id: &str, _now: i64) -> Vec<u8> {
        format!(r#"{{"list_folder":{{"accounts":["{id}"]}},"delta":{{"users":[12345]}}}}"#).into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use crate::scheme::{Input, Reject, Verdict, test_headers, test_scheme};
    use hyper::http::Method;

    #[test]
    fn published_vector_and_challenge() {
        let s = test_scheme("dropbox", &["the_secret"], "", None);
        let body = br#"{"delta": {"users": [12345]}}"#;
        let h = test_headers(&[(
            "X-Dropbox-Signature",
            "0a8c16b085420b960dc78664279fe09e936a2a01b1f91064869d9e77dfd64529",
        )]);
        assert!(matches!(s.verify(&Input::post(&h, body, 0)), Ok(Verdict::Event(_))));
        assert_eq!(s.verify(&Input::post(&h, b"{}", 0)), Err(Reject::NoMatch));

        let none = test_headers(&[]);
        let mut get = Input::post(&none, b"", 0);
        get.method = &Method::GET;
        get.query = Some("challenge=abc%20def");
        match s.verify(&get) {
            Ok(Verdict::Handshake(h)) => {
                assert_eq!(h.reply.body, b"abc def");
                assert_eq!(h.reply.content_type, Some("text/plain"));
                assert_eq!(h.reply.headers[0].1, "nosniff");
            }
            other => panic!("{other:?}"),
        }
        let long = format!("challenge={}", "a".repeat(2000));
        get.query = Some(&long);
        assert!(s.verify(&get).is_err());
    }
}
