//! Secrets: where they come from (`env:`, `file:`, `credential:`, or literally in the
//! config) and a newtype that never prints its contents.

use std::fmt;
use std::path::{Path, PathBuf};

/// A secret's bytes. `Debug` prints `***` and there is no `Display`, so a secret cannot
/// reach a log by accident; the bytes are reachable only through [`Secret::expose`].
///
/// Deliberately not `PartialEq`: a derived `==` compares byte by byte and stops at the first
/// difference, which leaks timing. Compare secret-derived values with `ring::hmac::verify`.
#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl Secret {
    pub fn new(bytes: impl Into<Vec<u8>>) -> Secret {
        Secret(bytes.into())
    }

    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// Where a configured secret was found, so that `check` can warn about literals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Provenance {
    Env(String),
    File(PathBuf),
    Credential(String),
    /// Written in the config file itself.
    Literal,
    /// A `credential:` that `check` could not read because it runs outside systemd: it is
    /// read from `$CREDENTIALS_DIRECTORY` when systemd starts the service.
    Deferred(String),
    /// Not loaded because the command does not need it (`sign` for another source).
    NotLoaded,
}

/// What stands in for a secret that was not loaded ([`Provenance::Deferred`],
/// [`Provenance::NotLoaded`]): valid for every scheme's key preparation (a `whsec_` secret
/// must be base64), and never used to verify or sign anything, since only `check` and
/// `sign` load a configuration that way and neither serves.
pub fn placeholder() -> Secret {
    Secret::new("whsec_aG9va2luYm94LW5vdC1sb2FkZWQ=")
}

/// Resolves one secret reference. `credentials_dir` is systemd's `$CREDENTIALS_DIRECTORY`.
/// Errors name the reference and the fix; they never contain the secret.
pub fn resolve(
    reference: &str,
    credentials_dir: Option<&Path>,
) -> Result<(Secret, Provenance), String> {
    if let Some(name) = reference.strip_prefix("env:") {
        let value = std::env::var_os(name).ok_or_else(|| {
            format!(
                "environment variable {name} is not set (export it, or use file: or credential:)"
            )
        })?;
        let value = value
            .into_string()
            .map_err(|_| format!("environment variable {name} is not valid UTF-8"))?;
        non_empty(Secret::new(value), reference).map(|s| (s, Provenance::Env(name.to_owned())))
    } else if let Some(path) = reference.strip_prefix("file:") {
        let path = PathBuf::from(path);
        let secret = read_secret_file(&path)?;
        non_empty(secret, reference).map(|s| (s, Provenance::File(path)))
    } else if let Some(name) = reference.strip_prefix("credential:") {
        let dir = credentials_dir.ok_or_else(|| {
            format!(
                "{reference}: $CREDENTIALS_DIRECTORY is not set; credential: secrets come from \
                 systemd's LoadCredential=, so run under systemd or use file: instead"
            )
        })?;
        if name.is_empty() || name.contains('/') {
            return Err(format!(
                "{reference}: a credential name is a plain file name"
            ));
        }
        let secret = read_secret_file(&dir.join(name))?;
        non_empty(secret, reference).map(|s| (s, Provenance::Credential(name.to_owned())))
    } else {
        non_empty(Secret::new(reference), "a literal secret").map(|s| (s, Provenance::Literal))
    }
}

/// Whether others than the owner and group may read `path`: a secret file (or a key)
/// should be readable by root and the service's group only.
pub fn world_readable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o004 != 0)
}

/// Reads a secret file, dropping one trailing newline (editors and `echo` add it).
fn read_secret_file(path: &Path) -> Result<Secret, String> {
    let mut bytes = std::fs::read(path)
        .map_err(|e| format!("cannot read secret file {}: {e}", path.display()))?;
    if bytes.last() == Some(&b'\n') {
        bytes.pop();
        if bytes.last() == Some(&b'\r') {
            bytes.pop();
        }
    }
    Ok(Secret::new(bytes))
}

fn non_empty(secret: Secret, what: &str) -> Result<Secret, String> {
    if secret.expose().is_empty() {
        Err(format!("{what} is empty"))
    } else {
        Ok(secret)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fails to compile if someone derives `PartialEq` again: an inherent constant of
    /// `Probe<T>` exists only when `T: PartialEq`, and wins over the trait's default.
    #[test]
    fn secrets_have_no_equality() {
        struct Probe<T>(std::marker::PhantomData<T>);
        trait Fallback {
            const COMPARABLE: bool = false;
        }
        impl<T> Fallback for Probe<T> {}
        #[allow(dead_code)]
        impl<T: PartialEq> Probe<T> {
            const COMPARABLE: bool = true;
        }
        // Checked when the tests compile: deriving PartialEq breaks the build.
        const _: () = assert!(Probe::<Vec<u8>>::COMPARABLE, "the probe detects PartialEq");
        const _: () = assert!(!Probe::<Secret>::COMPARABLE, "Secret must not be PartialEq");
    }

    #[test]
    fn debug_never_prints_the_secret() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?}"), "***");
    }

    #[test]
    fn file_secret_drops_one_trailing_newline() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s");
        std::fs::write(&p, "abc\n").unwrap();
        let (s, origin) = resolve(&format!("file:{}", p.display()), None).unwrap();
        assert_eq!(s.expose(), b"abc");
        assert_eq!(origin, Provenance::File(p));
    }

    #[test]
    fn credential_needs_the_directory() {
        let err = resolve("credential:stripe", None).unwrap_err();
        assert!(err.contains("CREDENTIALS_DIRECTORY"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("stripe"), "whsec_x").unwrap();
        let (s, _) = resolve("credential:stripe", Some(dir.path())).unwrap();
        assert_eq!(s.expose(), b"whsec_x");
    }

    #[test]
    fn missing_env_names_the_variable() {
        let err = resolve("env:HOOKINBOX_TEST_SURELY_UNSET", None).unwrap_err();
        assert!(err.contains("HOOKINBOX_TEST_SURELY_UNSET"), "{err}");
    }

    #[test]
    fn literal_is_marked() {
        let (s, origin) = resolve("plain", None).unwrap();
        assert_eq!(s.expose(), b"plain");
        assert_eq!(origin, Provenance::Literal);
    }
}
