//! The web inbox: server-rendered HTML on the admin listener (`/` and below) for what
//! arrived, what became of it, what is stuck, and what is wrong now. No JavaScript and no
//! asset from anywhere else: it works through an SSH tunnel to a VM without internet, and
//! in a browser with scripts off.
//!
//! Invariants:
//! - every provider-supplied string reaches the page through maud's escaping (HTML text and
//!   attributes), after [`crate::terminal::escape`] wrote out invisible and bidi characters;
//!   every response carries a Content-Security-Policy that allows no script at all, so a
//!   `<script>` that got through would still not run;
//! - reads come from the read-only pool; a change (replay, pause, resume) is possible only
//!   with `admin.actions = true`, only by POST, only with this process's CSRF token and an
//!   Origin that is this page's own, and it goes through the writer and into the log;
//! - a request whose Host is not an IP address, `localhost` or one of `admin.hosts` is
//!   refused, so that a site that points its own name at 127.0.0.1 (DNS rebinding) cannot
//!   read the inbox through a visitor's browser.

mod actions;
pub mod body;
mod pages;

use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::http::{Method, StatusCode};
use hyper::{Request, Response};
use maud::{Markup, html};

use crate::alerts::Board;
use crate::config::{self, Source};
use crate::store::Db;
use crate::store::Store;

/// No script, no frame, no plugin, nothing from elsewhere: the page's one stylesheet and its
/// own forms. `form-action 'self'` keeps an injected form from posting anywhere else.
const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; \
                   frame-ancestors 'none'; base-uri 'none'";

/// The stylesheet, served at `/style.css` from the binary.
const STYLE: &str = include_str!("style.css");

/// The largest form an action posts (a filter and a token): anything bigger is not ours.
const MAX_FORM: usize = 16 * 1024;
/// How long reading that form may take.
const FORM_TIMEOUT: Duration = Duration::from_secs(5);

/// What the web inbox knows of the configuration: names, for filters and forms, and which
/// targets exist, so that an action cannot name one that does not. Replaced on reload.
#[derive(Debug, Clone, Default)]
pub struct Configured {
    pub sources: Vec<ConfiguredSource>,
    /// The `[[alerts]]` targets' names.
    pub alerts: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct ConfiguredSource {
    pub name: String,
    pub scheme: &'static str,
    pub targets: Vec<String>,
}

impl Configured {
    pub fn new(sources: &[Arc<Source>], alerts: &[config::Target]) -> Configured {
        Configured {
            sources: sources
                .iter()
                .map(|s| ConfiguredSource {
                    name: s.name.clone(),
                    scheme: s.scheme.name(),
                    targets: s.targets.iter().map(|t| t.name.clone()).collect(),
                })
                .collect(),
            alerts: alerts.iter().map(|t| t.name.clone()).collect(),
        }
    }

    /// Every (source, target) pair, the alert targets' (under [`crate::alerts::SOURCE`])
    /// last: they are delivered, watched and paused like any other.
    pub fn pairs(&self) -> Vec<(String, String)> {
        self.sources
            .iter()
            .flat_map(|s| s.targets.iter().map(|t| (s.name.clone(), t.clone())))
            .chain(
                self.alerts
                    .iter()
                    .map(|t| (crate::alerts::SOURCE.to_owned(), t.clone())),
            )
            .collect()
    }

    pub fn names(&self) -> Vec<String> {
        self.sources.iter().map(|s| s.name.clone()).collect()
    }

    pub fn has_target(&self, source: &str, target: &str) -> bool {
        self.pairs().iter().any(|(s, t)| s == source && t == target)
    }
}

pub struct Web {
    /// Pages read it and actions change it through the store's operator connections.
    store: Store,
    /// `admin.actions`.
    actions: bool,
    /// `admin.hosts`, lowercase.
    hosts: Vec<String>,
    /// A random token made at start, in every form; a POST without it is refused. A page
    /// of another origin cannot read it (the same-origin policy), so it cannot forge one.
    csrf: crate::secret::Secret,
    configured: RwLock<Arc<Configured>>,
    board: Arc<Board>,
}

impl Web {
    pub fn new(
        store: Store,
        admin: &config::AdminSettings,
        sources: &[Arc<Source>],
        alerts: &[config::Target],
        board: Arc<Board>,
    ) -> Web {
        let mut token = [0u8; 32];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut token)
            .expect("the system's random source works");
        Web {
            store,
            actions: admin.actions,
            hosts: admin.hosts.clone(),
            csrf: crate::secret::Secret::new(hex::encode(token)),
            configured: RwLock::new(Arc::new(Configured::new(sources, alerts))),
            board,
        }
    }

