//! Fake provider APIs for the "recover missed webhooks" tests: real HTTP servers on
//! 127.0.0.1:0 (hyper 1, one task per connection) that answer as the providers' REST
//! documentation says, and that send signed webhooks to hookinbox as the providers do.
//!
//! - [`FakeGitHub`]: the webhook-deliveries API of a repository hook, an organization hook
//!   and a GitHub App's hook (`GET …/hooks/{id}/deliveries`, `GET …/deliveries/{id}`,
//!   `POST …/deliveries/{id}/attempts`), over ONE hook log. It reproduces:
//!   - "simple webhook delivery" objects, newest first, with cursor pagination: `per_page`
//!     (default 30, at most 100), an opaque `cursor`, and a `Link: <…>; rel="next"` header
//!     while more pages follow; the `redelivery` filter;
//!   - a redelivery request answered 202 and carried out asynchronously, as a NEW delivery
//!     (new id, same GUID, `redelivery: true`), signed like the original;
//!   - authentication: `Bearer`/`token` tokens, GitHub App JWTs (RS256, `iss`, `iat`, `exp`,
//!     at most 10 minutes) for the `/app/hook` routes only, and the required `User-Agent`;
//!   - the `x-ratelimit-*` headers on every answer, the primary rate limit (403 with
//!     `x-ratelimit-remaining: 0` and `x-ratelimit-reset`) and the secondary one (429 with
//!     `retry-after`), and GitHub's JSON error bodies (401, 403, 404, 422).
//!   - Deliveries are signed as GitHub signs them: `X-Hub-Signature-256: sha256=<hex
//!     HMAC-SHA256(secret, body)>` (and the legacy SHA-1 `X-Hub-Signature`), with
//!     `X-GitHub-Delivery`, `X-GitHub-Event` and `X-GitHub-Hook-ID`.
//! - [`FakeStripe`]: the List Events API (`GET /v1/events`) and Retrieve an Event
//!   (`GET /v1/events/{id}`). It reproduces:
//!   - the `created` filters (exact, `gt`, `gte`, `lt`, `lte`), `type` (with `*`
//!     wildcards), `types[]` (up to 20, never with `type`), `delivery_success`, `limit`
//!     (1–100, default 10), `starting_after`/`ending_before` keyset pagination and
//!     `has_more`, newest first; Stripe's 30 days of retained events;
//!   - Stripe's answers to bad requests: 400 for unknown parameters, bad integers and
//!     booleans, out-of-range limits and unknown cursors; 401 for a missing or wrong key
//!     (shown masked, as Stripe does); 429 `rate_limit` without `Retry-After`; 404 for
//!     unknown URLs and events;
//!   - events rendered as the API renders them (pretty-printed, 2-space indentation, Stripe's
//!     key order) and webhooks sent with a different byte layout of the same JSON value,
//!     signed `Stripe-Signature: t=<now>,v1=<hex HMAC-SHA256(secret, "{t}.{body}")>`.
//!
//! - [`FakeMeta`]: GitHub's meta API (`GET /meta`), whose `hooks` lists the ranges webhooks
//!   come from, beside the other services' ranges; it can be told to fail (503 with
//!   GitHub's JSON error body) and counts what it was asked.
//!
//! The tests drive the fakes through their methods (`deliver`, `record`, `create`,
//! `send_webhook`, …) and inspect what hookinbox asked (`api_calls`,
//! `redelivery_requests`). Shared state sits behind a `std::sync::Mutex` that is never held
//! across an await. A request the fakes do not understand gets the provider's error answer,
//! never a panic; only a test misusing a fake (an unknown Stripe event id) panics.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{HeaderMap, Method, Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::runtime::Handle;
use tokio::task::AbortHandle;

/// How long a fake waits for hookinbox to answer a webhook before calling it timed out.
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------------------
// Shared plumbing: the HTTP server, answers, webhook POSTs, clocks.
// ---------------------------------------------------------------------------------------

/// One API request as a fake's router sees it (the body is read and dropped: no route of
/// these APIs takes one).
struct ApiRequest {
    method: Method,
    path: String,
    query: String,
    headers: HeaderMap,
}

impl ApiRequest {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn path_and_query(&self) -> String {
        if self.query.is_empty() {
            self.path.clone()
        } else {
            format!("{}?{}", self.path, self.query)
        }
    }

    /// The query's parameters, percent- and `+`-decoded, in order.
    fn params(&self) -> Vec<(String, String)> {
        form_urlencoded::parse(self.query.as_bytes())
            .into_owned()
            .collect()
    }
}

/// One answer: a status, headers and a body.
struct Answer {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn with(mut self, name: &'static str, value: impl Into<String>) -> Answer {
        self.headers.push((name, value.into()));
        self
    }

    fn into_response(self) -> Response<Full<Bytes>> {
        let mut builder = Response::builder().status(self.status);
        for (name, value) in &self.headers {
            builder = builder.header(*name, value.as_str());
        }
        // Every value above is ours and ASCII; should one ever not be, answer 500 rather
        // than panic inside the server.
        builder
            .body(Full::new(Bytes::from(self.body)))
            .unwrap_or_else(|_| {
                let mut r = Response::new(Full::new(Bytes::new()));
                *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
                r
            })
    }
}

/// A router: answers one request from a fake's shared state. Synchronous on purpose: no
/// route awaits anything (redeliveries are spawned), so no lock can be held across an await.
type Router<S> = fn(&Arc<S>, ApiRequest) -> Answer;

/// Serves `route` on `listener`, each connection in its own task, until aborted.
fn serve<S: Send + Sync + 'static>(
    listener: TcpListener,
    state: Arc<S>,
    route: Router<S>,
) -> AbortHandle {
    tokio::spawn(async move {
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                // Out of file descriptors, say: keep serving once some are back.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            let state = state.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let state = state.clone();
                    async move {
                        let (parts, body) = req.into_parts();
                        let _ = body.collect().await;
                        let request = ApiRequest {
                            method: parts.method,
                            path: parts.uri.path().to_owned(),
                            query: parts.uri.query().unwrap_or("").to_owned(),
                            headers: parts.headers,
                        };
                        Ok::<_, Infallible>(route(&state, request).into_response())
                    }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    })
    .abort_handle()
}

/// Binds 127.0.0.1:0; returns the listener and its base URL.
async fn bind() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    (listener, url)
}

