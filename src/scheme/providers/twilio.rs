//! Twilio: `X-Twilio-Signature: <base64>`, HMAC-SHA1 keyed with the account's Auth Token,
//! over the full URL Twilio called (`public_url`, then the query as sent) followed, for a
//! form POST, by every parameter's name and value, sorted by name (then value). For a JSON
//! body the URL carries `bodySHA256=<hex SHA-256 of the body>`, the signature covers the URL
//! alone, and the body must hash to it. Like Twilio's own validators, the URL is tried as
//! configured and with its default port added or removed (`:443`, `:80`), since Twilio signs
//! the URL exactly as it was set at Twilio.
//!
//! Only POST is served: a GET callback carries its data in the query, which hookinbox does
//! not store yet (configure Twilio's callbacks as HTTP POST). A body the signature covers
//! neither as a form nor through `bodySHA256` is refused.
//!
//! Twilio signs no timestamp and no id. The id is `I-Twilio-Idempotency-Token`, which the
//! signature does not cover, else the SHA-256 of the body. Sources: twilio.com
//! `docs/usage/webhooks/webhooks-security`, twilio-python `request_validator.py` and its
//! tests (the vectors below). Twilio's newer `X-Twilio-Webhooks-Signature-Settings`
//! (HMAC-SHA256 with a shared key) is not supported yet.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hyper::http::{HeaderName, HeaderValue, Method};
use ring::hmac;

use crate::scheme::hmac::UrlSettings;
use crate::scheme::keys::Keys;
use crate::scheme::{
    Ctx, Draft, Horizon, IdRule, Identity, Input, Reject, Sample, Setup, Verdict, Verifier, value,
};

const SIGNATURE_HEADER: &str = "X-Twilio-Signature";
const FORM: &str = "application/x-www-form-urlencoded";

pub const PROVIDER: super::Provider = super::Provider::new("twilio", build);

fn build(setup: &mut Setup) -> Result<Box<dyn Verifier>, String> {
    let public_url = UrlSettings::required(setup)?;
    let public_url = crate::scheme::setup::public_url(setup.at(), &public_url)?;
    Ok(Box::new(Twilio {
        keys: Keys::raw(hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, &setup.secrets()?),
        urls: url_variants(&public_url),
    }))
}

#[derive(Debug)]
struct Twilio {
    keys: Keys,
    /// The public URL as configured, then with its default port toggled.
    urls: Vec<String>,
}

/// `url`, and `url` with the scheme's default port added (or removed, if it has one),
/// worked on the text as configured: Twilio signs the URL exactly as it was set.
fn url_variants(url: &str) -> Vec<String> {
    let mut out = vec![url.to_owned()];
    let Some((scheme, rest)) = url.split_once("://") else {
        return out;
    };
    let default = match scheme.to_ascii_lowercase().as_str() {
        "https" => "443",
        "http" => "80",
        _ => return out,
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (format!("{u}@"), h),
        None => (String::new(), authority),
    };
    // The port follows the last ':' outside an IPv6 literal's brackets.
    let host_end = hostport.rfind(']').map_or(0, |i| i + 1);
    let toggled = match hostport[host_end..].rfind(':') {
        Some(i) => {
            let (host, port) = hostport.split_at(host_end + i);
            if &port[1..] != default {
                return out;
            }
            host.to_owned()
        }
        None => format!("{hostport}:{default}"),
    };
    out.push(format!("{scheme}://{userinfo}{toggled}{tail}"));
    out
}

fn is_form(input_headers: &hyper::http::HeaderMap) -> bool {
    input_headers
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.split(';').next().unwrap_or("").trim().eq_ignore_ascii_case(FORM))
}

/// What follows the URL in the signed string: the sorted form parameters.
fn form_suffix(body: &[u8]) -> Vec<u8> {
    let mut params: Vec<(String, String)> = form_urlencoded::parse(body).into_owned().collect();
    params.sort();
    let mut out = Vec::new();
    for (k, v) in params {
        out.extend_from_slice(k.as_bytes());
        out.extend_from_slice(v.as_bytes());
    }
    out
}

