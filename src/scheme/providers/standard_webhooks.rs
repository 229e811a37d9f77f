//! Standard Webhooks (and Svix, which uses the same scheme under `svix-*` header names).
//!
//! `webhook-signature` is a space-separated list of `<version>,<base64>` entries over
//! `{webhook-id}.{webhook-timestamp}.{body}`:
//!
//! - `v1`: HMAC-SHA256, keyed with the base64 decoding of a `whsec_…` secret;
//! - `v1a`: Ed25519, verified with a `whpk_…` public key (base64 of its 32 bytes).
//!
//! `secrets` may hold both kinds; any one valid entry of a kind a secret is configured for
//! is enough, and entries of other versions are skipped, as the official libraries do.
//! The official libraries implement only `v1`; `v1a` follows the spec text, and its test
//! vector is derived from RFC 8032's (Ed25519 is deterministic). Spec:
//! standard-webhooks/standard-webhooks `spec/standard-webhooks.md`.

use base64::Engine as _;
use base64::engine::DecodePaddingMode;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use hyper::http::HeaderName;
use ring::hmac;
use ring::signature::{self, Ed25519KeyPair, KeyPair as _};

use crate::scheme::keys::Keys;
use crate::scheme::{
    Ctx, Draft, Horizon, IdRule, Identity, Input, Reject, Sample, Setup, Verdict, Verifier, value,
};
use crate::secret::Secret;

/// The two header families: the standard names, then Svix's.
const NAMES: [[&str; 3]; 2] = [
    ["webhook-id", "webhook-timestamp", "webhook-signature"],
    ["svix-id", "svix-timestamp", "svix-signature"],
];

/// Whether `lowercase_name` is one of the scheme's headers, in either family.
pub fn is_signature_header(lowercase_name: &str) -> bool {
    NAMES.iter().flatten().any(|n| *n == lowercase_name)
}

/// Decodes secrets the way the official libraries do: padding optional, and unused
/// trailing bits ignored (Python's `b64decode` accepts them; the spec's own example secret
/// without padding has them).
const LENIENT: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true),
);

/// The key bytes for a `whsec_…` secret.
pub fn decode_secret(secret: &Secret) -> Result<Vec<u8>, String> {
    let text = std::str::from_utf8(secret.expose())
        .map_err(|_| "a Standard Webhooks secret must be text (whsec_ + base64)".to_owned())?;
    let b64 = text.strip_prefix("whsec_").unwrap_or(text);
    LENIENT.decode(b64).map_err(|_| {
        "a Standard Webhooks secret must be whsec_ followed by base64 (as the provider shows it)"
            .to_owned()
    })
}

/// One configured secret: a shared HMAC secret or an Ed25519 public key.
enum Key {
    Hmac(hmac::Key),
    Public([u8; 32]),
}

fn parse_key(secret: &Secret) -> Result<Key, String> {
    match secret.expose().strip_prefix(b"whpk_") {
        Some(b64) => {
            let bytes = LENIENT.decode(b64).map_err(|_| {
                "a Standard Webhooks public key is whpk_ followed by base64".to_owned()
            })?;
            let key: [u8; 32] = bytes.try_into().map_err(|_| {
                "a whpk_ public key is 32 bytes (an Ed25519 key) once base64-decoded".to_owned()
            })?;
            Ok(Key::Public(key))
        }
        None => Ok(Key::Hmac(hmac::Key::new(
            hmac::HMAC_SHA256,
            &decode_secret(secret)?,
        ))),
    }
}

/// An Ed25519 signing key as `hookinbox sign --signing-key` takes it: `whsk_` and the
/// base64 of the 32-byte seed (or of the seed and the public key, 64 bytes).
pub fn signing_pair(secret: &Secret) -> Result<Ed25519KeyPair, String> {
    let text = secret.expose();
    let b64 = text.strip_prefix(b"whsk_").unwrap_or(text);
    let bytes = LENIENT
        .decode(b64)
        .map_err(|_| "a Standard Webhooks signing key is whsk_ followed by base64".to_owned())?;
    crate::scheme::keys::ed25519_pair(&bytes)
}

pub const PROVIDER: super::Provider = super::Provider {
    public_keys: Some(super::PublicKeys {
        prefix: Some("whpk_"),
        test_pair,
    }),
    ..super::Provider::new("standard-webhooks", build)
};

/// A `v1a` pair: a `whpk_` public key, and a `whsk_` signing key (PKCS#8, base64).
fn test_pair() -> Result<super::KeyPair, String> {
    let (pkcs8, pair) = crate::scheme::keys::new_ed25519()?;
    Ok(super::KeyPair {
        public: public_key(&pair),
        private: format!("whsk_{}", STANDARD.encode(pkcs8)),
    })
}

