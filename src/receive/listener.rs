//! The accept loop shared by the public and the admin listener: HTTP/1 only, with a timer so
//! that the header timeout is real, a cap on concurrent connections, and a graceful drain.
//!
//! Why `http1::Builder` and not hyper-util's `auto` builder: `auto` sniffs the protocol
//! version with no timer, so a peer that connects and sends nothing would never time out.
//! Why `.timer(..)`: without it hyper silently drops its header read timeout
//! (reference/rust-stack.md §2.3). Webhook senders speak HTTP/1.1.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{CONNECTION, CONTENT_TYPE, HOST, TRANSFER_ENCODING};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore};
use tokio_io_timeout::TimeoutStream;

/// Most headers in one request. Providers send 10-25; hyper's default is 100.
pub const MAX_HEADERS: usize = 64;
/// Read buffer per connection, which bounds the request head (line plus headers). 16 KiB
/// is hyper's floor-friendly size and far above any provider's headers.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
/// How long a shutdown waits for open connections to finish their current request.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause after a failed accept (out of file descriptors, say) before trying again, so the
/// loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// How long a new connection is spared from being closed for room before its first request
/// starts ([`Slot::spared`]).
const FIRST_REQUEST_GRACE: Duration = Duration::from_millis(100);

pub struct Limits {
    /// How long a peer may stay silent: while sending its request head, between requests on
    /// a kept-alive connection, and while not reading an answer.
    pub header_timeout: Duration,
    pub max_connections: usize,
    /// HTTPS: the TLS handshake must also finish within `header_timeout`.
    pub tls: Option<super::tls::Acceptor>,
    /// Counts connections closed to make room for a new one (see [`serve`]).
    pub closed_for_room: Option<prometheus_client::metrics::counter::Counter>,
}

