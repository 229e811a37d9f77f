//! Slack: `X-Slack-Signature: v0=<lowercase hex>`, HMAC-SHA256 of `v0:{ts}:{raw body}` keyed
//! with the app's signing secret, where `ts` is `X-Slack-Request-Timestamp`. The window is
//! symmetric, as in `slack_sdk` (Bolt checks only the past). Events API deliveries carry their
//! id at `/event_id`; the `url_verification` handshake is answered with its challenge, after
//! the signature check, and never stored. Sources: docs.slack.dev
//! `verifying-requests-from-slack`, `slack_sdk/signature/__init__.py`.

use hyper::http::HeaderName;
use ring::hmac;

use crate::scheme::keys::Keys;
use crate::scheme::{
    Ctx, Draft, Handshake, Horizon, IdRule, Identity, Input, Reject, Reply, Sample, Setup,
    Verdict, Verifier, value,
};

const SIGNATURE_HEADER: &str = "X-Slack-Signature";
const TIMESTAMP_HEADER: &str = "X-Slack-Request-Timestamp";
/// The only version Slack has defined; Bolt refuses any other.
const VERSION: &str = "v0";

pub const PROVIDER: super::Provider = super::Provider::new("slack", build);

fn build(setup: &mut Setup) -> Result<Box<dyn Verifier>, String> {
    Ok(Box::new(Slack {
        keys: Keys::raw(hmac::HMAC_SHA256, &setup.secrets()?),
    }))
}

#[derive(Debug)]
struct Slack {
    keys: Keys,
}

impl Verifier for Slack {
    fn verify(&self, input: &Input, ctx: &Ctx) -> Result<Verdict, Reject> {
        let signature = crate::scheme::header(input.headers, SIGNATURE_HEADER)?;
        let ts_text = crate::scheme::header(input.headers, TIMESTAMP_HEADER)?;
        let tag = signature
            .strip_prefix(VERSION)
            .and_then(|rest| rest.strip_prefix('='))
            .and_then(|hex_tag| hex::decode(hex_tag).ok())
            .ok_or(Reject::MalformedHeader(SIGNATURE_HEADER))?;
        let ts = crate::scheme::parse_timestamp(ts_text, TIMESTAMP_HEADER)?;
        ctx.check_time(ts, input.now)?;
        if !self.keys.any_matches(&signed(ts_text, input.body), &tag) {
            return Err(Reject::NoMatch);
        }

        // Slash commands and interactivity send form bodies: those are not JSON, and get an
        // id only from a configured rule.
        let json = crate::scheme::json::text;
        if json(input.body, "/type").as_deref() == Some("url_verification") {
            let challenge = json(input.body, "/challenge").ok_or(Reject::BadBody(
                "url_verification without a challenge string",
            ))?;
            let answer = serde_json::json!({ "challenge": challenge });
            return Handshake::verdict("url_verification", Reply::json(&answer));
        }
        let event_type = crate::scheme::json_str(input.body, "/event/type")
            .or_else(|| crate::scheme::json_str(input.body, "/type"));
        Ok(Verdict::Event(Identity {
            event_id: ctx.event_id(input, &IdRule::pointer("/event_id"))?,
            provider_time: Some(ts),
            event_type,
        }))
    }

    /// The headers Slack would send, like `slack_sdk`'s
    /// `SignatureVerifier.generate_signature`.
    fn sign(&self, draft: &Draft) -> Sample {
        let ts = draft.now.to_string();
        let tag = self.keys.sign(&signed(&ts, draft.body));
        Sample::post(
            vec![
                (HeaderName::from_static("x-slack-request-timestamp"), value(&ts)),
                (
                    HeaderName::from_static("x-slack-signature"),
                    value(&format!("{VERSION}={}", hex::encode(tag))),
                ),
            ],
            draft.body,
        )
    }

    fn sign_handshake(&self, draft: &Draft) -> Option<Sample> {
        let body = serde_json::json!({
            "token": "Jhj5dZrVaK7ZwHHjRyZWjbDl",
            "challenge": draft.id,
            "type": "url_verification",
        })
        .to_string();
        Some(self.sign(&Draft {
            body: body.as_bytes(),
            ..*draft
        }))
    }

