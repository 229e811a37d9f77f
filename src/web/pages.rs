//! The pages: each reads what it shows through the store's operator connections (SQLite's
//! read pool, or PostgreSQL) and renders it with maud, which escapes every value it
//! interpolates.

use std::time::{Duration, SystemTime};

use super::{Page, body, respond};
use crate::store::stats;
use crate::store::views::conflicts::ConflictSide;
use crate::store::views::events::{EventFilter, EventRow, Range};
use crate::terminal::escape;
use crate::{clock, store};
use bytes::Bytes;
use http_body_util::Full;
use hyper::Response;
use hyper::header;
use hyper::http::StatusCode;
use maud::{DOCTYPE, Markup, html};

/// Events a page lists.
const PAGE_SIZE: i64 = 50;
/// Rows the overview's recent events and the dead and conflicts pages list.
const RECENT: i64 = 10;
const LISTED: u32 = 200;
/// The window the overview's rates and failure shares are over.
pub const WINDOW: Duration = Duration::from_secs(3600);

/// An event's status, as the `recent_events` view words it.
const STATUSES: [(&str, &str); 4] = [
    ("pending", "pending: some delivery is still to be made"),
    ("delivered", "delivered: every target took it"),
    ("dead", "dead: some target gave up"),
    ("stored", "stored: no targets"),
];

/// A provider-supplied string as the page shows it: invisible and bidi characters written
/// out (maud escapes the HTML).
fn p(s: &str) -> String {
    escape(s).into_owned()
}

/// How long ago an inbox time was, in a word or two.
fn ago(iso: &str) -> String {
    let Ok(t) = humantime::parse_rfc3339(iso) else {
        return iso.to_owned();
    };
    let secs = SystemTime::now()
        .duration_since(t)
        .unwrap_or_default()
        .as_secs();
    match secs {
        0..60 => format!("{secs}s ago"),
        60..3600 => format!("{}m ago", secs / 60),
        3600..86400 => format!("{}h {}m ago", secs / 3600, secs % 3600 / 60),
        _ => format!("{}d ago", secs / 86400),
    }
}

/// How far back the gaps page looks.
const GAP_DAYS: i64 = 30;

fn time(iso: &str) -> Markup {
    html! { time datetime=(iso) title=(iso) { (ago(iso)) } }
}

fn state_class(state: &str) -> &'static str {
    match state {
        "delivered" | "superseded" => "ok",
        "dead" => "bad",
        "pending" | "in_flight" => "wait",
        _ => "",
    }
}

/// The event list's filters, as the query string gives them.
#[derive(Debug, Default, Clone)]
struct Filters {
    source: Option<String>,
    event_type: Option<String>,
    status: Option<String>,
    since: Option<String>,
    until: Option<String>,
    q: Option<String>,
}

impl Filters {
    /// The query string for these filters (for paging links and the replay form).
    fn query(&self) -> Vec<(&'static str, String)> {
        [
            ("source", &self.source),
            ("type", &self.event_type),
            ("status", &self.status),
            ("since", &self.since),
            ("until", &self.until),
            ("q", &self.q),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.clone().map(|v| (k, v)))
        .collect()
    }
}

fn encode(pairs: &[(&str, String)]) -> String {
    let mut s = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        s.append_pair(k, v);
    }
    s.finish()
}

impl Filters {
    /// What the store's event listing selects.
    fn select(&self) -> EventFilter {
        EventFilter {
            source: self.source.clone(),
            status: self.status.clone(),
            event_type: self.event_type.clone(),
            id_contains: self.q.clone(),
            since: self.since.clone(),
            until: self.until.clone(),
        }
    }
}

/// The newest events `f` selects, below `before` when given: as in `hookinbox events`.
fn list_events(
    db: crate::store::Db,
    f: &Filters,
    before: Option<i64>,
    limit: i64,
) -> anyhow::Result<Vec<EventRow>> {
    db.events(&f.select(), &Range::Page { before, limit })
}

/// An event's deliveries in a word each: `target=state …`.
fn deliveries(e: &EventRow) -> String {
    let words: Vec<String> = e
        .deliveries
        .iter()
        .map(|d| format!("{}={}", d.target, d.state))
        .collect();
    words.join(" ")
}

