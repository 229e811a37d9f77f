//! What works but an operator should know about: `check` prints it, `serve` logs it at
//! start-up and on reload.

use std::path::Path;

use super::*;
use crate::scheme;

/// The hole a protocol leaves when it signs no timestamp and the event id comes from a
/// header the signature does not cover: a captured request, replayed with a new id, is a
/// new event. (With a signed timestamp, the window bounds such a replay.)
fn replay_hole(scheme: &scheme::Scheme) -> Option<String> {
    let verifier = scheme.verifier();
    if verifier.signs_timestamp() {
        return None;
    }
    let rule = scheme.id_rule()?;
    let header = *rule.headers().first()?;
    // The provider's own id header counts as signed only where the scheme says so.
    let overridden = scheme.id_rule() != verifier.default_id();
    if verifier.signs_id() && !overridden {
        return None;
    }
    Some(format!(
        "scheme {:?} signs no timestamp and the event id comes from header {header}, which \
         the signature does not cover: a captured request replayed with a new id would be \
         stored and forwarded as a new event (the provider's protocol; keep the endpoint's \
         traffic on TLS)",
        scheme.name()
    ))
}

/// Whether the secret in `path` is a public key, which anyone may read, as the provider
/// declares them (a Standard Webhooks `whpk_` key is one, its `whsec_` ones are shared).
fn public_key(scheme: &scheme::Scheme, path: &Path) -> bool {
    scheme
        .provider()
        .public_keys
        .as_ref()
        .is_some_and(|keys| keys.is_public_key(|| std::fs::read(path).ok()))
}

