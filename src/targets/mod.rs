//! The kinds of target: where a target forwards events (a URL, a program, a table in the
//! app's own database), one file each, listed once below.
//!
//! A kind lives in three types of its file, one per stage:
//! - `Written`, its keys in a target's table ([`TargetKind`]): read by serde while the file
//!   is parsed, each key as the kind's type says, so that a mistake is shown at its line;
//!   then checked (URLs parsed, secrets loaded) into
//! - a [`Destination`]: what the configuration holds, how `check` describes it and what it
//!   cannot check before run time; when serve starts or reloads it makes
//! - a [`Forwarder`]: the running target (an HTTP client, a connection) that makes an
//!   attempt and classifies what came of it as an [`AttemptResult`].
//!
//! To add a kind, write `targets/<name>.rs` with a `Written` that implements [`TargetKind`]
//! (`command.rs` is the smallest), and add its module name to the list below (the test at
//! the bottom spells the list, as a target naming two kinds hears it). Its keys are then
//! taken in a target's table and in `[[alerts]]` (and refused beside another kind's), shown
//! in the man page and tested there by its `EXAMPLE`, described by `check`, and delivered
//! to. Its tests go beside it; `tests/it` drives it through `serve`.
//!
//! Where this sits: below config, beside deliver's loop. The configuration reads and checks
//! a target's keys with it and holds the [`Destination`]; deliver's loop, above config,
//! makes a [`Forwarder`] of it and records what each attempt says. So nothing here imports
//! config's types or validation, nor deliver's loop or the store (from config it takes only
//! the reference's vocabulary, [`Key`] and [`Section`], plain data, so that a kind documents
//! its own keys), and checking a file makes no HTTP client and no database connection. A
//! kind is one file rather than a settings type in config and a sender in deliver, because
//! everything about it (its keys, their errors and meaning, the attempt) changes together.

use std::path::Path;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::de::MapAccess;

use crate::manual::{Key, Section};
use crate::secret::Secret;

macro_rules! kinds {
    ($($kind:ident),* $(,)?) => {
        $(pub mod $kind;)*

        /// The key that selects each kind, in the order messages name them.
        pub const NAMES: &[&str] = &[$(<$kind::Written as TargetKind>::NAME),*];

        /// Each kind's keys in a target's table (its name first), for the man page.
        pub const KEYS: &[&[Key]] = &[$(<$kind::Written as TargetKind>::KEYS),*];

        /// Each kind's tables of its own, for the man page.
        pub const SECTIONS: &[&[Section]] = &[$(<$kind::Written as TargetKind>::SECTIONS),*];

        /// Each kind's smallest target, for the reference's tests.
        pub const EXAMPLES: &[&str] = &[$(<$kind::Written as TargetKind>::EXAMPLE),*];

        /// What one target's table holds of the kinds' keys, each read by its kind. serde
        /// needs a key's type at compile time, which is why this is generated from the list.
        #[derive(Default)]
        pub struct WrittenKinds {
            $($kind: Option<$kind::Written>,)*
            /// The kinds' keys the table holds, in its order.
            keys: Vec<&'static str>,
        }

        impl WrittenKinds {
            /// Reads the value of `key`, one of a kind's keys ([`key_of`]), as that kind says.
            pub fn read<'de, A: MapAccess<'de>>(
                &mut self,
                key: &'static str,
                map: &mut A,
            ) -> Result<(), A::Error> {
                self.keys.push(key);
                $(if owns::<$kind::Written>(key) {
                    return self.$kind.get_or_insert_default().read(key, map);
                })*
                unreachable!("{key} is a kind's key: `key_of` said so")
            }

            /// The destination that the one kind named in the table describes, checked by
            /// its kind. Errors name the key.
            pub fn check(self, cx: &Context) -> Result<Box<dyn Destination>, String> {
                let Some(name) = self.chosen() else {
                    return Err(format!("{}: set exactly one of {}", cx.at, one_of()));
                };
                $(if name == <$kind::Written as TargetKind>::NAME {
                    return self.$kind.expect("its name was read into it").check(cx);
                })*
                unreachable!("{name} is in NAMES")
            }

            /// A key of another kind than the one chosen (`sign_secret` on a command), with
            /// the reason it is refused, if the table holds one.
            pub fn stray(&self) -> Option<String> {
                let chosen = self.chosen()?;
                self.keys.iter().find_map(|key| {
                    $(if owns::<$kind::Written>(key)
                        && <$kind::Written as TargetKind>::NAME != chosen
                    {
                        return Some(<$kind::Written as TargetKind>::refused(key));
                    })*
                    None
                })
            }
        }
    };
}

