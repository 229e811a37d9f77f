//! `token`: a shared secret sent as it is in a header the source names
//! (`token = { header = "X-Telegram-Bot-Api-Secret-Token" }`, optionally with a `prefix`
//! like `"Bearer "`), compared in constant time. Nothing is signed: see `scheme::token`.
//! There is no default event id: the source sets `id_header`, `id_pointer` or `id`.

use serde::Deserialize;

use crate::scheme::hmac::Preset;
use crate::scheme::token::{Token, TokenCheck, TokenSpec};
use crate::scheme::{Setup, Verifier};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Settings {
    token: Option<TokenSpec>,
}

pub const PROVIDER: super::Provider = super::Provider::new("token", build);

fn build(setup: &mut Setup) -> Result<Box<dyn Verifier>, String> {
    let settings: Settings = setup.settings()?;
    let spec = settings.token.ok_or_else(|| {
        format!(
            "{}: scheme \"token\" needs a token table naming the header, like token = {{ header \
             = \"X-Webhook-Token\" }}",
            setup.at()
        )
    })?;
    let check = TokenCheck::new(setup, spec.carrier(setup.at())?)?;
    Ok(Box::new(Token::new(check, Preset::default())))
}
