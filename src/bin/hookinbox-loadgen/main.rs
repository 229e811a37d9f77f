//! hookinbox-loadgen: sends validly signed webhooks over many keep-alive connections and
//! reports what was acknowledged and how fast; or serves the bare-hyper ceiling and the
//! sink that the benchmark compares against. Built with `--features loadgen`.
//!
//! ```text
//! hookinbox-loadgen send --config FILE --source NAME --url http://127.0.0.1:8080 \
//!     [--connections 32] [--threads 1] [--duration 6s] [--rate N] [--body-size 1500] \
//!     [--ids ordered|random|duplicate] [--log FILE]
//! hookinbox-loadgen bare --listen 127.0.0.1:8090 [--log FILE]   # reads each body, answers 200
//! hookinbox-loadgen check --db inbox.db --source NAME --log FILE… [--receipts FILE…]
//! hookinbox-loadgen attack --config FILE --source NAME --addr 127.0.0.1:8080 \
//!     --kind bodies|slow|trickle [--connections 1000] [--body-size 1048576] [--duration 10s]
//! ```
//!
//! `check` is the oracle (`hookinbox::oracle`) over the logs of earlier runs: it exits 1
//! and names the events if anything acknowledged is lost or altered, anything unsent is
//! stored, or (with receipts, once every delivery finished) a delivery went wrong.

mod send;

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bytes::Bytes;
use clap::{Parser, Subcommand};
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};

#[derive(Clone, Copy, clap::ValueEnum)]
enum AttackKind {
    /// Nearly complete bodies: memory
    Bodies,
    /// Heads that never finish: connection slots
    Slow,
    /// Whole heads, then a body of 60,000 declared bytes at a byte every 2 s, reconnecting
    /// whenever the server closes: connection slots, from inside a request
    Trickle,
}

#[derive(Parser)]
#[command(
    name = "hookinbox-loadgen",
    about = "Load for hookinbox's benchmarks and crash tests"
)]
struct Cli {
    #[command(subcommand)]
    command: Mode,
}

