//! Certificates by ACME (RFC 8555) for the public listener: obtained with TLS-ALPN-01 on the
//! listener itself (or HTTP-01 on a listener of its own, [`http01`]), kept in the inbox,
//! renewed at two thirds of their lifetime.
//!
//! The invariant: at most one replica orders at a time for a set of names, and each
//! replica serves the newest certificate the inbox keeps. The inbox's `kept` table holds
//! rows per directory and set of names (see [`Rows`]): the account's credentials, the
//! certificate with its key, a lease that a replica takes by compare-and-set before it
//! orders, and while it orders, each name's challenge, which the replicas waiting answer
//! too (the ACME server may reach any of them). A failed order moves the lease's term to the end of its backoff, so the other
//! replicas wait as long as it does; a restart finds the certificate and orders nothing.

pub mod http01;
mod order;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;

use crate::config::{self, CertInfo};
use crate::metrics::{Metrics, ResultLabels};
use crate::receive::tls::Certificates;
use crate::store::{self, Store};

/// How often a replica looks at the inbox for a certificate another one obtained, at the
/// latest: a renewal elsewhere is served here within this.
const REFRESH: Duration = Duration::from_secs(600);
/// How often a replica waiting for another one's order looks again, for the challenges to
/// answer and then for the certificate.
const LEASE_POLL: Duration = Duration::from_secs(2);
/// How long an order on a shared inbox waits between keeping its challenges and asking for
/// their validation: two looks of every other replica, and a margin for a slow read.
pub const CHALLENGE_SPREAD: Duration = Duration::from_secs(2 * 2 + 1);
/// How long an order may hold the lease: longer than an order takes (two validation waits
/// and a few requests), so that only a replica that died mid-order lets it lapse.
const LEASE: Duration = Duration::from_secs(300);
/// The wait after a first failure, doubled after each next one up to [`BACKOFF_MAX`]. A
/// minute, not seconds: Let's Encrypt allows 5 failed validations per name an hour.
const BACKOFF_FIRST: Duration = Duration::from_secs(60);
const BACKOFF_MAX: Duration = Duration::from_secs(6 * 3600);
/// When the inbox cannot be read, the next try.
const STORE_RETRY: Duration = Duration::from_secs(10);

/// The names of the kept rows of one directory and set of names.
pub struct Rows {
    pub account: String,
    pub certificate: String,
    pub lease: String,
    /// Followed by a DNS name: the digest of its key authorization while an order runs.
    pub challenge: String,
}

impl Rows {
    pub fn of(settings: &config::Acme) -> Rows {
        let names = settings.domains.join(",");
        Rows {
            account: format!("acme:account {}", settings.directory),
            certificate: format!("acme:certificate {} {names}", settings.directory),
            lease: format!("acme:lease {} {names}", settings.directory),
            challenge: format!("acme:challenge {} ", settings.directory),
        }
    }
}

/// A certificate as kept: the PEM chain, leaf first, and its PEM private key.
#[derive(Serialize, Deserialize)]
pub struct Kept {
    pub chain: String,
    pub key: String,
}

impl Kept {
    pub fn chain(&self) -> Result<Vec<CertificateDer<'static>>, String> {
        let chain = CertificateDer::pem_slice_iter(self.chain.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("the kept chain is not PEM: {e}"))?;
        if chain.is_empty() {
            return Err("the kept chain holds no certificate".into());
        }
        Ok(chain)
    }

    fn certified_key(&self) -> Result<CertifiedKey, String> {
        let key = PrivateKeyDer::from_pem_slice(self.key.as_bytes())
            .map_err(|e| format!("the kept key is not PEM: {e}"))?;
        let provider = rustls::crypto::ring::default_provider();
        CertifiedKey::from_der(self.chain()?, key, &provider)
            .map_err(|e| format!("the kept certificate and key do not go together: {e}"))
    }

    pub fn leaf(&self) -> Result<CertInfo, String> {
        CertInfo::of(&self.chain()?[0])
    }
}

