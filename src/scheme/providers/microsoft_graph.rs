//! Microsoft Graph change notifications: no signature. Creating a subscription, Graph POSTs
//! to the URL with `?validationToken=T`, which must be answered `200 text/plain` with T
//! decoded, within 10 seconds; nothing secret comes with it, so it is answered to anyone
//! (bounded, and never stored). Each notification in `value[]` carries the `clientState`
//! given when subscribing: every one must equal a configured secret (compared in constant
//! time), or the request is refused. A batch carries no id, so the id is the SHA-256 of the
//! body. Rich notifications' `validationTokens` (Microsoft-signed JWTs) are not checked.
//! Sources: learn.microsoft.com `graph/change-notifications-delivery-webhooks`.

use hyper::http::{Method, StatusCode};

use crate::scheme::keys::Tokens;
use crate::scheme::{
    Ctx, Draft, Handshake, IdRule, Identity, Input, Reject, Reply, Sample, Setup, Verdict,
    Verifier,
};

/// Graph's tokens are a few hundred characters; a longer one is not Graph's.
const MAX_TOKEN: usize = 4096;

pub const PROVIDER: super::Provider = super::Provider::new("microsoft-graph", build);

fn build(setup: &mut Setup) -> Result<Box<dyn Verifier>, String> {
    Ok(Box::new(Graph {
        client_states: Tokens::new(&setup.secrets()?),
    }))
}

#[derive(Debug)]
struct Graph {
    client_states: Tokens,
}

impl Verifier for Graph {
    fn verify(&self, input: &Input, ctx: &Ctx) -> Result<Verdict, Reject> {
        if let Some(token) = input.query_param("validationToken") {
            if token.is_empty() || token.len() > MAX_TOKEN {
                return Err(Reject::BadBody("a validationToken of no plausible length"));
            }
            return Handshake::verdict("validation", Reply::text(token));
        }
        let states = crate::scheme::json::each(input.body, "/value", "/clientState")
            .map_err(|_| Reject::MissingHeader("clientState in every notification"))?;
        if !states.iter().all(|s| self.client_states.contains(s.as_bytes())) {
            return Err(Reject::NoMatch);
        }
        Ok(Verdict::Event(Identity {
            event_id: ctx.event_id(input, &IdRule::BodySha256)?,
            provider_time: None,
            event_type: crate::scheme::json_str(input.body, "/value/0/changeType")
                .or_else(|| crate::scheme::json_str(input.body, "/value/0/lifecycleEvent")),
        }))
    }

    /// Graph answers 202 Accepted for notifications; a 200 is accepted too.
    fn stored_reply(&self, _input: &Input) -> Option<Reply> {
        Some(Reply::empty(StatusCode::ACCEPTED))
    }

    fn sign(&self, draft: &Draft) -> Sample {
        Sample::post(Vec::new(), draft.body)
    }

    fn demo_body(&self, id: &str, _now: i64) -> Vec<u8> {
        let state = String::from_utf8_lossy(self.client_states.first()).into_owned();
        serde_json::json!({ "value": [{
            "subscriptionId": id, "changeType": "created", "clientState": state,
            "resource": "Users/0/messages/0", "tenantId": "0",
        }] })
        .to_string()
        .into_bytes()
    }

    fn sign_handshake(&self, draft: &Draft) -> Option<Sample> {
        Some(Sample {
            method: Method::POST,
            query: Some(format!("validationToken={}", draft.id)),
            headers: Vec::new(),
            body: Vec::new(),
        })
    }

    /// Nothing is signed: `clientState` is compared, the rest of the body is not.
    fn signs_whole_body(&self) -> bool {
        false
    }

    fn default_id(&self) -> Option<IdRule> {
        Some(IdRule::BodySha256)
    }

    fn caveats(&self) -> Vec<String> {
        vec![
            "Microsoft Graph signs nothing: clientState is the only proof, and a captured \
             request can be replayed (a replay of the same bytes is a duplicate)"
                .into(),
        ]
    }
}

#[cfg(test)]
mod tests {
    use crate::scheme::{Handshake, Input, Reject, Reply, Verdict, test_headers, test_scheme};

    #[test]
    fn validation_and_client_state() {
        let s = test_scheme("microsoft-graph", &["secretClientValue"], "", None);
        let none = test_headers(&[]);
        let mut v = Input::post(&none, b"", 0);
        v.query = Some("validationToken=Validation%3A+Testing+client+application+reachability");
        assert_eq!(
            s.verify(&v),
            Handshake::verdict("validation", Reply::text("Validation: Testing client application reachability"))
        );
        let ok = br#"{"value":[{"clientState":"secretClientValue","changeType":"created"},{"clientState":"secretClientValue","changeType":"updated"}]}"#;
        assert!(matches!(s.verify(&Input::post(&none, ok, 0)), Ok(Verdict::Event(i)) if i.event_type.as_deref() == Some("created")));
        let one_bad = br#"{"value":[{"clientState":"secretClientValue"},{"clientState":"guess"}]}"#;
        assert_eq!(s.verify(&Input::post(&none, one_bad, 0)), Err(Reject::NoMatch));
        let missing = br#"{"value":[{"changeType":"created"}]}"#;
        assert!(s.verify(&Input::post(&none, missing, 0)).unwrap_err().is_auth());
    }
}
