//! Asana: the secret is not configured but handed over. Creating a webhook, Asana POSTs to
//! the target with `X-Hook-Secret: S` while its API call is still waiting, and the target
//! must answer 200 (or 204) echoing `X-Hook-Secret: S`. From then on every event carries
//! `X-Hook-Signature: <hex HMAC-SHA256(S, raw body)>`.
//!
//! Trusting whoever shows up first would let anyone who finds the URL install their own
//! secret, so a handshake is trusted only within a window the operator opens
//! (`hookinbox arm --source NAME`, then create the webhook), and once: the secret is stored
//! in the inbox and the window closed in one transaction before the echo is sent. Afterwards
//! only that secret (and any configured in `secrets`) verifies. Asana sends no event id and
//! batches events (`events[]`, empty for a heartbeat): the id is the SHA-256 of the body.
//! Sources: developers.asana.com `docs/webhooks-guide`.

use hyper::http::{HeaderName, HeaderValue, StatusCode};
use ring::hmac;

use crate::scheme::keys::Keys;
use crate::scheme::{
    Action, Ctx, Draft, Handshake, IdRule, Identity, Input, Learnt, Reject, Reply, Sample, Setup,
    Verdict, Verifier, value,
};
use crate::secret::Secret;

const SECRET_HEADER: &str = "x-hook-secret";
const SIGNATURE_HEADER: &str = "X-Hook-Signature";
/// Asana's secrets are 32 hex characters; anything far longer is not one.
const MAX_SECRET: usize = 256;

pub const PROVIDER: super::Provider = super::Provider {
    learns_secret: true,
    ..super::Provider::new("asana", build)
};

fn build(setup: &mut Setup) -> Result<Box<dyn Verifier>, String> {
    Ok(Box::new(Asana {
        configured: Keys::raw(hmac::HMAC_SHA256, &setup.optional_secrets()),
    }))
}

#[derive(Debug)]
struct Asana {
    /// Secrets the operator configured, if any, besides the learnt one.
    configured: Keys,
}

impl Verifier for Asana {
    fn verify(&self, input: &Input, ctx: &Ctx) -> Result<Verdict, Reject> {
        if let Some(offered) = input.headers.get(SECRET_HEADER) {
            let text = offered
                .to_str()
                .ok()
                .filter(|t| !t.is_empty() && t.len() <= MAX_SECRET)
                .ok_or(Reject::MalformedHeader("X-Hook-Secret"))?;
            let reply = Reply::empty(StatusCode::OK).with_header(
                SECRET_HEADER,
                HeaderValue::from_str(text).map_err(|_| Reject::MalformedHeader("X-Hook-Secret"))?,
            );
            return Ok(Verdict::Handshake(Handshake {
                kind: "hook_secret",
                reply,
                action: Some(Action::Learn(Learnt(Secret::new(text)))),
            }));
        }
        let sig = crate::scheme::header(input.headers, SIGNATURE_HEADER)?;
        let tag = hex::decode(sig).map_err(|_| Reject::MalformedHeader(SIGNATURE_HEADER))?;
        let learnt = ctx.learnt.is_some_and(|s| {
            hmac::verify(&hmac::Key::new(hmac::HMAC_SHA256, s.expose()), input.body, &tag).is_ok()
        });
        if !learnt && !self.configured.any_matches(input.body, &tag) {
            return Err(Reject::NoMatch);
        }
        Ok(Verdict::Event(Identity {
            event_id: ctx.event_id(input, &IdRule::BodySha256)?,
            provider_time: None,
            event_type: crate::scheme::json_str(input.body, "/events/0/action"),
        }))
    }

    /// Signed with the configured secret, or with `--signing-key` (`hookinbox sign` reads
    /// the learnt secret from the inbox).
    fn sign(&self, draft: &Draft) -> Sample {
        let tag = match draft.signing_key {
            Some(s) => hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, s.expose()), draft.body)
                .as_ref()
                .to_vec(),
            None => self.configured.sign(draft.body),
        };
        Sample::post(
            vec![(HeaderName::from_static("x-hook-signature"), value(&hex::encode(tag)))],
            draft.body,
        )
    }

    fn sign_handshake(&self, draft: &Draft) -> Option<Sample> {
        let secret = hex::encode(ring::digest::digest(&ring::digest::SHA256, draft.id.as_bytes()))
            [..32]
            .to_owned();
        Some(Sample::post(
            vec![(HeaderName::from_static(SECRET_HEADER), value(&secret))],
            b"",
        ))
    }

    fn demo_body(&self, id: &str, _now: i64) -> Vec<u8> {
        serde_json::json!({ "events": [{ "action": "changed", "user": { "gid": id },
                                         "resource": { "gid": "1", "resource_type": "task" } }] })
        .to_string()
        .into_bytes()
    }

    fn default_id(&self) -> Option<IdRule> {
        Some(IdRule::BodySha256)
    }
}

#[cfg(test)]
mod tests {
    use crate::scheme::{Action, Input, Learnt, Reject, Verdict, test_headers, test_scheme};
    use crate::secret::Secret;

    #[test]
    fn the_handshake_offers_its_secret_and_events_verify_with_it() {
        let s = test_scheme("asana", &[], "", None);
        let offer = test_headers(&[("X-Hook-Secret", "b537207f20cbfa02357cf448134da559")]);
        match s.verify(&Input::post(&offer, b"", 0)) {
            Ok(Verdict::Handshake(h)) => {
                assert_eq!(h.kind, "hook_secret");
                assert_eq!(h.reply.headers[0].1, "b537207f20cbfa02357cf448134da559");
                assert_eq!(
                    h.action,
                    Some(Action::Learn(Learnt(Secret::new("b537207f20cbfa02357cf448134da559"))))
                );
            }
            other => panic!("{other:?}"),
        }
        let learnt = Secret::new("b537207f20cbfa02357cf448134da559");
        let body = br#"{"events":[]}"#;
        let sig = hex::encode(
            ring::hmac::sign(&ring::hmac::Key::new(ring::hmac::HMAC_SHA256, learnt.expose()), body)
                .as_ref(),
        );
        let h = test_headers(&[("X-Hook-Signature", &sig)]);
        assert!(matches!(s.verify_with(&Input::post(&h, body, 0), Some(&learnt), None), Ok(Verdict::Event(_))));
        // Before a secret was learnt, nothing verifies.
        assert_eq!(s.verify(&Input::post(&h, body, 0)), Err(Reject::NoMatch));
        let other = Secret::new("another");
        assert_eq!(s.verify_with(&Input::post(&h, body, 0), Some(&other), None), Err(Reject::NoMatch));
    }
}
