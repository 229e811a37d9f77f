//! One order (RFC 8555 §7.4) with instant-acme: the account restored or created, each name
//! proven by TLS-ALPN-01 on the listener itself, the certificate fetched. instant-acme
//! retries a `badNonce` refusal itself (RFC 8555 §6.5: the answer carries a fresh nonce);
//! any other failure ends the order, and the caller's backoff decides when to try again.

use std::sync::Arc;
use std::time::Duration;

use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, ChallengeType, Identifier, NewAccount,
    NewOrder, OrderStatus, RetryPolicy,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;

use crate::config;
use crate::receive::tls::Certificates;
use crate::store::{self, Store};

/// How long an order may wait for its validations, and then for the certificate. Let's
/// Encrypt validates in seconds; a minute covers a slow validation from several vantage
/// points without holding the lease past its term.
const VALIDATION_WAIT: Duration = Duration::from_secs(60);

/// Before a token in the names of kept HTTP-01 challenges (a DNS name has no colon).
pub const HTTP01: &str = "http-01:";

/// What an order leaves: the chain and its key (PEM).
pub struct Obtained {
    pub chain_pem: String,
    pub key_pem: String,
}

fn builder(settings: &config::Acme) -> anyhow::Result<instant_acme::AccountBuilder> {
    Ok(match &settings.directory_ca {
        Some(ca) => Account::builder_with_root(ca)?,
        None => Account::builder()?,
    })
}

/// How the validations are answered: by this replica through `certs`, and by the others
/// from the inbox, where each name's key authorization digest is kept under `prefix` and
/// the name while the order runs.
pub struct Answering<'a> {
    pub certs: &'a Certificates,
    pub store: &'a Store,
    pub prefix: &'a str,
    /// How long the other replicas are given to pick the challenges up before the ACME
    /// server is told to validate (zero where there are none: SQLite).
    pub spread: Duration,
}

/// The account the kept credentials name, or a new one with its credentials, which the
/// caller keeps before it orders anything: an order that fails must not leave the next try
/// to create yet another account (Let's Encrypt allows ten an address in three hours).
pub async fn account(
    settings: &config::Acme,
    account: Option<AccountCredentials>,
) -> anyhow::Result<(Account, Option<AccountCredentials>)> {
    Ok(match account {
        Some(credentials) => (
            builder(settings)?.from_credentials(credentials).await?,
            None,
        ),
        None => {
            let contact: Vec<&str> = settings.contact.iter().map(String::as_str).collect();
            let (account, credentials) = builder(settings)?
                .create(
                    &NewAccount {
                        contact: &contact,
                        terms_of_service_agreed: true,
                        only_return_existing: false,
                    },
                    settings.directory.clone(),
                    None,
                )
                .await?;
            tracing::info!(directory = %settings.directory, "ACME account created");
            (account, Some(credentials))
        }
    })
}

/// Orders a certificate for `settings.domains` under `account`, answering the validations
/// as `answering` says.
pub async fn obtain(
    settings: &config::Acme,
    account: &Account,
    answering: &Answering<'_>,
) -> anyhow::Result<Obtained> {
    let certs = answering.certs;
    let identifiers: Vec<Identifier> = settings
        .domains
        .iter()
        .map(|d| Identifier::Dns(d.clone()))
        .collect();
    let mut order = account.new_order(&NewOrder::new(&identifiers)).await?;
    let kind = match settings.http01_listen {
        Some(_) => ChallengeType::Http01,
        None => ChallengeType::TlsAlpn01,
    };
    let mut answered = Vec::new();
    let result = async {
        // First every challenge is answered here and kept for the other replicas, then,
        // after the spread, the ACME server is told to validate each: it may reach any
        // replica behind the name.
        let mut ready = Vec::new();
        let mut authorizations = order.authorizations();
        while let Some(authz) = authorizations.next().await {
            let mut authz = authz?;
            match authz.status {
                AuthorizationStatus::Valid => continue,
                AuthorizationStatus::Pending => {}
                other => anyhow::bail!("an authorization is {other:?}"),
            }
            let challenge = authz
                .challenge(kind.clone())
                .ok_or_else(|| anyhow::anyhow!("the ACME server offers no {kind:?} challenge"))?;
            // Kept under the name for TLS-ALPN-01, under the token for HTTP-01.
            let (domain, value) = if kind == ChallengeType::Http01 {
                let key_authorization = challenge.key_authorization();
                certs.answer_http(&challenge.token, key_authorization.as_str());
                (
                    format!("{HTTP01}{}", challenge.token),
                    key_authorization.as_str().to_owned(),
                )
            } else {
                let domain = challenge.identifier().to_string();
                let digest = challenge.key_authorization().digest();
                certs.answer(&domain, challenge_key(&domain, digest.as_ref())?);
                (domain, hex::encode(digest))
            };
            let name = format!("{}{domain}", answering.prefix);
            // Withdrawn at the end even if keeping it for the other replicas fails.
            answered.push(domain);
            answering
                .store
                .change(move |db, now| store::kept::put(db, &name, &value, now))
                .await?;
            ready.push(challenge.url.clone());
        }
        if !ready.is_empty() {
            tokio::time::sleep(answering.spread).await;
        }
        let mut authorizations = order.authorizations();
        while let Some(authz) = authorizations.next().await {
            let mut authz = authz?;
            let Some(mut challenge) = authz.challenge(kind.clone()) else {
                continue;
            };
            if ready.contains(&challenge.url) {
                challenge.set_ready().await?;
            }
        }
        let policy = RetryPolicy::new().timeout(VALIDATION_WAIT);
        let status = order.poll_ready(&policy).await?;
        if status != OrderStatus::Ready {
            let why = order
                .state()
                .error
                .as_ref()
                .map_or_else(|| format!("{status:?}"), |p| p.to_string());
            anyhow::bail!("the order was not validated: {why}");
        }
        let key_pem = order.finalize().await?;
        let chain_pem = order.poll_certificate(&policy).await?;
        Ok((chain_pem, key_pem))
    }
    .await;
    for domain in answered {
        match domain.strip_prefix(HTTP01) {
            Some(token) => certs.withdraw_http(token),
            None => certs.withdraw(&domain),
        }
        let name = format!("{}{domain}", answering.prefix);
        if let Err(e) = answering
            .store
            .change(move |db, _| store::kept::delete(db, &name))
            .await
        {
            tracing::warn!(error = %format!("{e:#}"), "ACME: forgetting a challenge");
        }
    }
    let (chain_pem, key_pem) = result?;
    Ok(Obtained { chain_pem, key_pem })
}

/// The self-signed certificate a TLS-ALPN-01 validation of `domain` expects: its name, and
/// the SHA-256 of the key authorization in a critical acmeIdentifier extension (RFC 8737
/// §3).
pub fn challenge_key(domain: &str, digest: &[u8]) -> anyhow::Result<Arc<CertifiedKey>> {
    let mut params = rcgen::CertificateParams::new(vec![domain.to_owned()])?;
    params
        .custom_extensions
        .push(rcgen::CustomExtension::new_acme_identifier(digest));
    let key = rcgen::KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    // Not `CertifiedKey::from_der`: its check that the key matches parses the certificate
    // with webpki, which refuses the critical acmeIdentifier extension it does not know.
    let key = rustls::crypto::ring::default_provider()
        .key_provider
        .load_private_key(der)?;
    Ok(Arc::new(CertifiedKey::new(
        vec![CertificateDer::from(cert.der().to_vec())],
        key,
    )))
}
