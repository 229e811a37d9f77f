//! Prepared secrets: HMAC keys for rotation (any one may match), how a secret's text becomes
//! key bytes, and a constant-time comparison for providers that send the secret itself.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE};
use ring::hmac;
use ring::rand::SystemRandom;
use serde::Deserialize;

use crate::secret::Secret;

/// The HMAC keys of one source, one per configured secret.
#[derive(Debug)]
pub struct Keys(Vec<hmac::Key>);

impl Keys {
    pub fn new(keys: Vec<hmac::Key>) -> Keys {
        Keys(keys)
    }

    /// Keys over each secret's bytes as they are.
    pub fn raw(algorithm: hmac::Algorithm, secrets: &[Secret]) -> Keys {
        Keys(
            secrets
                .iter()
                .map(|s| hmac::Key::new(algorithm, s.expose()))
                .collect(),
        )
    }

    /// True when `tag` is the MAC of `msg` under any configured key (rotation).
    pub fn any_matches(&self, msg: &[u8], tag: &[u8]) -> bool {
        self.0.iter().any(|k| hmac::verify(k, msg, tag).is_ok())
    }

    /// The MAC of `msg` under every key, for checking each of the signatures one header
    /// carries against them: the body is hashed once per key, not once per entry (eight
    /// entries over a 1 MiB body cost 7.7 ms where one cost 1.25).
    pub fn macs(&self, msg: &[u8]) -> Macs {
        Macs(self.0.iter().map(|k| hmac::sign(k, msg)).collect())
    }

    /// The key that signs `hookinbox sign`'s requests: the first configured.
    pub fn signing(&self) -> Option<&hmac::Key> {
        self.0.first()
    }

    /// The MAC of `msg` under the first key, for signing; empty without a key (a source
    /// whose secret this command did not load), which then verifies nowhere.
    pub fn sign(&self, msg: &[u8]) -> Vec<u8> {
        self.signing()
            .map(|k| hmac::sign(k, msg).as_ref().to_vec())
            .unwrap_or_default()
    }
}

/// The MACs of one message under each key of a source ([`Keys::macs`]).
pub struct Macs(Vec<hmac::Tag>);

impl Macs {
    /// True when `tag` is one of them, compared in constant time with each (which one
    /// matched, and where two tags first differ, must not show in the time taken).
    pub fn matches(&self, tag: &[u8]) -> bool {
        use subtle::ConstantTimeEq as _;
        self.0
            .iter()
            .fold(subtle::Choice::from(0), |any, mac| {
                any | mac.as_ref().ct_eq(tag)
            })
            .into()
    }
}

/// How a configured secret's text becomes the HMAC key's bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyEncoding {
    /// The text's bytes, as most providers mean it.
    #[default]
    Raw,
    /// Standard or URL-safe base64 (Microsoft Teams, Airtable).
    Base64,
    /// Hex (Adyen).
    Hex,
}

impl KeyEncoding {
    pub fn decode(self, secret: &Secret) -> Result<Vec<u8>, String> {
        let bytes = secret.expose();
        match self {
            KeyEncoding::Raw => Ok(bytes.to_vec()),
            KeyEncoding::Base64 => STANDARD
                .decode(bytes)
                .or_else(|_| URL_SAFE.decode(bytes))
                .map_err(|_| "the secret is not base64 (key_encoding = \"base64\")".to_owned()),
            KeyEncoding::Hex => hex::decode(bytes)
                .map_err(|_| "the secret is not hex (key_encoding = \"hex\")".to_owned()),
        }
    }
}

/// Shared tokens sent as they are (GitLab's `X-Gitlab-Token`, a Basic password, Meta's
/// `hub.verify_token`), compared in constant time.
///
/// Each token becomes an HMAC key, and both the configured and the presented token MAC the
/// fixed [`TOKEN_CHECK_MSG`]: equal tags mean equal tokens, because HMAC-SHA256 is a PRF,
/// and `hmac::verify` compares the tags in constant time. (HMAC pads keys shorter than its
/// block with zeros and hashes longer ones, so a token equals itself plus trailing NULs or
/// its own SHA-256; neither can be sent without already knowing the token.)
#[derive(Debug)]
pub struct Tokens {
    keys: Vec<hmac::Key>,
    first: Option<Secret>,
}

