//! Discord: Ed25519. `X-Signature-Ed25519` is the hex signature of
//! `X-Signature-Timestamp` followed by the raw body, verified with the application's public
//! key (hex, from the developer portal) in `secrets`. Discord probes an endpoint with bad
//! signatures and expects 401, which every refusal here is.
//!
//! Two kinds of URL use this scheme:
//!
//! - the Interactions endpoint: a `PING` (`{"type":1}`) is answered `{"type":1}` and not
//!   stored. Every other interaction must be answered within 3 seconds, which a
//!   store-and-forward receiver can only do by deferring: once stored it is answered
//!   `{"type":5}` (a component, `{"type":6}`; autocomplete, no choices), and the app follows
//!   up through the interaction's token. Its id is the interaction's `id`.
//! - the Webhook Events URL (`{"version":1,"type":0|1,"event":…}`): PING (type 0) and events
//!   are answered 204. Events carry no id, so theirs is the SHA-256 of the body.
//!
//! The timestamp is signed and held to the tolerance. Sources: discord.com
//! `developers/interactions/overview`, `developers/events/webhook-events`; discord-interactions
//! `verifyKey`. The vector below is derived from RFC 8032's test key.

use hyper::http::{HeaderName, StatusCode};
use ring::signature::{self, KeyPair as _};

use crate::scheme::{
    Ctx, Draft, Handshake, IdRule, Identity, Input, Reject, Reply, Sample, Setup, Verdict,
    Verifier, value,
};
use crate::secret::Secret;

const SIGNATURE_HEADER: &str = "X-Signature-Ed25519";
const TIMESTAMP_HEADER: &str = "X-Signature-Timestamp";

pub const PROVIDER: super::Provider = super::Provider {
    public_keys: Some(super::PublicKeys {
        prefix: None,
        test_pair,
    }),
    ..super::Provider::new("discord", build)
};

/// A pair as the developer portal shows the public key (hex); the private key is PKCS#8,
/// in hex, which [`signing_pair`] reads.
fn test_pair() -> Result<super::KeyPair, String> {
    let (pkcs8, pair) = crate::scheme::keys::new_ed25519()?;
    Ok(super::KeyPair {
        public: public_key_hex(&pair),
        private: hex::encode(pkcs8),
    })
}

fn build(setup: &mut Setup) -> Result<Box<dyn Verifier>, String> {
    let keys = setup.keys(|s| {
        let bytes = hex::decode(s.expose().trim_ascii()).map_err(|_| {
            "a Discord public key is 64 hex digits, as the developer portal shows it".to_owned()
        })?;
        <[u8; 32]>::try_from(bytes)
            .map_err(|_| "a Discord public key is 32 bytes (64 hex digits)".to_owned())
    })?;
    Ok(Box::new(Discord { keys }))
}

#[derive(Debug)]
struct Discord {
    keys: Vec<[u8; 32]>,
}

/// A signing key for `hookinbox sign`: the 32-byte seed in hex, or PKCS#8.
fn signing_pair(secret: &Secret) -> Option<signature::Ed25519KeyPair> {
    let text = secret.expose().trim_ascii();
    let bytes = hex::decode(text).unwrap_or_else(|_| text.to_vec());
    crate::scheme::keys::ed25519_pair(&bytes).ok()
}

/// Which URL a verified body was sent to, and what it is.
enum Shape {
    InteractionPing,
    Interaction(i64),
    EventPing,
    Event,
}

fn shape(body: &[u8]) -> Shape {
    let kind = crate::scheme::json::field(body, "/type")
        .ok()
        .flatten()
        .and_then(|f| f.text_or_integer())
        .and_then(|t| t.parse::<i64>().ok())
        .unwrap_or(-1);
    // Interactions carry `version` too, so it tells nothing; a webhook event has its
    // `event`, and type 0 (its PING) is no interaction type.
    let webhook_event =
        kind == 0 || matches!(crate::scheme::json::field(body, "/event"), Ok(Some(_)));
    match (webhook_event, kind) {
        (true, 0) => Shape::EventPing,
        (true, _) => Shape::Event,
        (false, 1) => Shape::InteractionPing,
        (false, k) => Shape::Interaction(k),
    }
}