#[derive(Subcommand)]
enum Mode {
    /// Send signed events and report throughput and latency
    Send {
        /// The hookinbox config whose source's secret signs the events
        #[arg(long)]
        config: PathBuf,
        #[arg(long)]
        source: String,
        /// Base URL of the listener, e.g. http://127.0.0.1:8080
        #[arg(long)]
        url: String,
        /// Keep-alive connections, each sending one request at a time
        #[arg(long, default_value_t = 32)]
        connections: usize,
        /// Threads sending, each with its share of the connections (as wrk's -t). One
        /// leaves the most of a shared machine to the server under test; one per core
        /// drives a bare server hardest
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// How long to send
        #[arg(long, default_value = "6s", value_parser = humantime::parse_duration)]
        duration: Duration,
        /// Requests per second in all (0 = as fast as answers come)
        #[arg(long, default_value_t = 0)]
        rate: u64,
        /// Body size in bytes (JSON, padded)
        #[arg(long, default_value_t = 1500)]
        body_size: usize,
        /// Which event ids to send. Ordered ids are load_<run>_<connection>_<n>: <run> is
        /// new on every invocation, so a second run on the same inbox stores new events
        #[arg(long, value_enum, default_value = "ordered")]
        ids: send::Ids,
        /// Write one line per request once the run is over: id, status, sha256 of the body
        /// (JSON lines)
        #[arg(long)]
        log: Option<PathBuf>,
    },
    /// A bare hyper server that reads each request body and answers 200: the ceiling,
    /// and the target the forwarding benchmark delivers to
    Bare {
        #[arg(long)]
        listen: SocketAddr,
        /// Write one line per request: event id, idempotency key, sha256 of the body
        #[arg(long)]
        log: Option<PathBuf>,
    },
    /// Hold many unauthenticated connections open the way an attacker would, and meanwhile
    /// send one signed request every half second on a fresh connection: report what the
    /// signed requests got and how long they waited
    Attack {
        /// The hookinbox config whose source's secret signs the probe requests
        #[arg(long)]
        config: PathBuf,
        #[arg(long)]
        source: String,
        /// host:port of the public listener
        #[arg(long)]
        addr: SocketAddr,
        /// What the attackers do: send all but the last byte of a large body, trickle a
        /// request head a header line at a time, or trickle a body a byte at a time
        #[arg(long, value_enum)]
        kind: AttackKind,
        #[arg(long, default_value_t = 1000)]
        connections: usize,
        /// Body size the body attackers declare (and send all but one byte of)
        #[arg(long, default_value_t = 1024 * 1024)]
        body_size: usize,
        /// How long the attack and the probes last
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        duration: Duration,
    },
    /// Check an inbox against what `send` logged (and `bare` received): exit 1 on any loss
    Check {
        #[arg(long)]
        db: PathBuf,
        #[arg(long)]
        source: String,
        /// `send --log` files
        #[arg(long, required = true, num_args = 1..)]
        log: Vec<PathBuf>,
        /// `bare --log` files; only once every delivery has finished
        #[arg(long, num_args = 1..)]
        receipts: Vec<PathBuf>,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match cli.command {
        Mode::Bare { listen, log } => runtime.block_on(bare(listen, log)),
        Mode::Check {
            db,
            source,
            log,
            receipts,
        } => check(&db, &source, &log, &receipts),
        Mode::Attack {
            config,
            source,
            addr,
            kind,
            connections,
            body_size,
            duration,
        } => {
            let scheme = scheme_of(&config, &source)?;
            runtime.block_on(attack(
                Arc::new(scheme),
                source,
                addr,
                kind,
                connections,
                body_size,
                duration,
            ))
        }
        Mode::Send {
            config,
            source,
            url,
            connections,
            threads,
            duration,
            rate,
            body_size,
            ids,
            log,
        } => {
            let scheme = scheme_of(&config, &source)?;
            let authority = url
                .trim_end_matches('/')
                .strip_prefix("http://")
                .context("--url must be http://host:port (the sender speaks plain HTTP/1.1)")?;
            let addr = std::net::ToSocketAddrs::to_socket_addrs(authority)
                .with_context(|| format!("resolving {authority}"))?
                .next()
                .with_context(|| format!("{authority} resolves to no address"))?;
            let plan = send::Plan {
                addr,
                host: authority.to_owned(),
                path: format!("/hooks/{source}"),
                connections,
                threads,
                duration,
                rate,
                body_size,
                ids,
            };
            send::run(scheme, plan, log)
        }
    }
}

/// The scheme of `source` in the config at `path`, to sign as its provider would.
fn scheme_of(path: &std::path::Path, source: &str) -> anyhow::Result<hookinbox::scheme::Scheme> {
    let config = hookinbox::config::load(path)?;
    Ok(config
        .sources
        .into_iter()
        .find(|s| s.name == source)
        .with_context(|| format!("no source {source:?} in the config"))?
        .scheme)
}

fn check(
    db: &std::path::Path,
    source: &str,
    logs: &[PathBuf],
    receipts: &[PathBuf],
) -> anyhow::Result<()> {
    use hookinbox::oracle;
    let mut ledger = oracle::Ledger::default();
    for log in logs {
        ledger.read_log(log)?;
    }
    let mut received = Vec::new();
    for file in receipts {
        received.extend(oracle::read_receipts(file)?);
    }
    let report = oracle::check(
        db,
        source,
        &ledger,
        (!receipts.is_empty()).then_some(&received[..]),
    )?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    let problems = report.problems();
    for p in &problems {
        eprintln!("FAILED: {p}");
    }
    if !problems.is_empty() {
        std::process::exit(1);
    }
    eprintln!(
        "ok: {} acknowledged, {} stored, none lost, altered or unexpected",
        report.acked, report.stored
    );
    Ok(())
}

type Log = Option<Arc<Mutex<std::io::BufWriter<std::fs::File>>>>;

fn open_log(path: Option<PathBuf>) -> anyhow::Result<Log> {
    Ok(match path {
        Some(p) => Some(Arc::new(Mutex::new(std::io::BufWriter::new(
            std::fs::File::create(&p).with_context(|| format!("creating {}", p.display()))?,
        )))),
        None => None,
    })
}

/// Writes one JSON line; flushed line by line when `flush`, so that a killed run keeps it.
fn log_line(log: &Log, line: &impl serde::Serialize, flush: bool) {
    if let Some(log) = log {
        let mut out = log.lock().unwrap();
        let _ = serde_json::to_writer(&mut *out, line);
        let _ = out.write_all(b"\n");
        if flush {
            let _ = out.flush();
        }
    }
}

async fn bare(listen: SocketAddr, log: Option<PathBuf>) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    eprintln!("bare server on {}", listener.local_addr()?);
    let log = open_log(log)?;
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let log = log.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let log = log.clone();
                async move {
                    let (parts, body) = req.into_parts();
                    let body = body
                        .collect()
                        .await
                        .map(|b| b.to_bytes())
                        .unwrap_or_default();
                    if log.is_some() {
                        let header = |name| {
                            parts
                                .headers
                                .get(name)
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or("")
                        };
                        let receipt = hookinbox::oracle::Receipt::new(
                            header("x-hookinbox-event-id"),
                            header("idempotency-key"),
                            &body,
                        );
                        log_line(&log, &receipt, true);
                    }
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                        Bytes::from_static(b"ok\n"),
                    )))
                }
            });
            let _ = http1::Builder::new()
                .timer(TokioTimer::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// The attackers of `kind`, held for `duration`, and a signed probe every half second.
async fn attack(
    scheme: Arc<hookinbox::scheme::Scheme>,
    source: String,
    addr: SocketAddr,
    kind: AttackKind,
    connections: usize,
    body_size: usize,
    duration: Duration,
) -> anyhow::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let deadline = Instant::now() + duration;
    let mut attackers = tokio::task::JoinSet::new();
    // Trickling connections the server closed (each then reconnects).
    let closed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for i in 0..connections {
        let source = source.clone();
        let closed = closed.clone();
        attackers.spawn(async move {
            if let AttackKind::Trickle = kind {
                while Instant::now() < deadline {
                    if trickle_once(addr, &source, deadline).await {
                        closed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    } else {
                        // Not accepted at all: wait a little rather than spin.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
                return;
            }
            let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
                return;
            };
            match kind {
                AttackKind::Bodies => {
                    let head = format!(
                        "POST /hooks/{source} HTTP/1.1\r\nHost: x\r\nContent-Length: {body_size}\r\n\r\n"
                    );
                    if s.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                    let chunk = vec![b'a'; 64 * 1024];
                    let mut left = body_size.saturating_sub(1);
                    while left > 0 && Instant::now() < deadline {
                        let n = left.min(chunk.len());
                        let until = tokio::time::Instant::from_std(deadline);
                        match tokio::time::timeout_at(until, s.write_all(&chunk[..n])).await {
                            Ok(Ok(())) => left -= n,
                            _ => break,
                        }
                    }
                }
                AttackKind::Trickle => unreachable!("handled above"),
                AttackKind::Slow => {
                    let head = format!("POST /hooks/{source} HTTP/1.1\r\nHost: x\r\n");
                    if s.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                    while Instant::now() < deadline {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        if s.write_all(format!("X-{i}: y\r\n").as_bytes()).await.is_err() {
                            break;
                        }
                    }
                }
            }
            // Hold it to the end, reading whatever the server says.
            let mut sink = [0u8; 1024];
            let until = tokio::time::Instant::from_std(deadline);
            while let Ok(Ok(n @ 1..)) = tokio::time::timeout_at(until, s.read(&mut sink)).await {
                let _ = n;
            }
        });
    }
    // Let the attackers take their places first.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut waits = Vec::new();
    let mut statuses = std::collections::BTreeMap::<String, usize>::new();
    let mut n = 0;
    while Instant::now() < deadline {
        let id = format!("probe_{}_{n}", std::process::id());
        n += 1;
        let body = format!(r#"{{"id":"{id}","event_id":"{id}","type":"probe"}}"#);
        let headers = scheme
            .sign_post(body.as_bytes(), &id, hookinbox::clock::unix_now())
            .headers;
        let mut request = format!(
            "POST /hooks/{source} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n",
            body.len()
        );
        for (k, v) in &headers {
            request.push_str(&format!("{k}: {}\r\n", v.to_str().unwrap_or("")));
        }
        request.push_str("\r\n");
        request.push_str(&body);
        let sent = Instant::now();
        let answer = tokio::time::timeout(Duration::from_secs(30), async {
            let mut s = tokio::net::TcpStream::connect(addr).await?;
            s.write_all(request.as_bytes()).await?;
            let mut buf = Vec::new();
            s.read_to_end(&mut buf).await?;
            Ok::<_, std::io::Error>(buf)
        })
        .await;
        let status = match answer {
            Ok(Ok(buf)) => String::from_utf8_lossy(&buf)
                .split_whitespace()
                .nth(1)
                .unwrap_or("no answer")
                .to_owned(),
            Ok(Err(e)) => format!("error: {}", e.kind()),
            Err(_) => "timed out after 30 s".to_owned(),
        };
        waits.push(sent.elapsed().as_secs_f64() * 1000.0);
        *statuses.entry(status).or_default() += 1;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    attackers.abort_all();
    waits.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| {
        waits
            .get(((waits.len() as f64 * p) as usize).min(waits.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0.0)
    };
    println!(
        "{{\"probes\":{},\"statuses\":{},\"p50_ms\":{:.1},\"max_ms\":{:.1},\"attackers_closed_by_server\":{}}}",
        waits.len(),
        serde_json::to_string(&statuses)?,
        pct(0.5),
        waits.last().copied().unwrap_or(0.0),
        closed.load(std::sync::atomic::Ordering::Relaxed)
    );
    Ok(())
}

/// One trickling connection: a whole head declaring 60,000 bytes, then a byte every 2 s
/// until the server closes it (true) or the deadline; false if it never connected.
async fn trickle_once(addr: SocketAddr, source: &str, deadline: Instant) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(s) = tokio::net::TcpStream::connect(addr).await else {
        return false;
    };
    let (mut read, mut write) = s.into_split();
    let head = format!("POST /hooks/{source} HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\n");
    if write.write_all(head.as_bytes()).await.is_err() {
        return true;
    }
    let until = tokio::time::Instant::from_std(deadline);
    let closed = async {
        let mut sink = [0u8; 1024];
        while let Ok(1..) = read.read(&mut sink).await {}
    };
    let trickle = async {
        loop {
            tokio::time::sleep(Duration::from_secs(2)).await;
            if write.write_all(b"a").await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        () = closed => true,
        () = trickle => true,
        () = tokio::time::sleep_until(until) => false,
    }
}