fn build(setup: &mut Setup) -> Result<Box<dyn Verifier>, String> {
    let mut hmac_keys = Vec::new();
    let mut public = Vec::new();
    for key in setup.keys(parse_key)? {
        match key {
            Key::Hmac(k) => hmac_keys.push(k),
            Key::Public(k) => public.push(k),
        }
    }
    Ok(Box::new(StandardWebhooks {
        keys: Keys::new(hmac_keys),
        public,
    }))
}

#[derive(Debug)]
struct StandardWebhooks {
    keys: Keys,
    /// Ed25519 public keys, for `v1a` entries.
    public: Vec<[u8; 32]>,
}

impl Verifier for StandardWebhooks {
    fn verify(&self, input: &Input, ctx: &Ctx) -> Result<Verdict, Reject> {
        // The standard names win when both families are present; Svix's white-label
        // accounts send only the standard ones and svix.com only the svix ones.
        let [id_name, ts_name, sig_name] = if input.headers.contains_key(NAMES[0][2]) {
            NAMES[0]
        } else if input.headers.contains_key(NAMES[1][2]) {
            NAMES[1]
        } else {
            return Err(Reject::MissingHeader("webhook-signature"));
        };
        let msg_id = crate::scheme::header(input.headers, id_name)?;
        let ts_text = crate::scheme::header(input.headers, ts_name)?;
        let signatures = crate::scheme::header(input.headers, sig_name)?;
        // The spec forbids '.' in id and timestamp: it would make the signed content
        // ambiguous.
        if msg_id.is_empty() || msg_id.contains('.') {
            return Err(Reject::MalformedHeader("webhook-id"));
        }
        let ts = crate::scheme::parse_timestamp(ts_text, "webhook-timestamp")?;
        ctx.check_time(ts, input.now)?;
        let signed = signed(msg_id, ts_text, input.body);

        let entries: Vec<&str> = signatures.split(' ').filter(|e| !e.is_empty()).collect();
        if entries.len() > crate::scheme::MAX_SIGNATURES {
            return Err(Reject::TooManySignatures("webhook-signature"));
        }
        // Computed at the first `v1` entry, once for all of them.
        let mut macs = None;
        let mut saw_usable = false;
        for entry in entries {
            let Some((version, sig)) = entry.split_once(',') else {
                return Err(Reject::MalformedHeader("webhook-signature"));
            };
            // A malformed entry cannot match; others in the list still may (rotation).
            let matched = match version {
                "v1" => {
                    saw_usable = true;
                    let macs = macs.get_or_insert_with(|| self.keys.macs(&signed));
                    STANDARD.decode(sig).is_ok_and(|tag| macs.matches(&tag))
                }
                "v1a" if !self.public.is_empty() => {
                    saw_usable = true;
                    STANDARD.decode(sig).is_ok_and(|sig| {
                        self.public.iter().any(|k| {
                            signature::UnparsedPublicKey::new(&signature::ED25519, k)
                                .verify(&signed, &sig)
                                .is_ok()
                        })
                    })
                }
                _ => false,
            };
            if matched {
                let default = IdRule::header(id_name);
                return Ok(Verdict::Event(Identity {
                    event_id: ctx.event_id(input, &default)?,
                    provider_time: Some(ts),
                    event_type: crate::scheme::json_str(input.body, "/type"),
                }));
            }
        }
        if saw_usable {
            Err(Reject::NoMatch)
        } else {
            Err(Reject::MalformedHeader("webhook-signature"))
        }
    }

    /// A `v1` entry with the first `whsec_` secret, and a `v1a` entry when the draft carries
    /// a `whsk_` signing key.
    fn sign(&self, draft: &Draft) -> Sample {
        let mut entries = Vec::new();
        if let Some(key) = self.keys.signing() {
            entries.push(signature(key, draft.id, draft.now, draft.body));
        }
        if let Some(pair) = draft.signing_key.and_then(|k| signing_pair(k).ok()) {
            entries.push(ed25519_signature(&pair, draft.id, draft.now, draft.body));
        }
        Sample::post(
            vec![
                (HeaderName::from_static("webhook-id"), value(draft.id)),
                (
                    HeaderName::from_static("webhook-timestamp"),
                    value(&draft.now.to_string()),
                ),
                (
                    HeaderName::from_static("webhook-signature"),
                    value(&entries.join(" ")),
                ),
            ],
            draft.body,
        )
    }

    fn signs_timestamp(&self) -> bool {
        true
    }

    fn signs_id(&self) -> bool {
        true
    }

    fn default_id(&self) -> Option<IdRule> {
        Some(IdRule::header(NAMES[0][0]))
    }

