//! The public listener's certificates: obtained by ACME from a real ACME server (Debian's
//! `pebble`, Let's Encrypt's test server, with `pebble-challtestsrv` answering DNS), served,
//! kept across a restart and renewed without one; two PostgreSQL replicas ordering once, the
//! one waiting answering the other's validation; HTTP-01 on a listener of its own; and
//! certificate files followed as they change on disk.
//!
//! pebble rejects a share of nonces at random (`PEBBLE_WFE_NONCEREJECT`, left at its
//! default) and issues certificates for as long as its `certificateValidityPeriod` says:
//! 45 seconds here, so that the renewal at two thirds of the lifetime comes within the
//! test. Without pebble the test skips, unless `HOOKINBOX_REQUIRE_PEBBLE` is set.

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hookinbox::config::CertInfo;
use rustls::pki_types::{CertificateDer, ServerName};

use crate::proc::{Proc, deploy};
use crate::support::*;

const DOMAIN: &str = "hooks.example.com";
/// pebble's certificates live this long (seconds): renewal comes 30 s after issuance.
const VALIDITY: u64 = 45;

/// A port free on 127.0.0.1 for both TCP and UDP (the DNS server binds both).
fn free_port() -> u16 {
    loop {
        let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = tcp.local_addr().unwrap().port();
        if UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// pebble and its DNS server, stopped when dropped.
struct Pebble {
    children: Vec<Child>,
    directory: String,
    management: String,
    /// The CA of pebble's own HTTPS (directory and management), made by the test.
    own_ca: PathBuf,
}

impl Drop for Pebble {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn installed(program: &str) -> bool {
    Command::new(program)
        .arg("-h")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// Starts pebble validating TLS-ALPN-01 on `tls_port`, or says why it cannot.
fn pebble(test: &str, dir: &Path, tls_port: u16) -> Option<Pebble> {
    pebble_with(test, dir, tls_port, 0)
}

/// [`pebble`], validating HTTP-01 on `http_port`.
fn pebble_with(test: &str, dir: &Path, tls_port: u16, http_port: u16) -> Option<Pebble> {
    if !installed("pebble") || !installed("pebble-challtestsrv") {
        skip(
            "PEBBLE",
            test,
            "pebble and pebble-challtestsrv are not installed (Debian: apt-get install pebble)",
        );
        return None;
    }
    // pebble's own HTTPS: a certificate for 127.0.0.1 that hookinbox is told to trust.
    let own =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()]).unwrap();
    let (own_ca, own_key) = (dir.join("pebble-cert.pem"), dir.join("pebble-key.pem"));
    std::fs::write(&own_ca, own.cert.pem()).unwrap();
    std::fs::write(&own_key, own.signing_key.serialize_pem()).unwrap();
    let (dns, dns_management, listen, management) =
        (free_port(), free_port(), free_port(), free_port());
    let challtestsrv = Command::new("pebble-challtestsrv")
        .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
        .args(["-dns01", &format!("127.0.0.1:{dns}")])
        .args(["-http01", "", "-https01", "", "-tlsalpn01", ""])
        .args(["-management", &format!("127.0.0.1:{dns_management}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let config = dir.join("pebble.json");
    let settings = serde_json::json!({
        "pebble": {
            "listenAddress": format!("127.0.0.1:{listen}"),
            "managementListenAddress": format!("127.0.0.1:{management}"),
            "certificate": own_ca,
            "privateKey": own_key,
            "httpPort": http_port,
            "tlsPort": tls_port,
            "ocspResponderURL": "",
            "externalAccountBindingRequired": false,
            "certificateValidityPeriod": VALIDITY,
        }
    });
    std::fs::write(&config, settings.to_string()).unwrap();
    let log = std::fs::File::create(dir.join("pebble.log")).unwrap();
    let server = Command::new("pebble")
        .arg("-config")
        .arg(&config)
        .args(["-dnsserver", &format!("127.0.0.1:{dns}")])
        .env("PEBBLE_VA_NOSLEEP", "1")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let pebble = Pebble {
        children: vec![challtestsrv, server],
        directory: format!("https://127.0.0.1:{listen}/dir"),
        management: format!("https://127.0.0.1:{management}"),
        own_ca,
    };
    let up = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", listen)).is_err()
        || std::net::TcpStream::connect(("127.0.0.1", management)).is_err()
    {
        assert!(
            up.elapsed() < Duration::from_secs(20),
            "pebble did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(pebble)
}

/// A client trusting only `pem`'s certificates, reaching `DOMAIN` on 127.0.0.1.
fn client_trusting(pem: &[u8]) -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let certs = reqwest::Certificate::from_pem_bundle(pem).unwrap();
    reqwest::Client::builder()
        .no_proxy()
        .tls_certs_only(certs)
        .resolve(DOMAIN, "127.0.0.1:0".parse().unwrap())
        .build()
        .unwrap()
}

/// The certificate a TLS handshake with `addr` for `DOMAIN` is served, verified against
/// `roots` (a handshake that fails is an error).
async fn served(addr: SocketAddr, roots: &[u8]) -> Result<CertInfo, String> {
    Ok(connect(addr, roots).await?.1)
}

type Tls = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

/// A TLS connection to `addr` for `DOMAIN`, verified against `roots`, and the certificate
/// it was served.
async fn connect(addr: SocketAddr, roots: &[u8]) -> Result<(Tls, CertInfo), String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut store = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(roots) {
        let cert: CertificateDer = cert.unwrap();
        store.add(cert).unwrap();
    }
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(store)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let tls = connector
        .connect(ServerName::try_from(DOMAIN).unwrap(), tcp)
        .await
        .map_err(|e| e.to_string())?;
    let leaf = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
    let info = CertInfo::of(&leaf)?;
    Ok((tls, info))
}

/// Sends `req` on the open connection `tls` (HTTP/1.1, kept alive); the answer's status.
async fn post_on(tls: &mut Tls, req: &Signed) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut head = format!(
        "POST /hooks/sw HTTP/1.1\r\nHost: {DOMAIN}\r\nContent-Length: {}\r\n",
        req.body.len()
    );
    for (name, value) in &req.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.write_all(&req.body).await.unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    let end = loop {
        let n = tls.read(&mut buf).await.unwrap();
        assert!(
            n > 0,
            "the connection was closed: {}",
            String::from_utf8_lossy(&answer)
        );
        answer.extend_from_slice(&buf[..n]);
        if let Some(i) = answer.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&answer[..end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().unwrap());
    while answer.len() < end + length {
        let n = tls.read(&mut buf).await.unwrap();
        assert!(n > 0, "the connection was closed mid-answer");
        answer.extend_from_slice(&buf[..n]);
    }
    head[9..12].parse().unwrap()
}

async fn get(client: &reqwest::Client, url: &str) -> (u16, String) {
    let resp = client.get(url).send().await.unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Waits until `/readyz` says ready, returning every other answer it gave.
async fn until_ready(admin: &str, serve: &Proc, pebble_log: &Path) -> Vec<String> {
    let client = reqwest::Client::new();
    let mut not_ready = Vec::new();
    let start = Instant::now();
    loop {
        let (status, body) = get(&client, &format!("{admin}/readyz")).await;
        if status == 200 {
            return not_ready;
        }
        if not_ready.last() != Some(&body) {
            not_ready.push(body);
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no certificate after a minute: {not_ready:?}\nhookinbox: {:#?}\npebble: {}",
            serve.logs.lock().unwrap().clone(),
            std::fs::read_to_string(pebble_log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_certificate_is_obtained_served_kept_across_a_restart_and_renewed() {
    let test = "acme::a_certificate_is_obtained_served_kept_across_a_restart_and_renewed";
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let (port, admin_port) = (free_port(), free_port());
    let Some(pebble) = pebble(test, dir.path(), port) else {
        return;
    };
    let server = format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\n\
         [server.tls.acme]\ndomains = [\"{DOMAIN}\"]\ncontact = \"mailto:ops@example.com\"\n\
         directory = \"{}\"\ndirectory_ca = {:?}\n\
         [admin]\nlisten = \"127.0.0.1:{admin_port}\"\n",
        pebble.directory,
        pebble.own_ca.display().to_string()
    );
    let deployed = deploy(ONE_SOURCE);
    let db = deployed.db.clone();
    std::fs::write(&deployed.config, config_text(&server, &db, ONE_SOURCE)).unwrap();
    let (code, out, err) = hookinbox(&["check", "--config", deployed.config.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let admin = format!("http://127.0.0.1:{admin_port}");

    // Before its certificate: no handshake completes, and /readyz says why.
    let first = Proc::spawn(&deployed.config);
    let pending = served(addr, b"").await;
    let plain = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/hooks/sw"))
        .body("{}")
        .send()
        .await;
    if readyz(&admin)
        .await
        .starts_with("not ready: no certificate yet")
    {
        let e = pending.expect_err("a handshake completed before any certificate");
        assert!(e.contains("handshake") || e.contains("alert"), "{e}");
        assert!(plain.is_err(), "plain HTTP was answered: {plain:?}");
    }
    let not_ready = until_ready(&admin, &first, &dir.path().join("pebble.log")).await;
    assert!(
        not_ready
            .first()
            .is_some_and(|b| b.starts_with("not ready: no certificate yet")),
        "{not_ready:?}"
    );

    // pebble's issuing root, from its management interface.
    let own = std::fs::read(&pebble.own_ca).unwrap();
    let (status, root) = get(
        &client_trusting(&own),
        &format!("{}/roots/0", pebble.management),
    )
    .await;
    assert_eq!(status, 200);
    let issued = served(addr, root.as_bytes()).await.unwrap();
    assert_eq!(issued.names, [DOMAIN]);
    assert!(issued.issuer.contains("Pebble"), "{}", issued.issuer);

    // A real signed webhook over HTTPS to the issued certificate.
    let client = client_trusting(root.as_bytes());
    let base = format!("https://{DOMAIN}:{port}");
    let req = sign_with(
        &deployed.scheme,
        "msg_acme",
        &event_body("msg_acme", "1"),
        hookinbox::clock::unix_now(),
    );
    let resp = send(&client, &base, "sw", &req).await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(
        deployed.inbox.stored_body("sw", "msg_acme").as_deref(),
        Some(&req.body[..])
    );
    let (_, metrics) = get(&reqwest::Client::new(), &format!("{admin}/metrics")).await;
    assert_eq!(
        metric(&metrics, "hookinbox_certificate_expiry_timestamp_seconds"),
        Some(issued.not_after as f64)
    );
    assert_eq!(
        metric(
            &metrics,
            "hookinbox_certificate_renewals_total{result=\"ok\"}"
        ),
        Some(1.0)
    );
    assert!(first.sigterm().success());
    let config = deployed.config.to_str().unwrap();
    let (code, out, err) = hookinbox(&["show-cert", "--config", config]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("source: acme ({})", pebble.directory)),
        "{out}"
    );
    assert!(out.contains(&format!("names: {DOMAIN}\n")), "{out}");
    assert!(
        out.contains(&format!("serial: {}\n", issued.serial)),
        "{out}"
    );
    let (_, out, err) = hookinbox(&["check", "--config", config]);
    assert!(
        out.contains(&format!(
            "tls     by ACME for {DOMAIN} from {}",
            pebble.directory
        )),
        "{out}{err}"
    );
    // sign's curl asks for the certificate's name, sent to the local listener.
    let (code, curl, err) = hookinbox(&[
        "sign", "--source", "sw", "--config", config, "--format", "curl",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(curl.contains(&format!("'https://{DOMAIN}:")), "{curl}");
    assert!(curl.contains(&format!("--resolve '{DOMAIN}:")), "{curl}");

    // A restart serves the kept certificate and orders nothing.
    let second = Proc::spawn(&deployed.config);
    until_ready(&admin, &second, &dir.path().join("pebble.log")).await;
    assert_eq!(
        served(addr, root.as_bytes()).await.unwrap().serial,
        issued.serial
    );
    let (_, metrics) = get(&reqwest::Client::new(), &format!("{admin}/metrics")).await;
    assert_eq!(
        metric(
            &metrics,
            "hookinbox_certificate_renewals_total{result=\"ok\"}"
        ),
        Some(0.0)
    );

    // Two thirds into its lifetime, a renewal, without a restart; a connection opened
    // before it (kept busy, so that it is not closed for idling) goes on after it.
    let (mut held, held_cert) = connect(addr, root.as_bytes()).await.unwrap();
    assert_eq!(held_cert.serial, issued.serial);
    let mut sent = 0;
    let mut last_sent = Instant::now();
    let renewed = loop {
        if last_sent.elapsed() > Duration::from_secs(2) {
            sent += 1;
            let id = format!("msg_held_{sent}");
            let req = sign_with(
                &deployed.scheme,
                &id,
                &event_body(&id, "held"),
                hookinbox::clock::unix_now(),
            );
            assert_eq!(post_on(&mut held, &req).await, 200);
            last_sent = Instant::now();
        }
        let now = served(addr, root.as_bytes()).await.unwrap();
        if now.serial != issued.serial {
            break now;
        }
        assert!(
            hookinbox::clock::unix_now() < issued.not_after,
            "not renewed before it expired"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert!(renewed.not_after > issued.not_after);
    let renewed_at = renewed.not_before;
    let due = issued.not_before + (issued.not_after - issued.not_before) * 2 / 3;
    assert!(
        renewed_at >= due - 1,
        "renewed at {renewed_at}, due at {due}"
    );
    let req = sign_with(
        &deployed.scheme,
        "msg_held_after",
        &event_body("msg_held_after", "held"),
        hookinbox::clock::unix_now(),
    );
    assert_eq!(post_on(&mut held, &req).await, 200);
    assert!(
        sent >= 3,
        "{sent} requests on the held connection before the renewal"
    );
    // New handshakes get the new certificate, verified against the same root.
    let fresh = client_trusting(root.as_bytes());
    let req = sign_with(
        &deployed.scheme,
        "msg_renewed",
        &event_body("msg_renewed", "4"),
        hookinbox::clock::unix_now(),
    );
    assert_eq!(
        send(&fresh, &base, "sw", &req)
            .await
            .unwrap()
            .status()
            .as_u16(),
        200
    );
    let (_, metrics) = get(&reqwest::Client::new(), &format!("{admin}/metrics")).await;
    assert_eq!(
        metric(&metrics, "hookinbox_certificate_expiry_timestamp_seconds"),
        Some(renewed.not_after as f64)
    );
    assert_eq!(
        metric(
            &metrics,
            "hookinbox_certificate_renewals_total{result=\"ok\"}"
        ),
        Some(1.0)
    );
    assert!(second.sigterm().success());
}

/// A self-signed certificate for `DOMAIN`, written over `cert` and `key`; its PEM.
fn write_self_signed(cert: &Path, key: &Path) -> String {
    let made = rcgen::generate_simple_self_signed(vec![DOMAIN.into()]).unwrap();
    std::fs::write(key, made.signing_key.serialize_pem()).unwrap();
    std::fs::write(cert, made.cert.pem()).unwrap();
    made.cert.pem()
}

#[tokio::test]
async fn certificate_files_are_served_again_when_they_change_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let first = write_self_signed(&cert, &key);
    let tls = format!(
        "[server.tls]\ncert = {:?}\nkey = {:?}\n",
        cert.display().to_string(),
        key.display().to_string()
    );
    let settings = SERVER.replace("\n[admin]", &format!("\n{tls}\n[admin]"));
    let server = TestServer::start_with(&settings, ONE_SOURCE).await;
    let addr: SocketAddr = server.base.trim_start_matches("http://").parse().unwrap();
    let before = served(addr, first.as_bytes()).await.unwrap();

    // Renewed on disk (as certbot would), with no reload: served within a few seconds.
    let second = write_self_signed(&cert, &key);
    let start = Instant::now();
    let after = loop {
        if let Ok(now) = served(addr, second.as_bytes()).await {
            break now;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the new files were not served"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_ne!(after.serial, before.serial);
    // The old certificate is no longer served to new handshakes.
    assert!(served(addr, first.as_bytes()).await.is_err());
    let metrics = server.metrics().await;
    assert_eq!(
        metric(&metrics, "hookinbox_certificate_expiry_timestamp_seconds"),
        Some(after.not_after as f64)
    );

    // A half-written pair (a key that does not go with the certificate) is not served;
    // the last good one stays.
    let other = rcgen::KeyPair::generate().unwrap();
    std::fs::write(&key, other.serialize_pem()).unwrap();
    tokio::time::sleep(hookinbox::receive::tls::FILE_POLL * 2).await;
    assert_eq!(
        served(addr, second.as_bytes()).await.unwrap().serial,
        after.serial
    );
    server.stop().await;
}

/// `/readyz`'s answer.
async fn readyz(admin: &str) -> String {
    get(&reqwest::Client::new(), &format!("{admin}/readyz"))
        .await
        .1
}

#[tokio::test]
async fn postgres_replicas_order_once_and_answer_each_others_challenges() {
    let test = "acme::postgres_replicas_order_once_and_answer_each_others_challenges";
    let _ = rustls::crypto::ring::default_provider().install_default();
    let Some(pg) = postgres(test) else {
        return;
    };
    let url = fresh_database(&pg).await;
    let dir = tempfile::tempdir().unwrap();
    // pebble validates on A's port only; B orders.
    let (port_a, port_b, admin_a, admin_b) = (free_port(), free_port(), free_port(), free_port());
    let Some(pebble) = pebble(test, dir.path(), port_a) else {
        return;
    };
    let replica = |port: u16, admin_port: u16, name: &str| {
        let server = format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\n\
             [server.tls.acme]\ndomains = [\"{DOMAIN}\"]\n\
             directory = \"{}\"\ndirectory_ca = {:?}\n\
             [admin]\nlisten = \"127.0.0.1:{admin_port}\"\n",
            pebble.directory,
            pebble.own_ca.display().to_string()
        );
        let config = dir.path().join(format!("{name}.toml"));
        let text = config_text_store(
            &server,
            &dir.path().join("unused.db"),
            &pg_store(&url),
            ONE_SOURCE,
        );
        std::fs::write(&config, text).unwrap();
        config
    };
    let (config_a, config_b) = (replica(port_a, admin_a, "a"), replica(port_b, admin_b, "b"));
    let (admin_a, admin_b) = (
        format!("http://127.0.0.1:{admin_a}"),
        format!("http://127.0.0.1:{admin_b}"),
    );
    let log = dir.path().join("pebble.log");

    let b = Proc::spawn(&config_b);
    let start = Instant::now();
    while !readyz(&admin_b).await.contains("ordering a certificate") {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{}",
            readyz(&admin_b).await
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A starts while B's order runs: it waits for it, and answers its validation.
    let a = Proc::spawn(&config_a);
    let waited = until_ready(&admin_a, &a, &log).await;
    assert!(
        waited
            .iter()
            .any(|w| w.contains("another replica is ordering the certificate")),
        "{waited:?}"
    );
    until_ready(&admin_b, &b, &log).await;
    let own = std::fs::read(&pebble.own_ca).unwrap();
    let (_, root) = get(
        &client_trusting(&own),
        &format!("{}/roots/0", pebble.management),
    )
    .await;
    let on_a = served(
        format!("127.0.0.1:{port_a}").parse().unwrap(),
        root.as_bytes(),
    )
    .await
    .unwrap();
    let on_b = served(
        format!("127.0.0.1:{port_b}").parse().unwrap(),
        root.as_bytes(),
    )
    .await
    .unwrap();
    assert_eq!(on_a.serial, on_b.serial);
    let ok = "hookinbox_certificate_renewals_total{result=\"ok\"}";
    let orders = |admin: String| async move {
        let (_, metrics) = get(&reqwest::Client::new(), &format!("{admin}/metrics")).await;
        metric(&metrics, ok)
    };
    assert_eq!(orders(admin_b.clone()).await, Some(1.0));
    assert_eq!(orders(admin_a.clone()).await, Some(0.0));
    assert!(a.sigterm().success());
    assert!(b.sigterm().success());
}

#[tokio::test]
async fn a_certificate_is_obtained_by_http01_on_a_second_listener() {
    let test = "acme::a_certificate_is_obtained_by_http01_on_a_second_listener";
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    // pebble's TLS-ALPN-01 port has nobody on it: only HTTP-01 can succeed.
    let (port, http01, admin_port, nobody) = (free_port(), free_port(), free_port(), free_port());
    let Some(pebble) = pebble_with(test, dir.path(), nobody, http01) else {
        return;
    };
    let server = format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\n\
         [server.tls.acme]\ndomains = [\"{DOMAIN}\"]\n\
         directory = \"{}\"\ndirectory_ca = {:?}\nhttp01_listen = \"127.0.0.1:{http01}\"\n\
         [admin]\nlisten = \"127.0.0.1:{admin_port}\"\n",
        pebble.directory,
        pebble.own_ca.display().to_string()
    );
    let deployed = deploy(ONE_SOURCE);
    std::fs::write(
        &deployed.config,
        config_text(&server, &deployed.db, ONE_SOURCE),
    )
    .unwrap();
    let serve = Proc::spawn(&deployed.config);
    until_ready(
        &format!("http://127.0.0.1:{admin_port}"),
        &serve,
        &dir.path().join("pebble.log"),
    )
    .await;
    let own = std::fs::read(&pebble.own_ca).unwrap();
    let (_, root) = get(
        &client_trusting(&own),
        &format!("{}/roots/0", pebble.management),
    )
    .await;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    assert_eq!(served(addr, root.as_bytes()).await.unwrap().names, [DOMAIN]);
    // The HTTP-01 listener answers nothing else, and no challenge once the order is done.
    let plain = reqwest::Client::new();
    for path in ["/hooks/sw", "/.well-known/acme-challenge/x", "/metrics"] {
        let (status, _) = get(&plain, &format!("http://127.0.0.1:{http01}{path}")).await;
        assert_eq!(status, 404, "{path}");
    }
    assert!(serve.sigterm().success());
}
