//! GitHub: `X-Hub-Signature-256: sha256=<lowercase hex>`, HMAC-SHA256 of the raw body keyed
//! with the webhook secret's bytes. No timestamp is signed, so there is no replay window; the
//! delivery GUID in `X-GitHub-Delivery` (the same on a redelivery) is the event id. The legacy
//! SHA-1 `X-Hub-Signature` is never consulted. Sources: github/docs
//! `validating-webhook-deliveries.md`, `@octokit/webhooks-methods` `verify()`.

use hyper::http::HeaderName;
use ring::hmac;

use crate::scheme::keys::Keys;
use crate::scheme::{
    Ctx, Draft, Horizon, IdRule, Identity, Input, Reject, Sample, Setup, Verdict, Verifier, value,
};

const SIGNATURE_HEADER: &str = "X-Hub-Signature-256";
const SIGNATURE_PREFIX: &str = "sha256=";
/// Lowercase, as `HeaderName::from_static` requires.
const DELIVERY_HEADER: &str = "x-github-delivery";
const EVENT_HEADER: &str = "X-GitHub-Event";

pub const PROVIDER: super::Provider = super::Provider {
    recovery: Some(super::Recovery {
        api: super::RecoveryApi::GitHubDeliveries,
        url: "https://api.github.com",
        unrecovered: Some(
            "GitHub never sends a delivery again by itself, so what it sent while hookinbox \
             was down or refusing it stays missing",
        ),
    }),
    // https://docs.github.com/en/rest/meta/meta: `hooks` lists the ranges webhooks are
    // delivered from, IPv4 and IPv6, in CIDR notation.
    addresses: Some(super::Addresses {
        url: "https://api.github.com/meta",
        what: "the `hooks` ranges of GitHub's meta API",
        parse: |body| super::ranges_at(body, &["hooks"]),
    }),
    ..super::Provider::new("github", build)
};

fn build(setup: &mut Setup) -> Result<Box<dyn Verifier>, String> {
    Ok(Box::new(Github {
        keys: Keys::raw(hmac::HMAC_SHA256, &setup.secrets()?),
    }))
}

#[derive(Debug)]
struct Github {
    keys: Keys,
}

