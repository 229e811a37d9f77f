//! GitHub: a hook's deliveries through the REST API, and redeliveries of the missing ones.
//!
//! - `GET /repos/{owner}/{repo}/hooks/{id}/deliveries` (or `/orgs/{org}/hooks/{id}/…`, or
//!   `/app/hook/deliveries` for a GitHub App's own hook), newest first, 100 a page, the
//!   next page's cursor in the `Link` header; GitHub keeps 30 days of them.
//! - `POST …/deliveries/{delivery_id}/attempts` (202): GitHub delivers it again, with the
//!   same `X-GitHub-Delivery` GUID, signed; it redelivers only what it delivered in the past
//!   3 days.
//!
//! Sources: docs.github.com/en/rest/webhooks/repo-deliveries, …/org-deliveries,
//! …/rest/apps/webhooks, and "Handling failed webhook deliveries". A repository or
//! organisation hook is reached with a token; an App's hook with a JWT (RS256, signed with
//! the App's private key, at most 10 minutes long).

use std::sync::Arc;

use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderMap, HeaderValue};
use reqwest::{Method, Url};
use serde::Deserialize;

use super::client::{self, ApiError, Client};
use super::{Api, BoxFuture, Candidate, Found, Window};
use crate::clock;
use crate::config::{GitHubAuth, GitHubHook, RecoverApi, Source};

/// The REST API version the requests are written for.
const API_VERSION: &str = "2022-11-28";
/// The most deliveries GitHub gives per page.
const PER_PAGE: u32 = 100;
/// Pages read at most for one window: 100,000 deliveries, far more than a hook makes in
/// the 30 days GitHub keeps.
const MAX_PAGES: usize = 1000;

/// The most characters of GitHub's words about a delivery kept.
const MAX_STATUS: usize = 100;
/// The most deliveries listed for one window: more than a hook makes in the 30 days GitHub
/// keeps, and a bound on what an answer can make hookinbox hold.
const MAX_LISTED: usize = 200_000;

pub struct GitHub {
    source: Arc<Source>,
    client: Client,
}

/// One item of the deliveries list, as GitHub documents it.
#[derive(Debug, Deserialize)]
struct Delivery {
    id: u64,
    guid: String,
    delivered_at: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    status_code: Option<i64>,
    #[serde(default)]
    event: Option<String>,
    #[serde(default)]
    action: Option<String>,
}

impl GitHub {
    pub fn new(source: Arc<Source>, client: Client) -> GitHub {
        GitHub { source, client }
    }

    fn settings(&self) -> Result<(&GitHubHook, &GitHubAuth), ApiError> {
        match self.source.recover.as_ref().map(|r| &r.api) {
            Some(RecoverApi::GitHub { hook, auth }) => Ok((hook, auth)),
            _ => Err(ApiError::Other("not a GitHub source".into())),
        }
    }

    /// The hook's deliveries, relative to the API's base.
    fn deliveries_path(&self) -> Result<String, ApiError> {
        Ok(match self.settings()?.0 {
            GitHubHook::Repo { repo, hook_id } => {
                format!("repos/{repo}/hooks/{hook_id}/deliveries")
            }
            GitHubHook::Org { org, hook_id } => format!("orgs/{org}/hooks/{hook_id}/deliveries"),
            GitHubHook::App => "app/hook/deliveries".to_owned(),
        })
    }

    fn headers(&self) -> Result<HeaderMap, ApiError> {
        let mut h = HeaderMap::new();
        h.insert(
            ACCEPT,
            HeaderValue::from_static("application/vnd.github+json"),
        );
        h.insert(
            "x-github-api-version",
            HeaderValue::from_static(API_VERSION),
        );
        let credential = match self.settings()?.1 {
            GitHubAuth::Token(token) => client::bearer(token.expose())?,
            GitHubAuth::App {
                app_id,
                private_key,
            } => client::bearer(
                app_jwt(*app_id, private_key.expose(), clock::unix_now())?.as_bytes(),
            )?,
        };
        h.insert(AUTHORIZATION, credential);
        Ok(h)
    }

