//! Every answer the public listener gives, in one place. Bodies are short and generic: the
//! precise reason for a refusal goes to the log and a counter, never to the client.

use bytes::Bytes;
use http_body_util::Full;
use hyper::Response;
use hyper::header::{ALLOW, CONNECTION, CONTENT_TYPE, RETRY_AFTER};
use hyper::http::{Method, StatusCode};

use crate::scheme::{Handshake, Reject, Reply};
use crate::store::WriteError;

/// Seconds a provider is asked to wait after a 503.
pub const RETRY_AFTER_SECS: &str = "5";

/// What happened to one request, for the answer, the log line and the metrics.
#[derive(Debug)]
pub enum Outcome {
    /// Committed now. Answered exactly like a duplicate, as the provider cannot tell them
    /// apart and should not need to; with the provider's own reply where its protocol
    /// wants one (Discord's deferred interaction).
    Accepted(Option<Reply>),
    Duplicate(Option<Reply>),
    /// Same identity, different bytes; answered with the source's `on_conflict`.
    Conflict(StatusCode),
    /// A provider handshake, answered with its reply and not stored.
    Handshake(Handshake),
    Rejected(Reject),
    TooLarge,
    BodyTimeout,
    /// The body arrived slower than `server.min_body_rate`.
    TooSlow,
    /// The body could not be read (the client broke off mid-body).
    BadBody,
    /// The memory budget for bodies in flight stayed full (`server.body_budget`).
    Overloaded,
    Unavailable(WriteError),
    /// A key the request names, or the confirmation a handshake asks for, could not be
    /// fetched: 503, so the provider sends it again.
    KeyUnavailable(String),
    /// The client is not among the addresses the source's `allow_from` allows.
    Forbidden,
    /// The client is not among the addresses known, and a provider list the source allows
    /// has never been had: 503, so that the provider retries once it is.
    NoAllowList(&'static str),
    NotFound,
    /// The source's provider sends only these methods.
    MethodNotAllowed(&'static [Method]),
}

impl Outcome {
    /// Every label [`Outcome::label`] gives a request that reached a source, each counted
    /// from zero for every source (`Metrics::configure`). `not_found` is answered before a
    /// source is chosen and never counted.
    pub const COUNTED: [&'static str; 12] = [
        "accepted",
        "duplicate",
        "conflict",
        "handshake",
        "rejected",
        "invalid",
        "too_large",
        "timeout",
        "overloaded",
        "unavailable",
        "forbidden",
        "method_not_allowed",
    ];

    /// The metric label. `None` for requests that reached no source.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Accepted(_) => "accepted",
            Outcome::Duplicate(_) => "duplicate",
            Outcome::Conflict(_) => "conflict",
            Outcome::Handshake(_) => "handshake",
            Outcome::Rejected(r) if r.is_auth() => "rejected",
            Outcome::Rejected(_) | Outcome::BadBody => "invalid",
            Outcome::TooLarge => "too_large",
            Outcome::BodyTimeout | Outcome::TooSlow => "timeout",
            Outcome::Overloaded => "overloaded",
            Outcome::Unavailable(_) | Outcome::KeyUnavailable(_) | Outcome::NoAllowList(_) => {
                "unavailable"
            }
            Outcome::Forbidden => "forbidden",
            Outcome::NotFound => "not_found",
            Outcome::MethodNotAllowed(_) => "method_not_allowed",
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Outcome::Accepted(Some(reply)) | Outcome::Duplicate(Some(reply)) => reply.status,
            Outcome::Accepted(None) | Outcome::Duplicate(None) => StatusCode::OK,
            Outcome::Handshake(h) => h.reply.status,
            Outcome::Conflict(status) => *status,
            Outcome::Rejected(r) if r.is_auth() => StatusCode::UNAUTHORIZED,
            Outcome::Rejected(_) | Outcome::BadBody => StatusCode::BAD_REQUEST,
            Outcome::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Outcome::BodyTimeout | Outcome::TooSlow => StatusCode::REQUEST_TIMEOUT,
            Outcome::Unavailable(_)
            | Outcome::KeyUnavailable(_)
            | Outcome::Overloaded
            | Outcome::NoAllowList(_) => StatusCode::SERVICE_UNAVAILABLE,
            Outcome::Forbidden => StatusCode::FORBIDDEN,
            Outcome::NotFound => StatusCode::NOT_FOUND,
            Outcome::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
        }
    }

