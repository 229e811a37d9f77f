//! Amazon SNS (HTTP/S subscriptions). The body is JSON (sent as `text/plain`) and signed
//! with RSA PKCS#1 v1.5, SHA-1 for `SignatureVersion` 1 and SHA-256 for 2, over
//! `Key\nValue\n` for each of a fixed list of fields, in order: for a `Notification`
//! `Message, MessageId, Subject (if present), Timestamp, TopicArn, Type`; for a
//! `SubscriptionConfirmation` or `UnsubscribeConfirmation` `Message, MessageId,
//! SubscribeURL, Timestamp, Token, TopicArn, Type`.
//!
//! The key is the certificate at `SigningCertURL`, which is fetched only from
//! `https://sns.<region>.amazonaws.com[.cn]/…pem`, the region being the topic's, over
//! HTTPS verified against the system's roots, and kept for a day; it must be valid now.
//! `TopicArn` must be one of the configured `topics`, checked before anything is fetched.
//! A `SubscriptionConfirmation` for such a topic is confirmed by a GET of its
//! `SubscribeURL` (host checked the same way), logged and counted, and answered 200 only
//! once that succeeded; nothing of it is stored. The id is the signed `MessageId`, the same
//! on a retry. Sources: docs.aws.amazon.com `sns/latest/dg/sns-verify-signature-of-message`,
//! `sns-message-and-json-formats`.
//!
//! Tests point the scheme at a local host with `HOOKINBOX_TEST_SNS_HOST` (and trust its CA
//! with `HOOKINBOX_TEST_SNS_CA`), which only a build with the `sns-test-host` feature reads:
//! a packaged build cannot be told to trust another host.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hyper::http::{HeaderName, Method, StatusCode};
use ring::signature;
use serde::Deserialize;

use crate::scheme::hmac::TimestampFormat;
use crate::scheme::{
    Action, Ctx, Draft, Handshake, IdRule, Identity, Input, Reject, Reply, Sample, Setup, Verdict,
    Verifier, value,
};

/// The certificate name `hookinbox sign` puts in its messages (a test key's).
const TEST_CERT: &str = "0123456789abcdef0123456789abcdef";

pub const PROVIDER: super::Provider = super::Provider::new("sns", build);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Settings {
    /// The topics whose messages this source accepts: `arn:aws:sns:REGION:ACCOUNT:NAME`.
    topics: Option<Vec<String>>,
}

fn build(setup: &mut Setup) -> Result<Box<dyn Verifier>, String> {
    setup.no_secrets(
        "SNS signs with Amazon's certificate; list the topics to accept in topics instead",
    )?;
    let settings: Settings = setup.settings()?;
    let topics = settings.topics.unwrap_or_default();
    if topics.is_empty() {
        return Err(format!(
            "{}: scheme \"sns\" needs topics, the ARNs of the topics whose messages it accepts \
             (like topics = [\"arn:aws:sns:us-east-1:123456789012:orders\"])",
            setup.at()
        ));
    }
    for t in &topics {
        if region(t).is_none() {
            return Err(format!(
                "{}.topics: {t:?} is not an SNS topic ARN (arn:aws:sns:REGION:ACCOUNT:NAME)",
                setup.at()
            ));
        }
    }
    Ok(Box::new(Sns {
        topics,
        test_host: test_host(),
    }))
}

/// The local host the tests stand up, in a build made for them.
fn test_host() -> Option<String> {
    #[cfg(feature = "sns-test-host")]
    {
        std::env::var("HOOKINBOX_TEST_SNS_HOST").ok()
    }
    #[cfg(not(feature = "sns-test-host"))]
    {
        None
    }
}

#[derive(Debug)]
struct Sns {
    topics: Vec<String>,
    test_host: Option<String>,
}