/// A poisoned lock only means another test thread panicked; the state is still usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// `2019-06-03T00:57:16Z`, as GitHub writes times.
fn rfc3339(unix: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(unix)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

fn hmac_hex(algorithm: ring::hmac::Algorithm, key: &[u8], parts: &[&[u8]]) -> String {
    let key = ring::hmac::Key::new(algorithm, key);
    let mut ctx = ring::hmac::Context::with_key(&key);
    for part in parts {
        ctx.update(part);
    }
    hex::encode(ctx.sign().as_ref())
}

type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// A client that opens a new connection for every webhook, as the providers' senders do:
/// no pooled connection that hookinbox may have closed can turn into a false failure.
fn webhook_client() -> HttpClient {
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build_http()
}

/// What became of one webhook POST.
struct Posted {
    /// The answer's status, 0 when there was none.
    status: u16,
    /// Why there was no answer: "failed to connect" or "timed out".
    failure: Option<&'static str>,
    seconds: f64,
    headers: Vec<(String, String)>,
    body: String,
}

async fn post(
    client: &HttpClient,
    url: &str,
    headers: &[(&'static str, String)],
    body: Vec<u8>,
) -> Posted {
    let started = Instant::now();
    let mut request = Request::post(url);
    for (name, value) in headers {
        request = request.header(*name, value.as_str());
    }
    let attempt = async {
        // A URL that does not parse is a target that cannot be reached.
        let request = request
            .body(Full::new(Bytes::from(body)))
            .map_err(|_| "failed to connect")?;
        let response = client
            .request(request)
            .await
            .map_err(|_| "failed to connect")?;
        let (parts, body) = response.into_parts();
        let body = body
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let headers = parts
            .headers
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
            .collect();
        Ok::<_, &'static str>((parts.status.as_u16(), headers, body))
    };
    let outcome = tokio::time::timeout(WEBHOOK_TIMEOUT, attempt)
        .await
        .unwrap_or(Err("timed out"));
    let seconds = (started.elapsed().as_secs_f64() * 100.0).round() / 100.0;
    match outcome {
        Ok((status, headers, body)) => Posted {
            status,
            failure: None,
            seconds,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        },
        Err(failure) => Posted {
            status: 0,
            failure: Some(failure),
            seconds,
            headers: Vec::new(),
            body: String::new(),
        },
    }
}

/// A test's instruction for the next API request: answer this instead of serving it.
#[derive(Clone, Copy)]
enum Injected {
    RateLimit,
    SecondaryLimit,
    Fail(u16),
}

fn reason(status: u16) -> &'static str {
    StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Error")
}

// ---------------------------------------------------------------------------------------
// GitHub
// ---------------------------------------------------------------------------------------

const GITHUB_DOCS: &str = "https://docs.github.com/rest";
const GITHUB_UNDECODABLE_JWT: &str = "A JSON web token could not be decoded";

/// The fake's one hook: its id is sent as `X-GitHub-Hook-ID` (the API accepts any numeric
/// hook id in its paths: there is only one log).
#[allow(dead_code)] // tests use what they need of the fake's API
pub const GITHUB_HOOK_ID: u64 = 424_242_424;

/// A fake GitHub: the webhook-deliveries API of one hook, and the hook's sender.
#[allow(dead_code)] // tests use what they need of the fake's API
pub struct FakeGitHub {
    /// `http://127.0.0.1:PORT`, the API's base URL.
    pub url: String,
    /// The hook's id, as sent in `X-GitHub-Hook-ID` ([`GITHUB_HOOK_ID`]).
    pub hook_id: u64,
    inner: Arc<GitHub>,
    server: AbortHandle,
}

struct GitHub {
    url: String,
    token: String,
    secret: String,
    hook_url: String,
    client: HttpClient,
    /// Redeliveries are spawned from the router and from `hold_redeliveries`, which run
    /// outside an async context of their own.
    runtime: Handle,
    state: Mutex<GitHubState>,
}

#[derive(Default)]
struct GitHubState {
    /// The hook's log, in the order the attempts finished (the API sorts it).
    deliveries: Vec<Delivery>,
    last_id: u64,
    redelivery_requests: Vec<(u64, String)>,
    api_calls: Vec<(String, String)>,
    injected: VecDeque<Injected>,
    hold: bool,
    /// Redeliveries accepted while held: the ids of the deliveries to send again.
    held: Vec<u64>,
    /// The GitHub App whose JWTs the `/app/hook` routes accept: its id and PKCS#1 key.
    app: Option<(u64, Vec<u8>)>,
}

/// One attempt in the hook's log.
#[derive(Clone)]
struct Delivery {
    id: u64,
    guid: String,
    event: String,
    body: Vec<u8>,
    delivered_at: i64,
    redelivery: bool,
    duration: f64,
    status: String,
    status_code: u16,
    request_headers: Vec<(String, String)>,
    response_headers: Vec<(String, String)>,
    response_body: String,
}

impl Delivery {
    /// The API's order is newest first: by `delivered_at`, then by id.
    fn key(&self) -> (i64, u64) {
        (self.delivered_at, self.id)
    }

    fn payload(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }

    /// The documented "simple webhook delivery" object.
    fn summary(&self) -> Value {
        let payload = self.payload();
        let payload = payload.as_ref();
        json!({
            "id": self.id,
            "guid": self.guid,
            "delivered_at": rfc3339(self.delivered_at),
            "redelivery": self.redelivery,
            "duration": self.duration,
            "status": self.status,
            "status_code": self.status_code,
            "event": self.event,
            "action": payload.and_then(|p| p.get("action")?.as_str()),
            // GitHub takes these from the event: null when it has no installation or repo.
            "installation_id": payload.and_then(|p| p.pointer("/installation/id")?.as_u64()),
            "repository_id": payload.and_then(|p| p.pointer("/repository/id")?.as_u64()),
            "throttled_at": null,
        })
    }

    /// The documented "webhook delivery" object (`GET …/deliveries/{id}`): the summary plus
    /// the request GitHub sent and the answer it got.
    fn full(&self, hook_url: &str) -> Value {
        let mut v = self.summary();
        let headers = |h: &[(String, String)]| {
            Value::Object(
                h.iter()
                    .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                    .collect(),
            )
        };
        let payload = self
            .payload()
            .unwrap_or_else(|| Value::String(String::from_utf8_lossy(&self.body).into_owned()));
        v["url"] = json!(hook_url);
        v["request"] = json!({ "headers": headers(&self.request_headers), "payload": payload });
        v["response"] = json!({
            "headers": headers(&self.response_headers),
            "payload": self.response_body,
        });
        v
    }
}

/// Which of the hook's routes a path names.
enum Target {
    List,
    One(u64),
    Attempts(u64),
}

/// Parses `/repos/{owner}/{repo}/hooks/{hook_id}/…`, `/orgs/{org}/hooks/{hook_id}/…` and
/// `/app/hook/…`; returns whether it is an app route, and the target. The owner, repo, org
/// and hook id are not checked (one log), except that the ids must be numbers, as GitHub's
/// router requires: anything else is a 404.
fn github_route(path: &str) -> Option<(bool, Target)> {
    let segments: Vec<&str> = path.strip_prefix('/')?.split('/').collect();
    let numeric = |s: &str| s.parse::<u64>().is_ok();
    let (app, rest) = match segments.as_slice() {
        ["repos", owner, repo, "hooks", hook, rest @ ..]
            if !owner.is_empty() && !repo.is_empty() && numeric(hook) =>
        {
            (false, rest)
        }
        ["orgs", org, "hooks", hook, rest @ ..] if !org.is_empty() && numeric(hook) => {
            (false, rest)
        }
        ["app", "hook", rest @ ..] => (true, rest),
        _ => return None,
    };
    let target = match rest {
        ["deliveries"] => Target::List,
        ["deliveries", id] => Target::One(id.parse().ok()?),
        ["deliveries", id, "attempts"] => Target::Attempts(id.parse().ok()?),
        _ => return None,
    };
    Some((app, target))
}

/// A GitHub JSON answer with the headers every REST answer carries.
fn github_answer(status: u16, body: &Value) -> Answer {
    Answer {
        status,
        headers: vec![("content-type", "application/json; charset=utf-8".into())],
        body: serde_json::to_vec(body).unwrap_or_default(),
    }
    .with("x-github-api-version-selected", "2022-11-28")
    .with("x-github-media-type", "github.v3; format=json")
}

/// The normal rate-limit headers: plenty left in the current hour.
fn with_rate_headers(answer: Answer) -> Answer {
    answer
        .with("x-ratelimit-limit", "5000")
        .with("x-ratelimit-remaining", "4999")
        .with("x-ratelimit-reset", (now() + 3600).to_string())
        .with("x-ratelimit-used", "1")
        .with("x-ratelimit-resource", "core")
}

/// GitHub's error body: `{"message", "documentation_url", "status"}`.
fn github_error(status: u16, message: &str) -> Answer {
    with_rate_headers(github_answer(
        status,
        &json!({
            "message": message,
            "documentation_url": GITHUB_DOCS,
            "status": status.to_string(),
        }),
    ))
}

fn github_not_found() -> Answer {
    github_error(404, "Not Found")
}

/// 422 for a query parameter GitHub cannot use, with the `errors` list it gives.
fn github_invalid(param: &str) -> Answer {
    with_rate_headers(github_answer(
        422,
        &json!({
            "message": "Validation Failed",
            "errors": [{ "resource": "HookDelivery", "field": param, "code": "invalid" }],
            "documentation_url": GITHUB_DOCS,
            "status": "422",
        }),
    ))
}

fn github_injected(injected: Injected) -> Answer {
    match injected {
        // The primary limit: 403 with the window exhausted and its reset one second away.
        Injected::RateLimit => github_answer(
            403,
            &json!({
                "message": "API rate limit exceeded for user ID 1. If you reach out to GitHub \
                            Support for help, please include the request ID.",
                "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-the-primary-rate-limit",
                "status": "403",
            }),
        )
        .with("x-ratelimit-limit", "5000")
        .with("x-ratelimit-remaining", "0")
        .with("x-ratelimit-reset", (now() + 1).to_string())
        .with("x-ratelimit-used", "5000")
        .with("x-ratelimit-resource", "core"),
        // The secondary limit: GitHub says how long to wait with `retry-after`, while the
        // primary window still has requests left.
        Injected::SecondaryLimit => with_rate_headers(github_answer(
            429,
            &json!({
                "message": "You have exceeded a secondary rate limit. Please wait a few \
                            minutes before you try again.",
                "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits",
                "status": "429",
            }),
        ))
        .with("retry-after", "1"),
        Injected::Fail(status) => {
            let message = if status >= 500 {
                "Server Error"
            } else {
                reason(status)
            };
            github_error(status, message)
        }
    }
}

/// Checks a GitHub App JWT: RS256 over `header.payload` with the app's key, `iss` the app
/// id (a number or a string), `iat <= now <= exp`, and `exp - iat` at most 10 minutes. The
/// messages are GitHub's.
fn verify_app_jwt(app: Option<&(u64, Vec<u8>)>, jwt: &str, now: i64) -> Result<(), &'static str> {
    let decode_json = |part: &str| -> Option<Value> {
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).ok()?).ok()
    };
    let mut parts = jwt.split('.');
    let (Some(header), Some(payload), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(GITHUB_UNDECODABLE_JWT);
    };
    let (Some(head), Some(claims), Ok(signature)) = (
        decode_json(header),
        decode_json(payload),
        URL_SAFE_NO_PAD.decode(signature),
    ) else {
        return Err(GITHUB_UNDECODABLE_JWT);
    };
    if head.get("alg").and_then(Value::as_str) != Some("RS256") {
        return Err(GITHUB_UNDECODABLE_JWT);
    }
    let iss = match claims.get("iss") {
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) => s.parse().ok(),
        _ => None,
    };
    // GitHub finds the app by `iss`, then checks the signature with its key.
    let Some((_, key)) = app.filter(|(id, _)| Some(*id) == iss) else {
        return Err("Integration not found");
    };
    let signed = &jwt[..header.len() + 1 + payload.len()];
    ring::signature::UnparsedPublicKey::new(&ring::signature::RSA_PKCS1_2048_8192_SHA256, key)
        .verify(signed.as_bytes(), &signature)
        .map_err(|_| GITHUB_UNDECODABLE_JWT)?;
    let time = |name: &str| {
        let v = claims.get(name)?;
        v.as_i64().or_else(|| v.as_f64().map(|f| f as i64))
    };
    let iat = time("iat").filter(|iat| *iat <= now).ok_or(
        "'Issued at' claim ('iat') must be an Integer representing the time that the \
         assertion was issued",
    )?;
    let exp = time("exp").filter(|exp| *exp >= now).ok_or(
        "'Expiration time' claim ('exp') must be a numeric value representing the future \
         time at which the assertion expires",
    )?;
    if exp - iat > 600 {
        return Err("'Expiration time' claim ('exp') is too far in the future");
    }
    Ok(())
}