impl Config {
    /// Things that work but that an operator should know about. `check` prints them;
    /// `serve` logs them at start-up.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        match self.server.acme.as_ref().map(|a| a.http01_listen) {
            Some(None) if self.server.listen.port() != 443 => out.push(format!(
                "server.listen {} is not port 443, where ACME servers connect for the \
                 TLS-ALPN-01 challenge: forward port 443 to it, or listen on :443",
                self.server.listen
            )),
            Some(Some(http01)) if http01.port() != 80 => out.push(format!(
                "server.tls.acme.http01_listen {http01} is not port 80, where ACME servers \
                 connect for the HTTP-01 challenge: forward port 80 to it, or listen on :80"
            )),
            _ => {}
        }
        let postgres = matches!(self.store.backend, super::Backend::Postgres(_));
        for s in &self.sources {
            for (j, origin) in s.secret_origins.iter().enumerate() {
                match origin {
                    Provenance::Literal => out.push(format!(
                        "source {:?}: secrets[{j}] is written in the config file; prefer \
                         \"file:/etc/hookinbox/secrets/{}\", \"env:NAME\" or \"credential:NAME\"",
                        s.name, s.name
                    )),
                    Provenance::File(path)
                        if crate::secret::world_readable(path) && !public_key(&s.scheme, path) =>
                    {
                        out.push(format!(
                            "source {:?}: secret file {} is readable by every user; chmod \
                             600 it (owned by the service user)",
                            s.name,
                            path.display()
                        ))
                    }
                    Provenance::Deferred(name) => out.push(format!(
                        "source {:?}: secrets[{j}] \"credential:{name}\" is read from \
                         $CREDENTIALS_DIRECTORY when systemd starts the service (a \
                         LoadCredential={name}:FILE line in the unit); it was not checked here",
                        s.name
                    )),
                    _ => {}
                }
            }
            if let Some(lost) = s
                .scheme
                .provider()
                .recovery
                .as_ref()
                .and_then(|r| r.unrecovered)
                && s.recover.is_none()
                && !postgres
            {
                out.push(format!(
                    "source {:?}: {lost}; a recover table asks for it (README, \"Recovering \
                     what was missed\")",
                    s.name
                ));
            }
            if let Some(scheme::Horizon { within, why }) = s.scheme.verifier().redelivery()
                && s.keep_identity < within
            {
                out.push(format!(
                    "source {:?}: keep_identity {} is shorter than {why}; a redelivery after \
                         that would be stored and forwarded again as a new event",
                    s.name,
                    humantime::format_duration(s.keep_identity)
                ));
            }
            let pinned = s.allow_from.iter().flat_map(|a| &a.ranges);
            for (range, proxy) in pinned.flat_map(|r| {
                self.server
                    .trusted_proxies
                    .iter()
                    .filter(|p| p.overlaps(r))
                    .map(move |p| (r, p))
            }) {
                out.push(format!(
                    "source {:?}: allow_from {range} overlaps server.trusted_proxies {proxy}: \
                     a client there is taken for a proxy, so what it sends itself is refused \
                     (403) and what its X-Forwarded-For says is believed; keep \
                     trusted_proxies to the proxies' own addresses",
                    s.name
                ));
            }
            for t in &s.targets {
                for w in t.destination.warnings() {
                    out.push(format!("source {:?} target {:?}: {w}", s.name, t.name));
                }
            }
            if let Some(hole) = replay_hole(&s.scheme) {
                out.push(format!("source {:?}: {hole}", s.name));
            }
            for caveat in s.scheme.verifier().caveats() {
                out.push(format!("source {:?}: {caveat}", s.name));
            }
        }
        for t in &self.alerts {
            for w in t.destination.warnings() {
                out.push(format!("alert target {:?}: {w}", t.name));
            }
        }
        if self.sources.is_empty() {
            out.push(format!(
                "{} has no [[sources]]: hookinbox receives nothing until one is added. Add a \
                 table like the commented example in the packaged config (name, scheme, \
                 secrets, and a [[sources.targets]] to forward to), then `hookinbox check` \
                 again and `systemctl reload hookinbox`",
                self.path.display()
            ));
        }
        if UNIT_PATHS.iter().any(|u| Path::new(u).exists())
            && !self.store.path.starts_with(STATE_DIRECTORY)
        {
            out.push(format!(
                "store.path {} is outside {STATE_DIRECTORY}: under the packaged unit \
                 (ProtectSystem=strict) only that directory is writable; add \
                 ReadWritePaths={} with `systemctl edit hookinbox`",
                self.store.path.display(),
                self.store.path.parent().unwrap_or(Path::new("/")).display()
            ));
        }
        // The packaged unit has no capabilities: it cannot bind a privileged port itself.
        // With hookinbox.socket enabled systemd binds the listeners and serve does not, so
        // there is nothing to say about their addresses here.
        if UNIT_PATHS.iter().any(|u| Path::new(u).exists()) && !Path::new(SOCKET_ENABLED).exists() {
            let unprivileged = std::fs::read_to_string(UNPRIVILEGED_PORT_START)
                .ok()
                .and_then(|s| s.trim().parse::<u16>().ok())
                .unwrap_or(1024);
            for (key, addr) in [
                ("server.listen", self.server.listen),
                ("admin.listen", self.admin.listen),
            ] {
                if addr.port() != 0 && addr.port() < unprivileged {
                    out.push(format!(
                        "{key} {addr}: the packaged unit has no capability to bind a port below \
                         {unprivileged}; enable hookinbox.socket, which binds it and passes it \
                         to the service (`systemctl enable --now hookinbox.socket hookinbox`)"
                    ));
                }
            }
        }
        if let Some(tls) = &self.server.tls {
            out.extend(certificate_warnings(&tls.cert, crate::clock::unix_now()));
        }
        if !self.admin.listen.ip().is_loopback() {
            out.push(format!(
                "admin.listen {} is not a loopback address; /metrics, /readyz and the web inbox \
                 (every stored body) should not be public: browse it through an SSH tunnel \
                 (ssh -L 9180:127.0.0.1:9180 vm) or a proxy that authenticates",
                self.admin.listen
            ));
            if self.admin.actions {
                out.push(
                    "admin.actions = true on a listener that is not loopback: anyone who reaches \
                     it can replay deliveries and pause targets"
                        .into(),
                );
            }
        }
        out
    }

    /// What `serve` would only find out at run time, and `check` reports as errors (exit
    /// 3): a target that cannot work, as its kind tells (`Destination::problem`: a command
    /// whose program is missing or not executable, whose deliveries would be retried for a
    /// day before they die), and an inbox in a directory that this
    /// user cannot write, nor, for the file the packaged unit serves ([`SYSTEM_PATH`]) when
    /// run as root, the service user. `serve` logs them at
    /// start-up and on reload and goes on receiving: a delivery target must never stop the
    /// receiving, and an unwritable inbox fails the start with its own error.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        for s in &self.sources {
            for t in &s.targets {
                if let Err(e) = t.destination.problem() {
                    out.push(format!("source {:?} target {:?}: {e}", s.name, t.name));
                }
            }
        }
        for t in &self.alerts {
            if let Err(e) = t.destination.problem() {
                out.push(format!("alert target {:?}: {e}", t.name));
            }
        }
        // The unit's user matters only for the file the unit serves: a quick start run as
        // root elsewhere is served by root.
        let for_the_unit = self.path == Path::new(SYSTEM_PATH);
        if let Err(e) = store_problem(&self.store.path, for_the_unit) {
            out.push(e);
        }
        out
    }
}

