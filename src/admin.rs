//! The admin listener: `/metrics` (Prometheus text), `/healthz` (the process answers),
//! `/readyz` (the store commits and the writer drains its queue), and everything else is the
//! web inbox ([`crate::web`]). Local by default; it is for the operator, their scraper and
//! the load balancer, never for providers.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::CONTENT_TYPE;
use hyper::http::{Method, StatusCode};
use hyper::{Request, Response};

use crate::deliver;
use crate::metrics::{BACKLOG_STATES, DELIVERY_STATES, Metrics, StateLabels};
use crate::receive::listener::Handler;
use crate::store::{Gauges, Store};

/// How long `/readyz` waits for the writer to drain its queue before calling it stuck.
const READY_PING_TIMEOUT: Duration = Duration::from_secs(2);

/// How often a scrape recounts the delivered and superseded rows. They pile up until
/// retention takes them, and counting them walks every one (70–80 ms a million on SQLite, a
/// scan on PostgreSQL), where the backlog's states are a short stretch of an index.
const SETTLED_RECOUNT: Duration = Duration::from_secs(60);

pub struct Admin {
    pub metrics: Arc<Metrics>,
    pub store: Store,
    pub delivery: Arc<deliver::Health>,
    /// The memory budget for request bodies, for its gauge.
    pub budget: Arc<crate::receive::BodyBudget>,
    /// With ACME: the certificate served, or why there is none yet.
    pub certificates: Option<Arc<crate::receive::tls::Certificates>>,
    pub web: Arc<crate::web::Web>,
    /// When a scrape last set out to count every delivery state; none before the first.
    pub settled_counted: Mutex<Option<Instant>>,
}

impl Admin {
    /// Refreshes the gauges that are read from the inbox. A failure leaves the last values
    /// and is logged: a scrape must not fail because a reader is briefly busy.
    async fn refresh(&self) {
        // Taken before counting, so that scrapes at the same moment do not all walk every
        // row, and one whose count fails waits its minute too.
        let mut settled = {
            let mut at = self
                .settled_counted
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let due = at.is_none_or(|at| at.elapsed() >= SETTLED_RECOUNT);
            if due {
                *at = Some(Instant::now());
            }
            due
        };
        let mut gauges = self.store.gauges(settled).await;
        if settled && let Err(e) = &gauges {
            // A walk of every row that fails (a statement timeout on a huge table) must
            // not leave the backlog's states, which the alerts read, unread.
            tracing::warn!(error = %e, "counting every delivery state for /metrics; counting the backlog's");
            settled = false;
            gauges = self.store.gauges(false).await;
        }
        match gauges {
            Ok(Gauges {
                counts,
                oldest_pending: oldest,
                paused,
                pages,
            }) => {
                for (source, target) in self.metrics.configured_targets() {
                    let on = paused
                        .iter()
                        .any(|p| p.source == source && p.target == target);
                    self.metrics.set_target_paused(&source, &target, on);
                }
                if let Some((free, pages)) = pages {
                    self.metrics.inbox_pages.set(pages);
                    self.metrics.inbox_free_pages.set(free);
                }
                let age = oldest
                    .and_then(|t| humantime::parse_rfc3339(&t).ok())
                    .and_then(|t| SystemTime::now().duration_since(t).ok())
                    .unwrap_or_default();
                self.metrics.oldest_pending_seconds.set(age.as_secs_f64());
                let counted = DELIVERY_STATES
                    .into_iter()
                    .filter(|s| settled || BACKLOG_STATES.contains(s));
                for state in counted {
                    let n = counts
                        .iter()
                        .find(|(s, _)| s == state)
                        .map_or(0, |(_, n)| *n);
                    self.metrics
                        .deliveries
                        .get_or_create(&StateLabels { state })
                        .set(n);
                }
            }
            Err(e) => tracing::warn!(error = %e, "reading delivery counts for /metrics"),
        }
        self.metrics
            .body_bytes_in_memory
            .set(i64::try_from(self.budget.in_use()).unwrap_or(i64::MAX));
        if let Some(wal_len) = self.store.wal_bytes() {
            self.metrics
                .wal_bytes
                .set(i64::try_from(wal_len).unwrap_or(i64::MAX));
        }
    }
}

impl Handler for Admin {
    async fn handle(&self, req: Request<Incoming>, peer: SocketAddr) -> Response<Full<Bytes>> {
        crate::web::secure(self.answer(req, peer).await)
    }
}

impl Admin {
    async fn answer(&self, req: Request<Incoming>, peer: SocketAddr) -> Response<Full<Bytes>> {
        // Every path, not only the web inbox's: /metrics names the sources and targets.
        // A request with no Host at all (an HTTP/1.0 health check) is not from a browser,
        // which always sends one, so DNS rebinding cannot make it: metrics and health
        // answer it; the web inbox, whose actions compare Origin with Host, does not.
        let own = matches!(req.uri().path(), "/metrics" | "/healthz" | "/readyz");
        let no_host =
            req.headers().get(hyper::header::HOST).is_none() && req.uri().authority().is_none();
        if !(own && no_host) && self.web.allowed_host(&req).is_none() {
            return crate::web::misdirected();
        }
        if !own {
            return self.web.handle(req, peer).await;
        }
        if req.method() != Method::GET {
            return text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
        }
        match req.uri().path() {
            "/metrics" => {
                self.refresh().await;
                Response::builder()
                    .header(
                        CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )
                    .body(Full::new(self.metrics.encode().into()))
                    .expect("static header values are valid")
            }
            "/healthz" => text(StatusCode::OK, "ok\n"),
            "/readyz" => {
                let drains = tokio::time::timeout(READY_PING_TIMEOUT, self.store.ping())
                    .await
                    .is_ok_and(|r| r.is_ok());
                let commits = self.store.health().last_commit_ok.load(Ordering::Relaxed);
                if self.delivery.draining.load(Ordering::Relaxed) {
                    return text(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "not ready: shutting down\n",
                    );
                }
                if let Some(why) = self.certificates.as_ref().and_then(|c| c.not_ready()) {
                    return Response::builder()
                        .status(StatusCode::SERVICE_UNAVAILABLE)
                        .header(CONTENT_TYPE, "text/plain; charset=utf-8")
                        .body(Full::new(format!("not ready: {why}\n").into()))
                        .expect("static header values are valid");
                }
                if let Some(target) = self.delivery.stuck() {
                    return Response::builder()
                        .status(StatusCode::SERVICE_UNAVAILABLE)
                        .header(CONTENT_TYPE, "text/plain; charset=utf-8")
                        .body(Full::new(
                            format!("not ready: the delivery loop of {target} is stuck\n").into(),
                        ))
                        .expect("static header values are valid");
                }
                match (drains, commits) {
                    (true, true) => text(StatusCode::OK, "ready\n"),
                    (false, _) => text(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "not ready: the writer is not draining its queue\n",
                    ),
                    (true, false) => text(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "not ready: the last commit failed\n",
                    ),
                }
            }
            _ => text(StatusCode::NOT_FOUND, "not found\n"),
        }
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header(CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .expect("static header values are valid")
}