    pub fn response(self) -> Response<Full<Bytes>> {
        let status = self.status();
        let allow = match &self {
            Outcome::MethodNotAllowed(methods) => {
                let names: Vec<&str> = methods.iter().map(Method::as_str).collect();
                Some(names.join(", "))
            }
            _ => None,
        };
        match self {
            Outcome::Handshake(Handshake { reply, .. })
            | Outcome::Accepted(Some(reply))
            | Outcome::Duplicate(Some(reply)) => return reply_response(reply),
            _ => {}
        }
        // Refused before its body was read to the end: the connection cannot carry more.
        let body_unread = matches!(
            self,
            Outcome::Overloaded | Outcome::Forbidden | Outcome::NoAllowList(_)
        );
        let (content_type, body): (&str, Bytes) = match self {
            Outcome::Accepted(_) | Outcome::Duplicate(_) => {
                ("text/plain; charset=utf-8", "accepted\n".into())
            }
            Outcome::Conflict(_) => ("text/plain; charset=utf-8", "conflict\n".into()),
            _ => (
                "text/plain; charset=utf-8",
                format!(
                    "{}\n",
                    status.canonical_reason().unwrap_or("error").to_lowercase()
                )
                .into(),
            ),
        };
        let mut builder = Response::builder()
            .status(status)
            .header(CONTENT_TYPE, content_type);
        if body_unread {
            builder = builder.header(CONNECTION, "close");
        }
        match status {
            StatusCode::SERVICE_UNAVAILABLE => {
                builder = builder.header(RETRY_AFTER, RETRY_AFTER_SECS)
            }
            StatusCode::METHOD_NOT_ALLOWED => {
                builder = builder.header(ALLOW, allow.unwrap_or_default())
            }
            // The rest of the body was not read: the connection cannot carry another request.
            StatusCode::PAYLOAD_TOO_LARGE | StatusCode::REQUEST_TIMEOUT => {
                builder = builder.header(CONNECTION, "close")
            }
            _ => {}
        }
        builder
            .body(Full::new(body))
            .expect("static status and header values are valid")
    }
}

/// A scheme's reply, exactly as its provider's protocol asks for it.
fn reply_response(reply: Reply) -> Response<Full<Bytes>> {
    let mut builder = Response::builder().status(reply.status);
    if let Some(content_type) = reply.content_type {
        builder = builder.header(CONTENT_TYPE, content_type);
    }
    for (name, value) in reply.headers {
        builder = builder.header(name, value);
    }
    builder
        .body(Full::new(reply.body.into()))
        .expect("a scheme's reply has a valid status and headers")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counted_names_every_label_a_source_can_count() {
        let handshake = Handshake {
            kind: "ping",
            reply: Reply::json(&serde_json::json!({})),
            action: None,
        };
        let outcomes = [
            Outcome::Accepted(None),
            Outcome::Duplicate(None),
            Outcome::Conflict(StatusCode::CONFLICT),
            Outcome::Handshake(handshake),
            Outcome::Rejected(Reject::NoMatch),
            Outcome::Rejected(Reject::BadBody("not JSON")),
            Outcome::TooLarge,
            Outcome::BodyTimeout,
            Outcome::TooSlow,
            Outcome::BadBody,
            Outcome::Overloaded,
            Outcome::Unavailable(WriteError::QueueFull),
            Outcome::KeyUnavailable("refused".into()),
            Outcome::Forbidden,
            Outcome::NoAllowList("github"),
            Outcome::MethodNotAllowed(&[]),
        ];
        let mut labels: Vec<&str> = outcomes.iter().map(Outcome::label).collect();
        labels.sort_unstable();
        labels.dedup();
        let mut counted = Outcome::COUNTED.to_vec();
        counted.sort_unstable();
        assert_eq!(labels, counted);
    }
}
