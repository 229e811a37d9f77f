//! Recovering what was sent while hookinbox was not receiving: from the providers that keep
//! a delivery log, for a window of time (a gap, or what an operator names).
//!
//! The promise covers what reached hookinbox; this is how it reaches further. Two ways, one
//! per kind of provider API:
//!
//! - **Ask for a redelivery** (GitHub): list the hook's deliveries in the window and ask for
//!   each one whose id the inbox does not hold to be delivered again. The redelivery arrives
//!   signed, through the normal receive path, so nothing unsigned enters the inbox.
//! - **Fetch and store** (Stripe): list the events in the window and store each missing one
//!   with origin `api`, fetched over TLS with the operator's key. A later webhook of the same
//!   event is a duplicate when its JSON value is the same (`store::sqlite::ingest`).
//!
//! A provider is an [`Api`]: `list` says what it holds for a window, `redeliver` asks for one
//! delivery again. The rest is shared: [`plan`] compares the list with the inbox, and
//! [`carry_out`] asks and stores, idempotently (a second run over the same window asks for
//! nothing more: what arrived is in the inbox, and what was asked for and has not arrived yet
//! is recorded in `recovery_requests`). An API failure while listing changes nothing.
//!
//! Invariant: recovery never changes or removes an event the inbox holds; it only adds.

pub mod auto;
pub mod client;
pub mod github;
pub mod stripe;
pub mod watch;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;

use crate::clock;
use crate::config::{RecoverApi, Source};
use crate::metrics::{Metrics, ProviderLabels, RecoveredLabels};
use crate::store::Store;
use crate::store::gaps;
use crate::store::{Origin, Stored};
pub use client::ApiError;

/// How much wider than the window the provider is asked about, on each side: a heartbeat's
/// interval (a crash is known only to the heartbeat), and clocks that differ by seconds.
/// Wider costs nothing but a longer list; what the inbox holds is never asked for again.
pub const MARGIN: Duration = Duration::from_secs(60);

/// A redelivery asked for this often without arriving is not asked for again: the
/// provider's attempts fail for a reason a redelivery will not fix. `recover` names it.
pub const MAX_ASKS: i64 = 3;

/// Redeliveries asked for at once.
const ASK_CONCURRENCY: usize = 4;

/// A stretch of time, in unix seconds, both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Window {
    pub from: i64,
    pub until: i64,
}

impl Window {
    /// The window the provider is asked about: [`MARGIN`] wider on each side.
    pub fn widened(self) -> Window {
        let m = MARGIN.as_secs() as i64;
        Window {
            from: self.from - m,
            until: self.until + m,
        }
    }

    pub fn contains(&self, t: i64) -> bool {
        (self.from..=self.until).contains(&t)
    }
}

/// What a provider holds about one event.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// The event's identity in the inbox (GitHub's delivery GUID, Stripe's `evt_…`).
    pub event_id: String,
    /// When the provider created or last tried to deliver it (unix seconds).
    pub at: i64,
    /// The event type, as the provider names it.
    pub event_type: Option<String>,
    /// How the provider's delivery went, in its words (`502 Invalid HTTP Response`).
    pub status: String,
    pub found: Found,
}

#[derive(Debug, Clone)]
pub enum Found {
    /// The provider can send it again: this delivery's id (ids grow with each attempt).
    Redelivery(u64),
    /// The event's JSON, as the API gave it.
    Fetched(Bytes),
}

impl Found {
    /// Which of two attempts made in the same second is the later one.
    fn order(&self) -> u64 {
        match self {
            Found::Redelivery(id) => *id,
            Found::Fetched(_) => 0,
        }
    }
}

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A provider API that can fill a gap.
pub trait Api: Send + Sync {
    /// The provider's name, for metrics and logs.
    fn provider(&self) -> &'static str;
    /// What the provider holds for `window` (already widened by the caller). Fails whole:
    /// a partial list would look like events missing from the provider.
    fn list(&self, window: Window) -> BoxFuture<'_, Result<Vec<Candidate>, ApiError>>;
    /// Asks the provider to deliver `delivery` again.
    fn redeliver(&self, delivery: u64) -> BoxFuture<'_, Result<(), ApiError>>;
}

