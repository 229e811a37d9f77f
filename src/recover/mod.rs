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
//!   event is a duplicate when its JSON value is the same (`store::ingest`).
//!
//! A provider is an [`Api`]: `list` says what it holds for a window, `redeliver` asks for one
//! delivery again. The rest is shared: [`plan`] compares the list with the inbox, and
//! [`carry_out`] asks and stores, idempotently (a second run over the same window asks for
//! nothing more: what arrived is in the inbox, and what was asked for and has not arrived yet
//! is recorded in `recovery_requests`). An API failure while listing changes nothing.
//!
//! Invariant: recovery never changes or removes an event the inbox holds; it only adds.

pub mod client;
pub mod github;
pub mod serve;
pub mod stripe;
pub mod watch;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rusqlite::Connection;
use serde::Serialize;

use crate::clock;
use crate::config::{RecoverApi, Source};
use crate::metrics::{Metrics, ProviderLabels, RecoveredLabels};
use crate::store::gaps;
use crate::store::ingest::{NewEvent, Origin, Stored};
use crate::store::writer::Writer;
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
    /// The provider can send it again: this delivery's id.
    Redelivery(u64),
    /// The event's JSON, as the API gave it.
    Fetched(Bytes),
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

/// Where recovery reads and writes: through serve's writer, or (the CLI) a connection of
/// its own, one short transaction per step, beside a running serve.
#[derive(Clone)]
pub enum Inbox {
    Writer(Writer),
    Direct(Arc<std::sync::Mutex<Connection>>),
}

impl Inbox {
    /// Runs `work` in a transaction and returns its result once committed.
    pub async fn run<T, F>(&self, work: F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: FnMut(&Connection, &str) -> rusqlite::Result<T> + Send + 'static,
    {
        match self {
            Inbox::Writer(writer) => Ok(writer.job(work).await?),
            Inbox::Direct(conn) => {
                let conn = conn.clone();
                let mut work = work;
                tokio::task::spawn_blocking(move || {
                    let mut conn = conn.lock().expect("no panics while holding the lock");
                    let tx =
                        conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
                    let result = work(&tx, &clock::iso_now())?;
                    tx.commit()?;
                    Ok(result)
                })
                .await?
            }
        }
    }

    async fn ingest(&self, event: NewEvent) -> anyhow::Result<Stored> {
        match self {
            // Through the writer, so that the delivery loops hear of it at once.
            Inbox::Writer(writer) => Ok(writer.ingest(event).await?),
            Inbox::Direct(_) => {
                self.run(move |conn, now| crate::store::ingest::store(conn, &event, now))
                    .await
            }
        }
    }
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
pub struct Plan {
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

impl Plan {
    pub fn nothing_to_do(&self) -> bool {
        self.redeliver.is_empty() && self.store.is_empty()
    }
}

/// Lists what the provider holds for `window` and compares it with the inbox. Reads only.
pub async fn plan(
    api: &dyn Api,
    source: &Source,
    window: Window,
    inbox: &Inbox,
) -> anyhow::Result<Plan> {
    let asked = window.widened();
    let listed = api.list(asked).await?;
    // One entry per event: GitHub lists every attempt; the newest says the most.
    let mut newest: HashMap<String, Candidate> = HashMap::new();
    for c in listed.into_iter().filter(|c| asked.contains(c.at)) {
        match newest.get(&c.event_id) {
            Some(seen) if seen.at >= c.at => {}
            _ => {
                newest.insert(c.event_id.clone(), c);
            }
        }
    }
    let mut candidates: Vec<Candidate> = newest.into_values().collect();
    candidates.sort_by(|a, b| (a.at, &a.event_id).cmp(&(b.at, &b.event_id)));
    let ids: Vec<String> = candidates.iter().map(|c| c.event_id.clone()).collect();
    let (name, account) = (source.name.clone(), source.account.clone());
    let (known, requested) = inbox
        .run(move |conn, _| {
            Ok((
                gaps::known(conn, &name, &account, &ids)?,
                gaps::requests(conn, &name, &account, &ids)?,
            ))
        })
        .await?;
    let mut plan = Plan {
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
        match (&item.found, requested.get(&item.event_id)) {
            (Found::Fetched(_), _) => plan.store.push(item),
            (Found::Redelivery(_), None) => plan.redeliver.push(item),
            (Found::Redelivery(_), Some(r)) if r.asked >= MAX_ASKS => plan.given_up.push(item),
            // The provider has not tried since it was asked: the redelivery is on its way.
            (Found::Redelivery(_), Some(r)) if item.at <= r.at => plan.waiting.push(item),
            (Found::Redelivery(_), Some(_)) => plan.redeliver.push(item),
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
    pub fn summary(&self, plan: &Plan) -> String {
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
    plan: &Plan,
    inbox: &Inbox,
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
            let Ok((id, delivery, result)) = joined else {
                continue;
            };
            match result {
                Ok(()) => {
                    let (name, account, id2) =
                        (source.name.clone(), source.account.clone(), id.clone());
                    let recorded = inbox
                        .run(move |conn, now| gaps::requested(conn, &name, &account, &id2, now))
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
        let event = crate::receive::new_event(
            source,
            (source.name.as_str().into(), source.account.as_str().into()),
            crate::scheme::Identity {
                event_id: item.event_id.clone(),
                provider_time: clock::unix_from_iso(&item.at),
                event_type: item.event_type.clone(),
            },
            body.clone(),
            "[]".into(),
            api_host(source),
            Origin::Api,
        );
        match inbox.ingest(event).await {
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
    inbox: &Inbox,
    metrics: &Metrics,
) -> anyhow::Result<String> {
    let plan = match plan(api.as_ref(), source, window, inbox).await {
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
            let _ = inbox
                .run(move |conn, _| {
                    conn.prepare_cached("UPDATE gaps SET recovery = ?2 WHERE id = ?1")
                        .and_then(|mut update| {
                            for id in &gap_ids {
                                update.execute(rusqlite::params![id, summary])?;
                            }
                            Ok(())
                        })
                })
                .await;
            return Err(e);
        }
    };
    let done = carry_out(api, source, &plan, inbox, metrics, &|| {}).await;
    let summary = done.summary(&plan);
    let text = summary.clone();
    inbox
        .run(move |conn, now| gaps::recovered(conn, &gap_ids, &text, now))
        .await?;
    Ok(summary)
}
