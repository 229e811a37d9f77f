//! The public listener: `/hooks/<source>`, with the methods the source's provider sends
//! (POST, and GET or HEAD for some handshakes).
//!
//! Invariant: nothing leaves this module as 2xx before the commit that holds the event
//! returned — except a provider handshake, which is answered after whatever check its
//! protocol allows and never stored. The path of a request:
//!
//! ```text
//! bounded body read -> signature + timestamp check over the exact raw bytes
//!   -> identity -> durable commit (group commit) -> answer
//! ```

pub mod allow;
pub mod answer;
pub mod fetch;
pub mod listener;
pub mod recent;
pub mod refusals;
pub mod tls;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::CONTENT_LENGTH;
use hyper::http::{HeaderMap, HeaderName};
use hyper::{Request, Response};

use crate::config::{self, Source};
use crate::metrics::Metrics;
use crate::proxy::{self, Cidr};
use crate::recover::watch::{SourceWatch, Watch};
use crate::scheme::{Action, Input, Learnt, Reject, Verdict};
use crate::secret::Secret;
use crate::store::Store;
use crate::store::{Origin, Stored};
use crate::{clock, store};
pub use answer::Outcome;

/// The path prefix of webhook endpoints.
pub const HOOKS_PREFIX: &str = "/hooks/";

/// Request headers never stored or forwarded: they carry credentials, not event data.
const CREDENTIAL_HEADERS: [&str; 3] = ["authorization", "cookie", "proxy-authorization"];

/// What the receiver knows about one source.
struct SourceState {
    name: Arc<str>,
    account: Arc<str>,
    config: Arc<Source>,
    /// Its run of refused requests, for knowing the gaps (`recover::watch`).
    watch: Arc<SourceWatch>,
}

/// The sources as configured now; replaced whole on a reload, so that a request in flight
/// finishes with the configuration it started with.
struct Live {
    sources: HashMap<String, SourceState>,
    /// Peers whose X-Forwarded-For is believed.
    trusted_proxies: Vec<Cidr>,
}

impl Live {
    fn new(sources: &[Arc<Source>], trusted_proxies: Vec<Cidr>, watch: &Watch) -> Live {
        let sources = sources
            .iter()
            .map(|s| {
                let state = SourceState {
                    name: s.name.as_str().into(),
                    account: s.account.as_str().into(),
                    watch: watch.source(&s.name),
                    config: s.clone(),
                };
                (s.name.clone(), state)
            })
            .collect();
        Live {
            sources,
            trusted_proxies,
        }
    }
}

/// How long a body waits for room in the [`BodyBudget`] before it is answered 503: long
/// enough to ride out a burst, short enough that the provider retries well inside its own
/// timeout.
pub const BODY_BUDGET_WAIT: Duration = Duration::from_secs(1);

/// Body frames shorter than this are copied together as they arrive (see `read_body`), so
/// that a body holds at most one entry per this many bytes.
const SMALL_FRAME: usize = 4096;

/// How long a body may take before `server.min_body_rate` applies: a provider's body is in
/// the first packets, but a new connection's first round trips may be slow.
pub const MIN_RATE_GRACE: Duration = Duration::from_secs(1);

/// The bytes of request bodies held in memory at once, over all connections
/// (`server.body_budget`). A body takes room as its bytes arrive and gives it back when it
/// is dropped: after its request was refused, or with its event once the writer is done
/// with it (even if the request stopped waiting for a stalled disk). So memory is bounded
/// by the budget rather than by `max_connections` times `max_body`, and a client holds only
/// what it really sent.
pub struct BodyBudget {
    room: Arc<tokio::sync::Semaphore>,
    total: usize,
}

impl BodyBudget {
    pub fn new(bytes: u64) -> BodyBudget {
        let total = usize::try_from(bytes)
            .unwrap_or(usize::MAX)
            .min(tokio::sync::Semaphore::MAX_PERMITS);
        BodyBudget {
            room: Arc::new(tokio::sync::Semaphore::new(total)),
            total,
        }
    }

    /// Bytes held now.
    pub fn in_use(&self) -> usize {
        self.total - self.room.available_permits()
    }

