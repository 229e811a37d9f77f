//! Socket activation: the real binary under `systemd-socket-activate`, which binds the
//! sockets, waits for the first connection and starts `hookinbox serve` with them, as
//! systemd does for `hookinbox.socket` (the restart and upgrade under load are in
//! `packaging/test-systemd.sh`, under a real systemd). And what such a restart needs of
//! the process that stops: a connection it accepted just before gets its answer.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use crate::proc::{Deployed, deploy};
use crate::support::*;

/// `hookinbox serve --config CONFIG` under `systemd-socket-activate ARGS…`, its stderr
/// kept; None (after `skip` said so) where the program is missing.
struct Activated {
    child: Child,
    logs: Arc<Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Activated {
    fn start(test: &str, d: &Deployed, args: &[String]) -> Option<Activated> {
        let mut child = match Command::new("systemd-socket-activate")
            .args(args)
            .arg(env!("CARGO_BIN_EXE_hookinbox"))
            .args(["serve", "--config"])
            .arg(&d.config)
            .env("RUST_LOG", "info")
            .env_remove("NOTIFY_SOCKET")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
        {
            Ok(c) => c,
            Err(e) => {
                skip(
                    "SOCKET_ACTIVATE",
                    test,
                    &format!("no systemd-socket-activate ({e}); .ci/run installs systemd"),
                );
                return None;
            }
        };
        let lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let logs: Arc<Mutex<Vec<String>>> = Arc::default();
        let sink = logs.clone();
        let reader = std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let activated = Activated {
            child,
            logs,
            reader: Some(reader),
        };
        // It prints "Listening on ADDR as FD." once per socket before it waits.
        activated.wait_for_log("Listening on", args.iter().filter(|a| *a == "-l").count());
        Some(activated)
    }

    /// Waits until `n` lines contain `text`; all the lines so far.
    fn wait_for_log(&self, text: &str, n: usize) -> String {
        let deadline = std::time::Instant::now() + PATIENCE;
        loop {
            let logs = self.logs.lock().unwrap().join("\n");
            if logs.matches(text).count() >= n {
                return logs;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no {n} lines with {text:?} in:\n{logs}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// SIGTERM, then the exit status and every line it wrote.
    fn stop(mut self) -> (std::process::ExitStatus, String) {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        self.wait()
    }

    /// The exit status once it has ended by itself, and every line it wrote.
    fn wait(&mut self) -> (std::process::ExitStatus, String) {
        let status = self.child.wait().unwrap();
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
        (status, self.logs.lock().unwrap().join("\n"))
    }
}

impl Drop for Activated {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port that nothing listens on now, for systemd-socket-activate to bind.
fn free_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// Sends `n` signed events to `public` and returns each answer's status.
async fn send_events(d: &Deployed, public: SocketAddr, prefix: &str, n: usize) -> Vec<u16> {
    // Bounded: a serve that ignored the passed socket would leave the connection queued
    // in it for ever.
    let client = client_builder()
        .timeout(std::time::Duration::from_secs(20))
        .build()
        .unwrap();
    let base = format!("http://{public}");
    let mut statuses = Vec::new();
    for i in 0..n {
        let id = format!("{prefix}-{i}");
        let req = sign_with(
            &d.scheme,
            &id,
            &event_body(&id, "activated"),
            hookinbox::clock::unix_now(),
        );
        let answer = send(&client, &base, "sw", &req).await.unwrap();
        statuses.push(answer.status().as_u16());
    }
    statuses
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn systemd_passes_both_listeners_and_signed_requests_are_stored() {
    let test = "activation::systemd_passes_both_listeners_and_signed_requests_are_stored";
    let d = deploy(ONE_SOURCE);
    let (public, admin) = (free_port(), free_port());
    let args = [
        "-l".to_owned(),
        public.to_string(),
        "--fdname=public".to_owned(),
        "-l".to_owned(),
        admin.to_string(),
        "--fdname=admin".to_owned(),
    ];
    let Some(activated) = Activated::start(test, &d, &args) else {
        return;
    };

    // hookinbox is not running yet: the first request's connection waits in the socket's
    // queue while systemd-socket-activate starts it, and is answered then.
    let statuses = send_events(&d, public, "act", 5).await;
    assert_eq!(statuses, vec![200; 5], "every signed request stored");
    assert_eq!(d.inbox.count("SELECT count(*) FROM events"), 5);
    let ready = client()
        .get(format!("http://{admin}/readyz"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        ready.status(),
        200,
        "the admin listener is the admin socket"
    );

    let logs = activated.wait_for_log("listening on the socket systemd passed", 2);
    for (key, addr, name) in [
        ("server.listen", public, "public"),
        ("admin.listen", admin, "admin"),
    ] {
        let line = logs
            .lines()
            .find(|l| l.contains(&format!("{key}: listening on the socket systemd passed")))
            .unwrap_or_else(|| panic!("no line says {key} came from systemd:\n{logs}"));
        assert!(line.contains(&format!("address={addr}")), "{line}");
        assert!(line.contains(&format!("fd_name={name}")), "{line}");
    }
    assert!(
        logs.contains(&format!("public={public} admin={admin}")),
        "serve listens on the passed sockets:\n{logs}"
    );
    let (status, logs) = activated.stop();
    assert!(status.success(), "{status:?}:\n{logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_only_socket_passed_is_the_public_listener_and_admin_is_bound_from_the_config() {
    let test = "activation::the_only_socket_passed_is_the_public_listener_and_admin_is_bound_from_the_config";
    let d = deploy(ONE_SOURCE);
    let public = free_port();
    // No --fdname: systemd's default name (a socket unit's own name) is not "public".
    let args = ["-l".to_owned(), public.to_string()];
    let Some(activated) = Activated::start(test, &d, &args) else {
        return;
    };
    let statuses = send_events(&d, public, "only", 2).await;
    assert_eq!(statuses, vec![200; 2]);
    assert_eq!(d.inbox.count("SELECT count(*) FROM events"), 2);
    let logs = activated.wait_for_log("listening public=", 1);
    assert!(
        logs.contains("server.listen: listening on the socket systemd passed"),
        "{logs}"
    );
    assert!(
        !logs.contains("admin.listen: listening on the socket"),
        "{logs}"
    );
    // The admin listener was bound from the config's 127.0.0.1:0.
    let admin: SocketAddr = logs
        .split_whitespace()
        .find_map(|w| w.strip_prefix("admin="))
        .unwrap()
        .parse()
        .unwrap();
    assert_ne!(admin.port(), 0);
    let ready = client()
        .get(format!("http://{admin}/readyz"))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
    let (status, logs) = activated.stop();
    assert!(status.success(), "{status:?}:\n{logs}");
}

#[tokio::test]
async fn a_socket_serve_cannot_use_stops_the_start_and_names_the_fix() {
    let test = "activation::a_socket_serve_cannot_use_stops_the_start_and_names_the_fix";
    let d = deploy(ONE_SOURCE);
    let (a, b, c, e) = (free_port(), free_port(), free_port(), free_port());
    // (systemd-socket-activate's arguments, whether a TCP connection or a UDP datagram
    // wakes it, what serve must say)
    let cases: [(Vec<String>, bool, &str); 4] = [
        (
            vec![
                "-l".into(),
                a.to_string(),
                "-l".into(),
                b.to_string(),
                "--fdname=web:admin".into(),
            ],
            true,
            "systemd passed a socket named \"web\" (fd 3) among 2: hookinbox takes the sockets \
             named \"public\" and \"admin\"; set FileDescriptorName=public or \
             FileDescriptorName=admin in its .socket unit",
        ),
        (
            vec![
                "--datagram".into(),
                "-l".into(),
                c.to_string(),
                "--fdname=public".into(),
            ],
            false,
            "systemd passed socket \"public\" (fd 3), a UDP socket (ListenDatagram=): hookinbox \
             takes TCP sockets; use ListenStream=",
        ),
        (
            vec![
                "--accept".into(),
                "-l".into(),
                e.to_string(),
                "--fdname=public".into(),
            ],
            true,
            "a TCP socket that is not listening: set Accept=no (the default) in its .socket unit",
        ),
        (
            vec![
                "-l".into(),
                free_port().to_string(),
                "-l".into(),
                free_port().to_string(),
                "--fdname=public:public".into(),
            ],
            true,
            "systemd passed two sockets named \"public\": hookinbox serves one public listener",
        ),
    ];
    for (args, tcp, says) in cases {
        let Some(mut activated) = Activated::start(test, &d, &args) else {
            return;
        };
        let to = args[args.iter().position(|a| a == "-l").unwrap() + 1].clone();
        if tcp {
            // The connection starts serve; serve refuses the socket and exits, closing it.
            let _ = std::net::TcpStream::connect(&to);
        } else {
            let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            udp.send_to(b"x", &to).unwrap();
        }
        if args.contains(&"--accept".to_owned()) {
            // systemd-socket-activate forks serve for the connection, reports how it
            // ended, and goes on listening (the Drop ends it).
            let logs = activated.wait_for_log("died with code 3", 1);
            assert!(logs.contains(says), "expected {says:?} in:\n{logs}");
        } else {
            let (status, logs) = activated.wait();
            assert_eq!(status.code(), Some(3), "a configuration error:\n{logs}");
            assert!(logs.contains(says), "expected {says:?} in:\n{logs}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_accepted_as_the_shutdown_begins_gets_its_answer() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = TestServer::start(ONE_SOURCE).await;
    let addr = server.public_addr();
    let body = event_body("late", "accepted as serve stops");
    let req = server.sign("sw", "late", &body);
    let mut request = format!(
        "POST /hooks/sw HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in &req.headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");

    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    // Accepted and handed to hyper, which has read nothing yet; then serve stops, and the
    // client's request arrives a moment later, as one does when a restart begins.
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let stopping = tokio::spawn(server.stop());
    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    // A connection closed unanswered may refuse the bytes too; the answer tells.
    let _ = stream.write_all(request.as_bytes()).await;
    let _ = stream.write_all(&body).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(PATIENCE, stream.read_to_end(&mut answer))
        .await
        .expect("the connection is answered or closed");
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.starts_with("HTTP/1.1 200") || answer.starts_with("HTTP/1.1 503"),
        "a request on a connection accepted before the shutdown is answered, not dropped: {answer:?}"
    );
    stopping.await.unwrap();
}
