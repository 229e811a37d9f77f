//! `basic`: HTTP Basic authentication, for providers that call a URL with credentials in it
//! (`https://user:password@host/hooks/NAME`). Each secret is `user:password`, compared in
//! constant time. Nothing is signed: see `scheme::token`. There is no default event id.

use crate::scheme::hmac::Preset;
use crate::scheme::token::{Carrier, Token, TokenCheck};
use crate::scheme::{Setup, Verifier};

pub const PROVIDER: super::Provider = super::Provider::new("basic", build);

fn build(setup: &mut Setup) -> Result<Box<dyn Verifier>, String> {
    let check = TokenCheck::new(setup, Carrier::Basic)?;
    Ok(Box::new(Token::new(check, Preset::default())))
}
