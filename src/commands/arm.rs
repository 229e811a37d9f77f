//! `hookinbox arm`: opens a source's window for a handshake that hands over its secret
//! (Asana's `X-Hook-Secret`). The first such handshake within the window is trusted, its
//! secret stored in the inbox and the window closed; without an open window a handshake is
//! refused 401, so nobody who merely finds the URL can install a secret of their own.

use std::io::Write;
use std::time::Duration;

use anyhow::Context as _;

use crate::config::Offline;
use crate::scheme::providers;
use crate::store::Location;
use crate::{clock, store};

/// The longest window: long enough to create a webhook by hand, short enough to close
/// before anyone else could use it.
pub const MAX_WINDOW: Duration = Duration::from_secs(3600);

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The source (scheme asana) that is about to be connected
    #[arg(long, value_name = "NAME")]
    pub source: String,
    /// How long the window stays open [at most 1h]
    #[arg(long = "for", value_name = "DURATION", default_value = "10m", value_parser = crate::config::parse_duration)]
    pub window: Duration,
}

pub fn run(
    inbox: &Location,
    offline: Option<&Offline>,
    args: &Args,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let Some(offline) = offline else {
        anyhow::bail!("arm needs the config, to check the source's scheme: pass --config");
    };
    let Some(source) = offline.sources.iter().find(|s| s.name == args.source) else {
        let names: Vec<&str> = offline.sources.iter().map(|s| s.name.as_str()).collect();
        anyhow::bail!(
            "no source {:?} in {}; configured: {}",
            args.source,
            offline.path.display(),
            names.join(", ")
        );
    };
    if !providers::find(&source.scheme).is_some_and(|p| p.learns_secret) {
        anyhow::bail!(
            "source {:?} has scheme {:?}, whose secret is in its configuration; arm is for \
             schemes that hand their secret over in a handshake ({})",
            source.name,
            source.scheme,
            providers::names_with(|p| p.learns_secret).join(", ")
        );
    }
    if args.window.is_zero() || args.window > MAX_WINDOW {
        anyhow::bail!("--for must be more than 0 and at most 1h");
    }
    let conn = inbox.write()?;
    let now = clock::unix_now();
    let until = clock::iso_from_unix(now + args.window.as_secs() as i64);
    store::learnt::arm(conn.db(), &source.name, &clock::iso_now(), &until)
        .context("opening the window")?;
    let had = store::learnt::learnt_at(conn.db(), &source.name)?;
    writeln!(
        out,
        "armed source {:?} until {until}: create the webhook now; the first X-Hook-Secret \
         handshake before then is trusted and stored{}",
        source.name,
        match had {
            Some(at) => format!(" (replacing the secret learnt at {at})"),
            None => String::new(),
        }
    )?;
    Ok(())
}
