//! HTTP-01 (RFC 8555 §8.3) on a plain HTTP listener of its own, for those whose TCP load
//! balancer cannot pass TLS-ALPN-01's ALPN: it answers the ACME server's
//! `/.well-known/acme-challenge/<token>` with the key authorization of an order in
//! progress, and everything else with 404. It reads nothing but the request's head.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::CONTENT_TYPE;
use hyper::http::{Method, StatusCode};
use hyper::{Request, Response};

use crate::receive::listener::Handler;
use crate::receive::tls::Certificates;

const PREFIX: &str = "/.well-known/acme-challenge/";

pub struct Http01(pub Arc<Certificates>);

impl Handler for Http01 {
    async fn handle(&self, req: Request<Incoming>, _peer: SocketAddr) -> Response<Full<Bytes>> {
        let answer = match (req.method(), req.uri().path().strip_prefix(PREFIX)) {
            (&Method::GET, Some(token)) => self.0.key_authorization(token),
            _ => None,
        };
        let (status, body) = match answer {
            Some(key_authorization) => (StatusCode::OK, key_authorization),
            None => (StatusCode::NOT_FOUND, "not found\n".to_owned()),
        };
        Response::builder()
            .status(status)
            .header(CONTENT_TYPE, "text/plain")
            .body(Full::new(Bytes::from(body)))
            .expect("static header values are valid")
    }
}