impl Verifier for Twilio {
    fn verify(&self, input: &Input, ctx: &Ctx) -> Result<Verdict, Reject> {
        let signature = crate::scheme::header(input.headers, SIGNATURE_HEADER)?;
        let tag = STANDARD
            .decode(signature)
            .map_err(|_| Reject::MalformedHeader(SIGNATURE_HEADER))?;
        let suffix = if is_form(input.headers) {
            form_suffix(input.body)
        } else {
            Vec::new()
        };
        let matched = self.urls.iter().any(|url| {
            let mut signed = url.as_bytes().to_vec();
            if let Some(q) = input.query {
                signed.push(b'?');
                signed.extend_from_slice(q.as_bytes());
            }
            signed.extend_from_slice(&suffix);
            self.keys.any_matches(&signed, &tag)
        });
        if !matched {
            return Err(Reject::NoMatch);
        }
        // A JSON body is covered only through the hash the signed URL carries.
        if let Some(expected) = input.query_param("bodySHA256") {
            let actual = hex::encode(ring::digest::digest(&ring::digest::SHA256, input.body));
            if !actual.eq_ignore_ascii_case(&expected) {
                return Err(Reject::NoMatch);
            }
        } else if suffix.is_empty() && !input.body.is_empty() {
            // Authentic URL, unsigned body: stored, it would be data nobody signed.
            return Err(Reject::NoMatch);
        }
        let event_type = form_urlencoded::parse(input.body)
            .find(|(k, _)| k == "MessageStatus" || k == "CallStatus" || k == "SmsStatus")
            .map(|(_, v)| v.chars().take(crate::scheme::MAX_INFO_CHARS).collect());
        Ok(Verdict::Event(Identity {
            event_id: ctx.event_id(input, &default_id())?,
            provider_time: None,
            event_type,
        }))
    }

    /// A form body is sent as a form; a JSON body with `bodySHA256` in the query.
    fn sign(&self, draft: &Draft) -> Sample {
        let json = serde_json::from_slice::<serde::de::IgnoredAny>(draft.body).is_ok();
        let (query, suffix, content_type) = if json {
            let hash = hex::encode(ring::digest::digest(&ring::digest::SHA256, draft.body));
            (Some(format!("bodySHA256={hash}")), Vec::new(), "application/json")
        } else {
            (None, form_suffix(draft.body), FORM)
        };
        let mut signed = self.urls[0].as_bytes().to_vec();
        if let Some(q) = &query {
            signed.push(b'?');
            signed.extend_from_slice(q.as_bytes());
        }
        signed.extend_from_slice(&suffix);
        let tag = STANDARD.encode(self.keys.sign(&signed));
        Sample {
            method: Method::POST,
            query,
            headers: vec![
                (hyper::header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
                (HeaderName::from_static("x-twilio-signature"), value(&tag)),
                (HeaderName::from_static("i-twilio-idempotency-token"), value(draft.id)),
            ],
            body: draft.body.to_vec(),
        }
    }

    fn demo_body(&self, id: &str, _now: i64) -> Vec<u8> {
        form_urlencoded::Serializer::new(String::new())
            .append_pair("MessageSid", id)
            .append_pair("MessageStatus", "delivered")
            .append_pair("From", "+15005550006")
            .append_pair("To", "+15005550009")
            .finish()
            .into_bytes()
    }

    fn default_id(&self) -> Option<IdRule> {
        Some(default_id())
    }

    fn redelivery(&self) -> Option<Horizon> {
        Horizon::days(1, "Twilio's retries and the fallback URL")
    }
}

fn default_id() -> IdRule {
    IdRule::FirstOf(vec![
        IdRule::header("i-twilio-idempotency-token"),
        IdRule::BodySha256,
    ])
}

#[cfg(test)]
mod tests {
    use super::url_variants;
    use crate::scheme::{Input, Reject, Verdict, test_headers, test_scheme};

    const TOKEN: &str = "12345";
    const FORM_BODY: &[u8] = b"CallSid=CA1234567890ABCDE&Caller=%2B14158675309&Digits=1234&From=%2B14158675309&To=%2B18005551212";

    fn scheme(url: &str) -> crate::scheme::Scheme {
        test_scheme("twilio", &[TOKEN], &format!("public_url = {url:?}"), None)
    }

    fn verify(s: &crate::scheme::Scheme, sig: &str, ct: &str, query: &str, body: &[u8]) -> Result<Verdict, Reject> {
        let h = test_headers(&[("X-Twilio-Signature", sig), ("Content-Type", ct), ("I-Twilio-Idempotency-Token", "tok-1")]);
        let mut input = Input::post(&h, body, 0);
        input.query = Some(query);
        s.verify(&input)
    }