    async fn list_window(&self, window: Window) -> Result<Vec<Candidate>, ApiError> {
        let mut url = self.client.url(&self.deliveries_path()?)?;
        url.query_pairs_mut()
            .append_pair("per_page", &PER_PAGE.to_string());
        let mut found = Vec::new();
        for _ in 0..MAX_PAGES {
            let answer = self
                .client
                .send(Method::GET, url.clone(), || self.headers())
                .await?;
            let page: Vec<Delivery> =
                serde_json::from_slice(&answer.body).map_err(|e| ApiError::Malformed {
                    provider: "github",
                    what: format!("the deliveries list: {e}"),
                })?;
            let mut older = false;
            for d in page {
                let at =
                    clock::unix_from_iso(&d.delivered_at).ok_or_else(|| ApiError::Malformed {
                        provider: "github",
                        what: format!("delivered_at {:?}", d.delivered_at),
                    })?;
                // Newest first: past the window's start, the rest is older still. Attempts
                // after the window are kept: a redelivery made since says the event was
                // tried again (`plan` keeps the events with an attempt inside).
                older |= at < window.from;
                if at < window.from {
                    continue;
                }
                let Ok(event_id) = crate::scheme::check_id(d.guid) else {
                    continue;
                };
                let event_type = match (d.event, d.action) {
                    (Some(e), _) => Some(e),
                    (None, a) => a,
                };
                // Provider text, shown in tables and logs: bounded.
                let said: String = d.status.chars().take(MAX_STATUS).collect();
                let status = match d.status_code {
                    Some(code) if code > 0 => format!("{code} {said}"),
                    _ => said,
                };
                if found.len() == MAX_LISTED {
                    return Err(ApiError::Other(format!(
                        "more than {MAX_LISTED} deliveries for one window; recover a shorter one"
                    )));
                }
                let event_type = event_type.map(|t| t.chars().take(MAX_STATUS).collect());
                found.push(Candidate {
                    event_id,
                    at,
                    event_type,
                    status,
                    found: Found::Redelivery(d.id),
                });
            }
            match next_link(&answer.headers) {
                Some(next) if !older => {
                    url = Url::parse(&next).map_err(|e| ApiError::Malformed {
                        provider: "github",
                        what: format!("the Link header's next page {next:?}: {e}"),
                    })?;
                }
                _ => return Ok(found),
            }
        }
        Err(ApiError::Other(format!(
            "more than {MAX_PAGES} pages of deliveries for one window; recover a shorter one"
        )))
    }

    async fn ask(&self, delivery: u64) -> Result<(), ApiError> {
        let url = self
            .client
            .url(&format!("{}/{delivery}/attempts", self.deliveries_path()?))?;
        self.client
            .send(Method::POST, url, || self.headers())
            .await
            .map(drop)
    }
}

impl Api for GitHub {
    fn provider(&self) -> &'static str {
        "github"
    }

    fn list(&self, window: Window) -> BoxFuture<'_, Result<Vec<Candidate>, ApiError>> {
        Box::pin(self.list_window(window))
    }

    fn redeliver(&self, delivery: u64) -> BoxFuture<'_, Result<(), ApiError>> {
        Box::pin(self.ask(delivery))
    }
}

/// The `rel="next"` URL of a `Link` header (RFC 8288), as GitHub paginates.
fn next_link(headers: &HeaderMap) -> Option<String> {
    let link = headers.get(reqwest::header::LINK)?.to_str().ok()?;
    link.split(',').find_map(|part| {
        let (target, params) = part.split_once(';')?;
        let is_next = params
            .split(';')
            .any(|p| p.trim().replace(' ', "") == "rel=\"next\"" || p.trim() == "rel=next");
        let target = target.trim().strip_prefix('<')?.strip_suffix('>')?;
        is_next.then(|| target.to_owned())
    })
}