    fn needs_signing_key(&self) -> bool {
        self.keys.signing().is_none()
    }

    fn redelivery(&self) -> Option<Horizon> {
        Horizon::days(
            4,
            "the Standard Webhooks retry schedule (up to about 3 days) plus manual resends",
        )
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Key::Hmac(_) => "Hmac(***)",
            Key::Public(_) => "Public",
        })
    }
}

fn signed(id: &str, ts: &str, body: &[u8]) -> Vec<u8> {
    let mut signed = Vec::with_capacity(id.len() + ts.len() + 2 + body.len());
    signed.extend_from_slice(id.as_bytes());
    signed.push(b'.');
    signed.extend_from_slice(ts.as_bytes());
    signed.push(b'.');
    signed.extend_from_slice(body);
    signed
}

/// The `v1,<base64>` signature for one message.
pub fn signature(key: &hmac::Key, id: &str, ts: i64, body: &[u8]) -> String {
    let mut ctx = hmac::Context::with_key(key);
    ctx.update(id.as_bytes());
    ctx.update(format!(".{ts}.").as_bytes());
    ctx.update(body);
    format!("v1,{}", STANDARD.encode(ctx.sign().as_ref()))
}

/// The `v1a,<base64>` signature for one message.
pub fn ed25519_signature(pair: &Ed25519KeyPair, id: &str, ts: i64, body: &[u8]) -> String {
    let sig = pair.sign(&signed(id, &ts.to_string(), body));
    format!("v1a,{}", STANDARD.encode(sig.as_ref()))
}