/// How long before its expiry a served certificate is warned about: Let's Encrypt's
/// certificates are renewed at 30 days left, so 14 means renewal has failed for two weeks.
pub const CERTIFICATE_WARNING_DAYS: i64 = 14;

/// A certificate that providers will refuse, or soon will.
fn certificate_warnings(path: &Path, now: i64) -> Vec<String> {
    // An unreadable file is validation's error, not a warning.
    let Ok(cert) = super::CertInfo::of_pem_file(path) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let left = cert.not_after - now;
    if left <= CERTIFICATE_WARNING_DAYS * 86_400 {
        out.push(format!(
            "server.tls.cert {}: {}; providers refuse an expired certificate: renew it (the \
             listener reads the files again on `systemctl reload hookinbox`)",
            path.display(),
            cert.expiry_in_words(now)
        ));
    }
    if cert.self_signed {
        out.push(format!(
            "server.tls.cert {} is self-signed: providers that verify certificates (most do) \
             will refuse it; use it for tests, or a certificate from a CA ([server.tls.acme])",
            path.display()
        ));
    }
    out
}

/// Where the packaged unit may be installed, and its state directory.
const UNIT_PATHS: [&str; 3] = [
    "/usr/lib/systemd/system/hookinbox.service",
    "/lib/systemd/system/hookinbox.service",
    "/etc/systemd/system/hookinbox.service",
];
const STATE_DIRECTORY: &str = "/var/lib/hookinbox";
/// The link `systemctl enable hookinbox.socket` makes (its WantedBy=).
const SOCKET_ENABLED: &str = "/etc/systemd/system/sockets.target.wants/hookinbox.socket";
/// The lowest port a process without CAP_NET_BIND_SERVICE may bind (1024 unless changed).
const UNPRIVILEGED_PORT_START: &str = "/proc/sys/net/ipv4/ip_unprivileged_port_start";
/// The user the packaged unit runs as.
const SERVICE_USER: &str = "hookinbox";

/// Why the inbox at `db` cannot be created or written, if it cannot: its directory (or the
/// nearest one that exists, which `serve` creates the rest under) must be writable, by the
/// service user too when `for_the_unit`.
fn store_problem(db: &Path, for_the_unit: bool) -> Result<(), String> {
    use nix::unistd::{AccessFlags, access};
    let dir = db
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let existing = dir
        .ancestors()
        .find(|a| a.exists())
        .unwrap_or(Path::new("/"));
    if !existing.is_dir() {
        return Err(format!(
            "store.path {}: {} is not a directory",
            db.display(),
            existing.display()
        ));
    }
    let target = if db.exists() { db } else { existing };
    if access(target, AccessFlags::W_OK).is_err() {
        return Err(format!(
            "store.path {}: {} is not writable by this user",
            db.display(),
            target.display()
        ));
    }
    // Root can write anywhere; the packaged service runs as its own user.
    if for_the_unit
        && nix::unistd::geteuid().is_root()
        && let Ok(Some(user)) = nix::unistd::User::from_name(SERVICE_USER)
        && !writable_by(target, &user)
    {
        return Err(format!(
            "store.path {}: {} is not writable by the service user {SERVICE_USER}; chown it \
             or pick a directory it owns (the package's is {STATE_DIRECTORY})",
            db.display(),
            target.display()
        ));
    }
    Ok(())
}

/// Whether `user` may write `path`, by its permission bits (owner, then group, then
/// others), as the kernel decides for a process of that user.
fn writable_by(path: &Path, user: &nix::unistd::User) -> bool {
    use std::ffi::CString;
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    let mode = meta.mode();
    if meta.uid() == user.uid.as_raw() {
        return mode & 0o200 != 0;
    }
    let groups = CString::new(user.name.as_str())
        .ok()
        .and_then(|name| nix::unistd::getgrouplist(&name, user.gid).ok())
        .unwrap_or_else(|| vec![user.gid]);
    if groups.iter().any(|g| g.as_raw() == meta.gid()) {
        return mode & 0o020 != 0;
    }
    mode & 0o002 != 0
}
