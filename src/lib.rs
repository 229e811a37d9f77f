//! hookinbox: a webhook front door. It verifies each delivery's signature over the exact
//! raw bytes, commits it durably to a SQLite inbox, and only then answers 2xx.
//!
//! # Layout
//!
//! From the top floor down; a module imports only from floors below it (docs/ARCHITECTURE.md,
//! "The house").
//!
//! - [`cli`]: the command line (clap), parsed in `main.rs` and dispatched to [`commands`].
//! - [`commands`]: one module per subcommand: parse, call, render.
//! - [`admin`]: the local admin listener: metrics and health; [`web`]: the web inbox on it.
//! - [`activation`]: the listening sockets systemd passes (socket activation).
//! - [`receive`]: the public listener: limits, routing, verification, answers.
//! - [`acme`]: certificates for the public listener by ACME (TLS-ALPN-01), kept in the
//!   inbox and renewed.
//! - [`deliver`]: the worker that forwards stored events to their targets, with retries.
//! - [`recover`]: knowing the gaps (heartbeats, runs of refused requests) and filling them
//!   from the providers' APIs (GitHub redeliveries, Stripe's events).
//! - [`alerts`]: conditions an operator should hear about, judged from the inbox.
//! - [`store`]: the inbox: one contract ([`store::Store`]) over SQLite and PostgreSQL, the
//!   one place the backend is chosen ([`store::Location`]), and every question an
//!   operator asks of it.
//! - [`metrics`]: the Prometheus registry and every metric hookinbox exports.
//! - [`event`]: what an event is: identity, idempotency key, order key; built from a
//!   request, a provider's API or an alert.
//! - [`targets`]: the kinds of target (URL, command, PostgreSQL table), one file each.
//! - [`config`]: the TOML file, validated into a [`config::Config`] with secrets loaded;
//!   warnings and the problems `check` reports; the reference the man page renders.
//! - [`scheme`]: one module per provider; pure functions over (headers, body, now).
//! - [`pgconn`]: reaching a PostgreSQL server, for the inbox and `postgres` targets.
//! - [`secret`], [`clock`], [`terminal`], [`proxy`], [`failpoint`], [`manual`]: the ground
//!   floor (secrets that never print, time as the inbox writes it, text on its way to a
//!   terminal, trusted proxies, fault injection, the configuration manual's vocabulary).
//! - [`oracle`]: the crash and load tests' checker (what was acknowledged vs the inbox).

pub mod acme;
pub mod activation;
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