/// The API client for a source with `recover` configured.
pub fn api_for(source: &Arc<Source>, metrics: Arc<Metrics>) -> Result<Arc<dyn Api>, ApiError> {
    let recover = source
        .recover
        .as_ref()
        .ok_or_else(|| ApiError::Other(format!("source {:?} has no recover table", source.name)))?;
    let client = client::Client::new(&recover.base, &source.name, recover.api.provider(), metrics)?;
    Ok(match &recover.api {
        RecoverApi::GitHub { .. } => Arc::new(github::GitHub::new(source.clone(), client)),
        RecoverApi::Stripe { .. } => Arc::new(stripe::Stripe::new(source.clone(), client)),
    })
}

/// One event of a plan.
#[derive(Debug, Clone, Serialize)]
pub struct Item {
    pub event_id: String,
    /// Inbox text.
    pub at: String,
    pub event_type: Option<String>,
    /// What the provider says about its delivery.
    pub status: String,
    #[serde(skip)]
    found: Found,
}

/// What a window holds, compared with the inbox.
#[derive(Debug, Clone, Serialize)]
pub struct RecoveryPlan {
    pub source: String,
    pub provider: &'static str,
    /// The window asked about, widened (inbox text).
    pub from: String,
    pub until: String,
    /// Events the provider listed in the window.
    pub listed: usize,
    /// Of those, already in the inbox: left alone.
    pub in_inbox: usize,
    /// To ask the provider to deliver again.
    pub redeliver: Vec<Item>,
    /// To store, as fetched.
    pub store: Vec<Item>,
    /// Asked for before and not tried by the provider since: on their way.
    pub waiting: Vec<Item>,
    /// Asked for [`MAX_ASKS`] times without arriving: no longer asked for.
    pub given_up: Vec<Item>,
}

impl RecoveryPlan {
    pub fn nothing_to_do(&self) -> bool {
        self.redeliver.is_empty() && self.store.is_empty()
    }
}

/// How long a redelivery asked for may take to show in the provider's log before it is
/// asked for again (counting towards [`MAX_ASKS`]): GitHub makes one within seconds.
pub const REDELIVERY_WAIT: Duration = Duration::from_secs(600);

