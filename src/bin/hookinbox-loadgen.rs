//! hookinbox-loadgen: sends validly signed webhooks over many keep-alive connections and
//! reports what was acknowledged and how fast; or serves the bare-hyper ceiling and the
//! sink that the benchmark compares against. Built with `--features loadgen`.
//!
//! ```text
//! hookinbox-loadgen send --config FILE --source NAME --url http://127.0.0.1:8080 \
//!     [--connections 32] [--duration 6s] [--rate N] [--body-size 1500] [--duplicates] \
//!     [--log FILE]
//! hookinbox-loadgen bare --listen 127.0.0.1:8090     # reads each body, answers 200
//! ```

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bytes::Bytes;
use clap::{Parser, Subcommand};
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};

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
        /// How long to send
        #[arg(long, default_value = "6s", value_parser = humantime::parse_duration)]
        duration: Duration,
        /// Requests per second in all (0 = as fast as answers come)
        #[arg(long, default_value_t = 0)]
        rate: u64,
        /// Body size in bytes (JSON, padded)
        #[arg(long, default_value_t = 1500)]
        body_size: usize,
        /// Send one event over and over (duplicates) instead of unique ones
        #[arg(long)]
        duplicates: bool,
        /// Write one line per request: id, status, sha256 of the body (JSON lines)
        #[arg(long)]
        log: Option<PathBuf>,
    },
    /// A bare hyper server that reads each request body and answers 200: the ceiling
    Bare {
        #[arg(long)]
        listen: SocketAddr,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match cli.command {
        Mode::Bare { listen } => runtime.block_on(bare(listen)),
        Mode::Send {
            config,
            source,
            url,
            connections,
            duration,
            rate,
            body_size,
            duplicates,
            log,
        } => {
            let config = hookinbox::config::load(&config)?;
            let scheme = config
                .sources
                .into_iter()
                .find(|s| s.name == source)
                .with_context(|| format!("no source {source:?} in the config"))?
                .scheme;
            let plan = Plan {
                url: format!("{}/hooks/{source}", url.trim_end_matches('/')),
                connections,
                duration,
                rate,
                body_size,
                duplicates,
            };
            runtime.block_on(send(Arc::new(scheme), plan, log))
        }
    }
}

async fn bare(listen: SocketAddr) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    eprintln!("bare server on {}", listener.local_addr()?);
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let service = service_fn(|req: hyper::Request<hyper::body::Incoming>| async move {
                let _ = req.into_body().collect().await;
                Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                    Bytes::from_static(b"ok\n"),
                )))
            });
            let _ = http1::Builder::new()
                .timer(TokioTimer::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

struct Plan {
    url: String,
    connections: usize,
    duration: Duration,
    rate: u64,
    body_size: usize,
    duplicates: bool,
}

#[derive(Default)]
struct Tally {
    latencies_us: Mutex<Vec<u64>>,
    ok: AtomicU64,
    non_2xx: AtomicU64,
    errors: AtomicU64,
}

async fn send(
    scheme: Arc<hookinbox::scheme::Scheme>,
    plan: Plan,
    log: Option<PathBuf>,
) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let tally = Arc::new(Tally::default());
    let log = match log {
        Some(p) => Some(Arc::new(Mutex::new(std::io::BufWriter::new(
            std::fs::File::create(p)?,
        )))),
        None => None,
    };
    let plan = Arc::new(plan);
    let started = Instant::now();
    let deadline = started + plan.duration;
    let mut tasks = Vec::new();
    for c in 0..plan.connections {
        let (scheme, plan, tally, log) = (scheme.clone(), plan.clone(), tally.clone(), log.clone());
        tasks.push(tokio::spawn(async move {
            // One client per task: one keep-alive connection, like one provider sender.
            let client = reqwest::Client::builder()
                .no_proxy()
                .pool_max_idle_per_host(1)
                .build()
                .expect("client");
            let pause = (plan.rate > 0)
                .then(|| Duration::from_secs_f64(plan.connections as f64 / plan.rate as f64));
            let pad = "x".repeat(plan.body_size.saturating_sub(80));
            let mut n = 0u64;
            while Instant::now() < deadline {
                let id = if plan.duplicates {
                    "load_dup".to_owned()
                } else {
                    format!("load_{c}_{n}")
                };
                n += 1;
                let body = format!(
                    r#"{{"id":"{id}","event_id":"{id}","type":"load.test","pad":"{pad}"}}"#
                );
                let headers = scheme.sign(body.as_bytes(), &id, hookinbox::clock::unix_now());
                let mut req = client.post(&plan.url).body(body.clone());
                for (k, v) in &headers {
                    req = req.header(k, v);
                }
                let sent = Instant::now();
                let status = match req.send().await {
                    Ok(resp) => {
                        let status = resp.status().as_u16();
                        let _ = resp.bytes().await;
                        Some(status)
                    }
                    Err(_) => None,
                };
                let us = u64::try_from(sent.elapsed().as_micros()).unwrap_or(u64::MAX);
                match status {
                    Some(200..=299) => {
                        tally.ok.fetch_add(1, Ordering::Relaxed);
                        tally.latencies_us.lock().unwrap().push(us);
                    }
                    Some(_) => {
                        tally.non_2xx.fetch_add(1, Ordering::Relaxed);
                    }
                    None => {
                        tally.errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                if let Some(log) = &log {
                    let sha =
                        hex::encode(ring::digest::digest(&ring::digest::SHA256, body.as_bytes()));
                    let _ = writeln!(
                        log.lock().unwrap(),
                        r#"{{"id":"{id}","status":{},"sha256":"{sha}"}}"#,
                        status.map_or(0, i64::from)
                    );
                }
                if let Some(p) = pause {
                    tokio::time::sleep(p.saturating_sub(sent.elapsed())).await;
                }
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    if let Some(log) = &log {
        log.lock().unwrap().flush()?;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let mut lat = std::mem::take(&mut *tally.latencies_us.lock().unwrap());
    lat.sort_unstable();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    let ok = tally.ok.load(Ordering::Relaxed);
    println!(
        "{{\"acked\":{ok},\"non_2xx\":{},\"errors\":{},\"seconds\":{elapsed:.2},\"per_second\":{:.0},\"p50_ms\":{:.2},\"p99_ms\":{:.2}}}",
        tally.non_2xx.load(Ordering::Relaxed),
        tally.errors.load(Ordering::Relaxed),
        ok as f64 / elapsed,
        pct(0.50) as f64 / 1000.0,
        pct(0.99) as f64 / 1000.0,
    );
    Ok(())
}
