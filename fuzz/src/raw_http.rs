//! The `raw_http` target: bytes written to the real service over loopback, one new TCP
//! connection per input, the way a hostile or broken sender would write them.
//!
//! One server serves every input, started by the first with every scheme, a temporary inbox
//! and short timeouts. The first input byte picks what is sent:
//!
//! - even: the rest of the input, as it is;
//! - odd: a request that the harness signs itself for one of the sources, framed as the
//!   input chooses (Content-Length or chunked with any chunk sizes, extensions and
//!   trailers; header case; extra headers; HTTP/1.0), then perhaps one byte changed and
//!   perhaps more raw bytes pipelined after it.
//!
//! What must hold for every input:
//! - every answer is a complete, well-formed HTTP/1.1 response (HTTP/1.0 to an HTTP/1.0
//!   request), and the server closes the connection within [`ANSWER_TIMEOUT`];
//! - nothing is stored and nothing is answered 2xx unless the harness signed it: raw input
//!   never adds a row to `events` (unless it carries the GitLab token, which is the whole
//!   credential);
//! - a signed request left intact is answered 200 and stored with exactly its body and id;
//!   changed, it may be refused, but whatever is stored is its authentic body (and, where
//!   the scheme signs it, id);
//! - the server keeps answering: every [`ALIVE_EVERY`] inputs a fresh signed request must
//!   be stored;
//! - no task of the server panics: a panic hook aborts the process, since tokio would
//!   otherwise catch the panic and the fuzzer would never see it.

use std::io::{ErrorKind, Read as _, Write as _};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Mutex;
use std::time::Duration;

use hookinbox::commands::serve::{self, Running};
use hookinbox::config::{self, Config};

use super::choices::Choices;

/// The server's limits: small, so that the limits are reached by small inputs.
const CONFIG: &str = r#"
[server]
listen = "127.0.0.1:0"
max_body = "16KiB"
header_timeout = "1s"
body_timeout = "1s"

[admin]
listen = "127.0.0.1:0"

# No fsync per commit: the fuzzer stores thousands of events, and durability is not what
# it tests.
[store]
path = "inbox.db"
synchronous = "normal"

# No targets: nothing is forwarded, so stored events cost nothing after their commit.
[[sources]]
name = "sw"
scheme = "standard-webhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]

[[sources]]
name = "stripe"
scheme = "stripe"
secrets = ["whsec_fuzz_stripe"]

[[sources]]
name = "github"
scheme = "github"
secrets = ["fuzz github"]

[[sources]]
name = "shopify"
scheme = "shopify"
secrets = ["fuzz shopify"]

[[sources]]
name = "slack"
scheme = "slack"
secrets = ["fuzz slack"]

[[sources]]
name = "gitlab"
scheme = "gitlab"
secrets = ["glpat-fuzz-raw-http"]

[[sources]]
name = "hmac"
scheme = "hmac"
secrets = ["fuzz hmac"]
id_header = "X-Event-Id"
hmac = { header = "X-Signature", algorithm = "sha512", encoding = "base64", prefix = "sha512=", timestamp_header = "X-Timestamp", signed = "{timestamp}:{body}" }
"#;

/// The GitLab source's token: a request that carries it is authentic, however it got it.
const GITLAB_TOKEN: &[u8] = b"glpat-fuzz-raw-http";

/// The sources, and whether each one's signature covers the event id.
const SOURCES: [(&str, bool); 7] = [
    ("sw", true),
    ("stripe", true),
    ("github", false),
    ("shopify", false),
    ("slack", true),
    ("gitlab", false),
    ("hmac", false),
];

/// How long the server may take to answer once the client has closed its side: the
/// header and body timeouts above, with room for a slow machine.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// Inputs between two checks that the server still stores a valid request.
const ALIVE_EVERY: u64 = 256;
/// The name of the server's runtime threads, which the panic hook watches.
const SERVER_THREADS: &str = "raw-http-server";
/// Headers a signed request may carry besides its own, with any value from the input:
/// none of them may change how a request is read or verified.
const EXTRA_HEADERS: [&str; 5] = [
    "Content-Type",
    "User-Agent",
    "X-Forwarded-For",
    "Accept-Encoding",
    "X-Unrelated",
];