impl Verifier for Discord {
    fn verify(&self, input: &Input, ctx: &Ctx) -> Result<Verdict, Reject> {
        let sig = crate::scheme::header(input.headers, SIGNATURE_HEADER)?;
        let ts_text = crate::scheme::header(input.headers, TIMESTAMP_HEADER)?;
        let sig = hex::decode(sig).map_err(|_| Reject::MalformedHeader(SIGNATURE_HEADER))?;
        let ts = crate::scheme::parse_timestamp(ts_text, TIMESTAMP_HEADER)?;
        ctx.check_time(ts, input.now)?;
        let signed = [ts_text.as_bytes(), input.body].concat();
        let ok = self.keys.iter().any(|k| {
            signature::UnparsedPublicKey::new(&signature::ED25519, k)
                .verify(&signed, &sig)
                .is_ok()
        });
        if !ok {
            return Err(Reject::NoMatch);
        }
        match shape(input.body) {
            Shape::InteractionPing => {
                return Handshake::verdict("ping", Reply::json(&serde_json::json!({ "type": 1 })));
            }
            Shape::EventPing => return Handshake::verdict("ping", Reply::empty(StatusCode::NO_CONTENT)),
            Shape::Interaction(_) | Shape::Event => {}
        }
        Ok(Verdict::Event(Identity {
            event_id: ctx.event_id(input, &default_id())?,
            provider_time: Some(ts),
            event_type: crate::scheme::json_str(input.body, "/event/type")
                .or_else(|| crate::scheme::json_str(input.body, "/data/name")),
        }))
    }

    fn stored_reply(&self, input: &Input) -> Option<Reply> {
        let deferred = |t: i64| Reply::json(&serde_json::json!({ "type": t }));
        Some(match shape(input.body) {
            Shape::Event | Shape::EventPing => Reply::empty(StatusCode::NO_CONTENT),
            // A component: DEFERRED_UPDATE_MESSAGE.
            Shape::Interaction(3) => deferred(6),
            // Autocomplete cannot be deferred: no choices.
            Shape::Interaction(4) => {
                Reply::json(&serde_json::json!({ "type": 8, "data": { "choices": [] } }))
            }
            // DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE.
            Shape::Interaction(_) | Shape::InteractionPing => deferred(5),
        })
    }

    fn sign(&self, draft: &Draft) -> Sample {
        let ts = draft.now.to_string();
        let sig = draft
            .signing_key
            .and_then(signing_pair)
            .map(|pair| hex::encode(pair.sign(&[ts.as_bytes(), draft.body].concat()).as_ref()))
            .unwrap_or_default();
        Sample::post(
            vec![
                (HeaderName::from_static("x-signature-ed25519"), value(&sig)),
                (HeaderName::from_static("x-signature-timestamp"), value(&ts)),
            ],
            draft.body,
        )
    }

    fn sign_handshake(&self, draft: &Draft) -> Option<Sample> {
        // An Interactions PING, as Discord sends it.
        let body = serde_json::json!({ "type": 1, "id": draft.id, "application_id": "0",
                                       "token": "test", "version": 1 })
        .to_string();
        Some(self.sign(&Draft {
            body: body.as_bytes(),
            ..*draft
        }))
    }

    fn demo_body(&self, id: &str, _now: i64) -> Vec<u8> {
        serde_json::json!({ "type": 2, "id": id, "application_id": "0", "token": "test",
                            "version": 1, "data": { "name": "hookinbox-test" } })
        .to_string()
        .into_bytes()
    }

    fn needs_signing_key(&self) -> bool {
        true
    }

    fn signs_timestamp(&self) -> bool {
        true
    }

    fn signs_id(&self) -> bool {
        true
    }

    fn default_id(&self) -> Option<IdRule> {
        Some(default_id())
    }
}

fn default_id() -> IdRule {
    IdRule::FirstOf(vec![IdRule::pointer("/id"), IdRule::BodySha256])
}

