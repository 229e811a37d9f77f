//! `hookinbox show-cert`: the certificate the public listener serves, from the files it
//! names or the one ACME obtained and the inbox keeps: its names, issuer, expiry and source.

use std::io::Write;
use std::time::{Duration, UNIX_EPOCH};

use crate::acme::{Kept, Rows};
use crate::config::{CertInfo, Config};
use crate::store::{self, Location};

pub fn run(config: &Config, out: &mut impl Write) -> anyhow::Result<()> {
    let (source, info) = match (&config.server.tls, &config.server.acme) {
        (Some(files), _) => (
            format!("files ({})", files.cert.display()),
            CertInfo::of_pem_file(&files.cert).map_err(anyhow::Error::msg)?,
        ),
        (None, Some(acme)) => {
            let source = format!("acme ({})", acme.directory);
            let inbox = Location::of(&config.store);
            let kept = if inbox.missing() {
                None
            } else {
                let conn = inbox.read()?;
                store::kept::get(conn.db(), &Rows::of(acme).certificate)?
            };
            let Some(kept) = kept else {
                writeln!(
                    out,
                    "source: {source}\nno certificate obtained yet for {}: serve orders one \
                     (its /readyz says how it goes)",
                    acme.domains.join(", ")
                )?;
                return Ok(());
            };
            let kept: Kept = serde_json::from_str(&kept.value)?;
            (source, kept.leaf().map_err(anyhow::Error::msg)?)
        }
        (None, None) => anyhow::bail!(
            "the public listener has no TLS (server.tls is not set): it speaks plain HTTP"
        ),
    };
    let at = |unix: i64| {
        humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(unix.max(0) as u64))
    };
    let left = info.not_after - crate::clock::unix_now();
    let left = if left > 0 {
        format!(
            "in {}",
            humantime::format_duration(Duration::from_secs(left as u64))
        )
    } else {
        "expired".to_owned()
    };
    writeln!(out, "source: {source}")?;
    writeln!(
        out,
        "names: {}",
        crate::terminal::escape(&info.names.join(", "))
    )?;
    writeln!(out, "issuer: {}", crate::terminal::escape(&info.issuer))?;
    writeln!(out, "not before: {}", at(info.not_before))?;
    writeln!(out, "not after: {} ({left})", at(info.not_after))?;
    writeln!(out, "serial: {}", info.serial)?;
    Ok(())
}
