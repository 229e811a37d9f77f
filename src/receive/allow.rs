//! Who may send to a source: its `allow_from`, the addresses and ranges written in the file
//! and the lists providers publish of the addresses their webhooks come from (which
//! provider publishes one, where and in what shape, its `PROVIDER` declares).
//!
//! Invariant: a request to a source with `allow_from` is read past its head only when its
//! client (the peer, or what a trusted proxy says) is allowed. Where a list the source names
//! has never been had, the request is answered 503, never let through and never refused for
//! good: the provider retries, and nothing is lost once the list arrives.
//!
//! A list is fetched by serve at start-up and every [`REFRESH`], and kept in the inbox
//! (`kept`, named `allow:<provider>`, with when it was fetched). At start-up the kept list
//! is read before the listener takes a request, so a restart, and a refresh that fails, go
//! on with the last good list; the alerts say when it is older than [`STALE_AFTER`]. An
//! answer that cannot be read, or that lists nothing, is a failed refresh: it never
//! replaces a good list.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;

use crate::config::{AllowFrom, AllowList, Source};
use crate::metrics::Metrics;
use crate::proxy::Cidr;
use crate::store::{self, Store};

/// How often a list is fetched: the providers change theirs rarely and announce it (Stripe
/// a week ahead); GitHub asks that its meta API be checked "frequently".
pub const REFRESH: Duration = Duration::from_secs(24 * 3600);
/// A list older than this is *stale* (an alert): a week of failed refreshes, in which a
/// range the provider added is refused.
pub const STALE_AFTER: Duration = Duration::from_secs(7 * 86_400);
/// After a failed fetch, the next waits this long, doubled after each further failure up
/// to [`RETRY_MAX`]: soon enough that a source without any list is not refused for long.
const RETRY_FIRST: Duration = Duration::from_secs(30);
const RETRY_MAX: Duration = Duration::from_secs(3600);
/// One fetch's whole time.
const FETCH_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest list read: GitHub's meta answer, which lists every service's ranges, is a
/// few hundred KB.
const MAX_LIST: usize = 4 * 1024 * 1024;

/// The prefix of the lists' names in the inbox's `kept` table.
pub const KEPT_PREFIX: &str = "allow:";

/// The name `provider`'s list is kept under.
pub fn kept_name(provider: &str) -> String {
    format!("{KEPT_PREFIX}{provider}")
}

/// What the check decided for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allowed {
    Yes,
    /// The client is in none of the source's ranges and lists: 403.
    No,
    /// Not in what is known, and this provider's list has never been had: 503.
    NoList(&'static str),
}

/// The providers' lists as last fetched (or read from the inbox), by provider name.
#[derive(Default)]
pub struct Lists {
    known: RwLock<HashMap<&'static str, Arc<[Cidr]>>>,
}

impl Lists {
    /// Whether `client` may send to a source that allows `allow`.
    pub fn check(&self, allow: &AllowFrom, client: IpAddr) -> Allowed {
        if allow.ranges.iter().any(|r| r.contains(client)) {
            return Allowed::Yes;
        }
        let known = self.known.read().expect("no panics while holding the lock");
        let mut missing = None;
        for list in &allow.lists {
            match known.get(list.name()) {
                Some(ranges) if ranges.iter().any(|r| r.contains(client)) => return Allowed::Yes,
                Some(_) => {}
                None => missing = missing.or(Some(list.name())),
            }
        }
        match missing {
            Some(provider) => Allowed::NoList(provider),
            None => Allowed::No,
        }
    }

    fn set(&self, provider: &'static str, ranges: Vec<Cidr>) {
        self.known
            .write()
            .expect("no panics while holding the lock")
            .insert(provider, ranges.into());
    }

    /// Forgets the lists no source names any more: named again, a list is read back from
    /// the inbox, with its age.
    fn keep_only(&self, wanted: &[AllowList]) {
        self.known
            .write()
            .expect("no panics while holding the lock")
            .retain(|provider, _| wanted.iter().any(|l| l.name() == *provider));
    }

    fn has(&self, provider: &str) -> bool {
        self.known
            .read()
            .expect("no panics while holding the lock")
            .contains_key(provider)
    }