/// The running server and what the harness tracks about it.
struct Server {
    addr: SocketAddr,
    admin: SocketAddr,
    /// The configuration as the server loaded it, for signing as the providers would.
    config: Config,
    inbox: rusqlite::Connection,
    /// The highest `events.id` already checked.
    seen: i64,
    runs: u64,
    /// Makes every signed request's id new, so that each is stored rather than a duplicate.
    next_id: u64,
    running: Running,
    runtime: tokio::runtime::Runtime,
    dir: tempfile::TempDir,
}

/// A row of `events`.
#[derive(Debug)]
struct Row {
    source: String,
    event_id: String,
    body: Vec<u8>,
}

/// What the harness signed, to judge what the server stored.
#[derive(Debug)]
struct Signed {
    source: &'static str,
    id_is_signed: bool,
    id: String,
    body: Vec<u8>,
}

/// Started by the first input, stopped by [`finish`]. A mutex rather than a `LazyLock`, so
/// that it can be taken out and shut down.
static SERVER: Mutex<Option<Server>> = Mutex::new(None);

fn with_server<R>(f: impl FnOnce(&mut Server) -> R) -> R {
    // A failed assertion poisons the lock; the server itself is still fine.
    let mut server = SERVER.lock().unwrap_or_else(|e| e.into_inner());
    f(server.get_or_insert_with(start))
}

