//! Conditions an operator should hear about without looking: a source gone silent, a
//! target failing, signature rejections rising, new conflicts, new dead deliveries, a
//! provider's address list that no longer refreshes.
//!
//! One task ([`run`]) judges them every few seconds from the inbox (through the read pool,
//! with the same queries as the web inbox's overview, [`crate::store::stats`]) and from the
//! rejection counters in [`Metrics`]. A condition that starts or ends is logged, shown on
//! the [`Board`] (the web inbox's banners, the `/metrics` gauges), and, with `[[alerts]]`
//! configured, committed to the inbox as an event of the internal source [`SOURCE`], whose
//! targets are the alert targets: the delivery worker forwards it like any webhook, retried
//! under one idempotency key until accepted, so an alert survives a restart.
//!
//! Invariant: nothing here touches the public listener or readiness. An alert is news for
//! the operator; a failing app or a silent provider never makes hookinbox answer 503.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;
use tokio::sync::watch;

use crate::clock;
use crate::config::{Source, Target};
use crate::metrics::{FailureLabels, Metrics};
use crate::receive::allow;
use crate::store::Db;
use crate::store::{self, NewEvent, Store, stats};

/// The internal source alerts are stored and delivered under.
pub const SOURCE: &str = crate::event::ALERT_SOURCE;

/// The window a failure share and a rejection count are judged over: long enough that a
/// few attempts make a share, short enough that a recovery ends the alert soon.
pub const RECENT: Duration = Duration::from_secs(10 * 60);
/// A failure share needs this many attempts in [`RECENT`]: one failed retry is not news.
pub const MIN_ATTEMPTS: i64 = 3;
/// Signature rejections in [`RECENT`] that make a source's rejections *rising*: a rotated
/// secret rejects every delivery, an attacker probes many times; a stray bad request is
/// neither.
pub const REJECTIONS: u64 = 10;
/// How long new conflicts and new dead deliveries stay an active condition after the last
/// one: the banner stays up for an hour, and the notification goes out once.
pub const NEWS_FOR: Duration = Duration::from_secs(3600);
/// A list a source allows that has not been had this long after the start is news: the
/// first fetch, and two retries, have failed, and the source answers 503.
pub const NEVER_FETCHED_AFTER: Duration = Duration::from_secs(120);
/// How often conditions are judged at most and at least. Between, a quarter of the
/// shortest `expect_every` or `alert_pending_age`, so a short threshold is noticed soon.
const JUDGE_MAX: Duration = Duration::from_secs(15);
const JUDGE_MIN: Duration = Duration::from_secs(1);

/// What kind of trouble a condition is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AlertKind {
    /// No new event from a source for longer than its `expect_every`.
    SourceSilent,
    /// A target's failure share or oldest pending delivery over its threshold.
    TargetFailing,
    /// Signature rejections on a source: [`REJECTIONS`] within [`RECENT`].
    RejectionsRising,
    /// Conflicts (same id, different bytes) within [`NEWS_FOR`].
    NewConflicts,
    /// Deliveries that died within [`NEWS_FOR`].
    NewDeadDeliveries,
    /// A provider's address list that a source allows was last fetched longer than
    /// [`allow::STALE_AFTER`] ago, or never since [`NEVER_FETCHED_AFTER`].
    AllowListStale,
}

impl AlertKind {
    const ALL: [AlertKind; 6] = [
        AlertKind::SourceSilent,
        AlertKind::TargetFailing,
        AlertKind::RejectionsRising,
        AlertKind::NewConflicts,
        AlertKind::NewDeadDeliveries,
        AlertKind::AllowListStale,
    ];

    fn from_word(word: &str) -> Option<AlertKind> {
        AlertKind::ALL.into_iter().find(|k| k.word() == word)
    }

    /// The word in logs, metrics and notifications.
    pub fn word(self) -> &'static str {
        match self {
            AlertKind::SourceSilent => "source_silent",
            AlertKind::TargetFailing => "target_failing",
            AlertKind::RejectionsRising => "rejections_rising",
            AlertKind::NewConflicts => "new_conflicts",
            AlertKind::NewDeadDeliveries => "new_dead_deliveries",
            AlertKind::AllowListStale => "allow_list_stale",
        }
    }
}

