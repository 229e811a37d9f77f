//! From the file as written to the [`Config`] the program uses: every value checked, every
//! secret loaded, every scheme's keys prepared. Errors name the key and never a secret.

use std::collections::HashSet;
use std::path::Path;

use hyper::http::{HeaderName, StatusCode};

use super::raw::{RawConfig, RawId, RawRecover, RawSource, RawTarget};
use super::*;
use crate::scheme::providers::RecoveryApi;
use crate::scheme::setup::Loaded;
use crate::scheme::{self, IdRule, Scheme, Setup};
use crate::secret::{self, Provenance, Secret};
use crate::targets::Context;

/// Where relative paths and `credential:` secrets are found, and how strictly secrets load.
pub(super) struct Paths<'a> {
    /// The config file's directory.
    base: &'a Path,
    /// systemd's `$CREDENTIALS_DIRECTORY`.
    credentials: Option<&'a Path>,
    purpose: Purpose<'a>,
}

impl Paths<'_> {
    /// Loads one secret; `source` names the source it verifies (`None`: a target's signing
    /// secret). See [`Purpose`] for when a secret that cannot be loaded is let through as a
    /// [`secret::placeholder`].
    fn secret(
        &self,
        reference: &str,
        source: Option<&str>,
    ) -> Result<(Secret, Provenance), String> {
        let error = match secret::resolve(reference, self.credentials) {
            Ok(found) => return Ok(found),
            Err(e) => e,
        };
        match (self.purpose, reference.strip_prefix("credential:")) {
            (Purpose::Check, Some(name)) if self.credentials.is_none() => {
                Ok((secret::placeholder(), Provenance::Deferred(name.to_owned())))
            }
            (Purpose::Sign(wanted), _) if source != Some(wanted) => {
                Ok((secret::placeholder(), Provenance::NotLoaded))
            }
            _ => Err(error),
        }
    }

    /// A secret a setting names (a target's, the inbox's password): it verifies no source.
    fn setting_secret(&self, reference: &str) -> Result<Secret, String> {
        self.secret(reference, None).map(|(secret, _)| secret)
    }
}