kinds![url, command, postgres];

impl WrittenKinds {
    /// The kind whose name is a key of the table, if exactly one is.
    fn chosen(&self) -> Option<&'static str> {
        let mut named = NAMES.iter().filter(|name| self.keys.contains(name));
        match (named.next(), named.next()) {
            (Some(name), None) => Some(name),
            _ => None,
        }
    }
}

/// The kind's key called `name`, if `name` is one.
pub fn key_of(name: &str) -> Option<&'static str> {
    KEYS.iter()
        .flat_map(|keys| keys.iter())
        .map(|k| k.name)
        .find(|k| *k == name)
}

/// Whether `key` is one of `W`'s.
fn owns<W: TargetKind>(key: &str) -> bool {
    W::KEYS.iter().any(|k| k.name == key)
}

/// The kinds' names as a choice: "url, command or postgres".
fn one_of() -> String {
    match NAMES.split_last() {
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// A kind of target, as written: implemented by each kind's `Written`, its keys in a target's
/// table. `Default` is the table without any of them; `read` fills in those it holds.
pub trait TargetKind: Default + Send + 'static {
    /// Its keys in a target's table, as the man page documents them. The first selects the
    /// kind and names it.
    const KEYS: &'static [Key];
    /// The key that selects the kind, and its name in messages: `url`.
    const NAME: &'static str = Self::KEYS[0].name;
    /// Tables of its own in the man page (`[sources.targets.postgres]`).
    const SECTIONS: &'static [Section] = &[];
    /// The smallest target of the kind, as a file writes it after `name`: the reference's
    /// tests write one of each kind, every one of its tables among them.
    const EXAMPLE: &'static str;

    /// Reads the value of `key`, one of [`Self::KEYS`], as its type says (serde, so that a
    /// mistake is shown at its line).
    fn read<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error>;

    /// Checks what was written (its [`Self::NAME`] key always was): URLs parsed, paths
    /// resolved, secrets loaded. Errors start with `cx.at` and name the key.
    fn check(self, cx: &Context) -> Result<Box<dyn Destination>, String>;

    /// Why a target of another kind refuses `key`, one of these keys besides the name,
    /// after `{at}.`.
    fn refused(key: &str) -> String {
        format!("{key} is for {} targets", Self::NAME)
    }
}

/// What a kind's check may ask of the configuration around the target.
pub struct Context<'a> {
    /// Where the target is, for messages: `sources[0] ("stripe").targets[1] ("app")`.
    pub at: &'a str,
    /// The configuration file's directory: relative paths are relative to it.
    pub base: &'a Path,
    /// Loads a secret spec (`file:`, `env:`, `credential:`) as the command loading the
    /// configuration allows (`check` defers a `credential:` outside systemd).
    pub secret: &'a dyn Fn(&str) -> Result<Secret, String>,
}

/// A target's kind, checked: where the target forwards to, as the configuration holds it.
pub trait Destination: std::fmt::Debug + Send + Sync {
    /// How `check` shows it.
    fn describe(&self) -> Description;

    /// What would fail only at run time, which `check` reports and `serve` logs (a
    /// command's program missing).
    fn problem(&self) -> Result<(), String> {
        Ok(())
    }

    /// What works but an operator should know (a credential written in the file), which
    /// `check` prints and `serve` logs.
    fn warnings(&self) -> Vec<String> {
        Vec::new()
    }