    /// Room for `bytes` more, waiting at most [`BODY_BUDGET_WAIT`].
    async fn take(&self, bytes: usize) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let n = u32::try_from(bytes).ok()?;
        if let Ok(p) = self.room.clone().try_acquire_many_owned(n) {
            return Some(p);
        }
        tokio::time::timeout(BODY_BUDGET_WAIT, self.room.clone().acquire_many_owned(n))
            .await
            .ok()
            .and_then(Result::ok)
    }
}

/// How often, at most, a learning source's secret is read again from a PostgreSQL inbox
/// when a request fails to verify (another replica may have learnt a new one).
const LEARNT_RECHECK: Duration = Duration::from_secs(5);

/// The public request handler.
pub struct Receiver {
    live: RwLock<Arc<Live>>,
    /// Secrets sources learnt from a handshake (Asana), by source name: loaded from the
    /// inbox at start-up, added to when a handshake is stored. Kept across reloads.
    learnt: RwLock<HashMap<String, Secret>>,
    /// With replicas, when each learning source's secret was last read again from the inbox
    /// (another replica may have learnt it): at most every [`LEARNT_RECHECK`].
    learnt_checked: std::sync::Mutex<HashMap<String, std::time::Instant>>,
    /// Keys requests name (SNS's certificates) and the GETs handshakes ask for.
    fetcher: fetch::Fetcher,
    /// The providers' address lists that sources' `allow_from` name.
    allow: Arc<allow::Lists>,
    store: Store,
    metrics: Arc<Metrics>,
    /// Every source's receiving state, kept across reloads.
    watch: Arc<Watch>,
    max_body: u64,
    body_timeout: Duration,
    /// `server.min_body_rate`, in bytes a second; 0 for none.
    min_body_rate: u64,
    budget: Arc<BodyBudget>,
    /// Identities committed in the last minute, for answering retries without the writer.
    recent: recent::Recent,
    /// Which refusals are logged in full, and how many more were not.
    refusals: Arc<refusals::RefusalLog>,
}

impl Receiver {
    pub fn new(
        sources: &[Arc<Source>],
        server: &config::Server,
        store: Store,
        metrics: Arc<Metrics>,
        budget: Arc<BodyBudget>,
        learnt: Vec<(String, Vec<u8>)>,
        watch: Arc<Watch>,
    ) -> Receiver {
        Receiver {
            fetcher: fetch::Fetcher::default(),
            allow: Arc::default(),
            live: RwLock::new(Arc::new(Live::new(
                sources,
                server.trusted_proxies.clone(),
                &watch,
            ))),
            watch,
            learnt: RwLock::new(
                learnt
                    .into_iter()
                    .map(|(source, secret)| (source, Secret::new(secret)))
                    .collect(),
            ),
            learnt_checked: std::sync::Mutex::default(),
            store,
            metrics,
            max_body: server.max_body,
            body_timeout: server.body_timeout,
            min_body_rate: server.min_body_rate,
            budget,
            recent: recent::Recent::default(),
            refusals: refusals::RefusalLog::start(),
        }
    }

    /// The providers' address lists the sources' `allow_from` name, for serve to fill.
    pub fn allow_lists(&self) -> Arc<allow::Lists> {
        self.allow.clone()
    }

    /// Serves new requests with these sources (secrets, schemes, targets) from now on.
    pub fn reload(&self, sources: &[Arc<Source>], trusted_proxies: Vec<Cidr>) {
        let live = Arc::new(Live::new(sources, trusted_proxies, &self.watch));
        *self.live.write().expect("no panics while holding the lock") = live;
    }

