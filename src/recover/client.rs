//! Calls to a provider's API: one origin, bounded answers, rate limits respected, every call
//! counted and logged.
//!
//! Rate limits, as the providers document them: GitHub answers 403 or 429 with
//! `x-ratelimit-remaining: 0` and `x-ratelimit-reset` (unix seconds) for its primary limit,
//! and `retry-after` for its secondary limits; Stripe answers 429, without a header, and
//! asks for exponential backoff. A wait longer than [`MAX_WAIT`] is not waited out: the
//! recovery fails, says until when, and the next one tries again.

use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderValue};
use reqwest::{Method, StatusCode, Url};

use crate::clock;
use crate::metrics::{ApiLabels, Metrics};

/// One call's whole time: connect, send, the answer's last byte.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest answer read: a page of 100 Stripe events is a few MiB at most.
const MAX_ANSWER: usize = 32 * 1024 * 1024;
/// Tries per call: rate-limited, 5xx and unreachable answers are tried again.
const TRIES: u32 = 5;
/// The longest wait for a rate limit or a backoff before the recovery gives up for now.
pub const MAX_WAIT: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    #[error("{provider} refused the request ({status}): {message}{hint}")]
    Refused {
        provider: &'static str,
        status: u16,
        message: String,
        hint: &'static str,
    },
    #[error("{provider}'s rate limit holds until {until}; the next recovery tries again")]
    RateLimited {
        provider: &'static str,
        until: String,
    },
    #[error("{provider}'s API could not be reached: {error}")]
    Unreachable {
        provider: &'static str,
        #[source]
        error: Arc<reqwest::Error>,
    },
    #[error("{provider}'s answer is not what its API documents: {what}")]
    Malformed {
        provider: &'static str,
        what: String,
    },
    #[error("{0}")]
    Other(String),
}

