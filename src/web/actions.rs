//! What the web inbox can change, once [`super::Web::form`] has let the POST through:
//! pause and resume a target, replay one event or a filtered set (previewed first). Every
//! change goes through the writer and into the log with who asked (the peer address).

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::Full;
use hyper::Response;
use hyper::http::StatusCode;
use maud::html;

use super::{Form, Page, respond};
use crate::store;
use crate::terminal::escape;

/// Deliveries a replay preview lists; the count covers them all.
const PREVIEWED: usize = 50;

/// The replay filter a form names: one event, or the event list's and the dead page's
/// filters. An event's status maps to the state of the deliveries to replay (the dead
/// deliveries of events with a dead one, not their delivered siblings).
fn replay_filter(form: &Form) -> Result<store::replay::Filter, String> {
    let time = |name: &str| -> Result<Option<String>, String> {
        form.get(name)
            .map(|t| crate::clock::parse_time_arg(t).map_err(|e| format!("{name}: {e}")))
            .transpose()
    };
    let event = form
        .get("event")
        .map(|e| {
            e.parse::<i64>()
                .map_err(|_| format!("event {e:?} is not a row id"))
        })
        .transpose()?;
    let state = match form.get("state").or(form.get("status")) {
        None => None,
        Some(s @ ("dead" | "pending" | "delivered" | "superseded")) => Some(s.to_owned()),
        Some("stored") => return Err("events with no targets have nothing to replay".into()),
        Some(other) => return Err(format!("{other:?} is not a delivery state")),
    };
    Ok(store::replay::Filter {
        event,
        source: form.get("source").map(str::to_owned),
        target: form.get("target").map(str::to_owned),
        state,
        since: time("since")?,
        until: time("until")?,
        event_type: form.get("type").map(str::to_owned),
        error: form.get("error").map(str::to_owned),
        ..store::replay::Filter::default()
    })
}