/// A connection's byte stream, plain or TLS.
trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// Serves `handler` on `listener` until `shutdown` completes, then stops accepting and
/// lets open connections finish their current request (up to [`DRAIN_TIMEOUT`]).
///
/// At most `max_connections` are open at once. When every slot is taken and another peer
/// connects, the connection that has waited longest without a request in progress (one
/// still sending its head, doing its TLS handshake, or idle between requests) is closed to
/// make room, a new one only after [`FIRST_REQUEST_GRACE`] ([`Slot::spared`]). While no
/// connection can be closed, the new one waits. On the public listener
/// ([`Handler::EVICTS_UNREAD_BODIES`]) a connection still sending its request's body counts
/// as idle too, from the moment its head arrived: until the body is whole nothing of it can
/// be stored, and a client that trickles one would otherwise hold its slot until
/// `body_timeout` (150 such clients at a cap of 64 made every signed request wait 4.5-7.6 s).
/// Otherwise a few hundred slow or idle connections would hold every slot until their
/// header timeout and a provider's signed request would wait behind them (Slack gives up
/// after 3 s). Nothing is lost by it: a closed connection had no request in progress, and
/// its client reconnects. A request that had started is never cut (see [`Slot`]); the
/// answer's bytes are in hyper's hands before the connection counts as idle ([`Answer`]).
/// Once the handler has the whole body it claims the request ([`BodyRead::whole`]); from
/// then on, through its commit and answer, the connection is never closed for room.
pub async fn serve<H, F>(listener: TcpListener, limits: Limits, handler: Arc<H>, shutdown: F)
where
    H: Handler + Send + Sync + 'static,
    F: Future<Output = ()>,
{
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let idle = Arc::new(Idle::default());
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    // half_close: a sender may shut its side down once its request is written (`nc -N`,
    // some scripts and proxies). hyper's default takes that end of input for the end of
    // the connection and drops the answer, though the event was stored; with it the answer
    // is still written.
    builder
        .timer(TokioTimer::new())
        .half_close(true)
        .header_read_timeout(limits.header_timeout)
        .max_headers(MAX_HEADERS)
        .max_buf_size(MAX_HEAD_BYTES);
    tokio::pin!(shutdown);
    let mut last_accept = None;
    'accept: loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = &mut shutdown => break 'accept,
        };
        let permit = match permits.clone().try_acquire_owned() {
            Ok(p) => p,
            // Every slot is taken: close the longest idle connection and take its slot when
            // it is gone. If none can be closed (each inside a request, or new), wait for a
            // slot, and try again whenever one of them finishes its request or a new one's
            // grace ends, and so could be closed.
            Err(_) => loop {
                let (closed, spared_until) = idle.close_oldest(Instant::now());
                if closed {
                    if let Some(c) = &limits.closed_for_room {
                        c.inc();
                    }
                    tracing::debug!(%peer, "every connection slot was taken: closed the longest idle one");
                }
                tokio::select! {
                    p = permits.clone().acquire_owned() => break p.expect("the semaphore is never closed"),
                    () = idle.became_idle.notified(), if !closed => {}
                    () = sleep_until_some(spared_until), if !closed => {}
                    () = &mut shutdown => break 'accept,
                }
            },
        };
        last_accept = Some(Instant::now());
        let _ = stream.set_nodelay(true);
        // hyper has no write timeout: a peer that pipelines requests and never reads the
        // answers would hold its connection, and a permit, forever. A peer that reads
        // nothing for the header timeout is gone or hostile.
        let mut stream = TimeoutStream::new(stream);
        stream.set_write_timeout(Some(limits.header_timeout));
        let slot = idle.register();
        let stream = Watched {
            inner: Box::pin(stream),
            slot: slot.clone(),
        };
        let handler = handler.clone();
        let service_slot = slot.clone();
        let service = service_fn(move |mut req: Request<Incoming>| {
            let (handler, slot) = (handler.clone(), service_slot.clone());
            // When hyper has the head, not when it first polls the answer: in between it
            // reads on (the body, or a look for the next request) and may find nothing
            // waiting, which would make the connection closable with its request parsed.
            let began = slot.begin(H::EVICTS_UNREAD_BODIES);
            if H::EVICTS_UNREAD_BODIES {
                req.extensions_mut().insert(BodyRead(slot.clone()));
            }
            async move {
                if !began {
                    // Closed for room before its head was read; the answer goes nowhere.
                    return Ok::<_, Infallible>(busy().map(|body| Answer { body, slot: None }));
                }
                let answer = match malformed(&req) {
                    Some(refusal) => {
                        tracing::debug!(%peer, status = refusal.status().as_u16(), "malformed request refused");
                        refusal
                    }
                    None => handler.handle(req, peer).await,
                };
                // Between requests again once hyper has taken the whole answer to write.
                Ok(answer.map(|body| Answer {
                    body,
                    slot: Some(slot),
                }))
            }
        });
        let (watcher, builder, tls) = (graceful.watcher(), builder.clone(), limits.tls.clone());
        let handshake_timeout = limits.header_timeout;
        let idle = idle.clone();
        tokio::spawn(async move {
            let connection = async move {
                let io: Box<dyn Io> = match tls {
                    None => Box::new(stream),
                    Some(acceptor) => {
                        match tokio::time::timeout(
                            handshake_timeout,
                            acceptor.current().accept(stream),
                        )
                        .await
                        {
                            // A TLS-ALPN-01 validation ends with its handshake.
                            Ok(Ok(tls))
                                if tls.get_ref().1.alpn_protocol()
                                    == Some(super::tls::ACME_TLS_ALPN) =>
                            {
                                return;
                            }
                            Ok(Ok(tls)) => Box::new(tls),
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                                return;
                            }
                            Err(_) => {
                                tracing::debug!(%peer, "TLS handshake timed out");
                                return;
                            }
                        }
                    }
                };
                // Errors here are the peer's: a reset, a timeout, malformed HTTP. hyper
                // has already answered what could be answered.
                if let Err(e) = watcher
                    .watch(builder.serve_connection(TokioIo::new(io), service))
                    .await
                {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
            };
            tokio::select! {
                () = connection => {}
                () = slot.closed.notified() => {}
            }
            idle.forget(&slot);
            drop(permit);
        });
    }
    drop(listener);
    // Told to shut down, hyper closes a connection that has read nothing yet: one accepted
    // just now would be closed with its request unread, and its client would get an empty
    // reply (seen in packaging/test-systemd.sh's restarts under load). It gets the grace a
    // new connection has for its first request; the next connections wait in the socket's
    // queue (socket activation) for the next process.
    if let Some(at) = last_accept {
        tokio::time::sleep_until((at + FIRST_REQUEST_GRACE).into()).await;
    }
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after {DRAIN_TIMEOUT:?}; closing them");
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// The answer to a request whose connection was closed for room between its head and its
/// start: usually lost with the connection, but hyper may write it first, so it says when
/// to come back, as every 503 does.
fn busy() -> Response<Full<Bytes>> {
    Response::builder()
        .status(hyper::http::StatusCode::SERVICE_UNAVAILABLE)
        .header(CONNECTION, "close")
        .header(hyper::header::RETRY_AFTER, super::answer::RETRY_AFTER_SECS)
        .body(Full::new(Bytes::new()))
        .expect("static header values are valid")
}

