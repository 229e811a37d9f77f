//! TLS on the public listener, with rustls on ring. Two ways to a certificate:
//!
//! - Files: the acceptor sits behind a lock so that a reload, or a change of the files on
//!   disk, swaps in a configuration read from the renewed files.
//! - ACME: one configuration whose certificate comes from [`Certificates`], which answers a
//!   TLS-ALPN-01 validation (RFC 8737: a handshake offering only `acme-tls/1`) with the
//!   challenge's certificate and every other handshake with the certificate obtained, or
//!   with nothing, so that until one exists no handshake completes.
//!
//! Either way a connection keeps the certificate it started its handshake with, and new
//! handshakes get the new one: a renewal drops no connection.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use rustls::pki_types::CertificateDer;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_rustls::TlsAcceptor;

use crate::config::Tls;

/// The ALPN protocol of a TLS-ALPN-01 validation (RFC 8737 §6.2). A connection that
/// negotiated it is closed after its handshake: it carries no HTTP.
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// The current acceptor, replaceable on reload.
#[derive(Clone)]
pub struct Acceptor(Arc<RwLock<TlsAcceptor>>);

impl Acceptor {
    /// Serves the certificate files.
    pub fn new(files: &Tls) -> Result<Acceptor, String> {
        Ok(Acceptor::with_config(files.server_config()?))
    }

    /// Serves what `config` says (with ACME: [`Certificates::server_config`]).
    pub fn with_config(config: rustls::ServerConfig) -> Acceptor {
        Acceptor(Arc::new(RwLock::new(TlsAcceptor::from(Arc::new(config)))))
    }

    /// Serves new handshakes with `config` (renewed certificates).
    pub fn swap(&self, config: rustls::ServerConfig) {
        *self.0.write().expect("no panics while holding the lock") =
            TlsAcceptor::from(Arc::new(config));
    }

    pub fn current(&self) -> TlsAcceptor {
        self.0
            .read()
            .expect("no panics while holding the lock")
            .clone()
    }
}

/// The certificate an ACME listener serves, the answers to the validations in progress, and
/// why nothing is served yet, for `/readyz`.
#[derive(Debug, Default)]
pub struct Certificates {
    served: RwLock<Option<Arc<CertifiedKey>>>,
    /// By DNS name (lowercase): the self-signed certificate carrying the key
    /// authorization's digest.
    challenges: RwLock<HashMap<String, Arc<CertifiedKey>>>,
    /// HTTP-01's answers: the key authorization by token.
    tokens: RwLock<HashMap<String, String>>,
    waiting: RwLock<String>,
}

impl Certificates {
    /// A server configuration that takes its certificate from `certs`, for HTTP/1.1 and
    /// TLS-ALPN-01 validations.
    pub fn server_config(certs: Arc<Certificates>) -> rustls::ServerConfig {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .with_no_client_auth()
            .with_cert_resolver(certs);
        config.alpn_protocols = vec![b"http/1.1".to_vec(), ACME_TLS_ALPN.to_vec()];
        config
    }

    /// Serves `key` to every new handshake.
    pub fn serve(&self, key: Arc<CertifiedKey>) {
        *self
            .served
            .write()
            .expect("no panics while holding the lock") = Some(key);
    }

