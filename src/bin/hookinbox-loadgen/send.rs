//! `send`: signed webhooks over keep-alive connections, as cheaply as a load generator can
//! send them, so that the server under test gets as much of a shared machine as possible.
//!
//! A benchmark's ratio is only as honest as its ceiling: a generator that spends half the
//! cores on itself caps every server it drives, and hides how far the server is from the
//! bare one. So this sender writes HTTP/1.1 by hand over plain sockets, one request at a
//! time per connection (a closed loop, as a provider's sender), each connection a task on
//! a single-threaded runtime (`--threads` of them, 1 by default, as `wrk -t1`), and parses
//! only the answer's status line and length (httparse). Per request the work left is what
//! a provider does too: build the body, sign it, write it, read the answer. Its own CPU per
//! request is measured (getrusage) and printed, so the report says what it cost.

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use bytes::{Buf as _, BytesMut};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use hookinbox::oracle::{Rng, Sent};
use hookinbox::scheme::Scheme;

/// Which event ids a run sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Ids {
    /// `load_<unix ms>_<connection>_<n>`, zero-padded: time first, as UUIDv7s and ULIDs
    /// are, so each id sorts after those sent a millisecond before it, whichever
    /// connection sent them, and inserts land at the end of the identity index
    Ordered,
    /// Random UUIDs (version 4 layout), as GitHub's delivery ids: every insert lands at a
    /// random place in the identity index
    Random,
    /// One event over and over (a provider retrying): every request is a duplicate
    Duplicate,
}

pub struct Plan {
    pub addr: SocketAddr,
    /// `Host` header value.
    pub host: String,
    /// `/hooks/<source>`.
    pub path: String,
    pub connections: usize,
    pub threads: usize,
    pub duration: Duration,
    /// Requests per second in all; 0 = as fast as answers come.
    pub rate: u64,
    pub body_size: usize,
    pub ids: Ids,
}

/// What one connection saw.
#[derive(Default)]
struct Tally {
    /// Microseconds from the first byte written to the whole answer read, of 2xx answers.
    latencies_us: Vec<u32>,
    ok: u64,
    non_2xx: u64,
    errors: u64,
    sent: Vec<Sent>,
}