impl Verifier for Github {
    fn verify(&self, input: &Input, ctx: &Ctx) -> Result<Verdict, Reject> {
        let malformed = || Reject::MalformedHeader(SIGNATURE_HEADER);
        let signature = crate::scheme::header(input.headers, SIGNATURE_HEADER)?;
        let hex_tag = signature
            .strip_prefix(SIGNATURE_PREFIX)
            .ok_or_else(malformed)?;
        // octokit compares the whole `sha256=<hex>` string, so uppercase hex never verifies
        // there, and GitHub only sends lowercase. We refuse it as malformed rather than as a
        // mismatch, so the log points at the sender's format and not at the secret.
        if hex_tag.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(malformed());
        }
        let tag = hex::decode(hex_tag).map_err(|_| malformed())?;
        if !self.keys.any_matches(input.body, &tag) {
            return Err(Reject::NoMatch);
        }
        Ok(Verdict::Event(Identity {
            event_id: ctx.event_id(input, &IdRule::header(DELIVERY_HEADER))?,
            provider_time: None,
            event_type: crate::scheme::optional_header(input.headers, EVENT_HEADER),
        }))
    }

    /// The signature and the delivery id, nothing else (the event name is not signed, so
    /// tests gain nothing from it).
    fn sign(&self, draft: &Draft) -> Sample {
        let signature = format!(
            "{SIGNATURE_PREFIX}{}",
            hex::encode(self.keys.sign(draft.body))
        );
        Sample::post(
            vec![
                (HeaderName::from_static("x-hub-signature-256"), value(&signature)),
                (HeaderName::from_static(DELIVERY_HEADER), value(draft.id)),
            ],
            draft.body,
        )
    }

    fn default_id(&self) -> Option<IdRule> {
        Some(IdRule::header(DELIVERY_HEADER))
    }

    fn redelivery(&self) -> Option<Horizon> {
        Horizon::days(
            3,
            "the 3 days in which GitHub deliveries can be redelivered by hand",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheme::{Scheme, test_scheme};
    use hyper::http::HeaderMap;

    fn scheme(secrets: &[&str]) -> Scheme {
        let secrets: Vec<&str> = secrets.to_vec();
        test_scheme("github", &secrets, "", None)
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        crate::scheme::test_headers(pairs)
    }

    // github/docs validating-webhook-deliveries.md.
    const DOCS_SECRET: &str = "It's a Secret to Everybody";
    const DOCS_BODY: &[u8] = b"Hello, World!";
    const DOCS_SIG: &str =
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
    // octokit/webhooks-methods.js test/sign.test.ts.
    const OCTOKIT_SECRET: &str = "mysecret";
    const OCTOKIT_BODY: &[u8] = br#"{"foo":"bar"}"#;
    const OCTOKIT_SIG: &str =
        "sha256=4864d2759938a15468b5df9ade20bf161da9b4f737ea61794142f3484236bda3";

    const GUID: &str = "72d3162e-cc78-11e3-81ab-4c9367dc0958";
    const NOW: i64 = 1_800_000_000;

    fn verify(s: &Scheme, signature: &str, body: &[u8]) -> Result<Verdict, Reject> {
        let h = headers(&[
            ("X-Hub-Signature-256", signature),
            ("X-GitHub-Delivery", GUID),
            ("X-GitHub-Event", "push"),
        ]);
        s.verify(&Input::post(&h, body, NOW))
    }

    #[test]
    fn published_vectors_sign_and_verify() {
        for (secret, body, sig) in [
            (DOCS_SECRET, DOCS_BODY, DOCS_SIG),
            (OCTOKIT_SECRET, OCTOKIT_BODY, OCTOKIT_SIG),
        ] {
            let s = scheme(&[secret]);
            assert_eq!(
                s.sign_post(body, GUID, NOW).headers,
                vec![
                    (HeaderName::from_static("x-hub-signature-256"), value(sig)),
                    (HeaderName::from_static("x-github-delivery"), value(GUID)),
                ]
            );
            assert_eq!(
                verify(&s, sig, body),
                Ok(Verdict::Event(Identity {
                    event_id: GUID.into(),
                    provider_time: None,
                    event_type: Some("push".into()),
                }))
            );
        }
    }

    #[test]
    fn uppercase_hex_is_refused_like_octokit() {
        let s = scheme(&[DOCS_SECRET]);
        let upper = format!("sha256={}", DOCS_SIG[7..].to_ascii_uppercase());
        assert_eq!(
            verify(&s, &upper, DOCS_BODY),
            Err(Reject::MalformedHeader("X-Hub-Signature-256"))
        );
    }

    #[test]
    fn rotation_either_secret_works() {
        assert!(verify(&scheme(&["old", DOCS_SECRET]), DOCS_SIG, DOCS_BODY).is_ok());
        assert!(verify(&scheme(&[DOCS_SECRET, "old"]), DOCS_SIG, DOCS_BODY).is_ok());
    }

    #[test]
    fn missing_header() {
        let s = scheme(&[DOCS_SECRET]);
        // The legacy SHA-1 header alone is not enough.
        let h = headers(&[
            (
                "X-Hub-Signature",
                "sha1=01dc10d0c83e72ed246219cdd91669667fe2ca59",
            ),
            ("X-GitHub-Delivery", GUID),
        ]);
        let v = s.verify(&Input::post(&h, DOCS_BODY, NOW));
        assert_eq!(v, Err(Reject::MissingHeader("X-Hub-Signature-256")));
    }

    #[test]
    fn malformed_headers() {
        let s = scheme(&[DOCS_SECRET]);
        let hex = &DOCS_SIG[7..];
        for sig in [
            hex.to_owned(),
            format!("sha1={hex}"),
            format!("SHA256={hex}"),
            "sha256=xyz".into(),
            "sha256=abc".into(),
            String::new(),
        ] {
            assert_eq!(
                verify(&s, &sig, DOCS_BODY),
                Err(Reject::MalformedHeader("X-Hub-Signature-256")),
                "{sig}"
            );
        }
        let twice = headers(&[
            ("X-Hub-Signature-256", DOCS_SIG),
            ("X-Hub-Signature-256", DOCS_SIG),
            ("X-GitHub-Delivery", GUID),
        ]);
        let v = s.verify(&Input::post(&twice, DOCS_BODY, NOW));
        assert_eq!(v, Err(Reject::MalformedHeader("X-Hub-Signature-256")));
    }

    #[test]
    fn wrong_secret_and_flipped_character() {
        assert_eq!(
            verify(
                &scheme(&["It's a secret to everybody"]),
                DOCS_SIG,
                DOCS_BODY
            ),
            Err(Reject::NoMatch)
        );
        let s = scheme(&[DOCS_SECRET]);
        let flipped = DOCS_SIG.replace("3e17", "3e16");
        assert_eq!(verify(&s, &flipped, DOCS_BODY), Err(Reject::NoMatch));
        assert_eq!(verify(&s, DOCS_SIG, b"Hello, World?"), Err(Reject::NoMatch));
        // A truncated tag is valid hex but cannot match.
        assert_eq!(
            verify(&s, &DOCS_SIG[..DOCS_SIG.len() - 2], DOCS_BODY),
            Err(Reject::NoMatch)
        );
    }

    #[test]
    fn no_timestamp_so_age_does_not_matter() {
        let s = scheme(&[DOCS_SECRET]);
        let h = headers(&[
            ("X-Hub-Signature-256", DOCS_SIG),
            ("X-GitHub-Delivery", GUID),
        ]);
        for now in [0, NOW, i64::MAX] {
            assert!(
                s.verify(&Input::post(&h, DOCS_BODY, now))
                .is_ok()
            );
        }
    }

    #[test]
    fn authentic_without_delivery_id_is_a_bad_request() {
        let s = scheme(&[DOCS_SECRET]);
        let h = headers(&[("X-Hub-Signature-256", DOCS_SIG)]);
        let v = s.verify(&Input::post(&h, DOCS_BODY, NOW));
        assert_eq!(v, Err(Reject::NoEventId("id header missing")));
    }

    #[test]
    fn sign_then_verify_round_trip() {
        let s = scheme(&["round trip"]);
        let body = br#"{"zen":"Keep it logically awesome."}"#;
        let mut h = HeaderMap::new();
        for (k, v) in s.sign_post(body, "d-1", NOW).headers {
            h.insert(k, v);
        }
        let v = s
            .verify(&Input::post(&h, body, NOW))
            .unwrap();
        assert_eq!(
            v,
            Verdict::Event(Identity {
                event_id: "d-1".into(),
                provider_time: None,
                event_type: None
            })
        );
    }
}
