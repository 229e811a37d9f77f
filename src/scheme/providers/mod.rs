//! The catalogue: one module per provider, each exporting a `PROVIDER`, listed once below.
//!
//! To add a provider, write `providers/<name>.rs` with a `PROVIDER` whose `build` reads its
//! settings from the [`Setup`] and returns its [`Verifier`] (most HMAC providers are an
//! [`crate::scheme::hmac::Spec`] and a [`crate::scheme::hmac::Preset`]: see `paddle.rs`),
//! then add its module name to the list. A provider verified with public keys, one that
//! learns its secret in a handshake, one with a recovery API, or one that publishes the
//! addresses it sends from declares it on its `PROVIDER` (see `discord.rs`, `asana.rs`,
//! `github.rs`). Its tests go beside it, with the
//! provider's published vector where there is one; `tests/it/providers.rs` drives it over
//! HTTP, from its section of `docs/providers.md`, which with the README's scheme table
//! must name it.
//!
//! Invariant: what the rest of hookinbox knows about one provider, it learns from the
//! provider's own file: what its verifier answers (a signed timestamp, a body the proof
//! covers, caveats, a redelivery horizon) and what its `PROVIDER` declares before any source
//! is configured (public keys and how to make a test pair, a secret learnt in a handshake, a
//! recovery API, a published list of its addresses). Nothing outside this directory asks
//! for a provider by its name.

use super::{Setup, Verifier};
use crate::proxy::Cidr;

/// A provider as the registry knows it.
pub struct Provider {
    /// The `scheme` value in configuration files.
    pub name: &'static str,
    /// Reads the source's settings, prepares its keys, and returns its verifier. Errors
    /// name the key and the fix.
    pub build: fn(&mut Setup) -> Result<Box<dyn Verifier>, String>,
    /// Where the provider signs with a private key and a source holds the public half:
    /// which secrets are public keys, and how `hookinbox keypair` makes a test pair.
    pub public_keys: Option<PublicKeys>,
    /// Whether the source's secret is learnt from a handshake (Asana) rather than
    /// configured: `hookinbox arm` opens the window for it, and the receive path keeps it
    /// and hands it over in [`super::Ctx::learnt`].
    pub learns_secret: bool,
    /// The provider's API that `hookinbox recover` fills a source's gaps from.
    pub recovery: Option<Recovery>,
    /// Where the provider publishes the addresses its webhooks come from, for a source's
    /// `allow_from` (`src/receive/allow.rs` fetches and keeps it).
    pub addresses: Option<Addresses>,
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Provider").field(&self.name).finish()
    }
}

impl Provider {
    /// A provider whose secrets are shared and configured, with no recovery API: most of
    /// them. Others set their capabilities over it (`..Provider::new(name, build)`).
    pub const fn new(
        name: &'static str,
        build: fn(&mut Setup) -> Result<Box<dyn Verifier>, String>,
    ) -> Provider {
        Provider {
            name,
            build,
            public_keys: None,
            learns_secret: false,
            recovery: None,
            addresses: None,
        }
    }
}

/// How a provider verified with public keys keeps them.
pub struct PublicKeys {
    /// The prefix that marks a secret as a public key, where the scheme also takes shared
    /// secrets (Standard Webhooks' `whpk_` beside `whsec_`); `None`: every secret is one.
    pub prefix: Option<&'static str>,
    /// A new key pair, to try a source before the provider is connected.
    pub test_pair: fn() -> Result<KeyPair, String>,
}

impl PublicKeys {
    /// Whether `secret` (a configured secret's text) is a public key, which anyone may
    /// read. `secret` is called only where the prefix decides.
    pub fn is_public_key(&self, secret: impl FnOnce() -> Option<Vec<u8>>) -> bool {
        match self.prefix {
            None => true,
            Some(prefix) => secret().is_some_and(|s| s.trim_ascii().starts_with(prefix.as_bytes())),
        }
    }
}

/// A test key pair, as text.
pub struct KeyPair {
    /// As the source's `secrets` take it.
    pub public: String,
    /// As `hookinbox sign --signing-key` takes it; never in the configuration.
    pub private: String,
}

/// A provider API that lists what the provider sent, so that the inbox's gaps can be
/// filled (`src/recover/`).
pub struct Recovery {
    /// Which client speaks it, and so which keys the source's `recover` table takes.
    pub api: RecoveryApi,
    /// The API's base URL where the `recover` table sets no `api_url`.
    pub url: &'static str,
    /// What a source without a `recover` table loses, where the provider never sends an
    /// event again by itself: `check` names it.
    pub unrecovered: Option<&'static str>,
}

/// A list of the addresses a provider sends its webhooks from, as the provider publishes
/// it: a source whose `allow_from` names the provider takes requests only from them.
pub struct Addresses {
    /// The document's URL, where `[server] allow_lists` names no other.
    pub url: &'static str,
    /// What the list is, for `check`: "the `hooks` ranges of GitHub's meta API".
    pub what: &'static str,
    /// The ranges in the document. An error says what is not as the provider documents it.
    pub parse: fn(&[u8]) -> Result<Vec<Cidr>, String>,
}