impl Page<'_> {
    pub(super) async fn action(
        &self,
        action: &str,
        form: Form,
        peer: SocketAddr,
    ) -> Response<Full<Bytes>> {
        match action {
            "pause" => self.pause(&form, true, peer).await,
            "resume" => self.pause(&form, false, peer).await,
            "replay" => self.replay(&form, peer).await,
            _ => self.not_found(),
        }
    }

    async fn pause(&self, form: &Form, paused: bool, peer: SocketAddr) -> Response<Full<Bytes>> {
        let (Some(source), Some(target)) = (form.get("source"), form.get("target")) else {
            return self.bad_form("name a source and a target");
        };
        if !self.configured.has_target(source, target) {
            return self.bad_form("no such target is configured");
        }
        let (s, t) = (source.to_owned(), target.to_owned());
        let by = format!("web inbox ({peer})");
        let (verb, past) = if paused {
            ("pause", "paused")
        } else {
            ("resume", "resumed")
        };
        let inbox = self.web.store.clone();
        // In a task of its own, logged there: a browser that goes away mid-request drops
        // this handler, and a change that commits must still reach the log.
        let changed = tokio::spawn(async move {
            let changed = inbox
                .change({
                    let (s, t, by) = (s.clone(), t.clone(), by.clone());
                    move |db, now| store::pause::set(db, &s, &t, paused, &by, now)
                })
                .await;
            match &changed {
                Ok(changed) => {
                    // A resumed target's loop looks at once, not at its next idle poll.
                    inbox.commits().all();
                    tracing::warn!(source = %s, target = %t, by, changed, "web inbox: {past} a target");
                }
                Err(e) => tracing::warn!(source = %s, target = %t, by, error = %format!("{e:#}"),
                    "web inbox: could not {verb} a target"),
            }
            changed
        })
        .await
        .map_err(anyhow::Error::from)
        .and_then(|r| r);
        match changed {
            Ok(changed) => {
                let what = match (changed, paused) {
                    (true, true) => {
                        "Paused: its deliveries stay pending and are not attempted until it is resumed."
                    }
                    (true, false) => "Resumed: its pending deliveries go out in their order.",
                    (false, true) => "It was already paused; nothing changed.",
                    (false, false) => "It was not paused; nothing changed.",
                };
                let title = format!("{source}/{target} {past}");
                self.message(
                    StatusCode::OK,
                    &title,
                    html! { p { (what) } p { a href="/" { "Back to the overview" } } },
                )
            }
            Err(e) => self.failed(&format!("could not {verb} the target"), &e),
        }
    }

    /// Replays one event or a filtered set. Without `confirm` it only plans and shows what
    /// it would re-queue, with a button that posts the same fields and `confirm`; with it,
    /// it plans again (the inbox may have moved on) and re-queues a chunk per writer job, so
    /// that webhooks arriving meanwhile never wait long behind it.
    async fn replay(&self, form: &Form, peer: SocketAddr) -> Response<Full<Bytes>> {
        let filter = match replay_filter(form) {
            Ok(f) if f.selects() => f,
            Ok(_) => return self.bad_form("choose an event, a state, a time or an event type"),
            Err(e) => return self.bad_form(&e),
        };
        let planned = filter.clone();
        let plan = match self
            .read(move |db| Ok(store::replay::plan(db, &planned)?))
            .await
        {
            Ok(plan) => plan,
            Err(e) => return self.failed("planning the replay", &e),
        };
        if form.get("confirm").is_none() {
            return self.preview(form, &plan);
        }
        let planned = plan.eligible.len();
        let eligible = plan.eligible;
        let inbox = self.web.store.clone();
        // In a task of its own, logged there: a browser that goes away mid-replay drops
        // this handler, and the replay must still finish and reach the log.
        let done = tokio::spawn(async move {
            let mut requeued = 0;
            for chunk in eligible.chunks(store::replay::CHUNK) {
                let chunk = chunk.to_vec();
                match inbox
                    .change(move |db, now| store::replay::requeue(db, &chunk, now))
                    .await
                {
                    Ok(n) => requeued += n,
                    Err(e) => {
                        inbox.commits().all();
                        tracing::warn!(requeued, planned, by = %peer, filter = %filter,
                            error = %format!("{e:#}"), "web inbox: a replay stopped part way");
                        return Err((requeued, e));
                    }
                }
            }
            inbox.commits().all();
            tracing::warn!(requeued, planned, by = %peer, filter = %filter,
                "web inbox: replayed deliveries under their idempotency keys");
            Ok(requeued)
        })
        .await;
        let requeued = match done {
            Ok(Ok(n)) => n,
            Ok(Err((n, e))) => {
                return self.failed(&format!("re-queued {n}, then could not go on"), &e);
            }
            Err(e) => return self.failed("replaying", &e.into()),
        };
        let previewed = form.get("confirm").and_then(|n| n.parse::<usize>().ok());
        let content = html! {
            p { "Re-queued " (requeued) " deliveries under their idempotency keys; they go out within a second." }
            @if previewed.is_some_and(|n| n != requeued) {
                p { "The preview counted " (previewed.unwrap_or(0)) "; the inbox changed in between (an attempt started or ended)." }
            }
            p { a href="/" { "Back to the overview" } }
        };
        respond(StatusCode::OK, self.layout("Replayed", content))
    }

    /// What a replay would do, and the button that does it.
    fn preview(&self, form: &Form, plan: &store::replay::ReplayPlan) -> Response<Full<Bytes>> {
        let n = plan.eligible.len();
        let content = html! {
            p { "This would re-queue " strong { (n) } " deliveries under their idempotency keys. "
                "Nothing has changed yet." }
            @if plan.in_flight > 0 { p { "Left alone: " (plan.in_flight) " with an attempt running now." } }
            @if plan.superseded > 0 { p { "Left alone: " (plan.superseded) " under ordering whose key has a version at least as new delivered." } }
            @if plan.pruned > 0 { p { "Cannot replay " (plan.pruned) ": retention already dropped their payload." } }
            @if n > 0 {
                div.scroll { table {
                    caption { "The first " (n.min(PREVIEWED)) " of " (n) }
                    thead { tr { th scope="col" { "Delivery" } th scope="col" { "Event" } th scope="col" { "Source/target" } th scope="col" { "Event id" } th scope="col" { "State now" } } }
                    tbody { @for d in plan.eligible.iter().take(PREVIEWED) { tr {
                        td.num { (d.delivery) }
                        td { a href={ "/events/" (d.event) } { (d.event) } }
                        td { (escape(&d.source)) "/" (escape(&d.target)) }
                        td.id { (escape(&d.event_id)) }
                        td { (d.state) }
                    } } }
                } }
                form method="post" action="/actions/replay" {
                    (self.token())
                    @for (k, v) in &form.0 {
                        @if k != "csrf" && k != "confirm" { input type="hidden" name=(k) value=(v); }
                    }
                    input type="hidden" name="confirm" value=(n);
                    button type="submit" { "Re-queue " (n) " deliveries" }
                }
            }
            p { a href="/" { "Cancel" } }
        };
        respond(StatusCode::OK, self.layout("Replay: preview", content))
    }

    fn bad_form(&self, why: &str) -> Response<Full<Bytes>> {
        respond(
            StatusCode::BAD_REQUEST,
            self.layout(
                "Not done",
                html! { p { "The form was not complete: " (why) "." } },
            ),
        )
    }
}