impl GitHub {
    /// Answers one API request. The order is GitHub's: an injected answer (the test's "the
    /// next n requests"), the required User-Agent, the route (404 before authentication, so
    /// unknown paths and methods look the same to anyone), then the credentials.
    fn route(self: &Arc<Self>, req: ApiRequest) -> Answer {
        let injected = {
            let mut state = lock(&self.state);
            state
                .api_calls
                .push((req.method.to_string(), req.path_and_query()));
            state.injected.pop_front()
        };
        if let Some(injected) = injected {
            return github_injected(injected);
        }
        if req.header("user-agent").is_none_or(str::is_empty) {
            return github_error(
                403,
                "Request forbidden by administrative rules. Please make sure your request has \
                 a User-Agent header (https://docs.github.com/en/rest/overview/resources-in-the-rest-api#user-agent-required).",
            );
        }
        let Some((app, target)) = github_route(&req.path) else {
            return github_not_found();
        };
        let allowed = matches!(
            (&req.method, &target),
            (&Method::GET, Target::List | Target::One(_)) | (&Method::POST, Target::Attempts(_))
        );
        if !allowed {
            return github_not_found();
        }
        if let Err(answer) = self.authenticate(&req, app) {
            return answer;
        }
        match target {
            Target::List => self.list(&req),
            Target::One(id) => self.one(id),
            Target::Attempts(id) => self.redeliver(id),
        }
    }