    /// Reads the kept lists of the providers `sources` name that are not known yet: at
    /// start-up, before the first request, and for a provider a reload adds.
    pub async fn load_kept(&self, store: &Store, metrics: &Metrics, sources: &[Arc<Source>]) {
        for list in wanted(sources) {
            let provider = list.name();
            if self.has(provider) {
                continue;
            }
            let name = kept_name(provider);
            let kept = store.read(move |db| Ok(store::kept::get(db, &name)?)).await;
            match kept {
                Ok(Some(kept)) => match from_kept(&kept.value) {
                    Ok(ranges) => {
                        tracing::info!(provider, ranges = ranges.len(), fetched = %kept.updated_at,
                            "using the kept list of the provider's webhook addresses");
                        self.set(provider, ranges);
                        if let Ok(at) = humantime::parse_rfc3339(&kept.updated_at) {
                            metrics.allow_list_fetched(provider, at);
                        }
                    }
                    Err(e) => tracing::warn!(provider, error = %e,
                        "the kept list of the provider's webhook addresses cannot be read; \
                        waiting for a fresh one"),
                },
                Ok(None) => tracing::warn!(
                    provider,
                    "no list of the provider's webhook addresses is kept yet: requests to the \
                    sources that name it are answered 503 until one is fetched"
                ),
                Err(e) => tracing::warn!(provider, error = %format!("{e:#}"),
                    "could not read the kept list of the provider's webhook addresses"),
            }
        }
    }
}

/// The lists `sources` name, each once.
fn wanted(sources: &[Arc<Source>]) -> Vec<AllowList> {
    let mut lists: Vec<AllowList> = Vec::new();
    for list in sources
        .iter()
        .filter_map(|s| s.allow_from.as_ref())
        .flat_map(|a| &a.lists)
    {
        if !lists.iter().any(|l| l.name() == list.name()) {
            lists.push(list.clone());
        }
    }
    lists
}

/// A list as the inbox keeps it: a JSON array of ranges as text.
fn to_kept(ranges: &[Cidr]) -> String {
    let texts: Vec<String> = ranges.iter().map(Cidr::to_string).collect();
    serde_json::to_string(&texts).expect("strings serialise")
}

fn from_kept(value: &str) -> Result<Vec<Cidr>, String> {
    let texts: Vec<String> = serde_json::from_str(value).map_err(|e| e.to_string())?;
    texts.iter().map(|t| Cidr::parse(t)).collect()
}