/// One active condition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Condition {
    pub kind: AlertKind,
    pub source: String,
    /// For target conditions.
    pub target: Option<String>,
    /// When it began (inbox time text).
    pub since: String,
    /// What is wrong, in words, with what to do.
    pub detail: String,
}

impl Condition {
    /// `source` or `source/target`.
    pub fn subject(&self) -> String {
        match &self.target {
            Some(t) => format!("{}/{t}", self.source),
            None => self.source.clone(),
        }
    }

    fn same(&self, other: &Condition) -> bool {
        self.kind == other.kind && self.source == other.source && self.target == other.target
    }
}

/// What the thresholds are, from the configuration (replaced on reload).
#[derive(Debug, Default, Clone)]
struct Rules {
    sources: Vec<(String, Option<Duration>)>,
    /// (source, target, failure share, pending age).
    targets: Vec<(String, String, f64, Duration)>,
    /// Whether any `[[alerts]]` target is configured, and their names.
    alert_targets: Vec<String>,
    /// The providers' address lists each source allows.
    allow_lists: Vec<(String, Vec<&'static str>)>,
}

/// The conditions active now, and the rules they are judged by.
#[derive(Debug, Default)]
pub struct Board {
    active: RwLock<Vec<Condition>>,
    rules: RwLock<Arc<Rules>>,
}

impl Board {
    pub fn new(sources: &[Arc<Source>], alerts: &[Target]) -> Board {
        let board = Board::default();
        board.configure(sources, alerts);
        board
    }

    /// Takes the thresholds of a (re)loaded configuration.
    pub fn configure(&self, sources: &[Arc<Source>], alerts: &[Target]) {
        let rules = Rules {
            sources: sources
                .iter()
                .map(|s| (s.name.clone(), s.expect_every))
                .collect(),
            targets: sources
                .iter()
                .flat_map(|s| {
                    s.targets.iter().map(|t| {
                        (
                            s.name.clone(),
                            t.name.clone(),
                            t.alert_failure_share,
                            t.alert_pending_age,
                        )
                    })
                })
                .collect(),
            alert_targets: alerts.iter().map(|t| t.name.clone()).collect(),
            allow_lists: sources
                .iter()
                .filter_map(|s| {
                    let lists = &s.allow_from.as_ref()?.lists;
                    let names = lists.iter().map(|l| l.name()).collect::<Vec<_>>();
                    (!names.is_empty()).then(|| (s.name.clone(), names))
                })
                .collect(),
        };
        *self
            .rules
            .write()
            .expect("no panics while holding the lock") = Arc::new(rules);
    }

    fn rules(&self) -> Arc<Rules> {
        self.rules
            .read()
            .expect("no panics while holding the lock")
            .clone()
    }

    pub fn active(&self) -> Vec<Condition> {
        self.active
            .read()
            .expect("no panics while holding the lock")
            .clone()
    }

    /// How often to judge: a quarter of the shortest threshold, within bounds.
    fn every(&self) -> Duration {
        let rules = self.rules();
        rules
            .sources
            .iter()
            .filter_map(|(_, e)| *e)
            .chain(rules.targets.iter().map(|t| t.3))
            .map(|d| d / 4)
            .min()
            .unwrap_or(JUDGE_MAX)
            .clamp(JUDGE_MIN, JUDGE_MAX)
    }
}

/// Notifications kept in memory while the inbox refuses to store them; beyond this the
/// oldest are dropped (and logged): the conditions themselves are judged again anyway.
const MAX_UNSENT: usize = 1000;

/// How far back the notifications already stored are read at start-up.
const SEEN_AT_START: i64 = 1000;

/// One notification as stored, read back at start-up.
#[derive(Debug, serde::Deserialize)]
struct Stored {
    state: String,
    alert: String,
    source: String,
    target: Option<String>,
    since: String,
    detail: String,
}

/// The conditions the last notifications stored say are on: a restart carries them on (a
/// condition still on is not announced again; one that ended meanwhile is announced as
/// ended) rather than starting from nothing.
fn started_before(db: Db) -> anyhow::Result<Vec<Condition>> {
    let mut seen: Vec<(AlertKind, String, Option<String>)> = Vec::new();
    let mut on = Vec::new();
    for body in db.newest_bodies(SOURCE, SEEN_AT_START)? {
        let Ok(n) = serde_json::from_slice::<Stored>(&body) else {
            continue;
        };
        let Some(kind) = AlertKind::from_word(&n.alert) else {
            continue;
        };
        let key = (kind, n.source.clone(), n.target.clone());
        // Newest first: the first notice of a condition is its latest state.
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        if n.state == "started" {
            on.push(Condition {
                kind,
                source: n.source,
                target: n.target,
                since: n.since,
                detail: n.detail,
            });
        }
    }
    Ok(on)
}

/// One notification: the JSON body an alert target receives.
#[derive(Debug, Serialize)]
struct Notice<'a> {
    /// `started` or `ended`.
    state: &'static str,
    alert: &'static str,
    source: &'a str,
    target: Option<&'a str>,
    since: &'a str,
    /// When it was noticed to start or end.
    at: &'a str,
    detail: &'a str,
}

