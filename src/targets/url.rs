//! URL targets (`url = "https://…"`): an HTTP POST of the exact raw body with the
//! provider's headers, the idempotency key and hookinbox's own headers; with `sign_secret`,
//! hookinbox's own Standard Webhooks signature in place of the provider's. An app that wants
//! credentials gets them: `headers` (values are secret references), a client certificate
//! (`client_cert`, `client_key`) and a private CA (`ca`, trusted beside the system's roots).
//! What `check` shows of a target never holds a secret: header names without values, and
//! a URL's password as `***`.
//!
//! reqwest with rustls on ring; no proxy from the environment (a stray `HTTP_PROXY` on a VM
//! would silently reroute local forwarding); redirects are never followed (a 3xx is a
//! failure, as in Standard Webhooks); connect and total timeouts. 2xx is delivered, 410
//! gone, 429 and 503 wait for `Retry-After`, anything else is tried again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
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
    headers: Option<BTreeMap<String, String>>,
    client_cert: Option<PathBuf>,
    client_key: Option<PathBuf>,
    ca: Option<PathBuf>,
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
        Key {
            name: "headers",
            form: "table of header name = secret",
            if_absent: IfAbsent::Off,
            meaning: "Headers every forwarded request carries, for an app that wants \
                          credentials: { Authorization = \"env:APP_TOKEN\", X-Tenant = \
                          \"acme\" }. Each value is a secret reference (env:, file:, \
                          credential:) or literal text, which check warns about when the \
                          name looks secret. They replace a provider's header of the same \
                          name; hookinbox's own (Idempotency-Key, X-Hookinbox-*) and the \
                          framing headers cannot be set. check shows the names, never the \
                          values.",
        },
        Key {
            name: "client_cert",
            form: "path to a PEM file",
            if_absent: IfAbsent::Off,
            meaning: "A client certificate (with its chain) for mutual TLS with an \
                          https:// url; client_key is its private key. Relative to the \
                          config file's directory.",
        },
        Key {
            name: "client_key",
            form: "path to a PEM file",
            if_absent: IfAbsent::Off,
            meaning: "The private key of client_cert (PKCS#8, PKCS#1 or SEC1 PEM), \
                          readable by the service only: check warns when every user may \
                          read it.",
        },
        Key {
            name: "ca",
            form: "path to a PEM file",
            if_absent: IfAbsent::Derived("the system's roots"),
            meaning: "Certificates of a private certificate authority, trusted for an \
                          https:// url in addition to the system's roots.",
        },
    ];

    const EXAMPLE: &'static str = "url = \"http://127.0.0.1:3000/hooks\"";

    fn read<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "url" => self.url = Some(map.next_value()?),
            "sign_secret" => self.sign_secret = Some(map.next_value()?),
            "headers" => self.headers = Some(map.next_value()?),
            "client_cert" => self.client_cert = Some(map.next_value()?),
            "client_key" => self.client_key = Some(map.next_value()?),
            _ => self.ca = Some(map.next_value()?),
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
        let headers: Vec<ExtraHeader> = match self.headers {
            None => Vec::new(),
            Some(written) => written
                .into_iter()
                .map(|(name, reference)| extra_header(cx, name, &reference))
                .collect::<Result<_, _>>()?,
        };
        if sign_secret.is_some()
            && let Some(h) = headers
                .iter()
                .find(|h| standard_webhooks::is_signature_header(h.name.as_str()))
        {
            return Err(format!(
                "{at}.headers.{}: with sign_secret, hookinbox signs the request and sets \
                 this header itself",
                h.name
            ));
        }
        let https = parsed.scheme() == "https";
        let only_https = |key: &str| {
            let shown = redacted(&url);
            format!("{at}.{key} is for an https:// url; {at}.url {shown:?} is not one")
        };
        let identity = match (self.client_cert, self.client_key) {
            (None, None) => None,
            (Some(cert), Some(key)) if https => Some(ClientIdentity::read(
                &cx.base.join(cert),
                &cx.base.join(key),
                at,
            )?),
            (Some(_), Some(_)) => return Err(only_https("client_cert")),
            (Some(_), None) => return Err(format!("{at}.client_cert needs client_key, its private key")),
            (None, Some(_)) => return Err(format!("{at}.client_key needs client_cert, its certificate")),
        };
        let ca = match self.ca {
            None => None,
            Some(_) if !https => return Err(only_https("ca")),
            Some(path) => Some(PrivateCa::read(&cx.base.join(path), at)?),
        };
        Ok(Box::new(UrlSettings {
            url,
            sign_secret,
            headers,
            identity,
            ca,
        }))
    }

    fn refused(key: &str) -> String {
        format!(
            "{key} is for url targets; a command or a postgres table is local and gets its \
             metadata as variables or columns"
        )
    }
}

