//! Stripe: the List Events API, and the missing events stored as fetched.
//!
//! `GET /v1/events?created[gte]=…&created[lte]=…&delivery_success=false&limit=100`, newest
//! first, the next page with `starting_after=<the last id>` while `has_more`. Stripe keeps
//! 30 days of events. `delivery_success=false` narrows the list to events "still pending or
//! [that] have failed all delivery attempts to a webhook endpoint" (of the account's
//! endpoints: another failing endpoint's events are listed too, which `types` narrows).
//! Each event is rendered at the API version of its creation, as a webhook to an endpoint
//! without a pinned version is; the stored bytes are the API's (origin `api`), and a later
//! webhook with the same JSON value is a duplicate. Source: docs.stripe.com/api/events/list.

use std::sync::Arc;

use bytes::Bytes;
use reqwest::Method;
use reqwest::header::{AUTHORIZATION, HeaderMap};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::client::{self, ApiError, Client};
use super::{Api, BoxFuture, Candidate, Found, Window};
use crate::config::{RecoverApi, Source};

/// The most events Stripe gives per page.
const LIMIT: u32 = 100;
/// Pages read at most for one window (100,000 events).
const MAX_PAGES: usize = 1000;
/// The most bytes of events held for one window: a small VM's share, and a bound on what
/// an answer can make hookinbox hold. A longer outage is recovered in shorter windows.
const MAX_FETCHED: usize = 256 * 1024 * 1024;

pub struct Stripe {
    source: Arc<Source>,
    client: Client,
}

/// A page of the list; each event kept as the API wrote it.
#[derive(Deserialize)]
struct Page<'a> {
    #[serde(borrow)]
    data: Vec<&'a RawValue>,
    has_more: bool,
}

/// What recovery reads of an event; the event itself is stored whole.
#[derive(Deserialize)]
struct Event {
    id: String,
    created: i64,
    #[serde(rename = "type", default)]
    event_type: Option<String>,
    #[serde(default)]
    pending_webhooks: Option<i64>,
}

impl Stripe {
    pub fn new(source: Arc<Source>, client: Client) -> Stripe {
        Stripe { source, client }
    }

    fn settings(&self) -> Result<(&crate::secret::Secret, &[String]), ApiError> {
        match self.source.recover.as_ref().map(|r| &r.api) {
            Some(RecoverApi::Stripe { key, types }) => Ok((key, types)),
            _ => Err(ApiError::Other("not a Stripe source".into())),
        }
    }

    fn headers(&self) -> Result<HeaderMap, ApiError> {
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, client::bearer(self.settings()?.0.expose())?);
        Ok(h)
    }

    async fn list_window(&self, window: Window) -> Result<Vec<Candidate>, ApiError> {
        let types = self.settings()?.1;
        let rule = self
            .source
            .scheme
            .id_rule()
            .ok_or_else(|| ApiError::Other("the stripe scheme has no id rule".into()))?;
        let mut found = Vec::new();
        let mut fetched = 0usize;
        let mut after: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let mut url = self.client.url("v1/events")?;
            {
                let mut q = url.query_pairs_mut();
                q.append_pair("created[gte]", &window.from.to_string())
                    .append_pair("created[lte]", &window.until.to_string())
                    .append_pair("delivery_success", "false")
                    .append_pair("limit", &LIMIT.to_string());
                for t in types {
                    q.append_pair("types[]", t);
                }
                if let Some(id) = &after {
                    q.append_pair("starting_after", id);
                }
            }
            let answer = self
                .client
                .send(Method::GET, url, || self.headers())
                .await?;
            let malformed = |e: serde_json::Error| ApiError::Malformed {
                provider: "stripe",
                what: format!("the events list: {e}"),
            };
            let page: Page<'_> = serde_json::from_slice(&answer.body).map_err(malformed)?;
            let Some(last) = page.data.last() else {
                return Ok(found);
            };
            let last: Event = serde_json::from_str(last.get()).map_err(malformed)?;
            let no_headers = HeaderMap::new();
            for raw in &page.data {
                let event: Event = serde_json::from_str(raw.get()).map_err(malformed)?;
                fetched += raw.get().len();
                if fetched > MAX_FETCHED {
                    return Err(ApiError::Other(format!(
                        "more than {} MiB of events for one window; recover a shorter one",
                        MAX_FETCHED >> 20
                    )));
                }
                let body = Bytes::copy_from_slice(raw.get().as_bytes());
                // The identity exactly as the webhook's would be: the source's id rule over
                // the same JSON.
                let input = crate::scheme::Input::post(&no_headers, &body, 0);
                let event_id = match crate::scheme::event_id(&input, &rule) {
                    Ok(id) => id,
                    Err(e) => {
                        tracing::warn!(source = self.source.name, id = event.id, reason = %e,
                            "a listed event has no usable id; skipped");
                        continue;
                    }
                };
                let status = match event.pending_webhooks {
                    Some(0) | None => "not delivered".to_owned(),
                    Some(n) => format!("{n} webhooks pending"),
                };
                found.push(Candidate {
                    event_id,
                    at: event.created,
                    event_type: event.event_type.map(|t| t.chars().take(100).collect()),
                    status,
                    found: Found::Fetched(body),
                });
            }
            if !page.has_more {
                return Ok(found);
            }
            after = Some(last.id);
        }
        Err(ApiError::Other(format!(
            "more than {MAX_PAGES} pages of events for one window; recover a shorter one"
        )))
    }
}

impl Api for Stripe {
    fn provider(&self) -> &'static str {
        "stripe"
    }

    fn list(&self, window: Window) -> BoxFuture<'_, Result<Vec<Candidate>, ApiError>> {
        Box::pin(self.list_window(window))
    }

    fn redeliver(&self, _delivery: u64) -> BoxFuture<'_, Result<(), ApiError>> {
        Box::pin(async {
            Err(ApiError::Other(
                "Stripe's events are fetched, not redelivered".into(),
            ))
        })
    }
}