    /// `Authorization: Bearer <token>` or `token <token>`; the `/app/hook` routes take a
    /// GitHub App JWT (Bearer) instead, and refuse tokens.
    fn authenticate(&self, req: &ApiRequest, app: bool) -> Result<(), Answer> {
        let Some((scheme, credential)) = req
            .header("authorization")
            .and_then(|h| h.trim().split_once(' '))
            .map(|(s, c)| (s.to_ascii_lowercase(), c.trim()))
        else {
            return Err(github_error(401, "Requires authentication"));
        };
        if app {
            if scheme != "bearer" {
                return Err(github_error(401, GITHUB_UNDECODABLE_JWT));
            }
            let state = lock(&self.state);
            return verify_app_jwt(state.app.as_ref(), credential, now())
                .map_err(|message| github_error(401, message));
        }
        if (scheme == "bearer" || scheme == "token") && credential == self.token {
            Ok(())
        } else {
            Err(github_error(401, "Bad credentials"))
        }
    }

    /// `GET …/deliveries?per_page=&cursor=&redelivery=`.
    fn list(&self, req: &ApiRequest) -> Answer {
        let params = req.params();
        let get = |name: &str| {
            params
                .iter()
                .rev()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        // GitHub is lenient with `per_page`: missing, 0 or not a number is the default, and
        // over the maximum is the maximum.
        let per_page = match get("per_page").and_then(|v| v.parse::<usize>().ok()) {
            None | Some(0) => 30,
            Some(n) => n.min(100),
        };
        let redelivery = match get("redelivery") {
            None => None,
            Some("true") => Some(true),
            Some("false") => Some(false),
            Some(_) => return github_invalid("redelivery"),
        };
        let state = lock(&self.state);
        // The cursor is opaque to clients; here it names the last delivery of the previous
        // page, and the next page is what comes after it in the API's order (a keyset, so
        // deliveries arriving meanwhile do not shift the pages).
        let after = match get("cursor").filter(|c| !c.is_empty()) {
            None => None,
            Some(cursor) => {
                let found = cursor
                    .strip_prefix("v1_")
                    .and_then(|id| id.parse::<u64>().ok())
                    .and_then(|id| state.deliveries.iter().find(|d| d.id == id));
                match found {
                    Some(d) => Some(d.key()),
                    None => return github_invalid("cursor"),
                }
            }
        };
        let mut items: Vec<&Delivery> = state
            .deliveries
            .iter()
            .filter(|d| redelivery.is_none_or(|r| d.redelivery == r))
            .filter(|d| after.is_none_or(|key| d.key() < key))
            .collect();
        items.sort_by_key(|d| std::cmp::Reverse(d.key()));
        let more = items.len() > per_page;
        items.truncate(per_page);
        let body = Value::Array(items.iter().map(|d| d.summary()).collect());
        let answer = with_rate_headers(github_answer(200, &body));
        match items.last() {
            Some(last) if more => answer.with("link", self.next_link(req, per_page, last.id)),
            _ => answer,
        }
    }

    /// `<{base}{path}?per_page=N&…&cursor=C>; rel="next"`: the request's other parameters
    /// are kept, as GitHub's links keep them.
    fn next_link(&self, req: &ApiRequest, per_page: usize, last: u64) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        query.append_pair("per_page", &per_page.to_string());
        for (k, v) in req.params() {
            if k != "per_page" && k != "cursor" {
                query.append_pair(&k, &v);
            }
        }
        query.append_pair("cursor", &format!("v1_{last}"));
        format!(
            "<{}{}?{}>; rel=\"next\"",
            self.url,
            req.path,
            query.finish()
        )
    }

    /// `GET …/deliveries/{delivery_id}`.
    fn one(&self, id: u64) -> Answer {
        let state = lock(&self.state);
        match state.deliveries.iter().find(|d| d.id == id) {
            Some(d) => with_rate_headers(github_answer(200, &d.full(&self.hook_url))),
            None => github_not_found(),
        }
    }

    /// `POST …/deliveries/{delivery_id}/attempts`: 202 now, the redelivery a moment later.
    fn redeliver(self: &Arc<Self>, id: u64) -> Answer {
        let send = {
            let mut state = lock(&self.state);
            let Some(guid) = state
                .deliveries
                .iter()
                .find(|d| d.id == id)
                .map(|d| d.guid.clone())
            else {
                return github_not_found();
            };
            state.redelivery_requests.push((id, guid));
            if state.hold {
                state.held.push(id);
                false
            } else {
                true
            }
        };
        if send {
            self.spawn_redeliveries(vec![id]);
        }
        with_rate_headers(github_answer(202, &json!({})))
    }

    /// Sends the redeliveries of these deliveries, one after another, shortly after.
    fn spawn_redeliveries(self: &Arc<Self>, ids: Vec<u64>) {
        let github = self.clone();
        self.runtime.spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            for id in ids {
                let original = lock(&github.state)
                    .deliveries
                    .iter()
                    .find(|d| d.id == id)
                    .cloned();
                if let Some(d) = original {
                    github.attempt(&d.guid, &d.event, d.body, true).await;
                }
            }
        });
    }

    /// The headers GitHub sends with a delivery.
    fn signed_headers(&self, guid: &str, event: &str, body: &[u8]) -> Vec<(&'static str, String)> {
        let secret = self.secret.as_bytes();
        let sha256 = hmac_hex(ring::hmac::HMAC_SHA256, secret, &[body]);
        let sha1 = hmac_hex(ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, secret, &[body]);
        vec![
            ("Accept", "*/*".into()),
            ("Content-Type", "application/json".into()),
            ("User-Agent", "GitHub-Hookshot/abc123".into()),
            ("X-GitHub-Delivery", guid.into()),
            ("X-GitHub-Event", event.into()),
            ("X-GitHub-Hook-ID", GITHUB_HOOK_ID.to_string()),
            (
                "X-GitHub-Hook-Installation-Target-Type",
                "repository".into(),
            ),
            ("X-GitHub-Hook-Installation-Target-ID", "123".into()),
            ("X-Hub-Signature", format!("sha1={sha1}")),
            ("X-Hub-Signature-256", format!("sha256={sha256}")),
        ]
    }

    /// One attempt: POSTs the delivery to the hook URL, then logs it with its outcome.
    /// Returns the answer's status, 0 when there was none.
    async fn attempt(&self, guid: &str, event: &str, body: Vec<u8>, redelivery: bool) -> u16 {
        let id = {
            let mut state = lock(&self.state);
            state.last_id += 1;
            state.last_id
        };
        let delivered_at = now();
        let headers = self.signed_headers(guid, event, &body);
        let posted = post(&self.client, &self.hook_url, &headers, body.clone()).await;
        let status = match posted.failure {
            Some(failure) => failure.to_owned(),
            None if (200..300).contains(&posted.status) => "OK".to_owned(),
            None => format!("Invalid HTTP Response: {}", posted.status),
        };
        lock(&self.state).deliveries.push(Delivery {
            id,
            guid: guid.into(),
            event: event.into(),
            body,
            delivered_at,
            redelivery,
            duration: posted.seconds,
            status,
            status_code: posted.status,
            request_headers: headers
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
            response_headers: posted.headers,
            response_body: posted.body,
        });
        posted.status
    }
}