/// A GitHub App's JWT: RS256 over `{"iat","exp","iss"}`, issued a minute in the past (GitHub
/// asks for that, for clock drift) and valid for nine minutes (at most ten are allowed).
fn app_jwt(app_id: u64, private_key_pem: &[u8], now: i64) -> Result<String, ApiError> {
    use base64::Engine as _;
    use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};
    use rustls::pki_types::PrivateKeyDer;
    use rustls::pki_types::pem::PemObject;
    let bad = |why: &str| ApiError::Other(format!("recover.private_key: {why}"));
    let der = PrivateKeyDer::from_pem_slice(private_key_pem)
        .map_err(|e| bad(&format!("not a PEM private key ({e})")))?;
    let key = match &der {
        PrivateKeyDer::Pkcs1(k) => RsaKeyPair::from_der(k.secret_pkcs1_der()),
        PrivateKeyDer::Pkcs8(k) => RsaKeyPair::from_pkcs8(k.secret_pkcs8_der()),
        _ => return Err(bad("GitHub Apps sign with an RSA key")),
    }
    .map_err(|e| bad(&format!("not a usable RSA key ({e})")))?;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let header = b64.encode(br#"{"alg":"RS256","typ":"JWT"}"#);
    let claims = b64.encode(
        serde_json::json!({ "iat": now - 60, "exp": now + 540, "iss": app_id.to_string() })
            .to_string(),
    );
    let message = format!("{header}.{claims}");
    let mut signature = vec![0; key.public().modulus_len()];
    key.sign(
        &RSA_PKCS1_SHA256,
        &ring::rand::SystemRandom::new(),
        message.as_bytes(),
        &mut signature,
    )
    .map_err(|_| bad("signing failed"))?;
    Ok(format!("{message}.{}", b64.encode(signature)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_page_is_read_from_githubs_link_header() {
        let mut h = HeaderMap::new();
        h.insert(
            reqwest::header::LINK,
            HeaderValue::from_static(
                "<https://api.github.com/repos/o/r/hooks/1/deliveries?per_page=100&cursor=v1_9>; \
                 rel=\"next\", <https://api.github.com/repos/o/r/hooks/1/deliveries?per_page=100>; rel=\"first\"",
            ),
        );
        assert_eq!(
            next_link(&h).as_deref(),
            Some("https://api.github.com/repos/o/r/hooks/1/deliveries?per_page=100&cursor=v1_9")
        );
        h.insert(
            reqwest::header::LINK,
            HeaderValue::from_static("<https://api.github.com/x?cursor=1>; rel=\"prev\""),
        );
        assert_eq!(next_link(&h), None);
    }

    #[test]
    fn an_app_jwt_verifies_with_the_apps_public_key() {
        use base64::Engine as _;
        let pem = include_bytes!("../../tests/fixtures/github-app-key.pem");
        let jwt = app_jwt(42, pem, 1_700_000_000).unwrap();
        let parts: Vec<&str> = jwt.split('.').collect();
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let claims: serde_json::Value =
            serde_json::from_slice(&b64.decode(parts[1]).unwrap()).unwrap();
        assert_eq!(claims["iss"], "42");
        assert_eq!(
            claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(),
            600
        );
        use rustls::pki_types::pem::PemObject;
        let der = rustls::pki_types::PrivateKeyDer::from_pem_slice(pem).unwrap();
        let rustls::pki_types::PrivateKeyDer::Pkcs1(k) = &der else {
            panic!("the fixture is PKCS#1, as GitHub hands it out")
        };
        let key = ring::signature::RsaKeyPair::from_der(k.secret_pkcs1_der()).unwrap();
        let public = ring::signature::UnparsedPublicKey::new(
            &ring::signature::RSA_PKCS1_2048_8192_SHA256,
            key.public().as_ref(),
        );
        let signed = format!("{}.{}", parts[0], parts[1]);
        assert!(
            public
                .verify(signed.as_bytes(), &b64.decode(parts[2]).unwrap())
                .is_ok()
        );
        assert!(app_jwt(42, b"not a key", 0).is_err());
    }
}