/// The ranges in `body`, a JSON object whose member at `path` (`["egress", "all"]`: the
/// member `all` of the member `egress`) is an array of addresses or ranges as text: the
/// shape GitHub's, Stripe's and Zendesk's lists share.
pub fn ranges_at(body: &[u8], path: &[&str]) -> Result<Vec<Cidr>, String> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let field = path.join(".");
    let Some(items) = path
        .iter()
        .try_fold(&value, |v, name| v.get(name))
        .and_then(|v| v.as_array())
    else {
        return Err(format!("no array {field:?} in it"));
    };
    items
        .iter()
        .map(|item| {
            let text = item
                .as_str()
                .ok_or_else(|| format!("{field:?} holds {item}, not text"))?;
            Cidr::parse(text).map_err(|e| format!("{field:?}: {e}"))
        })
        .collect()
}

/// The recovery APIs hookinbox has a client for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecoveryApi {
    /// A GitHub hook's deliveries, redelivered on request (`src/recover/github.rs`).
    GitHubDeliveries,
    /// Stripe's List Events, fetched and stored (`src/recover/stripe.rs`).
    StripeEvents,
}

macro_rules! catalogue {
    ($($module:ident),* $(,)?) => {
        $(pub mod $module;)*
        /// Every provider, in the order `--help` and the docs list them.
        pub static PROVIDERS: &[&Provider] = &[$(&$module::PROVIDER),*];
    };
}

catalogue![
    standard_webhooks,
    stripe,
    github,
    shopify,
    slack,
    gitlab,
    twilio,
    square,
    hubspot,
    paddle,
    calendly,
    zendesk,
    twitch,
    zoom,
    discord,
    sendgrid,
    meta,
    dropbox,
    woocommerce,
    mailgun,
    postmark,
    okta,
    intercom,
    linear,
    typeform,
    microsoft_graph,
    asana,
    sns,
    hmac,
    token,
    basic,
];

/// The provider called `name` in configuration files.
pub fn find(name: &str) -> Option<&'static Provider> {
    PROVIDERS.iter().copied().find(|p| p.name == name)
}

/// Every scheme name, for messages.
pub fn names() -> Vec<&'static str> {
    PROVIDERS.iter().map(|p| p.name).collect()
}

/// The names of the schemes whose provider `has` a capability, sorted, as messages and
/// `--help` list them.
pub fn names_with(has: impl Fn(&Provider) -> bool) -> Vec<&'static str> {
    let mut names: Vec<&'static str> = PROVIDERS
        .iter()
        .filter(|p| has(p))
        .map(|p| p.name)
        .collect();
    names.sort_unstable();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_address_lists_are_read_as_their_providers_document_them() {
        let github = find("github").and_then(|p| p.addresses.as_ref()).unwrap();
        // The shape of GET https://api.github.com/meta, cut short.
        let meta = br#"{"verifiable_password_authentication":false,
            "hooks":["192.30.252.0/22","185.199.108.0/22","2a0a:a440::/29"],
            "web":["140.82.112.0/20"]}"#;
        let ranges = (github.parse)(meta).unwrap();
        assert_eq!(ranges.len(), 3);
        assert!(
            ranges
                .iter()
                .any(|r| r.contains("192.30.253.9".parse().unwrap()))
        );
        assert!(
            !ranges
                .iter()
                .any(|r| r.contains("140.82.112.1".parse().unwrap()))
        );
        let stripe = find("stripe").and_then(|p| p.addresses.as_ref()).unwrap();
        let ips = br#"{"WEBHOOKS":["3.18.12.63","3.130.192.231"]}"#;
        assert_eq!((stripe.parse)(ips).unwrap().len(), 2);
        let zendesk = find("zendesk").and_then(|p| p.addresses.as_ref()).unwrap();
        // The shape of GET https://<subdomain>.zendesk.com/ips: where Zendesk connects
        // from (egress), and where its customers connect to (ingress), which must not count.
        let ips = br#"{"ips":{"egress":{"all":["102.16.12.41/32","102.16.90.41/32"],
            "specific":["102.16.12.41/32"]},
            "ingress":{"all":["102.16.41.41/32"],"specific":["104.16.41.41/32"]}}}"#;
        let ranges = (zendesk.parse)(ips).unwrap();
        assert_eq!(ranges.len(), 2);
        // The reference's schema, without the wrapper, is read too.
        let bare = br#"{"egress":{"all":["102.16.12.41/32"]}}"#;
        assert_eq!((zendesk.parse)(bare).unwrap().len(), 1);
        assert!(
            !ranges
                .iter()
                .any(|r| r.contains("102.16.41.41".parse().unwrap()))
        );
        let e = (zendesk.parse)(br#"{"egress":{"specific":[]}}"#).unwrap_err();
        assert!(e.contains("no array \"ips.egress.all\""), "{e}");
        for (bad, why) in [
            (&b"<html>"[..], "not JSON"),
            (br#"{"web":[]}"#, "no array \"hooks\""),
            (br#"{"hooks":[1]}"#, "not text"),
            (br#"{"hooks":["example.com"]}"#, "not an address"),
        ] {
            let e = (github.parse)(bad).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
        assert_eq!(
            names_with(|p| p.addresses.is_some()),
            ["github", "stripe", "zendesk"],
            "README and the reference name the providers with lists"
        );
    }
}
