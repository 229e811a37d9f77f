//! GitLab: `X-Gitlab-Token` carries the shared secret token itself; nothing is signed, so
//! there is no timestamp and the body is not authenticated beyond TLS. The token is compared
//! in constant time (`keys::Tokens`) and never stored or forwarded.
//!
//! The event id is `Idempotency-Key` (the same across retries, GitLab ≥ 17.4), else
//! `X-Gitlab-Event-UUID`. Sources: docs.gitlab.com `user/project/integrations/webhooks`.

use hyper::http::HeaderName;

use crate::scheme::hmac::{Preset, TypeAt};
use crate::scheme::token::{Carrier, Token, TokenCheck};
use crate::scheme::{Horizon, IdRule, Setup, Verifier};

/// Lowercase, as `HeaderName::from_static` requires.
const TOKEN_HEADER: &str = "x-gitlab-token";
const IDEMPOTENCY_HEADER: &str = "idempotency-key";
const EVENT_UUID_HEADER: &str = "x-gitlab-event-uuid";

pub const PROVIDER: super::Provider = super::Provider::new("gitlab", build);

fn build(setup: &mut Setup) -> Result<Box<dyn Verifier>, String> {
    let carrier = Carrier::Header {
        name: HeaderName::from_static(TOKEN_HEADER),
        label: "X-Gitlab-Token",
        prefix: String::new(),
    };
    let preset = Preset {
        // Older GitLab sends no Idempotency-Key; its Event UUID is then the best id there is.
        id: Some(IdRule::FirstOf(vec![
            IdRule::header(IDEMPOTENCY_HEADER),
            IdRule::header(EVENT_UUID_HEADER),
        ])),
        event_type: Some(TypeAt::Header("X-Gitlab-Event")),
        redelivery: Horizon::days(1, "GitLab's retries and manual resends"),
        ..Preset::default()
    };
    Ok(Box::new(Token::new(TokenCheck::new(setup, carrier)?, preset)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheme::{Identity, Input, Reject, Scheme, Verdict, test_scheme};
    use hyper::http::HeaderMap;

    fn scheme(secrets: &[&str], id: Option<IdRule>) -> Scheme {
        let secrets: Vec<&str> = secrets.to_vec();
        test_scheme("gitlab", &secrets, "", id)
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        crate::scheme::test_headers(pairs)
    }

    const TOKEN: &str = "glwht-3x4mpl3-t0k3n";
    const UUID: &str = "b9e0c16c-6b3d-4a57-9fd4-8a7ea5d5c3c1";
    const KEY: &str = "7d3f0c2e-0d5e-4f44-9a5e-0b8d9f1c2a11";
    const BODY: &[u8] = br#"{"object_kind":"push"}"#;
    const NOW: i64 = 1_800_000_000;

    fn verify(s: &Scheme, token: &str) -> Result<Verdict, Reject> {
        let h = headers(&[
            ("X-Gitlab-Token", token),
            ("X-Gitlab-Event-UUID", UUID),
            ("X-Gitlab-Event", "Push Hook"),
        ]);
        s.verify(&Input::post(&h, BODY, NOW))
    }

    fn event(id: &str, event_type: Option<&str>) -> Verdict {
        Verdict::Event(Identity {
            event_id: id.into(),
            provider_time: None,
            event_type: event_type.map(Into::into),
        })
    }

    #[test]
    fn the_configured_token_is_accepted() {
        assert_eq!(
            verify(&scheme(&[TOKEN], None), TOKEN),
            Ok(event(UUID, Some("Push Hook")))
        );
    }

    #[test]
    fn rotation_either_token_works() {
        assert!(verify(&scheme(&["old-token", TOKEN], None), TOKEN).is_ok());
        assert!(verify(&scheme(&[TOKEN, "old-token"], None), TOKEN).is_ok());
        assert!(verify(&scheme(&[TOKEN, "old-token"], None), "old-token").is_ok());
    }

    #[test]
    fn any_other_token_is_refused() {
        let s = scheme(&[TOKEN], None);
        let flipped = TOKEN.replace("t0k3n", "t0k3m");
        let longer = format!("{TOKEN}x");
        let padded = format!(" {TOKEN}");
        for token in [
            flipped.as_str(),
            &TOKEN[..TOKEN.len() - 1],
            &longer,
            &padded,
            &TOKEN.to_uppercase(),
        ] {
            assert_eq!(verify(&s, token), Err(Reject::NoMatch), "{token}");
        }
    }

    #[test]
    fn missing_and_malformed_token() {
        let s = scheme(&[TOKEN], None);
        let h = headers(&[("X-Gitlab-Event-UUID", UUID)]);
        let v = s.verify(&Input::post(&h, BODY, NOW));
        assert_eq!(v, Err(Reject::MissingHeader("X-Gitlab-Token")));
        assert_eq!(
            verify(&s, ""),
            Err(Reject::MalformedHeader("X-Gitlab-Token"))
        );
        let twice = headers(&[
            ("X-Gitlab-Token", TOKEN),
            ("X-Gitlab-Token", TOKEN),
            ("X-Gitlab-Event-UUID", UUID),
        ]);
        let v = s.verify(&Input::post(&twice, BODY, NOW));
        assert_eq!(v, Err(Reject::MalformedHeader("X-Gitlab-Token")));
    }

    #[test]
    fn idempotency_key_wins_over_event_uuid() {
        let s = scheme(&[TOKEN], None);
        let h = headers(&[
            ("X-Gitlab-Token", TOKEN),
            ("X-Gitlab-Event-UUID", UUID),
            ("Idempotency-Key", KEY),
        ]);
        assert_eq!(
            s.verify(&Input::post(&h, BODY, NOW)),
            Ok(event(KEY, None))
        );
    }

    #[test]
    fn configured_id_rule_overrides_both() {
        let rule = IdRule::Header(HeaderName::from_static("x-gitlab-webhook-uuid"));
        let s = scheme(&[TOKEN], Some(rule));
        let h = headers(&[
            ("X-Gitlab-Token", TOKEN),
            ("X-Gitlab-Event-UUID", UUID),
            ("Idempotency-Key", KEY),
            ("X-Gitlab-Webhook-UUID", "hook-1"),
        ]);
        assert_eq!(
            s.verify(&Input::post(&h, BODY, NOW)),
            Ok(event("hook-1", None))
        );
    }

    #[test]
    fn authentic_without_any_id_is_a_bad_request() {
        let s = scheme(&[TOKEN], None);
        let h = headers(&[("X-Gitlab-Token", TOKEN)]);
        let v = s.verify(&Input::post(&h, BODY, NOW));
        assert_eq!(v, Err(Reject::NoEventId("id header missing")));
    }

    #[test]
    fn sign_then_verify_round_trip() {
        let s = scheme(&[TOKEN], None);
        let signed = s.sign_post(BODY, "uuid-round", NOW).headers;
        assert!(signed[0].1.is_sensitive());
        let h: HeaderMap = signed.into_iter().collect();
        assert_eq!(h.get("x-gitlab-token").unwrap(), TOKEN);
        assert_eq!(
            s.verify(&Input::post(&h, BODY, NOW)),
            Ok(event("uuid-round", None))
        );
    }
}