/// SNS names its certificates `/SimpleNotificationService-<hex>.pem`: anything else on its
/// host is not one, and is not fetched.
fn is_certificate_path(url: &str) -> bool {
    let Ok(u) = reqwest::Url::parse(url) else {
        return false;
    };
    u.query().is_none()
        && u.path()
            .strip_prefix("/SimpleNotificationService-")
            .and_then(|p| p.strip_suffix(".pem"))
            .is_some_and(|h| (16..=64).contains(&h.len()) && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The region of a topic ARN.
fn region(arn: &str) -> Option<&str> {
    let mut parts = arn.split(':');
    let (arn_, partition, service, region) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let (account, name) = (parts.next()?, parts.next()?);
    let ok = arn_ == "arn"
        && partition.starts_with("aws")
        && service == "sns"
        && !region.is_empty()
        && region.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && account.len() == 12
        && account.bytes().all(|b| b.is_ascii_digit())
        && !name.is_empty()
        && parts.next().is_none();
    ok.then_some(region)
}

/// The fields SNS signs, as sent.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Message {
    #[serde(rename = "Type")]
    kind: String,
    message_id: String,
    topic_arn: String,
    message: String,
    timestamp: String,
    signature_version: String,
    signature: String,
    #[serde(rename = "SigningCertURL")]
    signing_cert_url: String,
    subject: Option<String>,
    #[serde(rename = "SubscribeURL")]
    subscribe_url: Option<String>,
    token: Option<String>,
}

impl Message {
    fn parse(body: &[u8]) -> Result<Message, Reject> {
        serde_json::from_slice(body).map_err(|_| Reject::MissingHeader("the SNS message's fields"))
    }

    /// `Key\nValue\n` for each signed field, in SNS's order.
    fn signed(&self) -> Result<Vec<u8>, Reject> {
        let mut out = String::new();
        let mut add = |k: &str, v: &str| {
            out.push_str(k);
            out.push('\n');
            out.push_str(v);
            out.push('\n');
        };
        match self.kind.as_str() {
            "Notification" => {
                add("Message", &self.message);
                add("MessageId", &self.message_id);
                if let Some(s) = &self.subject {
                    add("Subject", s);
                }
                add("Timestamp", &self.timestamp);
                add("TopicArn", &self.topic_arn);
                add("Type", &self.kind);
            }
            "SubscriptionConfirmation" | "UnsubscribeConfirmation" => {
                let missing = Reject::MissingHeader("SubscribeURL and Token");
                add("Message", &self.message);
                add("MessageId", &self.message_id);
                add("SubscribeURL", self.subscribe_url.as_deref().ok_or(missing.clone())?);
                add("Timestamp", &self.timestamp);
                add("Token", self.token.as_deref().ok_or(missing)?);
                add("TopicArn", &self.topic_arn);
                add("Type", &self.kind);
            }
            _ => return Err(Reject::MalformedHeader("the SNS message Type")),
        }
        Ok(out.into_bytes())
    }
}

impl Sns {
    /// Whether `url` is on SNS's host for `region` (or the tests' host), over HTTPS.
    fn on_sns_host(&self, url: &str, region: &str) -> bool {
        let Ok(u) = reqwest::Url::parse(url) else {
            return false;
        };
        if u.scheme() != "https" || !u.username().is_empty() || u.password().is_some() {
            return false;
        }
        let Some(host) = u.host_str() else {
            return false;
        };
        if let Some(test) = &self.test_host {
            return format!("{host}:{}", u.port_or_known_default().unwrap_or(443)) == *test;
        }
        u.port().is_none()
            && (host == format!("sns.{region}.amazonaws.com")
                || host == format!("sns.{region}.amazonaws.com.cn"))
    }

    /// The pinned topic and its region, or a refusal.
    fn topic<'m>(&self, message: &'m Message) -> Result<&'m str, Reject> {
        if !self.topics.contains(&message.topic_arn) {
            return Err(Reject::NoMatch);
        }
        region(&message.topic_arn).ok_or(Reject::NoMatch)
    }
}

impl Verifier for Sns {
    fn key_url(&self, input: &Input) -> Result<Option<String>, Reject> {
        let message = Message::parse(input.body)?;
        let region = self.topic(&message)?;
        let url = &message.signing_cert_url;
        if !self.on_sns_host(url, region) || !is_certificate_path(url) {
            return Err(Reject::MalformedHeader("SigningCertURL"));
        }
        Ok(Some(url.clone()))
    }

