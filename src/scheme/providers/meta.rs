//! Meta (Facebook, Instagram, WhatsApp Cloud API, Messenger): `X-Hub-Signature-256:
//! sha256=<hex>`, HMAC-SHA256 of the raw body keyed with the app secret.
//!
//! Subscribing, Meta sends `GET ?hub.mode=subscribe&hub.verify_token=T&hub.challenge=C`:
//! when T is the configured `verify_token` (compared in constant time) the challenge is
//! echoed as `text/plain`; any other token is refused 401. Meta batches changes in
//! `entry[]` and sends no event id, so the id is the SHA-256 of the body. Sources:
//! developers.facebook.com `graph-api/webhooks/getting-started`.

use hyper::http::Method;
use serde::Deserialize;

use crate::scheme::hmac::{self, Engine, Hooks, Preset, Spec, TypeAt};
use crate::scheme::keys::same_token;
use crate::scheme::{
    Draft, Handshake, Horizon, IdRule, Input, Reject, Reply, Sample, Setup, Verdict, Verifier,
};
use crate::secret::Secret;

const SIGNATURE_HEADER: &str = "X-Hub-Signature-256";

pub const PROVIDER: super::Provider = super::Provider::new("meta", build);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Settings {
    /// The token typed into the app's webhook settings; a secret reference like `secrets`.
    verify_token: Option<String>,
}

fn build(setup: &mut Setup) -> Result<Box<dyn Verifier>, String> {
    let settings: Settings = setup.settings()?;
    let reference = settings.verify_token.ok_or_else(|| {
        format!(
            "{}: scheme \"meta\" needs verify_token, the token you type beside the callback URL \
             in the app's webhook settings (a file:, env: or credential: reference, like secrets)",
            setup.at()
        )
    })?;
    let verify_token = setup.secret_setting("verify_token", &reference)?;
    let spec = Spec {
        header: SIGNATURE_HEADER.into(),
        prefix: Some("sha256=".into()),
        ..Spec::default()
    };
    let preset = Preset {
        id: Some(IdRule::BodySha256),
        signs_id: true,
        event_type: Some(TypeAt::Pointer("/object")),
        redelivery: Horizon::days(1, "Meta's retries (up to 36 hours for WhatsApp)"),
        ..Preset::default()
    };
    hmac::preset(
        setup,
        spec,
        [SIGNATURE_HEADER, SIGNATURE_HEADER],
        None,
        preset,
        Subscribe { verify_token },
    )
}

#[derive(Debug)]
struct Subscribe {
    verify_token: Secret,
}

impl Hooks for Subscribe {
    fn unsigned(&self, input: &Input, _engine: &Engine) -> Option<Result<Verdict, Reject>> {
        if *input.method != Method::GET {
            return None;
        }
        if input.query_param("hub.mode").as_deref() != Some("subscribe") {
            return Some(Err(Reject::BadBody("a GET without hub.mode=subscribe")));
        }
        let token = input.query_param("hub.verify_token").unwrap_or_default();
        if !same_token(&self.verify_token, token.as_bytes()) {
            return Some(Err(Reject::BadToken));
        }
        Some(match input.query_param("hub.challenge") {
            Some(challenge) => Handshake::verdict("subscribe", Reply::text(challenge)),
            None => Err(Reject::BadBody("subscribe without hub.challenge")),
        })
    }

    fn methods(&self) -> &'static [Method] {
        &[Method::GET, Method::POST]
    }

    fn sign_handshake(&self, _engine: &Engine, draft: &Draft) -> Option<Sample> {
        let token = String::from_utf8_lossy(self.verify_token.expose());
        let query = form_urlencoded::Serializer::new(String::new())
            .append_pair("hub.mode", "subscribe")
            .append_pair("hub.verify_token", &token)
            .append_pair("hub.challenge", draft.id)
            .finish();
        Some(Sample {
            method: Method::GET,
            query: Some(query),
            headers: Vec::new(),
            body: Vec::new(),
        })
    }

    fn demo_body(&self, id: &str, _now: i64) -> Vec<u8> {
        serde_json::json!({
            "object": "page",
            "entry": [{ "id": "0", "time": 0, "changes": [{ "field": "feed", "value": { "id": id } }] }],
        })
        .to_string()
        .into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use crate::scheme::{Handshake, Input, Reject, Reply, Verdict, test_headers, test_scheme};
    use hyper::http::Method;

    fn scheme() -> crate::scheme::Scheme {
        test_scheme("meta", &["app-secret"], r#"verify_token = "my-verify-token""#, None)
    }

    fn get(query: &str) -> Result<Verdict, Reject> {
        let h = test_headers(&[]);
        let mut input = Input::post(&h, b"", 0);
        input.method = &Method::GET;
        input.query = Some(query);
        scheme().verify(&input)
    }

    #[test]
    fn subscription_challenge_needs_the_verify_token() {
        assert_eq!(
            get("hub.mode=subscribe&hub.verify_token=my-verify-token&hub.challenge=1158201444"),
            Handshake::verdict("subscribe", Reply::text("1158201444"))
        );
        assert_eq!(
            get("hub.mode=subscribe&hub.verify_token=guess&hub.challenge=1158201444"),
            Err(Reject::BadToken)
        );
        assert_eq!(get("hub.mode=subscribe&hub.challenge=1"), Err(Reject::BadToken));
        assert!(get("hub.challenge=1").is_err());
    }

    #[test]
    fn posts_are_signed_batches_under_the_body_hash() {
        let s = scheme();
        let body = br#"{"object":"whatsapp_business_account","entry":[]}"#;
        let h: hyper::http::HeaderMap = s.sign_post(body, "", 0).headers.into_iter().collect();
        match s.verify(&Input::post(&h, body, 0)) {
            Ok(Verdict::Event(i)) => {
                assert!(i.event_id.starts_with("sha256:"));
                assert_eq!(i.event_type.as_deref(), Some("whatsapp_business_account"));
            }
            other => panic!("{other:?}"),
        }
        let h = test_headers(&[("X-Hub-Signature-256", "sha256=00")]);
        assert_eq!(s.verify(&Input::post(&h, body, 0)), Err(Reject::NoMatch));
    }
}