/// An answer: status, headers and the whole body.
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// A client for one source's provider API.
pub struct Client {
    http: reqwest::Client,
    /// Every URL called is on this origin (a `Link` to elsewhere is refused: the token
    /// goes with each request).
    base: Url,
    provider: &'static str,
    labels: (String, &'static str),
    metrics: Arc<Metrics>,
    /// A success said the limit is used up: no call before this unix second.
    exhausted_until: Mutex<Option<i64>>,
}

impl Client {
    pub fn new(
        base: &Url,
        source: &str,
        provider: &'static str,
        metrics: Arc<Metrics>,
    ) -> Result<Client, ApiError> {
        let http = reqwest::Client::builder()
            .timeout(CALL_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("hookinbox/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ApiError::Other(format!("building the {provider} API client: {e}")))?;
        // A base with a path (GitHub Enterprise Server's /api/v3) joins relative paths
        // below it only when it ends in '/'.
        let mut base = base.clone();
        if !base.path().ends_with('/') {
            base.set_path(&format!("{}/", base.path()));
        }
        Ok(Client {
            http,
            base,
            provider,
            labels: (source.to_owned(), provider),
            metrics,
            exhausted_until: Mutex::new(None),
        })
    }

    /// `path` (relative, no leading '/') below the base URL.
    pub fn url(&self, path: &str) -> Result<Url, ApiError> {
        self.base
            .join(path)
            .map_err(|e| ApiError::Other(format!("{path}: {e}")))
    }

    /// Whether `url` is on the API's own origin.
    pub fn same_origin(&self, url: &Url) -> bool {
        url.origin() == self.base.origin()
    }

    fn count(&self, result: &'static str) {
        self.metrics
            .recovery_api_requests
            .get_or_create(&ApiLabels {
                source: self.labels.0.clone(),
                provider: self.labels.1,
                result,
            })
            .inc();
    }

    /// Sends a request with `headers` (credentials included, marked sensitive by the
    /// caller), trying again after rate limits, 5xx answers and unreachable moments. Any
    /// 2xx is returned; any other answer becomes an [`ApiError::Refused`] with the
    /// provider's message.
    pub async fn send(
        &self,
        method: Method,
        url: Url,
        headers: impl Fn() -> Result<HeaderMap, ApiError>,
    ) -> Result<Answer, ApiError> {
        if !self.same_origin(&url) {
            return Err(ApiError::Malformed {
                provider: self.provider,
                what: format!(
                    "a link to another origin ({})",
                    url.origin().ascii_serialization()
                ),
            });
        }
        let mut backoff = Duration::from_secs(1);
        for attempt in 1..=TRIES {
            self.wait_for_exhausted_limit().await?;
            let sent = self
                .http
                .request(method.clone(), url.clone())
                .headers(headers()?)
                .send()
                .await;
            let answer = match sent {
                Ok(response) => self.read(response).await,
                Err(e) => Err(e),
            };
            let answer = match answer {
                Ok(a) => a,
                Err(e) => {
                    self.count("error");
                    tracing::warn!(provider = self.provider, %method, path = url.path(),
                        attempt, error = %e, "the API could not be reached");
                    if attempt == TRIES {
                        return Err(ApiError::Unreachable {
                            provider: self.provider,
                            error: Arc::new(e),
                        });
                    }
                    self.sleep(backoff).await?;
                    backoff *= 2;
                    continue;
                }
            };
            let status = answer.status;
            if let Some(wait) = rate_limited(&answer, clock::unix_now()) {
                self.count("rate_limited");
                let wait = wait.unwrap_or(backoff);
                tracing::warn!(provider = self.provider, %method, path = url.path(),
                    status = status.as_u16(), wait_s = wait.as_secs(), "rate limited; waiting");
                if attempt == TRIES || wait > MAX_WAIT {
                    return Err(ApiError::RateLimited {
                        provider: self.provider,
                        until: until(wait),
                    });
                }
                self.sleep(wait).await?;
                backoff *= 2;
                continue;
            }
            if status.is_server_error() && attempt < TRIES {
                self.count("error");
                tracing::warn!(provider = self.provider, %method, path = url.path(),
                    status = status.as_u16(), attempt, "the API failed; trying again");
                self.sleep(backoff).await?;
                backoff *= 2;
                continue;
            }
            if !status.is_success() {
                self.count("error");
                let message = provider_message(&answer.body);
                tracing::warn!(provider = self.provider, %method, path = url.path(),
                    status = status.as_u16(), message, "the API refused the request");
                return Err(ApiError::Refused {
                    provider: self.provider,
                    status: status.as_u16(),
                    message,
                    hint: hint(status),
                });
            }
            self.count("ok");
            tracing::debug!(provider = self.provider, %method, path = url.path(),
                status = status.as_u16(), bytes = answer.body.len(), "API call");
            self.note_remaining(&answer.headers);
            return Ok(answer);
        }
        unreachable!("the last try returns")
    }

    async fn read(&self, mut response: reqwest::Response) -> Result<Answer, reqwest::Error> {
        let status = response.status();
        let headers = response.headers().clone();
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await? {
            if body.len() + chunk.len() > MAX_ANSWER {
                // Kept as far as the limit: the parse then says it is cut short.
                break;
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Answer {
            status,
            headers,
            body: body.into(),
        })
    }

    async fn sleep(&self, wait: Duration) -> Result<(), ApiError> {
        if wait > MAX_WAIT {
            return Err(ApiError::RateLimited {
                provider: self.provider,
                until: until(wait),
            });
        }
        tokio::time::sleep(wait).await;
        Ok(())
    }

    /// GitHub says on a success how many calls are left; at zero, the next call waits for
    /// the reset instead of spending one to hear 403.
    fn note_remaining(&self, headers: &HeaderMap) {
        let remaining = number(headers, "x-ratelimit-remaining");
        let reset = number(headers, "x-ratelimit-reset");
        if let (Some(0), Some(reset)) = (remaining, reset) {
            *self
                .exhausted_until
                .lock()
                .expect("no panics while holding the lock") = Some(reset);
        }
    }

    async fn wait_for_exhausted_limit(&self) -> Result<(), ApiError> {
        let until = self
            .exhausted_until
            .lock()
            .expect("no panics while holding the lock")
            .take();
        if let Some(until) = until {
            let wait = until.saturating_sub(clock::unix_now());
            if wait > 0 {
                self.sleep(Duration::from_secs(wait as u64)).await?;
            }
        }
        Ok(())
    }
}

/// When a wait of `wait` from now ends, as inbox text (a provider's huge value saturates).
fn until(wait: Duration) -> String {
    let secs = i64::try_from(wait.as_secs()).unwrap_or(i64::MAX);
    clock::iso_from_unix(clock::unix_now().saturating_add(secs))
}

/// Some(wait) when the answer is a rate limit: the wait it asks for, if it says.
fn rate_limited(answer: &Answer, now: i64) -> Option<Option<Duration>> {
    let status = answer.status;
    let remaining = number(&answer.headers, "x-ratelimit-remaining");
    let retry_after = answer
        .headers
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.trim()
                .parse::<u64>()
                .ok()
                .map(Duration::from_secs)
                .or_else(|| {
                    let at = httpdate::parse_http_date(v).ok()?;
                    Some(Duration::from_secs((clock::unix(at) - now).max(0) as u64))
                })
        });
    let limited = status == StatusCode::TOO_MANY_REQUESTS
        || (status == StatusCode::FORBIDDEN && (remaining == Some(0) || retry_after.is_some()));
    if !limited {
        return None;
    }
    if retry_after.is_some() {
        return Some(retry_after);
    }
    let reset = number(&answer.headers, "x-ratelimit-reset");
    Some(match (remaining, reset) {
        // A second past the reset: GitHub's clock and ours are not the same clock.
        (Some(0), Some(reset)) => Some(Duration::from_secs(
            (reset.saturating_sub(now).max(0) as u64).saturating_add(1),
        )),
        _ => None,
    })
}

fn number(headers: &HeaderMap, name: &str) -> Option<i64> {
    headers.get(name)?.to_str().ok()?.trim().parse().ok()
}

/// The provider's own words in an error answer: GitHub's `message`, Stripe's
/// `error.message`; bounded, since it goes to logs and terminals.
fn provider_message(body: &[u8]) -> String {
    let value: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let message = value
        .get("message")
        .or_else(|| value.pointer("/error/message"))
        .and_then(|m| m.as_str())
        .map(str::to_owned)
        .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
    message.chars().take(300).collect()
}

fn hint(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => " (check the source's recover token or key)",
        403 => " (the token or key may not read or redeliver this hook's deliveries)",
        404 => " (check repo or org and hook_id, and that the token can see the hook)",
        _ => "",
    }
}

/// A credential as a header value that logs and debug output never show.
pub fn bearer(secret: &[u8]) -> Result<HeaderValue, ApiError> {
    let mut value = HeaderValue::from_bytes(&[b"Bearer ", secret].concat())
        .map_err(|_| ApiError::Other("the API credential is not valid in a header".into()))?;
    value.set_sensitive(true);
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, headers: &[(&'static str, &str)]) -> Answer {
        let mut map = HeaderMap::new();
        for (n, v) in headers {
            map.insert(*n, HeaderValue::from_str(v).unwrap());
        }
        Answer {
            status: StatusCode::from_u16(status).unwrap(),
            headers: map,
            body: Bytes::new(),
        }
    }

    #[test]
    fn rate_limits_as_github_and_stripe_answer_them() {
        let now = 1_000;
        // GitHub's primary limit: 403 (or 429) with the reset time.
        let primary = answer(
            403,
            &[
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", "1030"),
            ],
        );
        assert_eq!(
            rate_limited(&primary, now),
            Some(Some(Duration::from_secs(31)))
        );
        // Its secondary limits: retry-after.
        let secondary = answer(
            403,
            &[("retry-after", "60"), ("x-ratelimit-remaining", "12")],
        );
        assert_eq!(
            rate_limited(&secondary, now),
            Some(Some(Duration::from_secs(60)))
        );
        // Stripe: 429 and nothing to say how long.
        assert_eq!(rate_limited(&answer(429, &[]), now), Some(None));
        // A 403 that is not a limit is a refusal (a token without the permission).
        assert_eq!(
            rate_limited(&answer(403, &[("x-ratelimit-remaining", "4999")]), now),
            None
        );
        assert_eq!(
            rate_limited(&answer(200, &[("x-ratelimit-remaining", "0")]), now),
            None
        );
    }

    #[test]
    fn provider_messages_are_read_from_either_shape_and_bounded() {
        assert_eq!(
            provider_message(br#"{"message":"Bad credentials"}"#),
            "Bad credentials"
        );
        assert_eq!(
            provider_message(br#"{"error":{"message":"Invalid API Key provided"}}"#),
            "Invalid API Key provided"
        );
        assert_eq!(provider_message(&[b'x'; 1000]).len(), 300);
    }
}
