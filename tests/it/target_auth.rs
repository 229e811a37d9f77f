//! URL targets that authenticate: headers whose values are secrets, a client certificate for
//! mutual TLS, a private CA. Driven through `serve` against a real HTTPS app that demands a
//! client certificate; `check` through the real binary.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{HeaderMap, Request, Response};
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};

use crate::support::*;

/// A private CA, and a server and a client certificate it issued.
struct Pki {
    ca_pem: String,
    server_pem: String,
    server_key: String,
    client_pem: String,
    client_key: String,
}

fn pki() -> Pki {
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "hookinbox test CA");
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let issue = |names: Vec<String>| {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(names)
            .unwrap()
            .signed_by(&key, &ca)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (server_pem, server_key) = issue(vec!["127.0.0.1".into()]);
    let (client_pem, client_key) = issue(vec!["hookinbox.client".into()]);
    Pki {
        ca_pem: ca.pem(),
        server_pem,
        server_key,
        client_pem,
        client_key,
    }
}

/// What the app received: each request's headers and body.
type Log = Arc<Mutex<Vec<(HeaderMap, Vec<u8>)>>>;

/// An HTTPS app on 127.0.0.1 that completes a handshake only with a client certificate the
/// CA issued, and answers 200 to whatever it then gets.
async fn mtls_app(pki: &Pki) -> (SocketAddr, Log) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(pki.ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(roots))
        .build()
        .unwrap();
    use rustls::pki_types::pem::PemObject;
    let chain = rustls::pki_types::CertificateDer::pem_slice_iter(pki.server_pem.as_bytes())
        .map(|c| c.unwrap())
        .collect();
    let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(pki.server_key.as_bytes()).unwrap();
    let config = rustls::ServerConfig::builder()
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let log: Log = Arc::default();
    let shared = log.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (acceptor, log) = (acceptor.clone(), shared.clone());
            tokio::spawn(async move {
                // No client certificate, or one of another CA: the handshake fails here.
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let log = log.clone();
                    async move {
                        let (parts, body) = req.into_parts();
                        let body = body.collect().await.unwrap().to_bytes().to_vec();
                        log.lock().unwrap().push((parts.headers, body));
                        Ok::<_, std::convert::Infallible>(Response::new(Full::new(
                            Bytes::from_static(b"ok"),
                        )))
                    }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (addr, log)
}

fn write(dir: &std::path::Path, name: &str, text: &str, mode: u32) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_target_sends_its_headers_and_client_certificate_and_trusts_its_private_ca() {
    let pki = pki();
    let (addr, received) = mtls_app(&pki).await;
    let files = tempfile::tempdir().unwrap();
    let dir = files.path();
    let ca = write(dir, "ca.pem", &pki.ca_pem, 0o644);
    let cert = write(dir, "client.pem", &pki.client_pem, 0o644);
    let key = write(dir, "client.key", &pki.client_key, 0o600);
    let token = write(dir, "token", "Bearer s3cret-t0ken\n", 0o600);
    let url = format!("https://{addr}/hooks");
    // The same app three times: with everything, without the client certificate, and
    // without the CA; only the first gets through.
    let app = format!(
        r#"headers = {{ Authorization = "file:{token}", X-Tenant = "acme", webhook-id = "overridden" }}
client_cert = "{cert}"
client_key = "{key}"
ca = "{ca}"
retry = ["1h"]
[[sources.targets]]
name = "no_certificate"
url = "{url}"
ca = "{ca}"
retry = ["1h"]
[[sources.targets]]
name = "no_ca"
url = "{url}"
client_cert = "{cert}"
client_key = "{key}"
retry = ["1h"]"#
    );
    let sources = forwarding(&url, &app);
    let server = TestServer::start(&sources).await;
    let body = event_body("msg_mtls", "");
    let req = server.sign("sw", "msg_mtls", &body);
    assert_eq!(server.post("sw", &req).await.0, 200);
    assert_eq!(
        server
            .wait_count(
                "SELECT count(*) FROM deliveries WHERE target = 'app' AND state = 'delivered'",
                1
            )
            .await,
        1
    );
    let got = received.lock().unwrap().clone();
    assert_eq!(got.len(), 1, "only the target with both gets through");
    let (headers, got_body) = &got[0];
    assert_eq!(got_body, &body, "the exact bytes");
    assert_eq!(headers["authorization"], "Bearer s3cret-t0ken");
    assert_eq!(headers["x-tenant"], "acme");
    // The target's header replaces the provider's of the same name.
    assert_eq!(headers.get_all("webhook-id").iter().count(), 1);
    assert_eq!(headers["webhook-id"], "overridden");
    assert!(!headers["idempotency-key"].is_empty());
    // The others failed their handshake, and say why.
    let tried = "SELECT count(*) FROM deliveries WHERE target <> 'app' AND attempts > 0";
    assert_eq!(server.wait_count(tried, 2).await, 2);
    let errors = server.inbox().strings(
        "SELECT target || ': ' || coalesce(last_error, '') FROM deliveries \
         WHERE target <> 'app' AND attempts > 0 ORDER BY target",
    );
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors[0].starts_with("no_ca: connection failed"),
        "{errors:?}"
    );
    assert!(errors[0].contains("certificate"), "{errors:?}");
    assert!(errors[1].starts_with("no_certificate: "), "{errors:?}");
    assert_eq!(received.lock().unwrap().len(), 1);
    server.stop().await;
}