/// Runs the plan; prints one JSON line with the rates, latencies and the sender's own CPU.
pub fn run(scheme: Scheme, plan: Plan, log: Option<std::path::PathBuf>) -> anyhow::Result<()> {
    let scheme = Arc::new(scheme);
    let plan = Arc::new(plan);
    // Seeds the random ids: different for every run.
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    // Opened first, so that a path that cannot be written fails before the run, not after.
    let mut log = log
        .map(|path| {
            std::fs::File::create(&path)
                .map(std::io::BufWriter::new)
                .with_context(|| format!("creating {}", path.display()))
        })
        .transpose()?;
    let cpu_before = cpu_seconds();
    let started = Instant::now();
    let deadline = started + plan.duration;
    let threads = plan.threads.clamp(1, plan.connections.max(1));
    let logging = log.is_some();
    let mut workers = Vec::new();
    for t in 0..threads {
        let (scheme, plan) = (scheme.clone(), plan.clone());
        // Connections t, t + threads, t + 2·threads, …
        let mine: Vec<usize> = (t..plan.connections).step_by(threads).collect();
        workers.push(std::thread::spawn(move || -> anyhow::Result<Vec<Tally>> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async move {
                let tasks: Vec<_> = mine
                    .into_iter()
                    .map(|c| {
                        let (scheme, plan) = (scheme.clone(), plan.clone());
                        tokio::spawn(connection(scheme, plan, seed, c, deadline, logging))
                    })
                    .collect();
                let mut tallies = Vec::new();
                for t in tasks {
                    tallies.push(t.await?);
                }
                Ok(tallies)
            })
        }));
    }
    let mut all = Tally::default();
    for w in workers {
        let tallies = w
            .join()
            .map_err(|_| anyhow::anyhow!("a sender thread panicked"))??;
        for t in tallies {
            all.ok += t.ok;
            all.non_2xx += t.non_2xx;
            all.errors += t.errors;
            all.latencies_us.extend(t.latencies_us);
            all.sent.extend(t.sent);
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu_before;
    if let Some(out) = &mut log {
        for s in &all.sent {
            serde_json::to_writer(&mut *out, s)?;
            out.write_all(b"\n")?;
        }
        out.flush()?;
    }
    let lat = &mut all.latencies_us;
    lat.sort_unstable();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    let requests = all.ok + all.non_2xx + all.errors;
    println!(
        "{{\"acked\":{},\"non_2xx\":{},\"errors\":{},\"seconds\":{elapsed:.2},\"per_second\":{:.0},\"p50_ms\":{:.2},\"p99_ms\":{:.2},\"cpu_us_per_request\":{:.2}}}",
        all.ok,
        all.non_2xx,
        all.errors,
        all.ok as f64 / elapsed,
        f64::from(pct(0.50)) / 1000.0,
        f64::from(pct(0.99)) / 1000.0,
        cpu * 1e6 / requests.max(1) as f64,
    );
    Ok(())
}

/// User and system CPU this process has used, in seconds.
fn cpu_seconds() -> f64 {
    use nix::sys::resource::{UsageWho, getrusage};
    getrusage(UsageWho::RUSAGE_SELF).map_or(0.0, |u| {
        let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6;
        t(u.user_time()) + t(u.system_time())
    })
}

/// One keep-alive connection sending until `deadline`. A connection the server closes, or
/// an error, is counted and replaced by a new one.
async fn connection(
    scheme: Arc<Scheme>,
    plan: Arc<Plan>,
    seed: u128,
    c: usize,
    deadline: Instant,
    logging: bool,
) -> Tally {
    let mut tally = Tally::default();
    // With a rate, each connection sends on a schedule of its own, its start staggered
    // across one interval: a request is due an interval after the one before was due, not
    // after it was answered, so the timer's millisecond granularity (a sleep ends on the
    // next tick) and the answers' latency do not lower the rate. A connection behind its
    // schedule (a slow answer) sends at once until it has caught up.
    let interval = (plan.rate > 0)
        .then(|| Duration::from_secs_f64(plan.connections as f64 / plan.rate as f64));
    let mut due =
        interval.map(|i| Instant::now() + i.mul_f64(c as f64 / plan.connections.max(1) as f64));
    let mut rng = Rng((seed as u64 ^ (c as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1);
    let mut request = Vec::with_capacity(plan.body_size + 1024);
    let mut answer = BytesMut::with_capacity(4096);
    let mut stream: Option<TcpStream> = None;
    let padding = "x".repeat(plan.body_size);
    let mut id = String::with_capacity(64);
    let mut json = String::with_capacity(plan.body_size + 128);
    let mut n = 0u64;
    while Instant::now() < deadline {
        if let (Some(at), Some(i)) = (due.as_mut(), interval) {
            if *at >= deadline {
                break;
            }
            tokio::time::sleep_until((*at).into()).await;
            *at += i;
        }
        // Written into buffers kept from request to request: the sender's own work per
        // request is part of what the ceiling measures.
        id.clear();
        let _ = match plan.ids {
            Ids::Duplicate => write!(id, "load_dup"),
            // Zero-padded, so that text order is time order. The connection and its count
            // keep ids of the same millisecond apart (and a second run's ids new).
            Ids::Ordered => write!(id, "load_{:013}_{c:04}_{n:010}", unix_millis()),
            Ids::Random => uuid(&mut rng, &mut id),
        };
        n += 1;
        body(&mut json, &id, plan.body_size, &padding);
        let signed = scheme.sign_post(json.as_bytes(), &id, hookinbox::clock::unix_now());
        request.clear();
        let _ = write!(
            request,
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
            plan.path,
            plan.host,
            signed.body.len()
        );
        for (k, v) in &signed.headers {
            request.extend_from_slice(k.as_str().as_bytes());
            request.extend_from_slice(b": ");
            request.extend_from_slice(v.as_bytes());
            request.extend_from_slice(b"\r\n");
        }
        request.extend_from_slice(b"\r\n");
        request.extend_from_slice(&signed.body);

        let sent = Instant::now();
        let status = exchange(&mut stream, &plan.addr, &request, &mut answer).await;
        let us = u32::try_from(sent.elapsed().as_micros()).unwrap_or(u32::MAX);
        match status {
            Some(200..=299) => {
                tally.ok += 1;
                tally.latencies_us.push(us);
            }
            Some(_) => tally.non_2xx += 1,
            None => {
                tally.errors += 1;
                // No server (yet, or any more): try again without spinning on the cores
                // the server needs.
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        if logging {
            tally.sent.push(Sent::new(id.clone(), &signed.body, status));
        }
    }
    tally
}

/// A JSON body of exactly `size` bytes (or the shortest one, for a smaller size), carrying
/// the id where providers put it, written into `body`; `padding` holds at least `size`
/// bytes of padding.
fn body(body: &mut String, id: &str, size: usize, padding: &str) {
    // The body below without its id and padding.
    const SHELL: usize = r#"{"id":"","event_id":"","type":"load.test","pad":""}"#.len();
    let pad = size.saturating_sub(SHELL + 2 * id.len());
    body.clear();
    body.push_str(r#"{"id":""#);
    body.push_str(id);
    body.push_str(r#"","event_id":""#);
    body.push_str(id);
    body.push_str(r#"","type":"load.test","pad":""#);
    body.push_str(&padding[..pad.min(padding.len())]);
    body.push_str(r#""}"#);
}

fn unix_millis() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// A random id in the layout of a version 4 UUID, written into `out`.
fn uuid(rng: &mut Rng, out: &mut String) -> std::fmt::Result {
    let (a, b) = (rng.next_u64(), rng.next_u64());
    write!(
        out,
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}

/// Sends one request and reads its answer; the answer's status, or None on any failure
/// (the connection is then dropped, and the next request opens a new one).
async fn exchange(
    stream: &mut Option<TcpStream>,
    addr: &SocketAddr,
    request: &[u8],
    answer: &mut BytesMut,
) -> Option<u16> {
    if stream.is_none() {
        let s = TcpStream::connect(addr).await.ok()?;
        let _ = s.set_nodelay(true);
        answer.clear();
        *stream = Some(s);
    }
    let s = stream.as_mut()?;
    let result = async {
        s.write_all(request).await.ok()?;
        loop {
            if let Some((status, len, keep)) = parse(answer) {
                answer.advance(len);
                return Some((status, keep));
            }
            if s.read_buf(answer).await.ok()? == 0 {
                return None; // closed before a whole answer
            }
        }
    }
    .await;
    match result {
        Some((status, keep)) => {
            if !keep {
                *stream = None;
            }
            Some(status)
        }
        None => {
            *stream = None;
            None
        }
    }
}

/// A whole answer at the start of `buf`: its status, its length in bytes (head and body),
/// and whether the connection stays open. None until it is all there.
fn parse(buf: &[u8]) -> Option<(u16, usize, bool)> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    let httparse::Status::Complete(head) = response.parse(buf).ok()? else {
        return None;
    };
    let mut length = 0usize;
    let mut keep = true;
    for h in response.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            length = std::str::from_utf8(h.value).ok()?.trim().parse().ok()?;
        } else if h.name.eq_ignore_ascii_case("connection") {
            keep = !h.value.eq_ignore_ascii_case(b"close");
        }
    }
    let whole = head + length;
    (buf.len() >= whole).then(|| (response.code.unwrap_or(0), whole, keep))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_have_the_asked_size_and_ids_the_uuid_layout() {
        let id = "load_1_0001_0000000001";
        let mut b = String::new();
        body(&mut b, id, 1500, &"x".repeat(1500));
        assert_eq!(b.len(), 1500);
        let v: serde_json::Value = serde_json::from_str(&b).unwrap();
        assert_eq!(v["id"], id);
        let (mut u, mut other) = (String::new(), String::new());
        uuid(&mut Rng(7), &mut u).unwrap();
        uuid(&mut Rng(8), &mut other).unwrap();
        assert_eq!(u.len(), 36);
        assert_eq!(u.as_bytes()[14], b'4');
        assert_eq!(u.matches('-').count(), 4);
        assert_ne!(u, other);
    }

    #[test]
    fn an_answer_is_whole_only_with_its_body() {
        let a = b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nok\n";
        assert_eq!(parse(a), Some((200, a.len(), true)));
        assert_eq!(parse(&a[..a.len() - 1]), None);
        let closing =
            b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(parse(closing), Some((503, closing.len(), false)));
    }
}
