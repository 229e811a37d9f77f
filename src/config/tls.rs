//! The public listener's certificate files, read into the rustls configuration it serves,
//! here where they are validated: `check`, `serve` and a reload read them the same way.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::Tls;

impl Tls {
    /// Reads the PEM files into a server configuration, naming the file that is wrong.
    pub fn server_config(&self) -> Result<rustls::ServerConfig, String> {
        let files = self;
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
}