/// An answer's body that puts its connection back between requests when hyper is done
/// with it: dropped once hyper has taken every byte into its write buffer, not when the
/// handler returns, so an answer is not cut while hyper still encodes it. (Bytes still in
/// the socket's buffer for a client that does not read them can be cut; the event was
/// committed, and the provider's retry hears "duplicate".)
struct Answer {
    body: Full<Bytes>,
    slot: Option<Arc<Slot>>,
}

impl hyper::body::Body for Answer {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Infallible>>> {
        std::pin::Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

impl Drop for Answer {
    fn drop(&mut self) {
        if let Some(slot) = &self.slot {
            slot.answered.store(true, Ordering::Release);
        }
    }
}

/// A connection's byte stream, watched for the flush that puts an answer in the socket
/// (see `poll_flush`). Under TLS it is the raw stream, below the TLS records.
struct Watched<S> {
    inner: S,
    slot: Arc<Slot>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    /// hyper flushes once it has written what it buffered: an answer taken by hyper
    /// ([`Answer`]) is then in the socket, and only then is its connection between
    /// requests. Marked when the answer was taken, a keep-alive connection could be closed
    /// for room with its answer still in hyper's buffer, never sent (a burst over the cap
    /// lost a 200 now and then).
    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let flushed = std::pin::Pin::new(&mut this.inner).poll_flush(cx);
        if matches!(flushed, std::task::Poll::Ready(Ok(())))
            && this.slot.answered.swap(false, Ordering::AcqRel)
        {
            this.slot.end();
        }
        flushed
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// The open connections, for choosing which one gives up its slot.
#[derive(Default)]
struct Idle {
    slots: std::sync::Mutex<std::collections::HashMap<u64, Arc<Slot>>>,
    next_id: std::sync::atomic::AtomicU64,
    /// Told whenever a connection finishes a request: the accept loop, waiting because no
    /// connection could be closed, may now close it for room.
    became_idle: Arc<Notify>,
}

/// One connection's state: between requests (or before its first), inside one, or closed
/// for room. The two moves out of "between" are compare-and-swaps, so a connection is never
/// both closed and handling a request: if the close wins, the request is not started; if
/// the request wins, the close picks another connection.
struct Slot {
    id: u64,
    state: std::sync::atomic::AtomicU8,
    /// Since when it has been between requests (or open, before its first).
    since: std::sync::Mutex<Instant>,
    /// A new connection is not closed for room until its first request starts or
    /// [`FIRST_REQUEST_GRACE`] has passed. Without it a burst of ordinary senders over the
    /// cap closed one another: a connection accepted a moment before, its request still on
    /// its way or unread in the socket, counted as the longest idle, and its sender got a
    /// reset (100 signed requests at a cap of 64: 17 resets and 18 empty 503s). The first
    /// read that finds nothing waiting is no sign of a slow client: the connection is
    /// accepted when its handshake completes, often before its request arrives. The grace
    /// is short because a flood of empty connections holds every slot for its length: one
    /// that keeps the cap's worth of slots spared must open ten times the cap a second.
    spared: std::sync::atomic::AtomicBool,
    /// Its answer is in hyper's hands but not yet flushed: still in its request.
    answered: std::sync::atomic::AtomicBool,
    closed: Notify,
    became_idle: Arc<Notify>,
}

const BETWEEN: u8 = 0;
const IN_REQUEST: u8 = 1;
const CLOSED: u8 = 2;
/// Inside a request whose body is still arriving: closable, like [`BETWEEN`].
const READING: u8 = 3;

/// Handed to the handler with each request (in its extensions) on a listener whose handler
/// [`Handler::EVICTS_UNREAD_BODIES`].
#[derive(Clone)]
pub struct BodyRead(Arc<Slot>);

impl BodyRead {
    /// The body is whole: from now on the request is not closed for room. False if it was
    /// closed first; the handler then stores nothing (its answer goes nowhere).
    pub fn whole(&self) -> bool {
        match self.0.state.compare_exchange(
            READING,
            IN_REQUEST,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) | Err(IN_REQUEST) => true,
            Err(_) => false,
        }
    }
}

impl Idle {
    fn register(&self) -> Arc<Slot> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let slot = Arc::new(Slot {
            id,
            state: BETWEEN.into(),
            since: std::sync::Mutex::new(Instant::now()),
            spared: true.into(),
            answered: false.into(),
            closed: Notify::new(),
            became_idle: self.became_idle.clone(),
        });
        self.slots
            .lock()
            .expect("no panics while holding the lock")
            .insert(id, slot.clone());
        slot
    }

