//! Standard Webhooks (and Svix, which uses the same scheme under `svix-*` header names).
//!
//! `webhook-signature: v1,<base64> [v1,<base64> …]` is HMAC-SHA256 over
//! `{webhook-id}.{webhook-timestamp}.{body}`, keyed with the base64 decoding of the secret
//! after its `whsec_` prefix. Entries of other versions (`v1a`, ed25519) are skipped, as the
//! official libraries do. Spec: standard-webhooks/standard-webhooks `spec/standard-webhooks.md`.

use base64::Engine as _;
use base64::engine::DecodePaddingMode;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use hyper::http::{HeaderMap, HeaderName, HeaderValue};
use ring::hmac;

use super::{Ctx, IdRule, Identity, Input, Reject, Verdict};
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

pub fn verify(input: &Input, ctx: &Ctx) -> Result<Verdict, Reject> {
    // The standard names win when both families are present; Svix's white-label accounts
    // send only the standard ones and svix.com only the svix ones.
    let [id_name, ts_name, sig_name] = if input.headers.contains_key(NAMES[0][2]) {
        NAMES[0]
    } else if input.headers.contains_key(NAMES[1][2]) {
        NAMES[1]
    } else {
        return Err(Reject::MissingHeader("webhook-signature"));
    };
    let msg_id = super::header(input.headers, id_name)?;
    let ts_text = super::header(input.headers, ts_name)?;
    let signatures = super::header(input.headers, sig_name)?;
    // The spec forbids '.' in id and timestamp: it would make the signed content ambiguous.
    if msg_id.is_empty() || msg_id.contains('.') {
        return Err(Reject::MalformedHeader("webhook-id"));
    }
    let ts = super::parse_timestamp(ts_text, "webhook-timestamp")?;
    ctx.check_time(ts, input.now)?;

    let mut signed = Vec::with_capacity(msg_id.len() + ts_text.len() + 2 + input.body.len());
    signed.extend_from_slice(msg_id.as_bytes());
    signed.push(b'.');
    signed.extend_from_slice(ts_text.as_bytes());
    signed.push(b'.');
    signed.extend_from_slice(input.body);

    let entries: Vec<&str> = signatures.split(' ').filter(|e| !e.is_empty()).collect();
    if entries.len() > super::MAX_SIGNATURES {
        return Err(Reject::MalformedHeader("webhook-signature"));
    }
    let mut saw_v1 = false;
    for entry in entries {
        let Some((version, sig)) = entry.split_once(',') else {
            return Err(Reject::MalformedHeader("webhook-signature"));
        };
        if version != "v1" {
            continue;
        }
        saw_v1 = true;
        // A malformed entry cannot match; others in the list still may (rotation).
        if let Ok(tag) = STANDARD.decode(sig)
            && ctx.any_key_matches(&signed, &tag)
        {
            let default = IdRule::Header(HeaderName::from_static(id_name));
            return Ok(Verdict::Event(Identity {
                event_id: ctx.event_id(input, &default)?,
                provider_time: Some(ts),
                event_type: event_type(input.body),
            }));
        }
    }
    if saw_v1 {
        Err(Reject::NoMatch)
    } else {
        Err(Reject::MalformedHeader("webhook-signature"))
    }
}

/// The spec's payload carries its type at `/type`.
fn event_type(body: &[u8]) -> Option<String> {
    super::json_str(body, "/type")
}

/// The `v1,<base64>` signature for one message.
pub fn signature(key: &hmac::Key, id: &str, ts: i64, body: &[u8]) -> String {
    let mut ctx = hmac::Context::with_key(key);
    ctx.update(id.as_bytes());
    ctx.update(format!(".{ts}.").as_bytes());
    ctx.update(body);
    format!("v1,{}", STANDARD.encode(ctx.sign().as_ref()))
}

pub fn sign(key: &hmac::Key, body: &[u8], id: &str, now: i64) -> Vec<(HeaderName, HeaderValue)> {
    let mut h = HeaderMap::new();
    h.insert("webhook-id", value(id));
    h.insert("webhook-timestamp", value(&now.to_string()));
    h.insert("webhook-signature", value(&signature(key, id, now, body)));
    h.into_iter()
        .map(|(k, v)| (k.expect("each name inserted once"), v))
        .collect()
}

pub(super) fn value(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheme::{Kind, Scheme};
    use std::time::Duration;

    fn scheme(secrets: &[&str]) -> Scheme {
        let secrets = secrets.iter().map(|s| Secret::new(*s)).collect();
        Scheme::new(
            Kind::StandardWebhooks,
            secrets,
            Duration::from_secs(300),
            None,
        )
        .unwrap()
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
            .verify(&Input {
                headers: &h,
                body: A_BODY,
                now: A_TS,
            })
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
            s.verify(&Input {
                headers: &h,
                body: A_BODY,
                now: A_TS
            }),
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
            s.verify(&Input {
                headers: &h,
                body: b"{}",
                now: 100
            })
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
            s.verify(&Input {
                headers: &h,
                body: A_BODY,
                now: A_TS
            })
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
            s.verify(&Input {
                headers: &h,
                body: A_BODY,
                now,
            })
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
}