    /// The sources and targets of a reloaded configuration.
    pub fn reload(&self, sources: &[Arc<Source>], alerts: &[config::Target]) {
        *self
            .configured
            .write()
            .expect("no panics while holding the lock") =
            Arc::new(Configured::new(sources, alerts));
    }

    /// The token as the forms carry it.
    fn csrf(&self) -> &str {
        // Made from hex digits above.
        std::str::from_utf8(self.csrf.expose()).unwrap_or("")
    }

    /// The configured (source, target) pairs.
    pub fn pairs(&self) -> Vec<(String, String)> {
        self.configured().pairs()
    }

    fn configured(&self) -> Arc<Configured> {
        self.configured
            .read()
            .expect("no panics while holding the lock")
            .clone()
    }

    /// Answers one request for `/` or below (the admin listener's other paths are its own).
    pub async fn handle(
        &self,
        req: Request<Incoming>,
        peer: std::net::SocketAddr,
    ) -> Response<Full<Bytes>> {
        let Some(host) = self.allowed_host(&req) else {
            return misdirected();
        };
        if !from_here_or_typed(&req) {
            return plain(
                StatusCode::FORBIDDEN,
                "the web inbox does not answer requests another site's page makes; open it \
                 directly\n",
            );
        }
        let path = req.uri().path().to_owned();
        let query = req.uri().query().unwrap_or("").to_owned();
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let get = matches!(*req.method(), Method::GET | Method::HEAD);
        let post = *req.method() == Method::POST;
        let page = Page::new(self, query);
        match (segments.as_slice(), get, post) {
            ([""], true, _) => page.overview().await,
            (["events"], true, _) => page.events().await,
            (["events", id], true, _) => match id.parse() {
                Ok(id) => page.event(id).await,
                Err(_) => page.not_found(),
            },
            (["events", id, "body"], true, _) => match id.parse() {
                Ok(id) => page.download(id).await,
                Err(_) => page.not_found(),
            },
            (["dead"], true, _) => page.dead().await,
            (["gaps"], true, _) => page.gaps().await,
            (["conflicts"], true, _) => page.conflicts().await,
            (["conflicts", id], true, _) => match id.parse() {
                Ok(id) => page.conflict(id).await,
                Err(_) => page.not_found(),
            },
            (["style.css"], true, _) => Response::builder()
                .header(header::CONTENT_TYPE, "text/css; charset=utf-8")
                .header(header::CACHE_CONTROL, "max-age=3600")
                .header(header::X_CONTENT_TYPE_OPTIONS, "nosniff")
                .body(Full::new(Bytes::from_static(STYLE.as_bytes())))
                .expect("static header values are valid"),
            (["actions", action], _, true) => {
                let action = action.to_string();
                match self.form(req, &host).await {
                    Ok(form) => page.action(&action, form, peer).await,
                    Err(refusal) => page.refused(refusal),
                }
            }
            (["actions", _], _, false) => {
                let mut resp = plain(StatusCode::METHOD_NOT_ALLOWED, "actions are POSTed\n");
                resp.headers_mut()
                    .insert(header::ALLOW, HeaderValue::from_static("POST"));
                resp
            }
            (_, false, _) => {
                let mut resp = plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
                resp.headers_mut()
                    .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
                resp
            }
            _ => page.not_found(),
        }
    }

    /// The request's Host when it is one the admin listener answers to: an IP address,
    /// `localhost` or one of `admin.hosts`.
    pub fn allowed_host<B>(&self, req: &Request<B>) -> Option<String> {
        let host = req
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .or_else(|| req.uri().authority().map(|a| a.as_str()))?;
        host_allowed(host, &self.hosts).then(|| host.to_owned())
    }

