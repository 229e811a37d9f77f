//! SendGrid Event Webhook: ECDSA P-256 with SHA-256. `X-Twilio-Email-Event-Webhook-Signature`
//! is the base64 DER signature of `X-Twilio-Email-Event-Webhook-Timestamp` followed by the
//! raw body, verified with the account's verification key, which SendGrid shows as the
//! base64 of its SPKI DER (`MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE…`): that text goes in
//! `secrets`. The timestamp is signed and held to the tolerance.
//!
//! SendGrid batches events in a JSON array, each element with its `sg_event_id`: the request
//! is stored as one event under those ids joined. Sources: twilio.com/docs/sendgrid
//! `for-developers/tracking-events/getting-started-event-webhook-security-features`,
//! sendgrid-nodejs `eventwebhook.spec.js` (the vector below).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hyper::http::HeaderName;
use ring::signature::{self, EcdsaKeyPair};

use crate::scheme::{
    Ctx, Draft, Horizon, IdRule, Identity, Input, Reject, Sample, Setup, Verdict, Verifier, value,
};
use crate::secret::Secret;

const SIGNATURE_HEADER: &str = "X-Twilio-Email-Event-Webhook-Signature";
const TIMESTAMP_HEADER: &str = "X-Twilio-Email-Event-Webhook-Timestamp";
/// The SPKI DER header of every P-256 public key (id-ecPublicKey, prime256v1, a 66-byte bit
/// string): what precedes the 65-byte uncompressed point that ring verifies with.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08,
    0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

pub const PROVIDER: super::Provider = super::Provider {
    public_keys: Some(super::PublicKeys {
        prefix: None,
        test_pair,
    }),
    ..super::Provider::new("sendgrid", build)
};

/// The SPKI DER of an uncompressed P-256 point, as SendGrid shows its key (base64).
fn spki(point: &[u8]) -> Vec<u8> {
    [&P256_SPKI_PREFIX[..], point].concat()
}

/// A pair as SendGrid shows the public key (base64 SPKI); the private key is PKCS#8, in
/// base64.
fn test_pair() -> Result<super::KeyPair, String> {
    use ring::signature::KeyPair as _;
    let alg = &signature::ECDSA_P256_SHA256_ASN1_SIGNING;
    let (pkcs8, pair) = crate::scheme::keys::new_pair(
        |rng| EcdsaKeyPair::generate_pkcs8(alg, rng),
        |der, rng| EcdsaKeyPair::from_pkcs8(alg, der, rng),
    )?;
    Ok(super::KeyPair {
        public: STANDARD.encode(spki(pair.public_key().as_ref())),
        private: STANDARD.encode(pkcs8),
    })
}

/// The uncompressed point of a base64 SPKI P-256 key.
pub fn parse_public_key(secret: &Secret) -> Result<Vec<u8>, String> {
    let der = STANDARD.decode(secret.expose().trim_ascii()).map_err(|_| {
        "a SendGrid verification key is base64, as the Event Webhook settings show it".to_owned()
    })?;
    match der.strip_prefix(&P256_SPKI_PREFIX[..]) {
        Some(point) if point.len() == 65 && point[0] == 4 => Ok(point.to_vec()),
        _ => Err("not a P-256 public key (SendGrid's verification key starts MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE)".into()),
    }
}

fn build(setup: &mut Setup) -> Result<Box<dyn Verifier>, String> {
    Ok(Box::new(SendGrid {
        keys: setup.keys(parse_public_key)?,
    }))
}

#[derive(Debug)]
struct SendGrid {
    keys: Vec<Vec<u8>>,
}

/// A signing key for `hookinbox sign`: PKCS#8, as PEM or base64 DER.
fn signing_pair(secret: &Secret) -> Option<EcdsaKeyPair> {
    let der = crate::scheme::keys::pkcs8_der(secret)?;
    let rng = ring::rand::SystemRandom::new();
    EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_ASN1_SIGNING, &der, &rng).ok()
}