    fn parse_key(&self, fetched: &[u8], now: i64) -> Result<Vec<u8>, String> {
        let (_, pem) = x509_parser::pem::parse_x509_pem(fetched)
            .map_err(|e| format!("the signing certificate is not PEM: {e}"))?;
        let cert = pem
            .parse_x509()
            .map_err(|e| format!("the signing certificate does not parse: {e}"))?;
        let at = x509_parser::time::ASN1Time::from_timestamp(now)
            .map_err(|e| format!("the clock: {e}"))?;
        if !cert.validity().is_valid_at(at) {
            return Err("the signing certificate is expired or not yet valid".into());
        }
        let spki = cert.public_key();
        if spki.algorithm.algorithm != x509_parser::oid_registry::OID_PKCS1_RSAENCRYPTION {
            return Err("the signing certificate's key is not RSA".into());
        }
        Ok(spki.subject_public_key.data.to_vec())
    }

    fn verify(&self, input: &Input, ctx: &Ctx) -> Result<Verdict, Reject> {
        let message = Message::parse(input.body)?;
        let region = self.topic(&message)?.to_owned();
        let key = ctx.fetched.ok_or(Reject::NoMatch)?;
        let algorithm: &dyn signature::VerificationAlgorithm = match message.signature_version.as_str() {
            "1" => &signature::RSA_PKCS1_2048_8192_SHA1_FOR_LEGACY_USE_ONLY,
            "2" => &signature::RSA_PKCS1_2048_8192_SHA256,
            _ => return Err(Reject::MalformedHeader("SignatureVersion")),
        };
        let sig = STANDARD
            .decode(&message.signature)
            .map_err(|_| Reject::MalformedHeader("Signature"))?;
        signature::UnparsedPublicKey::new(algorithm, key)
            .verify(&message.signed()?, &sig)
            .map_err(|_| Reject::NoMatch)?;
        // Signed, and the same on every retry: SNS retries HTTP/S deliveries for at most an
        // hour, so the default window is two.
        let provider_time = TimestampFormat::Rfc3339
            .parse(&message.timestamp)
            .map_err(|_| Reject::MalformedHeader("Timestamp"))?;
        ctx.check_time(provider_time, input.now)?;
        let provider_time = Some(provider_time);
        match message.kind.as_str() {
            "SubscriptionConfirmation" => {
                let url = message.subscribe_url.unwrap_or_default();
                if !self.on_sns_host(&url, &region) {
                    return Err(Reject::MalformedHeader("SubscribeURL"));
                }
                return Ok(Verdict::Handshake(Handshake {
                    kind: "subscription_confirmation",
                    reply: Reply::empty(StatusCode::OK),
                    action: Some(Action::Confirm(url)),
                }));
            }
            "UnsubscribeConfirmation" => {
                return Handshake::verdict("unsubscribe_confirmation", Reply::empty(StatusCode::OK));
            }
            _ => {}
        }
        Ok(Verdict::Event(Identity {
            event_id: ctx.event_id(input, &IdRule::pointer("/MessageId"))?,
            provider_time,
            event_type: message.subject.map(|s| s.chars().take(crate::scheme::MAX_INFO_CHARS).collect()),
        }))
    }

    fn sign(&self, draft: &Draft) -> Sample {
        let message = String::from_utf8_lossy(draft.body).into_owned();
        self.sample(draft, "Notification", message, None)
    }

    fn sign_handshake(&self, draft: &Draft) -> Option<Sample> {
        Some(self.sample(
            draft,
            "SubscriptionConfirmation",
            "You have chosen to subscribe to the topic; to confirm, visit the SubscribeURL.".into(),
            Some(draft.id),
        ))
    }

    fn demo_body(&self, id: &str, _now: i64) -> Vec<u8> {
        format!(r#"{{"order":"{id}"}}"#).into_bytes()
    }

    fn needs_signing_key(&self) -> bool {
        true
    }

    fn methods(&self) -> &'static [Method] {
        crate::scheme::POST
    }

    fn signs_timestamp(&self) -> bool {
        true
    }

    fn default_tolerance(&self) -> std::time::Duration {
        std::time::Duration::from_secs(2 * 3600)
    }

    fn signs_id(&self) -> bool {
        true
    }

    fn signs_whole_body(&self) -> bool {
        false
    }

    fn default_id(&self) -> Option<IdRule> {
        Some(IdRule::pointer("/MessageId"))
    }
}

