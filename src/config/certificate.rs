//! What a served certificate says, for the operator: the names it covers, who issued it and
//! when it expires. `check` prints it, and `sign` picks the name to reach the listener by.

use rustls::pki_types::CertificateDer;
use x509_parser::extensions::GeneralName;

/// The leaf certificate of a chain, as an operator reads it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Certificate {
    /// DNS names and IP addresses in its subjectAltName, in the certificate's order
    /// (clients match these, never the subject's common name).
    pub names: Vec<String>,
    pub subject: String,
    pub issuer: String,
    /// Unix seconds.
    pub not_before: i64,
    pub not_after: i64,
    /// Issued by itself: a client trusts it only when told to (`curl --cacert`).
    pub self_signed: bool,
}

impl Certificate {
    /// Reads the leaf (first) certificate of `chain`.
    pub fn of_leaf(chain: &[CertificateDer<'_>]) -> Result<Certificate, String> {
        let der = chain.first().ok_or("the chain holds no certificate")?;
        let (_, cert) = x509_parser::parse_x509_certificate(der)
            .map_err(|e| format!("the certificate cannot be read: {e}"))?;
        let mut names = Vec::new();
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for name in &san.value.general_names {
                match name {
                    GeneralName::DNSName(n) => names.push((*n).to_owned()),
                    GeneralName::IPAddress(bytes) => {
                        if let Some(ip) = ip_from_bytes(bytes) {
                            names.push(ip.to_string());
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(Certificate {
            names,
            subject: cert.subject().to_string(),
            issuer: cert.issuer().to_string(),
            not_before: cert.validity().not_before.timestamp(),
            not_after: cert.validity().not_after.timestamp(),
            self_signed: cert.subject().as_raw() == cert.issuer().as_raw(),
        })
    }

    /// Reads the leaf certificate of the PEM chain at `path`.
    pub fn of_pem_file(path: &std::path::Path) -> Result<Certificate, String> {
        use rustls::pki_types::pem::PemObject;
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .and_then(|certs| certs.collect())
            .map_err(|e| format!("cannot read the certificate {}: {e}", path.display()))?;
        Certificate::of_leaf(&chain).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The name a client on this machine should ask for: the first DNS name that is not a
    /// wildcard, else the first address; none when the certificate names neither.
    pub fn name_to_reach(&self) -> Option<&str> {
        self.names
            .iter()
            .find(|n| !n.starts_with("*.") && n.parse::<std::net::IpAddr>().is_err())
            .or_else(|| {
                self.names
                    .iter()
                    .find(|n| n.parse::<std::net::IpAddr>().is_ok())
            })
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
}

fn ip_from_bytes(bytes: &[u8]) -> Option<std::net::IpAddr> {
    match bytes.len() {
        4 => Some(<[u8; 4]>::try_from(bytes).ok()?.into()),
        16 => Some(<[u8; 16]>::try_from(bytes).ok()?.into()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_self_signed_certificate_is_read_with_its_names_and_expiry() {
        let made = rcgen::generate_simple_self_signed(vec![
            "*.example.com".into(),
            "hooks.example.com".into(),
            "127.0.0.1".into(),
        ])
        .unwrap();
        let c = Certificate::of_leaf(&[made.cert.der().clone()]).unwrap();
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
        let c = Certificate::of_leaf(&[made.cert.der().clone()]).unwrap();
        assert_eq!(c.name_to_reach(), Some("::1"));
    }
}
