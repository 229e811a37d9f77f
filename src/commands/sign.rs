//! `hookinbox sign`: prints a correctly signed request for one source, as its provider
//! would send it, so that an operator can test the whole path without the provider.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::config::Config;
use crate::receive::HOOKS_PREFIX;
use crate::scheme::Draft;
use crate::{clock, secret};

/// How to print the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A `curl` command line that sends it to this config's listener.
    Curl,
    /// Only the headers, one `Name: value` per line.
    Headers,
    /// One JSON object: method, path, query, headers and body (text, or base64 in
    /// `body_base64` when it is not UTF-8), for scripts.
    Json,
}

/// `hookinbox sign`'s arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The configured source to sign for
    #[arg(long, value_name = "NAME")]
    pub source: String,
    /// The body to sign: a file, or - for stdin [default: a small test event in the
    /// provider's shape]
    #[arg(long, value_name = "FILE")]
    pub body: Option<PathBuf>,
    /// The event id, for schemes that carry it in a header [default: test_<unix nanoseconds>]
    #[arg(long)]
    pub id: Option<String>,
    /// Print the provider's handshake (a challenge, a ping, a subscription check) instead of
    /// an event
    #[arg(long)]
    pub handshake: bool,
    /// The private key, for schemes verified with public keys (Discord, SendGrid, Standard
    /// Webhooks v1a): a file:, env: or credential: reference, or the key itself
    #[arg(long, value_name = "KEY")]
    pub signing_key: Option<String>,
    /// What to print
    #[arg(long, value_enum, default_value_t = Format::Curl)]
    pub format: Format,
}

/// Writes the signed request for `args.source`.
pub fn run(config: &Config, args: &Args, out: &mut impl Write) -> anyhow::Result<()> {
    let source = args.source.as_str();
    let Some(src) = config.source(source) else {
        let names: Vec<&str> = config.sources.iter().map(|s| s.name.as_str()).collect();
        anyhow::bail!(
            "no source {source:?} in {}; configured: {}",
            config.path.display(),
            names.join(", ")
        );
    };
    let verifier = src.scheme.verifier();
    let signing_key = match &args.signing_key {
        Some(reference) => Some(
            secret::resolve(reference, None)
                .map(|(s, _)| s)
                .map_err(|e| anyhow::anyhow!("--signing-key: {e}"))?,
        ),
        None if verifier.needs_signing_key() => anyhow::bail!(
            "source {source:?} (scheme {}) verifies signatures with a public key, so signing \
             needs the private key: --signing-key file:/path/to/key (docs/providers.md shows \
             how to make a test key pair)",
            src.scheme.name()
        ),
        // A secret learnt from a handshake is in the inbox, not the config.
        None if src.scheme.provider().learns_secret => learnt_secret(&config.store, source)?,
        None => None,
    };
    let id = args.id.clone().unwrap_or_else(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        format!("test_{nanos}")
    });
    let body = match args.body.as_deref() {
        None => src.scheme.demo_body(&id, clock::unix_now()),
        Some(p) if p == Path::new("-") => {
            let mut b = Vec::new();
            std::io::stdin()
                .read_to_end(&mut b)
                .context("reading the body from stdin")?;
            b
        }
        Some(p) => {
            std::fs::read(p).with_context(|| format!("reading the body from {}", p.display()))?
        }
    };
    let path = format!("{HOOKS_PREFIX}{source}");
    let draft = Draft {
        body: &body,
        id: &id,
        now: clock::unix_now(),
        path: &path,
        signing_key: signing_key.as_ref(),
    };
    let sample = if args.handshake {
        verifier.sign_handshake(&draft).ok_or_else(|| {
            anyhow::anyhow!(
                "scheme {} has no handshake; sign without --handshake for an event",
                src.scheme.name()
            )
        })?
    } else {
        src.scheme.sign(&draft)
    };
    match args.format {
        Format::Json => {
            let headers: Vec<(&str, &str)> = sample
                .headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.to_str().unwrap_or("?")))
                .collect();
            let mut json = serde_json::json!({
                "method": sample.method.as_str(),
                "path": path,
                "query": sample.query,
                "headers": headers,
            });
            match std::str::from_utf8(&sample.body) {
                Ok(text) => json["body"] = text.into(),
                Err(_) => {
                    use base64::Engine as _;
                    json["body_base64"] = base64::engine::general_purpose::STANDARD
                        .encode(&sample.body)
                        .into();
                }
            }
            writeln!(out, "{json}")?;
        }
        Format::Headers => {
            for (name, value) in &sample.headers {
                writeln!(out, "{name}: {}", value.to_str().unwrap_or("?"))?;
            }
        }
        Format::Curl => {
            let (base, reach) = listener_url(config)?;
            let mut url = format!("{base}{path}");
            if let Some(q) = &sample.query {
                url.push('?');
                url.push_str(q);
            }
            if reach.iter().any(|o| o == "--insecure") {
                writeln!(
                    out,
                    "# {} names neither a host nor this address: curl cannot check it",
                    config
                        .server
                        .tls
                        .as_ref()
                        .map_or(String::new(), |t| t.cert.display().to_string())
                )?;
            }
            write!(out, "curl -sS -i -X {} {}", sample.method, quote(&url))?;
            for option in reach {
                write!(out, " \\\n  {option}")?;
            }
            let has_type = sample
                .headers
                .iter()
                .any(|(n, _)| *n == hyper::header::CONTENT_TYPE);
            if !has_type && !sample.body.is_empty() {
                write!(out, " \\\n  -H 'Content-Type: application/json'")?;
            }
            for (name, value) in &sample.headers {
                write!(
                    out,
                    " \\\n  -H {}",
                    quote(&format!("{name}: {}", value.to_str().unwrap_or("?")))
                )?;
            }
            if sample.method == hyper::http::Method::HEAD {
                // curl -X HEAD would wait for a body that never comes.
                writeln!(out, " \\\n  --head")?;
            } else if sample.body.is_empty() {
                writeln!(out)?;
            } else {
                match std::str::from_utf8(&sample.body) {
                    Ok(text) => writeln!(out, " \\\n  --data-binary {}", quote(text))?,
                    Err(_) => writeln!(
                        out,
                        " \\\n  --data-binary @BODY_FILE   # the body is binary: pass the file you signed"
                    )?,
                }
            }
        }
    }
    Ok(())
}

