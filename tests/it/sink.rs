//! A fake delivery target: a real HTTP server on 127.0.0.1:0 that records every request and
//! answers as the test tells it to.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{HeaderMap, Request, Response};
use hyper_util::rt::TokioIo;

/// One request as the sink received it.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    pub at: Instant,
}

impl Received {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    pub fn key(&self) -> &str {
        self.header("idempotency-key")
    }
}

/// How the sink answers one request.
pub enum Reply {
    Status(u16),
    /// A status with extra headers, e.g. 429 with Retry-After.
    With(u16, Vec<(&'static str, String)>),
    /// Waits this long, then answers 200 (past the target's timeout: the attempt failed).
    Hang(Duration),
    /// Closes the connection without an answer, as a crashing app or a reset would.
    Reset,
}

type Behaviour = dyn Fn(&Received, usize) -> Reply + Send + Sync;

pub struct Sink {
    pub addr: SocketAddr,
    log: Arc<Mutex<Vec<Received>>>,
    /// Per idempotency key, requests being answered now; and how often a request came
    /// while another of its key was still being answered (two attempts at once).
    busy: Arc<Busy>,
}

#[derive(Default)]
struct Busy {
    keys: Mutex<std::collections::HashMap<String, usize>>,
    overlaps: std::sync::atomic::AtomicUsize,
}

/// A request of `key` being answered; the key is free again when it is dropped.
struct Answering(Arc<Busy>, String);

impl Answering {
    fn new(busy: &Arc<Busy>, key: &str) -> Answering {
        let mut keys = busy.keys.lock().unwrap();
        let n = keys.entry(key.to_owned()).or_default();
        *n += 1;
        if *n > 1 {
            busy.overlaps
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Answering(busy.clone(), key.to_owned())
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        if let Some(n) = self.0.keys.lock().unwrap().get_mut(&self.1) {
            *n -= 1;
        }
    }
}

impl Sink {
    /// Starts a sink whose answer to each request is `behaviour(request, n)`, where `n` is
    /// how many requests with the same idempotency key came before this one.
    pub async fn start(
        behaviour: impl Fn(&Received, usize) -> Reply + Send + Sync + 'static,
    ) -> Sink {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let log: Arc<Mutex<Vec<Received>>> = Arc::default();
        let behaviour: Arc<Behaviour> = Arc::new(behaviour);
        let shared = log.clone();
        let busy: Arc<Busy> = Arc::default();
        let busy_shared = busy.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (log, behaviour) = (shared.clone(), behaviour.clone());
                let busy = busy_shared.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                        let (log, behaviour, busy) = (log.clone(), behaviour.clone(), busy.clone());
                        async move {
                            let (parts, body) = req.into_parts();
                            let body = body
                                .collect()
                                .await
                                .map(|b| b.to_bytes().to_vec())
                                .unwrap_or_default();
                            let received = Received {
                                path: parts.uri.path().to_owned(),
                                headers: parts.headers,
                                body,
                                at: Instant::now(),
                            };
                            let before = {
                                let mut log = log.lock().unwrap();
                                let n = log.iter().filter(|r| r.key() == received.key()).count();
                                log.push(received.clone());
                                n
                            };
                            let _answering = Answering::new(&busy, received.key());
                            let reply = behaviour(&received, before);
                            let (status, headers) = match reply {
                                Reply::Status(s) => (s, Vec::new()),
                                Reply::With(s, h) => (s, h),
                                Reply::Hang(d) => {
                                    tokio::time::sleep(d).await;
                                    (200, Vec::new())
                                }
                                // An error from the service makes hyper drop the connection.
                                Reply::Reset => return Err(std::io::Error::other("reset")),
                            };
                            let mut resp = Response::builder().status(status);
                            for (k, v) in headers {
                                resp = resp.header(k, v);
                            }
                            Ok::<_, std::io::Error>(
                                resp.body(Full::new(Bytes::from_static(b"sink says hi")))
                                    .unwrap(),
                            )
                        }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Sink { addr, log, busy }
    }

    /// How many requests came while another with the same idempotency key was still being
    /// answered: two attempts of one delivery at once.
    pub fn overlaps(&self) -> usize {
        self.busy
            .overlaps
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    pub fn received(&self) -> Vec<Received> {
        self.log.lock().unwrap().clone()
    }

    /// Every request as the oracle reads it.
    pub fn receipts(&self) -> Vec<hookinbox::oracle::Receipt> {
        self.received()
            .iter()
            .map(|r| {
                hookinbox::oracle::Receipt::new(r.header("x-hookinbox-event-id"), r.key(), &r.body)
            })
            .collect()
    }

    /// The requests that carried `key`, in arrival order.
    pub fn with_key(&self, key: &str) -> Vec<Received> {
        self.received()
            .into_iter()
            .filter(|r| r.key() == key)
            .collect()
    }
}
