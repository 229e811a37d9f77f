//! URL targets (`url = "https://…"`): an HTTP POST of the exact raw body with the
//! provider's headers, the idempotency key and hookinbox's own headers; with `sign_secret`,
//! hookinbox's own Standard Webhooks signature in place of the provider's.
//!
//! reqwest with rustls on ring; no proxy from the environment (a stray `HTTP_PROXY` on a VM
//! would silently reroute local forwarding); redirects are never followed (a 3xx is a
//! failure, as in Standard Webhooks); connect and total timeouts. 2xx is delivered, 410
//! gone, 429 and 503 wait for `Retry-After`, anything else is tried again.

use std::time::{Duration, SystemTime};

use futures_util::future::BoxFuture;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde::de::MapAccess;

use super::{
    Attempt, AttemptResult, Context, Description, Destination, Forwarder, TargetKind, Disposition,
};
use crate::manual::{IfAbsent, Key};
use crate::scheme::providers::standard_webhooks;
use crate::secret::Secret;

/// At most this long to connect, within the target's total timeout.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Bytes of a response body kept with the attempt, for the operator.
pub const OUTPUT_LIMIT: usize = 2048;

/// Request headers that are not forwarded: hop-by-hop headers, what the client sets itself,
/// and the idempotency key hookinbox sets (its `X-Hookinbox-*` headers go by prefix).
const NOT_FORWARDED: [&str; 11] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "expect",
    "host",
    "content-length",
    "idempotency-key",
];

/// A url target's keys, as written.
#[derive(Default)]
pub struct Written {
    url: Option<String>,
    sign_secret: Option<String>,
}

impl TargetKind for Written {
    const KEYS: &'static [Key] = &[
        Key {
            name: "url",
            form: "http:// or https:// URL",
            if_absent: IfAbsent::Off,
            meaning: "POST the event here, with the provider's headers. Exactly one of \
                          url and command.",
        },
        Key {
            name: "sign_secret",
            form: "secret",
            if_absent: IfAbsent::Off,
            meaning: "A Standard Webhooks secret (whsec_…): forwarded requests carry \
                          hookinbox's own webhook-signature made with it, in place of the \
                          provider's. URL targets only.",
        },
    ];

    const EXAMPLE: &'static str = "url = \"http://127.0.0.1:3000/hooks\"";

    fn read<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "url" => self.url = Some(map.next_value()?),
            _ => self.sign_secret = Some(map.next_value()?),
        }
        Ok(())
    }

    fn check(self, cx: &Context) -> Result<Box<dyn Destination>, String> {
        let at = cx.at;
        let url = self.url.expect("a url target has a url");
        let parsed =
            reqwest::Url::parse(&url).map_err(|e| format!("{at}.url {url:?} is not a URL: {e}"))?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
            return Err(format!(
                "{at}.url {url:?} must be http:// or https:// with a host"
            ));
        }
        let sign_secret = match self.sign_secret {
            None => None,
            Some(reference) => {
                let secret =
                    (cx.secret)(&reference).map_err(|e| format!("{at}.sign_secret: {e}"))?;
                standard_webhooks::decode_secret(&secret)
                    .map_err(|e| format!("{at}.sign_secret: {e}"))?;
                Some(secret)
            }
        };
        Ok(Box::new(UrlSettings { url, sign_secret }))
    }

    fn refused(key: &str) -> String {
        format!(
            "{key} is for url targets; a command or a postgres table is local and gets its \
             metadata as variables or columns"
        )
    }
}

/// A url target, checked.
#[derive(Debug)]
pub struct UrlSettings {
    url: String,
    /// When set, forwarded requests carry a Standard Webhooks signature made with it.
    sign_secret: Option<Secret>,
}

impl Destination for UrlSettings {
    fn describe(&self) -> Description {
        Description {
            key: Written::NAME,
            json: self.url.clone().into(),
            text: self.url.clone(),
        }
    }

    fn forwarder(&self, timeout: Duration) -> anyhow::Result<Box<dyn Forwarder>> {
        let key = self
            .sign_secret
            .as_ref()
            .map(|s| standard_webhooks::decode_secret(s).map_err(anyhow::Error::msg))
            .transpose()?
            .map(|bytes| ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &bytes));
        Ok(Box::new(UrlTarget::new(&self.url, timeout, key)?))
    }
}

/// A url target, running: its HTTP client.
pub struct UrlTarget {
    client: reqwest::Client,
    url: reqwest::Url,
    /// The key of the target's `sign_secret`.
    sign_key: Option<ring::hmac::Key>,
}

impl UrlTarget {
    pub fn new(
        url: &str,
        timeout: Duration,
        sign_key: Option<ring::hmac::Key>,
    ) -> anyhow::Result<UrlTarget> {
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(CONNECT_TIMEOUT.min(timeout))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .user_agent(concat!("hookinbox/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(UrlTarget {
            client,
            url: reqwest::Url::parse(url)?,
            sign_key,
        })
    }