pub(super) fn validate(
    raw: RawConfig,
    path: &Path,
    credentials: Option<&Path>,
    purpose: Purpose,
) -> Result<Config, String> {
    let paths = Paths {
        base: path.parent().unwrap_or(Path::new(".")),
        credentials,
        purpose,
    };
    let s = &raw.server;
    if s.max_body == 0 || s.max_body > MAX_MAX_BODY {
        return Err(format!(
            "server.max_body must be between 1 byte and {} MiB",
            MAX_MAX_BODY / 1024 / 1024
        ));
    }
    for (key, value) in [
        ("header_timeout", s.header_timeout),
        ("body_timeout", s.body_timeout),
    ] {
        if value.is_zero() || value > MAX_TIMEOUT {
            return Err(format!(
                "server.{key} must be more than zero and at most 1h"
            ));
        }
    }
    if s.body_budget < s.max_body || s.body_budget > MAX_BODY_BUDGET {
        return Err(format!(
            "server.body_budget must be at least server.max_body ({} bytes; else a largest \
             body could never be read) and at most 4 GiB",
            s.max_body
        ));
    }
    if s.max_connections == 0 || s.max_connections > MAX_MAX_CONNECTIONS {
        return Err(format!(
            "server.max_connections must be between 1 and {MAX_MAX_CONNECTIONS}"
        ));
    }
    let raw_store_path = store_path(&raw.store)?;
    // A relative store path is relative to the config file, so that a config works from any
    // working directory (systemd starts services in /).
    // (Joining an absolute path yields it unchanged.)
    if !(MIN_RETENTION_INTERVAL..=MAX_RETENTION_INTERVAL).contains(&raw.store.retention_interval) {
        return Err("store.retention_interval must be between 1s and 1d".into());
    }
    let backend = validate_backend(&raw.store, &paths)?;
    let store_path = paths.base.join(raw_store_path);
    if store_path.is_dir() {
        return Err(format!(
            "store.path {} is a directory; name the inbox file, e.g. \"{}\"",
            store_path.display(),
            store_path.join("inbox.db").display()
        ));
    }
    let (public, admin) = (s.listen, raw.admin.listen);
    if binds_clash(public, admin) {
        return Err(format!(
            "server.listen {public} and admin.listen {admin} are the same port to the kernel \
             (an IPv4-mapped address is its IPv4 address; 0.0.0.0 covers every IPv4 \
             address, [::] every address); the admin listener (/metrics, /readyz) needs \
             one of its own, e.g. \"127.0.0.1:9180\""
        ));
    }
    let trusted_proxies = s
        .trusted_proxies
        .iter()
        .map(|t| crate::proxy::Cidr::parse(t).map_err(|e| format!("server.trusted_proxies: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let allow_lists = allow_lists(&s.allow_lists)?;
    let (tls, acme) = super::tls::validate(s.tls.as_ref(), paths.base)?;
    if let Some(http01) = acme.as_ref().and_then(|a| a.http01_listen) {
        for (key, other) in [("server.listen", public), ("admin.listen", admin)] {
            if http01.port() != 0
                && http01.port() == other.port()
                && (http01.ip() == other.ip()
                    || http01.ip().is_unspecified()
                    || other.ip().is_unspecified())
            {
                return Err(format!(
                    "server.tls.acme.http01_listen {http01} and {key} {other} are the same \
                     port; HTTP-01 needs a listener of its own, usually \"0.0.0.0:80\""
                ));
            }
        }
    }

    let mut names = HashSet::new();
    let mut sources = Vec::with_capacity(raw.sources.len());
    for (i, rs) in raw.sources.into_iter().enumerate() {
        let at = format!("sources[{i}] ({:?})", rs.name);
        if !valid_name(&rs.name) {
            return Err(format!(
                "{at}.name must be 1-64 characters of a-z, 0-9, '-' or '_' (it is a URL path segment)"
            ));
        }
        if !names.insert(rs.name.clone()) {
            return Err(format!("{at}.name is used by two sources"));
        }
        sources.push(validate_source(rs, &at, &paths, &allow_lists)?);
    }
    let mut alert_names = HashSet::new();
    let mut alerts = Vec::with_capacity(raw.alerts.len());
    for (i, rt) in raw.alerts.into_iter().enumerate() {
        let at = format!("alerts[{i}] ({:?})", rt.name);
        if !valid_name(&rt.name) {
            return Err(format!(
                "{at}.name must be 1-64 characters of a-z, 0-9, '-' or '_'"
            ));
        }
        if !alert_names.insert(rt.name.clone()) {
            return Err(format!("{at}.name is used by two alert targets"));
        }
        alerts.push(validate_target(rt, &at, &paths)?);
    }
    Ok(Config {
        path: path.to_owned(),
        server: Server {
            listen: s.listen,
            max_body: s.max_body,
            header_timeout: s.header_timeout,
            body_timeout: s.body_timeout,
            max_connections: s.max_connections,
            body_budget: s.body_budget,
            min_body_rate: s.min_body_rate,
            trusted_proxies,
            tls,
            acme,
        },
        admin: AdminSettings {
            listen: raw.admin.listen,
            actions: raw.admin.actions,
            hosts: admin_hosts(raw.admin.hosts)?,
        },
        store: StoreSettings {
            path: store_path,
            synchronous: raw.store.synchronous,
            retention_interval: raw.store.retention_interval,
            backend,
        },
        sources,
        alerts,
    })
}

/// The shortest `expect_every` and `alert_pending_age`: alerts are judged at most once a
/// second.
const MIN_EXPECT_EVERY: Duration = Duration::from_secs(1);

fn validate_source(
    rs: RawSource,
    at: &str,
    paths: &Paths,
    allow_lists: &AllowLists,
) -> Result<Source, String> {
    let Some(scheme_name) = rs.scheme else {
        let unknown: Vec<String> = rs.settings.keys().map(|k| format!("{k:?}")).collect();
        let hint = if unknown.is_empty() {
            String::new()
        } else {
            format!(" (unknown keys here: {})", unknown.join(", "))
        };
        return Err(format!(
            "{at}.scheme is missing{hint}; set scheme to one of {}",
            scheme::providers::names().join(", ")
        ));
    };
    let id = id_rule(rs.id_header, rs.id_pointer, rs.id, at)?;
    if let Some(order) = &rs.order
        && !(order.key.starts_with('/') && order.version.starts_with('/'))
    {
        return Err(format!(
            "{at}.order: key and version are JSON pointers like \"/data/object/id\""
        ));
    }
    if let Some(tolerance) = rs.tolerance
        && !(MIN_TOLERANCE..=MAX_TOLERANCE).contains(&tolerance)
    {
        return Err(format!("{at}.tolerance must be between 1s and 7d"));
    }
    let on_conflict = StatusCode::from_u16(rs.on_conflict)
        .ok()
        .filter(|c| (200..600).contains(&c.as_u16()))
        .ok_or_else(|| format!("{at}.on_conflict must be an HTTP status between 200 and 599"))?;
    if rs.keep_identity < rs.keep_payload {
        return Err(format!(
            "{at}: keep_identity must be at least keep_payload (the identity row outlives the body)"
        ));
    }
    let mut secrets = Vec::with_capacity(rs.secrets.len());
    let mut secret_origins = Vec::with_capacity(rs.secrets.len());
    for (j, reference) in rs.secrets.iter().enumerate() {
        let (secret, origin) = paths
            .secret(reference, Some(&rs.name))
            .map_err(|e| format!("{at}.secrets[{j}]: {e}"))?;
        secrets.push(Loaded {
            secret,
            stand_in: matches!(origin, Provenance::Deferred(_) | Provenance::NotLoaded),
        });
        secret_origins.push(origin);
    }
    let load = |reference: &str| {
        paths
            .secret(reference, Some(&rs.name))
            .map(|(secret, _)| secret)
    };
    let setup = Setup::new(scheme_name, at.to_owned(), secrets, rs.settings, &load);
    let scheme = Scheme::build(setup, rs.tolerance, id)?;

    let recover = match rs.recover {
        Some(r) => Some(validate_recover(r, &scheme, at, &load)?),
        None => None,
    };
    let allow_from = match rs.allow_from {
        Some(entries) => Some(allow_from(&entries, at, allow_lists)?),
        None => None,
    };

    let mut target_names = HashSet::new();
    let mut targets = Vec::with_capacity(rs.targets.len());
    for (j, rt) in rs.targets.into_iter().enumerate() {
        let tat = format!("{at}.targets[{j}] ({:?})", rt.name);
        if !valid_name(&rt.name) {
            return Err(format!(
                "{tat}.name must be 1-64 characters of a-z, 0-9, '-' or '_'"
            ));
        }
        if !target_names.insert(rt.name.clone()) {
            return Err(format!("{tat}.name is used by two targets of this source"));
        }
        targets.push(validate_target(rt, &tat, paths)?);
    }
    Ok(Source {
        name: rs.name,
        scheme,
        account: rs.account,
        on_conflict,
        keep_payload: rs.keep_payload,
        keep_identity: rs.keep_identity,
        expect_every: match rs.expect_every {
            Some(d) if d < MIN_EXPECT_EVERY => {
                return Err(format!(
                    "{at}.expect_every must be at least {} (an hour or a day suits most \
                     providers)",
                    humantime::format_duration(MIN_EXPECT_EVERY)
                ));
            }
            other => other,
        },
        targets,
        order: rs.order,
        secret_origins,
        recover,
        allow_from,
    })
}

/// `server.allow_lists`: the URL each named provider's address list is fetched from.
type AllowLists = std::collections::BTreeMap<&'static str, reqwest::Url>;

fn allow_lists(raw: &std::collections::BTreeMap<String, String>) -> Result<AllowLists, String> {
    raw.iter()
        .map(|(name, url)| {
            let Some(provider) = scheme::providers::find(name).filter(|p| p.addresses.is_some())
            else {
                return Err(format!(
                    "server.allow_lists.{name}: {name:?} is not a provider that publishes its \
                     webhook addresses; hookinbox knows the lists of {}",
                    with_lists().join(", ")
                ));
            };
            let url = provider_url(
                url,
                &format!("server.allow_lists.{name}"),
                "the list decides who may send",
            )?;
            Ok((provider.name, url))
        })
        .collect()
}

/// The providers whose address lists hookinbox knows.
fn with_lists() -> Vec<&'static str> {
    scheme::providers::names_with(|p| p.addresses.is_some())
}

/// A source's `allow_from`: each entry an address, a range, or a provider's name.
fn allow_from(entries: &[String], at: &str, lists: &AllowLists) -> Result<AllowFrom, String> {
    if entries.is_empty() {
        return Err(format!(
            "{at}.allow_from is empty, which would refuse every request; list the addresses \
             or providers to take requests from, or remove it to take them from anywhere"
        ));
    }
    let mut allowed = AllowFrom {
        ranges: Vec::new(),
        lists: Vec::new(),
    };
    for (i, entry) in entries.iter().enumerate() {
        let addresses =
            scheme::providers::find(entry).and_then(|p| Some((p, p.addresses.as_ref()?)));
        match (crate::proxy::Cidr::parse(entry), addresses) {
            (Ok(range), _) => allowed.ranges.push(range),
            (Err(_), Some((provider, list))) => {
                if allowed.lists.iter().any(|l| l.name() == provider.name) {
                    continue;
                }
                let url = match lists.get(provider.name) {
                    Some(url) => url.clone(),
                    None => {
                        reqwest::Url::parse(list.url).map_err(|e| format!("{}: {e}", list.url))?
                    }
                };
                allowed.lists.push(AllowList { provider, url });
            }
            (Err(e), None) => {
                return Err(format!(
                    "{at}.allow_from[{i}]: {e}, nor a provider that publishes its webhook \
                     addresses ({})",
                    with_lists().join(", ")
                ));
            }
        }
    }
    Ok(allowed)
}

/// A URL of a provider's that serve fetches from: https, or http only to this machine (a
/// local stand-in). `why` says what is at stake.
fn provider_url(url: &str, key: &str, why: &str) -> Result<reqwest::Url, String> {
    let base = reqwest::Url::parse(url).map_err(|e| format!("{key} {url:?} is not a URL: {e}"))?;
    let loopback = base.host_str().is_some_and(crate::pgconn::is_this_machine);
    if !(base.scheme() == "https" || (base.scheme() == "http" && loopback)) || base.host().is_none()
    {
        return Err(format!(
            "{key} {url:?} must be https:// (http:// only to this machine, for a local \
             stand-in): {why}"
        ));
    }
    Ok(base)
}

/// `[store] backend` for the operator commands, which connect to a PostgreSQL inbox as serve
/// does (its password loaded, a `credential:` one from `$CREDENTIALS_DIRECTORY`).
pub(super) fn offline_backend(
    store: &super::raw::RawStore,
    base: &Path,
) -> Result<Backend, String> {
    let credentials = std::env::var_os("CREDENTIALS_DIRECTORY").map(std::path::PathBuf::from);
    let paths = Paths {
        base,
        credentials: credentials.as_deref(),
        purpose: Purpose::Serve,
    };
    validate_backend(store, &paths)
}

/// `store.path`, which both backends need: the SQLite inbox itself, or, with PostgreSQL,
/// the name serve's reload status takes after outside systemd (`reload::path_for`).
pub(super) fn store_path(store: &super::raw::RawStore) -> Result<&Path, String> {
    const EXAMPLE: &str = "e.g. path = \"/var/lib/hookinbox/inbox.db\"";
    let what = match &store.path {
        Some(path) if !path.as_os_str().is_empty() => return Ok(path),
        Some(_) => "store.path is empty",
        None => "store.path is missing",
    };
    Err(if store.backend.as_deref() == Some("postgres") {
        format!(
            "{what}: with backend = \"postgres\" the inbox is in the database, but serve still \
             names a local file after store.path: its reload status, which `hookinbox reload` \
             reads when serve runs outside systemd (under systemd it is kept in the runtime \
             directory); name one the service may write, {EXAMPLE}"
        )
    } else {
        format!("{what}; name the inbox file, {EXAMPLE}")
    })
}

/// `[store] backend`, and for "postgres" its connection.
fn validate_backend(store: &super::raw::RawStore, paths: &Paths) -> Result<Backend, String> {
    let pg_keys = [
        ("url", store.url.is_some()),
        ("password", store.password.is_some()),
        ("tls", store.tls.is_some()),
        ("ca", store.ca.is_some()),
        ("pool", store.pool.is_some()),
    ];
    match store.backend.as_deref() {
        None | Some("sqlite") => {
            if let Some((key, _)) = pg_keys.iter().find(|(_, set)| *set) {
                return Err(format!(
                    "store.{key} is for backend = \"postgres\"; the SQLite inbox is store.path"
                ));
            }
            Ok(Backend::Sqlite)
        }
        Some("postgres") => {
            let Some(url) = store.url.clone() else {
                return Err("store.backend = \"postgres\" needs store.url, e.g. \
                     \"postgres://hookinbox@db.internal/hookinbox\""
                    .into());
            };
            if store.synchronous != Synchronous::Full {
                return Err("store.synchronous is SQLite's; PostgreSQL commits with \
                     synchronous_commit = on, always"
                    .into());
            }
            let pool = store.pool.unwrap_or(DEFAULT_PG_POOL);
            if pool == 0 || pool > MAX_PG_POOL {
                return Err(format!("store.pool must be between 1 and {MAX_PG_POOL}"));
            }
            let (url, password, tls) = crate::pgconn::check_keys(
                crate::pgconn::ConnectionKeys {
                    url,
                    password: store.password.clone(),
                    tls: store.tls.clone(),
                    ca: store.ca.clone(),
                },
                "store",
                paths.base,
                &|reference| paths.setting_secret(reference),
            )?;
            Ok(Backend::Postgres(PgStore {
                url,
                password,
                tls,
                pool,
            }))
        }
        Some(other) => Err(format!(
            "store.backend {other:?} is not a backend; write \"sqlite\" (the default: one file \
             on this machine) or \"postgres\" (one database that several replicas share)"
        )),
    }
}

/// A PostgreSQL inbox named on the command line (`migrate-store --to`), checked as `[store]`
/// checks it; `password` is a secret spec, relative files from the working directory.
pub fn pg_store_from(
    url: &str,
    password: Option<&str>,
    tls: Option<&str>,
    ca: Option<&Path>,
) -> Result<PgStore, String> {
    let credentials = std::env::var_os("CREDENTIALS_DIRECTORY").map(std::path::PathBuf::from);
    let paths = Paths {
        base: Path::new("."),
        credentials: credentials.as_deref(),
        purpose: Purpose::Serve,
    };
    let (url, password, tls) = crate::pgconn::check_keys(
        crate::pgconn::ConnectionKeys {
            url: url.to_owned(),
            password: password.map(str::to_owned),
            tls: tls.map(str::to_owned),
            ca: ca.map(Path::to_path_buf),
        },
        "store",
        paths.base,
        &|reference| paths.setting_secret(reference),
    )
    // The same checks, in the command line's words.
    .map_err(|e| {
        e.replace("password = \"file:", "--password \"file:")
            .replace("store.url", "--to")
            .replace("store.tls = ", "--tls ")
            .replace("store.tls", "--tls")
            .replace("store.ca", "--ca")
            .replace("store.password", "--password")
    })?;
    Ok(PgStore {
        url,
        password,
        tls,
        pool: DEFAULT_PG_POOL,
    })
}

fn validate_recover(
    r: RawRecover,
    scheme: &Scheme,
    at: &str,
    load: &dyn Fn(&str) -> Result<Secret, String>,
) -> Result<Recover, String> {
    let at = format!("{at}.recover");
    let Some(recovery) = scheme::providers::find(&r.api).and_then(|p| p.recovery.as_ref()) else {
        return Err(format!(
            "{at}.api {:?} is not an API hookinbox recovers from; it knows {}",
            r.api,
            scheme::providers::names_with(|p| p.recovery.is_some()).join(", ")
        ));
    };
    if scheme.name() != r.api {
        return Err(format!(
            "{at}.api is {:?} but the source's scheme is {:?}: recovery fills a source from \
             its own provider",
            r.api,
            scheme.name()
        ));
    }
    // Recovery finds an event in the inbox by the provider's own id (GitHub's delivery
    // GUID, Stripe's evt_…); another id rule would never match it.
    if scheme.id_rule() != scheme.verifier().default_id() {
        return Err(format!(
            "{at}: the source overrides its event id (id, id_header or id_pointer); recovery \
             needs the provider's own id to know what the inbox holds"
        ));
    }
    if !(MIN_RECOVER_EVERY..=MAX_RECOVER_EVERY).contains(&r.every) {
        return Err(format!("{at}.every must be between 1m and 7d"));
    }
    let url = r.api_url.as_deref().unwrap_or(recovery.url);
    let base = provider_url(
        url,
        &format!("{at}.api_url"),
        "the API key travels with every request",
    )?;
    let unused = |keys: &[(&str, bool)]| -> Result<(), String> {
        match keys.iter().find(|(_, set)| *set) {
            Some((key, _)) => Err(format!("{at}.{key} is not a key of the {} API", r.api)),
            None => Ok(()),
        }
    };
    let secret =
        |key: &str, reference: &str| load(reference).map_err(|e| format!("{at}.{key}: {e}"));
    let api = match recovery.api {
        RecoveryApi::GitHubDeliveries => {
            unused(&[("key", r.key.is_some()), ("types", !r.types.is_empty())])?;
            let hook = match (r.repo, r.org, r.hook_id) {
                (Some(repo), None, Some(hook_id)) => {
                    let parts: Vec<&str> = repo.split('/').collect();
                    let part_ok = |p: &str| {
                        !p.is_empty()
                            && p.bytes()
                                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
                    };
                    if parts.len() != 2 || !parts.iter().all(|p| part_ok(p)) {
                        return Err(format!(
                            "{at}.repo {repo:?} must be owner/name, as in the repository's URL"
                        ));
                    }
                    GitHubHook::Repo { repo, hook_id }
                }
                (None, Some(org), Some(hook_id)) => {
                    if org.is_empty()
                        || !org.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                    {
                        return Err(format!("{at}.org {org:?} is not an organisation's name"));
                    }
                    GitHubHook::Org { org, hook_id }
                }
                (None, None, None) => GitHubHook::App,
                (Some(_), Some(_), _) => {
                    return Err(format!("{at}: set repo or org, not both"));
                }
                (_, _, None) => {
                    return Err(format!(
                        "{at}.hook_id is missing: the number at the end of the hook's settings URL \
                         (…/settings/hooks/123)"
                    ));
                }
                (None, None, Some(_)) => {
                    return Err(format!(
                        "{at}: hook_id needs repo = \"owner/name\" or org = \"name\" (a GitHub \
                         App's own hook has no id: set app_id and private_key instead)"
                    ));
                }
            };
            let auth = match (&hook, r.token, r.app_id, r.private_key) {
                (GitHubHook::App, None, Some(app_id), Some(key)) => GitHubAuth::App {
                    app_id,
                    private_key: secret("private_key", &key)?,
                },
                (GitHubHook::App, _, _, _) => {
                    return Err(format!(
                        "{at}: a GitHub App's hook is reached with app_id and private_key (for a \
                         repository's or an organisation's hook, set repo or org, hook_id and \
                         token)"
                    ));
                }
                (_, Some(token), None, None) => GitHubAuth::Token(secret("token", &token)?),
                (_, None, None, None) => {
                    return Err(format!(
                        "{at}.token is missing: a token that may read and redeliver the hook's \
                         deliveries (a fine-grained token with \"Webhooks\" read and write), as a \
                         secret spec like \"file:/etc/hookinbox/secrets/github-token\""
                    ));
                }
                _ => {
                    return Err(format!(
                        "{at}: app_id and private_key reach only a GitHub App's own hook; a \
                         repository's or an organisation's hook takes a token"
                    ));
                }
            };
            RecoverApi::GitHub { hook, auth }
        }
        RecoveryApi::StripeEvents => {
            unused(&[
                ("repo", r.repo.is_some()),
                ("org", r.org.is_some()),
                ("hook_id", r.hook_id.is_some()),
                ("token", r.token.is_some()),
                ("app_id", r.app_id.is_some()),
                ("private_key", r.private_key.is_some()),
            ])?;
            let Some(key) = r.key else {
                return Err(format!(
                    "{at}.key is missing: a restricted key (rk_…) with read access to Events, as a \
                     secret spec like \"file:/etc/hookinbox/secrets/stripe-key\""
                ));
            };
            if r.types.len() > 20 {
                return Err(format!(
                    "{at}.types lists {} event types; Stripe filters by at most 20",
                    r.types.len()
                ));
            }
            RecoverApi::Stripe {
                key: secret("key", &key)?,
                types: r.types,
            }
        }
    };
    Ok(Recover {
        api,
        base,
        every: r.every,
    })
}

fn validate_target(rt: RawTarget, at: &str, paths: &Paths) -> Result<Target, String> {
    let secret = |reference: &str| paths.setting_secret(reference);
    let cx = Context {
        at,
        base: paths.base,
        secret: &secret,
    };
    // A key of another kind is refused after the keys every target takes, as it always was.
    let stray = rt.kinds.stray();
    let destination = rt.kinds.check(&cx)?;
    if rt.timeout.is_zero() {
        return Err(format!("{at}.timeout must be more than zero"));
    }
    if rt.concurrency == 0 || rt.concurrency > MAX_CONCURRENCY {
        return Err(format!(
            "{at}.concurrency must be between 1 and {MAX_CONCURRENCY}"
        ));
    }
    if rt.timeout > MAX_TIMEOUT {
        return Err(format!("{at}.timeout must be at most 1h"));
    }
    let lease = rt.lease.unwrap_or(rt.timeout + LEASE_MARGIN);
    if lease < rt.timeout + MIN_LEASE_MARGIN || lease > MAX_TIMEOUT * 2 {
        return Err(format!(
            "{at}.lease must exceed timeout ({:?}) by at least {MIN_LEASE_MARGIN:?} (time to \
             record the result, or a second attempt could start while the first still runs) \
             and be at most 2h",
            rt.timeout
        ));
    }
    let rate = rt
        .rate
        .as_deref()
        .map(parse_rate)
        .transpose()
        .map_err(|e| format!("{at}.rate {e}"))?;
    let retry = rt.retry.unwrap_or_else(|| DEFAULT_RETRY.to_vec());
    if retry.iter().any(|d| *d > MAX_RETRY_DELAY) {
        return Err(format!("{at}.retry: each wait must be at most 7d"));
    }
    if !(rt.alert_failure_share > 0.0 && rt.alert_failure_share <= 1.0) {
        return Err(format!(
            "{at}.alert_failure_share must be more than 0 and at most 1 (0.5: half the \
             recent attempts failed)"
        ));
    }
    if rt.alert_pending_age < MIN_EXPECT_EVERY {
        return Err(format!(
            "{at}.alert_pending_age must be at least {}",
            humantime::format_duration(MIN_EXPECT_EVERY)
        ));
    }
    if let Some(stray) = stray {
        return Err(format!("{at}.{stray}"));
    }
    Ok(Target {
        name: rt.name,
        destination,
        timeout: rt.timeout,
        retry,
        concurrency: rt.concurrency,
        rate,
        lease,
        alert_failure_share: rt.alert_failure_share,
        alert_pending_age: rt.alert_pending_age,
    })
}

/// The source's own id rule, from `id_header`, `id_pointer` or `id` (at most one).
fn id_rule(
    header: Option<String>,
    pointer: Option<String>,
    id: Option<RawId>,
    at: &str,
) -> Result<Option<IdRule>, String> {
    let part = |text: &str, key: &str| -> Result<IdRule, String> {
        if let Some(name) = text.strip_prefix("header:") {
            return HeaderName::from_bytes(name.trim().as_bytes())
                .map(IdRule::Header)
                .map_err(|_| format!("{at}.{key}: {name:?} is not a valid header name"));
        }
        if text.starts_with('/') {
            return Ok(IdRule::Pointer(text.to_owned()));
        }
        Err(format!(
            "{at}.{key}: {text:?} is neither a JSON pointer like \"/id\" nor \"header:NAME\""
        ))
    };
    let given = [header.is_some(), pointer.is_some(), id.is_some()];
    if given.iter().filter(|g| **g).count() > 1 {
        return Err(format!("{at}: set one of id_header, id_pointer or id"));
    }
    Ok(match (header, pointer, id) {
        (Some(h), _, _) => Some(IdRule::Header(
            HeaderName::from_bytes(h.as_bytes())
                .map_err(|_| format!("{at}.id_header {h:?} is not a valid header name"))?,
        )),
        (_, Some(p), _) => {
            if !p.starts_with('/') {
                return Err(format!(
                    "{at}.id_pointer {p:?} must be a JSON pointer like \"/id\""
                ));
            }
            Some(IdRule::Pointer(p))
        }
        (_, _, Some(RawId::One(text))) if text == "sha256" => Some(IdRule::BodySha256),
        (_, _, Some(RawId::One(text))) => Some(part(&text, "id")?),
        (_, _, Some(RawId::Parts(parts))) => {
            if parts.len() < 2 {
                return Err(format!(
                    "{at}.id: a list joins two or more parts; for one, write it as text"
                ));
            }
            Some(IdRule::Composite(
                parts
                    .iter()
                    .map(|p| part(p, "id"))
                    .collect::<Result<_, _>>()?,
            ))
        }
        (None, None, None) => None,
    })
}

/// `admin.hosts`: bare host names (no scheme, port or path), compared without case.
fn admin_hosts(hosts: Vec<String>) -> Result<Vec<String>, String> {
    hosts
        .into_iter()
        .map(|h| {
            let ok = !h.is_empty()
                && h.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
            if ok {
                Ok(h.to_ascii_lowercase())
            } else {
                Err(format!(
                    "admin.hosts: {h:?} is not a host name; write the bare name a browser \
                     uses for the web inbox, e.g. \"inbox.internal\" (no scheme or port)"
                ))
            }
        })
        .collect()
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// Whether the kernel would refuse to bind `b` once `a` is bound (Linux, without
/// SO_REUSEPORT, and with IPv6 sockets dual-stack as `net.ipv6.bindv6only = 0` makes them):
/// the same port, and addresses that overlap once an IPv4-mapped IPv6 address is read as
/// the IPv4 address it is. `0.0.0.0` overlaps every IPv4 address, `[::]` every address of
/// either family; a specific IPv6 address overlaps only itself and `[::]`.
pub(super) fn binds_clash(a: SocketAddr, b: SocketAddr) -> bool {
    use std::net::IpAddr;
    let kernel = |ip: IpAddr| match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    if a.port() == 0 || a.port() != b.port() {
        return false;
    }
    let (x, y) = (kernel(a.ip()), kernel(b.ip()));
    let dual_stack = |ip: IpAddr| ip == IpAddr::from(std::net::Ipv6Addr::UNSPECIFIED);
    match (x, y) {
        (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => {
            x == y || x.is_unspecified() || y.is_unspecified()
        }
        _ => dual_stack(x) || dual_stack(y),
    }
}

#[cfg(test)]
mod clash_tests {
    use super::binds_clash;
    use std::net::{SocketAddr, TcpListener};

    /// The rule against the kernel itself: each pair is bound for real, on a port found
    /// free, and the second bind fails exactly when `binds_clash` says it would.
    #[test]
    fn listen_addresses_clash_as_the_kernel_binds_them() {
        let mut ips = vec!["127.0.0.1", "127.0.0.2", "0.0.0.0"];
        // A machine without IPv6, or with IPv6 sockets made IPv6-only, checks IPv4 alone.
        let dual_stack = std::fs::read_to_string("/proc/sys/net/ipv6/bindv6only")
            .is_ok_and(|v| v.trim() == "0")
            && TcpListener::bind("[::1]:0").is_ok();
        if dual_stack {
            ips.extend(["[::ffff:127.0.0.1]", "[::ffff:0.0.0.0]", "[::1]", "[::]"]);
        }
        let wildcard = if dual_stack { "[::]:0" } else { "0.0.0.0:0" };
        for &a in &ips {
            for &b in &ips {
                // A port free on every address: the wildcard of both families.
                let probe = TcpListener::bind(wildcard).unwrap();
                let port = probe.local_addr().unwrap().port();
                drop(probe);
                let (a, b): (SocketAddr, SocketAddr) = (
                    format!("{a}:{port}").parse().unwrap(),
                    format!("{b}:{port}").parse().unwrap(),
                );
                let first = TcpListener::bind(a).unwrap();
                let refused = TcpListener::bind(b).is_err();
                drop(first);
                assert_eq!(binds_clash(a, b), refused, "{a} then {b}");
            }
        }
    }
}