    /// Reads the body up to `max_body`, taking room in the budget for each chunk as it
    /// arrives, and no slower than `min_body_rate` after [`MIN_RATE_GRACE`].
    ///
    /// The chunks are kept as hyper hands them over and joined once, at the end, into one
    /// buffer of the body's real length. Nothing is sized by the declared length: a buffer
    /// reserved for it up front cost every head its declared size in address space, and
    /// ten floods of 1,000 unauthenticated 1 MiB bodies left the process at 572 MiB
    /// resident, growing with each; kept as they arrive (and with an allocator that gives
    /// freed pages back), it returns to 20-23 MiB (BENCHMARKS.md, "Bounded resources").
    async fn read_body(
        &self,
        mut body: Incoming,
    ) -> Result<(Bytes, Option<tokio::sync::OwnedSemaphorePermit>), Outcome> {
        let max = usize::try_from(self.max_body).unwrap_or(usize::MAX);
        // Frames as hyper hands them over, except that small ones are copied together:
        // a body sent as a million one-byte chunks would otherwise hold a million entries
        // (and the read buffers they point into) for a million bytes of budget.
        let mut chunks: Vec<Bytes> = Vec::new();
        let mut small = bytes::BytesMut::new();
        let mut received = 0usize;
        let mut room: Option<tokio::sync::OwnedSemaphorePermit> = None;
        let started = tokio::time::Instant::now();
        loop {
            let frame = match self.min_body_rate {
                0 => body.frame().await,
                rate => {
                    // By then the body must have averaged `rate` since its grace ended.
                    let due = Duration::from_secs_f64((received as f64 + 1.0) / rate as f64);
                    tokio::time::timeout_at(started + MIN_RATE_GRACE + due, body.frame())
                        .await
                        .map_err(|_| Outcome::TooSlow)?
                }
            };
            let Some(frame) = frame else { break };
            let Ok(data) = frame.map_err(|_| Outcome::BadBody)?.into_data() else {
                continue; // trailers carry nothing we keep
            };
            if received + data.len() > max {
                return Err(Outcome::TooLarge);
            }
            let more = self
                .budget
                .take(data.len())
                .await
                .ok_or(Outcome::Overloaded)?;
            match &mut room {
                Some(r) => r.merge(more),
                None => room = Some(more),
            }
            received += data.len();
            if data.len() >= SMALL_FRAME {
                if !small.is_empty() {
                    chunks.push(small.split().freeze());
                }
                chunks.push(data);
            } else {
                small.extend_from_slice(&data);
                if small.len() >= SMALL_FRAME {
                    chunks.push(small.split().freeze());
                }
            }
        }
        if !small.is_empty() {
            chunks.push(small.freeze());
        }
        let body = match chunks.len() {
            0 => Bytes::new(),
            1 => chunks.swap_remove(0),
            _ => {
                let mut whole = bytes::BytesMut::with_capacity(received);
                for chunk in chunks {
                    whole.extend_from_slice(&chunk);
                }
                whole.freeze()
            }
        };
        Ok((body, room))
    }

    /// Stores a secret a handshake handed over, if the source's window is open; only then
    /// may the handshake be answered.
    async fn learn(
        &self,
        source: &SourceState,
        secret: &Secret,
        client: IpAddr,
    ) -> Result<(), Outcome> {
        let (name, bytes, remote) = (
            source.name.to_string(),
            secret.expose().to_vec(),
            client.to_string(),
        );
        let stored = self
            .store
            .change(move |db, now| store::learnt::learn(db, &name, &bytes, &remote, now))
            .await
            .map_err(|e| match e.downcast::<store::WriteError>() {
                Ok(e) => e,
                Err(e) => store::WriteError::CommitFailed(format!("{e:#}")),
            });
        match stored {
            Ok(true) => {
                tracing::warn!(source = %source.name, %client,
                    "learnt the source's secret from its handshake; the window is closed");
                self.learnt
                    .write()
                    .expect("no panics while holding the lock")
                    .insert(source.name.to_string(), secret.clone());
                Ok(())
            }
            Ok(false) => {
                self.metrics
                    .signature_failure(&source.name, Reject::NotArmed.reason());
                Err(Outcome::Rejected(Reject::NotArmed))
            }
            Err(e) => Err(Outcome::Unavailable(e)),
        }
    }

