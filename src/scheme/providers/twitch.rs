//! Twitch EventSub: `Twitch-Eventsub-Message-Signature: sha256=<hex>`, HMAC-SHA256 of the
//! message id, the timestamp and the raw body, concatenated, keyed with the subscription's
//! secret. `Twitch-Eventsub-Message-Timestamp` is RFC 3339 with nanoseconds; Twitch asks
//! receivers to refuse messages older than 10 minutes. The message id is signed and the same
//! on a resend, so it is the event id.
//!
//! The `webhook_callback_verification` message is answered, after its signature check,
//! `200 text/plain` with the raw challenge, and not stored; `revocation` and
//! `notification` messages are events. Sources: dev.twitch.tv `eventsub/handling-webhook-events`,
//! twitch4j `EventSubVerifierTest` (the vector below).

use std::time::Duration;

use hyper::http::HeaderName;

use crate::scheme::hmac::{self, Engine, Hooks, Preset, Spec, TimestampFormat, TypeAt};
use crate::scheme::{
    Draft, Handshake, Horizon, IdRule, Input, Reject, Reply, Sample, Setup, Verdict, Verifier,
    value,
};

const SIGNATURE_HEADER: &str = "Twitch-Eventsub-Message-Signature";
const TIMESTAMP_HEADER: &str = "Twitch-Eventsub-Message-Timestamp";
const ID_HEADER: &str = "twitch-eventsub-message-id";
const TYPE_HEADER: &str = "twitch-eventsub-message-type";

pub const PROVIDER: super::Provider = super::Provider::new("twitch", build);

fn build(setup: &mut Setup) -> Result<Box<dyn Verifier>, String> {
    let spec = Spec {
        header: SIGNATURE_HEADER.into(),
        prefix: Some("sha256=".into()),
        timestamp_header: Some(TIMESTAMP_HEADER.into()),
        timestamp_format: TimestampFormat::Rfc3339,
        signed: Some(format!("{{header:{ID_HEADER}}}{{timestamp}}{{body}}")),
        ..Spec::default()
    };
    let preset = Preset {
        id: Some(IdRule::header(ID_HEADER)),
        signs_id: true,
        event_type: Some(TypeAt::Header("Twitch-Eventsub-Subscription-Type")),
        tolerance: Some(Duration::from_secs(600)),
        redelivery: Horizon::days(1, "Twitch's retries"),
        ..Preset::default()
    };
    hmac::preset(
        setup,
        spec,
        [SIGNATURE_HEADER, TIMESTAMP_HEADER],
        None,
        preset,
        Challenge,
    )
}

#[derive(Debug)]
struct Challenge;

impl Hooks for Challenge {
    fn signed(&self, input: &Input, _engine: &Engine) -> Option<Result<Verdict, Reject>> {
        let kind = input.headers.get(TYPE_HEADER)?;
        if kind != "webhook_callback_verification" {
            return None;
        }
        Some(
            match crate::scheme::json::text(input.body, "/challenge") {
                Some(challenge) => Handshake::verdict("callback_verification", Reply::text(challenge)),
                None => Err(Reject::BadBody("callback verification without a challenge string")),
            },
        )
    }

    fn sign_handshake(&self, engine: &Engine, draft: &Draft) -> Option<Sample> {
        let body = serde_json::json!({
            "challenge": draft.id,
            "subscription": { "id": "sub-test", "status": "webhook_callback_verification_pending",
                              "type": "channel.follow", "version": "2" },
        })
        .to_string();
        let headers = vec![(
            HeaderName::from_static(TYPE_HEADER),
            value("webhook_callback_verification"),
        )];
        let draft = Draft {
            body: body.as_bytes(),
            ..*draft
        };
        Some(engine.sign(&draft, hyper::http::Method::POST, None, headers))
    }

    fn demo_body(&self, id: &str, _now: i64) -> Vec<u8> {
        serde_json::json!({
            "subscription": { "id": "sub-test", "type": "channel.follow", "version": "2",
                              "status": "enabled" },
            "event": { "user_id": "1", "user_login": "hookinbox", "followed_at": id },
        })
        .to_string()
        .into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use crate::scheme::{Draft, Handshake, Input, Reject, Reply, test_headers, test_scheme};

    const SECRET: &str = "Twitch4J";
    const ID: &str = "7d4c39a4-10b3-4166-b1fb-56130d1f693b";
    const TS: &str = "2020-12-13T14:15:16.1718Z";
    const NOW: i64 = 1_607_868_916;
    const SIG: &str = "sha256=2ac8d26bf60837663d8969f3cb4f22f685c8fa0a4b99d533c8bf622ed4596cc6";

    fn verify(body: &[u8], kind: &str, now: i64) -> Result<crate::scheme::Verdict, Reject> {
        let h = test_headers(&[
            ("Twitch-Eventsub-Message-Id", ID),
            ("Twitch-Eventsub-Message-Timestamp", TS),
            ("Twitch-Eventsub-Message-Signature", SIG),
            ("Twitch-Eventsub-Message-Type", kind),
        ]);
        test_scheme("twitch", &[SECRET], "", None).verify(&Input::post(&h, body, now))
    }

    #[test]
    fn published_vector_and_ten_minutes() {
        match verify(br#"{"hello":"world"}"#, "notification", NOW) {
            Ok(crate::scheme::Verdict::Event(i)) => assert_eq!(i.event_id, ID),
            other => panic!("{other:?}"),
        }
        assert!(verify(br#"{"hello":"world"}"#, "notification", NOW + 600).is_ok());
        assert_eq!(
            verify(br#"{"hello":"world"}"#, "notification", NOW + 601),
            Err(Reject::TooOld)
        );
        assert_eq!(verify(br#"{"hello":"World"}"#, "notification", NOW), Err(Reject::NoMatch));
    }

    #[test]
    fn callback_verification_echoes_the_challenge_as_text() {
        let s = test_scheme("twitch", &["a-twitch-secret"], "", None);
        let draft = Draft {
            body: b"",
            id: "pogchamp-kappa-360noscope-vohiyo",
            now: NOW,
            path: "/hooks/twitch",
            signing_key: None,
        };
        let sample = s.verifier().sign_handshake(&draft).unwrap();
        let h: hyper::http::HeaderMap = sample.headers.into_iter().collect();
        let v = s.verify(&Input::post(&h, &sample.body, NOW));
        assert_eq!(
            v,
            Handshake::verdict(
                "callback_verification",
                Reply::text("pogchamp-kappa-360noscope-vohiyo")
            )
        );
        // Forged: never answered.
        let forged = test_scheme("twitch", &["another"], "", None);
        assert_eq!(forged.verify(&Input::post(&h, &sample.body, NOW)), Err(Reject::NoMatch));
    }
}