/// The hex public key of a signing key, for the configuration.
pub fn public_key_hex(pair: &signature::Ed25519KeyPair) -> String {
    hex::encode(pair.public_key().as_ref())
}

#[cfg(test)]
mod tests {
    use crate::scheme::{Draft, Handshake, Input, Reject, Reply, Verdict, test_headers, test_scheme};
    use crate::secret::Secret;

    // RFC 8032 §7.1 TEST 1; the signature is derived (reference/providers-catalogue.md A5).
    const SEED: &str = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
    const PUBLIC: &str = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";
    const PING_SIG: &str = "1695961a47c91a1ec033b819b7e87e3dbc583dd0cee6d1fd0216f58ac87b6228ae531ddbf91fb7bc28d7edf7f08604da16f54624f38a6bc0614e4dc13cd47f0f";

    fn verify(sig: &str, body: &[u8], now: i64) -> Result<Verdict, Reject> {
        let h = test_headers(&[("X-Signature-Ed25519", sig), ("X-Signature-Timestamp", "1700000000")]);
        test_scheme("discord", &[PUBLIC], "", None).verify(&Input::post(&h, body, now))
    }

    #[test]
    fn derived_vector_ping_and_probes() {
        assert_eq!(
            verify(PING_SIG, br#"{"type":1}"#, 1_700_000_000),
            Handshake::verdict("ping", Reply::json(&serde_json::json!({ "type": 1 })))
        );
        // Discord's probes: a bad signature, a changed body, garbage.
        let flipped = format!("{}e", &PING_SIG[..PING_SIG.len() - 1]);
        assert_eq!(verify(&flipped, br#"{"type":1}"#, 1_700_000_000), Err(Reject::NoMatch));
        assert_eq!(verify(PING_SIG, br#"{"type":2}"#, 1_700_000_000), Err(Reject::NoMatch));
        assert_eq!(verify("zz", br#"{"type":1}"#, 1_700_000_000), Err(Reject::MalformedHeader("X-Signature-Ed25519")));
        assert_eq!(verify(PING_SIG, br#"{"type":1}"#, 1_700_000_301), Err(Reject::TooOld));
    }

    #[test]
    fn interactions_are_stored_and_deferred_events_answered_204() {
        let s = test_scheme("discord", &[PUBLIC], "", None);
        assert!(s.verifier().needs_signing_key());
        let key = Secret::new(SEED);
        for (body, id, reply) in [
            // As Discord sends them: `version` is in every interaction.
            (&br#"{"type":2,"id":"1234","token":"t","version":1}"#[..], "1234".to_owned(), Reply::json(&serde_json::json!({"type":5}))),
            (br#"{"type":3,"id":"1235","token":"t","version":1}"#, "1235".into(), Reply::json(&serde_json::json!({"type":6}))),
        ] {
            let sample = s.sign(&Draft { body, id: "", now: 1_700_000_000, path: "/hooks/d", signing_key: Some(&key) });
            let h: hyper::http::HeaderMap = sample.headers.into_iter().collect();
            let input = Input::post(&h, body, 1_700_000_000);
            match s.verify(&input) {
                Ok(Verdict::Event(i)) => assert_eq!(i.event_id, id),
                other => panic!("{other:?}"),
            }
            assert_eq!(s.verifier().stored_reply(&input), Some(reply));
        }
        let event = br#"{"version":1,"application_id":"1","type":1,"event":{"type":"APPLICATION_AUTHORIZED"}}"#;
        let sample = s.sign(&Draft { body: event, id: "", now: 1_700_000_000, path: "/hooks/d", signing_key: Some(&key) });
        let h: hyper::http::HeaderMap = sample.headers.into_iter().collect();
        let input = Input::post(&h, event, 1_700_000_000);
        match s.verify(&input) {
            Ok(Verdict::Event(i)) => {
                assert!(i.event_id.starts_with("sha256:"));
                assert_eq!(i.event_type.as_deref(), Some("APPLICATION_AUTHORIZED"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(s.verifier().stored_reply(&input).unwrap().status, 204);
    }
}
