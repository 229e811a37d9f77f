//! What an installed service relies on: systemd readiness notification, TLS on the
//! listener, and X-Forwarded-For believed only from configured proxies.

use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;

/// The unit's ExecStart, with the notify socket systemd would pass (beside `config`), and
/// `env` added: the socket (30 s read timeout) and the running `serve`.
fn serve_notifying(
    config: &std::path::Path,
    env: &[(&str, &str)],
) -> (UnixDatagram, std::process::Child) {
    let socket_path = config.with_file_name("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_hookinbox"))
        .args(["serve", "--config"])
        .arg(config)
        .env("NOTIFY_SOCKET", &socket_path)
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    (socket, child)
}

#[test]
fn ready_is_notified_only_once_the_listener_answers_and_stopping_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("inbox.db");
    let config = dir.path().join("hookinbox.toml");
    std::fs::write(&config, config_text(SERVER, &db, ONE_SOURCE)).unwrap();
    // WatchdogSec=0.4s: the service must feed it while it works.
    let (socket, mut child) = serve_notifying(&config, &[("WATCHDOG_USEC", "400000")]);
    let mut buf = [0u8; 4096];
    let n = socket.recv(&mut buf).expect("a notification within 30 s");
    let message = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(message.lines().any(|l| l == "READY=1"), "{message}");
    let status = message
        .lines()
        .find_map(|l| l.strip_prefix("STATUS="))
        .unwrap_or("");
    let addr = status.rsplit(' ').next().unwrap();
    // READY came: the listener must answer right now, with no retry.
    let mut stream =
        std::net::TcpStream::connect(addr).expect("the listener accepts once READY=1 was sent");
    use std::io::{Read, Write};
    stream
        .write_all(b"GET /hooks/sw HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 405"), "{answer}");
    let n = socket.recv(&mut buf).expect("a watchdog feed");
    assert!(String::from_utf8_lossy(&buf[..n]).contains("WATCHDOG=1"));

    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    // Watchdog feeds may still arrive before it.
    let stopping = (0..100).any(|_| {
        let n = socket.recv(&mut buf).expect("STOPPING=1 on SIGTERM");
        String::from_utf8_lossy(&buf[..n]).contains("STOPPING=1")
    });
    assert!(stopping, "STOPPING=1 on SIGTERM");
    assert!(child.wait().unwrap().success());
}

/// A self-signed certificate for 127.0.0.1, written as PEM files in `dir`.
fn self_signed(dir: &std::path::Path) -> (String, std::path::PathBuf, std::path::PathBuf) {
    let cert =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()]).unwrap();
    let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert_path, cert.cert.pem()).unwrap();
    std::fs::write(&key_path, cert.signing_key.serialize_pem()).unwrap();
    (cert.cert.pem(), cert_path, key_path)
}

#[tokio::test]
async fn a_signed_webhook_arrives_over_https() {
    let certs = tempfile::tempdir().unwrap();
    let (pem, cert, key) = self_signed(certs.path());
    // [server.tls] belongs after [server]'s keys, before [admin].
    let tls_block = format!(
        "[server.tls]\ncert = {:?}\nkey = {:?}\n",
        cert.display().to_string(),
        key.display().to_string()
    );
    let settings = SERVER.replace("\n[admin]", &format!("\n{tls_block}\n[admin]"));
    let server = TestServer::start_with(&settings, ONE_SOURCE).await;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .no_proxy()
        .tls_certs_only([reqwest::Certificate::from_pem(pem.as_bytes()).unwrap()])
        .build()
        .unwrap();
    let base = server.base.replace("http://", "https://");
    let req = server.sign("sw", "msg_tls", &event_body("msg_tls", "over tls"));
    let resp = send(&client, &base, "sw", &req).await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(
        server.stored_body("sw", "msg_tls").as_deref(),
        Some(&req.body[..])
    );
    // Plain HTTP on the TLS port gets no answer.
    assert!(
        send(&server.client, &server.base, "sw", &req)
            .await
            .is_err()
    );
    server.stop().await;
}

