//! GitLab: `X-Gitlab-Token` carries the shared secret token itself; nothing is signed, so
//! there is no timestamp and the body is not authenticated beyond TLS.
//!
//! The token must still be compared in constant time, and this module only sees prepared
//! `hmac::Key`s, each keyed with one configured token (see `key_for` in the parent module).
//! So the presented token is turned into a key too, and both keys MAC the fixed
//! [`TOKEN_CHECK_MSG`]: equal tags mean equal tokens, because HMAC-SHA256 is a PRF, and
//! `hmac::verify` compares the tags in constant time. (HMAC pads keys shorter than its block
//! with zeros and hashes longer ones, so a token equals itself plus trailing NULs or its own
//! SHA-256; neither can be sent in a header without already knowing the token.)
//!
//! The event id is `Idempotency-Key` (the same across retries, GitLab ≥ 17.4), else
//! `X-Gitlab-Event-UUID`. Sources: docs.gitlab.com `user/project/integrations/webhooks`.

use hyper::http::{HeaderName, HeaderValue};
use ring::hmac;

use super::standard_webhooks::value;
use super::{Ctx, IdRule, Identity, Input, Reject, Verdict};
use crate::secret::Secret;

/// The header with the secret token. Also listed by `Kind::secret_headers`, so it is never
/// stored or forwarded.
pub const TOKEN_HEADER: &str = "X-Gitlab-Token";

/// What the configured and the presented token both MAC. Any fixed text works; a versioned
/// label keeps it from being mistaken for a secret.
const TOKEN_CHECK_MSG: &[u8] = b"hookinbox gitlab token check v1";

/// Lowercase, as `HeaderName::from_static` requires.
const IDEMPOTENCY_HEADER: &str = "idempotency-key";
const EVENT_UUID_HEADER: &str = "x-gitlab-event-uuid";
const EVENT_HEADER: &str = "X-Gitlab-Event";

pub fn verify(input: &Input, ctx: &Ctx) -> Result<Verdict, Reject> {
    let presented = super::header(input.headers, TOKEN_HEADER)?;
    // An empty key is all zeros to HMAC, like a token of NULs; GitLab never sends one.
    if presented.is_empty() {
        return Err(Reject::MalformedHeader(TOKEN_HEADER));
    }
    let tag = hmac::sign(
        &hmac::Key::new(hmac::HMAC_SHA256, presented.as_bytes()),
        TOKEN_CHECK_MSG,
    );
    if !ctx.any_key_matches(TOKEN_CHECK_MSG, tag.as_ref()) {
        return Err(Reject::NoMatch);
    }
    // Older GitLab sends no Idempotency-Key; its Event UUID is then the best id there is.
    let default_name = if input.headers.contains_key(IDEMPOTENCY_HEADER) {
        IDEMPOTENCY_HEADER
    } else {
        EVENT_UUID_HEADER
    };
    let default = IdRule::Header(HeaderName::from_static(default_name));
    Ok(Verdict::Event(Identity {
        event_id: ctx.event_id(input, &default)?,
        provider_time: None,
        event_type: super::optional_header(input.headers, EVENT_HEADER),
    }))
}

/// The headers GitLab would send: the token itself, and `id` under `id_header` (the source's
/// configured id header) or else `X-Gitlab-Event-UUID`.
pub fn sign(
    secret: &Secret,
    id: &str,
    id_header: Option<&HeaderName>,
) -> Vec<(HeaderName, HeaderValue)> {
    let mut token = HeaderValue::from_bytes(secret.expose())
        .unwrap_or_else(|_| HeaderValue::from_static("invalid"));
    // Keeps the token out of HTTP/2 header compression tables, should this value ever be sent.
    token.set_sensitive(true);
    let id_header = id_header
        .cloned()
        .unwrap_or(HeaderName::from_static(EVENT_UUID_HEADER));
    vec![
        (HeaderName::from_static("x-gitlab-token"), token),
        (id_header, value(id)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheme::{Kind, Scheme};
    use hyper::http::HeaderMap;
    use std::time::Duration;

    fn scheme(secrets: &[&str], id: Option<IdRule>) -> Scheme {
        let secrets = secrets.iter().map(|s| Secret::new(*s)).collect();
        Scheme::new(Kind::Gitlab, secrets, Duration::from_secs(300), id).unwrap()
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
        s.verify(&Input {
            headers: &h,
            body: BODY,
            now: NOW,
        })
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
        let v = s.verify(&Input {
            headers: &h,
            body: BODY,
            now: NOW,
        });
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
        let v = s.verify(&Input {
            headers: &twice,
            body: BODY,
            now: NOW,
        });
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
            s.verify(&Input {
                headers: &h,
                body: BODY,
                now: NOW
            }),
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
            s.verify(&Input {
                headers: &h,
                body: BODY,
                now: NOW
            }),
            Ok(event("hook-1", None))
        );
    }

    #[test]
    fn authentic_without_any_id_is_a_bad_request() {
        let s = scheme(&[TOKEN], None);
        let h = headers(&[("X-Gitlab-Token", TOKEN)]);
        let v = s.verify(&Input {
            headers: &h,
            body: BODY,
            now: NOW,
        });
        assert_eq!(v, Err(Reject::NoEventId("id header missing")));
    }

    #[test]
    fn sign_then_verify_round_trip() {
        let s = scheme(&[TOKEN], None);
        let signed = s.sign(BODY, "uuid-round", NOW);
        assert!(signed[0].1.is_sensitive());
        let h: HeaderMap = signed.into_iter().collect();
        assert_eq!(h.get("x-gitlab-token").unwrap(), TOKEN);
        assert_eq!(
            s.verify(&Input {
                headers: &h,
                body: BODY,
                now: NOW
            }),
            Ok(event("uuid-round", None))
        );
    }
}
