//! The catalogue: one module per provider, each exporting a `PROVIDER`, listed once below.
//!
//! To add a provider, write `providers/<name>.rs` with a `PROVIDER` whose `build` reads its
//! settings from the [`Setup`] and returns its [`Verifier`] (most HMAC providers are an
//! [`crate::scheme::hmac::Spec`] and a [`crate::scheme::hmac::Preset`]: see `paddle.rs`),
//! then add its module name to the list. Its tests go beside it, with the provider's
//! published vector where there is one; `tests/it/providers.rs` drives it over HTTP.

use super::{Setup, Verifier};

/// A provider as the registry knows it.
pub struct Provider {
    /// The `scheme` value in configuration files.
    pub name: &'static str,
    /// Reads the source's settings, prepares its keys, and returns its verifier. Errors
    /// name the key and the fix.
    pub build: fn(&mut Setup) -> Result<Box<dyn Verifier>, String>,
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