/// What an operator runs to see the listener's TLS and to try it: `check` describes the
/// certificate, and the curl command `sign` prints reaches the listener with the certificate
/// checked, as a provider would (by name, trusting the self-signed certificate).
#[tokio::test]
async fn check_describes_the_certificate_and_the_curl_sign_prints_gets_through_https() {
    if std::process::Command::new("curl")
        .arg("--version")
        .output()
        .is_err()
    {
        return skip(
            "CURL",
            "check_describes_the_certificate_and_the_curl_sign_prints_gets_through_https",
            "no curl",
        );
    }
    let certs = tempfile::tempdir().unwrap();
    let (_, cert, key) = self_signed(certs.path());
    let tls_block = format!(
        "[server.tls]\ncert = {:?}\nkey = {:?}\n",
        cert.display().to_string(),
        key.display().to_string()
    );
    // The port in the file, as an operator's config has it, for the URL `sign` prints.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let settings = SERVER
        .replacen("127.0.0.1:0", &format!("127.0.0.1:{port}"), 1)
        .replace("\n[admin]", &format!("\n{tls_block}\n[admin]"));
    let server = TestServer::start_with(&settings, ONE_SOURCE).await;
    let config = server.config.path.display().to_string();

    let (code, out, err) = hookinbox(&["check", "--config", &config]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(" HTTPS  (admin"), "{out}");
    assert!(
        out.contains("tls     certificate for 127.0.0.1, localhost; issued by CN=rcgen self signed cert (self-signed); expires 4096-01-01"),
        "{out}"
    );
    assert!(out.contains("the key matches"), "{out}");
    assert!(out.contains("is self-signed: providers"), "{out}");

    let (code, curl, err) = hookinbox(&[
        "sign", "--source", "sw", "--config", &config, "--id", "msg_curl", "--format", "curl",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        curl.contains(&format!("'https://localhost:{port}/hooks/sw'")),
        "{curl}"
    );
    assert!(
        curl.contains(&format!("--resolve 'localhost:{port}:127.0.0.1'")),
        "{curl}"
    );
    assert!(curl.contains("--cacert"), "{curl}");
    assert!(!curl.contains("--insecure"), "{curl}");
    // The server runs on this test's runtime: curl must not block it.
    let ran = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new("sh")
            .args(["-c", &curl])
            .output(),
    )
    .await
    .expect("curl answered")
    .unwrap();
    let answer = String::from_utf8_lossy(&ran.stdout);
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "{answer}{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    assert!(server.stored_body("sw", "msg_curl").is_some());

    // A key that is not the certificate's: check refuses the pair and names the files.
    let other = tempfile::tempdir().unwrap();
    let (_, _, other_key) = self_signed(other.path());
    std::fs::copy(&other_key, &key).unwrap();
    let (code, out, err) = hookinbox(&["check", "--config", &config]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(err.contains("do not go together"), "{err}");
    server.stop().await;
}

fn remote_addr(server: &TestServer, id: &str) -> String {
    server
        .read()
        .query_row(
            "SELECT remote_addr FROM events WHERE event_id = ?1",
            [id],
            |r| r.get(0),
        )
        .unwrap()
}

#[tokio::test]
async fn x_forwarded_for_is_believed_only_from_a_configured_proxy() {
    let sink = crate::sink::Sink::start(|_, _| crate::sink::Reply::Status(200)).await;
    let out = tempfile::tempdir().unwrap();
    let sources = format!(
        "{}\n[[sources.targets]]\nname = \"script\"\ncommand = [\"/bin/sh\", \"-c\", \"env > {}/$HOOKINBOX_EVENT_ID.env\"]\n",
        forwarding(&sink.url(), ""),
        out.path().display()
    );
    let trusting = SERVER.replace("max_body", "trusted_proxies = [\"127.0.0.1/32\"]\nmax_body");
    for (settings, want, id) in [
        (trusting.as_str(), "203.0.113.7", "msg_xff_proxy"),
        (SERVER, "127.0.0.1", "msg_xff_direct"),
    ] {
        let server = TestServer::start_with(settings, &sources).await;
        let mut req = server.sign("sw", id, &event_body(id, ""));
        // A client writing its own chain: a proxy would append the address it saw.
        req.set("x-forwarded-for", "198.51.100.1, 203.0.113.7");
        req.set("forwarded", "for=198.51.100.1");
        req.set("x-real-ip", "198.51.100.1");
        assert_eq!(server.post("sw", &req).await.0, 200);
        assert_eq!(remote_addr(&server, id), want);

        // Targets hear the address hookinbox believes, never the client's own headers.
        let deadline = std::time::Instant::now() + PATIENCE;
        let got = loop {
            if let Some(r) = sink
                .received()
                .into_iter()
                .find(|r| r.header("x-hookinbox-event-id") == id)
            {
                break r;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the sink never got {id}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let xff: Vec<_> = got.headers.get_all("x-forwarded-for").iter().collect();
        assert_eq!(xff, [want], "{id}");
        assert!(got.headers.get("forwarded").is_none() && got.headers.get("x-real-ip").is_none());
        let env_file = out.path().join(format!("{id}.env"));
        let env = loop {
            if let Ok(env) = std::fs::read_to_string(&env_file)
                && env.contains("HOOKINBOX_RECEIVED_AT")
            {
                break env;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the command never ran for {id}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(
            env.contains(&format!("HOOKINBOX_REMOTE_ADDR={want}\n")),
            "{env}"
        );
        let headers = env
            .lines()
            .find(|l| l.starts_with("HOOKINBOX_HEADERS="))
            .unwrap();
        assert!(!headers.contains("198.51.100.1"), "{headers}");
        server.stop().await;
    }
}

/// `hookinbox reload` is the unit's ExecReload: it must tell a refused reload from an
/// applied one, and the unit's STATUS= line must say how the last one went.
#[test]
fn reload_waits_for_the_answer_and_fails_when_the_reload_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("inbox.db");
    let config = dir.path().join("hookinbox.toml");
    let good = config_text(SERVER, &db, ONE_SOURCE);
    std::fs::write(&config, &good).unwrap();
    let (socket, mut child) = serve_notifying(&config, &[]);
    let mut buf = [0u8; 4096];
    let mut next_status = || loop {
        let n = socket.recv(&mut buf).expect("a notification within 30 s");
        let message = String::from_utf8_lossy(&buf[..n]).into_owned();
        if let Some(status) = message.lines().find_map(|l| l.strip_prefix("STATUS=")) {
            return status.to_owned();
        }
    };
    assert!(next_status().starts_with("serving 1 sources on 127.0.0.1:"));
    let config_arg = config.to_str().unwrap();

    // Applied: exit 0, the answer says what, and so does STATUS=.
    let two_sources = good.clone() + &ONE_SOURCE.replace("name = \"sw\"", "name = \"second\"");
    std::fs::write(&config, &two_sources).unwrap();
    let (code, out, err) = hookinbox(&["reload", "--config", config_arg]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("reloaded: 2 sources with 2 targets"), "{out}");
    let status = next_status();
    assert!(
        status.starts_with("serving 2 sources on") && status.contains("; reloaded at "),
        "{status}"
    );

    // Refused: exit 1 with the reason, the old configuration stays, and STATUS= says so;
    // also for a file that is not even TOML (serve is asked all the same).
    let pid = child.id().to_string();
    for (broken, reason) in [
        (two_sources.replace("scheme =", "shceme ="), "shceme"),
        ("this is [not toml".to_owned(), "TOML"),
    ] {
        std::fs::write(&config, broken).unwrap();
        let (code, out, err) = hookinbox(&["reload", "--config", config_arg, "--pid", &pid]);
        assert_eq!(code, 1, "{out}{err}");
        assert!(
            err.contains("the reload was refused") && err.contains(reason),
            "{err}"
        );
        let status = next_status();
        assert!(
            status.starts_with("serving 2 sources on")
                && status.contains("was refused")
                && status.contains(reason),
            "{status}"
        );
    }

    // A restart-only change is applied no further than it can be, and named.
    let moved = two_sources.replace("max_body = \"64KiB\"", "max_body = \"32KiB\"");
    std::fs::write(&config, moved).unwrap();
    let (code, out, err) = hookinbox(&["reload", "--config", config_arg]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("server.max_body changed: a restart applies them"),
        "{out}"
    );

    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(child.wait().unwrap().success());
    // With no serve running, reload says so instead of waiting.
    let (code, _, err) = hookinbox(&["reload", "--config", config_arg]);
    assert_eq!(code, 1);
    assert!(err.contains("no hookinbox serve is running"), "{err}");
}

/// Under systemd the answer lives in the unit's runtime directory, which ExecReload sees
/// too: a reload is answered even when the edited file moved `store.path`.
#[test]
fn reload_is_answered_through_the_runtime_directory_when_store_path_moved() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    std::fs::create_dir(&run).unwrap();
    let db = dir.path().join("inbox.db");
    let config = dir.path().join("hookinbox.toml");
    std::fs::write(&config, config_text(SERVER, &db, ONE_SOURCE)).unwrap();
    let proc = crate::proc::Proc::spawn_env(
        &config,
        &[],
        &[("RUNTIME_DIRECTORY", run.to_str().unwrap())],
    );
    // Written once serve is ready, a moment after it logs that it listens.
    let deadline = std::time::Instant::now() + PATIENCE;
    while !run.join("reload-status.json").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "no status in the runtime directory"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::write(
        &config,
        config_text(SERVER, &dir.path().join("moved.db"), ONE_SOURCE),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hookinbox"))
        .args([
            "reload",
            "--config",
            config.to_str().unwrap(),
            "--pid",
            &proc.pid().to_string(),
        ])
        .env("RUNTIME_DIRECTORY", &run)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("store.path changed: a restart applies them"),
        "{text}"
    );
    assert!(proc.sigterm().success());
}
