//! `hookinbox sign`: prints a correctly signed request for one source, as its provider
//! would send it, so that an operator can test the whole path without the provider.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::Path;

use anyhow::Context as _;

use crate::clock;
use crate::config::Config;
use crate::receive::HOOKS_PREFIX;

/// How to print the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A `curl` command line that sends it to this config's listener.
    Curl,
    /// Only the headers, one `Name: value` per line.
    Headers,
}

/// The body sent when none is given: carries the id where schemes read it from the body
/// (Stripe `/id`, Slack `/event_id`).
pub fn demo_body(id: &str) -> Vec<u8> {
    format!(
        r#"{{"id":"{id}","event_id":"{id}","type":"hookinbox.test","data":{{"hello":"world"}}}}"#
    )
    .into_bytes()
}

/// Writes the signed request for `source`. `body` is a file path, `-` for stdin, or `None`
/// for [`demo_body`].
pub fn run(
    config: &Config,
    source: &str,
    body: Option<&Path>,
    id: Option<String>,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let Some(src) = config.source(source) else {
        let names: Vec<&str> = config.sources.iter().map(|s| s.name.as_str()).collect();
        anyhow::bail!(
            "no source {source:?} in {}; configured: {}",
            config.path.display(),
            names.join(", ")
        );
    };
    let id = id.unwrap_or_else(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        format!("test_{nanos}")
    });
    let body = match body {
        None => demo_body(&id),
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
    let headers = src.scheme.sign(&body, &id, clock::unix_now());
    match format {
        Format::Headers => {
            for (name, value) in &headers {
                writeln!(out, "{name}: {}", value.to_str().unwrap_or("?"))?;
            }
        }
        Format::Curl => {
            let url = format!(
                "http://{}{HOOKS_PREFIX}{source}",
                reachable(config.server.listen)
            );
            write!(
                out,
                "curl -sS -i -X POST {} \\\n  -H 'Content-Type: application/json'",
                quote(&url)
            )?;
            for (name, value) in &headers {
                write!(
                    out,
                    " \\\n  -H {}",
                    quote(&format!("{name}: {}", value.to_str().unwrap_or("?")))
                )?;
            }
            match std::str::from_utf8(&body) {
                Ok(text) => writeln!(out, " \\\n  --data-binary {}", quote(text))?,
                Err(_) => writeln!(
                    out,
                    " \\\n  --data-binary @BODY_FILE   # the body is binary: pass the file you signed"
                )?,
            }
        }
    }
    Ok(())
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