/// One of a target's `headers`, checked: its value loaded.
fn extra_header(cx: &Context, name: String, reference: &str) -> Result<ExtraHeader, String> {
    let at = cx.at;
    let header = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| format!("{at}.headers: {name:?} is not a header name"))?;
    let lower = header.as_str();
    if NOT_FORWARDED.contains(&lower) || lower.starts_with("x-hookinbox-") {
        return Err(format!(
            "{at}.headers.{name}: hookinbox sets this header itself (the framing, the \
             idempotency key and X-Hookinbox-*); choose another name"
        ));
    }
    let value = (cx.secret)(reference).map_err(|e| format!("{at}.headers.{name}: {e}"))?;
    let mut value = HeaderValue::from_bytes(value.expose()).map_err(|_| {
        format!(
            "{at}.headers.{name}: the value is not a valid header value (a line break, or \
             a control character)"
        )
    })?;
    value.set_sensitive(true);
    let literal = !["env:", "file:", "credential:"]
        .iter()
        .any(|p| reference.starts_with(p));
    Ok(ExtraHeader {
        name: header,
        value,
        literal,
    })
}

/// A header of the target's `headers`.
#[derive(Debug)]
struct ExtraHeader {
    name: HeaderName,
    /// Marked sensitive: its `Debug` prints nothing of it.
    value: HeaderValue,
    /// Written in the configuration file rather than referred to.
    literal: bool,
}

impl ExtraHeader {
    /// Whether the name says it carries a credential, so that a literal value is worth a
    /// warning.
    fn looks_secret(&self) -> bool {
        let name = self.name.as_str();
        ["authorization", "cookie", "token", "secret", "key", "password", "signature"]
            .iter()
            .any(|word| name.contains(word))
    }
}

/// A client certificate and its key, for mutual TLS.
struct ClientIdentity {
    cert: PathBuf,
    key: PathBuf,
    /// The certificate chain, then the key, in PEM, as reqwest takes them.
    pem: Secret,
}

impl ClientIdentity {
    fn read(cert: &Path, key: &Path, at: &str) -> Result<ClientIdentity, String> {
        let read = |path: &Path, key: &str| {
            std::fs::read(path)
                .map_err(|e| format!("{at}.{key}: cannot read {}: {e}", path.display()))
        };
        let mut pem = read(cert, "client_cert")?;
        pem.push(b'\n');
        pem.extend_from_slice(&read(key, "client_key")?);
        let pem = Secret::new(pem);
        reqwest::Identity::from_pem(pem.expose()).map_err(|e| {
            format!(
                "{at}.client_cert/client_key: {} and {} are not a certificate and its \
                 private key in PEM ({e})",
                cert.display(),
                key.display()
            )
        })?;
        Ok(ClientIdentity {
            cert: cert.to_owned(),
            key: key.to_owned(),
            pem,
        })
    }
}

impl std::fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientIdentity")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

/// A private certificate authority's certificates.
#[derive(Debug)]
struct PrivateCa {
    path: PathBuf,
    pem: Vec<u8>,
}