/// Judges the conditions until `stop` turns true. With replicas on PostgreSQL each one
/// judges from the one inbox (the rejection counts are its own); a notification's event id
/// is the condition's, so the second replica to store one stores nothing new.
pub async fn run(
    board: Arc<Board>,
    store: Store,
    metrics: Arc<Metrics>,
    mut stop: watch::Receiver<bool>,
) {
    let started = SystemTime::now();
    // Samples of each source's rejection count, oldest first, for the count within RECENT.
    let mut rejections: VecDeque<(Instant, HashMap<String, u64>)> = VecDeque::new();
    // Notifications not yet committed (the inbox refused a write): tried again next time.
    let mut unsent: Vec<Unsent> = Vec::new();
    // The alert targets of the last turn: a reload that adds one announces to it what is on.
    let mut told: Vec<String> = board.rules().alert_targets.clone();
    // The counters at start: rejections from now on count, whenever the first turn comes.
    rejections.push_back((Instant::now(), rejection_counts(&metrics, &board.rules())));
    match store.read(started_before).await {
        Ok(on) => {
            *board
                .active
                .write()
                .expect("no panics while holding the lock") = on
        }
        Err(e) => tracing::warn!(error = %format!("{e:#}"),
            "reading the alerts notified before the start"),
    }
    // The first turn at once: the banners and the gauges would otherwise read "nothing on"
    // for a turn after every start.
    let mut first = true;
    loop {
        if !first {
            tokio::select! {
                () = tokio::time::sleep(board.every()) => {}
                _ = stop.changed() => return,
            }
        }
        first = false;
        let rules = board.rules();
        let counts = rejection_counts(&metrics, &rules);
        let now = Instant::now();
        while rejections
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) > RECENT)
        {
            rejections.pop_front();
        }
        let oldest = rejections
            .front()
            .map(|(_, c)| c.clone())
            .unwrap_or_default();
        rejections.push_back((now, counts.clone()));
        // A source without an earlier sample (one a reload added) counts from now: its
        // counter's past is not news.
        let was_on = board.active();
        let rising: Vec<(String, u64)> = counts
            .iter()
            .map(|(s, n)| (s.clone(), n - oldest.get(s).copied().unwrap_or(*n).min(*n)))
            .filter(|(s, n)| {
                // Once on, it stays on until the count falls below half the threshold, so
                // that a sender hovering at the threshold cannot make it flap.
                let on = was_on
                    .iter()
                    .any(|c| c.kind == AlertKind::RejectionsRising && c.source == *s);
                *n >= if on { REJECTIONS / 2 } else { REJECTIONS }
            })
            .collect();

        let judged_rules = rules.clone();
        let judged = store
            .read(move |db| judge(db, &judged_rules, started, &rising))
            .await;
        let observed = match judged {
            Ok(observed) => observed,
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"),
                    "judging alert conditions failed; will try again");
                continue;
            }
        };
        let at = clock::iso_now();
        let previous = board.active();
        let mut next = Vec::with_capacity(observed.len());
        for mut c in observed {
            match previous.iter().find(|p| p.same(&c)) {
                // Still on: it began when it began, whatever the detail says now.
                Some(p) => c.since = p.since.clone(),
                None => {
                    tracing::warn!(alert = c.kind.word(), subject = %c.subject(), since = %c.since,
                        "alert: {}", c.detail);
                    unsent.push(Unsent::to_all(&c, "started", &at));
                }
            }
            next.push(c);
        }
        // Alert targets a reload added are told what is already on, as a restart would
        // tell them, in notices of their own: the one stored for the others has this
        // condition's id, and storing it again would store nothing.
        let added: Vec<String> = rules
            .alert_targets
            .iter()
            .filter(|t| !told.contains(t))
            .cloned()
            .collect();
        if !added.is_empty() {
            for c in &next {
                let queued = unsent
                    .iter()
                    .any(|u| u.state == "started" && u.to.is_none() && u.condition.same(c));
                if !queued {
                    unsent.push(Unsent {
                        to: Some(added.clone()),
                        ..Unsent::to_all(c, "started", &at)
                    });
                }
            }
        }
        told.clone_from(&rules.alert_targets);
        for p in &previous {
            if !next.iter().any(|c| c.same(p)) {
                tracing::info!(alert = p.kind.word(), subject = %p.subject(), since = %p.since,
                    "alert ended");
                unsent.push(Unsent::to_all(p, "ended", &at));
            }
        }
        for (source, _) in &rules.sources {
            let on = |kind| next.iter().any(|c| c.kind == kind && c.source == *source);
            metrics.set_source_silent(source, on(AlertKind::SourceSilent));
            metrics.set_source_rejections_rising(source, on(AlertKind::RejectionsRising));
        }
        for (source, target, _, _) in &rules.targets {
            let failing = next.iter().any(|c| {
                c.kind == AlertKind::TargetFailing
                    && c.source == *source
                    && c.target.as_deref() == Some(target)
            });
            metrics.set_target_failing(source, target, failing);
        }
        metrics.set_alerts_active(next.len());
        *board
            .active
            .write()
            .expect("no panics while holding the lock") = next;
        if rules.alert_targets.is_empty() {
            unsent.clear();
        } else if !unsent.is_empty() {
            let batch = std::mem::take(&mut unsent);
            let targets = rules.alert_targets.clone();
            let events: Vec<store::NewEvent> = batch.iter().map(|u| notice(u, &targets)).collect();
            match store.store_unless_known(events).await {
                Ok(()) => store.commits().committed(SOURCE),
                Err(e) => {
                    tracing::warn!(error = %e, notices = batch.len(),
                        "could not store alert notifications; will try again");
                    unsent = batch;
                    if unsent.len() > MAX_UNSENT {
                        let dropped = unsent.len() - MAX_UNSENT;
                        unsent.drain(..dropped);
                        tracing::warn!(
                            dropped,
                            "dropped the oldest alert notifications not stored"
                        );
                    }
                }
            }
        }
    }
}