    pub async fn post(&self, a: &Attempt<'_>) -> AttemptResult {
        // Headers that the request's own Connection header named are hop-by-hop too.
        let named_by_connection: Vec<String> = a
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("connection"))
            .flat_map(|(_, v)| v.split(',').map(|h| h.trim().to_ascii_lowercase()))
            .collect();
        let mut headers = HeaderMap::new();
        for (name, value) in a.headers {
            let lower = name.to_ascii_lowercase();
            if NOT_FORWARDED.contains(&lower.as_str())
                || named_by_connection.contains(&lower)
                || lower.starts_with("x-hookinbox-")
                // Replaced by hookinbox's own signature when the target has a sign_secret.
                || (self.sign_key.is_some() && standard_webhooks::is_signature_header(&lower))
            {
                continue;
            }
            // from_bytes keeps non-ASCII (obs-text) values that from_str would refuse.
            match (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_bytes(value.as_bytes()),
            ) {
                (Ok(n), Ok(v)) => {
                    headers.append(n, v);
                }
                _ => {
                    tracing::debug!(header = %name, "a stored header is not a valid HTTP header; not forwarded")
                }
            }
        }
        let mut put = |name: &'static str, value: &str| {
            if let Ok(v) = HeaderValue::from_bytes(value.as_bytes()) {
                headers.insert(HeaderName::from_static(name), v);
            }
        };
        put("idempotency-key", a.idempotency_key);
        put("x-hookinbox-event-id", a.event_id);
        put("x-hookinbox-source", a.source);
        put("x-hookinbox-attempt", &a.attempt.to_string());
        put("x-hookinbox-origin", a.origin);
        if let Some(addr) = a.remote_addr {
            put("x-forwarded-for", addr);
        }
        if let Some(key) = &self.sign_key {
            // The app verifies hookinbox with any Standard Webhooks library; the message id
            // is the idempotency key, stable across attempts.
            let now = crate::clock::unix_now();
            put("webhook-id", a.idempotency_key);
            put("webhook-timestamp", &now.to_string());
            put(
                "webhook-signature",
                &standard_webhooks::signature(key, a.idempotency_key, now, a.body),
            );
        }
        let response = self
            .client
            .post(self.url.clone())
            .headers(headers)
            .body(a.body.to_vec())
            .send()
            .await;
        let mut response = match response {
            Ok(r) => r,
            Err(e) if e.is_timeout() => return AttemptResult::timed_out(error_text(&e)),
            Err(e) => return AttemptResult::failed(error_text(&e)),
        };
        let status = response.status();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| retry_after(v, SystemTime::now()));
        // Keep the start of the answer; the rest is read and dropped, within the timeout.
        let mut output = Vec::new();
        while let Ok(Some(chunk)) = response.chunk().await {
            let room = OUTPUT_LIMIT.saturating_sub(output.len());
            output.extend_from_slice(&chunk[..chunk.len().min(room)]);
        }
        let verdict = match status.as_u16() {
            200..=299 => Disposition::Delivered,
            // The target says this event will never be accepted (Standard Webhooks).
            410 => Disposition::Gone,
            429 | 503 => Disposition::Retry { after: retry_after },
            _ => Disposition::Retry { after: None },
        };
        let error = match &verdict {
            Disposition::Delivered => None,
            _ if status.is_redirection() => {
                Some(format!("answered {status} (redirects are not followed)"))
            }
            _ => Some(format!("answered {status}")),
        };
        AttemptResult {
            disposition: verdict,
            status: Some(i64::from(status.as_u16())),
            error,
            output: (!output.is_empty()).then(|| String::from_utf8_lossy(&output).into_owned()),
            ambiguous: false,
        }
    }
}

impl Forwarder for UrlTarget {
    fn send<'a>(&'a self, a: &'a Attempt<'_>) -> BoxFuture<'a, AttemptResult> {
        Box::pin(self.post(a))
    }
}

/// A reqwest error with its causes, and timeouts named as such.
fn error_text(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        return "timed out (no complete answer within the target's timeout)".into();
    }
    let mut text = if e.is_connect() {
        "connection failed".to_owned()
    } else {
        "request failed".to_owned()
    };
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The longest `Retry-After` honoured; a target asking for more gets this.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 3600);

/// Parses a `Retry-After` value: delay-seconds or an HTTP date.
pub fn retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    let wait = match value.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => httpdate::parse_http_date(value)
            .ok()?
            .duration_since(now)
            .unwrap_or(Duration::ZERO),
    };
    Some(wait.min(MAX_RETRY_AFTER))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_seconds_and_dates() {
        let now = httpdate::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").unwrap();
        assert_eq!(retry_after("7", now), Some(Duration::from_secs(7)));
        assert_eq!(
            retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            retry_after("Wed, 21 Oct 2015 07:27:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after("99999999", now), Some(MAX_RETRY_AFTER));
        assert_eq!(retry_after("soon", now), None);
    }
}