    #[test]
    fn published_form_and_json_vectors() {
        let s = scheme("https://mycompany.com/myapp.php");
        let form = "application/x-www-form-urlencoded";
        assert!(verify(&s, "RSOYDt4T1cUTdK1PDd93/VVr8B8=", form, "foo=1&bar=2", FORM_BODY).is_ok());
        // The parameters are sorted: their order in the body does not matter.
        let shuffled = b"To=%2B18005551212&CallSid=CA1234567890ABCDE&Caller=%2B14158675309&Digits=1234&From=%2B14158675309";
        assert!(verify(&s, "RSOYDt4T1cUTdK1PDd93/VVr8B8=", form, "foo=1&bar=2", shuffled).is_ok());
        assert_eq!(
            verify(&s, "RSOYDt4T1cUTdK1PDd93/VVr8B8=", form, "foo=1&bar=3", FORM_BODY),
            Err(Reject::NoMatch)
        );
        let json = br#"{"property": "value", "boolean": true}"#;
        let q = "foo=1&bar=2&bodySHA256=0a1ff7634d9ab3b95db5c9a2dfe9416e41502b283a80c7cf19632632f96e6620";
        assert!(verify(&s, "a9nBmqA0ju/hNViExpshrM61xv4=", "application/json", q, json).is_ok());
        // The body must hash to what the signed URL says.
        let tampered = br#"{"property": "value", "boolean": false}"#;
        assert_eq!(verify(&s, "a9nBmqA0ju/hNViExpshrM61xv4=", "application/json", q, tampered), Err(Reject::NoMatch));
    }

    #[test]
    fn with_and_without_the_default_port() {
        assert_eq!(
            url_variants("https://mycompany.com/myapp.php"),
            ["https://mycompany.com/myapp.php", "https://mycompany.com:443/myapp.php"]
        );
        assert_eq!(
            url_variants("http://h:80/x"),
            ["http://h:80/x", "http://h/x"]
        );
        assert_eq!(url_variants("https://h:8443/x"), ["https://h:8443/x"]);
        // The port is compared as a port, not a prefix of the text.
        assert_eq!(url_variants("https://example.com:4430/x"), ["https://example.com:4430/x"]);
        assert_eq!(
            url_variants("https://u:p@Example.COM/x?y"),
            ["https://u:p@Example.COM/x?y", "https://u:p@Example.COM:443/x?y"]
        );
        assert_eq!(url_variants("https://[::1]/x"), ["https://[::1]/x", "https://[::1]:443/x"]);
        assert_eq!(url_variants("https://[::1]:443"), ["https://[::1]:443", "https://[::1]"]);
        // Signed by Twilio as https://mycompany.com:443/…, configured without the port.
        let s = scheme("https://mycompany.com/myapp.php");
        assert!(verify(&s, "kvajT1Ptam85bY51eRf/AJRuM3w=", "application/x-www-form-urlencoded", "foo=1&bar=2", FORM_BODY).is_ok());
    }

    #[test]
    fn a_body_the_signature_does_not_cover_is_refused() {
        let s = scheme("https://mycompany.com/myapp.php");
        // The URL-only signature of the form vector's URL, with a body it does not cover.
        let url_only = {
            use base64::Engine as _;
            let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, TOKEN.as_bytes());
            let tag = ring::hmac::sign(&key, b"https://mycompany.com/myapp.php?foo=1&bar=2");
            base64::engine::general_purpose::STANDARD.encode(tag.as_ref())
        };
        assert!(verify(&s, &url_only, "text/plain", "foo=1&bar=2", b"").is_ok());
        assert_eq!(
            verify(&s, &url_only, "text/plain", "foo=1&bar=2", b"anything at all"),
            Err(Reject::NoMatch)
        );
    }

    #[test]
    fn sign_round_trips_forms_and_json() {
        let s = scheme("https://hooks.example.com/hooks/twilio");
        for body in [&b"MessageSid=SM1&MessageStatus=sent"[..], br#"{"a":1}"#] {
            let sample = s.sign_post(body, "tok-9", 0);
            let h: hyper::http::HeaderMap = sample.headers.into_iter().collect();
            let mut input = Input::post(&h, body, 0);
            input.query = sample.query.as_deref();
            match s.verify(&input) {
                Ok(Verdict::Event(i)) => assert_eq!(i.event_id, "tok-9"),
                other => panic!("{other:?}"),
            }
        }
    }
}