/// Each source's signature rejections so far, from the counters `/metrics` exports.
fn rejection_counts(metrics: &Metrics, rules: &Rules) -> HashMap<String, u64> {
    rules
        .sources
        .iter()
        .map(|(source, _)| {
            let n = crate::scheme::Reject::AUTH_REASONS
                .iter()
                .map(|reason| {
                    metrics
                        .signature_failures
                        .get_or_create(&FailureLabels {
                            source: source.clone(),
                            reason,
                        })
                        .get()
                })
                .sum();
            (source.clone(), n)
        })
        .collect()
}

/// The conditions that hold now.
fn judge(
    db: Db,
    rules: &Rules,
    started: SystemTime,
    rising: &[(String, u64)],
) -> anyhow::Result<Vec<Condition>> {
    let now = SystemTime::now();
    let mut out = Vec::new();
    let age = |iso: &str| {
        humantime::parse_rfc3339(iso)
            .ok()
            .and_then(|t| now.duration_since(t).ok())
            .unwrap_or_default()
    };
    let words = |d: Duration| humantime::format_duration(Duration::from_secs(d.as_secs()));

    let expecting: Vec<String> = rules
        .sources
        .iter()
        .filter(|(_, e)| e.is_some())
        .map(|(s, _)| s.clone())
        .collect();
    let since_recent = clock::iso(now - RECENT);
    for s in stats::sources(db, &expecting, &since_recent)? {
        let Some(every) = rules
            .sources
            .iter()
            .find(|(n, _)| *n == s.source)
            .and_then(|(_, e)| *e)
        else {
            continue;
        };
        // Quiet since the last event, or since this process started if there never was one
        // (a new source is not silent before it had the time to speak). Not the later of
        // the two: a restart must neither hide a silence nor move its start.
        let last = s
            .last_received
            .as_deref()
            .and_then(|t| humantime::parse_rfc3339(t).ok())
            .unwrap_or(started);
        if now.duration_since(last).unwrap_or_default() > every {
            out.push(Condition {
                kind: AlertKind::SourceSilent,
                source: s.source.clone(),
                target: None,
                // Derived from the inbox, so the same silence has the same start after a
                // restart, and its notification the same event id.
                since: clock::iso(last + every),
                detail: format!(
                    "no new event for more than {} (expect_every); check the provider's webhook \
                     settings and rejections (`journalctl -u hookinbox`)",
                    words(every)
                ),
            });
        }
    }

    let pairs: Vec<(String, String)> = rules
        .targets
        .iter()
        .map(|(s, t, _, _)| (s.clone(), t.clone()))
        .collect();
    let paused = store::pause::all(db)?;
    let at = clock::iso(now);
    for t in stats::targets(db, &pairs, &since_recent)? {
        // A paused target holds its deliveries on purpose; it is not failing.
        if paused
            .iter()
            .any(|p| p.source == t.source && p.target == t.target)
        {
            continue;
        }
        let Some((_, _, share, pending_age)) = rules
            .targets
            .iter()
            .find(|(s, n, _, _)| *s == t.source && *n == t.target)
        else {
            continue;
        };
        let failing_share = t
            .failure_share()
            .filter(|f| t.attempts >= MIN_ATTEMPTS && f >= share);
        let waited = t.oldest_pending.as_deref().map(age);
        let detail = match (failing_share, waited) {
            (Some(f), _) => format!(
                "{:.0}% of {} attempts in the last {} failed; `hookinbox show` on a recent \
                 event shows the target's answers",
                f * 100.0,
                t.attempts,
                words(RECENT)
            ),
            (None, Some(w)) if w > *pending_age => format!(
                "the oldest pending delivery has waited {} ({} pending); is the app up?",
                words(w),
                t.pending
            ),
            _ => continue,
        };
        out.push(Condition {
            kind: AlertKind::TargetFailing,
            source: t.source.clone(),
            target: Some(t.target.clone()),
            since: at.clone(),
            detail,
        });
    }

    for (source, n) in rising {
        out.push(Condition {
            kind: AlertKind::RejectionsRising,
            source: source.clone(),
            target: None,
            since: at.clone(),
            detail: format!(
                "{} failed signature or timestamp checks in the last {}: a rotated secret, a \
                 wrong clock, or someone probing; `hookinbox_signature_failures_total` has the \
                 reasons",
                count(*n as i64, "request", "requests"),
                words(RECENT)
            ),
        });
    }

    out.extend(stale_allow_lists(db, rules, now, started)?);

    let news_since = clock::iso(now - NEWS_FOR);
    for (source, n, first) in stats::new_conflicts(db, &news_since)? {
        if source == SOURCE {
            continue;
        }
        out.push(Condition {
            kind: AlertKind::NewConflicts,
            source: source.clone(),
            target: None,
            since: first,
            detail: format!(
                "{} reused a stored event's id with different bytes in the last {}; quarantined, \
                 never forwarded: `hookinbox conflicts --source {source}`",
                count(n, "request", "requests"),
                words(NEWS_FOR)
            ),
        });
    }
    // Not the alert targets' own: a notification that died would be announced to the
    // target that let it die, forever. Their failures are in the log and the metrics.
    for (source, target, n, first) in stats::new_dead(db, &news_since, SOURCE)? {
        out.push(Condition {
            kind: AlertKind::NewDeadDeliveries,
            detail: format!(
                "{} gave up in the last {}: `hookinbox dead --source {source} --target \
                 {target}`, then `hookinbox replay --dead --source {source} --target {target}` \
                 once the app is fixed",
                count(n, "delivery", "deliveries"),
                words(NEWS_FOR)
            ),
            source,
            target: Some(target),
            since: first,
        });
    }
    Ok(out)
}

