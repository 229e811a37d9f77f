//! Amazon SNS over HTTP against the real binary, with a local certificate host standing in
//! for `sns.<region>.amazonaws.com` (the test-only `sns-test-host` build reads its address
//! and CA from the environment): messages are built and signed here, as the AWS docs
//! describe them, with a fixed RSA test key (tests/fixtures) whose certificate the host
//! serves.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use ring::signature;

use crate::proc::Proc;
use crate::support::*;

const TOPIC: &str = "arn:aws:sns:us-east-1:123456789012:orders";
const KEY: &str = include_str!("../fixtures/sns-signing.key.pem");
const CERT: &str = include_str!("../fixtures/sns-signing.cert.pem");
/// A key the certificate is not for.
const OTHER_KEY: &str = include_str!("../fixtures/sns-other.key.pem");
const CERT_PATH: &str = "/SimpleNotificationService-0123456789abcdef0123456789abcdef.pem";

#[derive(Default)]
struct Seen {
    certs: AtomicUsize,
    confirms: AtomicUsize,
}

/// An HTTPS host on 127.0.0.1 serving the signing certificate and the confirmation URL;
/// returns its address and the PEM of its own (self-signed) TLS certificate.
async fn certificate_host(seen: Arc<Seen>) -> (String, String) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let tls = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
    let ca = tls.cert.pem();
    let key = rustls::pki_types::PrivateKeyDer::try_from(tls.signing_key.serialize_der()).unwrap();
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![tls.cert.der().clone()], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, seen) = (acceptor.clone(), seen.clone());
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let seen = seen.clone();
                    async move {
                        let (status, body) = if req.uri().path() == CERT_PATH {
                            seen.certs.fetch_add(1, Ordering::SeqCst);
                            (200, CERT.to_owned())
                        } else if req
                            .uri()
                            .query()
                            .is_some_and(|q| q.starts_with("Action=ConfirmSubscription"))
                        {
                            seen.confirms.fetch_add(1, Ordering::SeqCst);
                            (200, "<ConfirmSubscriptionResponse/>".to_owned())
                        } else {
                            (404, String::new())
                        };
                        Ok::<_, std::convert::Infallible>(
                            hyper::Response::builder()
                                .status(status)
                                .body(Full::new(Bytes::from(body)))
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, ca)
}

/// An SNS message as AWS builds it (signature version 2): the signed fields in order,
/// `Key\nValue\n` each.
fn message(kind: &str, id: &str, topic: &str, text: &str, host: &str, key: &str) -> Vec<u8> {
    let version = "2";
    let timestamp = &hookinbox::clock::iso_now();
    let cert_url = format!("https://{host}{CERT_PATH}");
    let subscribe =
        format!("https://{host}/?Action=ConfirmSubscription&TopicArn={topic}&Token=tok");
    let mut signed = String::new();
    let fields: Vec<(&str, &str)> = if kind == "Notification" {
        vec![
            ("Message", text),
            ("MessageId", id),
            ("Subject", "order placed"),
            ("Timestamp", timestamp),
            ("TopicArn", topic),
            ("Type", kind),
        ]
    } else {
        vec![
            ("Message", text),
            ("MessageId", id),
            ("SubscribeURL", &subscribe),
            ("Timestamp", timestamp),
            ("Token", "tok"),
            ("TopicArn", topic),
            ("Type", kind),
        ]
    };
    for (k, v) in &fields {
        signed.push_str(&format!("{k}\n{v}\n"));
    }
    let der = STANDARD
        .decode(
            key.lines()
                .filter(|l| !l.starts_with("-----"))
                .collect::<String>(),
        )
        .unwrap();
    let pair = signature::RsaKeyPair::from_pkcs8(&der).unwrap();
    let mut sig = vec![0; pair.public().modulus_len()];
    pair.sign(
        &signature::RSA_PKCS1_SHA256,
        &ring::rand::SystemRandom::new(),
        signed.as_bytes(),
        &mut sig,
    )
    .unwrap();
    let mut json = serde_json::json!({
        "Type": kind, "MessageId": id, "TopicArn": topic, "Message": text,
        "Timestamp": timestamp, "SignatureVersion": version,
        "Signature": STANDARD.encode(sig), "SigningCertURL": cert_url,
    });
    if kind == "Notification" {
        json["Subject"] = "order placed".into();
    } else {
        json["SubscribeURL"] = subscribe.into();
        json["Token"] = "tok".into();
    }
    json.to_string().into_bytes()
}

