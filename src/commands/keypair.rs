//! `hookinbox keypair`: a test key pair for a scheme verified with public keys (Discord,
//! SendGrid, Standard Webhooks `v1a`), so that a source can be tried with `hookinbox sign`
//! before the provider is connected. The public half goes in the source's `secrets`; the
//! private half only ever into `sign --signing-key`. A provider signs with its own key: this
//! one is for testing.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context as _;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, Ed25519KeyPair, KeyPair as _};

/// The schemes that verify with a public key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KeyScheme {
    Discord,
    Sendgrid,
    StandardWebhooks,
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
    let rng = SystemRandom::new();
    Ok(match scheme {
        KeyScheme::Discord | KeyScheme::StandardWebhooks => {
            let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng)
                .map_err(|_| anyhow::anyhow!("the system's random source failed"))?;
            let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref())
                .map_err(|_| anyhow::anyhow!("ring made a key it cannot read"))?;
            if scheme == KeyScheme::Discord {
                (
                    hex::encode(pair.public_key().as_ref()),
                    hex::encode(pkcs8.as_ref()),
                )
            } else {
                (
                    crate::scheme::providers::standard_webhooks::public_key(&pair),
                    format!("whsk_{}", STANDARD.encode(pkcs8.as_ref())),
                )
            }
        }
        KeyScheme::Sendgrid => {
            let alg = &signature::ECDSA_P256_SHA256_ASN1_SIGNING;
            let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng)
                .map_err(|_| anyhow::anyhow!("the system's random source failed"))?;
            let pair = EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng)
                .map_err(|_| anyhow::anyhow!("ring made a key it cannot read"))?;
            let spki = crate::scheme::providers::sendgrid::spki(pair.public_key().as_ref());
            (STANDARD.encode(spki), STANDARD.encode(pkcs8.as_ref()))
        }
    })
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
