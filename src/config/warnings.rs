//! What works but an operator should know about: `check` prints it, `serve` logs it at
//! start-up and on reload.

use std::path::Path;
use std::time::Duration;

use super::*;
use crate::scheme::Kind;

/// How long after an event its provider may still send it again, for `check`'s warning.
fn redelivery_horizon(kind: &Kind) -> Option<(Duration, &'static str)> {
    const DAY: u64 = 86_400;
    Some(match kind {
        Kind::Stripe => (Duration::from_secs(3 * DAY), "Stripe's 3 days of retries"),
        Kind::Github => (
            Duration::from_secs(3 * DAY),
            "the 3 days in which GitHub deliveries can be redelivered by hand",
        ),
        Kind::StandardWebhooks => (
            Duration::from_secs(4 * DAY),
            "the Standard Webhooks retry schedule (up to about 3 days) plus manual resends",
        ),
        Kind::Shopify => (Duration::from_secs(2 * DAY), "Shopify's retries"),
        Kind::Slack => (Duration::from_secs(3600), "Slack's retries"),
        Kind::Gitlab => (
            Duration::from_secs(DAY),
            "GitLab's retries and manual resends",
        ),
        Kind::Hmac(_) => return None,
    })
}

/// Whether others than the owner and group may read `path`.
fn world_readable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o004 != 0)
}

impl Config {
    /// Things that work but that an operator should know about. `check` prints them;
    /// `serve` logs them at start-up.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        for s in &self.sources {
            for (j, origin) in s.secret_origins.iter().enumerate() {
                match origin {
                    Origin::Literal => out.push(format!(
                        "source {:?}: secrets[{j}] is written in the config file; prefer \
                         \"file:/etc/hookinbox/secrets/{}\", \"env:NAME\" or \"credential:NAME\"",
                        s.name, s.name
                    )),
                    Origin::File(path) if world_readable(path) => out.push(format!(
                        "source {:?}: secret file {} is readable by every user; chmod 600 it \
                         (owned by the service user)",
                        s.name,
                        path.display()
                    )),
                    _ => {}
                }
            }
            if let Some((horizon, why)) = redelivery_horizon(s.scheme.kind())
                && s.keep_identity < horizon
            {
                out.push(format!(
                    "source {:?}: keep_identity {} is shorter than {why}; a redelivery after \
                         that would be stored and forwarded again as a new event",
                    s.name,
                    humantime::format_duration(s.keep_identity)
                ));
            }
        }
        if !self.admin.listen.ip().is_loopback() {
            out.push(format!(
                "admin.listen {} is not a loopback address; /metrics and /readyz should not be public",
                self.admin.listen
            ));
        }
        out
    }
}