    /// With replicas on PostgreSQL, a secret another replica learnt since this one read
    /// them: read again when a request fails to verify, at most every [`LEARNT_RECHECK`] per
    /// source (forged requests cost one short read per interval), and kept when it changed.
    async fn learnt_elsewhere(
        &self,
        source: &SourceState,
        known: Option<&Secret>,
    ) -> Option<Secret> {
        if !self.store.shared() {
            return None; // nobody else writes this inbox: nobody else learns
        }
        {
            let mut checked = self
                .learnt_checked
                .lock()
                .expect("no panics while holding it");
            let now = std::time::Instant::now();
            if checked
                .get(&*source.name)
                .is_some_and(|at| now.duration_since(*at) < LEARNT_RECHECK)
            {
                return None;
            }
            checked.insert(source.name.to_string(), now);
        }
        let name = source.name.to_string();
        let stored = self
            .store
            .read(move |db| Ok(store::learnt::secret(db, &name)?))
            .await;
        let secret = match stored {
            Ok(Some(bytes)) => Secret::new(bytes),
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!(source = %source.name, error = %format!("{e:#}"),
                    "could not read the secret learnt by another replica");
                return None;
            }
        };
        if known.is_some_and(|k| k.expose() == secret.expose()) {
            return None;
        }
        tracing::info!(source = %source.name, "using the secret another replica learnt");
        self.learnt
            .write()
            .expect("no panics while holding the lock")
            .insert(source.name.to_string(), secret.clone());
        Some(secret)
    }

    async fn receive(
        &self,
        source: &SourceState,
        client: IpAddr,
        unnamed: bool,
        req: Request<Incoming>,
    ) -> (Outcome, Option<String>) {
        // Before anything of the request is read past its head.
        if let Some(allow_from) = &source.config.allow_from {
            if unnamed {
                return (Outcome::Forbidden, None);
            }
            match self.allow.check(allow_from, client) {
                allow::Allowed::Yes => {}
                allow::Allowed::No => return (Outcome::Forbidden, None),
                allow::Allowed::NoList(provider) => return (Outcome::NoAllowList(provider), None),
            }
        }
        let (parts, body) = req.into_parts();
        // A declared length over the limit is refused before a single body byte is read.
        let declared = parts
            .headers
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > self.max_body) {
            return (Outcome::TooLarge, None);
        }
        // `room` is the body's share of the budget; it goes with the body into the event,
        // and is given back when the last of the two is dropped.
        let (body, room) = match tokio::time::timeout(self.body_timeout, self.read_body(body)).await
        {
            Err(_) => return (Outcome::BodyTimeout, None),
            Ok(Err(outcome)) => return (outcome, None),
            Ok(Ok(read)) => read,
        };
        // Until here the connection could be closed for room like an idle one; from here
        // on, through the commit and the answer, it is not.
        if let Some(read) = parts.extensions.get::<listener::BodyRead>()
            && !read.whole()
        {
            return (Outcome::Overloaded, None);
        }

        let input = Input {
            method: &parts.method,
            path: parts.uri.path(),
            query: parts.uri.query(),
            headers: &parts.headers,
            body: &body,
            now: clock::unix_now(),
        };
        let scheme = &source.config.scheme;
        let learnt = if scheme.provider().learns_secret {
            self.learnt
                .read()
                .expect("no panics while holding the lock")
                .get(&*source.name)
                .cloned()
        } else {
            None
        };
        // A key the request names (SNS's certificate), fetched once its URL was checked.
        let fetched = match scheme.verifier().key_url(&input) {
            Ok(None) => None,
            Ok(Some(url)) => {
                let now = input.now;
                match self
                    .fetcher
                    .key(&url, |doc| scheme.verifier().parse_key(doc, now))
                    .await
                {
                    Ok(key) => Some(key),
                    Err(e) => return (Outcome::KeyUnavailable(e), None),
                }
            }
            Err(reject) => {
                self.metrics
                    .signature_failure(&source.name, reject.reason());
                return (Outcome::Rejected(reject), None);
            }
        };
        let mut verdict = scheme.verify_with(&input, learnt.as_ref(), fetched.as_deref());
        if verdict.is_err()
            && scheme.provider().learns_secret
            && let Some(newer) = self.learnt_elsewhere(source, learnt.as_ref()).await
        {
            verdict = scheme.verify_with(&input, Some(&newer), fetched.as_deref());
        }
        let identity = match verdict {
            Ok(Verdict::Event(identity)) => identity,
            Ok(Verdict::Handshake(handshake)) => {
                match &handshake.action {
                    None => {}
                    Some(Action::Learn(Learnt(secret))) => {
                        if let Err(outcome) = self.learn(source, secret, client).await {
                            return (outcome, None);
                        }
                    }
                    Some(Action::Confirm(url)) => match self.fetcher.get(url).await {
                        Ok(_) => tracing::warn!(source = %source.name, %client, url,
                            "confirmed the subscription the provider asked for"),
                        Err(e) => return (Outcome::KeyUnavailable(e), None),
                    },
                }
                self.metrics.handshake(&source.name, handshake.kind);
                return (Outcome::Handshake(handshake), None);
            }
            Err(reject) => {
                if reject.is_auth() {
                    self.metrics
                        .signature_failure(&source.name, reject.reason());
                }
                return (Outcome::Rejected(reject), None);
            }
        };

        // Decided now, while the body is at hand; sent only once the event is committed.
        let reply = scheme.verifier().stored_reply(&input);
        let event_id = identity.event_id.clone();
        let provider_time = identity.provider_time;
        // A retry of an event committed in the last minute, with the same bytes: answered
        // from memory (see `recent`), before any of the event's row is built (its headers
        // as JSON, its deliveries' keys, its order key); anything else goes to the store.
        let body = crate::event::Hashed::new(body);
        let digest = *body.digest();
        let seen = recent::key(&source.name, &source.account, &event_id);
        let ttl = source.config.keep_identity / 2;
        if self
            .recent
            .is_duplicate(&seen, &digest, ttl, Instant::now())
        {
            return (Outcome::Duplicate(reply), Some(event_id));
        }
        let headers = headers_json(&parts.headers, scheme.verifier().secret_headers());
        let mut event = crate::event::new_event(
            &source.config,
            (source.name.clone(), source.account.clone()),
            identity,
            body,
            headers,
            client.to_string(),
            Origin::Webhook,
        );
        event.memory = room;
        let stored = self.store.ingest(event).await;
        if let Ok(Stored::New | Stored::Duplicate) = &stored {
            self.recent.confirmed(seen, digest, Instant::now());
        }
        let outcome = match stored {
            Ok(Stored::New) => {
                // The commit has just returned: this is the durable receipt, to the clock's
                // precision. The signed time is whole unix seconds (what most providers sign,
                // and all the schemes keep), so the lag reads up to a second longer than it
                // was, never shorter; a provider clock ahead of ours reads 0.
                let committed = SystemTime::now();
                if let Some(signed) = provider_time {
                    let lag = clock::since_unix(signed, committed);
                    self.metrics.receipt_lag_seconds.observe(lag.as_secs_f64());
                }
                self.metrics.event_accepted(&source.name, committed);
                Outcome::Accepted(reply)
            }
            Ok(Stored::Duplicate) => Outcome::Duplicate(reply),
            Ok(Stored::Conflict) => Outcome::Conflict(source.config.on_conflict),
            Err(e) => Outcome::Unavailable(e),
        };
        (outcome, Some(event_id))
    }
}

