//! Every metric hookinbox exports, in one registry that the admin listener encodes.
//!
//! Counter names get `_total` appended by prometheus-client. Labels are bounded: sources and
//! reasons come from the config and from fixed enums, never from request data.
//!
//! Every family labelled by source or target has a series for each configured one from the
//! first scrape on, at zero ([`Metrics::configure`], at start-up and after each reload): a
//! series that appears only with its first increment hides that increment from `rate()` and
//! `increase()`, and an alert on "no rejections yet" has nothing to compare against.
//! Handshake kinds are not: they depend on the provider, and a handshake is not something to
//! alert on.

mod process;

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::SystemTime;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::config::Source;

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

/// The states a backlog is made of, and what an operator acts on: counted at every scrape.
/// The others (delivered, superseded) only pile up until retention takes them.
pub const BACKLOG_STATES: [&str; 3] = ["pending", "in_flight", "dead"];

/// Every word an attempt can lead to, as `attempts.outcome` stores it (the store's `Next::word`).
pub const ATTEMPT_RESULTS: [&str; 3] = ["delivered", "retry", "dead"];

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

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct TargetLabels {
    pub source: String,
    pub target: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct SourceLabels {
    pub source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: &'static str,
}

/// A gauge that holds a float (a timestamp, an age).
pub type FloatGauge = Gauge<f64, AtomicU64>;

/// The sources and targets [`Metrics::configure`] was last given.
#[derive(Default)]
struct Configured {
    sources: BTreeSet<SourceLabels>,
    targets: BTreeSet<TargetLabels>,
    /// Sources with `recover`, and their provider.
    recovering: BTreeSet<(String, &'static str)>,
    /// The providers whose address lists sources allow.
    allow_lists: BTreeSet<AllowListLabels>,
}

pub struct Metrics {
    /// The root has no prefix, so that the process metrics keep the names every Prometheus
    /// client library gives them; hookinbox's own families are in its `hookinbox`
    /// sub-registry.
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
    pub oldest_pending_seconds: FloatGauge,
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
    /// The state of each alert condition, as the alerting code last decided it. Set through
    /// the setters below, which ignore a source or target that is not configured.
    pub source_silent: Family<SourceLabels, Gauge>,
    pub source_rejections_rising: Family<SourceLabels, Gauge>,
    pub target_failing: Family<TargetLabels, Gauge>,
    pub target_paused: Family<TargetLabels, Gauge>,
    pub alerts_active: Gauge,
    /// Unix seconds of each source's last accepted event; 0 until its first.
    pub source_last_event_timestamp_seconds: Family<SourceLabels, FloatGauge>,
    /// Windows in which a source was not receiving, by kind (`down`, `rejecting`).
    pub gaps: Family<GapLabels, Counter>,
    /// Events recovered from a provider's API: redeliveries asked for, events stored.
    pub recovered_events: Family<RecoveredLabels, Counter>,
    /// Recoveries (or parts of them: one redelivery) that failed.
    pub recovery_errors: Family<ProviderLabels, Counter>,
    /// Calls to providers' APIs, by result (`ok`, `rate_limited`, `error`).
    pub recovery_api_requests: Family<ApiLabels, Counter>,
    /// Unix seconds of the last fetch of each provider's address list that sources allow
    /// (`allow_from`), as kept in the inbox; 0 while none was ever had.
    pub allow_list_updated: Family<AllowListLabels, FloatGauge>,
    /// Fetches of those lists, by result (`ok`, `error`).
    pub allow_list_refreshes: Family<AllowRefreshLabels, Counter>,
    /// Unix seconds at which the certificate the public listener serves expires; 0 without
    /// TLS, or with ACME before the first certificate.
    pub certificate_expiry: Gauge,
    /// Certificates ordered by ACME (the first one and each renewal), by result
    /// ([`RENEWAL_RESULTS`]).
    pub certificate_renewals: Family<ResultLabels, Counter>,
    configured: Mutex<Configured>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct AllowListLabels {
    pub provider: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AllowRefreshLabels {
    pub provider: &'static str,
    /// `ok` or `error`.
    pub result: &'static str,
}

/// The results of `hookinbox_certificate_renewals_total`.
pub const RENEWAL_RESULTS: [&str; 2] = ["ok", "error"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: &'static str,
}

/// The kinds of `hookinbox_gaps_total`.
pub const GAP_KINDS: [&str; 2] = ["down", "rejecting"];
/// How an event was recovered (`hookinbox_recovered_events_total`).
pub const RECOVERED_HOW: [&str; 2] = ["redelivery_requested", "stored"];
/// The results of `hookinbox_recovery_api_requests_total`.
pub const API_RESULTS: [&str; 3] = ["ok", "rate_limited", "error"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GapLabels {
    pub source: String,
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RecoveredLabels {
    pub source: String,
    pub provider: &'static str,
    pub how: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct ProviderLabels {
    pub source: String,
    pub provider: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiLabels {
    pub source: String,
    pub provider: &'static str,
    pub result: &'static str,
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut root = Registry::default();
        let registry = root.sub_registry_with_prefix("hookinbox");
        let build_info = Family::<BuildLabels, Gauge>::default();
        registry.register(
            "build_info",
            "Always 1; the version label says which hookinbox is running",
            build_info.clone(),
        );
        build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
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
        let oldest_pending_seconds = FloatGauge::default();
        registry.register(
            "oldest_pending_seconds",
            "Age of the oldest delivery still pending or in flight, read at each scrape",
            oldest_pending_seconds.clone(),
        );
        let deliveries = Family::<StateLabels, Gauge>::default();
        registry.register(
            "deliveries",
            "Delivery rows by state, read from the inbox: pending, in_flight and dead at each scrape, delivered and superseded at most once a minute",
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
        let source_silent = Family::<SourceLabels, Gauge>::default();
        registry.register(
            "source_silent",
            "1 while the source has had no verified event for longer than its expect_every",
            source_silent.clone(),
        );
        let source_rejections_rising = Family::<SourceLabels, Gauge>::default();
        registry.register(
            "source_rejections_rising",
            "1 while the source's signature rejections are rising",
            source_rejections_rising.clone(),
        );
        let target_failing = Family::<TargetLabels, Gauge>::default();
        registry.register(
            "target_failing",
            "1 while the target's share of failed attempts, or the age of its oldest pending \
             delivery, is over its threshold",
            target_failing.clone(),
        );
        let target_paused = Family::<TargetLabels, Gauge>::default();
        registry.register(
            "target_paused",
            "1 while the operator has paused deliveries to the target",
            target_paused.clone(),
        );
        let alerts_active = Gauge::default();
        registry.register(
            "alerts_active",
            "Alert conditions active now",
            alerts_active.clone(),
        );
        let source_last_event_timestamp_seconds = Family::<SourceLabels, FloatGauge>::default();
        registry.register(
            "source_last_event_timestamp_seconds",
            "Unix time of the source's last accepted (newly stored) event; 0 until the first \
             since start",
            source_last_event_timestamp_seconds.clone(),
        );
        let gaps = Family::<GapLabels, Counter>::default();
        registry.register(
            "gaps",
            "Windows in which a source was not receiving: serve down (counted at the next \
             start) or refusing every request (401, 503)",
            gaps.clone(),
        );
        let recovered_events = Family::<RecoveredLabels, Counter>::default();
        registry.register(
            "recovered_events",
            "Events recovered from a provider's API: redeliveries asked for (GitHub), events \
             fetched and stored (Stripe)",
            recovered_events.clone(),
        );
        let recovery_errors = Family::<ProviderLabels, Counter>::default();
        registry.register(
            "recovery_errors",
            "Recoveries that failed (the API refused, or could not be reached), and \
             redeliveries that could not be asked for",
            recovery_errors.clone(),
        );
        let recovery_api_requests = Family::<ApiLabels, Counter>::default();
        registry.register(
            "recovery_api_requests",
            "Calls to providers' APIs by recovery, by result",
            recovery_api_requests.clone(),
        );
        let allow_list_updated = Family::<AllowListLabels, FloatGauge>::default();
        registry.register(
            "allow_list_updated_timestamp_seconds",
            "Unix time the provider's list of webhook addresses (a source's allow_from) was \
             last fetched, as kept in the inbox; 0 while none has been",
            allow_list_updated.clone(),
        );
        let allow_list_refreshes = Family::<AllowRefreshLabels, Counter>::default();
        registry.register(
            "allow_list_refreshes",
            "Fetches of providers' lists of webhook addresses, by result (ok, error)",
            allow_list_refreshes.clone(),
        );
        let certificate_expiry = Gauge::default();
        registry.register(
            "certificate_expiry_timestamp_seconds",
            "Unix time at which the certificate the public listener serves expires; 0 \
             without TLS, or with ACME until the first certificate",
            certificate_expiry.clone(),
        );
        let certificate_renewals = Family::<ResultLabels, Counter>::default();
        registry.register(
            "certificate_renewals",
            "Certificates ordered by ACME, the first one included, by result (ok, error)",
            certificate_renewals.clone(),
        );
        root.register_collector(Box::new(process::Collector));
        Metrics {
            allow_list_updated,
            allow_list_refreshes,
            certificate_expiry,
            certificate_renewals,
            gaps,
            recovered_events,
            recovery_errors,
            recovery_api_requests,
            registry: root,
            source_silent,
            source_rejections_rising,
            target_failing,
            target_paused,
            alerts_active,
            source_last_event_timestamp_seconds,
            configured: Mutex::default(),
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

    /// Gives every configured source and target its series, at zero where it is new; a
    /// series that already counts keeps its value. Called at start-up and after each reload.
    /// The alert-state gauges of sources and targets no longer configured are removed, so
    /// that no alert outlives its source; their counters stay, frozen, as Prometheus expects
    /// of a counter. `outcomes` are the labels a request that reached a source may be
    /// counted under (the receive path's), each counted from zero for every source.
    pub fn configure(
        &self,
        sources: &[std::sync::Arc<Source>],
        alerts: &[crate::config::Target],
        outcomes: &[&'static str],
    ) {
        let configured = Configured {
            sources: sources
                .iter()
                .map(|s| SourceLabels {
                    source: s.name.clone(),
                })
                .collect(),
            targets: sources
                .iter()
                .flat_map(|s| {
                    s.targets.iter().map(|t| TargetLabels {
                        source: s.name.clone(),
                        target: t.name.clone(),
                    })
                })
                // The `[[alerts]]` targets are targets of the internal alerts source.
                .chain(alerts.iter().map(|t| TargetLabels {
                    source: crate::event::ALERT_SOURCE.to_owned(),
                    target: t.name.clone(),
                }))
                .collect(),
            recovering: sources
                .iter()
                .filter_map(|s| {
                    let r = s.recover.as_ref()?;
                    Some((s.name.clone(), r.api.provider()))
                })
                .collect(),
            allow_lists: sources
                .iter()
                .filter_map(|s| s.allow_from.as_ref())
                .flat_map(|a| &a.lists)
                .map(|l| AllowListLabels { provider: l.name() })
                .collect(),
        };
        let mut last = self
            .configured
            .lock()
            .expect("no panics while holding the lock");
        for gone in last.sources.difference(&configured.sources) {
            self.source_silent.remove(gone);
            self.source_rejections_rising.remove(gone);
            self.source_last_event_timestamp_seconds.remove(gone);
            for kind in GAP_KINDS {
                self.gaps.remove(&GapLabels {
                    source: gone.source.clone(),
                    kind,
                });
            }
        }
        for gone in last.allow_lists.difference(&configured.allow_lists) {
            self.allow_list_updated.remove(gone);
        }
        for labels in &configured.allow_lists {
            ensure(&self.allow_list_updated, labels);
            for result in ["ok", "error"] {
                ensure(
                    &self.allow_list_refreshes,
                    &AllowRefreshLabels {
                        provider: labels.provider,
                        result,
                    },
                );
            }
        }
        for gone in last.targets.difference(&configured.targets) {
            self.target_failing.remove(gone);
            self.target_paused.remove(gone);
        }
        for labels in &configured.sources {
            let source = &labels.source;
            for &outcome in outcomes {
                ensure(
                    &self.requests,
                    &RequestLabels {
                        source: source.clone(),
                        outcome,
                    },
                );
            }
            for reason in crate::scheme::Reject::AUTH_REASONS {
                ensure(
                    &self.signature_failures,
                    &FailureLabels {
                        source: source.clone(),
                        reason,
                    },
                );
            }
            ensure(&self.source_silent, labels);
            ensure(&self.source_rejections_rising, labels);
            ensure(&self.source_last_event_timestamp_seconds, labels);
            for kind in GAP_KINDS {
                ensure(
                    &self.gaps,
                    &GapLabels {
                        source: source.clone(),
                        kind,
                    },
                );
            }
        }
        for (source, provider) in &configured.recovering {
            for how in RECOVERED_HOW {
                ensure(
                    &self.recovered_events,
                    &RecoveredLabels {
                        source: source.clone(),
                        provider,
                        how,
                    },
                );
            }
            ensure(
                &self.recovery_errors,
                &ProviderLabels {
                    source: source.clone(),
                    provider,
                },
            );
            for result in API_RESULTS {
                ensure(
                    &self.recovery_api_requests,
                    &ApiLabels {
                        source: source.clone(),
                        provider,
                        result,
                    },
                );
            }
        }
        for labels in &configured.targets {
            for result in ATTEMPT_RESULTS {
                ensure(
                    &self.attempts,
                    &AttemptLabels {
                        source: labels.source.clone(),
                        target: labels.target.clone(),
                        result,
                    },
                );
            }
            ensure(&self.ambiguous_attempts, labels);
            ensure(&self.ambiguous_resolved, labels);
            ensure(&self.target_failing, labels);
            ensure(&self.target_paused, labels);
        }
        *last = configured;
    }

    /// No verified event from `source` for longer than its `expect_every`.
    pub fn set_source_silent(&self, source: &str, silent: bool) {
        set_flag(&self.source_silent, &source_labels(source), silent);
    }

    /// `source`'s signature rejections are rising.
    pub fn set_source_rejections_rising(&self, source: &str, rising: bool) {
        set_flag(
            &self.source_rejections_rising,
            &source_labels(source),
            rising,
        );
    }

    /// The target's failure share, or its oldest pending delivery's age, is over its
    /// threshold.
    pub fn set_target_failing(&self, source: &str, target: &str, failing: bool) {
        set_flag(
            &self.target_failing,
            &target_labels(source, target),
            failing,
        );
    }

    /// The operator paused deliveries to the target.
    /// The (source, target) pairs of the configuration last given to [`Metrics::configure`].
    pub fn configured_targets(&self) -> Vec<(String, String)> {
        self.configured
            .lock()
            .expect("no panics while holding the lock")
            .targets
            .iter()
            .map(|t| (t.source.clone(), t.target.clone()))
            .collect()
    }

    pub fn set_target_paused(&self, source: &str, target: &str, paused: bool) {
        set_flag(&self.target_paused, &target_labels(source, target), paused);
    }

    /// How many alert conditions are active now.
    pub fn set_alerts_active(&self, active: usize) {
        self.alerts_active
            .set(i64::try_from(active).unwrap_or(i64::MAX));
    }

    /// `source` accepted (newly stored) an event at `at`.
    pub fn event_accepted(&self, source: &str, at: SystemTime) {
        if let Some(gauge) = self
            .source_last_event_timestamp_seconds
            .get(&source_labels(source))
        {
            gauge.set(crate::clock::unix_f64(at));
        }
    }

    /// `provider`'s address list was fetched at `at` (now, or as the inbox kept it).
    pub fn allow_list_fetched(&self, provider: &'static str, at: SystemTime) {
        self.allow_list_updated
            .get_or_create(&AllowListLabels { provider })
            .set(crate::clock::unix_f64(at));
    }

    /// A fetch of `provider`'s address list ended.
    pub fn allow_list_refreshed(&self, provider: &'static str, ok: bool) {
        self.allow_list_refreshes
            .get_or_create(&AllowRefreshLabels {
                provider,
                result: if ok { "ok" } else { "error" },
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

fn source_labels(source: &str) -> SourceLabels {
    SourceLabels {
        source: source.to_owned(),
    }
}

fn target_labels(source: &str, target: &str) -> TargetLabels {
    TargetLabels {
        source: source.to_owned(),
        target: target.to_owned(),
    }
}

/// Makes sure the series exists: at zero if it is new, untouched if it counts already.
fn ensure<L, M, C>(family: &Family<L, M, C>, labels: &L)
where
    L: Clone + std::hash::Hash + Eq,
    C: prometheus_client::metrics::family::MetricConstructor<M>,
{
    drop(family.get_or_create(labels));
}

/// Sets a 0/1 gauge of a configured source or target; one that is not configured (a late
/// set for a source a reload removed) is ignored rather than brought back.
fn set_flag<L>(family: &Family<L, Gauge>, labels: &L, on: bool)
where
    L: Clone + std::hash::Hash + Eq,
{
    if let Some(gauge) = family.get(labels) {
        gauge.set(i64::from(on));
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}