impl Sns {
    /// An SNS message carrying `message` to the first topic, signed (version 2) with the
    /// draft's RSA key (PKCS#8 PEM), naming the certificate on SNS's host for the topic's
    /// region (or the tests' host).
    fn sample(&self, draft: &Draft, kind: &str, message: String, token: Option<&str>) -> Sample {
        let topic = self.topics[0].clone();
        let region = region(&topic).unwrap_or("us-east-1").to_owned();
        let host = self
            .test_host
            .clone()
            .unwrap_or_else(|| format!("sns.{region}.amazonaws.com"));
        let timestamp = TimestampFormat::Rfc3339.format(draft.now);
        let mut m = Message {
            kind: kind.into(),
            message_id: draft.id.into(),
            topic_arn: topic.clone(),
            message,
            timestamp,
            signature_version: "2".into(),
            signature: String::new(),
            signing_cert_url: format!("https://{host}/SimpleNotificationService-{TEST_CERT}.pem"),
            subject: None,
            subscribe_url: token.map(|t| {
                format!("https://{host}/?Action=ConfirmSubscription&TopicArn={topic}&Token={t}")
            }),
            token: token.map(Into::into),
        };
        let rng = ring::rand::SystemRandom::new();
        let pair = draft
            .signing_key
            .and_then(crate::scheme::keys::pkcs8_der)
            .and_then(|der| signature::RsaKeyPair::from_pkcs8(&der).ok());
        if let (Some(pair), Ok(signed)) = (pair, m.signed()) {
            let mut sig = vec![0; pair.public().modulus_len()];
            if pair.sign(&signature::RSA_PKCS1_SHA256, &rng, &signed, &mut sig).is_ok() {
                m.signature = STANDARD.encode(sig);
            }
        }
        let mut json = serde_json::json!({
            "Type": m.kind, "MessageId": m.message_id, "TopicArn": m.topic_arn,
            "Message": m.message, "Timestamp": m.timestamp, "SignatureVersion": "2",
            "Signature": m.signature, "SigningCertURL": m.signing_cert_url,
        });
        if let (Some(url), Some(token)) = (&m.subscribe_url, &m.token) {
            json["SubscribeURL"] = url.clone().into();
            json["Token"] = token.clone().into();
        }
        Sample::post(
            vec![
                (HeaderName::from_static("x-amz-sns-message-type"), value(kind)),
                (HeaderName::from_static("x-amz-sns-message-id"), value(draft.id)),
                (HeaderName::from_static("x-amz-sns-topic-arn"), value(&topic)),
                (hyper::header::CONTENT_TYPE, value("text/plain; charset=UTF-8")),
            ],
            json.to_string().as_bytes(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOPIC: &str = "arn:aws:sns:us-east-1:123456789012:orders";

    fn scheme() -> Sns {
        Sns {
            topics: vec![TOPIC.into()],
            test_host: None,
        }
    }

    #[test]
    fn certificate_and_confirmation_hosts() {
        let s = scheme();
        for ok in [
            "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-abc.pem",
            "https://sns.us-east-1.amazonaws.com.cn/x.pem",
        ] {
            assert!(s.on_sns_host(ok, "us-east-1"), "{ok}");
        }
        for bad in [
            "http://sns.us-east-1.amazonaws.com/x.pem",
            "https://sns.eu-west-1.amazonaws.com/x.pem",
            "https://sns.us-east-1.amazonaws.com.evil.example/x.pem",
            "https://evil.example/sns.us-east-1.amazonaws.com/x.pem",
            "https://user@sns.us-east-1.amazonaws.com/x.pem",
            "https://sns.us-east-1.amazonaws.com:8443/x.pem",
            "not a url",
        ] {
            assert!(!s.on_sns_host(bad, "us-east-1"), "{bad}");
        }
    }

    const CERT: &[u8] = include_bytes!("../../../tests/fixtures/sns-signing.cert.pem");
    /// `openssl dgst -sha1 -sign tests/fixtures/sns-signing.key.pem` over the signed fields
    /// below: a version 1 (SHA-1) signature, which ring cannot make.
    const V1_SIGNATURE: &str = "aMjdvs9tbg5yjrr8Al4ZEh7oWD2XTPhBq1RTk0wQDw24Cpg3bCroAypZZ62MpJpBODo4360TjbuugyTGLr68PGo1Rf4Ow0sdhWPOmN1HLxw81Zz5kWnQLMqNCWohu3w6km1oWe1d64GmaSdpYG9aZA4iAI1BFtgfBv7rJWL1umtGtgOAj4stDEOub2/it1yj/DwtsHAb7OM1lBzts5osC6psAKXe1aY0LQ7NMerYSvcIKPrVqOCy1dBrYqB9Tl7ACbReC4tBpsT0BQ7AAlNoshCNgKU9brvvRnLATxmolg8DeDuRDu34AmrRWQDG7C9urTWdrY0jD80xlMv8keEXcA==";

    #[test]
    fn signature_version_1_at_its_time() {
        let s = scheme();
        let key = s.parse_key(CERT, 1_800_000_000).unwrap();
        let body = serde_json::json!({
            "Type": "Notification", "MessageId": "m-2", "TopicArn": TOPIC, "Message": "two",
            "Subject": "order placed", "Timestamp": "2026-12-01T12:00:00.000Z",
            "SignatureVersion": "1", "Signature": V1_SIGNATURE,
            "SigningCertURL": "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0123456789abcdef.pem",
        })
        .to_string();
        let h = crate::scheme::test_headers(&[]);
        let ctx = |now| (Input::post(&h, body.as_bytes(), now), now);
        let at = 1_796_126_400; // 2026-12-01T12:00:00Z, the message's Timestamp
        let (input, _) = ctx(at);
        let verdict = s.verify(
            &input,
            &Ctx { tolerance: 7200, id: None, learnt: None, fetched: Some(&key) },
        );
        assert!(matches!(verdict, Ok(Verdict::Event(ref i)) if i.event_id == "m-2"), "{verdict:?}");
        // Two hours later it is too old; a changed field does not verify.
        let (late, _) = ctx(at + 7201);
        assert_eq!(
            s.verify(&late, &Ctx { tolerance: 7200, id: None, learnt: None, fetched: Some(&key) }),
            Err(Reject::TooOld)
        );
        let changed = body.replace("\"two\"", "\"tw0\"");
        let input = Input::post(&h, changed.as_bytes(), at);
        assert_eq!(
            s.verify(&input, &Ctx { tolerance: 7200, id: None, learnt: None, fetched: Some(&key) }),
            Err(Reject::NoMatch)
        );
        // The certificate is refused once expired.
        assert!(s.parse_key(CERT, 5_000_000_000).unwrap_err().contains("expired"));
    }

    #[test]
    fn only_certificate_names_are_fetched() {
        assert!(is_certificate_path(
            "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-9c6465fa7f48f5cacd23014631ec1136.pem"
        ));
        for bad in [
            "https://sns.us-east-1.amazonaws.com/anything.pem",
            "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-xyz.pem",
            "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-9c6465fa7f48f5ca.pem?x=1",
        ] {
            assert!(!is_certificate_path(bad), "{bad}");
        }
    }

    #[test]
    fn topics_are_required_and_must_be_arns() {
        let build = |settings: &str| {
            let table: toml::Table = toml::from_str(settings).unwrap();
            crate::scheme::Scheme::build(crate::scheme::Setup::literal("sns", vec![], table), None, None)
        };
        assert!(build("").unwrap_err().contains("needs topics"));
        assert!(build(r#"topics = ["orders"]"#).unwrap_err().contains("not an SNS topic ARN"));
        assert!(build(&format!("topics = [{TOPIC:?}]")).is_ok());
        let with_secret = crate::scheme::Scheme::build(
            crate::scheme::Setup::literal(
                "sns",
                vec![crate::secret::Secret::new("x")],
                toml::from_str(&format!("topics = [{TOPIC:?}]")).unwrap(),
            ),
            None,
            None,
        );
        assert!(with_secret.unwrap_err().contains("takes no secrets"));
    }

    #[test]
    fn unpinned_topics_are_refused_before_any_fetch() {
        let s = scheme();
        let body = serde_json::json!({
            "Type": "Notification", "MessageId": "m", "TopicArn": "arn:aws:sns:us-east-1:123456789012:other",
            "Message": "x", "Timestamp": "2026-01-01T00:00:00.000Z", "SignatureVersion": "2",
            "Signature": "", "SigningCertURL": "https://sns.us-east-1.amazonaws.com/x.pem",
        })
        .to_string();
        let h = crate::scheme::test_headers(&[]);
        assert_eq!(s.key_url(&Input::post(&h, body.as_bytes(), 0)), Err(Reject::NoMatch));
    }
}