#[allow(dead_code)] // tests use what they need of the fake's API
impl FakeGitHub {
    /// `token`: the only Bearer token accepted; `secret`: the webhook secret used to sign
    /// deliveries; `hook_url`: where deliveries are POSTed (hookinbox's /hooks/<source>).
    pub async fn start(token: &str, secret: &str, hook_url: &str) -> FakeGitHub {
        let (listener, url) = bind().await;
        let inner = Arc::new(GitHub {
            url: url.clone(),
            token: token.into(),
            secret: secret.into(),
            hook_url: hook_url.into(),
            client: webhook_client(),
            runtime: Handle::current(),
            state: Mutex::new(GitHubState {
                // Delivery ids are large numbers on GitHub; start where they look like ids.
                last_id: 10_000_000_000,
                ..GitHubState::default()
            }),
        });
        let server = serve(listener, inner.clone(), GitHub::route);
        FakeGitHub {
            url,
            hook_id: GITHUB_HOOK_ID,
            inner,
            server,
        }
    }

    /// GitHub attempts a delivery now: logs a new delivery (new id, this GUID, not a
    /// redelivery, `delivered_at` now) and POSTs it, signed, to the hook URL. Its `status` is
    /// "OK" for a 2xx answer, "Invalid HTTP Response: 503" style otherwise, and with
    /// `status_code` 0 "failed to connect" or "timed out" (after 5 s) when nothing answered.
    /// Returns the answer's status, 0 when there was none.
    pub async fn deliver(&self, guid: &str, event: &str, body: &[u8]) -> u16 {
        self.inner.attempt(guid, event, body.to_vec(), false).await
    }

    /// Adds a delivery to the log without sending anything (one in the past): delivered at
    /// `delivered_at` (unix seconds), "OK"/200 when `ok`, else "failed to connect"/0 (the
    /// receiver was down: what the recovery is for). Returns its delivery id.
    pub fn record(&self, guid: &str, event: &str, body: &[u8], delivered_at: i64, ok: bool) -> u64 {
        let mut state = lock(&self.inner.state);
        state.last_id += 1;
        let id = state.last_id;
        let headers = self.inner.signed_headers(guid, event, body);
        state.deliveries.push(Delivery {
            id,
            guid: guid.into(),
            event: event.into(),
            body: body.to_vec(),
            delivered_at,
            redelivery: false,
            duration: 0.27,
            status: if ok { "OK" } else { "failed to connect" }.into(),
            status_code: if ok { 200 } else { 0 },
            request_headers: headers
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
            response_headers: Vec::new(),
            response_body: if ok { "ok" } else { "" }.into(),
        });
        id
    }

    /// The deliveries whose redelivery was requested (202), in request order, with their
    /// GUIDs.
    pub fn redelivery_requests(&self) -> Vec<(u64, String)> {
        lock(&self.inner.state).redelivery_requests.clone()
    }

    /// Every API request seen: (method, path and query as sent).
    pub fn api_calls(&self) -> Vec<(String, String)> {
        lock(&self.inner.state).api_calls.clone()
    }

    /// The next `n` API requests get GitHub's primary rate-limit answer: 403,
    /// `x-ratelimit-remaining: 0`, `x-ratelimit-reset: <now + 1>`.
    pub fn rate_limit_next(&self, n: usize) {
        self.inject(n, Injected::RateLimit);
    }

    /// The next `n` API requests get the secondary rate limit: 429, `retry-after: 1`.
    pub fn secondary_limit_next(&self, n: usize) {
        self.inject(n, Injected::SecondaryLimit);
    }

    /// The next `n` API requests get this status with a GitHub error body.
    pub fn fail_next(&self, n: usize, status: u16) {
        self.inject(n, Injected::Fail(status));
    }

    fn inject(&self, n: usize, injected: Injected) {
        let mut state = lock(&self.inner.state);
        state.injected.extend(std::iter::repeat_n(injected, n));
    }

    /// While held, redeliveries are accepted (202) but not sent, like a slow GitHub; when
    /// released, the held ones are sent, in the order they were requested.
    pub fn hold_redeliveries(&self, hold: bool) {
        let held = {
            let mut state = lock(&self.inner.state);
            state.hold = hold;
            if hold {
                Vec::new()
            } else {
                std::mem::take(&mut state.held)
            }
        };
        if !held.is_empty() {
            self.inner.spawn_redeliveries(held);
        }
    }

    /// The `/app/hook` routes accept JWTs of this GitHub App: RS256 with this RSA public key
    /// (PKCS#1 `RSAPublicKey` DER), `iss` = `app_id`.
    pub fn accept_app_jwt(&self, app_id: u64, public_key_der: Vec<u8>) {
        lock(&self.inner.state).app = Some((app_id, public_key_der));
    }
}

impl Drop for FakeGitHub {
    fn drop(&mut self) {
        self.server.abort();
    }
}

// ---------------------------------------------------------------------------------------
// Stripe
// ---------------------------------------------------------------------------------------

const STRIPE_API_VERSION: &str = "2024-06-20";
/// Stripe keeps events for 30 days; older ones are neither listed nor retrieved.
const STRIPE_RETENTION: i64 = 30 * 86_400;

/// A fake Stripe: the Events API and the webhook sender of one endpoint.
#[allow(dead_code)] // tests use what they need of the fake's API
pub struct FakeStripe {
    /// `http://127.0.0.1:PORT`, the API's base URL (requests go to `{url}/v1/events`).
    pub url: String,
    inner: Arc<Stripe>,
    server: AbortHandle,
}

struct Stripe {
    key: String,
    secret: String,
    hook_url: String,
    client: HttpClient,
    state: Mutex<StripeState>,
}

#[derive(Default)]
struct StripeState {
    /// In creation order; `seq` breaks ties between events created in the same second.
    events: Vec<StoredEvent>,
    api_calls: Vec<(String, String)>,
    injected: VecDeque<Injected>,
    requests: u64,
}

struct StoredEvent {
    seq: usize,
    /// Whether every webhook delivery of the event succeeded (`delivery_success`).
    delivered: bool,
    event: Event,
}

impl StoredEvent {
    /// The list's order is newest first: by `created`, then by creation order.
    fn key(&self) -> (i64, usize) {
        (self.event.created, self.seq)
    }
}

// The event object, field by field in the order Stripe renders them (serde keeps a
// struct's order, where a `serde_json::Value` would sort the keys).
#[derive(Serialize, Clone)]
struct Event {
    id: String,
    object: &'static str,
    api_version: &'static str,
    created: i64,
    data: EventData,
    livemode: bool,
    /// Constant: on Stripe this counts down as endpoints receive the event, so a listed
    /// event can differ from its webhook here; the fake keeps the two the same value.
    pending_webhooks: u32,
    request: EventRequest,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Serialize, Clone)]
struct EventData {
    object: DataObject,
}

/// A minimal API object of the kind the event type names (`payment_intent.succeeded` → a
/// `payment_intent`), with an `amount` that a changed webhook can alter.
#[derive(Serialize, Clone)]
struct DataObject {
    id: String,
    object: String,
    amount: i64,
    created: i64,
    currency: &'static str,
    livemode: bool,
    metadata: serde_json::Map<String, Value>,
}

#[derive(Serialize, Clone)]
struct EventRequest {
    id: Option<String>,
    idempotency_key: Option<String>,
}

#[derive(Serialize)]
struct EventList<'a> {
    object: &'static str,
    url: &'static str,
    has_more: bool,
    data: Vec<&'a Event>,
}