/// Lists what the provider holds for `window` and compares it with the inbox. Reads only.
///
/// A window older than the source's `keep_identity` is cut there: before it the inbox no
/// longer knows what it held, and would take every listed event for a missing one.
pub async fn plan(
    api: &dyn Api,
    source: &Source,
    window: Window,
    store: &Store,
) -> anyhow::Result<RecoveryPlan> {
    let now = clock::unix_now();
    let remembered =
        now.saturating_sub(i64::try_from(source.keep_identity.as_secs()).unwrap_or(i64::MAX));
    let mut asked = window.widened();
    if asked.from < remembered {
        tracing::warn!(
            source = source.name,
            from = clock::iso_from_unix(asked.from),
            "recovering from keep_identity ago only: the inbox has forgotten what came before"
        );
        asked.from = remembered;
    }
    if asked.from > asked.until {
        anyhow::bail!(
            "the window lies before the source's keep_identity: the inbox cannot tell what it held then"
        );
    }
    let listed = api.list(asked).await?;
    // One entry per event, the newest attempt (GitHub lists every attempt, redeliveries
    // after the window too), for the events with an attempt inside the window.
    let mut newest: HashMap<String, (Candidate, bool)> = HashMap::new();
    for c in listed {
        let inside = asked.contains(c.at);
        match newest.get_mut(&c.event_id) {
            Some((seen, any_inside)) => {
                *any_inside |= inside;
                if (c.at, c.found.order()) > (seen.at, seen.found.order()) {
                    *seen = c;
                }
            }
            None => {
                newest.insert(c.event_id.clone(), (c, inside));
            }
        }
    }
    let mut candidates: Vec<Candidate> = newest
        .into_values()
        .filter_map(|(c, inside)| inside.then_some(c))
        .collect();
    candidates.sort_by(|a, b| (a.at, &a.event_id).cmp(&(b.at, &b.event_id)));
    let ids: Vec<String> = candidates.iter().map(|c| c.event_id.clone()).collect();
    let (name, account) = (source.name.clone(), source.account.clone());
    let (known, requested) = store
        .change(move |conn, _| {
            Ok((
                gaps::known(conn, &name, &account, &ids)?,
                gaps::requests(conn, &name, &account, &ids)?,
            ))
        })
        .await?;
    let mut plan = RecoveryPlan {
        source: source.name.clone(),
        provider: api.provider(),
        from: clock::iso_from_unix(asked.from),
        until: clock::iso_from_unix(asked.until),
        listed: candidates.len(),
        in_inbox: 0,
        redeliver: Vec::new(),
        store: Vec::new(),
        waiting: Vec::new(),
        given_up: Vec::new(),
    };
    for c in candidates {
        if known.contains(&c.event_id) {
            plan.in_inbox += 1;
            continue;
        }
        let item = Item {
            at: clock::iso_from_unix(c.at),
            event_id: c.event_id,
            event_type: c.event_type,
            status: c.status,
            found: c.found,
        };
        let Found::Redelivery(newest) = item.found else {
            plan.store.push(item);
            continue;
        };
        match requested.get(&item.event_id) {
            None => plan.redeliver.push(item),
            Some(r) => {
                // The provider tried since it was asked (a newer attempt, which did not
                // reach the inbox), or took too long to try at all: ask again, up to
                // MAX_ASKS times.
                let tried_since = i64::try_from(newest).unwrap_or(i64::MAX) > r.delivery;
                let overdue = clock::unix_from_iso(&r.at)
                    .is_some_and(|at| now.saturating_sub(at) > REDELIVERY_WAIT.as_secs() as i64);
                if r.asked >= MAX_ASKS && (tried_since || overdue) {
                    plan.given_up.push(item);
                } else if tried_since || overdue {
                    plan.redeliver.push(item);
                } else {
                    plan.waiting.push(item);
                }
            }
        }
    }
    Ok(plan)
}

/// What carrying out a plan did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Done {
    /// Redeliveries the provider accepted to make.
    pub redeliveries_asked: usize,
    /// Events stored as fetched.
    pub stored: usize,
    /// Fetched events the inbox meanwhile held (their webhook came first).
    pub arrived_meanwhile: usize,
    /// What failed, in words; the rest went on.
    pub errors: Vec<String>,
}

impl Done {
    /// "asked for 3 redeliveries, stored 0 events"
    pub fn summary(&self, plan: &RecoveryPlan) -> String {
        let mut s = format!(
            "{} listed, {} already in the inbox; asked for {} redeliveries, stored {} events",
            plan.listed, plan.in_inbox, self.redeliveries_asked, self.stored
        );
        if !plan.waiting.is_empty() {
            s.push_str(&format!(
                ", {} redeliveries on their way",
                plan.waiting.len()
            ));
        }
        if !plan.given_up.is_empty() {
            s.push_str(&format!(
                ", {} given up after {MAX_ASKS} requests",
                plan.given_up.len()
            ));
        }
        if !self.errors.is_empty() {
            s.push_str(&format!(", {} failed", self.errors.len()));
        }
        s
    }
}

