//! hookinbox's integration tests: one binary, one module per promise. Every test drives the
//! real server on 127.0.0.1:0 (in-process, or the real binary where a process must die) with
//! requests signed as the providers sign them.
//!
//! - `support`: the harness (TestServer, signing, reading the inbox).
//! - `schemes`: each scheme accepts what its provider signs and refuses, with 401 and
//!   nothing stored, every kind of bad signature; published vectors; rotation; handshakes.
//! - `deliver`: forwarding to HTTP and command targets: every event delivered with its
//!   bytes and one key, retries, Retry-After, 410, redirects, hangs, fan-out, re-signing,
//!   ordering.
//! - `sink`: the fake HTTP target the delivery tests run.
//! - `dedup`: replays, concurrent identical deliveries, and same-id-different-bytes conflicts.
//! - `install`: systemd readiness (READY=1 only once the listener answers), HTTPS with a
//!   self-signed certificate, and X-Forwarded-For from trusted proxies only.
//! - `activation`: socket activation: the real binary under `systemd-socket-activate` takes
//!   its public and admin listeners by name, stores what they receive, and refuses a socket
//!   it cannot use (a wrong name, UDP, not listening) with exit 3 and the fix.
//! - `limits`: body size (declared and chunked), stalled bodies, silent clients, RFC 9112
//!   framing, and slow or idle clients over the connection cap.
//! - `store_failure`: a full disk and a locked database answer 503, never 2xx, and recover;
//!   under load too, with a write lock and a long read held in the `sqlite3` shell.
//! - `failpoints` (with `--features failpoints`): an error, a SIGKILL or a panic at every
//!   durability boundary, with a supervisor restarting the binary; then the oracle.
//! - `fault_sink`: a target failing in every way (5xx, 429/503 + Retry-After, 302, resets,
//!   slow 2xx, 410); every event ends delivered or dead under its one key.
//! - `oracle`: the oracle reports each kind of broken promise, and passes a clean run.
//! - `load`, `proc`: the load generator and the real binary as a child process, for the
//!   scenarios above; `hookinbox::oracle` checks them.
//! - `group_commit`: concurrent requests share commits, and each answer waits for its own.
//! - `power_loss`: the real binary on `lossyfs`, a FUSE file system that forgets what was
//!   not synced: SIGKILL plus power loss keeps every acknowledged event with
//!   `synchronous = "full"`, and loses some with `"normal"` (the negative control).
//! - `crash`: the real binary: SIGKILL at random moments loses no acknowledged event, nor a
//!   delivery in flight; SIGTERM under load; SIGHUP reloads secrets.
//! - `operate`: replay, retention, backup, metrics and `check` against a filled inbox;
//!   `prune` and `backup` quiet when piped and showing progress on a pseudo-terminal.
//! - `monitoring`: every metric family from the first scrape, at zero per configured source
//!   and target (and after a reload); build and process metrics; receipt lag to the
//!   fraction of a second; the shipped alerting rules under `promtool check` and
//!   `promtool test`; every metric name the rules and the Grafana dashboard use, exported.
//! - `inbox_sqlite`: the inbox is readable with the system's `sqlite3` while serving.
//! - `resources`: bounded disk (pruning gives pages back; an inbox under retention stays
//!   within a bound) and memory (bodies in flight stay within the budget).
//! - `cli`: the binary's `check` and its error messages; the man page, with the
//!   configuration reference as `man` shows it.
//! - `steer`: pausing a target (held across a restart, released in order), bulk replay by
//!   filters, a target's rate limit at a real sink, and `events --follow` through a pipe.
//! - `inspect`: `events`, `show`, `conflicts` and `dead` on a real inbox: filters, pages,
//!   exact bodies, exit codes, and provider strings escaped before a terminal.
//! - `providers`: every source of docs/providers.md, loaded from the document, over HTTP:
//!   fresh, replayed, each failure, each handshake's exact answer; published vectors; the
//!   README's and the document's scheme tables, and the man page's recovery APIs, against
//!   the registry.
//! - `sns` (with `--features sns-test-host`): Amazon SNS against the real binary and a local
//!   certificate host: signature versions 1 and 2, pinned topics, certificate hosts,
//!   subscription confirmation.
//! - `scheme_props`: property tests: no header value makes a scheme panic or accept.
//! - `alerts`: a silent source, a failing target, dead deliveries, rising rejections and
//!   conflicts are each POSTed to an `[[alerts]]` sink and shown as a banner; a notification
//!   pending at a restart is delivered after it, once.
//! - `web`: the web inbox in a real headless Chromium over WebDriver: filter, open an
//!   event, its body, replay and pause with actions on, refused with them off; a provider's
//!   `<script>` never runs; forged POSTs (no token, another Origin or Host) change nothing.
//! - `pg_target`: `postgres` targets against a real PostgreSQL (a throwaway cluster): one
//!   row per accepted event with its exact bytes, through duplicates, a replay, a missing
//!   table, and SIGKILLs mid-batch.
//! - `recover`: knowing the gaps and filling them from the providers' APIs, against local
//!   stand-ins for GitHub's and Stripe's (`provider_api`): a downtime after a SIGKILL,
//!   a run of 401s, pages and rate limits, a second run that asks for nothing, Stripe's
//!   events stored with origin `api` and their later webhook a duplicate, API failures.
//! - `allow`: sources pinned to their providers' addresses: 403 before the body from
//!   anywhere else, the client a trusted proxy names, a provider's list fetched from a
//!   local stand-in for GitHub's meta API, kept, used after the API fails and a restart,
//!   503 while none was ever had, a week-old list announced stale, a reload pinning and
//!   unpinning a running source, an IPv4 client on a dual-stack listener, and `check` saying
//!   what each entry means.
//! - `house`: the code's shape: no files of `src/` import each other round a circle.
//! - `acme`: certificates by ACME against a real ACME server (pebble): none served and
//!   /readyz saying why until one is issued, then a signed webhook over HTTPS to it, kept
//!   across a restart without a new order, renewed at two thirds of its lifetime without
//!   a restart; PostgreSQL replicas ordering once and answering each other's validations;
//!   HTTP-01 on a second listener;
//!   certificate files served again when they change on disk.
//! - `fuzz_corpora`: every committed fuzz corpus file replayed through the fuzz harness
//!   (signature parsers in process, raw HTTP bytes through the real service).

mod acme;
mod activation;
mod alerts;
mod allow;
mod cli;
mod crash;
mod dedup;
mod deliver;
#[cfg(feature = "failpoints")]
mod failpoints;
mod fault_sink;
mod fuzz_corpora;
mod group_commit;
mod house;
mod inbox_sqlite;
mod inspect;
mod install;
mod limits;
mod load;
mod lossyfs;
mod monitoring;
mod operate;
mod oracle;
mod pg_store;
mod pg_target;
mod power_loss;
mod proc;
mod provider_api;
mod providers;
mod recover;
mod resources;
mod scheme_props;
mod schemes;
mod sink;
#[cfg(feature = "sns-test-host")]
mod sns;
mod steer;
mod store_failure;
mod support;
mod target_auth;
mod web;
