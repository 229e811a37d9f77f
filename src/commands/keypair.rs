//! `hookinbox keypair`: a test key pair for a scheme verified with public keys (Discord,
//! SendGrid, Standard Webhooks `v1a`: every provider that declares [`PublicKeys`]), so that
//! a source can be tried with `hookinbox sign` before the provider is connected. The public
//! half goes in the source's `secrets`; the private half only ever into `sign
//! --signing-key`. A provider signs with its own key: this one is for testing.

use std::io::Write;
use std::path::PathBuf;
use std::sync::LazyLock;

use anyhow::Context as _;

use crate::scheme::providers::{self, Provider, PublicKeys};

/// A scheme verified with public keys: one whose provider declares how to make a test pair.
#[derive(Clone, Copy)]
pub struct KeyScheme(&'static Provider);

/// Every [`KeyScheme`], sorted by name, as `--help` lists them.
static KEY_SCHEMES: LazyLock<Vec<KeyScheme>> = LazyLock::new(|| {
    providers::names_with(|p| p.public_keys.is_some())
        .into_iter()
        .filter_map(KeyScheme::named)
        .collect()
});

impl KeyScheme {
    /// The scheme called `name`, if it is verified with public keys.
    pub fn named(name: &str) -> Option<KeyScheme> {
        providers::find(name)
            .filter(|p| p.public_keys.is_some())
            .map(KeyScheme)
    }

    fn keys(self) -> &'static PublicKeys {
        self.0
            .public_keys
            .as_ref()
            .expect("a KeyScheme is made only of a provider with public keys")
    }
}

impl std::fmt::Debug for KeyScheme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.name)
    }
}

impl clap::ValueEnum for KeyScheme {
    fn value_variants<'a>() -> &'a [Self] {
        &KEY_SCHEMES
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.0.name))
    }
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The scheme to make a key pair for
    #[arg(long, value_enum)]
    pub scheme: KeyScheme,
    /// Write PREFIX.pub (the secret for the config) and PREFIX.key (mode 600, for
    /// --signing-key) instead of printing both; refused if either exists
    #[arg(long, value_name = "PREFIX")]
    pub out: Option<PathBuf>,
}

/// The public key as the source's `secrets` takes it, and the private key as
/// `sign --signing-key` takes it.
pub fn generate(scheme: KeyScheme) -> anyhow::Result<(String, String)> {
    let pair = (scheme.keys().test_pair)().map_err(anyhow::Error::msg)?;
    Ok((pair.public, pair.private))
}

pub fn run(args: &Args, out: &mut impl Write) -> anyhow::Result<()> {
    let (public, private) = generate(args.scheme)?;
    match &args.out {
        None => {
            writeln!(out, "secret       {public}")?;
            writeln!(out, "signing key  {private}")?;
            writeln!(
                out,
                "# the secret goes in the source's secrets; the signing key only into \
                 `hookinbox sign --signing-key`"
            )?;
        }
        Some(prefix) => {
            use std::os::unix::fs::OpenOptionsExt;
            let with = |ext: &str| {
                let mut p = prefix.clone().into_os_string();
                p.push(ext);
                PathBuf::from(p)
            };
            let (pub_path, key_path) = (with(".pub"), with(".key"));
            // Both files are created before either is written, and neither replaces a file:
            // a pair half overwritten (a new public key beside the old private one) signs
            // requests its source then refuses.
            let create = |path: &PathBuf, mode: u32| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(mode)
                    .open(path)
                    .map_err(|e| {
                        let why = if e.kind() == std::io::ErrorKind::AlreadyExists {
                            "keypair never replaces a key; choose another --out or remove the \
                             old pair first"
                        } else {
                            "is --out's directory there and writable?"
                        };
                        anyhow::anyhow!("creating {}: {e}; {why}", path.display())
                    })
            };
            let mut key_file = create(&key_path, 0o600)?;
            let mut pub_file = match create(&pub_path, 0o644) {
                Ok(f) => f,
                Err(e) => {
                    // Created empty a moment ago by this command; nothing of the user's.
                    let _ = std::fs::remove_file(&key_path);
                    return Err(e);
                }
            };
            writeln!(key_file, "{private}")
                .with_context(|| format!("writing {}", key_path.display()))?;
            writeln!(pub_file, "{public}")
                .with_context(|| format!("writing {}", pub_path.display()))?;
            writeln!(
                out,
                "wrote {} (the source's secret) and {} (for --signing-key file:{})",
                pub_path.display(),
                key_path.display(),
                key_path.display()
            )?;
        }
    }
    Ok(())
}