impl PrivateCa {
    fn read(path: &Path, at: &str) -> Result<PrivateCa, String> {
        let pem = std::fs::read(path)
            .map_err(|e| format!("{at}.ca: cannot read {}: {e}", path.display()))?;
        match reqwest::Certificate::from_pem_bundle(&pem) {
            Ok(certs) if !certs.is_empty() => Ok(PrivateCa {
                path: path.to_owned(),
                pem,
            }),
            Ok(_) => Err(format!(
                "{at}.ca: {} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
                path.display()
            )),
            Err(e) => Err(format!(
                "{at}.ca: {} is not PEM certificates: {e}",
                path.display()
            )),
        }
    }
}

/// A url target, checked. Its `Debug` shows the URL redacted, as `check` does.
pub struct UrlSettings {
    url: String,
    /// When set, forwarded requests carry a Standard Webhooks signature made with it.
    sign_secret: Option<Secret>,
    headers: Vec<ExtraHeader>,
    identity: Option<ClientIdentity>,
    ca: Option<PrivateCa>,
}

impl std::fmt::Debug for UrlSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UrlSettings")
            .field("url", &redacted(&self.url))
            .field("sign_secret", &self.sign_secret)
            .field("headers", &self.headers)
            .field("identity", &self.identity)
            .field("ca", &self.ca)
            .finish()
    }
}

/// `url` as it may be shown: a password in it as `***`.
fn redacted(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        _ => url.to_owned(),
    }
}

impl Destination for UrlSettings {
    fn describe(&self) -> Description {
        let url = redacted(&self.url);
        let mut text = url.clone();
        if !self.headers.is_empty() {
            let names: Vec<&str> = self.headers.iter().map(|h| h.name.as_str()).collect();
            text.push_str(&format!(" with headers {}", names.join(", ")));
        }
        if let Some(id) = &self.identity {
            text.push_str(&format!(", client certificate {}", id.cert.display()));
        }
        if let Some(ca) = &self.ca {
            text.push_str(&format!(", trusting {} too", ca.path.display()));
        }
        Description {
            key: Written::NAME,
            json: url.into(),
            text,
        }
    }

    fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        for h in self.headers.iter().filter(|h| h.literal && h.looks_secret()) {
            out.push(format!(
                "headers.{} is written in the config file; prefer \"env:NAME\", \
                 \"file:/etc/hookinbox/secrets/NAME\" or \"credential:NAME\"",
                h.name
            ));
        }
        if let Some(id) = &self.identity
            && crate::secret::world_readable(&id.key)
        {
            out.push(format!(
                "client_key {} is readable by every user; chmod 640 it, owned by root and \
                 the service's group",
                id.key.display()
            ));
        }
        out
    }

    fn forwarder(&self, timeout: Duration) -> anyhow::Result<Box<dyn Forwarder>> {
        let key = self
            .sign_secret
            .as_ref()
            .map(|s| standard_webhooks::decode_secret(s).map_err(anyhow::Error::msg))
            .transpose()?
            .map(|bytes| ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &bytes));
        let mut client = client_builder(timeout);
        if let Some(id) = &self.identity {
            client = client.identity(reqwest::Identity::from_pem(id.pem.expose())?);
        }
        if let Some(ca) = &self.ca {
            client = client.tls_certs_merge(reqwest::Certificate::from_pem_bundle(&ca.pem)?);
        }
        let headers = self
            .headers
            .iter()
            .map(|h| (h.name.clone(), h.value.clone()))
            .collect();
        Ok(Box::new(UrlTarget {
            client: client.build()?,
            url: reqwest::Url::parse(&self.url)?,
            sign_key: key,
            headers,
        }))
    }
}

/// The HTTP client's settings every url target shares.
fn client_builder(timeout: Duration) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(CONNECT_TIMEOUT.min(timeout))
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .user_agent(concat!("hookinbox/", env!("CARGO_PKG_VERSION")))
}

/// A url target, running: its HTTP client.
pub struct UrlTarget {
    client: reqwest::Client,
    url: reqwest::Url,
    /// The key of the target's `sign_secret`.
    sign_key: Option<ring::hmac::Key>,
    /// The target's `headers`, set on every request.
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl UrlTarget {
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
        // The target's own: in place of a provider's header of the same name.
        for (name, value) in &self.headers {
            headers.insert(name.clone(), value.clone());
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
