//! TLS on the public listener, with rustls on ring. The acceptor sits behind a lock so that
//! SIGHUP can swap in renewed certificate files; a connection keeps the acceptor it started
//! its handshake with.

use std::sync::{Arc, RwLock};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::config::Tls;

/// Reads the PEM files into a server configuration, naming the file that is wrong.
pub fn server_config(files: &Tls) -> Result<rustls::ServerConfig, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| format!("cannot read the certificate {}: {e}", files.cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| {
            format!(
                "the certificate {} is not valid PEM: {e}",
                files.cert.display()
            )
        })?;
    if certs.is_empty() {
        return Err(format!("{} holds no certificate", files.cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| {
        format!(
            "cannot read a private key from {}: {e}",
            files.key.display()
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("the certificate and key do not go together: {e}"))?;
    // Webhook senders speak HTTP/1.1, and so does the listener.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// The current acceptor, replaceable on reload.
#[derive(Clone)]
pub struct Acceptor(Arc<RwLock<TlsAcceptor>>);

impl Acceptor {
    pub fn new(files: &Tls) -> Result<Acceptor, String> {
        let config = server_config(files)?;
        Ok(Acceptor(Arc::new(RwLock::new(TlsAcceptor::from(
            Arc::new(config),
        )))))
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