    fn signs_timestamp(&self) -> bool {
        true
    }

    fn signs_id(&self) -> bool {
        true
    }

    fn default_id(&self) -> Option<IdRule> {
        Some(IdRule::pointer("/event_id"))
    }

    fn redelivery(&self) -> Option<Horizon> {
        Some(Horizon {
            within: std::time::Duration::from_secs(3600),
            why: "Slack's retries",
        })
    }
}

/// `v0:{ts}:{body}`, with `ts` exactly as sent.
fn signed(ts: &str, body: &[u8]) -> Vec<u8> {
    let mut signed = Vec::with_capacity(VERSION.len() + ts.len() + 2 + body.len());
    signed.extend_from_slice(VERSION.as_bytes());
    signed.push(b':');
    signed.extend_from_slice(ts.as_bytes());
    signed.push(b':');
    signed.extend_from_slice(body);
    signed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheme::{Scheme, test_scheme};
    use hyper::http::HeaderMap;

    fn scheme(secrets: &[&str]) -> Scheme {
        let secrets: Vec<&str> = secrets.to_vec();
        test_scheme("slack", &secrets, "", None)
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        crate::scheme::test_headers(pairs)
    }

    // The docs example, reproduced in slack_sdk's test_signature_verifier.py: a slash command.
    const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
    const TS: i64 = 1531420618;
    const BODY: &[u8] = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    const SIG: &str = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";

    fn verify_at(s: &Scheme, signature: &str, body: &[u8], now: i64) -> Result<Verdict, Reject> {
        let h = headers(&[
            ("X-Slack-Signature", signature),
            ("X-Slack-Request-Timestamp", "1531420618"),
        ]);
        s.verify(&Input::post(&h, body, now))
    }

    /// Headers signed with `secret` at TS.
    fn signed_headers(secret: &str, body: &[u8]) -> HeaderMap {
        scheme(&[secret])
            .sign_post(body, "ignored", TS)
            .headers
            .into_iter()
            .collect()
    }

    #[test]
    fn published_vector_signs_and_verifies() {
        let s = scheme(&[SECRET]);
        assert_eq!(
            s.sign_post(BODY, "ignored", TS).headers,
            vec![
                (
                    HeaderName::from_static("x-slack-request-timestamp"),
                    value("1531420618")
                ),
                (HeaderName::from_static("x-slack-signature"), value(SIG)),
            ]
        );
        // Authentic, but a slash command has no event id: refused as unusable (400), not as
        // unauthenticated (401).
        let err = verify_at(&s, SIG, BODY, TS).unwrap_err();
        assert_eq!(
            err,
            Reject::BadBody("body is not JSON, so the event id cannot be read")
        );
        assert!(!err.is_auth());
    }

    #[test]
    fn events_api_id_and_type() {
        let s = scheme(&[SECRET]);
        let body =
            br#"{"type":"event_callback","event_id":"Ev08MFMKH6","event":{"type":"app_mention"}}"#;
        let v = s.verify(&Input::post(&signed_headers(SECRET, body), body, TS));
        assert_eq!(
            v,
            Ok(Verdict::Event(Identity {
                event_id: "Ev08MFMKH6".into(),
                provider_time: Some(TS),
                event_type: Some("app_mention".into()),
            }))
        );
        let body = br#"{"type":"app_rate_limited","event_id":"Ev2"}"#;
        let v = s
            .verify(&Input::post(&signed_headers(SECRET, body), body, TS))
            .unwrap();
        let Verdict::Event(identity) = v else {
            panic!("{v:?}")
        };
        assert_eq!(identity.event_type.as_deref(), Some("app_rate_limited"));
    }

    #[test]
    fn url_verification_is_answered_after_the_signature() {
        let s = scheme(&[SECRET]);
        let body = br#"{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
        let v = s.verify(&Input::post(&signed_headers(SECRET, body), body, TS));
        assert_eq!(
            v,
            Handshake::verdict(
                "url_verification",
                Reply::json(&serde_json::json!({
                    "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"
                }))
            )
        );
        // Never answered for a forged request.
        let forged = s.verify(&Input::post(&signed_headers("other", body), body, TS));
        assert_eq!(forged, Err(Reject::NoMatch));
        // Authentic but without a challenge.
        let body = br#"{"type":"url_verification","challenge":7}"#;
        let v = s.verify(&Input::post(&signed_headers(SECRET, body), body, TS));
        assert_eq!(
            v,
            Err(Reject::BadBody(
                "url_verification without a challenge string"
            ))
        );
    }

    #[test]
    fn rotation_either_secret_works() {
        for secrets in [[SECRET, "old"], ["old", SECRET]] {
            let err = verify_at(&scheme(&secrets), SIG, BODY, TS).unwrap_err();
            assert!(!err.is_auth(), "{err:?}");
        }
    }

    #[test]
    fn missing_headers() {
        let s = scheme(&[SECRET]);
        let only_sig = headers(&[("X-Slack-Signature", SIG)]);
        let v = s.verify(&Input::post(&only_sig, BODY, TS));
        assert_eq!(v, Err(Reject::MissingHeader("X-Slack-Request-Timestamp")));
        let only_ts = headers(&[("X-Slack-Request-Timestamp", "1531420618")]);
        let v = s.verify(&Input::post(&only_ts, BODY, TS));
        assert_eq!(v, Err(Reject::MissingHeader("X-Slack-Signature")));
    }

    #[test]
    fn malformed_headers() {
        let s = scheme(&[SECRET]);
        let hex = &SIG[3..];
        for sig in [
            hex.to_owned(),
            format!("v1={hex}"),
            "v0=xyz".into(),
            format!("v0={hex},v0={hex}"),
        ] {
            assert_eq!(
                verify_at(&s, &sig, BODY, TS),
                Err(Reject::MalformedHeader("X-Slack-Signature")),
                "{sig}"
            );
        }
        for ts in ["", "soon", "1531420618.5", "-1531420618"] {
            let h = headers(&[
                ("X-Slack-Signature", SIG),
                ("X-Slack-Request-Timestamp", ts),
            ]);
            let v = s.verify(&Input::post(&h, BODY, TS));
            assert_eq!(
                v,
                Err(Reject::MalformedHeader("X-Slack-Request-Timestamp")),
                "{ts}"
            );
        }
    }

    #[test]
    fn wrong_secret_and_flipped_character() {
        assert_eq!(
            verify_at(
                &scheme(&["8f742231b10e8888abcd99yyyzzz85a6"]),
                SIG,
                BODY,
                TS
            ),
            Err(Reject::NoMatch)
        );
        let s = scheme(&[SECRET]);
        let flipped = SIG.replace("b503", "b502");
        assert_eq!(verify_at(&s, &flipped, BODY, TS), Err(Reject::NoMatch));
        assert_eq!(
            verify_at(&s, SIG, &BODY[..BODY.len() - 1], TS),
            Err(Reject::NoMatch)
        );
    }

    #[test]
    fn window_is_enforced_both_ways_before_the_signature() {
        let s = scheme(&[SECRET]);
        let authentic = |now| verify_at(&s, SIG, BODY, now).map_err(|e| e.is_auth());
        assert_eq!(authentic(TS + 300), Err(false));
        assert_eq!(verify_at(&s, SIG, BODY, TS + 301), Err(Reject::TooOld));
        assert_eq!(authentic(TS - 300), Err(false));
        assert_eq!(verify_at(&s, SIG, BODY, TS - 301), Err(Reject::TooNew));
        let wrong = format!("v0={}", "0".repeat(64));
        assert_eq!(verify_at(&s, &wrong, BODY, TS + 301), Err(Reject::TooOld));
    }

    #[test]
    fn sign_then_verify_round_trip() {
        let s = scheme(&["round trip"]);
        let body = br#"{"type":"event_callback","event_id":"Ev-round","event":{"type":"message"}}"#;
        let mut h = HeaderMap::new();
        for (k, v) in s.sign_post(body, "ignored", 1_800_000_000).headers {
            h.insert(k, v);
        }
        let v = s.verify(&Input::post(&h, body, 1_800_000_000));
        assert_eq!(
            v,
            Ok(Verdict::Event(Identity {
                event_id: "Ev-round".into(),
                provider_time: Some(1_800_000_000),
                event_type: Some("message".into()),
            }))
        );
    }
}
