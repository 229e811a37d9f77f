//! Providers that send a shared secret itself rather than a signature: a token in a header
//! (GitLab's `X-Gitlab-Token`, Okta's `Authorization`, Telegram's
//! `X-Telegram-Bot-Api-Secret-Token`) or HTTP Basic credentials in the URL (Postmark).
//!
//! Nothing is signed: the body is authenticated by TLS alone, there is no timestamp, and a
//! captured request replays until dedup recognises its id. The token is compared in constant
//! time ([`Tokens`]) and never stored or forwarded.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hyper::http::{HeaderName, HeaderValue, Method};
use serde::Deserialize;

use super::hmac::Preset;
use super::keys::Tokens;
use super::{Ctx, Draft, Horizon, IdRule, Input, Reject, Sample, Setup, Verdict, Verifier};

/// Where the secret travels.
#[derive(Debug, Clone)]
pub enum Carrier {
    /// `name: <prefix><token>`.
    Header {
        name: HeaderName,
        label: &'static str,
        prefix: String,
    },
    /// `Authorization: Basic base64(user:password)`; each secret is `user:password`.
    Basic,
}

/// The checked credential of one source.
#[derive(Debug)]
pub struct TokenCheck {
    carrier: Carrier,
    tokens: Tokens,
}

const AUTHORIZATION: &str = "Authorization";

impl TokenCheck {
    pub fn new(setup: &Setup, carrier: Carrier) -> Result<TokenCheck, String> {
        let secrets = setup.secrets()?;
        if let Carrier::Basic = carrier {
            for (j, s) in secrets.iter().enumerate() {
                if !s.expose().contains(&b':') {
                    return Err(format!(
                        "{}.secrets[{j}]: a Basic credential is user:password, as in the URL \
                         https://user:password@host/… you give the provider",
                        setup.at()
                    ));
                }
            }
        }
        Ok(TokenCheck {
            carrier,
            tokens: Tokens::new(&secrets),
        })
    }

    /// Whether the request carries one of the tokens.
    pub fn check(&self, input: &Input) -> Result<(), Reject> {
        let presented = match &self.carrier {
            Carrier::Header {
                name,
                label,
                prefix,
            } => {
                let value = super::header_as(input.headers, name.as_str(), label)?;
                let token = value
                    .strip_prefix(prefix.as_str())
                    .ok_or(Reject::MalformedHeader(label))?;
                if token.is_empty() {
                    return Err(Reject::MalformedHeader(label));
                }
                token.as_bytes().to_vec()
            }
            Carrier::Basic => {
                let value = super::header(input.headers, AUTHORIZATION)?;
                let (scheme, encoded) = value
                    .split_once(' ')
                    .ok_or(Reject::MalformedHeader(AUTHORIZATION))?;
                if !scheme.eq_ignore_ascii_case("basic") {
                    return Err(Reject::MalformedHeader(AUTHORIZATION));
                }
                STANDARD
                    .decode(encoded.trim())
                    .map_err(|_| Reject::MalformedHeader(AUTHORIZATION))?
            }
        };
        if self.tokens.contains(&presented) {
            Ok(())
        } else {
            Err(Reject::NoMatch)
        }
    }

    /// The header a provider sends with the first token.
    pub fn header(&self) -> (HeaderName, HeaderValue) {
        let (name, text) = match &self.carrier {
            Carrier::Header { name, prefix, .. } => {
                let mut v = prefix.as_bytes().to_vec();
                v.extend_from_slice(self.tokens.first());
                (name.clone(), v)
            }
            Carrier::Basic => (
                hyper::header::AUTHORIZATION,
                format!("Basic {}", STANDARD.encode(self.tokens.first())).into_bytes(),
            ),
        };
        let mut value =
            HeaderValue::from_bytes(&text).unwrap_or_else(|_| HeaderValue::from_static("invalid"));
        // Keeps the token out of HTTP/2 header compression tables, should it ever be sent so.
        value.set_sensitive(true);
        (name, value)
    }

    /// The header that carries the secret, never stored or forwarded (`Authorization` is
    /// never stored anyway).
    pub fn secret_header(&self) -> Option<&HeaderName> {
        match &self.carrier {
            Carrier::Header { name, .. } => Some(name),
            Carrier::Basic => None,
        }
    }
}

/// A handshake answered once the token matched (Okta's verification GET).
pub type TokenHandshake = fn(&Input) -> Option<Result<Verdict, Reject>>;

/// A token provider: the check, its preset, an optional handshake.
#[derive(Debug)]
pub struct Token {
    pub check: TokenCheck,
    pub preset: Preset,
    pub methods: &'static [Method],
    pub handshake: Option<TokenHandshake>,
    pub sign_handshake: Option<fn(&Token, &Draft) -> Sample>,
    secret_headers: Vec<HeaderName>,
}

impl Token {
    pub fn new(check: TokenCheck, preset: Preset) -> Token {
        Token {
            secret_headers: check.secret_header().into_iter().cloned().collect(),
            check,
            preset,
            methods: super::POST,
            handshake: None,
            sign_handshake: None,
        }
    }
}

impl Verifier for Token {
    fn verify(&self, input: &Input, ctx: &Ctx) -> Result<Verdict, Reject> {
        self.check.check(input)?;
        if let Some(v) = self.handshake.and_then(|h| h(input)) {
            return v;
        }
        self.preset.event(input, ctx, None)
    }

    fn sign(&self, draft: &Draft) -> Sample {
        Sample::post(vec![self.check.header()], draft.body)
    }

    fn sign_handshake(&self, draft: &Draft) -> Option<Sample> {
        self.sign_handshake.map(|f| f(self, draft))
    }

    fn demo_body(&self, id: &str, now: i64) -> Vec<u8> {
        match self.preset.demo_body {
            Some(demo) => demo(id, now),
            None => super::demo_body(id),
        }
    }

    fn methods(&self) -> &'static [Method] {
        self.methods
    }

    /// Nothing of the body is signed: the token or the credentials are the whole proof.
    fn signs_whole_body(&self) -> bool {
        false
    }

    fn default_id(&self) -> Option<IdRule> {
        self.preset.id.clone()
    }

    fn secret_headers(&self) -> &[HeaderName] {
        &self.secret_headers
    }

    fn redelivery(&self) -> Option<Horizon> {
        self.preset.redelivery
    }

    fn caveats(&self) -> Vec<String> {
        self.preset.caveats()
    }
}

/// The generic `token` scheme's `token = { … }` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenSpec {
    /// The header that carries the token.
    pub header: String,
    /// Text before the token, like `Bearer `.
    #[serde(default)]
    pub prefix: String,
}

impl TokenSpec {
    pub fn carrier(&self, at: &str) -> Result<Carrier, String> {
        let name = HeaderName::from_bytes(self.header.as_bytes()).map_err(|_| {
            format!(
                "{at}.token.header {:?} is not a valid header name",
                self.header
            )
        })?;
        Ok(Carrier::Header {
            name,
            label: "token header",
            prefix: self.prefix.clone(),
        })
    }
}