    fn forget(&self, slot: &Slot) {
        self.slots
            .lock()
            .expect("no panics while holding the lock")
            .remove(&slot.id);
    }

    /// Closes the connection that has been between requests the longest, if any may be
    /// closed `now`. Otherwise also says when the first new connection's grace ends.
    fn close_oldest(&self, now: Instant) -> (bool, Option<Instant>) {
        let slots = self.slots.lock().expect("no panics while holding the lock");
        let mut spared_until: Option<Instant> = None;
        let mut candidates: Vec<(Instant, u8, &Arc<Slot>)> = Vec::new();
        for s in slots.values() {
            let state = s.state.load(Ordering::Acquire);
            if state != BETWEEN && state != READING {
                continue;
            }
            let since = *s.since.lock().expect("no panics while holding the lock");
            let grace_ends = since + FIRST_REQUEST_GRACE;
            // A body gets the same grace from its head as a new connection from its accept:
            // a whole request sent at once is read and claimed within it, where otherwise a
            // burst of senders over the cap closed one another between head and body.
            let spared = state == READING || s.spared.load(Ordering::Acquire);
            if spared && grace_ends > now {
                spared_until = Some(spared_until.map_or(grace_ends, |t| t.min(grace_ends)));
                continue;
            }
            candidates.push((since, state, s));
        }
        candidates.sort_by_key(|(since, _, _)| *since);
        let closed = candidates.into_iter().any(|(_, state, s)| {
            // Lost if the connection began a request, or its body became whole, meanwhile.
            let won = s
                .state
                .compare_exchange(state, CLOSED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok();
            if won {
                // Stored if the task is not waiting yet: it will see it when it does.
                s.closed.notify_one();
            }
            won
        });
        (closed, spared_until)
    }
}

impl Slot {
    /// A request starts, still reading its body if `reading`; false if the connection was
    /// closed for room first.
    fn begin(&self, reading: bool) -> bool {
        // The next request of a pipeline, parsed before the last answer was flushed: the
        // connection never left its request.
        if self.answered.swap(false, Ordering::AcqRel) {
            return true;
        }
        // Oldest first among closable connections: a body counts from its head.
        *self.since.lock().expect("no panics while holding the lock") = Instant::now();
        let state = if reading { READING } else { IN_REQUEST };
        let began = self
            .state
            .compare_exchange(BETWEEN, state, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if began {
            self.spared.store(false, Ordering::Release);
        }
        began
    }

    /// The request was answered; the connection is between requests again.
    fn end(&self) {
        *self.since.lock().expect("no panics while holding the lock") = Instant::now();
        // READING: answered without reading its body (a refusal), which closes it.
        let ended = [IN_REQUEST, READING].into_iter().any(|from| {
            self.state
                .compare_exchange(from, BETWEEN, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        });
        if ended {
            self.became_idle.notify_one();
        }
    }
}

/// What RFC 9112 says a server must refuse, where hyper lets it through. `None` for a
/// request that may go on to the handler.
///
/// - An HTTP/1.1 request without `Host`, any request with two, or a `Host` that is not an
///   authority: 400 (§3.2).
/// - A transfer coding other than `chunked`: 501 (§6.1; hyper decodes the chunks and
///   would silently hand us still-encoded bytes). A coding list where `chunked` is not last
///   hyper already refuses with 400.
///
/// Each refusal closes the connection: the body was not read.
fn malformed<B>(req: &Request<B>) -> Option<Response<Full<Bytes>>> {
    use hyper::http::{StatusCode, Version, uri::Authority};
    // With the admin listener's headers: it answers these too.
    let refuse = |status: StatusCode, why: &'static str| {
        Some(crate::web::secure(
            Response::builder()
                .status(status)
                .header(CONTENT_TYPE, "text/plain; charset=utf-8")
                .header(CONNECTION, "close")
                .body(Full::new(Bytes::from_static(why.as_bytes())))
                .expect("static header values are valid"),
        ))
    };
    let mut hosts = req.headers().get_all(HOST).iter();
    match (hosts.next(), hosts.next()) {
        (None, _) if req.version() == Version::HTTP_11 => {
            return refuse(StatusCode::BAD_REQUEST, "bad request: no Host header\n");
        }
        (Some(_), Some(_)) => {
            return refuse(StatusCode::BAD_REQUEST, "bad request: two Host headers\n");
        }
        (Some(host), None) if !host.is_empty() && Authority::try_from(host.as_bytes()).is_err() => {
            return refuse(
                StatusCode::BAD_REQUEST,
                "bad request: malformed Host header\n",
            );
        }
        _ => {}
    }
    let codings = req.headers().get_all(TRANSFER_ENCODING);
    if codings.iter().next().is_some() {
        let only_chunked = codings.iter().all(|v| {
            v.to_str().is_ok_and(|v| {
                v.split(',')
                    .map(str::trim)
                    .filter(|c| !c.is_empty())
                    .all(|c| c.eq_ignore_ascii_case("chunked"))
            })
        });
        if !only_chunked {
            return refuse(
                StatusCode::NOT_IMPLEMENTED,
                "not implemented: only the chunked transfer coding is understood\n",
            );
        }
    }
    None
}

/// Something that answers a request. Implemented by the public receiver and the admin API.
pub trait Handler {
    /// Whether a request whose body is still arriving may be closed for room at the cap:
    /// the handler then claims each request once its body is whole ([`BodyRead`], in the
    /// request's extensions).
    const EVICTS_UNREAD_BODIES: bool = false;

    fn handle(
        &self,
        req: Request<Incoming>,
        peer: std::net::SocketAddr,
    ) -> impl Future<Output = Response<Full<Bytes>>> + Send;
}
