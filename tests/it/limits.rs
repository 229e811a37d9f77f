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
    s.write_all(b"GET /readyz HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let answer = read_to_close(&mut s).await;
    let waited = started.elapsed();
    eprintln!("/readyz behind 40 idle connections (cap 16) was answered in {waited:?}");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(waited < Duration::from_secs(10), "{waited:?}");
    server.stop().await;
}

/// Every slot inside a request when a new peer connects: it waits, and the moment one of
/// them finishes its request and sits idle on keep-alive, that one makes room; the new peer
/// does not wait for a body timeout or a keep-alive timeout to free a slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_becomes_idle_at_the_cap_makes_room_at_once() {
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
    let _b = finish_b.await.unwrap();
    drop(a);
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
