//! Mailgun: the signature is inside the body. JSON webhooks carry
//! `{"signature": {"timestamp", "token", "signature"}, "event-data": {…}}`; routes and legacy
//! webhooks send form fields `timestamp`, `token` and `signature`. The signature is the hex
//! HMAC-SHA256 of `timestamp` followed by `token`, keyed with the webhook signing key, and
//! the timestamp is held to the tolerance.
//!
//! **Mailgun does not sign the event data.** The signature proves only that Mailgun made
//! that timestamp and token; whoever captured one request can, within the tolerance, send
//! other event data under it. Its id is `event-data.id` for JSON and the signed `token` for
//! forms. Sources: documentation.mailgun.com `user_manual/webhooks#securing-webhooks`.

use hyper::http::HeaderName;
use ring::hmac;

use crate::scheme::keys::Keys;
use crate::scheme::{
    Ctx, Draft, Horizon, IdRule, Identity, Input, Reject, Sample, Setup, Verdict, Verifier, value,
};

pub const PROVIDER: super::Provider = super::Provider::new("mailgun", build);

fn build(setup: &mut Setup) -> Result<Box<dyn Verifier>, String> {
    Ok(Box::new(Mailgun {
        keys: Keys::raw(hmac::HMAC_SHA256, &setup.secrets()?),
    }))
}

#[derive(Debug)]
struct Mailgun {
    keys: Keys,
}

/// The three signature fields, from the JSON `signature` object or the form.
fn fields(body: &[u8]) -> Option<(String, String, String, bool)> {
    use crate::scheme::json::text;
    if let (Some(ts), Some(token), Some(sig)) = (
        crate::scheme::json::field(body, "/signature/timestamp")
            .ok()
            .flatten()
            .and_then(|f| f.text_or_integer()),
        text(body, "/signature/token"),
        text(body, "/signature/signature"),
    ) {
        return Some((ts, token, sig, true));
    }
    let mut ts = None;
    let mut token = None;
    let mut sig = None;
    for (k, v) in form_urlencoded::parse(body) {
        let slot = match &*k {
            "timestamp" => &mut ts,
            "token" => &mut token,
            "signature" => &mut sig,
            _ => continue,
        };
        // A repeated field is ambiguous: which one did Mailgun sign?
        if slot.replace(v.into_owned()).is_some() {
            return None;
        }
    }
    Some((ts?, token?, sig?, false))
}

impl Verifier for Mailgun {
    fn verify(&self, input: &Input, ctx: &Ctx) -> Result<Verdict, Reject> {
        let (ts_text, token, sig, json) =
            fields(input.body).ok_or(Reject::MissingHeader("the body's signature fields"))?;
        let ts = crate::scheme::parse_timestamp(&ts_text, "the body's signature timestamp")?;
        ctx.check_time(ts, input.now)?;
        let tag = hex::decode(&sig).map_err(|_| Reject::NoMatch)?;
        if !self.keys.any_matches(format!("{ts_text}{token}").as_bytes(), &tag) {
            return Err(Reject::NoMatch);
        }
        let event_id = match ctx.id {
            Some(rule) => crate::scheme::event_id(input, rule)?,
            None if json => crate::scheme::event_id(input, &IdRule::pointer("/event-data/id"))?,
            None => crate::scheme::check_id(token)?,
        };
        Ok(Verdict::Event(Identity {
            event_id,
            provider_time: Some(ts),
            event_type: crate::scheme::json_str(input.body, "/event-data/event"),
        }))
    }

    /// Puts the signature into the body: a `signature` object for JSON, fields for a form.
    fn sign(&self, draft: &Draft) -> Sample {
        let ts = draft.now.to_string();
        let token = hex::encode(ring::digest::digest(
            &ring::digest::SHA256,
            format!("{}{ts}", draft.id).as_bytes(),
        ));
        let sig = hex::encode(self.keys.sign(format!("{ts}{token}").as_bytes()));
        let body = match serde_json::from_slice::<serde_json::Value>(draft.body) {
            Ok(serde_json::Value::Object(mut map)) => {
                map.insert(
                    "signature".into(),
                    serde_json::json!({ "timestamp": ts, "token": token, "signature": sig }),
                );
                serde_json::Value::Object(map).to_string().into_bytes()
            }
            _ => {
                let mut body = draft.body.to_vec();
                let fields = form_urlencoded::Serializer::new(String::new())
                    .append_pair("timestamp", &ts)
                    .append_pair("token", &token)
                    .append_pair("signature", &sig)
                    .finish();
                if !body.is_empty() {
                    body.push(b'&');
                }
                body.extend_from_slice(fields.as_bytes());
                body
            }
        };
        let content_type = if body.starts_with(b"{") {
            "application/json"
        } else {
            "application/x-www-form-urlencoded"
        };
        Sample::post(
            vec![(HeaderName::from_static("content-type"), value(content_type))],
            &body,
        )
    }

    fn demo_body(&self, id: &str, _now: i64) -> Vec<u8> {
        serde_json::json!({ "event-data": { "id": id, "event": "delivered",
                                            "recipient": "alice@example.com" } })
        .to_string()
        .into_bytes()
    }

    fn signs_timestamp(&self) -> bool {
        true
    }

    /// Only the timestamp and the token are signed, not the event data.
    fn signs_whole_body(&self) -> bool {
        false
    }

    fn default_id(&self) -> Option<IdRule> {
        Some(IdRule::pointer("/event-data/id"))
    }

    fn redelivery(&self) -> Option<Horizon> {
        Horizon::days(1, "Mailgun's retries over 8 hours")
    }

    fn caveats(&self) -> Vec<String> {
        vec![
            "Mailgun does not sign the event data, only a timestamp and a token: a captured \
             request's signature can carry other event data within the tolerance"
                .into(),
        ]
    }
}

#[cfg(test)]
mod tests {
    use crate::scheme::{Input, Reject, Verdict, test_headers, test_scheme};

    #[test]
    fn json_and_form_signatures() {
        let s = test_scheme("mailgun", &["key-mailgun"], "", None);
        let none = test_headers(&[]);
        let body = br#"{"event-data":{"id":"ev-1","event":"delivered"}}"#;
        let sample = s.sign_post(body, "ev-1", 1_700_000_000);
        match s.verify(&Input::post(&none, &sample.body, 1_700_000_000)) {
            Ok(Verdict::Event(i)) => {
                assert_eq!(i.event_id, "ev-1");
                assert_eq!(i.event_type.as_deref(), Some("delivered"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(s.verify(&Input::post(&none, &sample.body, 1_700_000_301)), Err(Reject::TooOld));
        let wrong = test_scheme("mailgun", &["other"], "", None);
        assert_eq!(wrong.verify(&Input::post(&none, &sample.body, 1_700_000_000)), Err(Reject::NoMatch));
        // The unsigned hole, as documented: other event data under the same signature passes.
        let forged = String::from_utf8(sample.body.clone()).unwrap().replace("delivered", "failed");
        assert!(s.verify(&Input::post(&none, forged.as_bytes(), 1_700_000_000)).is_ok());

        let form = s.sign_post(b"recipient=alice%40example.com&event=delivered", "x", 1_700_000_000);
        match s.verify(&Input::post(&none, &form.body, 1_700_000_000)) {
            Ok(Verdict::Event(i)) => assert_eq!(i.event_id.len(), 64),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            s.verify(&Input::post(&none, b"{}", 0)),
            Err(Reject::MissingHeader("the body's signature fields"))
        );
    }
}