impl Verifier for SendGrid {
    fn verify(&self, input: &Input, ctx: &Ctx) -> Result<Verdict, Reject> {
        let sig = crate::scheme::header(input.headers, SIGNATURE_HEADER)?;
        let ts_text = crate::scheme::header(input.headers, TIMESTAMP_HEADER)?;
        let sig = STANDARD
            .decode(sig)
            .map_err(|_| Reject::MalformedHeader(SIGNATURE_HEADER))?;
        let ts = crate::scheme::parse_timestamp(ts_text, TIMESTAMP_HEADER)?;
        ctx.check_time(ts, input.now)?;
        let signed = [ts_text.as_bytes(), input.body].concat();
        let ok = self.keys.iter().any(|k| {
            signature::UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_ASN1, k)
                .verify(&signed, &sig)
                .is_ok()
        });
        if !ok {
            return Err(Reject::NoMatch);
        }
        Ok(Verdict::Event(Identity {
            event_id: ctx.event_id(input, &default_id())?,
            provider_time: Some(ts),
            event_type: crate::scheme::json_str(input.body, "/0/event"),
        }))
    }

    fn sign(&self, draft: &Draft) -> Sample {
        let ts = draft.now.to_string();
        let rng = ring::rand::SystemRandom::new();
        let sig = draft
            .signing_key
            .and_then(signing_pair)
            .and_then(|pair| pair.sign(&rng, &[ts.as_bytes(), draft.body].concat()).ok())
            .map(|s| STANDARD.encode(s.as_ref()))
            .unwrap_or_default();
        Sample::post(
            vec![
                (HeaderName::from_static("x-twilio-email-event-webhook-signature"), value(&sig)),
                (HeaderName::from_static("x-twilio-email-event-webhook-timestamp"), value(&ts)),
            ],
            draft.body,
        )
    }

    fn demo_body(&self, id: &str, _now: i64) -> Vec<u8> {
        serde_json::json!([{ "email": "example@test.com", "event": "delivered",
                             "sg_event_id": id, "sg_message_id": "m1", "timestamp": 0 }])
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

    fn redelivery(&self) -> Option<Horizon> {
        Horizon::days(1, "SendGrid's 24 hours of retries")
    }
}

fn default_id() -> IdRule {
    IdRule::Each {
        array: String::new(),
        id: "/sg_event_id".into(),
    }
}

#[cfg(test)]
mod tests {
    use crate::scheme::{Input, Reject, Verdict, test_headers, test_scheme};

    const PUBLIC_KEY: &str = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEEDr2LjtURuePQzplybdC+u4CwrqDqBaWjcMMsTbhdbcwHBcepxo7yAQGhHPTnlvFYPAZFceEu/1FwCM/QmGUhA==";
    const TIMESTAMP: &str = "1588788367";
    const PAYLOAD: &[u8] = br#"{"category":"example_payload","event":"test_event","message_id":"message_id"}"#;
    const SIGNATURE: &str = "MEUCIQCtIHJeH93Y+qpYeWrySphQgpNGNr/U+UyUlBkU6n7RAwIgJTz2C+8a8xonZGi6BpSzoQsbVRamr2nlxFDWYNH2j/0=";

    fn verify(body: &[u8], now: i64) -> Result<Verdict, Reject> {
        let h = test_headers(&[
            ("X-Twilio-Email-Event-Webhook-Signature", SIGNATURE),
            ("X-Twilio-Email-Event-Webhook-Timestamp", TIMESTAMP),
        ]);
        test_scheme("sendgrid", &[PUBLIC_KEY], "", None).verify(&Input::post(&h, body, now))
    }

    #[test]
    fn published_vector() {
        // Authentic; the SDK's sample is an object, not a batch, so it has no event ids.
        let err = verify(PAYLOAD, 1_588_788_367).unwrap_err();
        assert!(!err.is_auth(), "{err:?}");
        let mut changed = PAYLOAD.to_vec();
        changed[5] ^= 1;
        assert_eq!(verify(&changed, 1_588_788_367), Err(Reject::NoMatch));
        assert_eq!(verify(PAYLOAD, 1_588_788_367 + 301), Err(Reject::TooOld));
    }

    #[test]
    fn keys_must_be_p256_spki() {
        for bad in ["!!", "AAAA", "MCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE="] {
            let setup = crate::scheme::Setup::literal(
                "sendgrid",
                vec![crate::secret::Secret::new(bad)],
                toml::Table::new(),
            );
            assert!(crate::scheme::Scheme::build(setup, None, None).is_err(), "{bad}");
        }
    }
}
