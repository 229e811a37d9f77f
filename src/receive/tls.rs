//! TLS on the public listener, with rustls on ring. The acceptor sits behind a lock so that
//! SIGHUP can swap in renewed certificate files; a connection keeps the acceptor it started
//! its handshake with.

use std::sync::{Arc, RwLock};

use tokio_rustls::TlsAcceptor;

use crate::config::Tls;

/// The current acceptor, replaceable on reload.
#[derive(Clone)]
pub struct Acceptor(Arc<RwLock<TlsAcceptor>>);

impl Acceptor {
    pub fn new(files: &Tls) -> Result<Acceptor, String> {
        let config = files.server_config()?;
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
