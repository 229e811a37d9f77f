//! The public listener's TLS settings: certificate files, read into the rustls
//! configuration it serves, here where they are validated (`check`, `serve` and a reload
//! read them the same way), or `[server.tls.acme]`, checked here and obtained by
//! [`crate::acme`].

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::raw::{RawAcme, RawTls};
use super::{Acme, Tls};

/// `[server.tls]` as written to the files it names or the ACME settings, exactly one.
pub(super) fn validate(
    raw: Option<&RawTls>,
    base: &Path,
) -> Result<(Option<Tls>, Option<Acme>), String> {
    let Some(raw) = raw else {
        return Ok((None, None));
    };
    match (&raw.cert, &raw.key, &raw.acme) {
        (Some(_), _, Some(_)) | (_, Some(_), Some(_)) => Err(
            "server.tls: set either cert and key (certificate files) or [server.tls.acme] \
             (certificates obtained by ACME), not both"
                .into(),
        ),
        (Some(cert), Some(key), None) => {
            let files = Tls {
                cert: base.join(cert),
                key: base.join(key),
            };
            files
                .server_config()
                .map_err(|e| format!("server.tls: {e}"))?;
            Ok((Some(files), None))
        }
        (Some(_), None, None) => {
            Err("server.tls.key is missing: name the private key file of server.tls.cert".into())
        }
        (None, Some(_), None) => Err(
            "server.tls.cert is missing: name the certificate chain file of server.tls.key".into(),
        ),
        (None, None, Some(acme)) => Ok((None, Some(validate_acme(acme, base)?))),
        (None, None, None) => Err(
            "server.tls is empty: set cert and key (certificate files), or [server.tls.acme] \
             with domains = [\"hooks.example.com\"] to obtain a certificate by ACME"
                .into(),
        ),
    }
}

fn validate_acme(raw: &RawAcme, base: &Path) -> Result<Acme, String> {
    if raw.domains.is_empty() {
        return Err(
            "server.tls.acme.domains is empty: name the DNS names that point to this \
             listener, e.g. [\"hooks.example.com\"]"
                .into(),
        );
    }
    let mut seen = HashSet::new();
    let mut domains = Vec::with_capacity(raw.domains.len());
    for d in &raw.domains {
        let name = d.trim_end_matches('.').to_ascii_lowercase();
        dns_name(&name).map_err(|why| format!("server.tls.acme.domains: {d:?} {why}"))?;
        if !seen.insert(name.clone()) {
            return Err(format!(
                "server.tls.acme.domains names {d:?} twice; name each once"
            ));
        }
        domains.push(name);
    }
    if let Some(contact) = &raw.contact
        && (!contact.starts_with("mailto:") || !contact.contains('@'))
    {
        return Err(format!(
            "server.tls.acme.contact {contact:?} is not a mailto: URL; write it like \
             \"mailto:ops@example.com\", or leave it out"
        ));
    }
    // RFC 8555 §6.1: ACME is spoken over HTTPS only.
    let directory = raw.directory.trim().to_owned();
    let host = directory.strip_prefix("https://").unwrap_or_default();
    if host.is_empty() || host.starts_with('/') || directory.contains(char::is_whitespace) {
        return Err(format!(
            "server.tls.acme.directory {:?} is not an https:// URL; leave it out for Let's \
             Encrypt ({}), or give your ACME server's directory URL",
            raw.directory,
            super::LETS_ENCRYPT
        ));
    }
    let directory_ca = raw.directory_ca.as_ref().map(|p| base.join(p));
    if let Some(path) = &directory_ca {
        CertificateDer::from_pem_file(path).map_err(|e| {
            format!(
                "server.tls.acme.directory_ca: cannot read a PEM certificate from {}: {e}",
                path.display()
            )
        })?;
    }
    Ok(Acme {
        domains,
        contact: raw.contact.clone(),
        directory,
        directory_ca,
        http01_listen: raw.http01_listen,
    })
}

/// Why `name` cannot be on a certificate proven by TLS-ALPN-01, if it cannot.
fn dns_name(name: &str) -> Result<(), &'static str> {
    if name.starts_with("*.") {
        return Err("is a wildcard, which only the DNS-01 challenge can prove; name each host");
    }
    if name.parse::<std::net::IpAddr>().is_ok() {
        return Err("is an IP address; name a DNS name that points to this listener");
    }
    let labels: Vec<&str> = name.split('.').collect();
    let label_ok = |l: &&str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    if name.len() > 253 || labels.len() < 2 || !labels.iter().all(label_ok) {
        return Err(
            "is not a DNS name with a dot (letters, digits and hyphens; \
                    internationalized names in their xn-- form)",
        );
    }
    Ok(())
}

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

/// What a certificate says, for `check`, `show-cert` and the expiry gauge.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CertInfo {
    /// The DNS names it is for (its subject alternative names, else its common name).
    pub names: Vec<String>,
    pub issuer: String,
    /// Unix seconds.
    pub not_before: i64,
    pub not_after: i64,
    /// Hex, as browsers show it.
    pub serial: String,
    /// Issued by itself: a client trusts it only when told to (`curl --cacert`).
    pub self_signed: bool,
}

