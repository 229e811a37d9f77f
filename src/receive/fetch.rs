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

pub struct Fetcher {
    client: reqwest::Client,
    keys: Mutex<HashMap<String, (Vec<u8>, Instant)>>,
}

impl Fetcher {
    pub fn new() -> anyhow::Result<Fetcher> {
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
        Ok(Fetcher {
            client: builder.build()?,
            keys: Mutex::new(HashMap::new()),
        })
    }

    /// The key at `url`, from the cache or fetched and turned into a key by `parse`.
    pub async fn key(
        &self,
        url: &str,
        parse: impl FnOnce(&[u8]) -> Result<Vec<u8>, String>,
    ) -> Result<Vec<u8>, String> {
        if let Some((key, at)) = self
            .keys
            .lock()
            .expect("no panics while holding the lock")
            .get(url)
            && at.elapsed() < KEEP
        {
            return Ok(key.clone());
        }
        let document = self.get(url).await?;
        let key = parse(&document)?;
        let mut keys = self.keys.lock().expect("no panics while holding the lock");
        if keys.len() >= MAX_KEYS {
            keys.clear();
        }
        keys.insert(url.to_owned(), (key.clone(), Instant::now()));
        Ok(key)
    }

    /// GETs `url`; the body if it answered 2xx.
    pub async fn get(&self, url: &str) -> Result<Vec<u8>, String> {
        let mut resp = self
            .client
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