    /// The fields of an action's form, once everything that makes a POST ours is checked:
    /// actions are on, the Origin is this page's, the token is this process's.
    async fn form(&self, req: Request<Incoming>, host: &str) -> Result<Form, Refusal> {
        if !self.actions {
            return Err(Refusal::ActionsOff);
        }
        let headers = req.headers();
        // Browsers send Origin with every POST; a request without one is not from a page.
        let origin = headers
            .get(header::ORIGIN)
            .and_then(|o| o.to_str().ok())
            .unwrap_or("");
        // https: the same host behind a TLS-terminating proxy is still this page.
        if origin != format!("http://{host}") && origin != format!("https://{host}") {
            return Err(Refusal::Origin(origin.to_owned()));
        }
        let from_form = headers
            .get(header::CONTENT_TYPE)
            .and_then(|c| c.to_str().ok())
            .is_some_and(|c| c.starts_with("application/x-www-form-urlencoded"));
        if !from_form {
            return Err(Refusal::NotAForm);
        }
        let body = tokio::time::timeout(
            FORM_TIMEOUT,
            Limited::new(req.into_body(), MAX_FORM).collect(),
        )
        .await
        .map_err(|_| Refusal::NotAForm)?
        .map_err(|_| Refusal::NotAForm)?
        .to_bytes();
        let fields: Vec<(String, String)> = form_urlencoded::parse(&body).into_owned().collect();
        let form = Form(fields);
        let token = form.get("csrf").unwrap_or("");
        if !crate::scheme::keys::same_token(&self.csrf, token.as_bytes()) {
            return Err(Refusal::Token);
        }
        Ok(form)
    }
}

/// Whether a Host header's name (without its port) is an IP address, `localhost`, or one of
/// `hosts` (lowercase), ignoring case.
fn host_allowed(host: &str, hosts: &[String]) -> bool {
    let name = match host.strip_prefix('[') {
        // An IPv6 literal, with or without a port.
        Some(rest) => match rest.split_once(']') {
            Some((ip, "")) => ip,
            Some((ip, port)) if port.starts_with(':') => ip,
            _ => return false,
        },
        None => host.rsplit_once(':').map_or(host, |(n, _)| n),
    };
    let name = name.to_ascii_lowercase();
    name.parse::<std::net::IpAddr>().is_ok() || name == "localhost" || hosts.contains(&name)
}

/// Whether a request comes from the web inbox's own pages or from the operator (a typed
/// address, a bookmark, a link followed from elsewhere), not from another site's page
/// loading it in the background: such a page could make the operator's browser run slow
/// queries over and over. Browsers say which in `Sec-Fetch-Site` (another port of
/// localhost is `same-site`, so only `same-origin` and `none` count as ours); a top-level
/// navigation from another site is a person following a link, and allowed. Clients that
/// send no such header (curl, scripts on the machine) are not a browser's victims.
fn from_here_or_typed(req: &Request<Incoming>) -> bool {
    let h = req.headers();
    let value = |name: &str| h.get(name).and_then(|v| v.to_str().ok());
    match value("sec-fetch-site") {
        None | Some("same-origin") | Some("none") => true,
        Some(_) => {
            *req.method() == Method::GET
                && value("sec-fetch-mode") == Some("navigate")
                && value("sec-fetch-dest") == Some("document")
        }
    }
}

/// A posted form's fields, in order.
#[derive(Debug, Default)]
pub struct Form(Vec<(String, String)>);

impl Form {
    /// The first non-empty value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, v)| k == name && !v.is_empty())
            .map(|(_, v)| v.as_str())
    }
}

/// Why a POST was not taken.
#[derive(Debug)]
pub enum Refusal {
    ActionsOff,
    Origin(String),
    NotAForm,
    Token,
}

impl Refusal {
    fn message(&self) -> String {
        match self {
            Refusal::ActionsOff => "The web inbox is read-only: set admin.actions = true in the \
                                    configuration and restart hookinbox to replay, pause and \
                                    resume from here (the CLI can always: hookinbox replay, \
                                    pause, resume)."
                .into(),
            Refusal::Origin(o) if o.is_empty() => {
                "The request had no Origin header; actions are taken only from the web \
                 inbox's own pages."
                    .into()
            }
            Refusal::Origin(o) => format!(
                "The request came from {o}, not from the web inbox's own pages; nothing was done."
            ),
            Refusal::NotAForm => "The request was not one of the web inbox's forms.".into(),
            Refusal::Token => "The form's token is not this hookinbox's: it was made by an \
                               earlier run, or elsewhere. Reload the page and try again."
                .into(),
        }
    }
}