/// The `whpk_…` public key of a signing key, for the configuration.
pub fn public_key(pair: &Ed25519KeyPair) -> String {
    format!("whpk_{}", STANDARD.encode(pair.public_key().as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheme::{Scheme, test_scheme};
    use hyper::http::HeaderMap;

    fn scheme(secrets: &[&str]) -> Scheme {
        let secrets: Vec<&str> = secrets.to_vec();
        test_scheme("standard-webhooks", &secrets, "", None)
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        crate::scheme::test_headers(pairs)
    }

    // Vector A: test_sign_function in the official libraries' test suites.
    const A_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const A_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const A_TS: i64 = 1614265330;
    const A_BODY: &[u8] = br#"{"test": 2432232314}"#;
    const A_SIG: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    #[test]
    fn published_vector_a_signs_and_verifies() {
        let s = scheme(&[A_SECRET]);
        let key = key(A_SECRET);
        assert_eq!(signature(&key, A_ID, A_TS, A_BODY), A_SIG);
        let h = headers(&[
            ("webhook-id", A_ID),
            ("webhook-timestamp", "1614265330"),
            ("webhook-signature", A_SIG),
        ]);
        let v = s
            .verify(&Input::post(&h, A_BODY, A_TS))
            .unwrap();
        assert_eq!(
            v,
            Verdict::Event(Identity {
                event_id: A_ID.into(),
                provider_time: Some(A_TS),
                event_type: None
            })
        );
    }

    #[test]
    fn published_vector_b_signs() {
        let key = key("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD");
        let body = br#"{"email":"test@example.com","username":"test_user"}"#;
        assert_eq!(
            signature(&key, "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk", 1649367553, body),
            "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw="
        );
    }

    #[test]
    fn published_negative_vector_is_rejected() {
        let s = scheme(&[A_SECRET]);
        let bad = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OA=";
        let h = headers(&[
            ("webhook-id", A_ID),
            ("webhook-timestamp", "1614265330"),
            ("webhook-signature", bad),
        ]);
        assert_eq!(
            s.verify(&Input::post(&h, A_BODY, A_TS)),
            Err(Reject::NoMatch)
        );
    }

    #[test]
    fn svix_names_and_unpadded_secret() {
        let s = scheme(&["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS"]);
        let k = key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS");
        let sig = signature(&k, "msg_1", 100, b"{}");
        let h = headers(&[
            ("svix-id", "msg_1"),
            ("svix-timestamp", "100"),
            ("svix-signature", &sig),
        ]);
        assert!(
            s.verify(&Input::post(&h, b"{}", 100))
            .is_ok()
        );
    }

    #[test]
    fn any_of_several_signatures_and_unknown_versions_skipped() {
        let s = scheme(&[A_SECRET]);
        let list = format!("v1a,AAAA v1,Zm9v {A_SIG}");
        let h = headers(&[
            ("webhook-id", A_ID),
            ("webhook-timestamp", "1614265330"),
            ("webhook-signature", &list),
        ]);
        assert!(
            s.verify(&Input::post(&h, A_BODY, A_TS))
            .is_ok()
        );
    }

    #[test]
    fn window_is_enforced_both_ways() {
        let s = scheme(&[A_SECRET]);
        let h = headers(&[
            ("webhook-id", A_ID),
            ("webhook-timestamp", "1614265330"),
            ("webhook-signature", A_SIG),
        ]);
        let at = |now| {
            s.verify(&Input::post(&h, A_BODY, now))
        };
        assert!(at(A_TS + 300).is_ok());
        assert_eq!(at(A_TS + 301), Err(Reject::TooOld));
        assert!(at(A_TS - 300).is_ok());
        assert_eq!(at(A_TS - 301), Err(Reject::TooNew));
    }

    fn key(secret: &str) -> hmac::Key {
        hmac::Key::new(
            hmac::HMAC_SHA256,
            &decode_secret(&Secret::new(secret)).unwrap(),
        )
    }

    // RFC 8032 §7.1 TEST 1: its secret key, and the Standard Webhooks vector A message. The
    // expected signature is derived (Ed25519 is deterministic): reference/providers-catalogue
    // A5. The RFC's own empty-message signature checks that the key is read as the RFC means.
    const RFC_SEED: &str = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
    const RFC_PUBLIC: &str = "whpk_11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=";
    const V1A: &str = "v1a,fldxM4gAKugP6nnt1hdz3sgGfZ6d99nzrMFnZOELIxbzEHoVmAb2ADpkJK7zgPePmPsle0zV9jSeGlHFG2NVAw==";

    fn rfc_pair() -> Ed25519KeyPair {
        crate::scheme::keys::ed25519_pair(&hex::decode(RFC_SEED).unwrap()).unwrap()
    }

    #[test]
    fn v1a_ed25519_derived_vector_signs_and_verifies() {
        let pair = rfc_pair();
        assert_eq!(public_key(&pair), RFC_PUBLIC);
        assert_eq!(
            hex::encode(pair.sign(b"").as_ref()),
            "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
        );
        assert_eq!(ed25519_signature(&pair, A_ID, A_TS, A_BODY), V1A);

        let s = scheme(&[RFC_PUBLIC]);
        let verify = |sig: &str, body: &[u8]| {
            let h = headers(&[
                ("webhook-id", A_ID),
                ("webhook-timestamp", "1614265330"),
                ("webhook-signature", sig),
            ]);
            s.verify(&Input::post(&h, body, A_TS))
        };
        assert!(verify(V1A, A_BODY).is_ok());
        // Beside a v1 this key cannot check, in one header: any one valid entry is enough.
        assert!(verify(&format!("{A_SIG} {V1A}"), A_BODY).is_ok());
        assert_eq!(verify(V1A, b"{\"test\": 2432232315}"), Err(Reject::NoMatch));
        assert_eq!(verify(&V1A.replace("NVAw", "NVAA"), A_BODY), Err(Reject::NoMatch));
        // A v1 alone, for a source with only a public key: nothing it can check.
        assert_eq!(verify(A_SIG, A_BODY), Err(Reject::NoMatch));

        // Both kinds configured: either entry verifies.
        let both = scheme(&[A_SECRET, RFC_PUBLIC]);
        for sig in [A_SIG, V1A] {
            let h = headers(&[
                ("webhook-id", A_ID),
                ("webhook-timestamp", "1614265330"),
                ("webhook-signature", sig),
            ]);
            assert!(both.verify(&Input::post(&h, A_BODY, A_TS)).is_ok(), "{sig}");
        }
    }

    #[test]
    fn v1a_signing_needs_the_signing_key_and_round_trips() {
        let s = scheme(&[RFC_PUBLIC]);
        assert!(s.verifier().needs_signing_key());
        let key = Secret::new(format!("whsk_{}", STANDARD.encode(hex::decode(RFC_SEED).unwrap())));
        let sample = s.sign(&Draft {
            body: A_BODY,
            id: A_ID,
            now: A_TS,
            path: "/hooks/sw",
            signing_key: Some(&key),
        });
        assert_eq!(sample.header("webhook-signature"), Some(V1A));
        let h: HeaderMap = sample.headers.into_iter().collect();
        assert!(s.verify(&Input::post(&h, A_BODY, A_TS)).is_ok());
    }

    #[test]
    fn bad_public_keys_are_refused_at_load() {
        for (key, want) in [("whpk_!!", "base64"), ("whpk_AAAA", "32 bytes")] {
            let settings = toml::Table::new();
            let e = Scheme::build(
                Setup::literal("standard-webhooks", vec![Secret::new(key)], settings),
                None,
                None,
            )
            .unwrap_err();
            assert!(e.contains(want), "{e}");
        }
    }
}