#[test]
fn check_shows_header_names_and_a_redacted_url_never_a_secret() {
    let pki = pki();
    let files = tempfile::tempdir().unwrap();
    let dir = files.path();
    let cert = write(dir, "client.pem", &pki.client_pem, 0o644);
    let key = write(dir, "client.key", &pki.client_key, 0o644);
    let config = write(
        dir,
        "hookinbox.toml",
        &format!(
            r#"
[store]
path = "inbox.db"
[[sources]]
name = "sw"
scheme = "standard-webhooks"
secrets = ["file:{dir}/secret"]
[[sources.targets]]
name = "app"
url = "https://forwarder:pa55word@app.example/hooks"
headers = {{ Authorization = "Bearer literal-t0ken", X-Tenant = "acme" }}
client_cert = "{cert}"
client_key = "{key}"
"#,
            dir = dir.display()
        ),
        0o644,
    );
    write(
        dir,
        "secret",
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        0o600,
    );
    for json in [false, true] {
        let args = if json {
            vec!["check", "--json", "--config", &config]
        } else {
            vec!["check", "--config", &config]
        };
        let (code, out, err) = hookinbox(&args);
        assert_eq!(code, 0, "{out}{err}");
        let all = format!("{out}{err}");
        assert!(!all.contains("pa55word"), "{all}");
        assert!(!all.contains("literal-t0ken"), "{all}");
        assert!(all.contains("forwarder:***@app.example"), "{all}");
        if !json {
            assert!(
                all.contains("with headers authorization, x-tenant"),
                "{all}"
            );
        }
        assert!(
            all.contains("headers.authorization is written in the config file"),
            "{all}"
        );
        assert!(!all.contains("headers.x-tenant is written"), "{all}");
        assert!(
            all.contains("client.key is readable by every user"),
            "{all}"
        );
    }

    // Mistakes are named with their key.
    for (target, says) in [
        (
            "url = \"http://app.example/\"\nca = \"ca.pem\"".to_owned(),
            "ca is for an https:// url",
        ),
        (
            format!("url = \"https://app.example/\"\nclient_cert = \"{cert}\""),
            "client_cert needs client_key",
        ),
        (
            format!("url = \"https://app.example/\"\nclient_cert = \"{cert}\"\nclient_key = \"{cert}\""),
            "are not a certificate and its private key",
        ),
        (
            "url = \"https://app.example/\"\nheaders = { Idempotency-Key = \"x\" }".to_owned(),
            "hookinbox sets this header itself",
        ),
        (
            format!(
                "url = \"https://app.example/\"\nsign_secret = \"file:{}/secret\"\n\
                 headers = {{ webhook-signature = \"v1,forged\" }}",
                dir.display()
            ),
            "with sign_secret, hookinbox signs the request and sets this header itself",
        ),
        (
            "url = \"http://forwarder:pa55word@app.example/\"\nca = \"ca.pem\"".to_owned(),
            "ca is for an https:// url; sources[0] (\"sw\").targets[0] (\"app\").url \"http://forwarder:***@app.example/\"",
        ),
        (
            "url = \"https://app.example/\"\nheaders = { Authorization = \"env:HOOKINBOX_NO_SUCH_VAR\" }".to_owned(),
            "headers.Authorization: environment variable HOOKINBOX_NO_SUCH_VAR is not set",
        ),
    ] {
        let config = write(
            dir,
            "bad.toml",
            &format!(
                "[store]\npath = \"inbox.db\"\n[[sources]]\nname = \"sw\"\nscheme = \
                 \"standard-webhooks\"\nsecrets = [\"file:{}/secret\"]\n[[sources.targets]]\n\
                 name = \"app\"\n{target}\n",
                dir.display()
            ),
            0o644,
        );
        let (code, out, err) = hookinbox(&["check", "--config", &config]);
        assert_ne!(code, 0, "{target}: {out}");
        assert!(err.contains(says), "{target}: {err}");
    }
}
