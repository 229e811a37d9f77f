//! Keys a request names and the receive path fetches (Amazon SNS's signing certificate),
//! and the outbound GETs a handshake asks for (SNS's `SubscribeURL`). The URLs were checked
//! by the scheme against where its provider keeps them; this module only fetches, bounded
//! in time and size, over HTTPS verified against the system's roots, and caches keys.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a fetch may take: SNS waits 15 s for an answer in all.
const TIMEOUT: Duration = Duration::from_secs(5);
/// The most a fetched document may hold: a certificate is about 2 KB.
const MAX_DOCUMENT: usize = 64 * 1024;
/// How long a fetched key is kept: SNS rotates its certificates rarely and names a new URL
/// when it does.
const KEEP: Duration = Duration::from_secs(24 * 3600);
/// Keys kept at most: one per region and rotation.
const MAX_KEYS: usize = 64;
/// How long a failed fetch is remembered: requests naming the same URL meanwhile are
/// answered 503 at once instead of each costing an outbound request.
const KEEP_FAILURE: Duration = Duration::from_secs(60);
/// Fetches in flight at once, over all sources: a flood of requests naming fresh URLs
/// waits here (up to the fetch timeout) rather than opening connections without end.
const MAX_FETCHES: usize = 4;

/// A fetched key, or why it could not be had, and when.
type Cached = (Result<Vec<u8>, String>, Instant);

pub struct Fetcher {
    /// Built on first use: only sources that fetch keys need it, and building it loads the
    /// system's CA certificates, which a minimal system may not have.
    client: std::sync::OnceLock<Result<reqwest::Client, String>>,
    keys: Mutex<HashMap<String, Cached>>,
    in_flight: tokio::sync::Semaphore,
}

impl Default for Fetcher {
    fn default() -> Fetcher {
        Fetcher {
            client: std::sync::OnceLock::new(),
            keys: Mutex::new(HashMap::new()),
            in_flight: tokio::sync::Semaphore::new(MAX_FETCHES),
        }
    }
}

impl Fetcher {
    fn client(&self) -> Result<&reqwest::Client, String> {
        self.client
            .get_or_init(|| {
                build().map_err(|e| {
                    format!(
                        "cannot make an HTTPS client ({e:#}); is the ca-certificates package \
                         installed?"
                    )
                })
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The key at `url`, from the cache or fetched and turned into a key by `parse`. A
    /// failure is remembered for a minute.
    pub async fn key(
        &self,
        url: &str,
        parse: impl FnOnce(&[u8]) -> Result<Vec<u8>, String>,
    ) -> Result<Vec<u8>, String> {
        if let Some((found, at)) = self
            .keys
            .lock()
            .expect("no panics while holding the lock")
            .get(url)
        {
            let keep = if found.is_ok() { KEEP } else { KEEP_FAILURE };
            if at.elapsed() < keep {
                return found.clone();
            }
        }
        let found = match self.get(url).await {
            Ok(document) => parse(&document),
            Err(e) => Err(e),
        };
        let mut keys = self.keys.lock().expect("no panics while holding the lock");
        if keys.len() >= MAX_KEYS {
            // The oldest goes, so that the keys in use stay.
            if let Some(oldest) = keys
                .iter()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(u, _)| u.clone())
            {
                keys.remove(&oldest);
            }
        }
        keys.insert(url.to_owned(), (found.clone(), Instant::now()));
        found
    }

    /// GETs `url`; the body if it answered 2xx.
    pub async fn get(&self, url: &str) -> Result<Vec<u8>, String> {
        let _permit = tokio::time::timeout(TIMEOUT, self.in_flight.acquire())
            .await
            .map_err(|_| format!("GET {url}: too many fetches in flight"))?
            .map_err(|_| "the fetcher is closed".to_owned())?;
        let mut resp = self
            .client()?
            .get(url)
            .send()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        if !resp.status().is_success() {
            return Err(format!("GET {url}: answered {}", resp.status()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| format!("GET {url}: {e}"))? {
            if body.len() + chunk.len() > MAX_DOCUMENT {
                return Err(format!("GET {url}: more than {MAX_DOCUMENT} bytes"));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

/// The HTTPS client: the system's roots, no redirects, no proxy from the environment.
fn build() -> anyhow::Result<reqwest::Client> {
    let builder = reqwest::Client::builder()
        .timeout(TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .user_agent(concat!("hookinbox/", env!("CARGO_PKG_VERSION")));
    #[cfg(feature = "sns-test-host")]
    let builder = match std::env::var_os("HOOKINBOX_TEST_SNS_CA") {
        Some(path) => {
            let pem = std::fs::read(&path)?;
            builder.tls_certs_only([reqwest::Certificate::from_pem(&pem)?])
        }
        None => builder,
    };
    Ok(builder.build()?)
}