/// Fetches the lists the sources name, at start-up and every [`REFRESH`] (sooner after a
/// failure), until `stop`; a provider a reload adds is read from the inbox and fetched at
/// once.
pub async fn run(
    lists: Arc<Lists>,
    store: Store,
    metrics: Arc<Metrics>,
    mut sources: watch::Receiver<Vec<Arc<Source>>>,
    mut stop: watch::Receiver<bool>,
) {
    let client = reqwest::Client::builder()
        .timeout(FETCH_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .user_agent(concat!("hookinbox/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| format!("cannot make an HTTPS client ({e}); is ca-certificates installed?"));
    // When each list is due, how many fetches of it failed in a row, and from where.
    let mut due: HashMap<&'static str, (Instant, u32, reqwest::Url)> = HashMap::new();
    loop {
        let current = sources.borrow_and_update().clone();
        let wanted = wanted(&current);
        lists.keep_only(&wanted);
        lists.load_kept(&store, &metrics, &current).await;
        // A list no source names any more is forgotten; one a reload moved to another URL
        // is fetched from there at once.
        due.retain(|provider, (_, _, url)| {
            wanted
                .iter()
                .any(|l| l.name() == *provider && l.url == *url)
        });
        for list in &wanted {
            let (at, failures, _) =
                due.entry(list.name())
                    .or_insert((Instant::now(), 0, list.url.clone()));
            if *at > Instant::now() {
                continue;
            }
            let fetched = match &client {
                Ok(client) => fetch(client, list).await,
                Err(e) => Err(e.clone()),
            };
            let provider = list.name();
            match fetched {
                Ok(ranges) => {
                    metrics.allow_list_refreshed(provider, true);
                    let (name, value) = (kept_name(provider), to_kept(&ranges));
                    let kept = store
                        .change(move |db, now| store::kept::put(db, &name, &value, now))
                        .await;
                    if let Err(e) = kept {
                        tracing::warn!(provider, error = %format!("{e:#}"),
                            "could not keep the provider's address list in the inbox; it is \
                            used, and fetched again after the next restart");
                    }
                    tracing::info!(provider, ranges = ranges.len(), url = %list.url,
                        "fetched the provider's webhook addresses");
                    lists.set(provider, ranges);
                    metrics.allow_list_fetched(provider, SystemTime::now());
                    (*at, *failures) = (Instant::now() + REFRESH, 0);
                }
                Err(e) => {
                    metrics.allow_list_refreshed(provider, false);
                    *failures += 1;
                    let wait = RETRY_FIRST
                        .saturating_mul(2u32.saturating_pow(*failures - 1))
                        .min(RETRY_MAX);
                    let using = if lists.has(provider) {
                        "the last good list stays in use"
                    } else {
                        "its sources answer 503 until a list is had"
                    };
                    tracing::warn!(provider, url = %list.url, error = %e,
                        retry_in_s = wait.as_secs(),
                        "could not fetch the provider's webhook addresses; {using}");
                    *at = Instant::now() + wait;
                }
            }
        }
        let next = due.values().map(|(at, _, _)| *at).min();
        let sleep = next.map_or(REFRESH, |at| at.saturating_duration_since(Instant::now()));
        tokio::select! {
            () = tokio::time::sleep(sleep) => {}
            changed = sources.changed() => if changed.is_err() { return },
            _ = stop.changed() => return,
        }
    }
}

/// One list, fetched and read as its provider documents it.
async fn fetch(client: &reqwest::Client, list: &AllowList) -> Result<Vec<Cidr>, String> {
    let addresses = list
        .provider
        .addresses
        .as_ref()
        .ok_or("the provider publishes no list")?;
    let mut answer = client
        .get(list.url.clone())
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !answer.status().is_success() {
        return Err(format!("answered {}", answer.status()));
    }
    let mut body = Vec::new();
    while let Some(chunk) = answer.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > MAX_LIST {
            return Err(format!("more than {MAX_LIST} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    let ranges = (addresses.parse)(&body)
        .map_err(|e| format!("not the list {} documents: {e}", list.name()))?;
    if ranges.is_empty() {
        return Err("the list names no address".into());
    }
    Ok(ranges)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_is_allowed_by_a_range_or_a_known_list_and_waits_for_a_missing_one() {
        let github = crate::scheme::providers::find("github").unwrap();
        let stripe = crate::scheme::providers::find("stripe").unwrap();
        let list = |provider| AllowList {
            provider,
            url: reqwest::Url::parse("https://example.invalid/").unwrap(),
        };
        let allow = AllowFrom {
            ranges: vec![Cidr::parse("10.0.0.0/8").unwrap()],
            lists: vec![list(github), list(stripe)],
        };
        let lists = Lists::default();
        let ip = |t: &str| t.parse::<IpAddr>().unwrap();
        assert_eq!(lists.check(&allow, ip("10.1.2.3")), Allowed::Yes);
        assert_eq!(lists.check(&allow, ip("::ffff:10.1.2.3")), Allowed::Yes);
        assert_eq!(
            lists.check(&allow, ip("192.30.252.1")),
            Allowed::NoList("github")
        );
        lists.set("github", vec![Cidr::parse("192.30.252.0/22").unwrap()]);
        assert_eq!(lists.check(&allow, ip("192.30.252.1")), Allowed::Yes);
        assert_eq!(
            lists.check(&allow, ip("203.0.113.9")),
            Allowed::NoList("stripe")
        );
        lists.set("stripe", vec![Cidr::parse("3.18.12.63").unwrap()]);
        assert_eq!(lists.check(&allow, ip("203.0.113.9")), Allowed::No);
        assert_eq!(lists.check(&allow, ip("3.18.12.63")), Allowed::Yes);
        let kept = to_kept(&[
            Cidr::parse("2a0a:a440::/29").unwrap(),
            Cidr::parse("3.18.12.63").unwrap(),
        ]);
        assert_eq!(kept, r#"["2a0a:a440::/29","3.18.12.63"]"#);
        assert_eq!(from_kept(&kept).unwrap().len(), 2);
        assert!(from_kept("{").is_err());
    }
}