impl Event {
    fn new(id: &str, kind: &str, created: i64) -> Event {
        // `checkout.session.completed` is about a `checkout.session`.
        let object = kind.rsplit_once('.').map_or(kind, |(object, _)| object);
        let prefix = match object {
            "payment_intent" => "pi",
            "charge" => "ch",
            "invoice" => "in",
            "customer" => "cus",
            "customer.subscription" => "sub",
            "checkout.session" => "cs",
            _ => "obj",
        };
        let suffix = id.strip_prefix("evt_").unwrap_or(id);
        Event {
            id: id.into(),
            object: "event",
            api_version: STRIPE_API_VERSION,
            created,
            data: EventData {
                object: DataObject {
                    id: format!("{prefix}_{suffix}"),
                    object: object.into(),
                    amount: 2000,
                    created,
                    currency: "usd",
                    livemode: false,
                    metadata: serde_json::Map::new(),
                },
            },
            livemode: false,
            pending_webhooks: 1,
            request: EventRequest {
                id: None,
                idempotency_key: None,
            },
            kind: kind.into(),
        }
    }
}

/// The API's rendering: pretty-printed with 2-space indentation (serde_json's default).
fn stripe_pretty<T: Serialize>(value: &T) -> Vec<u8> {
    let mut body = serde_json::to_vec_pretty(value).unwrap_or_default();
    body.push(b'\n');
    body
}

fn stripe_answer(status: u16, body: Vec<u8>, request_id: u64) -> Answer {
    Answer {
        status,
        headers: vec![("content-type", "application/json".into())],
        body,
    }
    .with("request-id", format!("req_fake{request_id:010}"))
    .with("stripe-version", STRIPE_API_VERSION)
}

/// Stripe's error object. Its keys come out sorted, as Stripe renders them.
struct StripeError {
    status: u16,
    kind: &'static str,
    message: String,
    param: Option<String>,
    code: Option<&'static str>,
}

impl StripeError {
    fn invalid(message: impl Into<String>, param: Option<&str>) -> StripeError {
        StripeError {
            status: 400,
            kind: "invalid_request_error",
            message: message.into(),
            param: param.map(Into::into),
            code: None,
        }
    }

    fn body(&self) -> Vec<u8> {
        let mut error = serde_json::Map::new();
        if let Some(code) = self.code {
            error.insert("code".into(), json!(code));
            error.insert(
                "doc_url".into(),
                json!(format!(
                    "https://stripe.com/docs/error-codes/{}",
                    code.replace('_', "-")
                )),
            );
        }
        error.insert("message".into(), json!(self.message));
        if let Some(param) = &self.param {
            error.insert("param".into(), json!(param));
        }
        error.insert("type".into(), json!(self.kind));
        stripe_pretty(&json!({ "error": error }))
    }
}

/// `sk_test_abc…wxyz` → `sk_test_********…wxyz`: the prefix and the last four, as Stripe
/// shows a key it refuses.
fn mask_key(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    let underscores: Vec<usize> = chars
        .iter()
        .enumerate()
        .filter(|(_, c)| **c == '_')
        .map(|(i, _)| i)
        .collect();
    let prefix = match underscores.as_slice() {
        [] => 0,
        [one] => one + 1,
        [_, second, ..] => second + 1,
    };
    if chars.len() <= prefix + 4 {
        return chars[..prefix.min(chars.len())].iter().collect::<String>() + "****";
    }
    let tail = chars.len() - 4;
    let mut masked: String = chars[..prefix].iter().collect();
    masked.extend(std::iter::repeat_n('*', tail - prefix));
    masked.extend(&chars[tail..]);
    masked
}

/// `*` matches any run of characters: `invoice.*`, `*.succeeded`.
fn glob(pattern: &str, s: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == s,
        Some((head, tail)) => s.strip_prefix(head).is_some_and(|rest| {
            (0..=rest.len())
                .filter(|i| rest.is_char_boundary(*i))
                .any(|i| glob(tail, &rest[i..]))
        }),
    }
}

/// The parameters of `GET /v1/events`.
#[derive(Default)]
struct EventQuery {
    created: Option<i64>,
    gt: Option<i64>,
    gte: Option<i64>,
    lt: Option<i64>,
    lte: Option<i64>,
    limit: Option<i64>,
    starting_after: Option<String>,
    ending_before: Option<String>,
    delivery_success: Option<bool>,
    kind: Option<String>,
    kinds: Vec<String>,
}

impl EventQuery {
    fn parse(params: Vec<(String, String)>) -> Result<EventQuery, StripeError> {
        let int = |name: &str, v: &str| {
            v.parse::<i64>()
                .map_err(|_| StripeError::invalid(format!("Invalid integer: {v}"), Some(name)))
        };
        let mut q = EventQuery::default();
        let mut has_types = false;
        for (name, value) in params {
            match name.as_str() {
                "created" => q.created = Some(int(&name, &value)?),
                "created[gt]" => q.gt = Some(int(&name, &value)?),
                "created[gte]" => q.gte = Some(int(&name, &value)?),
                "created[lt]" => q.lt = Some(int(&name, &value)?),
                "created[lte]" => q.lte = Some(int(&name, &value)?),
                "limit" => q.limit = Some(int(&name, &value)?),
                "starting_after" => q.starting_after = Some(value),
                "ending_before" => q.ending_before = Some(value),
                "delivery_success" => {
                    q.delivery_success = Some(match value.as_str() {
                        "true" => true,
                        "false" => false,
                        _ => {
                            return Err(StripeError::invalid(
                                format!("Invalid boolean: {value}"),
                                Some("delivery_success"),
                            ));
                        }
                    })
                }
                "type" => q.kind = Some(value),
                // Arrays arrive as `types[]=a&types[]=b` or, from Stripe's own libraries,
                // `types[0]=a&types[1]=b`.
                n if n == "types[]"
                    || n.strip_prefix("types[")
                        .and_then(|r| r.strip_suffix(']'))
                        .is_some_and(|i| {
                            !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit())
                        }) =>
                {
                    has_types = true;
                    q.kinds.push(value);
                }
                // Expansions change nothing in an event list.
                n if n.starts_with("expand[") => {}
                _ => {
                    return Err(StripeError::invalid(
                        format!("Received unknown parameter: {name}"),
                        Some(&name),
                    ));
                }
            }
        }
        let limit = q.limit.unwrap_or(10);
        if limit < 1 {
            return Err(StripeError::invalid(
                "This value must be greater than or equal to 1.",
                Some("limit"),
            ));
        }
        if limit > 100 {
            return Err(StripeError::invalid(
                "This value must be less than or equal to 100.",
                Some("limit"),
            ));
        }
        if q.kind.is_some() && has_types {
            return Err(StripeError::invalid(
                "You cannot specify both `type` and `types`. Please use only one of them.",
                Some("types"),
            ));
        }
        if q.kinds.len() > 20 {
            return Err(StripeError::invalid(
                "You can only specify up to 20 types.",
                Some("types"),
            ));
        }
        if q.starting_after.is_some() && q.ending_before.is_some() {
            return Err(StripeError::invalid(
                "You may only specify one of these parameters: ending_before, starting_after.",
                None,
            ));
        }
        Ok(q)
    }

    fn matches(&self, e: &StoredEvent, now: i64) -> bool {
        let created = e.event.created;
        let kind = e.event.kind.as_str();
        created >= now - STRIPE_RETENTION
            && self.created.is_none_or(|c| created == c)
            && self.gt.is_none_or(|c| created > c)
            && self.gte.is_none_or(|c| created >= c)
            && self.lt.is_none_or(|c| created < c)
            && self.lte.is_none_or(|c| created <= c)
            && self.delivery_success.is_none_or(|d| e.delivered == d)
            && self.kind.as_deref().is_none_or(|p| glob(p, kind))
            && (self.kinds.is_empty() || self.kinds.iter().any(|p| glob(p, kind)))
    }
}