impl CertInfo {
    /// Reads a DER certificate.
    pub fn of(der: &[u8]) -> Result<CertInfo, String> {
        use x509_parser::extensions::GeneralName;
        let (_, cert) = x509_parser::parse_x509_certificate(der)
            .map_err(|e| format!("not an X.509 certificate: {e}"))?;
        let mut names: Vec<String> = match cert.subject_alternative_name() {
            Ok(Some(san)) => san
                .value
                .general_names
                .iter()
                .filter_map(|n| match n {
                    GeneralName::DNSName(d) => Some((*d).to_owned()),
                    GeneralName::IPAddress(b) => match b.len() {
                        4 => Some(
                            std::net::Ipv4Addr::from(<[u8; 4]>::try_from(*b).ok()?).to_string(),
                        ),
                        16 => Some(
                            std::net::Ipv6Addr::from(<[u8; 16]>::try_from(*b).ok()?).to_string(),
                        ),
                        _ => None,
                    },
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        if names.is_empty() {
            names = cert
                .subject()
                .iter_common_name()
                .filter_map(|cn| cn.as_str().ok().map(str::to_owned))
                .collect();
        }
        Ok(CertInfo {
            names,
            issuer: cert.issuer().to_string(),
            not_before: cert.validity().not_before.timestamp(),
            not_after: cert.validity().not_after.timestamp(),
            serial: cert.raw_serial_as_string(),
            self_signed: cert.subject().as_raw() == cert.issuer().as_raw(),
        })
    }

    /// The name a client on this machine should ask for (`sign`): the first DNS name that
    /// is not a wildcard, else the first address; none when it names neither.
    pub fn name_to_reach(&self) -> Option<&str> {
        let is_ip = |n: &str| n.parse::<std::net::IpAddr>().is_ok();
        self.names
            .iter()
            .find(|n| !n.starts_with("*.") && !is_ip(n))
            .or_else(|| self.names.iter().find(|n| is_ip(n)))
            .map(String::as_str)
    }

    /// "expires 2027-03-01 (in 84 days)" or "expired on 2026-11-30 (7 days ago)".
    pub fn expiry_in_words(&self, now: i64) -> String {
        let date = &crate::clock::iso_from_unix(self.not_after)[..10];
        let days = (self.not_after - now).div_euclid(86_400);
        if self.not_after <= now {
            format!("expired on {date} ({} days ago)", -days - 1)
        } else {
            format!("expires {date} (in {days} days)")
        }
    }

    /// The leaf of the PEM chain in `path`.
    pub fn of_pem_file(path: &Path) -> Result<CertInfo, String> {
        let der = CertificateDer::from_pem_file(path)
            .map_err(|e| format!("cannot read a certificate from {}: {e}", path.display()))?;
        CertInfo::of(&der)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_self_signed_certificate_is_read_with_its_names_and_expiry() {
        let made = rcgen::generate_simple_self_signed(vec![
            "*.example.com".into(),
            "hooks.example.com".into(),
            "127.0.0.1".into(),
        ])
        .unwrap();
        let c = super::super::CertInfo::of(made.cert.der()).unwrap();
        assert_eq!(c.names, ["*.example.com", "hooks.example.com", "127.0.0.1"]);
        assert!(c.self_signed);
        assert_eq!(c.name_to_reach(), Some("hooks.example.com"));
        // rcgen's default validity runs to 4096-01-01.
        assert!(c.expiry_in_words(0).starts_with("expires 4096-01-01 (in "));
        assert!(
            c.expiry_in_words(c.not_after + 86_400 * 7 + 5)
                .ends_with("(7 days ago)")
        );
    }

    #[test]
    fn an_address_is_the_name_to_reach_when_no_dns_name_is_usable() {
        let made =
            rcgen::generate_simple_self_signed(vec!["*.example.com".into(), "::1".into()]).unwrap();
        let c = super::super::CertInfo::of(made.cert.der()).unwrap();
        assert_eq!(c.name_to_reach(), Some("::1"));
    }

    use std::path::Path;

    /// The error `check` gives for `tls` written under `[server]`.
    fn error(tls: &str) -> String {
        let text = format!(
            "[server]\n{tls}\n[store]\npath = \"inbox.db\"\n[[sources]]\nname = \"demo\"\n\
             scheme = \"standard-webhooks\"\nsecrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]\n"
        );
        let e = super::super::from_str(&text, Path::new("/nonexistent/hookinbox.toml"), None)
            .unwrap_err();
        format!("{e:#}")
    }

    #[test]
    fn acme_settings_are_checked_with_a_message_naming_the_fix() {
        let acme = "[server.tls.acme]\n";
        for (written, says) in [
            ("domains = []", "server.tls.acme.domains is empty"),
            ("domains = [\"*.example.com\"]", "is a wildcard"),
            ("domains = [\"192.0.2.1\"]", "is an IP address"),
            ("domains = [\"localhost\"]", "is not a DNS name with a dot"),
            ("domains = [\"a.example.com\", \"A.example.com\"]", "twice"),
            (
                "domains = [\"a.example.com\"]\ncontact = \"ops@example.com\"",
                "is not a mailto: URL",
            ),
            (
                "domains = [\"a.example.com\"]\ndirectory = \"http://acme.test/dir\"",
                "is not an https:// URL",
            ),
            (
                "domains = [\"a.example.com\"]\ndirectory_ca = \"/nonexistent/ca.pem\"",
                "server.tls.acme.directory_ca: cannot read a PEM certificate",
            ),
        ] {
            let e = error(&format!("{acme}{written}"));
            assert!(e.contains(says), "{written}: {e}");
        }
        let both = error(
            "[server.tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\n[server.tls.acme]\ndomains = [\"a.example.com\"]",
        );
        assert!(both.contains("not both"), "{both}");
        assert!(error("[server.tls]\ncert = \"c.pem\"").contains("server.tls.key is missing"));
        assert!(error("[server.tls]").contains("server.tls is empty"));
        let same = error(
            "listen = \"0.0.0.0:8443\"\n[server.tls.acme]\ndomains = [\"a.example.com\"]\n\
             http01_listen = \"127.0.0.1:8443\"",
        );
        assert!(same.contains("are the same port"), "{same}");
    }
}
