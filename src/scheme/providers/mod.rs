//! The catalogue: one module per provider, each exporting a `PROVIDER`, listed once below.
//!
//! To add a provider, write `providers/<name>.rs` with a `PROVIDER` whose `build` reads its
//! settings from the [`Setup`] and returns its [`Verifier`] (most HMAC providers are an
//! [`crate::scheme::hmac::Spec`] and a [`crate::scheme::hmac::Preset`]: see `paddle.rs`),
//! then add its module name to the list. A provider verified with public keys, one that
//! learns its secret in a handshake, or one with a recovery API declares it on its
//! `PROVIDER` (see `discord.rs`, `asana.rs`, `github.rs`). Its tests go beside it, with the
//! provider's published vector where there is one; `tests/it/providers.rs` drives it over
//! HTTP, from its section of `docs/providers.md`, which with the README's scheme table
//! must name it.
//!
//! Invariant: what the rest of hookinbox knows about one provider, it learns from the
//! provider's own file: what its verifier answers (a signed timestamp, a body the proof
//! covers, caveats, a redelivery horizon) and what its `PROVIDER` declares before any source
//! is configured (public keys and how to make a test pair, a secret learnt in a handshake, a
//! recovery API). Nothing outside this directory asks for a provider by its name.

use super::{Setup, Verifier};

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
