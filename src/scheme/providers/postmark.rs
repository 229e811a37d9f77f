//! Postmark: no signature. The webhook URL carries HTTP Basic credentials
//! (`https://user:password@host/hooks/NAME`), so each secret is `user:password`, compared in
//! constant time; Postmark also publishes the IP ranges it sends from, for a firewall. The
//! body is authenticated by TLS alone. Events carry no single id (opens and clicks repeat
//! a `MessageID`), so the id is the SHA-256 of the body. Sources: postmarkapp.com
//! `developer/webhooks/webhooks-overview`.

use crate::scheme::hmac::{Preset, TypeAt};
use crate::scheme::token::{Carrier, Token, TokenCheck};
use crate::scheme::{IdRule, Setup, Verifier};

pub const PROVIDER: super::Provider = super::Provider::new("postmark", build);

fn build(setup: &mut Setup) -> Result<Box<dyn Verifier>, String> {
    let check = TokenCheck::new(setup, Carrier::Basic)?;
    let preset = Preset {
        id: Some(IdRule::BodySha256),
        event_type: Some(TypeAt::Pointer("/RecordType")),
        caveats: &[
            "Postmark signs nothing: the Basic credentials in its URL are the only proof, and a \
             captured request can be replayed (a replay of the same bytes is a duplicate)",
        ],
        ..Preset::default()
    };
    Ok(Box::new(Token::new(check, preset)))
}

#[cfg(test)]
mod tests {
    use crate::scheme::{Input, Reject, Verdict, test_headers, test_scheme};

    #[test]
    fn basic_credentials() {
        let s = test_scheme("postmark", &["hooks:s3cret"], "", None);
        let body = br#"{"RecordType":"Delivery","MessageID":"m1"}"#;
        // base64("hooks:s3cret")
        let ok = test_headers(&[("Authorization", "Basic aG9va3M6czNjcmV0")]);
        assert!(matches!(s.verify(&Input::post(&ok, body, 0)), Ok(Verdict::Event(i)) if i.event_type.as_deref() == Some("Delivery")));
        for bad in ["Basic aG9va3M6czNjcmVU", "Bearer aG9va3M6czNjcmV0", "Basic !!!", "Basic"] {
            let h = test_headers(&[("Authorization", bad)]);
            assert!(s.verify(&Input::post(&h, body, 0)).unwrap_err().is_auth(), "{bad}");
        }
        assert_eq!(
            s.verify(&Input::post(&test_headers(&[]), body, 0)),
            Err(Reject::MissingHeader("Authorization"))
        );
        let sample = s.sign_post(body, "", 0);
        assert_eq!(sample.header("authorization"), Some("Basic aG9va3M6czNjcmV0"));
    }
}