impl Stripe {
    fn route(self: &Arc<Self>, req: ApiRequest) -> Answer {
        let (injected, request_id) = {
            let mut state = lock(&self.state);
            state
                .api_calls
                .push((req.method.to_string(), req.path_and_query()));
            state.requests += 1;
            (state.injected.pop_front(), state.requests)
        };
        let result = match injected {
            Some(injected) => Err(stripe_injected(injected)),
            None => self.serve_request(&req),
        };
        match result {
            Ok(body) => stripe_answer(200, body, request_id),
            Err(error) => {
                let answer = stripe_answer(error.status, error.body(), request_id);
                if error.status == 401 {
                    answer.with("www-authenticate", "Basic realm=\"Stripe\"")
                } else {
                    answer
                }
            }
        }
    }

    fn serve_request(&self, req: &ApiRequest) -> Result<Vec<u8>, StripeError> {
        let unrecognized = || StripeError {
            status: 404,
            kind: "invalid_request_error",
            message: format!(
                "Unrecognized request URL ({}: {}). Please see https://stripe.com/docs or we \
                 can help at https://support.stripe.com/.",
                req.method, req.path
            ),
            param: None,
            code: None,
        };
        if req.method != Method::GET {
            return Err(unrecognized());
        }
        let target = match req.path.strip_prefix("/v1/events") {
            Some("") => None,
            Some(rest) => match rest.strip_prefix('/') {
                Some(id) if !id.is_empty() && !id.contains('/') => Some(id),
                _ => return Err(unrecognized()),
            },
            None => return Err(unrecognized()),
        };
        self.authenticate(req)?;
        match target {
            None => self.list(EventQuery::parse(req.params())?),
            Some(id) => self.retrieve(id),
        }
    }

    /// `Authorization: Bearer <key>`, or Basic with the key as the user name.
    fn authenticate(&self, req: &ApiRequest) -> Result<(), StripeError> {
        let unauthorized = |message: String| StripeError {
            status: 401,
            kind: "invalid_request_error",
            message,
            param: None,
            code: None,
        };
        let header = req.header("authorization").unwrap_or("").trim();
        let given = match header.split_once(' ') {
            Some((scheme, key)) if scheme.eq_ignore_ascii_case("bearer") => key.trim().to_owned(),
            Some((scheme, encoded)) if scheme.eq_ignore_ascii_case("basic") => STANDARD
                .decode(encoded.trim())
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .map(|user_pass| {
                    user_pass
                        .split_once(':')
                        .map_or(user_pass.as_str(), |(user, _)| user)
                        .to_owned()
                })
                .unwrap_or_default(),
            _ => String::new(),
        };
        if given.is_empty() {
            return Err(unauthorized(
                "You did not provide an API key. You need to provide your API key in the \
                 Authorization header, using Bearer auth (e.g. 'Authorization: Bearer \
                 YOUR_SECRET_KEY'). See https://stripe.com/docs/api#authentication for \
                 details, or we can help at https://support.stripe.com/."
                    .into(),
            ));
        }
        if given != self.key {
            return Err(unauthorized(format!(
                "Invalid API Key provided: {}",
                mask_key(&given)
            )));
        }
        Ok(())
    }

    fn list(&self, q: EventQuery) -> Result<Vec<u8>, StripeError> {
        let limit = q.limit.unwrap_or(10) as usize;
        let now = now();
        let state = lock(&self.state);
        // The cursors are keysets: the page is what comes after (or before) the named event
        // in the list's order, whether or not that event itself passes the filters.
        let cursor = |param: &str, id: &str| {
            state
                .events
                .iter()
                .find(|e| e.event.id == id)
                .map(StoredEvent::key)
                .ok_or_else(|| StripeError {
                    code: Some("resource_missing"),
                    ..StripeError::invalid(format!("No such event: '{id}'"), Some(param))
                })
        };
        let after = match &q.starting_after {
            Some(id) => Some(cursor("starting_after", id)?),
            None => None,
        };
        let before = match &q.ending_before {
            Some(id) => Some(cursor("ending_before", id)?),
            None => None,
        };
        let mut items: Vec<&StoredEvent> = state
            .events
            .iter()
            .filter(|e| q.matches(e, now))
            .filter(|e| after.is_none_or(|k| e.key() < k))
            .filter(|e| before.is_none_or(|k| e.key() > k))
            .collect();
        items.sort_by_key(|e| std::cmp::Reverse(e.key()));
        let has_more = items.len() > limit;
        if before.is_some() {
            // `ending_before` pages backwards: the `limit` events just before the cursor,
            // still listed newest first.
            items.drain(..items.len().saturating_sub(limit));
        } else {
            items.truncate(limit);
        }
        Ok(stripe_pretty(&EventList {
            object: "list",
            url: "/v1/events",
            has_more,
            data: items.iter().map(|e| &e.event).collect(),
        }))
    }

    fn retrieve(&self, id: &str) -> Result<Vec<u8>, StripeError> {
        let state = lock(&self.state);
        state
            .events
            .iter()
            .find(|e| e.event.id == id && e.event.created >= now() - STRIPE_RETENTION)
            .map(|e| stripe_pretty(&e.event))
            .ok_or_else(|| StripeError {
                status: 404,
                code: Some("resource_missing"),
                ..StripeError::invalid(format!("No such event: '{id}'"), Some("id"))
            })
    }
}

fn stripe_injected(injected: Injected) -> StripeError {
    match injected {
        Injected::RateLimit | Injected::SecondaryLimit => StripeError {
            status: 429,
            code: Some("rate_limit"),
            ..StripeError::invalid(
                "Request rate limit exceeded. Learn more about rate limits here \
                 https://stripe.com/docs/rate-limits.",
                None,
            )
        },
        Injected::Fail(status) if status >= 500 => StripeError {
            status,
            kind: "api_error",
            message: "An unknown error occurred".into(),
            param: None,
            code: None,
        },
        Injected::Fail(status) => StripeError {
            status,
            ..StripeError::invalid(reason(status), None)
        },
    }
}