/// What the configured and the presented token both MAC. Any fixed text works; a versioned
/// label keeps it from being mistaken for a secret.
const TOKEN_CHECK_MSG: &[u8] = b"hookinbox gitlab token check v1";

impl Tokens {
    pub fn new(secrets: &[Secret]) -> Tokens {
        Tokens {
            keys: secrets
                .iter()
                .map(|s| hmac::Key::new(hmac::HMAC_SHA256, s.expose()))
                .collect(),
            first: secrets.first().cloned(),
        }
    }

    /// Whether `presented` is one of the tokens. An empty token never is: as an HMAC key it
    /// is all zeros, like a token of NULs.
    pub fn contains(&self, presented: &[u8]) -> bool {
        if presented.is_empty() {
            return false;
        }
        let tag = hmac::sign(
            &hmac::Key::new(hmac::HMAC_SHA256, presented),
            TOKEN_CHECK_MSG,
        );
        self.keys
            .iter()
            .any(|k| hmac::verify(k, TOKEN_CHECK_MSG, tag.as_ref()).is_ok())
    }

    /// The first token, which `hookinbox sign` sends.
    pub fn first(&self) -> &[u8] {
        self.first.as_ref().map_or(&[], Secret::expose)
    }
}

/// Whether two secret-derived byte strings are equal, in constant time.
pub fn same_token(configured: &Secret, presented: &[u8]) -> bool {
    Tokens::new(std::slice::from_ref(configured)).contains(presented)
}

/// An Ed25519 signing key from its 32-byte seed, the seed and the public key (64 bytes, as
/// libsodium keeps them), or PKCS#8 DER. Only `hookinbox sign` and the tests sign.
pub fn ed25519_pair(bytes: &[u8]) -> Result<ring::signature::Ed25519KeyPair, String> {
    use ring::signature::Ed25519KeyPair;
    let pair = match bytes.len() {
        32 => Ed25519KeyPair::from_seed_unchecked(bytes),
        64 => Ed25519KeyPair::from_seed_and_public_key(&bytes[..32], &bytes[32..]),
        _ => Ed25519KeyPair::from_pkcs8_maybe_unchecked(bytes),
    };
    pair.map_err(|_| {
        "not an Ed25519 private key (a 32-byte seed, seed and public key, or PKCS#8)".to_owned()
    })
}

/// A new key pair, for `hookinbox keypair`: its PKCS#8 document, and the pair read back
/// from it (`generate` and `read` are ring's, for one algorithm).
pub fn new_pair<P>(
    generate: impl FnOnce(&SystemRandom) -> Result<ring::pkcs8::Document, ring::error::Unspecified>,
    read: impl FnOnce(&[u8], &SystemRandom) -> Result<P, ring::error::KeyRejected>,
) -> Result<(Vec<u8>, P), String> {
    let rng = SystemRandom::new();
    let pkcs8 = generate(&rng).map_err(|_| "the system's random source failed".to_owned())?;
    let pair =
        read(pkcs8.as_ref(), &rng).map_err(|_| "ring made a key it cannot read".to_owned())?;
    Ok((pkcs8.as_ref().to_vec(), pair))
}

/// A new Ed25519 key pair (Discord, Standard Webhooks `v1a`).
pub fn new_ed25519() -> Result<(Vec<u8>, ring::signature::Ed25519KeyPair), String> {
    use ring::signature::Ed25519KeyPair;
    new_pair(
        |rng| Ed25519KeyPair::generate_pkcs8(rng),
        |der, _| Ed25519KeyPair::from_pkcs8(der),
    )
}

/// The DER of a private key given as PEM (`-----BEGIN PRIVATE KEY-----` …) or as bare
/// base64, as `hookinbox sign --signing-key` takes it.
pub fn pkcs8_der(secret: &Secret) -> Option<Vec<u8>> {
    let text = String::from_utf8_lossy(secret.expose());
    let b64: String = text.lines().filter(|l| !l.starts_with("-----")).collect();
    STANDARD.decode(b64.trim()).ok()
}