/// Headers every HTML answer carries.
fn respond(status: StatusCode, markup: Markup) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/html; charset=utf-8")
        .header(header::CONTENT_SECURITY_POLICY, CSP)
        .header(header::X_CONTENT_TYPE_OPTIONS, "nosniff")
        // Not `no-referrer`: with it browsers send `Origin: null` on our own POSTs.
        .header(header::REFERRER_POLICY, "same-origin")
        .header(header::X_FRAME_OPTIONS, "DENY")
        .header(header::CACHE_CONTROL, "no-store")
        .body(Full::new(markup.into_string().into()))
        .expect("static header values are valid")
}

/// The answer to a Host that is not one the admin listener answers to, on any of its paths:
/// a page on another site that points its own name at this address (DNS rebinding) reads
/// nothing, not `/metrics` either.
pub fn misdirected() -> Response<Full<Bytes>> {
    plain(
        StatusCode::MISDIRECTED_REQUEST,
        "this Host is not one the admin listener answers to: browse it by IP address or \
         localhost (an SSH tunnel), or add the name to admin.hosts\n",
    )
}

/// Adds the headers every HTML page carries to any other answer of the admin listener
/// (plain text, metrics, refusals) where it has none of its own: an answer framed or
/// sniffed as HTML by another site's page must not run or show anything.
pub fn secure(mut resp: Response<Full<Bytes>>) -> Response<Full<Bytes>> {
    let headers = resp.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
    ] {
        headers
            .entry(name)
            .or_insert(HeaderValue::from_static(value));
    }
    resp
}

fn plain(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .header(header::X_CONTENT_TYPE_OPTIONS, "nosniff")
        .body(Full::new(Bytes::from_static(text.as_bytes())))
        .expect("static header values are valid")
}

/// One request's page: what it needs from the web inbox and its query string.
struct Page<'a> {
    web: &'a Web,
    query: Vec<(String, String)>,
    configured: Arc<Configured>,
}

impl<'a> Page<'a> {
    fn new(web: &'a Web, query: String) -> Page<'a> {
        Page {
            web,
            query: form_urlencoded::parse(query.as_bytes())
                .into_owned()
                .collect(),
            configured: web.configured(),
        }
    }

    /// The first non-empty value of `name` in the query string.
    fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, v)| k == name && !v.trim().is_empty())
            .map(|(_, v)| v.trim())
    }

    /// Runs `read` on a pooled read-only connection, off the async threads.
    async fn read<T: Send + 'static>(
        &self,
        read: impl FnOnce(Db) -> anyhow::Result<T> + Send + 'static,
    ) -> anyhow::Result<T> {
        self.web.store.read(read).await
    }

    fn not_found(&self) -> Response<Full<Bytes>> {
        self.message(
            StatusCode::NOT_FOUND,
            "Not found",
            html! { p { "There is no such page. " a href="/" { "Back to the overview" } "." } },
        )
    }

    fn refused(&self, refusal: Refusal) -> Response<Full<Bytes>> {
        tracing::warn!(why = %refusal.message(), "web inbox: refused an action");
        self.message(
            StatusCode::FORBIDDEN,
            "Not done",
            html! { p { (refusal.message()) } },
        )
    }

    /// A page that only says something, with `status`.
    fn message(&self, status: StatusCode, title: &str, text: Markup) -> Response<Full<Bytes>> {
        respond(status, self.layout(title, text))
    }

    fn failed(&self, what: &str, e: &anyhow::Error) -> Response<Full<Bytes>> {
        tracing::warn!(error = %format!("{e:#}"), "web inbox: {what}");
        self.message(
            StatusCode::SERVICE_UNAVAILABLE,
            "Could not read the inbox",
            html! {
                p { (what) ": " (format!("{e:#}")) }
                p { "Try again in a moment; " code { "journalctl -u hookinbox" } " may say more." }
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_ip_addresses_localhost_or_named() {
        let named = vec!["inbox.internal".to_owned()];
        for host in [
            "127.0.0.1:9180",
            "127.0.0.1",
            "[::1]:9180",
            "[::1]",
            "10.0.0.7:80",
            "localhost:9180",
            "LOCALHOST",
            "inbox.internal:9180",
            "Inbox.Internal",
        ] {
            assert!(host_allowed(host, &named), "{host}");
        }
        for host in [
            "evil.example:9180",
            "localhost.evil.example",
            "inbox.internal.evil.example",
            "127.0.0.1.nip.io:9180",
            "[::1]x",
            "[::1",
            "",
            "user@127.0.0.1",
        ] {
            assert!(!host_allowed(host, &named), "{host}");
        }
    }
}