impl listener::Handler for Receiver {
    const EVICTS_UNREAD_BODIES: bool = true;

    async fn handle(&self, req: Request<Incoming>, peer: SocketAddr) -> Response<Full<Bytes>> {
        let started = Instant::now();
        let live = self
            .live
            .read()
            .expect("no panics while holding the lock")
            .clone();
        let Some(source) = req
            .uri()
            .path()
            .strip_prefix(HOOKS_PREFIX)
            .and_then(|name| live.sources.get(name))
        else {
            return Outcome::NotFound.response();
        };
        let client = proxy::client(peer.ip(), req.headers(), &live.trusted_proxies);
        // A trusted proxy that named no client (no `X-Forwarded-For`, or only proxies in
        // it): the sender is unknown, and `allow_from` must not take it for the proxy.
        let unnamed = live.trusted_proxies.iter().any(|p| p.contains(client));
        let methods = source.config.scheme.verifier().methods();
        let method = req.method().clone();
        let (outcome, event_id) = if methods.contains(&method) {
            self.receive(source, client, unnamed, req).await
        } else {
            (Outcome::MethodNotAllowed(methods), None)
        };
        let status = outcome.status();
        self.metrics.request(&source.name, outcome.label());
        // What a provider would see as "not received" opens a run; anything the inbox took
        // (a conflict included: it is quarantined, not lost) ends it.
        match &outcome {
            Outcome::Accepted(_) | Outcome::Duplicate(_) | Outcome::Conflict(_) => {
                source.watch.accepted();
            }
            // A signature or a time that does not match: what a rotated secret or a wrong
            // clock looks like. A request without the scheme's headers is not the provider
            // (anyone can send one), so it opens no run.
            Outcome::Rejected(
                Reject::NoMatch | Reject::TooOld | Reject::TooNew | Reject::BadToken,
            ) => source.watch.refused(401),
            Outcome::Unavailable(_)
            | Outcome::KeyUnavailable(_)
            | Outcome::Overloaded
            | Outcome::NoAllowList(_) => {
                source.watch.refused(503);
            }
            _ => {}
        }
        let event_id = event_id.as_deref().unwrap_or("-");
        let duration_ms = (started.elapsed().as_secs_f64() * 1e6).round() / 1e3;
        // A refusal is counted above; its line is the first of its source and reason in a
        // minute, or a part of the summary (`refusals`).
        let reason = match &outcome {
            Outcome::Rejected(reject) => Some(reject.reason()),
            Outcome::TooLarge
            | Outcome::BodyTimeout
            | Outcome::TooSlow
            | Outcome::BadBody
            | Outcome::Overloaded
            | Outcome::Forbidden
            | Outcome::NoAllowList(_)
            | Outcome::MethodNotAllowed(_) => Some(outcome.label()),
            _ => None,
        };
        if let Some(reason) = reason
            && !self.refusals.first(&source.name, reason, Instant::now())
        {
            return outcome.response();
        }
        match &outcome {
            Outcome::Rejected(reject) => tracing::info!(
                source = %source.name, %client, outcome = outcome.label(), status = status.as_u16(),
                reason = reject.reason(), detail = %reject, duration_ms, "request refused"),
            Outcome::Conflict(_) => tracing::warn!(
                source = %source.name, event_id, %client, outcome = "conflict", status = status.as_u16(),
                duration_ms, "same event id with different bytes: quarantined in conflicts, original untouched"),
            Outcome::KeyUnavailable(e) => tracing::warn!(
                source = %source.name, %client, outcome = "unavailable", status = status.as_u16(),
                error = %e, duration_ms, "a key the request names, or a confirmation it asks for, \
                could not be fetched; answered 503 so the provider retries"),
            Outcome::NoAllowList(provider) => tracing::warn!(
                source = %source.name, %client, provider, outcome = "unavailable", status = status.as_u16(),
                duration_ms, "no list of the provider's webhook addresses has been fetched yet; \
                answered 503 so the provider retries"),
            Outcome::Forbidden if unnamed => tracing::info!(
                source = %source.name, proxy = %client, outcome = outcome.label(), status = status.as_u16(),
                duration_ms, "request refused: a trusted proxy sent it without naming its client \
                in X-Forwarded-For, so allow_from cannot decide"),
            Outcome::MethodNotAllowed(methods) => tracing::info!(
                source = %source.name, %client, %method, outcome = outcome.label(), status = status.as_u16(),
                allowed = ?methods, duration_ms, "request refused: the source's scheme takes no such method"),
            Outcome::Unavailable(e) => tracing::warn!(
                source = %source.name, event_id, %client, outcome = "unavailable", status = status.as_u16(),
                error = %e, duration_ms, "not stored; answered 503 so the provider retries"),
            // Stored and duplicate events are in the inbox already; at info they would cost
            // a syscall per request and, past journald's default rate limit (10,000 lines
            // per 30 s), push the lines that matter out of the journal.
            Outcome::Accepted(_) | Outcome::Duplicate(_) => tracing::debug!(
                source = %source.name, event_id, %client, outcome = outcome.label(), status = status.as_u16(),
                duration_ms, "request"),
            _ => tracing::info!(
                source = %source.name, event_id, %client, outcome = outcome.label(), status = status.as_u16(),
                duration_ms, "request"),
        }
        outcome.response()
    }
}

/// The request headers as JSON `[[name, value], …]`, in arrival order, without credentials.
/// A value that is not UTF-8 is stored lossily; headers are informational (the body is the
/// signed, exact payload).
fn headers_json(headers: &HeaderMap, secret_headers: &[HeaderName]) -> String {
    let pairs: Vec<(&str, std::borrow::Cow<'_, str>)> = headers
        .iter()
        .filter(|(name, _)| {
            !CREDENTIAL_HEADERS.contains(&name.as_str()) && !secret_headers.contains(name)
        })
        .map(|(name, value)| (name.as_str(), String::from_utf8_lossy(value.as_bytes())))
        .collect();
    serde_json::to_string(&pairs).expect("strings always serialise")
}
