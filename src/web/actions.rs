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
        let who = by.clone();
        let changed = self
            .web
            .writer
            .job(move |conn, now| store::pause::set(conn, &s, &t, paused, &who, now))
            .await;
        let (verb, past) = if paused {
            ("pause", "paused")
        } else {
            ("resume", "resumed")
        };
        match changed {
            Ok(changed) => {
                tracing::warn!(source, target, by, changed, "web inbox: {past} a target");
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
            Err(e) => self.failed(&format!("could not {verb} the target"), &e.into()),
        }
    }

    async fn replay(&self, _form: &Form, _peer: SocketAddr) -> Response<Full<Bytes>> {
        self.not_found()
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