fn start() -> Server {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        previous(info);
        let thread = std::thread::current();
        if thread.name().is_some_and(|n| n.starts_with(SERVER_THREADS)) {
            std::process::abort();
        }
    }));
    // Named, since a fuzz run ends without removing it (libFuzzer exits the process).
    let dir = tempfile::Builder::new()
        .prefix("hookinbox-fuzz-raw-http-")
        .tempdir()
        .expect("a temporary directory");
    let path = dir.path().join("hookinbox.toml");
    let load = || config::from_str(CONFIG, &path, None).expect("a valid fuzz config");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(SERVER_THREADS)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let running = runtime
        .block_on(serve::start(load()))
        .expect("the server starts");
    let inbox = rusqlite::Connection::open_with_flags(
        dir.path().join("inbox.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .expect("the inbox opens");
    inbox
        .busy_timeout(Duration::from_secs(10))
        .expect("a busy timeout");
    Server {
        addr: running.public_addr,
        admin: running.admin_addr,
        config: load(),
        inbox,
        seen: 0,
        runs: 0,
        next_id: 0,
        running,
        runtime,
        dir,
    }
}

/// Stops the server and removes its inbox; the next input would start a new one. The
/// regression test calls it, so that `cargo test` leaves nothing behind.
pub fn finish() {
    let server = SERVER.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(Server {
        running,
        runtime,
        dir,
        inbox,
        ..
    }) = server
    {
        drop(inbox);
        runtime.block_on(running.shutdown());
        drop(runtime);
        drop(dir);
    }
}

/// Sends one input and checks the answers and the inbox.
pub fn run(data: &[u8]) {
    with_server(|server| {
        server.runs += 1;
        let mut c = Choices::new(data);
        if c.flag() {
            let (request, signed, intact) = signed_request(&mut c, server);
            let answers = exchange(server.addr, &request, intact);
            let rows = new_rows(server);
            check_signed(&request, &answers, &rows, &signed, intact);
        } else {
            let request = c.rest();
            let answers = exchange(server.addr, request, false);
            let rows = new_rows(server);
            check_raw(request, &answers, &rows);
        }
        if server.runs % ALIVE_EVERY == 1 {
            check_alive_with(server);
        }
    });
}

/// Checks that the server still stores a correctly signed request.
pub fn check_alive() {
    with_server(check_alive_with);
}

fn check_alive_with(server: &mut Server) {
    // No choices at all: sw, a short body, Content-Length, nothing changed.
    let (request, signed, intact) = signed_request(&mut Choices::new(&[]), server);
    assert!(intact);
    let answers = exchange(server.addr, &request, true);
    let rows = new_rows(server);
    check_signed(&request, &answers, &rows, &signed, intact);
}

/// What the server answered to raw bytes, and what it stored.
fn check_raw(request: &[u8], answers: &[u16], rows: &[Row]) {
    let shown = || String::from_utf8_lossy(request).into_owned();
    let carries_token = request
        .windows(GITLAB_TOKEN.len())
        .any(|w| w == GITLAB_TOKEN);
    if carries_token {
        assert!(
            rows.iter().all(|r| r.source == "gitlab"),
            "raw bytes with the GitLab token stored {rows:?}: {:?}",
            shown()
        );
    } else {
        assert!(rows.is_empty(), "raw bytes stored {rows:?}: {:?}", shown());
        assert!(
            answers.iter().all(|&s| !(200..300).contains(&s)),
            "raw bytes answered {answers:?}: {:?}",
            shown()
        );
    }
}

/// A request signed for one of the sources, framed as the input chooses, and whether it is
/// still intact (nothing changed after signing).
fn signed_request(c: &mut Choices, server: &mut Server) -> (Vec<u8>, Signed, bool) {
    let (source, id_is_signed) = c.pick(&SOURCES);
    server.next_id += 1;
    // The number twice: GitHub, Shopify, GitLab and the generic HMAC source store an id
    // header that the signature does not cover, so a changed byte in it is stored as a new
    // event; one changed byte can never turn one of these ids into a later one.
    let id = format!("fuzz-{0}-{0}", server.next_id);
    let text = String::from_utf8_lossy(c.short());
    // Stripe reads the id at /id and Slack at /event_id; the other schemes ignore both.
    let body = serde_json::json!({ "id": id, "event_id": id, "type": "fuzz", "data": text })
        .to_string()
        .into_bytes();
    let scheme = &server
        .config
        .source(source)
        .expect("every source is configured")
        .scheme;
    let now = hookinbox::clock::unix_now();
    let mut headers: Vec<(String, Vec<u8>)> = scheme
        .sign_post(&body, &id, now)
        .headers
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
        .collect();
    let http10 = c.below(8) == 7;
    for _ in 0..c.below(4) {
        let name = c.pick(&EXTRA_HEADERS).to_owned();
        headers.push((name, value_bytes(c.short())));
    }
    if c.flag() {
        for (name, _) in &mut headers {
            *name = name.to_ascii_uppercase();
        }
    }
    // Answered with an interim 100 Continue before the final answer.
    if !http10 && c.below(4) == 3 {
        headers.push(("Expect".into(), b"100-continue".to_vec()));
    }

    let mut request = Vec::new();
    let version = if http10 { "HTTP/1.0" } else { "HTTP/1.1" };
    request
        .extend_from_slice(format!("POST /hooks/{source} {version}\r\nHost: fuzz\r\n").as_bytes());
    for (name, value) in &headers {
        request.extend_from_slice(name.as_bytes());
        request.extend_from_slice(b": ");
        request.extend_from_slice(value);
        request.extend_from_slice(b"\r\n");
    }
    // Chunked framing needs HTTP/1.1.
    if !http10 && c.flag() {
        request.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
        chunked(c, &body, &mut request);
    } else {
        request.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
        request.extend_from_slice(&body);
    }

    let mut intact = true;
    if c.flag() && !request.is_empty() {
        let at = usize::from(u16::from_le_bytes([c.byte(), c.byte()])) % request.len();
        request[at] ^= c.byte().max(1);
        intact = false;
    }
    // More bytes pipelined after the request: the server answers the request first.
    request.extend_from_slice(c.rest());
    let signed = Signed {
        source,
        id_is_signed,
        id,
        body,
    };
    (request, signed, intact)
}

/// `body` in chunks of sizes the input picks, with extensions and a trailer when it asks.
fn chunked(c: &mut Choices, body: &[u8], out: &mut Vec<u8>) {
    let mut rest = body;
    while !rest.is_empty() {
        let size = (1 + c.below(64)).min(rest.len());
        let (chunk, after) = rest.split_at(size);
        let extension = if c.below(4) == 3 { ";ext=1" } else { "" };
        // Chunk sizes are hex, in either case.
        let size = if c.flag() {
            format!("{size:X}")
        } else {
            format!("{size:x}")
        };
        out.extend_from_slice(format!("{size}{extension}\r\n").as_bytes());
        out.extend_from_slice(chunk);
        out.extend_from_slice(b"\r\n");
        rest = after;
    }
    out.extend_from_slice(b"0\r\n");
    if c.below(4) == 3 {
        out.extend_from_slice(b"X-Trailer: fuzz\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// `bytes` without those no header value may hold on the wire.
fn value_bytes(bytes: &[u8]) -> Vec<u8> {
    bytes
        .iter()
        .copied()
        .filter(|&b| b == b'\t' || (b' '..0x7f).contains(&b) || b >= 0x80)
        .collect()
}

/// What the server answered to a signed request, and what it stored.
fn check_signed(request: &[u8], answers: &[u16], rows: &[Row], signed: &Signed, intact: bool) {
    let shown = || String::from_utf8_lossy(request).into_owned();
    let mut finals = answers.iter().filter(|&&s| s >= 200);
    if intact {
        assert_eq!(
            finals.next(),
            Some(&200),
            "an intact signed request was not accepted: {}",
            shown()
        );
        assert!(
            finals.all(|s| !(200..300).contains(s)),
            "raw bytes after a signed request answered {answers:?}: {}",
            shown()
        );
        assert_eq!(rows.len(), 1, "{rows:?}: {}", shown());
    }
    assert!(
        answers.iter().filter(|&&s| (200..300).contains(&s)).count() <= 1,
        "{answers:?}: {}",
        shown()
    );
    assert!(rows.len() <= 1, "one signed request stored {rows:?}");
    for row in rows {
        assert_eq!(row.source, signed.source, "{}", shown());
        // GitLab's token does not cover the body.
        if signed.source != "gitlab" {
            assert_eq!(row.body, signed.body, "{}", shown());
        }
        if signed.id_is_signed {
            assert_eq!(row.event_id, signed.id, "{}", shown());
        }
    }
}

/// Writes `request` on a new connection and reads until the server closes; returns the
/// status of every answer, each checked to be well-formed.
///
/// The client closes its writing side so that the server sees the end of the input at
/// once instead of waiting out its timeouts. hyper takes that end as the client leaving and
/// drops an answer still in the making (a stored event's, which waits for its commit), so
/// with `await_answer` the side is closed only once a final answer has arrived.
fn exchange(addr: SocketAddr, request: &[u8], await_answer: bool) -> Vec<u16> {
    let mut stream = TcpStream::connect(addr).expect("the server accepts connections");
    stream
        .set_read_timeout(Some(ANSWER_TIMEOUT))
        .expect("a read timeout");
    stream
        .set_write_timeout(Some(ANSWER_TIMEOUT))
        .expect("a write timeout");
    // The server may answer and close before it has read everything (a 413, a malformed
    // head), so a failed write is its right, not a finding.
    let _ = stream.write_all(request);
    let mut closed = false;
    if !await_answer {
        let _ = stream.shutdown(Shutdown::Write);
        closed = true;
    }
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    let reset = loop {
        match stream.read(&mut buf) {
            Ok(0) => break None,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            // libFuzzer's timer signal interrupts a read that is waiting.
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!(
                    "no answer within {ANSWER_TIMEOUT:?} (so far {:?}) to {:?}",
                    String::from_utf8_lossy(&answer),
                    String::from_utf8_lossy(request)
                )
            }
            // A reset (the server closing with input unread) can cut the last answer
            // short; those before it must still be whole.
            Err(e) => break Some(e),
        }
        let answered = parse_answers(&answer, false).is_ok_and(|s| s.iter().any(|&s| s >= 200));
        if !closed && answered {
            let _ = stream.shutdown(Shutdown::Write);
            closed = true;
        }
    };
    match parse_answers(&answer, reset.is_some()) {
        Ok(statuses) => statuses,
        Err(e) => panic!(
            "malformed answer ({e}, connection ended by {reset:?}): {:?} to {:?}",
            String::from_utf8_lossy(&answer),
            String::from_utf8_lossy(request)
        ),
    }
}

/// Splits the server's bytes into HTTP/1 responses and returns their status codes. With
/// `cut`, the last one may be incomplete.
fn parse_answers(mut bytes: &[u8], cut: bool) -> Result<Vec<u16>, String> {
    let mut statuses = Vec::new();
    while !bytes.is_empty() {
        let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") else {
            return if cut {
                Ok(statuses)
            } else {
                Err("a head without its blank line".into())
            };
        };
        let head = std::str::from_utf8(&bytes[..end]).map_err(|_| "a head that is not text")?;
        bytes = &bytes[end + 4..];
        let mut lines = head.split("\r\n");
        let status = status(lines.next().unwrap_or(""))?;
        let mut length = None;
        for line in lines {
            let (name, value) = line.split_once(':').ok_or("a header line without ':'")?;
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
                return Err(format!("a bad header name {name:?}"));
            }
            if name.eq_ignore_ascii_case("content-length") {
                length = Some(
                    value
                        .trim()
                        .parse::<usize>()
                        .map_err(|_| "a bad content-length")?,
                );
            }
        }
        statuses.push(status);
        if status < 200 {
            continue;
        }
        let length = length.ok_or("an answer without content-length")?;
        // An answer to HEAD declares its length but carries no body.
        let has_body = bytes.len() >= length
            && (bytes.len() == length || bytes[length..].starts_with(b"HTTP/1."));
        if has_body {
            bytes = &bytes[length..];
        } else if !(bytes.is_empty() || bytes.starts_with(b"HTTP/1.") || cut) {
            return Err("a body that does not match its content-length".into());
        } else if cut && !bytes.starts_with(b"HTTP/1.") {
            return Ok(statuses);
        }
    }
    Ok(statuses)
}

/// The code of a status line `HTTP/1.1 NNN reason`. hyper answers an HTTP/1.0 request in
/// HTTP/1.0, which such a client needs.
fn status(line: &str) -> Result<u16, String> {
    let rest = line
        .strip_prefix("HTTP/1.1 ")
        .or_else(|| line.strip_prefix("HTTP/1.0 "))
        .ok_or_else(|| format!("a status line {line:?}"))?;
    let (code, reason) = rest
        .split_at_checked(3)
        .ok_or("a status line without a code")?;
    let code: u16 = code
        .parse()
        .ok()
        .filter(|c| (100..600).contains(c))
        .ok_or_else(|| format!("a status code {code:?}"))?;
    if !(reason.is_empty() || reason.starts_with(' '))
        || !reason.bytes().all(|b| b == b' ' || b.is_ascii_graphic())
    {
        return Err(format!("a reason phrase {reason:?}"));
    }
    Ok(code)
}

/// The rows stored since the last look, once everything sent so far is committed.
///
/// A request can be stored after its connection is gone: when the client closes, hyper
/// drops the answer but the event may already be queued for the writer. So first the
/// admin's `/readyz`, which answers only after the writer has drained its queue; the
/// connection is closed by then, so nothing more of it can be queued.
fn new_rows(server: &mut Server) -> Vec<Row> {
    let ready = b"GET /readyz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    assert_eq!(
        exchange(server.admin, ready, true),
        [200],
        "the writer drains"
    );
    let mut query = server
        .inbox
        .prepare_cached(
            "SELECT e.id, e.source, e.event_id, p.body
               FROM events e JOIN payloads p ON p.event = e.id WHERE e.id > ?1 ORDER BY e.id",
        )
        .expect("the events table");
    let rows: Vec<(i64, Row)> = query
        .query_map([server.seen], |r| {
            Ok((
                r.get(0)?,
                Row {
                    source: r.get(1)?,
                    event_id: r.get(2)?,
                    // Stored as TEXT when it is UTF-8, as a BLOB otherwise.
                    body: r
                        .get_ref(3)?
                        .as_bytes_or_null()?
                        .unwrap_or_default()
                        .to_vec(),
                },
            ))
        })
        .expect("a query")
        .collect::<Result<_, _>>()
        .expect("rows");
    drop(query);
    if let Some((id, _)) = rows.last() {
        server.seen = *id;
    }
    rows.into_iter().map(|(_, row)| row).collect()
}
