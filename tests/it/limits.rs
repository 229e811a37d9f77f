//! Hard limits on what a client may send, over raw TCP so that each misbehaviour is exact.
//! The test server allows 64 KiB bodies, 1 s for the head and 1 s for the body.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::*;

const SOURCES: &str = r#"
[[sources]]
name = "sw"
scheme = "standard-webhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
"#;

/// Far longer than any configured timeout; reaching it means the server never acted.
const PATIENCE: Duration = Duration::from_secs(10);

/// Reads until the server closes the connection or `PATIENCE` runs out (which fails).
async fn read_to_close(stream: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(PATIENCE, stream.read(&mut buf)).await {
            Err(_) => panic!(
                "the server kept the connection open; read so far: {:?}",
                String::from_utf8_lossy(&out)
            ),
            Ok(Ok(0)) | Ok(Err(_)) => return String::from_utf8_lossy(&out).into_owned(),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
}

/// The request head for a signed POST whose body will be `body`.
fn head(server: &TestServer, id: &str, body: &[u8], length: &str) -> String {
    let req = server.sign("sw", id, body);
    let mut head = format!("POST /hooks/sw HTTP/1.1\r\nHost: test\r\n{length}\r\n");
    for (k, v) in &req.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    head
}

#[tokio::test]
async fn a_declared_oversized_body_is_413_before_it_is_sent() {
    let server = TestServer::start(SOURCES).await;
    let body = vec![b'x'; 64 * 1024 + 1];
    let mut s = TcpStream::connect(server.public_addr()).await.unwrap();
    let h = head(
        &server,
        "msg_big",
        &body,
        &format!("Content-Length: {}", body.len()),
    );
    s.write_all(h.as_bytes()).await.unwrap();
    // Not one body byte is sent: the answer must come from the declared length alone.
    let answer = read_to_close(&mut s).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert_eq!(server.count("SELECT count(*) FROM events"), 0);
    server.stop().await;
}

#[tokio::test]
async fn a_chunked_body_past_the_limit_is_413() {
    let server = TestServer::start(SOURCES).await;
    let mut s = TcpStream::connect(server.public_addr()).await.unwrap();
    let h = head(&server, "msg_chunked", b"", "Transfer-Encoding: chunked");
    s.write_all(h.as_bytes()).await.unwrap();
    let chunk = format!("2000\r\n{}\r\n", "y".repeat(0x2000));
    for _ in 0..16 {
        // 128 KiB in all; the server may close before we finish, which is the point.
        if s.write_all(chunk.as_bytes()).await.is_err() {
            break;
        }
    }
    let answer = read_to_close(&mut s).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert_eq!(server.count("SELECT count(*) FROM events"), 0);
    server.stop().await;
}

/// A body in chunks of every size, tiny ones among them (which are copied together as they
/// arrive, so that a million one-byte chunks cannot hold a million buffers), is stored byte
/// for byte.
#[tokio::test]
async fn a_body_in_tiny_and_large_chunks_is_stored_exactly() {
    let server = TestServer::start(SOURCES).await;
    let body = event_body("msg_tiny_chunks", &"z".repeat(9000));
    let mut s = TcpStream::connect(server.public_addr()).await.unwrap();
    let h = head(
        &server,
        "msg_tiny_chunks",
        &body,
        "Transfer-Encoding: chunked",
    );
    s.write_all(h.as_bytes()).await.unwrap();
    let chunk =
        |bytes: &[u8]| [format!("{:x}\r\n", bytes.len()).as_bytes(), bytes, b"\r\n"].concat();
    // 300 one-byte chunks, one of 5,000 bytes, then the rest three bytes at a time.
    let (tiny, rest) = body.split_at(300);
    let (large, rest) = rest.split_at(5000);
    for b in tiny.chunks(1) {
        s.write_all(&chunk(b)).await.unwrap();
    }
    s.write_all(&chunk(large)).await.unwrap();
    for b in rest.chunks(3) {
        s.write_all(&chunk(b)).await.unwrap();
    }
    s.write_all(b"0\r\n\r\n").await.unwrap();
    let mut answer = vec![0u8; 1024];
    let n = s.read(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(
        server.stored_body("sw", "msg_tiny_chunks").as_deref(),
        Some(&body[..])
    );
    server.stop().await;
}

#[tokio::test]
async fn a_body_that_stalls_gets_408_or_a_close() {
    let server = TestServer::start(SOURCES).await;
    let body = event_body("msg_stall", "");
    let mut s = TcpStream::connect(server.public_addr()).await.unwrap();
    let h = head(
        &server,
        "msg_stall",
        &body,
        &format!("Content-Length: {}", body.len()),
    );
    s.write_all(h.as_bytes()).await.unwrap();
    s.write_all(&body[..10]).await.unwrap();
    let answer = read_to_close(&mut s).await;
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
        "{answer}"
    );
    assert_eq!(server.count("SELECT count(*) FROM events"), 0);
    server.stop().await;
}

#[tokio::test]
async fn a_client_that_sends_no_headers_is_disconnected() {
    let server = TestServer::start(SOURCES).await;
    let mut silent = TcpStream::connect(server.public_addr()).await.unwrap();
    let mut half = TcpStream::connect(server.public_addr()).await.unwrap();
    half.write_all(b"POST /hooks/sw HTTP/1.1\r\nHost: te")
        .await
        .unwrap();
    // read_to_close fails the test if either stays open past PATIENCE.
    read_to_close(&mut silent).await;
    read_to_close(&mut half).await;
    server.stop().await;
}

#[tokio::test]
async fn a_head_with_too_many_headers_is_refused() {
    let server = TestServer::start(SOURCES).await;
    let mut s = TcpStream::connect(server.public_addr()).await.unwrap();
    let mut h = String::from("POST /hooks/sw HTTP/1.1\r\nHost: test\r\nContent-Length: 0\r\n");
    for i in 0..200 {
        h.push_str(&format!("X-Filler-{i}: {i}\r\n"));
    }
    h.push_str("\r\n");
    s.write_all(h.as_bytes()).await.unwrap();
    let answer = read_to_close(&mut s).await;
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 431"),
        "{answer}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_client_that_never_reads_its_answers_is_disconnected() {
    let server = TestServer::start(SOURCES).await;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(1024).unwrap();
    let mut s = socket.connect(server.public_addr()).await.unwrap();
    // Pipelined requests whose answers fill our tiny receive buffer and then the server's
    // send buffer; we never read. The server must give up on the connection.
    let request = b"GET /nope HTTP/1.1\r\nHost: test\r\n\r\n".repeat(200);
    let writer = tokio::spawn(async move {
        loop {
            match tokio::time::timeout(PATIENCE, s.write_all(&request)).await {
                Ok(Ok(())) => continue,
                // The server closed the connection: what we want.
                Ok(Err(_)) => return true,
                // Our writes stalled for PATIENCE and the server still holds on.
                Err(_) => return false,
            }
        }
    });
    assert!(
        writer.await.unwrap(),
        "the server kept a connection that never reads"
    );
    server.stop().await;
}

#[tokio::test]
async fn requests_that_rfc_9112_refuses_are_refused_on_both_listeners() {
    let server = TestServer::start(SOURCES).await;
    let body = event_body("msg_rfc", "");
    let signed = head(
        &server,
        "msg_rfc",
        &body,
        &format!("Content-Length: {}", body.len()),
    );
    let without_host = signed.replace("Host: test\r\n", "");
    let two_hosts = signed.replace("Host: test\r\n", "Host: test\r\nHost: other\r\n");
    let bad_host = signed.replace("Host: test\r\n", "Host: a b\r\n");
    let chunked = format!(
        "{:x}\r\n{}\r\n0\r\n\r\n",
        body.len(),
        String::from_utf8_lossy(&body)
    );
    let gzip_chunked = head(
        &server,
        "msg_rfc",
        &body,
        "Transfer-Encoding: gzip, chunked",
    );
    let body = String::from_utf8(body).unwrap();
    for (request, want) in [
        (format!("{without_host}{body}"), "HTTP/1.1 400"),
        (format!("{two_hosts}{body}"), "HTTP/1.1 400"),
        (format!("{bad_host}{body}"), "HTTP/1.1 400"),
        (format!("{gzip_chunked}{chunked}"), "HTTP/1.1 501"),
    ] {
        let mut s = TcpStream::connect(server.public_addr()).await.unwrap();
        s.write_all(request.as_bytes()).await.unwrap();
        // read_to_close also proves the connection is closed after the refusal.
        let answer = read_to_close(&mut s).await;
        assert!(answer.starts_with(want), "{want} for {request:?}: {answer}");
    }
    assert_eq!(server.count("SELECT count(*) FROM events"), 0);
    // The same signed request, well-formed, is accepted: the refusals were the framing's.
    let mut s = TcpStream::connect(server.public_addr()).await.unwrap();
    s.write_all(
        format!(
            "{}{body}",
            signed.replace("\r\n\r\n", "\r\nConnection: close\r\n\r\n")
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let answer = read_to_close(&mut s).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    let admin = server.admin.trim_start_matches("http://").to_owned();
    let mut s = TcpStream::connect(&admin).await.unwrap();
    s.write_all(b"GET /readyz HTTP/1.1\r\n\r\n").await.unwrap();
    let answer = read_to_close(&mut s).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    server.stop().await;
}

/// Slow and idle clients over the connection cap: the head timeout (30 s here) would free a
/// slot only after a provider gave up, so the longest idle connection makes room instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_idle_clients_over_the_cap_do_not_hold_back_a_signed_request() {
    let settings = SERVER.replace(
        "header_timeout = \"1s\"",
        "header_timeout = \"30s\"\nmax_connections = 8",
    );
    let server = TestServer::start_with(&settings, SOURCES).await;
    let addr = server.public_addr();
    // Twice the cap: slowloris heads that grow by a byte every 200 ms.
    let mut attackers = Vec::new();
    for i in 0..16 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"POST /hooks/sw HTTP/1.1\r\nHost: test\r\n")
            .await
            .unwrap();
        attackers.push(tokio::spawn(async move {
            for _ in 0..150 {
                tokio::time::sleep(Duration::from_millis(200)).await;
                if s.write_all(format!("X-{i}: y\r\n").as_bytes())
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    // A provider from another address signs and sends one event.
    let body = event_body("msg_slowloris", "");
    let signed = head(
        &server,
        "msg_slowloris",
        &body,
        &format!("Content-Length: {}", body.len()),
    );
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let started = std::time::Instant::now();
    let mut s = socket.connect(addr).await.unwrap();
    s.write_all(
        signed
            .replace("\r\n\r\n", "\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    s.write_all(&body).await.unwrap();
    let answer = read_to_close(&mut s).await;
    let waited = started.elapsed();
    eprintln!("a signed request behind 16 slow clients (cap 8) was answered in {waited:?}");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // A property, not a benchmark: far sooner than the 30 s a slot takes to time out.
    assert!(waited < Duration::from_secs(10), "{waited:?}");
    assert!(
        metric(
            &server.metrics().await,
            r#"hookinbox_connections_closed_for_room_total{listener="public"}"#
        ) >= 1.0
    );
    for a in attackers {
        a.abort();
    }

    // The admin listener (16 slots) behind 40 idle local connections.
    let admin: std::net::SocketAddr = server.admin.trim_start_matches("http://").parse().unwrap();
    let mut idle = Vec::new();
    for _ in 0..40 {
        idle.push(TcpStream::connect(admin).await.unwrap());
    }
    let started = std::time::Instant::now();
    let mut s = TcpStream::connect(admin).await.unwrap();
    s.write_all(b"GET /readyz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let answer = read_to_close(&mut s).await;
    let waited = started.elapsed();
    eprintln!("/readyz behind 40 idle connections (cap 16) was answered in {waited:?}");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(waited < Duration::from_secs(10), "{waited:?}");
    server.stop().await;
}

/// Every slot inside a request, each still receiving its body, when a new peer connects:
/// the one whose request began first (a stalled body) is closed to make room, at once, and
/// the other, whose body then arrives whole, is answered. Nothing of a body still arriving
/// can have been stored; the new peer does not wait for a body timeout to free a slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_still_arriving_at_the_cap_makes_room_and_one_that_arrives_is_answered() {
    let settings = SERVER
        .replace(
            "header_timeout = \"1s\"",
            "header_timeout = \"30s\"\nmax_connections = 2",
        )
        .replace("body_timeout = \"1s\"", "body_timeout = \"6s\"");
    let server = TestServer::start_with(&settings, SOURCES).await;
    let addr = server.public_addr();
    let signed = |id: &str| {
        let body = event_body(id, "");
        let h = head(
            &server,
            id,
            &body,
            &format!("Content-Length: {}", body.len()),
        );
        (h, body)
    };
    // A: a body that stalls (in a request until the 6 s body timeout).
    let (head_a, body_a) = signed("msg_a");
    let mut a = TcpStream::connect(addr).await.unwrap();
    a.write_all(head_a.as_bytes()).await.unwrap();
    a.write_all(&body_a[..5]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    // B: a body that completes after 700 ms, then the connection stays open (keep-alive).
    let (head_b, body_b) = signed("msg_b");
    let mut b = TcpStream::connect(addr).await.unwrap();
    b.write_all(head_b.as_bytes()).await.unwrap();
    b.write_all(&body_b[..5]).await.unwrap();
    let finish_b = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(700)).await;
        b.write_all(&body_b[5..]).await.unwrap();
        let mut buf = [0u8; 512];
        let n = b.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        // Idle on keep-alive from here on; held until the test ends.
        b
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    // C arrives while both are inside their requests.
    let (head_c, body_c) = signed("msg_c");
    let started = std::time::Instant::now();
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(
        head_c
            .replace("\r\n\r\n", "\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    c.write_all(&body_c).await.unwrap();
    let answer = read_to_close(&mut c).await;
    let waited = started.elapsed();
    eprintln!("with both slots inside requests, a new request was answered in {waited:?}");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // Sooner than A's body timeout, the only other way a slot would have been freed.
    assert!(waited < Duration::from_secs(4), "{waited:?}");
    // B was answered 200 (in `finish_b`); A was the one closed, and stored nothing.
    let _b = finish_b.await.unwrap();
    let answer_a = read_to_close(&mut a).await;
    assert!(answer_a.is_empty(), "{answer_a}");
    assert_eq!(
        server.count("SELECT count(*) FROM events WHERE event_id = 'msg_a'"),
        0
    );
    assert_eq!(server.count("SELECT count(*) FROM events"), 2);
    server.stop().await;
}

/// Twice the cap of clients that send a whole head and then trickle the body, a byte every
/// 200 ms, with no rate floor and a body timeout of 30 s: they hold every slot, and still a
/// signed request from a new peer is answered 200 and stored. Each trickler that did not fit,
/// and one more for the signed request, was closed to make room. (Before, a connection
/// counted as busy once its head was parsed: the signed request waited for a body timeout.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_tricklers_over_the_cap_do_not_hold_back_a_signed_request() {
    let settings = SERVER
        .replace(
            "header_timeout = \"1s\"",
            "header_timeout = \"30s\"\nmax_connections = 8\nmin_body_rate = \"0/s\"",
        )
        .replace("body_timeout = \"1s\"", "body_timeout = \"30s\"");
    let server = TestServer::start_with(&settings, SOURCES).await;
    let addr = server.public_addr();
    let mut tricklers = Vec::new();
    for _ in 0..16 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"POST /hooks/sw HTTP/1.1\r\nHost: test\r\nContent-Length: 60000\r\n\r\n")
            .await
            .unwrap();
        tricklers.push(tokio::spawn(async move {
            // Until the server closes it (or the test ends).
            for _ in 0..150 {
                tokio::time::sleep(Duration::from_millis(200)).await;
                if s.write_all(b"a").await.is_err() {
                    return true;
                }
            }
            false
        }));
    }
    let body = event_body("msg_trickled", "");
    let signed = head(
        &server,
        "msg_trickled",
        &body,
        &format!("Content-Length: {}", body.len()),
    );
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let mut s = socket.connect(addr).await.unwrap();
    s.write_all(
        format!(
            "{}{}",
            signed.replace("\r\n\r\n", "\r\nConnection: close\r\n\r\n"),
            String::from_utf8_lossy(&body)
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let answer = read_to_close(&mut s).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(
        server.count("SELECT count(*) FROM events WHERE event_id = 'msg_trickled'"),
        1
    );
    // 8 tricklers that did not fit, and one for the signed request.
    let closed = metric(
        &server.metrics().await,
        r#"hookinbox_connections_closed_for_room_total{listener="public"}"#,
    );
    assert!(closed >= 9.0, "{closed} connections closed for room");
    assert_eq!(server.count("SELECT count(*) FROM events"), 1);
    for t in tricklers {
        t.abort();
    }
    server.stop().await;
}

/// A body that arrives slower than `min_body_rate` (here a byte every 200 ms against the
/// default 1 KiB/s) is cut with 408 long before its 30 s body timeout, and nothing is stored.
#[tokio::test]
async fn a_body_slower_than_the_minimum_rate_is_cut() {
    let settings = SERVER.replace("body_timeout = \"1s\"", "body_timeout = \"30s\"");
    let server = TestServer::start_with(&settings, SOURCES).await;
    let body = event_body("msg_slow_body", "");
    let mut s = TcpStream::connect(server.public_addr()).await.unwrap();
    let h = head(
        &server,
        "msg_slow_body",
        &body,
        &format!("Content-Length: {}", body.len()),
    );
    s.write_all(h.as_bytes()).await.unwrap();
    let (mut read, mut write) = s.into_split();
    let trickle = tokio::spawn(async move {
        for byte in body {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if write.write_all(&[byte]).await.is_err() {
                return;
            }
        }
    });
    // read_to_close's patience (10 s) is a third of the body timeout: the floor cut it.
    let mut answer = Vec::new();
    tokio::time::timeout(PATIENCE, read.read_to_end(&mut answer))
        .await
        .expect("the server cut the body before its body timeout")
        .ok();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    trickle.abort();
    assert_eq!(server.count("SELECT count(*) FROM events"), 0);
    assert!(
        metric(
            &server.metrics().await,
            r#"hookinbox_requests_total{source="sw",outcome="timeout"}"#
        ) >= 1.0
    );
    server.stop().await;
}

/// Every path of the admin listener answers only the Host names it knows, so that a page
/// on another site whose name points at 127.0.0.1 (DNS rebinding) cannot read `/metrics`
/// or `/readyz`; and every answer it gives, plain text included, carries the HTML pages'
/// security headers.
#[tokio::test]
async fn the_admin_listener_checks_host_on_every_path_and_secures_every_answer() {
    let server = TestServer::start(SOURCES).await;
    let admin = server.admin.trim_start_matches("http://").to_owned();
    let port = admin.rsplit_once(':').unwrap().1.to_owned();
    let ask = |request: String| {
        let admin = admin.clone();
        async move {
            let mut s = TcpStream::connect(&admin).await.unwrap();
            s.write_all(request.as_bytes()).await.unwrap();
            read_to_close(&mut s).await
        }
    };
    let get = |method: &str, path: &str, host: &str| {
        format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
    };
    let rebound = format!("evil.example:{port}");
    let mut cases = Vec::new();
    for path in [
        "/metrics",
        "/readyz",
        "/healthz",
        "/",
        "/events",
        "/no-such-page",
    ] {
        cases.push((get("GET", path, &rebound), "421"));
    }
    cases.extend([
        (get("GET", "/metrics", &format!("localhost:{port}")), "200"),
        (get("GET", "/readyz", &format!("127.0.0.1:{port}")), "200"),
        (get("GET", "/healthz", &format!("[::1]:{port}")), "200"),
        (get("POST", "/metrics", &format!("localhost:{port}")), "405"),
        (
            get("GET", "/no-such-page", &format!("localhost:{port}")),
            "404",
        ),
        (
            get("DELETE", "/events", &format!("localhost:{port}")),
            "405",
        ),
        ("GET /readyz HTTP/1.1\r\n\r\n".to_owned(), "400"),
    ]);
    for (request, status) in cases {
        let answer = ask(request.clone()).await;
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")),
            "{status} for {request:?}: {answer}"
        );
        let head = answer
            .split("\r\n\r\n")
            .next()
            .unwrap()
            .to_ascii_lowercase();
        for header in [
            "content-security-policy: default-src 'none'",
            "frame-ancestors 'none'",
            "x-frame-options: deny",
            "x-content-type-options: nosniff",
        ] {
            assert!(head.contains(header), "{header} in {request:?}: {head}");
        }
        if status == "421" {
            assert!(!answer.contains("hookinbox_"), "{answer}");
        }
    }
    server.stop().await;
}

/// A burst of ordinary senders, ten times the connection cap, each connecting and sending
/// one whole signed request at once: every one is answered 200. A new connection is not
/// closed for room before it has had a moment for its first request; before, the senders
/// closed one another's connections while their requests sat unparsed in the socket, and
/// got resets or empty 503s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_senders_over_the_cap_is_answered_in_full() {
    let settings = SERVER.replace(
        "header_timeout = \"1s\"",
        "header_timeout = \"30s\"\nmax_connections = 4",
    );
    let server = TestServer::start_with(&settings, SOURCES).await;
    let addr = server.public_addr();
    let mut requests = Vec::new();
    for i in 0..40 {
        let id = format!("msg_burst_{i}");
        let body = event_body(&id, "");
        let h = head(
            &server,
            &id,
            &body,
            &format!("Content-Length: {}", body.len()),
        );
        // Half close after their answer; half keep their connection open, idle, as a
        // client with a keep-alive pool does.
        let h = if i % 2 == 0 {
            h.replace("\r\n\r\n", "\r\nConnection: close\r\n\r\n")
        } else {
            h
        };
        requests.push([h.into_bytes(), body].concat());
    }
    // Each sender reports its answer's status line, then holds its connection until every
    // sender has reported: the keep-alive ones stay open and idle meanwhile.
    let (answers_tx, mut answers_rx) = tokio::sync::mpsc::unbounded_channel();
    let (done_tx, done) = tokio::sync::watch::channel(false);
    for request in requests {
        let (answers_tx, mut done) = (answers_tx.clone(), done.clone());
        tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            let mut answer = Vec::new();
            let mut buf = [0u8; 1024];
            let status = if s.write_all(&request).await.is_err() {
                "the request could not be written".to_owned()
            } else {
                // Up to the end of the answer's head: enough for its status.
                loop {
                    if answer.windows(4).any(|w| w == b"\r\n\r\n") {
                        break String::from_utf8_lossy(&answer)
                            .lines()
                            .next()
                            .unwrap_or_default()
                            .to_owned();
                    }
                    match tokio::time::timeout(PATIENCE, s.read(&mut buf)).await {
                        Ok(Ok(0)) => break "closed without an answer".to_owned(),
                        Ok(Ok(n)) => answer.extend_from_slice(&buf[..n]),
                        Ok(Err(e)) => break format!("read failed: {e}"),
                        Err(_) => break "no answer".to_owned(),
                    }
                }
            };
            answers_tx.send(status).unwrap();
            let _ = done.wait_for(|done| *done).await;
        });
    }
    let mut answers = Vec::new();
    for _ in 0..40 {
        answers.push(answers_rx.recv().await.unwrap());
    }
    done_tx.send(true).unwrap();
    let refused: Vec<&String> = answers
        .iter()
        .filter(|a| !a.starts_with("HTTP/1.1 200"))
        .collect();
    assert!(refused.is_empty(), "answers other than 200: {refused:?}");
    assert_eq!(server.count("SELECT count(*) FROM events"), 40);
    server.stop().await;
}

/// A sender that shuts its side of the connection down once its request is written (as
/// `nc -N` does) still gets its answer.
#[tokio::test]
async fn a_sender_that_half_closes_after_its_request_gets_its_answer() {
    let server = TestServer::start(SOURCES).await;
    let body = event_body("msg_half_close", "");
    let h = head(
        &server,
        "msg_half_close",
        &body,
        &format!("Content-Length: {}", body.len()),
    );
    let mut s = TcpStream::connect(server.public_addr()).await.unwrap();
    s.write_all(h.as_bytes()).await.unwrap();
    s.write_all(&body).await.unwrap();
    s.shutdown().await.unwrap();
    let answer = read_to_close(&mut s).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(server.count("SELECT count(*) FROM events"), 1);
    server.stop().await;
}

/// The real binary's address for `/metrics`, from its "listening" line.
fn admin_of(proc: &crate::proc::Proc) -> String {
    let logs = proc.logs.lock().unwrap();
    let addr = logs
        .iter()
        .find_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("admin="))
                .map(str::to_owned)
        })
        .expect("the listening line names the admin address");
    format!("http://{addr}")
}

/// Lines of the real binary's log that contain every one of `words`.
fn log_lines(proc: &crate::proc::Proc, words: &[&str]) -> usize {
    let logs = proc.logs.lock().unwrap();
    logs.iter()
        .filter(|l| words.iter().all(|w| l.contains(w)))
        .count()
}

/// Waits until a log line contains every one of `words` (the binary's stderr is read by a
/// thread; lines written before it are then in too).
async fn wait_for_line(proc: &crate::proc::Proc, words: &[&str]) {
    let deadline = std::time::Instant::now() + PATIENCE;
    while log_lines(proc, words) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no log line with {words:?}: {:?}",
            proc.logs.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Standard Webhooks' header may carry several signatures (one per active secret): a valid
/// one among eight is accepted, with the body's MAC computed once for all of them; a ninth
/// entry is refused, and the log says why. Then a flood of 200 forged signatures: each is
/// counted, and the log has one line for them (the first of the source and reason), not 200,
/// while a refusal for another reason still gets its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signatures_are_capped_and_refusals_logged_at_a_bounded_rate() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hookinbox.toml");
    std::fs::write(
        &config,
        config_text(SERVER, &dir.path().join("inbox.db"), SOURCES),
    )
    .unwrap();
    let proc = crate::proc::Proc::spawn_env(&config, &[], &[("RUST_LOG", "warn,hookinbox=info")]);
    let base = format!("http://{}", proc.public);
    let scheme = first_scheme(&config);
    let client = client();
    let now = hookinbox::clock::unix_now();
    // A well-formed signature of other bytes: 32 bytes of zeros.
    let forged = "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";

    let mut many = sign_with(&scheme, "msg_many", &event_body("msg_many", ""), now);
    let good = many.get("webhook-signature").unwrap().to_owned();
    let eight = format!("{} {good}", [forged; 7].join(" "));
    many.set("webhook-signature", &eight);
    let resp = send(&client, &base, "sw", &many).await.unwrap();
    assert_eq!(resp.status().as_u16(), 200, "a valid signature among eight");

    let mut nine = sign_with(&scheme, "msg_nine", &event_body("msg_nine", ""), now);
    let good = nine.get("webhook-signature").unwrap().to_owned();
    nine.set(
        "webhook-signature",
        &format!("{} {good}", [forged; 8].join(" ")),
    );
    let resp = send(&client, &base, "sw", &nine).await.unwrap();
    assert_eq!(resp.status().as_u16(), 401, "nine signatures");
    wait_for_line(
        &proc,
        &["request refused", "carries more than 8 signatures"],
    )
    .await;

    for i in 0..200 {
        let id = format!("msg_forged_{i}");
        let mut req = sign_with(&scheme, &id, &event_body(&id, ""), now);
        req.set("webhook-signature", forged);
        let resp = send(&client, &base, "sw", &req).await.unwrap();
        assert_eq!(resp.status().as_u16(), 401);
    }
    let stale = sign_with(
        &scheme,
        "msg_stale",
        &event_body("msg_stale", ""),
        now - 3600,
    );
    let resp = send(&client, &base, "sw", &stale).await.unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    wait_for_line(&proc, &["request refused", "timestamp_too_old"]).await;
    assert_eq!(log_lines(&proc, &["request refused", "no_match"]), 1);
    assert_eq!(log_lines(&proc, &["request refused"]), 3);

    let metrics = client
        .get(format!("{}/metrics", admin_of(&proc)))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for (series, want) in [
        (
            r#"hookinbox_signature_failures_total{source="sw",reason="no_match"}"#,
            200.0,
        ),
        (
            r#"hookinbox_signature_failures_total{source="sw",reason="malformed_header"}"#,
            1.0,
        ),
        (
            r#"hookinbox_requests_total{source="sw",outcome="rejected"}"#,
            202.0,
        ),
        (
            r#"hookinbox_requests_total{source="sw",outcome="accepted"}"#,
            1.0,
        ),
    ] {
        assert_eq!(metric(&metrics, series), want, "{series}");
    }
}
