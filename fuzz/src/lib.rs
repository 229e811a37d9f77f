//! hookinbox's fuzz harness: what each fuzz target does with its input, and what must hold.
//!
//! The same code runs in two places: the libFuzzer targets in `fuzz_targets/` (nightly,
//! `cargo fuzz run <target>`), and the main test suite's `fuzz_corpora` test, which includes
//! this file by path and replays every committed corpus file on stable Rust. So nothing here
//! depends on libFuzzer, and every failed property is a panic.
//!
//! # Layout
//!
//! - [`choices`]: fuzz bytes read as a sequence of choices.
//! - [`schemes`]: one target per signature scheme, verifying edited requests in process.
//! - [`raw_http`]: raw bytes through the real service over loopback.

pub mod choices;
pub mod raw_http;
pub mod schemes;

/// What a target does with one input; it panics when a property fails.
pub type Target = fn(&[u8]);

/// Every target by name, as `fuzz_targets/<name>.rs` and `corpus/<name>/` are named.
pub const TARGETS: [(&str, Target); 8] = [
    ("standard_webhooks", schemes::standard_webhooks),
    ("stripe", schemes::stripe),
    ("github", schemes::github),
    ("shopify", schemes::shopify),
    ("slack", schemes::slack),
    ("gitlab", schemes::gitlab),
    ("hmac", schemes::hmac),
    ("raw_http", raw_http::run),
];