fn events_table(rows: &[EventRow]) -> Markup {
    html! {
        div.scroll {
            table {
                thead { tr {
                    th scope="col" { "ID" } th scope="col" { "Received" } th scope="col" { "Source" }
                    th scope="col" { "Event id" } th scope="col" { "Type" } th scope="col" { "Size" }
                    th scope="col" { "Status" } th scope="col" { "Deliveries" }
                } }
                tbody {
                    @for r in rows {
                        tr {
                            td { a href={ "/events/" (r.id) } { (r.id) } }
                            td { (time(&r.received_at)) }
                            td { (p(&r.source)) }
                            td.id {
                                a href={ "/events/" (r.id) } { (p(&r.event_id)) }
                                @if r.origin == "api" {
                                    " " span.origin title="fetched from the provider's API by recover, not signed" { "api" }
                                }
                            }
                            td { (r.event_type.as_deref().map(p).unwrap_or_else(|| "–".into())) }
                            td.num { (r.size) }
                            td { span class=(state_class(&r.status)) { (r.status) } }
                            td { (p(&deliveries(r))) }
                        }
                    }
                    @if rows.is_empty() {
                        tr { td colspan="8" { "No events match." } }
                    }
                }
            }
        }
    }
}

impl Page<'_> {
    /// The frame of every page: the skip link, the navigation, the banners of what is wrong
    /// now, and `content` under an `h1` of `title`.
    pub(super) fn layout(&self, title: &str, content: Markup) -> Markup {
        let active = self.web.board.active();
        html! {
            (DOCTYPE)
            html lang="en" {
                head {
                    meta charset="utf-8";
                    meta name="viewport" content="width=device-width, initial-scale=1";
                    title { (title) " · hookinbox" }
                    link rel="stylesheet" href="/style.css";
                }
                body {
                    a.skip href="#main" { "Skip to content" }
                    header {
                        nav aria-label="Main" {
                            a.brand href="/" { "hookinbox" }
                            a href="/" { "Overview" }
                            a href="/events" { "Events" }
                            a href="/dead" { "Dead" }
                            a href="/conflicts" { "Conflicts" }
                            a href="/gaps" { "Gaps" }
                        }
                        @if !self.web.actions {
                            p.mode { "Read-only (admin.actions = false)" }
                        }
                    }
                    @if !active.is_empty() {
                        section.banners aria-label="Alerts" {
                            @for c in &active {
                                div.banner role="alert" {
                                    strong { (c.kind.word()) " · " (p(&c.subject())) }
                                    " since " (time(&c.since)) ": " (c.detail)
                                }
                            }
                        }
                    }
                    main #main {
                        h1 { (title) }
                        (content)
                    }
                }
            }
        }
    }

    /// A hidden field with this process's CSRF token, for every action form.
    pub(super) fn token(&self) -> Markup {
        html! { input type="hidden" name="csrf" value=(self.web.csrf()); }
    }

    pub(super) async fn overview(&self) -> Response<Full<Bytes>> {
        let configured = self.configured.clone();
        let since = clock::iso(SystemTime::now() - WINDOW);
        let read = self
            .read(move |db| {
                let sources = stats::sources(db, &configured.names(), &since)?;
                let targets = stats::targets(db, &configured.pairs(), &since)?;
                let paused = store::pause::all(db)?;
                let recent = list_events(db, &Filters::default(), None, RECENT)?;
                Ok((sources, targets, paused, recent))
            })
            .await;
        let (sources, targets, paused, recent) = match read {
            Ok(r) => r,
            Err(e) => return self.failed("reading the overview", &e),
        };
        let content = html! {
            section aria-labelledby="sources" {
                h2 #sources { "Sources" }
                div.scroll { table {
                    thead { tr {
                        th scope="col" { "Source" } th scope="col" { "Scheme" }
                        th scope="col" { "Events, last hour" } th scope="col" { "Last event" }
                    } }
                    tbody {
                        @for (s, c) in sources.iter().zip(&self.configured.sources) {
                            tr {
                                th scope="row" { a href={ "/events?" (encode(&[("source", s.source.clone())])) } { (p(&s.source)) } }
                                td { (c.scheme) }
                                td.num { (s.events) }
                                td { @match &s.last_received { Some(t) => (time(t)), None => "never" } }
                            }
                        }
                        @if sources.is_empty() { tr { td colspan="4" { "No sources are configured." } } }
                    }
                } }
            }
            section aria-labelledby="targets" {
                h2 #targets { "Targets" }
                div.scroll { table {
                    thead { tr {
                        th scope="col" { "Target" } th scope="col" { "Attempts, last hour" }
                        th scope="col" { "Failed" } th scope="col" { "Pending" }
                        th scope="col" { "Oldest pending" } th scope="col" { "Dead" }
                        th scope="col" { "State" }
                    } }
                    tbody {
                        @for t in &targets {
                            @let pause = paused.iter().find(|x| x.source == t.source && x.target == t.target);
                            tr {
                                th scope="row" { (p(&t.source)) "/" (p(&t.target)) }
                                td.num { (t.attempts) }
                                td.num { @match t.failure_share() {
                                    Some(share) => span class=(if share > 0.0 { "bad" } else { "ok" }) { (format!("{:.0}%", share * 100.0)) },
                                    None => "–",
                                } }
                                td.num { (t.pending) }
                                td { @match &t.oldest_pending { Some(at) => (time(at)), None => "–" } }
                                td.num {
                                    @if t.dead > 0 {
                                        a.bad href={ "/dead?" (encode(&[("source", t.source.clone()), ("target", t.target.clone())])) } { (t.dead) }
                                    } @else { "0" }
                                }
                                td {
                                    @match pause {
                                        Some(x) => { span.wait { "paused" } " " (time(&x.paused_at)) " by " (p(&x.paused_by)) }
                                        None => span.ok { "running" },
                                    }
                                    @if self.web.actions {
                                        form.inline method="post" action={ "/actions/" (if pause.is_some() { "resume" } else { "pause" }) } {
                                            (self.token())
                                            input type="hidden" name="source" value=(t.source);
                                            input type="hidden" name="target" value=(t.target);
                                            button type="submit" { (if pause.is_some() { "Resume" } else { "Pause" }) }
                                        }
                                    }
                                }
                            }
                        }
                        @if targets.is_empty() { tr { td colspan="7" { "No targets are configured." } } }
                    }
                } }
            }
            section aria-labelledby="recent" {
                h2 #recent { "Recent events" }
                (events_table(&recent))
                p { a href="/events" { "All events" } }
            }
        };
        respond(StatusCode::OK, self.layout("Overview", content))
    }

    /// The filters from the query string; a time that does not parse is an error to show.
    fn filters(&self) -> Result<Filters, String> {
        let time = |name: &str| -> Result<Option<String>, String> {
            self.param(name)
                .map(|t| clock::parse_time_arg(t).map_err(|e| format!("{name}: {e}")))
                .transpose()
        };
        let status = self.param("status").map(str::to_owned);
        if let Some(s) = &status
            && !STATUSES.iter().any(|(word, _)| word == s)
        {
            return Err(format!(
                "status: {s:?} is not one of pending, delivered, dead, stored"
            ));
        }
        Ok(Filters {
            source: self.param("source").map(str::to_owned),
            event_type: self.param("type").map(str::to_owned),
            status,
            since: time("since")?,
            until: time("until")?,
            q: self.param("q").map(str::to_owned),
        })
    }

    fn filter_form(&self, f: &Filters) -> Markup {
        let raw = |name: &str| self.param(name).unwrap_or("").to_owned();
        html! {
            form.filters method="get" action="/events" role="search" aria-label="Filter events" {
                label { "Source "
                    select name="source" {
                        option value="" { "any" }
                        @for s in &self.configured.sources {
                            option value=(s.name) selected[f.source.as_deref() == Some(&s.name)] { (s.name) }
                        }
                    }
                }
                label title="* matches any run of characters, dots included" { "Type " input type="text" name="type" value=(raw("type")) size="16" placeholder="invoice.*"; }
                label { "Status "
                    select name="status" {
                        option value="" { "any" }
                        @for (word, what) in STATUSES {
                            option value=(word) title=(what) selected[f.status.as_deref() == Some(word)] { (word) }
                        }
                    }
                }
                label { "Since " input type="text" name="since" value=(raw("since")) placeholder="2h or 2026-12-01T08:00:00Z" size="14"; }
                label { "Until " input type="text" name="until" value=(raw("until")) size="14"; }
                label { "Event id contains " input type="search" name="q" value=(raw("q")) size="16"; }
                button type="submit" { "Filter" }
                " " a href="/events" { "Clear" }
            }
        }
    }

    pub(super) async fn events(&self) -> Response<Full<Bytes>> {
        // `before` comes from the "Older" link; one that is not a row id is refused like a
        // bad filter, rather than quietly showing the first page.
        let before = self
            .param("before")
            .map(|b| {
                b.parse::<i64>()
                    .map_err(|_| format!("before: {b:?} is not an event's row id"))
            })
            .transpose();
        let (f, before) = match self.filters().and_then(|f| Ok((f, before?))) {
            Ok(v) => v,
            Err(e) => {
                let content =
                    html! { (self.filter_form(&Filters::default())) p.error role="alert" { (e) } };
                return respond(StatusCode::BAD_REQUEST, self.layout("Events", content));
            }
        };
        let filters = f.clone();
        let mut rows = match self
            .read(move |db| list_events(db, &filters, before, PAGE_SIZE + 1))
            .await
        {
            Ok(rows) => rows,
            Err(e) => return self.failed("reading events", &e),
        };
        let more = rows.len() as i64 > PAGE_SIZE;
        rows.truncate(PAGE_SIZE as usize);
        let next = more.then(|| {
            let mut q = f.query();
            q.push(("before", rows.last().map_or(0, |r| r.id).to_string()));
            encode(&q)
        });
        // A bulk replay takes the filters the delivery side knows (a search by id is not
        // one), and needs one that chooses: a source or an end time alone only narrow.
        let chooses = f.event_type.is_some()
            || f.since.is_some()
            || f.status.as_deref().is_some_and(|s| s != "stored");
        let replayable = self.web.actions && chooses && f.q.is_none();
        let content = html! {
            (self.filter_form(&f))
            (events_table(&rows))
            nav.paging aria-label="Pages" {
                @if before.is_some() { a href={ "/events?" (encode(&f.query())) } { "Newest" } " " }
                @if let Some(next) = &next { a href={ "/events?" (next) } rel="next" { "Older" } }
            }
            @if replayable {
                form method="post" action="/actions/replay" {
                    (self.token())
                    @for (k, v) in f.query() { input type="hidden" name=(k) value=(v); }
                    button type="submit" { "Replay the deliveries of these events…" }
                    " (shows what it would re-queue first)"
                }
            }
        };
        respond(StatusCode::OK, self.layout("Events", content))
    }

    pub(super) async fn event(&self, id: i64) -> Response<Full<Bytes>> {
        let shown = match self
            .read(move |db| {
                let Some(event) = db.event(id)? else {
                    return Ok(None);
                };
                let paused = store::pause::all(db)?;
                Ok(Some((event, paused)))
            })
            .await
        {
            Ok(Some(s)) => s,
            Ok(None) => return self.not_found(),
            Err(e) => return self.failed("reading the event", &e),
        };
        let (e, paused) = shown;
        let headers: Vec<(String, String)> = e
            .headers
            .as_ref()
            .and_then(|h| serde_json::from_value(h.clone()).ok())
            .unwrap_or_default();
        let title = format!("Event {}", e.id);
        let content = html! {
            dl.facts {
                dt { "Source" } dd { (p(&e.source)) }
                @if !e.account.is_empty() { dt { "Account" } dd { (p(&e.account)) } }
                dt { "Event id" } dd.id { (p(&e.event_id)) }
                dt { "Type" } dd { (e.event_type.as_deref().map(p).unwrap_or_else(|| "–".into())) }
                dt { "Received" } dd { (e.received_at) }
                dt { "Origin" } dd {
                    @if e.origin == "api" {
                        span.origin { "api" } " fetched from the provider's API by recover, not signed"
                    } @else { "webhook, signed" }
                }
                @if let Some(t) = &e.provider_time { dt { "Provider's time" } dd { (p(t)) } }
                dt { "Size" } dd { (e.size) " bytes" }
                dt { "SHA-256" } dd.id { (e.sha256) }
            }
            @if self.web.actions && !e.deliveries.is_empty() && !e.pruned {
                form method="post" action="/actions/replay" {
                    (self.token())
                    input type="hidden" name="event" value=(e.id);
                    button type="submit" { "Replay this event…" }
                }
            }
            section aria-labelledby="deliveries" {
                h2 #deliveries { "Deliveries" }
                @if e.deliveries.is_empty() { p { "None: the source has no targets." } }
                @for d in &e.deliveries {
                    @let pause = paused.iter().find(|x| x.source == e.source && x.target == d.target);
                    article.delivery {
                        h3 { (p(&d.target)) " · " span class=(state_class(&d.state)) { (d.state) }
                             @if let Some(x) = pause { " · " span.wait { "target paused since " (x.paused_at) " by " (p(&x.paused_by)) } } }
                        dl.facts {
                            dt { "Delivery" } dd { (d.id) }
                            dt { "Idempotency key" } dd.id { (d.idempotency_key) }
                            dt { "Attempts" } dd { (d.attempts) }
                            @if d.state == "pending" { dt { "Next attempt" } dd { (d.next_attempt_at) } }
                            @if let Some(err) = &d.last_error { dt { "Last error" } dd { (p(err)) } }
                        }
                        @if !d.history.is_empty() {
                            div.scroll { table {
                                caption { "Attempts of " (p(&d.target)) }
                                thead { tr {
                                    th scope="col" { "#" } th scope="col" { "Started" } th scope="col" { "Outcome" }
                                    th scope="col" { "Status" } th scope="col" { "Duration" } th scope="col" { "Error" }
                                    th scope="col" { "Output" }
                                } }
                                tbody { @for a in &d.history { tr {
                                    td.num { (a.number) }
                                    td { (a.started_at) }
                                    td { span class=(state_class(&a.outcome)) { (a.outcome) } }
                                    td.num { (a.status.map(|s| s.to_string()).unwrap_or_else(|| "–".into())) }
                                    td.num { (a.duration_ms) " ms" }
                                    td { (a.error.as_deref().map(p).unwrap_or_default()) }
                                    td { @if let Some(o) = &a.output { pre.output { (crate::terminal::escape_block(o)) } } }
                                } } }
                            } }
                        }
                    }
                }
            }
            section aria-labelledby="headers" {
                h2 #headers { "Headers" }
                @if e.pruned { p { "Pruned by retention" @if let Some(t) = &e.pruned_at { " at " (t) } "." } }
                @else {
                    div.scroll { table.headers {
                        thead { tr { th scope="col" { "Name" } th scope="col" { "Value" } } }
                        tbody { @for (name, value) in &headers { tr { td.id { (p(name)) } td.id { (p(value)) } } } }
                    } }
                }
            }
            section aria-labelledby="body" {
                h2 #body { "Body" }
                @match &e.raw_body {
                    None => p { "Pruned by retention; the identity is kept so that a retry is still recognised." },
                    Some(raw) => {
                        @let shown = body::show(raw);
                        p { (shown.form.describe()) @if shown.cut { ", first " (body::SHOWN_BYTES) " bytes" } ". "
                            a href={ "/events/" (e.id) "/body" } download { "Download the exact " (raw.len()) " bytes" } }
                        pre.body tabindex="0" { (shown.text) }
                    }
                }
            }
        };
        respond(StatusCode::OK, self.layout(&title, content))
    }

    /// The exact stored bytes, as a download that no browser renders.
    pub(super) async fn download(&self, id: i64) -> Response<Full<Bytes>> {
        let body = self.read(move |db| Ok(db.body(id)?)).await;
        match body {
            Ok(Some(bytes)) => Response::builder()
                .header(header::CONTENT_TYPE, "application/octet-stream")
                .header(
                    header::CONTENT_DISPOSITION,
                    format!("attachment; filename=\"event-{id}.body\""),
                )
                .header(header::X_CONTENT_TYPE_OPTIONS, "nosniff")
                .header(
                    header::CONTENT_SECURITY_POLICY,
                    "sandbox; default-src 'none'",
                )
                .header(header::CACHE_CONTROL, "no-store")
                .body(Full::new(bytes.into()))
                .expect("static header values are valid"),
            Ok(None) => self.not_found(),
            Err(e) => self.failed("reading the body", &e),
        }
    }

    /// The windows in which a source was not receiving, over the last [`GAP_DAYS`]: a strip
    /// per source with each gap drawn where it lies (SVG: the CSP allows no inline style),
    /// then the table.
    pub(super) async fn gaps(&self) -> Response<Full<Bytes>> {
        let source = self.param("source").map(str::to_owned);
        let now = crate::clock::unix_now();
        let from = now - GAP_DAYS * 86_400;
        let since = crate::clock::iso_from_unix(from);
        let s = source.clone();
        let rows = match self
            .read(move |db| Ok(crate::store::gaps::list(db, &since, s.as_deref())?))
            .await
        {
            Ok(rows) => rows,
            Err(e) => return self.failed("reading gaps", &e),
        };
        let unix = |t: &str| crate::clock::unix_from_iso(t).unwrap_or(now);
        let mut sources: Vec<&str> = rows.iter().map(|g| g.source.as_str()).collect();
        sources.sort_unstable();
        sources.dedup();
        let x = |t: i64| ((t.clamp(from, now) - from) as f64 / (now - from) as f64) * 1000.0;
        let content = html! {
            p { "Windows in which a source was not receiving in the last " (GAP_DAYS) " days: "
                "serve down (found at its next start), or refusing every request the source sent. "
                "With a " code { "recover" } " table, serve asks the provider for what it missed "
                "(hookinbox recover does it by hand)." }
            @for name in &sources {
                figure.strip {
                    figcaption { (p(name)) }
                    svg viewBox="0 0 1000 14" preserveAspectRatio="none" role="img"
                        aria-label={ "gaps of " (name) " over the last " (GAP_DAYS) " days" } {
                        rect.span x="0" y="5" width="1000" height="4" {}
                        @for g in rows.iter().filter(|g| g.source == *name) {
                            @let (a, b) = (x(unix(&g.started_at)), x(unix(&g.ended_at)));
                            rect class=(if g.kind == "down" { "down" } else { "rejecting" })
                                x=(format!("{a:.1}")) y="0" width=(format!("{:.1}", (b - a).max(2.0))) height="14" {
                                title { (g.kind) " " (g.started_at) " to " (g.ended_at) }
                            }
                        }
                    }
                    div.axis { span { (GAP_DAYS) " days ago" } span { "now" } }
                }
            }
            div.scroll { table {
                thead { tr {
                    th scope="col" { "Source" } th scope="col" { "Kind" } th scope="col" { "From" }
                    th scope="col" { "Until" } th scope="col" { "Length" } th scope="col" { "Why" }
                    th scope="col" { "Recovery" }
                } }
                tbody {
                    @for g in rows.iter().rev() { tr {
                        td { (p(&g.source)) }
                        td { span class=(if g.kind == "down" { "bad" } else { "wait" }) { (g.kind) } }
                        td { (time(&g.started_at)) }
                        td { (time(&g.ended_at)) }
                        td.num { (humantime::format_duration(Duration::from_secs(
                            (unix(&g.ended_at) - unix(&g.started_at)).max(0) as u64))) }
                        td { (p(&g.detail)) }
                        td { @match (&g.recovered_at, &g.recovery) {
                            (Some(_), Some(r)) => span.ok { (p(r)) },
                            (None, Some(r)) => span.bad { (p(r)) },
                            _ => "–",
                        } }
                    } }
                    @if rows.is_empty() { tr { td colspan="7" { "No gaps." } } }
                }
            } }
        };
        respond(StatusCode::OK, self.layout("Gaps", content))
    }

    pub(super) async fn dead(&self) -> Response<Full<Bytes>> {
        let source = self.param("source").map(str::to_owned);
        let target = self.param("target").map(str::to_owned);
        let (s, t) = (source.clone(), target.clone());
        let rows = match self
            .read(move |db| Ok(db.dead(s.as_deref(), t.as_deref(), LISTED)?))
            .await
        {
            Ok(rows) => rows,
            Err(e) => return self.failed("reading dead deliveries", &e),
        };
        let content = html! {
            p { "Deliveries whose target gave up (a permanent refusal, or retries exhausted), newest first"
                @if let Some(s) = &source { ", source " (p(s)) } @if let Some(t) = &target { ", target " (p(t)) } "." }
            div.scroll { table {
                thead { tr {
                    th scope="col" { "Delivery" } th scope="col" { "Event" } th scope="col" { "Died" }
                    th scope="col" { "Source/target" } th scope="col" { "Event id" } th scope="col" { "Attempts" }
                    th scope="col" { "Last error" }
                } }
                tbody {
                    @for d in &rows { tr {
                        td.num { (d.delivery) }
                        td { a href={ "/events/" (d.event) } { (d.event) } }
                        td { (time(&d.died_at)) }
                        td { (p(&d.source)) "/" (p(&d.target)) }
                        td.id { (p(&d.event_id)) }
                        td.num { (d.attempts) }
                        td { (d.last_error.as_deref().map(p).unwrap_or_default()) }
                    } }
                    @if rows.is_empty() { tr { td colspan="7" { "No dead deliveries." } } }
                }
            } }
            @if self.web.actions && !rows.is_empty() {
                form method="post" action="/actions/replay" {
                    (self.token())
                    input type="hidden" name="state" value="dead";
                    @if let Some(s) = &source { input type="hidden" name="source" value=(s); }
                    @if let Some(t) = &target { input type="hidden" name="target" value=(t); }
                    button type="submit" { "Replay these dead deliveries…" }
                    " (shows what it would re-queue first)"
                }
            }
        };
        respond(StatusCode::OK, self.layout("Dead deliveries", content))
    }

    pub(super) async fn conflicts(&self) -> Response<Full<Bytes>> {
        let source = self.param("source").map(str::to_owned);
        let rows = match self
            .read(move |db| Ok(db.conflicts(source.as_deref(), LISTED)?))
            .await
        {
            Ok(rows) => rows,
            Err(e) => return self.failed("reading conflicts", &e),
        };
        let content = html! {
            p { "Requests that reused a stored event's identity with different bytes. Their bytes were quarantined and never forwarded; the original is untouched." }
            div.scroll { table {
                thead { tr {
                    th scope="col" { "Conflict" } th scope="col" { "Last seen" } th scope="col" { "Source" }
                    th scope="col" { "Event id" } th scope="col" { "Seen" } th scope="col" { "Original" }
                } }
                tbody {
                    @for c in &rows { tr {
                        td { a href={ "/conflicts/" (c.id) } { (c.id) } }
                        td { (time(&c.last_seen_at)) }
                        td { (p(&c.source)) }
                        td.id { a href={ "/conflicts/" (c.id) } { (p(&c.event_id)) } }
                        td.num { (c.seen) }
                        td { @match c.original_event { Some(e) => a href={ "/events/" (e) } { (e) }, None => "pruned" } }
                    } }
                    @if rows.is_empty() { tr { td colspan="6" { "No conflicts." } } }
                }
            } }
        };
        respond(StatusCode::OK, self.layout("Conflicts", content))
    }

    pub(super) async fn conflict(&self, id: i64) -> Response<Full<Bytes>> {
        let read = self.read(move |db| Ok(db.conflict(id)?)).await;
        let c = match read {
            Ok(Some(c)) => c,
            Ok(None) => return self.not_found(),
            Err(e) => return self.failed("reading the conflict", &e),
        };
        let side = |title: &str, s: &ConflictSide| {
            let headers: Vec<(String, String)> = s
                .headers
                .as_deref()
                .and_then(|h| serde_json::from_str(h).ok())
                .unwrap_or_default();
            html! {
                section.side aria-label=(title) {
                    h2 { (title) }
                    dl.facts {
                        dt { "Received" } dd { (s.at) }
                        dt { "Size" } dd { (s.size) " bytes" }
                        dt { "SHA-256" } dd.id { (s.sha256) }
                    }
                    @match &s.body {
                        Some(raw) => {
                            @let shown = body::show(raw);
                            p { (shown.form.describe()) }
                            pre.body tabindex="0" { (shown.text) }
                        }
                        None => p { "Not kept (pruned by retention)." },
                    }
                    details {
                        summary { "Headers (" (headers.len()) ")" }
                        div.scroll { table.headers { tbody { @for (n, v) in &headers { tr { td.id { (p(n)) } td.id { (p(v)) } } } } } }
                    }
                }
            }
        };
        let content = html! {
            p { "Source " (p(&c.source)) ", event id " code { (p(&c.event_id)) } ": seen " (c.seen)
                " time(s) with these bytes, which differ from the stored original. "
                @if let Some(e) = c.original_event { a href={ "/events/" (e) } { "The original event" } "." } }
            div.sides {
                (side("Original (stored, forwarded)", &c.original))
                (side("Quarantined (never forwarded)", &c.quarantined))
            }
        };
        respond(
            StatusCode::OK,
            self.layout(&format!("Conflict {id}"), content),
        )
    }
}
