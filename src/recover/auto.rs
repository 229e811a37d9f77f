//! Recovery inside `serve`: for the gap found at start-up, for each run of refused requests
//! once it ends, and every `recover.every` for the stretch of time just past, as a safety
//! net for what no gap shows (requests lost on the way, before they reached hookinbox).
//!
//! A recovery that fails (the API unreachable, a rate limit) leaves its gaps unrecovered
//! and is tried again after [`RETRY_FAILED`]; what it did meanwhile is in `gaps.recovery`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::Window;
use crate::clock;
use crate::config::Source;
use crate::metrics::{GapLabels, Metrics};
use crate::store::Store;
use crate::store::gaps::Gap;

/// How long after a failed recovery it is tried again.
pub const RETRY_FAILED: Duration = Duration::from_secs(300);
/// The safety net stops this far short of now (and its window's margin further): a
/// delivery the provider is making this minute is not missing yet.
pub const SETTLE: Duration = Duration::from_secs(60);
/// The least time between two recoveries of a source's gaps: a run of refusals can end
/// every few seconds (a forged request between genuine ones is one), and each recovery
/// costs API calls out of the provider's rate limit. Gaps that arrive meanwhile are
/// recovered together.
pub const GAP_SPACING: Duration = Duration::from_secs(60);

/// One source's recovery state.
struct Pending {
    /// Gaps not yet recovered, and when to try.
    gaps: Vec<Gap>,
    retry_at: Option<Instant>,
    /// The safety net has covered time up to here (unix seconds).
    covered_until: i64,
    next_net: Instant,
    /// The `every` the safety net is timed by (None until the source's config is seen).
    every: Option<Duration>,
    /// When its gaps were last recovered (or tried).
    last_gaps: Option<Instant>,
}

/// Runs until `stop` turns true. `at_start` are the gaps `serve` found when it started;
/// `found` brings those recorded later (runs of refusals that ended).
pub async fn run(
    mut sources: watch::Receiver<Vec<Arc<Source>>>,
    store: Store,
    metrics: Arc<Metrics>,
    at_start: Vec<Gap>,
    mut found: mpsc::UnboundedReceiver<Gap>,
    mut stop: watch::Receiver<bool>,
) {
    let started = clock::unix_now();
    let mut state: HashMap<String, Pending> = HashMap::new();
    let add = |state: &mut HashMap<String, Pending>, gap: Gap| {
        metrics
            .gaps
            .get_or_create(&GapLabels {
                source: gap.source.clone(),
                kind: if gap.kind == "down" {
                    "down"
                } else {
                    "rejecting"
                },
            })
            .inc();
        let s = state
            .entry(gap.source.clone())
            .or_insert_with(|| fresh(started));
        s.gaps.push(gap);
        let spaced = s.last_gaps.map(|at| at + GAP_SPACING);
        s.retry_at = Some(spaced.map_or_else(Instant::now, |at| at.max(Instant::now())));
    };
    for gap in at_start {
        add(&mut state, gap);
    }
    loop {
        let configured: Vec<Arc<Source>> = sources
            .borrow_and_update()
            .iter()
            .filter(|s| s.recover.is_some())
            .cloned()
            .collect();
        // Sources without recover keep their gaps listed, and nothing is asked for.
        state.retain(|name, _| configured.iter().any(|s| &s.name == name));
        for source in &configured {
            let every = source.recover.as_ref().map(|r| r.every);
            let s = state
                .entry(source.name.clone())
                .or_insert_with(|| fresh(started));
            // First seen, or changed by a reload: the next safety net is timed by it.
            if let Some(every) = every
                && s.every != Some(every)
            {
                s.every = Some(every);
                s.next_net = s.next_net.min(Instant::now() + every);
            }
        }
        let now = Instant::now();
        for source in &configured {
            let Some(recover) = source.recover.as_ref() else {
                continue;
            };
            let s = state.get_mut(&source.name).expect("entered above");
            if s.retry_at.is_some_and(|at| at <= now) && !s.gaps.is_empty() {
                let window = Window {
                    from: s
                        .gaps
                        .iter()
                        .filter_map(|g| clock::unix_from_iso(&g.started_at))
                        .min()
                        .unwrap_or(started),
                    until: s
                        .gaps
                        .iter()
                        .filter_map(|g| clock::unix_from_iso(&g.ended_at))
                        .max()
                        .unwrap_or(started),
                };
                let ids = s.gaps.iter().map(|g| g.id).collect();
                s.last_gaps = Some(Instant::now());
                match once(source, window, ids, &store, &metrics).await {
                    true => {
                        s.gaps.clear();
                        s.retry_at = None;
                    }
                    false => s.retry_at = Some(Instant::now() + RETRY_FAILED),
                }
            }
            if s.next_net <= now {
                // The window is widened by MARGIN when the provider is asked: stop short
                // of that too.
                let until = clock::unix_now() - (SETTLE + super::MARGIN).as_secs() as i64;
                let window = Window {
                    from: s.covered_until.min(until),
                    until,
                };
                if once(source, window, Vec::new(), &store, &metrics).await {
                    s.covered_until = until;
                    s.next_net = Instant::now() + recover.every;
                } else {
                    s.next_net = Instant::now() + RETRY_FAILED.min(recover.every);
                }
            }
        }
        let wake = state
            .values()
            .flat_map(|s| [s.retry_at.filter(|_| !s.gaps.is_empty()), Some(s.next_net)])
            .flatten()
            .min()
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            gap = found.recv() => match gap {
                Some(gap) => add(&mut state, gap),
                None => return,
            },
            _ = tokio::time::sleep_until(wake) => {}
            changed = sources.changed() => if changed.is_err() { return },
        }
    }
}

fn fresh(started: i64) -> Pending {
    Pending {
        gaps: Vec::new(),
        retry_at: None,
        covered_until: started,
        next_net: Instant::now() + crate::config::DEFAULT_RECOVER_EVERY,
        every: None,
        last_gaps: None,
    }
}

/// One recovery; true when it went through (its gaps are marked recovered).
async fn once(
    source: &Arc<Source>,
    window: Window,
    gaps: Vec<i64>,
    store: &Store,
    metrics: &Arc<Metrics>,
) -> bool {
    let why = if gaps.is_empty() { "safety net" } else { "gap" };
    let api = match super::api_for(source, metrics.clone()) {
        Ok(api) => api,
        Err(e) => {
            tracing::error!(source = source.name, error = %e, "cannot recover");
            return false;
        }
    };
    let (from, until) = (
        clock::iso_from_unix(window.from),
        clock::iso_from_unix(window.until),
    );
    match super::recover_window(&api, source, window, gaps, store, metrics).await {
        Ok(summary) => {
            tracing::info!(
                source = source.name,
                provider = api.provider(),
                why,
                from,
                until,
                "recovered: {summary}"
            );
            true
        }
        Err(e) => {
            tracing::warn!(
                source = source.name,
                provider = api.provider(),
                why,
                from,
                until,
                error = format!("{e:#}"),
                "recovery failed; trying again later"
            );
            false
        }
    }
}
