//! Every metric hookinbox exports, in one registry that the admin listener encodes.
//!
//! Counter names get `_total` appended by prometheus-client. Labels are bounded: sources and
//! reasons come from the config and from fixed enums, never from request data.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub source: String,
    /// accepted, duplicate, conflict, rejected, invalid, handshake, too_large, timeout,
    /// overloaded, unavailable.
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    pub source: String,
    /// A [`crate::scheme::Reject::reason`].
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HandshakeLabels {
    pub source: String,
    /// A [`crate::scheme::Handshake::kind`]: `url_verification`, `challenge`, `ping`, …
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    /// A delivery state as the inbox spells it.
    pub state: &'static str,
}

/// Every delivery state, so that a state that empties reads 0 rather than vanishing.
pub const DELIVERY_STATES: [&str; 5] = ["pending", "in_flight", "delivered", "dead", "superseded"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AttemptLabels {
    pub source: String,
    pub target: String,
    /// delivered, retry or dead: what the attempt led to.
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerLabels {
    pub listener: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TargetLabels {
    pub source: String,
    pub target: String,
}

pub struct Metrics {
    pub registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    pub signature_failures: Family<FailureLabels, Counter>,
    pub handshakes: Family<HandshakeLabels, Counter>,
    /// Events per committed transaction: how well group commit is sharing the fsync.
    pub writer_batch_size: Histogram,
    pub writer_commit_seconds: Histogram,
    pub writer_commit_failures: Counter,
    pub attempts: Family<AttemptLabels, Counter>,
    /// Attempts that timed out: the target may have acted without our hearing.
    pub ambiguous_attempts: Family<TargetLabels, Counter>,
    /// Deliveries that succeeded after such an attempt: the ambiguity is settled.
    pub ambiguous_resolved: Family<TargetLabels, Counter>,
    /// Provider's signed time to durable receipt, where the scheme signs a time.
    pub receipt_lag_seconds: Histogram,
    /// Durable receipt to the target's acceptance.
    pub delivery_lag_seconds: Histogram,
    /// Age of the oldest delivery not yet delivered, dead or superseded (at each scrape).
    pub oldest_pending_seconds: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// Read from the inbox at each scrape.
    pub deliveries: Family<StateLabels, Gauge>,
    pub wal_bytes: Gauge,
    /// Bytes of request bodies in memory now, against `server.body_budget`.
    pub body_bytes_in_memory: Gauge,
    /// Connections closed to make room for a new one, by listener ("public", "admin").
    pub closed_for_room: Family<ListenerLabels, Counter>,
    /// The inbox's pages, and how many of them are free (read at each scrape).
    pub inbox_pages: Gauge,
    pub inbox_free_pages: Gauge,
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("hookinbox");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "requests",
            "Webhook requests by source and outcome",
            requests.clone(),
        );
        let signature_failures = Family::<FailureLabels, Counter>::default();
        registry.register(
            "signature_failures",
            "Requests refused by signature or timestamp checks, by reason",
            signature_failures.clone(),
        );
        let handshakes = Family::<HandshakeLabels, Counter>::default();
        registry.register(
            "handshakes",
            "Provider handshakes answered (never stored), by source and kind",
            handshakes.clone(),
        );
        let writer_batch_size = Histogram::new(exponential_buckets(1.0, 2.0, 10));
        registry.register(
            "writer_batch_size",
            "Events committed per transaction (group commit)",
            writer_batch_size.clone(),
        );
        let writer_commit_seconds = Histogram::new(exponential_buckets(0.0005, 2.0, 14));
        registry.register(
            "writer_commit_seconds",
            "Time from BEGIN to the end of COMMIT (including the fsync) per batch",
            writer_commit_seconds.clone(),
        );
        let writer_commit_failures = Counter::default();
        registry.register(
            "writer_commit_failures",
            "Batches whose commit failed; every request in them was answered 503",
            writer_commit_failures.clone(),
        );
        let attempts = Family::<AttemptLabels, Counter>::default();
        registry.register(
            "attempts",
            "Delivery attempts by source, target and what they led to",
            attempts.clone(),
        );
        let ambiguous_attempts = Family::<TargetLabels, Counter>::default();
        registry.register(
            "ambiguous_attempts",
            "Attempts that timed out, so the target may have acted without our hearing",
            ambiguous_attempts.clone(),
        );
        let ambiguous_resolved = Family::<TargetLabels, Counter>::default();
        registry.register(
            "ambiguous_resolved",
            "Deliveries accepted after an earlier attempt of theirs timed out",
            ambiguous_resolved.clone(),
        );
        let receipt_lag_seconds = Histogram::new(exponential_buckets(0.25, 2.0, 14));
        registry.register(
            "receipt_lag_seconds",
            "From the provider's signed timestamp to the durable commit (clock skew included)",
            receipt_lag_seconds.clone(),
        );
        let delivery_lag_seconds = Histogram::new(exponential_buckets(0.005, 4.0, 14));
        registry.register(
            "delivery_lag_seconds",
            "From the durable commit to the target's acceptance",
            delivery_lag_seconds.clone(),
        );
        let oldest_pending_seconds = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        registry.register(
            "oldest_pending_seconds",
            "Age of the oldest delivery still pending or in flight, read at each scrape",
            oldest_pending_seconds.clone(),
        );
        let deliveries = Family::<StateLabels, Gauge>::default();
        registry.register(
            "deliveries",
            "Delivery rows by state, read from the inbox at each scrape",
            deliveries.clone(),
        );
        let wal_bytes = Gauge::default();
        registry.register(
            "wal_bytes",
            "Size of the inbox's write-ahead log; growth that never shrinks means a stuck reader",
            wal_bytes.clone(),
        );
        let inbox_pages = Gauge::default();
        registry.register(
            "inbox_pages",
            "Pages in the inbox file (4 KiB each by default), read at each scrape",
            inbox_pages.clone(),
        );
        let inbox_free_pages = Gauge::default();
        registry.register(
            "inbox_free_pages",
            "Free pages in the inbox file: reused by new events, and given back to the file \
             system by retention beyond a small reserve",
            inbox_free_pages.clone(),
        );
        let closed_for_room = Family::<ListenerLabels, Counter>::default();
        registry.register(
            "connections_closed_for_room",
            "Connections without a request in progress closed because every slot was taken \
             (slow or idle clients at max_connections)",
            closed_for_room.clone(),
        );
        let body_bytes_in_memory = Gauge::default();
        registry.register(
            "body_bytes_in_memory",
            "Bytes of request bodies held in memory now; at server.body_budget new bodies \
             wait, then get 503",
            body_bytes_in_memory.clone(),
        );
        Metrics {
            registry,
            body_bytes_in_memory,
            closed_for_room,
            inbox_pages,
            inbox_free_pages,
            attempts,
            ambiguous_attempts,
            ambiguous_resolved,
            receipt_lag_seconds,
            delivery_lag_seconds,
            oldest_pending_seconds,
            deliveries,
            wal_bytes,
            requests,
            signature_failures,
            handshakes,
            writer_batch_size,
            writer_commit_seconds,
            writer_commit_failures,
        }
    }

    pub fn request(&self, source: &str, outcome: &'static str) {
        self.requests
            .get_or_create(&RequestLabels {
                source: source.to_owned(),
                outcome,
            })
            .inc();
    }

    pub fn signature_failure(&self, source: &str, reason: &'static str) {
        self.signature_failures
            .get_or_create(&FailureLabels {
                source: source.to_owned(),
                reason,
            })
            .inc();
    }

    pub fn handshake(&self, source: &str, kind: &'static str) {
        self.handshakes
            .get_or_create(&HandshakeLabels {
                source: source.to_owned(),
                kind,
            })
            .inc();
    }

    /// The registry in the Prometheus/OpenMetrics text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}