async fn post(client: &reqwest::Client, proc: &Proc, body: Vec<u8>) -> u16 {
    client
        .post(format!("http://{}/hooks/sns", proc.public))
        .header("Content-Type", "text/plain; charset=UTF-8")
        .body(body)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn sns_messages_verify_against_the_fetched_certificate_and_subscriptions_are_confirmed() {
    let seen = Arc::new(Seen::default());
    let (host, ca) = certificate_host(seen.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let ca_path = dir.path().join("ca.pem");
    std::fs::write(&ca_path, &ca).unwrap();
    let db = dir.path().join("inbox.db");
    let config = dir.path().join("hookinbox.toml");
    let sources = format!("[[sources]]\nname = \"sns\"\nscheme = \"sns\"\ntopics = [{TOPIC:?}]\n");
    std::fs::write(&config, config_text(SERVER, &db, &sources)).unwrap();
    let ca_arg = ca_path.display().to_string();
    let proc = Proc::spawn_env(
        &config,
        &[],
        &[
            ("HOOKINBOX_TEST_SNS_HOST", &host),
            ("HOOKINBOX_TEST_SNS_CA", &ca_arg),
        ],
    );
    let client = client();
    let conn = open_read(&db);
    let events = || -> i64 {
        conn.query_row("SELECT count(*) FROM events", [], |r| r.get(0))
            .unwrap()
    };

    // Signature version 2 (SHA-256; version 1 is checked at its vector's time in
    // scheme/providers/sns.rs); a replay is a duplicate.
    let v2 = message("Notification", "m-1", TOPIC, r#"{"order":1}"#, &host, KEY);
    assert_eq!(post(&client, &proc, v2.clone()).await, 200);
    assert_eq!(post(&client, &proc, v2.clone()).await, 200);
    assert_eq!(
        post(
            &client,
            &proc,
            message("Notification", "m-2", TOPIC, "two", &host, KEY)
        )
        .await,
        200
    );
    assert_eq!(events(), 2);
    assert_eq!(stored_body(&conn, "sns", "m-1").as_deref(), Some(&v2[..]));

    // Refused, nothing stored: a changed message, an unpinned topic, another key, a
    // certificate somewhere else.
    let tampered = String::from_utf8(v2.clone())
        .unwrap()
        .replace(r#"{\"order\":1}"#, r#"{\"order\":9}"#);
    assert_eq!(post(&client, &proc, tampered.into_bytes()).await, 401);
    let other_topic = "arn:aws:sns:us-east-1:123456789012:other";
    assert_eq!(
        post(
            &client,
            &proc,
            message("Notification", "m-3", other_topic, "x", &host, KEY)
        )
        .await,
        401
    );
    let forged = message("Notification", "m-4", TOPIC, "x", &host, OTHER_KEY);
    assert_eq!(post(&client, &proc, forged).await, 401);
    let elsewhere = String::from_utf8(message("Notification", "m-5", TOPIC, "x", &host, KEY))
        .unwrap()
        .replace(&host, "evil.example");
    assert_eq!(post(&client, &proc, elsewhere.into_bytes()).await, 401);
    assert_eq!(events(), 2);
    // The certificate was fetched once, and kept.
    assert_eq!(seen.certs.load(Ordering::SeqCst), 1);

    // A subscription confirmation for the pinned topic: confirmed by a GET, not stored.
    let confirm = message(
        "SubscriptionConfirmation",
        "c-1",
        TOPIC,
        "You have chosen to subscribe",
        &host,
        KEY,
    );
    assert_eq!(post(&client, &proc, confirm).await, 200);
    assert_eq!(seen.confirms.load(Ordering::SeqCst), 1);
    let unpinned = message(
        "SubscriptionConfirmation",
        "c-2",
        other_topic,
        "x",
        &host,
        KEY,
    );
    assert_eq!(post(&client, &proc, unpinned).await, 401);
    assert_eq!(
        seen.confirms.load(Ordering::SeqCst),
        1,
        "no confirmation for another topic"
    );
    assert_eq!(events(), 2);
    // What `hookinbox sign` prints for this source verifies too, event and handshake.
    let key = format!(
        "file:{}/tests/fixtures/sns-signing.key.pem",
        env!("CARGO_MANIFEST_DIR")
    );
    let config_arg = config.display().to_string();
    for extra in [&[][..], &["--handshake"]] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookinbox"))
            .args([
                "sign",
                "--config",
                &config_arg,
                "--source",
                "sns",
                "--format",
                "json",
            ])
            .args(["--signing-key", &key])
            .args(extra)
            .env("HOOKINBOX_TEST_SNS_HOST", &host)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let body = printed["body"].as_str().unwrap().as_bytes().to_vec();
        assert_eq!(post(&client, &proc, body).await, 200, "sign {extra:?}");
    }
    assert_eq!(
        events(),
        3,
        "the signed event is stored, its handshake is not"
    );
    assert_eq!(seen.confirms.load(Ordering::SeqCst), 2);
    let admin = proc.logs.lock().unwrap().join("\n");
    assert!(admin.contains("confirmed the subscription"), "{admin}");
    drop(proc);
}