/// The ACME side of `serve`: obtains, keeps and renews the certificate [`Certificates`]
/// serves.
pub struct Acme {
    pub settings: config::Acme,
    pub store: Store,
    pub certs: Arc<Certificates>,
    pub metrics: Arc<Metrics>,
    /// This replica's name in the lease.
    pub holder: String,
    /// [`CHALLENGE_SPREAD`] where other replicas share the inbox (PostgreSQL), else zero.
    pub spread: Duration,
}

impl Acme {
    /// Runs until the task is aborted (at shutdown).
    pub fn spawn(self) -> JoinHandle<()> {
        for result in crate::metrics::RENEWAL_RESULTS {
            let _ = self
                .metrics
                .certificate_renewals
                .get_or_create(&ResultLabels { result });
        }
        self.certs.set_waiting(format!(
            "no certificate yet: reading the inbox for one for {}",
            self.settings.domains.join(", ")
        ));
        tokio::spawn(async move {
            let mut failures = 0;
            // The challenges another replica's order asked this one to answer, with their
            // digests.
            let mut following = Vec::new();
            loop {
                let wait = self.turn(&self.holder, &mut failures, &mut following).await;
                tokio::time::sleep(wait).await;
            }
        })
    }

    /// One look: serve what the inbox keeps, and order when it is due and the lease is
    /// this replica's. Returns how long to wait before the next look.
    async fn turn(
        &self,
        holder: &str,
        failures: &mut u32,
        following: &mut Vec<(String, String)>,
    ) -> Duration {
        let rows = Rows::of(&self.settings);
        let followed = std::mem::take(following);
        let name = rows.certificate.clone();
        let kept = match self
            .store
            .read(move |db| Ok(store::kept::get(db, &name)?))
            .await
        {
            Ok(kept) => kept,
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "ACME: reading the kept certificate");
                self.wait_reason(format!("the inbox cannot be read: {e:#}"));
                *following = followed;
                return STORE_RETRY;
            }
        };
        let mut renew_at = None;
        if let Some(k) = kept {
            match serde_json::from_str::<Kept>(&k.value)
                .map_err(|e| e.to_string())
                .and_then(|kept| self.install(&kept))
            {
                Ok(at) => renew_at = Some(at),
                Err(e) => {
                    tracing::warn!(error = %e, "ACME: the kept certificate is unusable; ordering a new one")
                }
            }
        }
        let now = SystemTime::now();
        let lease = match renew_at {
            Some(at) if now < at => None,
            _ => Some(self.take_lease(&rows.lease, holder, now + LEASE).await),
        };
        if let Some(Ok(false)) = lease {
            if self.certs.not_ready().is_some() {
                self.wait_reason("another replica is ordering the certificate".into());
            }
            *following = self.follow_challenges(&rows.challenge, followed).await;
            return LEASE_POLL;
        }
        // No other replica's order runs: its challenges are answered no more.
        for (domain, _) in &followed {
            self.withdraw(domain);
        }
        match lease {
            // Not due yet.
            None => {
                return renew_at
                    .and_then(|at| at.duration_since(now).ok())
                    .unwrap_or_default()
                    .min(REFRESH);
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                tracing::warn!(error = %format!("{e:#}"), "ACME: taking the lease");
                return STORE_RETRY;
            }
        }
        self.wait_reason(format!(
            "ordering a certificate for {} from {}",
            self.settings.domains.join(", "),
            self.settings.directory
        ));
        match self.order(&rows).await {
            Ok(at) => {
                *failures = 0;
                self.count("ok");
                let _ = self.release_lease(&rows.lease, holder, now).await;
                at.duration_since(SystemTime::now())
                    .unwrap_or_default()
                    .min(REFRESH)
            }
            Err(e) => {
                *failures += 1;
                self.count("error");
                let wait = backoff(*failures);
                tracing::error!(
                    error = %format!("{e:#}"),
                    retry_in = %humantime::format_duration(wait),
                    "ACME: ordering a certificate failed"
                );
                self.wait_reason(format!(
                    "the last order failed ({e:#}); the next in {}",
                    humantime::format_duration(wait)
                ));
                // The other replicas wait out the same backoff.
                let _ = self
                    .release_lease(&rows.lease, holder, SystemTime::now() + wait)
                    .await;
                wait
            }
        }
    }

    /// Orders, keeps and serves a certificate; returns when to renew it.
    async fn order(&self, rows: &Rows) -> anyhow::Result<SystemTime> {
        let name = rows.account.clone();
        let account = self
            .store
            .read(move |db| Ok(store::kept::get(db, &name)?))
            .await?
            .map(|k| serde_json::from_str(&k.value))
            .transpose()?;
        let answering = order::Answering {
            certs: &self.certs,
            store: &self.store,
            prefix: &rows.challenge,
            spread: self.spread,
        };
        let (account, created) = order::account(&self.settings, account).await?;
        if let Some(credentials) = created {
            let (name, value) = (rows.account.clone(), serde_json::to_string(&credentials)?);
            self.store
                .change(move |db, now| store::kept::put(db, &name, &value, now))
                .await?;
        }
        let obtained = order::obtain(&self.settings, &account, &answering).await?;
        let kept = Kept {
            chain: obtained.chain_pem,
            key: obtained.key_pem,
        };
        // Kept before it is served: a certificate served but not kept would be ordered
        // again at the next start.
        let (name, value) = (rows.certificate.clone(), serde_json::to_string(&kept)?);
        self.store
            .change(move |db, now| store::kept::put(db, &name, &value, now))
            .await?;
        let renew_at = self.install(&kept).map_err(anyhow::Error::msg)?;
        let leaf = kept.leaf().map_err(anyhow::Error::msg)?;
        tracing::info!(
            names = %leaf.names.join(","),
            serial = %leaf.serial,
            not_after = %humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(leaf.not_after.max(0) as u64)),
            "ACME: certificate obtained and served"
        );
        Ok(renew_at)
    }

    /// Stops answering a followed challenge (a name, or an HTTP-01 token).
    fn withdraw(&self, followed: &str) {
        match followed.strip_prefix(order::HTTP01) {
            Some(token) => self.certs.withdraw_http(token),
            None => self.certs.withdraw(followed),
        }
    }

    /// Answers the validations of the order another replica runs, as the inbox keeps its
    /// challenges; `followed` are those answered so far. Returns those answered now.
    async fn follow_challenges(
        &self,
        prefix: &str,
        followed: Vec<(String, String)>,
    ) -> Vec<(String, String)> {
        let key = prefix.to_owned();
        let kept = match self
            .store
            .read(move |db| Ok(store::kept::with_prefix(db, &key)?))
            .await
        {
            Ok(kept) => kept,
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "ACME: reading another replica's challenges");
                return followed;
            }
        };
        let now: Vec<(String, String)> = kept
            .into_iter()
            .filter_map(|(name, k)| Some((name.strip_prefix(prefix)?.to_owned(), k.value)))
            .collect();
        for (domain, _) in followed.iter().filter(|f| !now.contains(f)) {
            self.withdraw(domain);
        }
        for (domain, digest) in now.iter().filter(|n| !followed.contains(n)) {
            if let Some(token) = domain.strip_prefix(order::HTTP01) {
                self.certs.answer_http(token, digest);
                continue;
            }
            let key = hex::decode(digest)
                .map_err(anyhow::Error::from)
                .and_then(|d| order::challenge_key(domain, &d));
            match key {
                Ok(key) => {
                    self.certs.answer(domain, key);
                    tracing::info!(%domain, "ACME: answering another replica's challenge");
                }
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), %domain, "ACME: a kept challenge is unusable")
                }
            }
        }
        now
    }

    /// Serves `kept` unless it is what is served already; returns when to renew it.
    fn install(&self, kept: &Kept) -> Result<SystemTime, String> {
        let leaf = kept.leaf()?;
        let chain = kept.chain()?;
        if self.certs.served().as_deref() != Some(chain.as_slice()) {
            self.certs.serve(Arc::new(kept.certified_key()?));
            self.metrics.certificate_expiry.set(leaf.not_after);
            tracing::info!(serial = %leaf.serial, "ACME: serving the kept certificate");
        }
        Ok(renew_at(&leaf))
    }

    fn wait_reason(&self, why: String) {
        self.certs.set_waiting(format!("no certificate yet: {why}"));
    }

    fn count(&self, result: &'static str) {
        self.metrics
            .certificate_renewals
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    /// Takes the lease for an order until `until`, unless another holder's term runs.
    async fn take_lease(
        &self,
        name: &str,
        holder: &str,
        until: SystemTime,
    ) -> anyhow::Result<bool> {
        let (name, holder) = (name.to_owned(), holder.to_owned());
        let value = lease_value(&holder, until);
        let now = unix(SystemTime::now());
        self.store
            .change(move |db, at| {
                let current = store::kept::get(db, &name)?.map(|k| k.value);
                if let Some(current) = &current {
                    let (who, term) = parse_lease(current);
                    if who != holder && term > now {
                        return Ok(false);
                    }
                }
                store::kept::replace_if(db, &name, current.as_deref(), &value, at)
            })
            .await
    }

    /// Ends this replica's term at `until` (now: the others may order; later: they wait).
    async fn release_lease(
        &self,
        name: &str,
        holder: &str,
        until: SystemTime,
    ) -> anyhow::Result<bool> {
        let (name, holder) = (name.to_owned(), holder.to_owned());
        let value = lease_value(&holder, until);
        self.store
            .change(move |db, at| {
                let current = store::kept::get(db, &name)?.map(|k| k.value);
                match &current {
                    Some(c) if parse_lease(c).0 == holder => {
                        store::kept::replace_if(db, &name, Some(c), &value, at)
                    }
                    _ => Ok(false),
                }
            })
            .await
    }
}