    /// The running target, its attempts limited to `timeout`. Made before any loop starts
    /// (an HTTP client, a signing key, a connector), so that a reload switches whole or
    /// not at all.
    fn forwarder(&self, timeout: Duration) -> anyhow::Result<Box<dyn Forwarder>>;
}

/// How `check` shows a destination: the key its kind is written with, and the value.
#[derive(Debug)]
pub struct Description {
    /// `url`, `command`, `postgres`: the key in `check --json`.
    pub key: &'static str,
    /// The value in `check --json`.
    pub json: serde_json::Value,
    /// The value in `check`'s line, after the key.
    pub text: String,
}

/// A running target: it makes attempts.
pub trait Forwarder: Send + Sync {
    /// One attempt, within the target's timeout; whatever happens is an [`AttemptResult`].
    fn send<'a>(&'a self, a: &'a Attempt<'_>) -> BoxFuture<'a, AttemptResult>;
}

/// What one attempt sees.
pub struct Attempt<'a> {
    pub source: &'a str,
    pub target: &'a str,
    pub event_id: &'a str,
    pub event_type: Option<&'a str>,
    pub received_at: &'a str,
    pub idempotency_key: &'a str,
    pub attempt: u32,
    pub body: &'a [u8],
    /// The stored provider headers, without [`ADDRESS_HEADERS`].
    pub headers: &'a [(String, String)],
    /// Who sent the event, as hookinbox believes it (`proxy::client`); unknown for events
    /// stored before it was recorded.
    pub remote_addr: Option<&'a str>,
    /// How the event reached the inbox: `webhook`, or `api` (fetched by recovery from the
    /// provider's API, so without the provider's signature headers).
    pub origin: &'a str,
}

/// Request headers that name a client address, protocol or host on the way in. The client
/// writes them, so none of them is passed on: URL targets get `X-Forwarded-For` with the
/// address hookinbox believes (the peer, or what a trusted proxy said), commands get it in
/// `HOOKINBOX_REMOTE_ADDR`.
pub const ADDRESS_HEADERS: [&str; 6] = [
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-port",
    "x-forwarded-proto",
    "x-real-ip",
];

/// What the target said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disposition {
    Delivered,
    /// Try again, no sooner than `after` if the target said so (`Retry-After`).
    Retry {
        after: Option<Duration>,
    },
    /// The target will never take this event (HTTP 410).
    Gone,
}

/// One attempt's result, before it is turned into the delivery's next state.
#[derive(Debug, Clone)]
pub struct AttemptResult {
    pub disposition: Disposition,
    pub status: Option<i64>,
    pub error: Option<String>,
    pub output: Option<String>,
    /// The attempt timed out: the target may have acted on it without our hearing.
    pub ambiguous: bool,
}

impl AttemptResult {
    /// A failure before any answer: connection refused, timeout, cannot start.
    pub fn failed(error: String) -> AttemptResult {
        AttemptResult {
            disposition: Disposition::Retry { after: None },
            status: None,
            error: Some(error),
            output: None,
            ambiguous: false,
        }
    }

    /// No answer within the timeout: the target may or may not have acted.
    pub fn timed_out(error: String) -> AttemptResult {
        AttemptResult {
            ambiguous: true,
            ..AttemptResult::failed(error)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_belongs_to_one_kind() {
        let all: Vec<&str> = KEYS.iter().flat_map(|k| k.iter()).map(|k| k.name).collect();
        let mut unique = all.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), all.len(), "{all:?}");
    }

    /// A target of two kinds is refused, with every kind named in the list's order: a kind
    /// added to the list changes this message.
    #[test]
    fn a_target_takes_exactly_one_kind_and_hears_them_all() {
        let two =
            crate::config::tests::MINIMAL.replace("url = ", "command = [\"/bin/true\"]\nurl = ");
        let path = Path::new("/etc/hookinbox/test.toml");
        let e = format!(
            "{:#}",
            crate::config::from_str(&two, path, None).unwrap_err()
        );
        assert!(e.contains("exactly one of url, command or postgres"), "{e}");
    }
}
