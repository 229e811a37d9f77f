//! hookinbox: a webhook front door. It verifies each delivery's signature over the exact
//! raw bytes, commits it durably to a SQLite inbox, and only then answers 2xx.
//!
//! # Layout
//!
//! - [`cli`]: the command line (clap), parsed in `main.rs` and dispatched to [`commands`].
//! - [`config`]: the TOML file, validated into a [`config::Config`] with secrets loaded;
//!   warnings and the problems `check` reports; the reference the man page renders.
//! - [`secret`]: where secrets come from, and a type that never prints them.
//! - [`scheme`]: one module per signature scheme; pure functions over (headers, body, now).
//! - [`store`]: the inbox: schema and migrations, the single writer with group commit,
//!   read-only connections, retention, one `serve` per inbox, commit announcements, paused
//!   targets, replay plans.
//! - [`receive`]: the public listener: limits, routing, verification, answers.
//! - [`deliver`]: the worker that forwards stored events to their targets, with retries.
//! - [`recover`]: knowing the gaps (heartbeats, runs of refused requests) and filling them
//!   from the providers' APIs (GitHub redeliveries, Stripe's events).
//! - [`admin`]: the local admin listener: metrics and health.
//! - [`oracle`]: the crash and load tests' checker (what was acknowledged vs the inbox).
//! - [`proxy`]: believing `X-Forwarded-For` only from configured proxies.
//! - [`metrics`]: the Prometheus registry and every metric hookinbox exports, with the
//!   process metrics read from `/proc`.
//! - [`commands`]: one module per subcommand.
//! - [`failpoint`]: fault injection at the durability boundaries (a test-only feature).
//! - [`terminal`]: escaping provider-controlled text before it reaches a terminal.
//! - [`clock`]: wall-clock time as unix seconds and as the inbox's ISO-8601 text.

pub mod admin;
pub mod alerts;
pub mod cli;
pub mod clock;
pub mod commands;
pub mod config;
pub mod deliver;
pub mod event;
pub mod failpoint;
pub mod manual;
pub mod metrics;
pub mod oracle;
pub mod pgconn;
pub mod proxy;
pub mod receive;
pub mod recover;
pub mod scheme;
pub mod secret;
pub mod store;
pub mod targets;
pub mod terminal;
pub mod web;