/// Two thirds into the certificate's lifetime, as Let's Encrypt advises for its 90 days
/// (30 days before the end).
pub fn renew_at(leaf: &CertInfo) -> SystemTime {
    let lifetime = (leaf.not_after - leaf.not_before).max(0);
    let at = leaf.not_before + lifetime * 2 / 3;
    UNIX_EPOCH + Duration::from_secs(at.max(0) as u64)
}

fn backoff(failures: u32) -> Duration {
    BACKOFF_FIRST
        .saturating_mul(1 << failures.saturating_sub(1).min(16))
        .min(BACKOFF_MAX)
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
}

fn lease_value(holder: &str, until: SystemTime) -> String {
    format!("{holder} {}", unix(until))
}

/// The holder and the end of the term (unix seconds); a row that does not parse has lapsed.
fn parse_lease(value: &str) -> (&str, u64) {
    let (who, term) = value.split_once(' ').unwrap_or((value, "0"));
    (who, term.parse().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewal_is_due_two_thirds_in_and_failures_back_off_to_a_ceiling() {
        let leaf = CertInfo {
            names: vec![],
            issuer: String::new(),
            not_before: 1_000,
            not_after: 1_000 + 90 * 86_400,
            serial: String::new(),
            self_signed: false,
        };
        assert_eq!(
            renew_at(&leaf),
            UNIX_EPOCH + Duration::from_secs(1_000 + 60 * 86_400)
        );
        assert_eq!(backoff(1), Duration::from_secs(60));
        assert_eq!(backoff(2), Duration::from_secs(120));
        assert_eq!(backoff(5), Duration::from_secs(960));
        assert_eq!(backoff(40), BACKOFF_MAX);
    }

    #[test]
    fn a_lease_that_does_not_parse_has_lapsed() {
        assert_eq!(parse_lease("abc 17"), ("abc", 17));
        assert_eq!(parse_lease("garbage"), ("garbage", 0));
        assert_eq!(parse_lease("abc x"), ("abc", 0));
    }
}