/// The sources whose providers' address lists have not been fetched for
/// [`allow::STALE_AFTER`] (judged from the inbox, where every replica keeps them), or not at
/// all since [`NEVER_FETCHED_AFTER`] after the start.
fn stale_allow_lists(
    db: Db,
    rules: &Rules,
    now: SystemTime,
    started: SystemTime,
) -> anyhow::Result<Vec<Condition>> {
    if rules.allow_lists.is_empty() {
        return Ok(Vec::new());
    }
    let kept = store::kept::with_prefix(db, allow::KEPT_PREFIX)?;
    let fetched = |provider: &str| {
        let name = allow::kept_name(provider);
        kept.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, k)| humantime::parse_rfc3339(&k.updated_at).unwrap_or(started))
    };
    let mut out = Vec::new();
    for (source, providers) in &rules.allow_lists {
        let mut stale: Vec<(SystemTime, String)> = Vec::new();
        for provider in providers {
            match fetched(provider) {
                Some(at) if now.duration_since(at).unwrap_or_default() > allow::STALE_AFTER => {
                    stale.push((
                        at + allow::STALE_AFTER,
                        format!(
                            "{provider}'s was last fetched at {}: it stays in use, and an \
                             address {provider} added since is refused (403)",
                            clock::iso(at)
                        ),
                    ));
                }
                None if now.duration_since(started).unwrap_or_default() > NEVER_FETCHED_AFTER => {
                    stale.push((
                        started + NEVER_FETCHED_AFTER,
                        format!(
                            "{provider}'s was never fetched, so the source answers 503 to \
                             whatever that list would allow"
                        ),
                    ));
                }
                _ => {}
            }
        }
        let Some(since) = stale.iter().map(|(at, _)| *at).min() else {
            continue;
        };
        let which: Vec<String> = stale.into_iter().map(|(_, w)| w).collect();
        out.push(Condition {
            kind: AlertKind::AllowListStale,
            source: source.clone(),
            target: None,
            since: clock::iso(since),
            detail: format!(
                "of the providers' address lists allow_from names, {}; `journalctl -u \
                 hookinbox` says why the fetch fails",
                which.join("; ")
            ),
        });
    }
    Ok(out)
}

