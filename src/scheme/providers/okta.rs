//! Okta event hooks: no signature. Okta sends the authorization header configured on the
//! hook (by default `Authorization: <secret>`) with every request, compared in constant time.
//! Verifying a new hook, Okta sends a one-time `GET` with `X-Okta-Verification-Challenge: V`,
//! answered (after the header check) with `{"verification": "V"}`. The id is the body's
//! `eventId`; the events themselves are in `data.events[]`. Set
//! `token = { header = "X-Other" }` when the hook uses another header. Sources:
//! developer.okta.com `docs/concepts/event-hooks`.

use hyper::http::{HeaderName, Method};
use serde::Deserialize;

use crate::scheme::hmac::{Preset, TypeAt};
use crate::scheme::token::{Carrier, Token, TokenCheck, TokenSpec};
use crate::scheme::{
    Draft, Handshake, IdRule, Input, Reject, Reply, Sample, Setup, Verdict, Verifier, value,
};

const CHALLENGE_HEADER: &str = "x-okta-verification-challenge";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Settings {
    token: Option<TokenSpec>,
}

pub const PROVIDER: super::Provider = super::Provider::new("okta", build);

fn build(setup: &mut Setup) -> Result<Box<dyn Verifier>, String> {
    let settings: Settings = setup.settings()?;
    let carrier = match settings.token {
        Some(spec) => spec.carrier(setup.at())?,
        None => Carrier::Header {
            name: hyper::header::AUTHORIZATION,
            label: "Authorization",
            prefix: String::new(),
        },
    };
    let preset = Preset {
        id: Some(IdRule::pointer("/eventId")),
        event_type: Some(TypeAt::Pointer("/eventType")),
        caveats: &[
            "Okta signs nothing: the authorization header is the only proof, and a captured \
             request can be replayed (a replay with its eventId is a duplicate)",
        ],
        demo_body: Some(|id, _| {
            serde_json::json!({ "eventType": "com.okta.event_hook", "eventId": id,
                                "data": { "events": [] } })
            .to_string()
            .into_bytes()
        }),
        ..Preset::default()
    };
    let mut token = Token::new(TokenCheck::new(setup, carrier)?, preset);
    token.methods = &[Method::GET, Method::POST];
    token.handshake = Some(verification);
    token.sign_handshake = Some(sign_verification);
    Ok(Box::new(token))
}

fn verification(input: &Input) -> Option<Result<Verdict, Reject>> {
    if *input.method != Method::GET {
        return None;
    }
    Some(
        match input.headers.get(CHALLENGE_HEADER).and_then(|v| v.to_str().ok()) {
            Some(challenge) => {
                let answer = serde_json::json!({ "verification": challenge });
                Handshake::verdict("verification", Reply::json(&answer))
            }
            None => Err(Reject::MissingHeader("X-Okta-Verification-Challenge")),
        },
    )
}

fn sign_verification(token: &Token, draft: &Draft) -> Sample {
    Sample {
        method: Method::GET,
        query: None,
        headers: vec![
            token.check.header(),
            (HeaderName::from_static(CHALLENGE_HEADER), value(draft.id)),
        ],
        body: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use crate::scheme::{Handshake, Input, Reject, Reply, Verdict, test_headers, test_scheme};
    use hyper::http::Method;

    #[test]
    fn token_then_verification_challenge() {
        let s = test_scheme("okta", &["okta-shared-secret"], "", None);
        let h = test_headers(&[
            ("Authorization", "okta-shared-secret"),
            ("X-Okta-Verification-Challenge", "2qqPfaDp"),
        ]);
        let mut get = Input::post(&h, b"", 0);
        get.method = &Method::GET;
        assert_eq!(
            s.verify(&get),
            Handshake::verdict(
                "verification",
                Reply::json(&serde_json::json!({ "verification": "2qqPfaDp" }))
            )
        );
        let forged = test_headers(&[("Authorization", "guess"), ("X-Okta-Verification-Challenge", "x")]);
        let mut get = Input::post(&forged, b"", 0);
        get.method = &Method::GET;
        assert_eq!(s.verify(&get), Err(Reject::NoMatch));

        let body = br#"{"eventType":"com.okta.event_hook","eventId":"b5a188b9-5ece-4636-b041-482ffda96311","data":{"events":[]}}"#;
        let post = test_headers(&[("Authorization", "okta-shared-secret")]);
        assert!(matches!(s.verify(&Input::post(&post, body, 0)), Ok(Verdict::Event(i)) if i.event_id == "b5a188b9-5ece-4636-b041-482ffda96311"));
    }
}