/// Asks for the plan's redeliveries and stores its fetched events; `step` hears each one
/// done. A failure of one is counted and reported; the others go on.
pub async fn carry_out(
    api: &Arc<dyn Api>,
    source: &Arc<Source>,
    plan: &RecoveryPlan,
    store: &Store,
    metrics: &Metrics,
    step: &(dyn Fn() + Send + Sync),
) -> Done {
    let mut done = Done::default();
    let provider = api.provider();
    let count = |how: &'static str| {
        metrics
            .recovered_events
            .get_or_create(&RecoveredLabels {
                source: source.name.clone(),
                provider,
                how,
            })
            .inc();
    };
    let failed = || {
        metrics
            .recovery_errors
            .get_or_create(&ProviderLabels {
                source: source.name.clone(),
                provider,
            })
            .inc();
    };

    for chunk in plan.redeliver.chunks(ASK_CONCURRENCY) {
        let mut asks = tokio::task::JoinSet::new();
        for item in chunk {
            let Found::Redelivery(delivery) = item.found else {
                continue;
            };
            let (api, id) = (api.clone(), item.event_id.clone());
            asks.spawn(async move { (id, delivery, api.redeliver(delivery).await) });
        }
        while let Some(joined) = asks.join_next().await {
            let (id, delivery, result) = match joined {
                Ok(done) => done,
                Err(e) => {
                    failed();
                    done.errors
                        .push(format!("a redelivery request stopped: {e}"));
                    continue;
                }
            };
            match result {
                Ok(()) => {
                    let (name, account, id2) =
                        (source.name.clone(), source.account.clone(), id.clone());
                    let asked_for = i64::try_from(delivery).unwrap_or(i64::MAX);
                    let recorded = store
                        .change(move |conn, now| {
                            gaps::requested(conn, &name, &account, &id2, asked_for, now)
                        })
                        .await;
                    if let Err(e) = recorded {
                        // Asked all the same: the next run may ask once more, which at worst
                        // is a duplicate the inbox answers as one.
                        tracing::warn!(source = source.name, event_id = id, error = %e,
                            "asked for a redelivery but could not record it");
                    }
                    tracing::info!(
                        source = source.name,
                        provider,
                        event_id = id,
                        delivery,
                        "asked for a redelivery"
                    );
                    count("redelivery_requested");
                    done.redeliveries_asked += 1;
                }
                Err(e) => {
                    failed();
                    tracing::warn!(source = source.name, provider, event_id = id, delivery,
                        error = %e, "could not ask for a redelivery");
                    done.errors.push(format!("{id}: {e}"));
                }
            }
            step();
        }
    }

    for item in &plan.store {
        let Found::Fetched(body) = &item.found else {
            continue;
        };
        let event = crate::event::new_event(
            source,
            (source.name.as_str().into(), source.account.as_str().into()),
            crate::scheme::Identity {
                event_id: item.event_id.clone(),
                provider_time: clock::unix_from_iso(&item.at),
                event_type: item.event_type.clone(),
            },
            crate::event::Hashed::new(body.clone()),
            "[]".into(),
            api_host(source),
            Origin::Api,
        );
        match store.ingest(event).await {
            Ok(Stored::New) => {
                tracing::info!(
                    source = source.name,
                    provider,
                    event_id = item.event_id,
                    "stored an event fetched from the API"
                );
                count("stored");
                done.stored += 1;
            }
            Ok(_) => done.arrived_meanwhile += 1,
            Err(e) => {
                failed();
                tracing::warn!(source = source.name, provider, event_id = item.event_id,
                    error = %e, "could not store an event fetched from the API");
                done.errors.push(format!("{}: {e:#}", item.event_id));
            }
        }
        step();
    }
    done
}

/// Where a fetched event came from, as its `remote_addr`: the API's host.
fn api_host(source: &Source) -> String {
    source
        .recover
        .as_ref()
        .and_then(|r| r.base.host_str().map(str::to_owned))
        .unwrap_or_default()
}