/// The secret `source` learnt from its handshake, if the inbox holds one.
fn learnt_secret(
    store: &crate::config::StoreSettings,
    source: &str,
) -> anyhow::Result<Option<crate::secret::Secret>> {
    let inbox = crate::store::Location::of(store);
    if inbox.missing() {
        return Ok(None);
    }
    let conn = inbox.read()?;
    let secret = crate::store::learnt::all(conn.db())?
        .into_iter()
        .find(|(s, _)| s == source)
        .map(|(_, secret)| crate::secret::Secret::new(secret));
    Ok(secret)
}

/// The base URL of the public listener as a client on this machine reaches it, and the
/// curl options that takes. With TLS, the URL names what the certificate covers, and
/// `--resolve` sends it to the local listener, so that curl checks the certificate as a
/// provider would; a self-signed one is trusted with `--cacert`, one that names neither a
/// host nor this address only with `--insecure`.
fn listener_url(config: &Config) -> anyhow::Result<(String, Vec<String>)> {
    let addr = reachable(config.server.listen);
    let port = addr.port();
    let authority = |host: &str| match port {
        443 => host.to_owned(),
        _ => format!("{host}:{port}"),
    };
    let resolve = |name: &str| {
        let ip = match addr.ip() {
            std::net::IpAddr::V6(v6) => format!("[{v6}]"),
            v4 => v4.to_string(),
        };
        format!("--resolve {}", quote(&format!("{name}:{port}:{ip}")))
    };
    // ACME's certificate names the first domain, and a CA the system trusts signed it.
    if let Some(acme) = &config.server.acme {
        let name = &acme.domains[0];
        return Ok((format!("https://{}", authority(name)), vec![resolve(name)]));
    }
    let Some(tls) = &config.server.tls else {
        return Ok((format!("http://{addr}"), Vec::new()));
    };
    let cert = crate::config::CertInfo::of_pem_file(&tls.cert)
        .map_err(|e| anyhow::anyhow!("server.tls: {e}"))?;
    let mut options = Vec::new();
    let base = match cert.name_to_reach() {
        Some(name) if name.parse::<std::net::IpAddr>().is_err() => {
            options.push(resolve(name));
            format!("https://{}", authority(name))
        }
        Some(ip) if ip.parse::<std::net::IpAddr>().ok() == Some(addr.ip()) => {
            format!("https://{addr}")
        }
        _ => {
            options.push("--insecure".into());
            return Ok((format!("https://{addr}"), options));
        }
    };
    if cert.self_signed {
        options.push(format!(
            "--cacert {}",
            quote(&tls.cert.display().to_string())
        ));
    }
    Ok((base, options))
}

/// The address to reach a listener at: a wildcard bind is reached on loopback.
fn reachable(listen: SocketAddr) -> SocketAddr {
    let mut addr = listen;
    if addr.ip().is_unspecified() {
        addr.set_ip(if addr.is_ipv4() {
            std::net::Ipv4Addr::LOCALHOST.into()
        } else {
            std::net::Ipv6Addr::LOCALHOST.into()
        });
    }
    addr
}

/// POSIX shell single quotes: safe for any text.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_quotes() {
        assert_eq!(quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn wildcard_listen_is_reached_on_loopback() {
        assert_eq!(
            reachable("0.0.0.0:8080".parse().unwrap()).to_string(),
            "127.0.0.1:8080"
        );
        assert_eq!(
            reachable("[::]:8080".parse().unwrap()).to_string(),
            "[::1]:8080"
        );
    }
}
