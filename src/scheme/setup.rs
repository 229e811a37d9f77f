//! What a provider's `build` gets from the configuration: the source's secrets and the keys
//! of its table that are not common to every source (its settings), with error messages
//! that name the key.

use serde::de::DeserializeOwned;

use crate::secret::Secret;

/// The keys every source takes, whatever its scheme; anything else in a `[[sources]]` table
/// belongs to the scheme.
pub const COMMON_KEYS: &[&str] = &[
    "name",
    "scheme",
    "secrets",
    "account",
    "tolerance",
    "on_conflict",
    "keep_payload",
    "keep_identity",
    "expect_every",
    "id_header",
    "id_pointer",
    "id",
    "order",
    "recover",
    "allow_from",
    "targets",
];

/// Resolves a secret reference (`file:`, `env:`, `credential:` or a literal) in a setting.
pub type Loader<'a> = dyn Fn(&str) -> Result<Secret, String> + 'a;

/// One configured secret, and whether it is only a stand-in for one that this command does
/// not load (`check` outside systemd, `sign` for another source).
pub struct Loaded {
    pub secret: Secret,
    pub stand_in: bool,
}

pub struct Setup<'a> {
    scheme: String,
    at: String,
    secrets: Vec<Loaded>,
    settings: toml::Table,
    loader: Option<&'a Loader<'a>>,
}

impl<'a> Setup<'a> {
    /// `at` names the source in messages, like `sources[0] ("stripe")`.
    pub fn new(
        scheme: String,
        at: String,
        secrets: Vec<Loaded>,
        settings: toml::Table,
        loader: &'a Loader<'a>,
    ) -> Setup<'a> {
        Setup {
            scheme,
            at,
            secrets,
            settings,
            loader: Some(loader),
        }
    }

    /// A setup with literal secrets and settings, as the tests and the load generator build.
    pub fn literal(scheme: &str, secrets: Vec<Secret>, settings: toml::Table) -> Setup<'a> {
        Setup {
            scheme: scheme.to_owned(),
            at: format!("source ({scheme})"),
            secrets: secrets
                .into_iter()
                .map(|secret| Loaded {
                    secret,
                    stand_in: false,
                })
                .collect(),
            settings,
            loader: None,
        }
    }

    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    pub fn at(&self) -> &str {
        &self.at
    }

    /// The scheme's own settings, every one of them: a key the type does not know is an
    /// error that names it.
    pub fn settings<T: DeserializeOwned>(&mut self) -> Result<T, String> {
        let table = std::mem::take(&mut self.settings);
        toml::Value::Table(table).try_into().map_err(|e| {
            format!(
                "{}: {} (besides the keys every source takes: {})",
                self.at,
                e.to_string().trim_end(),
                COMMON_KEYS.join(", ")
            )
        })
    }

    /// Called after `build`: settings it did not take are keys nobody knows.
    pub fn finish(&self) -> Result<(), String> {
        match self.settings.keys().next() {
            None => Ok(()),
            Some(key) => Err(format!(
                "{}: unknown key {key:?}; a source takes {}, and scheme {:?} takes no keys of \
                 its own",
                self.at,
                COMMON_KEYS.join(", "),
                self.scheme
            )),
        }
    }

    /// The configured secrets, at least one.
    pub fn secrets(&self) -> Result<Vec<Secret>, String> {
        if self.secrets.is_empty() {
            return Err(format!(
                "{}.secrets is empty; give at least one (several = rotation)",
                self.at
            ));
        }
        Ok(self.secrets.iter().map(|l| l.secret.clone()).collect())
    }

    /// The configured secrets, possibly none (a scheme that learns its secret).
    pub fn optional_secrets(&self) -> Vec<crate::secret::Secret> {
        self.secrets
            .iter()
            .filter(|l| !l.stand_in)
            .map(|l| l.secret.clone())
            .collect()
    }

    /// Each configured secret prepared by `parse` (at least one secret). A stand-in that
    /// `parse` refuses is left out: it would never verify anything.
    pub fn keys<K>(&self, parse: impl Fn(&Secret) -> Result<K, String>) -> Result<Vec<K>, String> {
        self.secrets()?;
        let mut keys = Vec::with_capacity(self.secrets.len());
        for (j, loaded) in self.secrets.iter().enumerate() {
            match parse(&loaded.secret) {
                Ok(k) => keys.push(k),
                Err(_) if loaded.stand_in => {}
                Err(e) => return Err(format!("{}.secrets[{j}]: {e}", self.at)),
            }
        }
        Ok(keys)
    }

    /// Refuses `secrets` for a scheme that takes none (its trust comes from elsewhere).
    pub fn no_secrets(&self, why: &str) -> Result<(), String> {
        if self.secrets.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{}.secrets: scheme {:?} takes no secrets: {why}",
                self.at, self.scheme
            ))
        }
    }

    /// A secret named in a setting (`key`), resolved like those in `secrets`.
    pub fn secret_setting(&self, key: &str, reference: &str) -> Result<Secret, String> {
        match self.loader {
            Some(load) => load(reference).map_err(|e| format!("{}.{key}: {e}", self.at)),
            None => Ok(Secret::new(reference)),
        }
    }
}

/// A `public_url` setting: the exact https URL the provider calls, which URL-signing
/// providers sign. It comes from configuration because `Host` and `X-Forwarded-*` are
/// whatever the client (or a proxy) says.
pub fn public_url(at: &str, url: &str) -> Result<String, String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| {
        format!("{at}.public_url {url:?} is not a URL ({e}); write the URL the provider calls")
    })?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
        return Err(format!(
            "{at}.public_url {url:?} must be http:// or https:// with a host"
        ));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(format!(
            "{at}.public_url {url:?}: leave out the query; the query of each request is \
             appended to it as the provider sent it"
        ));
    }
    Ok(url.to_owned())
}