/// `n` and its noun, singular or plural.
fn count(n: i64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A notification not yet stored: a condition's change, noticed `at`, for every alert
/// target, or only `to` those a reload added.
struct Unsent {
    condition: Condition,
    state: &'static str,
    at: String,
    to: Option<Vec<String>>,
}

impl Unsent {
    fn to_all(c: &Condition, state: &'static str, at: &str) -> Unsent {
        Unsent {
            condition: c.clone(),
            state,
            at: at.to_owned(),
            to: None,
        }
    }
}

/// The inbox event that carries one notification to every alert target (`targets`), or to
/// those it names. Its id names the condition, its start and the change (and the targets,
/// when it names them), so a notification stored twice (a restart during the same silence)
/// is one event, delivered once.
fn notice(u: &Unsent, targets: &[String]) -> NewEvent {
    let (c, state, at) = (&u.condition, u.state, u.at.as_str());
    let targets = u.to.as_deref().unwrap_or(targets);
    let body = serde_json::to_vec(&Notice {
        state,
        alert: c.kind.word(),
        source: &c.source,
        target: c.target.as_deref(),
        since: &c.since,
        at,
        detail: &c.detail,
    })
    .expect("a notice serializes");
    let mut event_id = format!("{}:{}:{}:{state}", c.kind.word(), c.subject(), c.since);
    if let Some(to) = &u.to {
        event_id.push_str(&format!(":to:{}", to.join(",")));
    }
    NewEvent::notification(SOURCE, event_id, format!("alert.{state}"), body, targets)
}