/// Plans and carries out one recovery of `window`, and marks `gaps` recovered with what it
/// did. Returns the summary, or the error that stopped it (then nothing was changed and the
/// gaps stay unrecovered).
pub async fn recover_window(
    api: &Arc<dyn Api>,
    source: &Arc<Source>,
    window: Window,
    gap_ids: Vec<i64>,
    store: &Store,
    metrics: &Metrics,
) -> anyhow::Result<String> {
    let plan = match plan(api.as_ref(), source, window, store).await {
        Ok(plan) => plan,
        Err(e) => {
            metrics
                .recovery_errors
                .get_or_create(&ProviderLabels {
                    source: source.name.clone(),
                    provider: api.provider(),
                })
                .inc();
            let summary = format!("failed at {}: {e:#}", clock::iso_now());
            let _ = store
                .change(move |conn, _| gaps::note(conn, &gap_ids, &summary))
                .await;
            return Err(e);
        }
    };
    let done = carry_out(api, source, &plan, store, metrics, &|| {}).await;
    let summary = done.summary(&plan);
    let text = summary.clone();
    if !done.errors.is_empty() {
        // Not recovered yet: what failed is asked for again by the next try, and what went
        // through is not (the inbox holds it, or it is recorded as asked for).
        let text = format!("partly failed at {}: {text}", clock::iso_now());
        store
            .change(move |conn, _| gaps::note(conn, &gap_ids, &text))
            .await?;
        anyhow::bail!("{summary}: {}", done.errors.join("; "));
    }
    store
        .change(move |conn, now| gaps::recovered(conn, &gap_ids, &text, now))
        .await?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A provider log held in memory: `plan` is what is under test here, not an API.
    struct Log(Vec<Candidate>);

    impl Api for Log {
        fn provider(&self) -> &'static str {
            "github"
        }
        fn list(&self, _: Window) -> BoxFuture<'_, Result<Vec<Candidate>, ApiError>> {
            Box::pin(async { Ok(self.0.clone()) })
        }
        fn redeliver(&self, _: u64) -> BoxFuture<'_, Result<(), ApiError>> {
            Box::pin(async { Ok(()) })
        }
    }

    fn attempt(guid: &str, at: i64, delivery: u64) -> Candidate {
        Candidate {
            event_id: guid.into(),
            at,
            event_type: Some("push".into()),
            status: "failed to connect".into(),
            found: Found::Redelivery(delivery),
        }
    }

    fn source() -> Source {
        let text = "[store]\npath = \"inbox.db\"\n[[sources]]\nname = \"gh\"\nscheme = \"github\"\n\
                    secrets = [\"s\"]\n";
        crate::config::from_str(text, std::path::Path::new("/nonexistent/h.toml"), None)
            .unwrap()
            .sources
            .remove(0)
    }

    #[tokio::test]
    async fn the_plan_asks_once_waits_for_the_provider_and_gives_up_after_three_asks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("inbox.db");
        crate::store::sqlite::schema::open_writer(&path, crate::config::Synchronous::Full, true)
            .unwrap();
        let (store, _held) = crate::store::Location::file(path)
            .for_command(Arc::new(Metrics::new()))
            .await
            .unwrap();
        let source = source();
        let now = clock::unix_now();
        let window = Window {
            from: now - 3600,
            until: now - 600,
        };
        let record = |guid: &'static str, delivery: i64, asked: i64, ago: i64| {
            let at = clock::iso_from_unix(now - ago);
            store.change(move |conn, _| {
                for _ in 0..asked {
                    gaps::requested(conn, "gh", "", guid, delivery, &at)?;
                }
                Ok(())
            })
        };
        record("asked-waiting", 20, 1, 60).await.unwrap();
        record("asked-tried-again", 30, 1, 60).await.unwrap();
        record("asked-overdue", 40, 1, 3600).await.unwrap();
        record("asked-thrice", 50, 3, 60).await.unwrap();
        let log = Log(vec![
            attempt("new", now - 1800, 10),
            // Its redelivery failed after the window: the newest attempt is outside it.
            attempt("asked-tried-again", now - 1800, 30),
            attempt("asked-tried-again", now - 60, 31),
            attempt("asked-waiting", now - 1800, 20),
            attempt("asked-overdue", now - 1800, 40),
            attempt("asked-thrice", now - 1800, 50),
            attempt("asked-thrice", now - 30, 51),
            // Only after the window: not this window's business.
            attempt("later", now - 30, 60),
        ]);
        let plan = plan(&log, &source, window, &store).await.unwrap();
        let ids =
            |items: &[Item]| -> Vec<String> { items.iter().map(|i| i.event_id.clone()).collect() };
        assert_eq!(
            ids(&plan.redeliver),
            ["asked-overdue", "new", "asked-tried-again"]
        );
        assert_eq!(ids(&plan.waiting), ["asked-waiting"]);
        assert_eq!(ids(&plan.given_up), ["asked-thrice"]);
        assert_eq!(plan.listed, 5);
    }
}
