//! `hmac`: the generic HMAC scheme, for a provider without a preset. Its `hmac` table is a
//! [`Spec`]; `public_url` gives `{url}` in the signed template. There is no default event
//! id: the source sets `id_header`, `id_pointer` or `id`.

use serde::Deserialize;

use crate::scheme::hmac::{Engine, Hmac, NoHooks, Preset, Spec};
use crate::scheme::{Setup, Verifier};

/// The generic `hmac` scheme's settings.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Settings {
    hmac: Option<Spec>,
    public_url: Option<String>,
}

pub const PROVIDER: super::Provider = super::Provider::new("hmac", build);

fn build(setup: &mut Setup) -> Result<Box<dyn Verifier>, String> {
    let settings: Settings = setup.settings()?;
    let spec = settings.hmac.ok_or_else(|| {
        format!(
            "{}: scheme \"hmac\" needs an hmac table, like hmac = {{ header = \"X-Signature\" }}",
            setup.at()
        )
    })?;
    let public_url = settings
        .public_url
        .map(|u| crate::scheme::setup::public_url(setup.at(), &u))
        .transpose()?;
    let engine = Engine::new(setup, &spec, public_url, "hmac")?;
    Ok(Hmac::boxed(engine, Preset::default(), NoHooks))
}