#[allow(dead_code)] // tests use what they need of the fake's API
impl FakeStripe {
    /// `key`: the only API key accepted (Bearer, or Basic with the key as user name);
    /// `secret`: the endpoint secret (`whsec_…`) that signs webhooks; `hook_url`:
    /// hookinbox's endpoint.
    pub async fn start(key: &str, secret: &str, hook_url: &str) -> FakeStripe {
        let (listener, url) = bind().await;
        let inner = Arc::new(Stripe {
            key: key.into(),
            secret: secret.into(),
            hook_url: hook_url.into(),
            client: webhook_client(),
            state: Mutex::new(StripeState::default()),
        });
        let server = serve(listener, inner.clone(), Stripe::route);
        FakeStripe { url, inner, server }
    }

    /// Stripe creates an event: adds it to the log and returns its JSON as the API renders
    /// it (pretty, 2-space indentation, keys in Stripe's order: id, object, api_version,
    /// created, data, livemode, pending_webhooks, request, type). `delivered`: whether all
    /// its webhook deliveries succeeded (the `delivery_success` filter). An id that exists
    /// already is a mistake in the test: it panics.
    pub fn create(&self, id: &str, event_type: &str, created: i64, delivered: bool) -> Vec<u8> {
        let event = Event::new(id, event_type, created);
        let rendered = stripe_pretty(&event);
        let mut state = lock(&self.inner.state);
        assert!(
            state.events.iter().all(|e| e.event.id != id),
            "FakeStripe::create: event {id} exists already"
        );
        let seq = state.events.len();
        state.events.push(StoredEvent {
            seq,
            delivered,
            event,
        });
        rendered
    }

    /// Marks an event's deliveries as all succeeded, or not. Panics on an unknown event.
    pub fn set_delivered(&self, id: &str, delivered: bool) {
        let mut state = lock(&self.inner.state);
        let event = state.events.iter_mut().find(|e| e.event.id == id);
        event
            .unwrap_or_else(|| panic!("FakeStripe::set_delivered: no event {id}"))
            .delivered = delivered;
    }

    /// Stripe sends the event's webhook now, signed `Stripe-Signature: t=<now>,v1=<hex
    /// HMAC-SHA256(secret, "{t}.{body}")>`. The body is the event rendered compactly: the
    /// same JSON value as the API's rendering with other bytes, so that only value equality
    /// matches the two. `changed`: the body differs in value (`data.object.amount` + 1).
    /// A 2xx answer marks the event delivered. Returns the answer's status, 0 when there
    /// was none. Panics on an unknown event.
    pub async fn send_webhook(&self, id: &str, changed: bool) -> u16 {
        let mut event = lock(&self.inner.state)
            .events
            .iter()
            .find(|e| e.event.id == id)
            .map(|e| e.event.clone())
            .unwrap_or_else(|| panic!("FakeStripe::send_webhook: no event {id}"));
        if changed {
            event.data.object.amount += 1;
        }
        let body = serde_json::to_vec(&event).unwrap_or_default();
        let t = now().to_string();
        let v1 = hmac_hex(
            ring::hmac::HMAC_SHA256,
            self.inner.secret.as_bytes(),
            &[t.as_bytes(), b".", &body],
        );
        let headers = [
            ("Accept", "*/*; q=0.5, application/xml".to_owned()),
            ("Cache-Control", "no-cache".to_owned()),
            ("Content-Type", "application/json; charset=utf-8".to_owned()),
            ("Stripe-Signature", format!("t={t},v1={v1}")),
            (
                "User-Agent",
                "Stripe/1.0 (+https://stripe.com/docs/webhooks)".to_owned(),
            ),
        ];
        let posted = post(&self.inner.client, &self.inner.hook_url, &headers, body).await;
        if (200..300).contains(&posted.status) {
            self.set_delivered(id, true);
        }
        posted.status
    }

    /// Every API request seen: (method, path and query as sent, percent-encoding kept).
    pub fn api_calls(&self) -> Vec<(String, String)> {
        lock(&self.inner.state).api_calls.clone()
    }

    /// The next `n` API requests get Stripe's 429 `rate_limit` error (no `Retry-After`:
    /// Stripe sends none).
    pub fn rate_limit_next(&self, n: usize) {
        self.inject(n, Injected::RateLimit);
    }

    /// The next `n` API requests get this status with a Stripe error body (`api_error` for
    /// 5xx, `invalid_request_error` otherwise).
    pub fn fail_next(&self, n: usize, status: u16) {
        self.inject(n, Injected::Fail(status));
    }

    fn inject(&self, n: usize, injected: Injected) {
        let mut state = lock(&self.inner.state);
        state.injected.extend(std::iter::repeat_n(injected, n));
    }
}

impl Drop for FakeStripe {
    fn drop(&mut self) {
        self.server.abort();
    }
}

// ---------------------------------------------------------------------------------------
// GitHub's meta API
// ---------------------------------------------------------------------------------------

/// GitHub's `GET /meta`, with `hooks` as the test sets it.
pub struct FakeMeta {
    /// `http://127.0.0.1:PORT/meta`, the document's URL.
    pub url: String,
    inner: Arc<Meta>,
    server: AbortHandle,
}

struct Meta {
    hooks: Mutex<Vec<String>>,
    failing: std::sync::atomic::AtomicBool,
    calls: std::sync::atomic::AtomicUsize,
}

impl FakeMeta {
    /// Serves `hooks` as the ranges GitHub sends webhooks from.
    pub async fn start(hooks: &[&str]) -> FakeMeta {
        let (listener, base) = bind().await;
        let inner = Arc::new(Meta {
            hooks: Mutex::new(hooks.iter().map(|h| h.to_string()).collect()),
            failing: Default::default(),
            calls: Default::default(),
        });
        let server = serve(listener, inner.clone(), Meta::route);
        FakeMeta {
            url: format!("{base}/meta"),
            inner,
            server,
        }
    }

    /// From now on, answers 503 (`failing`) or the list again.
    pub fn fail(&self, failing: bool) {
        self.inner
            .failing
            .store(failing, std::sync::atomic::Ordering::SeqCst);
    }

    /// How many times `/meta` was asked for.
    pub fn calls(&self) -> usize {
        self.inner.calls.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Meta {
    fn route(meta: &Arc<Meta>, req: ApiRequest) -> Answer {
        let json = |status: u16, value: Value| Answer {
            status,
            headers: vec![("content-type", "application/json; charset=utf-8".into())],
            body: serde_json::to_vec_pretty(&value).unwrap_or_default(),
        };
        if req.method != Method::GET || req.path != "/meta" {
            return json(404, json!({"message": "Not Found", "status": "404"}));
        }
        meta.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if meta.failing.load(std::sync::atomic::Ordering::SeqCst) {
            return json(
                503,
                json!({"message": "Service Unavailable", "status": "503"}),
            );
        }
        // The shape of GitHub's answer: each service's ranges, hooks among them.
        json(
            200,
            json!({
                "verifiable_password_authentication": false,
                "hooks": lock(&meta.hooks).clone(),
                "web": ["140.82.112.0/20", "2a0a:a440::/29"],
                "api": ["192.30.252.0/22"],
                "git": ["140.82.112.0/20"],
            }),
        )
    }
}

impl Drop for FakeMeta {
    fn drop(&mut self) {
        self.server.abort();
    }
}