    /// The certificate chain served now, leaf first.
    pub fn served(&self) -> Option<Vec<CertificateDer<'static>>> {
        let served = self
            .served
            .read()
            .expect("no panics while holding the lock");
        served.as_ref().map(|k| k.cert.clone())
    }

    /// Answers a validation of `domain` with `key` until [`Certificates::withdraw`].
    pub fn answer(&self, domain: &str, key: Arc<CertifiedKey>) {
        self.challenges
            .write()
            .expect("no panics while holding the lock")
            .insert(domain.to_ascii_lowercase(), key);
    }

    pub fn withdraw(&self, domain: &str) {
        self.challenges
            .write()
            .expect("no panics while holding the lock")
            .remove(&domain.to_ascii_lowercase());
    }

    /// Answers an HTTP-01 request for `token` with `key_authorization`.
    pub fn answer_http(&self, token: &str, key_authorization: &str) {
        self.tokens
            .write()
            .expect("no panics while holding the lock")
            .insert(token.to_owned(), key_authorization.to_owned());
    }

    pub fn withdraw_http(&self, token: &str) {
        self.tokens
            .write()
            .expect("no panics while holding the lock")
            .remove(token);
    }

    /// The key authorization an HTTP-01 request for `token` is answered with.
    pub fn key_authorization(&self, token: &str) -> Option<String> {
        self.tokens
            .read()
            .expect("no panics while holding the lock")
            .get(token)
            .cloned()
    }

    /// Says why no certificate is served yet (kept until one is).
    pub fn set_waiting(&self, why: String) {
        *self
            .waiting
            .write()
            .expect("no panics while holding the lock") = why;
    }

    /// Why no handshake completes, while none does.
    pub fn not_ready(&self) -> Option<String> {
        if self
            .served
            .read()
            .expect("no panics while holding the lock")
            .is_some()
        {
            return None;
        }
        Some(
            self.waiting
                .read()
                .expect("no panics while holding the lock")
                .clone(),
        )
    }
}

impl ResolvesServerCert for Certificates {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        // Only `acme-tls/1` (RFC 8737): a client that also offers http/1.1 would be served
        // HTTP under the challenge certificate.
        let validation = hello.alpn().is_some_and(|protocols| {
            let mut protocols = protocols.peekable();
            protocols.peek().is_some() && protocols.all(|p| p == ACME_TLS_ALPN)
        });
        if validation {
            let name = hello.server_name()?.to_ascii_lowercase();
            let challenges = self
                .challenges
                .read()
                .expect("no panics while holding the lock");
            return challenges.get(&name).cloned();
        }
        self.served
            .read()
            .expect("no panics while holding the lock")
            .clone()
    }
}

/// How often the certificate files are looked at for a change: a renewal by certbot or
/// another ACME client is served within this, with no reload.
pub const FILE_POLL: std::time::Duration = std::time::Duration::from_secs(5);

/// What changes when a file is rewritten or replaced (a rename gives a new inode).
fn stamp(files: &Tls) -> Option<[(std::time::SystemTime, u64, u64); 2]> {
    use std::os::unix::fs::MetadataExt;
    let one = |p: &std::path::Path| {
        let m = std::fs::metadata(p).ok()?;
        Some((m.modified().ok()?, m.len(), m.ino()))
    };
    Some([one(&files.cert)?, one(&files.key)?])
}

/// Serves the certificate files again whenever they change on disk (and whenever `files`
/// names others, after a reload), until `files` is dropped. A pair that does not load (the
/// certificate written before its key) is logged and retried at the next change; the old
/// certificate is served meanwhile. `served` hears of each certificate put in service.
pub async fn follow_files(
    acceptor: Acceptor,
    mut files: tokio::sync::watch::Receiver<Tls>,
    served: impl Fn(&crate::config::CertInfo) + Send + 'static,
) {
    let mut current = files.borrow_and_update().clone();
    let mut last = stamp(&current);
    loop {
        tokio::select! {
            changed = files.changed() => {
                if changed.is_err() {
                    return;
                }
                // The reload itself swapped the acceptor; follow the new files from here.
                current = files.borrow_and_update().clone();
                last = stamp(&current);
                continue;
            }
            () = tokio::time::sleep(FILE_POLL) => {}
        }
        let now = stamp(&current);
        if now == last || now.is_none() {
            continue;
        }
        last = now;
        match current.server_config() {
            Ok(config) => {
                acceptor.swap(config);
                match crate::config::CertInfo::of_pem_file(&current.cert) {
                    Ok(info) => {
                        tracing::info!(serial = %info.serial, "the certificate files changed; serving them");
                        served(&info);
                    }
                    Err(e) => tracing::warn!(error = %e, "reading the new certificate"),
                }
            }
            Err(e) => tracing::warn!(
                error = %e,
                "the certificate files changed but do not load; still serving the previous ones"
            ),
        }
    }
}
