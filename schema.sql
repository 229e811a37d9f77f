-- The hookinbox inbox. This file is the one source of the schema: the binary embeds it and
-- applies each "-- migrate: N" section whose N is above the file's PRAGMA user_version, in
-- order, in one transaction each. Never edit a released section; add a new one.
--
-- Conventions, so that `sqlite3 inbox.db` answers an operator's questions as it is:
--   * times are UTC ISO-8601 text with milliseconds ('2026-11-30T07:31:02.123Z'): readable,
--     and text order is time order;
--   * states are words, checked by CHECK constraints;
--   * bodies are the exact raw bytes received, stored as TEXT when they are valid UTF-8
--     (so the shell shows them) and as BLOB otherwise, in `payloads` (from version 2);
--   * features stay within what Debian 12's sqlite3 (3.40) can open.

-- migrate: 1

-- One row per distinct event identity (source, account, provider event id). Written once;
-- later only pruned (body and headers dropped after keep_payload, the row after
-- keep_identity).
CREATE TABLE events (
    id            INTEGER PRIMARY KEY,
    source        TEXT    NOT NULL,           -- the configured source (URL /hooks/<source>)
    account       TEXT    NOT NULL DEFAULT '',-- the source's configured account scope
    event_id      TEXT    NOT NULL,           -- the provider's stable event id
    sha256        TEXT    NOT NULL,           -- lowercase hex SHA-256 of the raw body
    size          INTEGER NOT NULL,           -- bytes in the raw body
    body          BLOB,                       -- the raw body; NULL once pruned
    headers       TEXT,                       -- JSON [[name, value], …] as received, secrets removed; NULL once pruned
    event_type    TEXT,                       -- the provider's event type, where the scheme has one
    provider_time TEXT,                       -- the provider's signed timestamp, where the scheme has one
    received_at   TEXT    NOT NULL,           -- when hookinbox committed it
    remote_addr   TEXT,                       -- who sent it: the peer, or the client a trusted proxy named
    pruned_at     TEXT,                       -- when body and headers were dropped
    UNIQUE (source, account, event_id)
);
-- Retention walks each source's events by age: every row, and the ones that still have
-- a payload. Without these a prune would walk past every row already pruned.
CREATE INDEX events_age ON events (source, received_at);
CREATE INDEX events_unpruned ON events (source, received_at) WHERE pruned_at IS NULL;

-- One row per event and configured target: the delivery worker's queue and its state.
-- Written in the same transaction as the event, so an event is never stored without them.
CREATE TABLE deliveries (
    id              INTEGER PRIMARY KEY,
    event           INTEGER NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    source          TEXT    NOT NULL,         -- the event's source (targets are named per source)
    target          TEXT    NOT NULL,         -- the target's name in the source's config
    idempotency_key TEXT    NOT NULL UNIQUE,  -- fixed at insert, sent on every attempt forever
    state           TEXT    NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'in_flight', 'delivered', 'dead', 'superseded')),
    attempts        INTEGER NOT NULL DEFAULT 0, -- counted when claimed, so a crash mid-attempt counts
    schedule_base   INTEGER NOT NULL DEFAULT 0, -- attempts made before the current retry schedule began (a replay starts a new one)
    next_attempt_at TEXT    NOT NULL,         -- due time while pending
    lease_until     TEXT,                     -- while in_flight: when the claim expires
    last_error      TEXT,                     -- why the last attempt failed, or why it is dead
    order_key       TEXT,                     -- with ordering on: the event's order key
    order_version,                            -- … and its version (a number or text)
    created_at      TEXT    NOT NULL,
    updated_at      TEXT    NOT NULL,         -- last change of state
    UNIQUE (event, target)
);
CREATE INDEX deliveries_due ON deliveries (source, target, state, next_attempt_at);
CREATE INDEX deliveries_leases ON deliveries (lease_until) WHERE state = 'in_flight';
CREATE INDEX deliveries_state ON deliveries (state, created_at);
CREATE INDEX deliveries_order ON deliveries (source, target, order_key, state)
    WHERE order_key IS NOT NULL;

-- One row per delivery attempt: what was tried, how long it took, what came back.
CREATE TABLE attempts (
    id          INTEGER PRIMARY KEY,
    delivery    INTEGER NOT NULL REFERENCES deliveries (id) ON DELETE CASCADE,
    number      INTEGER NOT NULL,             -- 1 for the first attempt
    started_at  TEXT    NOT NULL,
    duration_ms INTEGER NOT NULL,
    outcome     TEXT    NOT NULL CHECK (outcome IN ('delivered', 'retry', 'dead')),
    status      INTEGER,                      -- the HTTP status or the command's exit code
    error       TEXT,                         -- why it failed (timeout, connection refused, …)
    output      TEXT,                         -- the start of the response body, or stdout/stderr
    ambiguous   INTEGER NOT NULL DEFAULT 0    -- 1 when the target may have acted without our hearing (a timeout)
);
CREATE INDEX attempts_delivery ON attempts (delivery);
CREATE INDEX attempts_started ON attempts (started_at);

-- With ordering on: the newest version delivered per key and target. An event whose
-- version is not newer is superseded, not delivered.
CREATE TABLE order_keys (
    source        TEXT NOT NULL,
    target        TEXT NOT NULL,
    order_key     TEXT NOT NULL,
    last_version  NOT NULL,
    updated_at    TEXT NOT NULL,
    PRIMARY KEY (source, target, order_key)
);

-- Same identity, different bytes: the new bytes are quarantined here and never forwarded.
-- One row per distinct version; a provider retrying the same conflicting bytes bumps `seen`.
CREATE TABLE conflicts (
    id              INTEGER PRIMARY KEY,
    event           INTEGER REFERENCES events (id) ON DELETE SET NULL,  -- the original
    source          TEXT    NOT NULL,
    account         TEXT    NOT NULL DEFAULT '',
    event_id        TEXT    NOT NULL,
    original_sha256 TEXT    NOT NULL,         -- the stored event's hash
    sha256          TEXT    NOT NULL,         -- this version's hash
    size            INTEGER NOT NULL,
    body            BLOB,                     -- this version's raw bytes
    headers         TEXT,
    received_at     TEXT    NOT NULL,         -- first time this version arrived
    last_seen_at    TEXT    NOT NULL,
    seen            INTEGER NOT NULL DEFAULT 1,
    UNIQUE (source, account, event_id, sha256)
);
CREATE INDEX conflicts_seen ON conflicts (source, last_seen_at);
CREATE INDEX conflicts_event ON conflicts (event);

-- One row that the writer rewrites after a failed commit, to find out whether the inbox
-- takes writes again (a full disk only shows when something is written).
CREATE TABLE writer_probe (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    probed_at TEXT    NOT NULL
);

-- Newest events first, with a status in words derived from their deliveries:
-- 'stored' (no targets), 'pending', 'dead' (some target gave up), or 'delivered'.
CREATE VIEW recent_events AS
SELECT e.id, e.received_at, e.source, e.account, e.event_id, e.event_type, e.size,
       CASE
           WHEN NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event = e.id) THEN 'stored'
           WHEN EXISTS (SELECT 1 FROM deliveries d WHERE d.event = e.id
                        AND d.state IN ('pending', 'in_flight')) THEN 'pending'
           WHEN EXISTS (SELECT 1 FROM deliveries d WHERE d.event = e.id
                        AND d.state = 'dead') THEN 'dead'
           ELSE 'delivered'
       END AS status,
       (SELECT group_concat(d.target || '=' || d.state, ' ')
          FROM deliveries d WHERE d.event = e.id) AS deliveries,
       e.body IS NULL AS pruned
  FROM events e
 ORDER BY e.id DESC;

-- What is waiting to be forwarded, soonest first.
CREATE VIEW pending_deliveries AS
SELECT d.id, d.source, e.event_id, d.target, d.state, d.attempts, d.next_attempt_at,
       d.lease_until, d.last_error, e.received_at, d.idempotency_key
  FROM deliveries d JOIN events e ON e.id = d.event
 WHERE d.state IN ('pending', 'in_flight')
 ORDER BY d.next_attempt_at;

-- Deliveries that gave up, newest first: the candidates for replay.
CREATE VIEW dead_deliveries AS
SELECT d.id, d.source, e.event_id, d.target, d.attempts, d.last_error, d.updated_at,
       e.received_at, d.idempotency_key
  FROM deliveries d JOIN events e ON e.id = d.event
 WHERE d.state = 'dead'
 ORDER BY d.updated_at DESC;

-- Every attempt with its event, newest first.
CREATE VIEW recent_attempts AS
SELECT a.id, a.started_at, d.source, e.event_id, d.target, a.number, a.outcome, a.status,
       a.duration_ms, a.error, d.idempotency_key
  FROM attempts a JOIN deliveries d ON d.id = a.delivery JOIN events e ON e.id = d.event
 ORDER BY a.id DESC;

-- Quarantined versions beside the original they conflict with, newest first.
CREATE VIEW recent_conflicts AS
SELECT c.id, c.last_seen_at, c.source, c.account, c.event_id, c.seen,
       c.original_sha256, c.sha256, c.size, c.received_at, c.event AS original_event
  FROM conflicts c
 ORDER BY c.last_seen_at DESC;

-- migrate: 2

-- Bodies and headers move out of `events` into a table of their own, keyed by the event's
-- row id, so its rows lie in receipt order. Pruning the oldest payloads then empties whole
-- pages, which incremental auto-vacuum gives back to the file system; in `events` a
-- pruned body left its row behind in a sparse page, so nothing could be given back (after
-- pruning 21,000 payloads of 1.5 KB, 2% of the pages were free). The identity rows that
-- stay, and that every insert's unique-index lookup touches, are small and dense now too.
-- (Turning on incremental auto-vacuum needs a VACUUM, which cannot run in a migration's
-- transaction: `serve` runs it right after, once, and logs how long it took.)
CREATE TABLE payloads (
    event   INTEGER PRIMARY KEY REFERENCES events (id) ON DELETE CASCADE, -- = events.id
    body    BLOB NOT NULL,                -- the raw body: TEXT when valid UTF-8, else BLOB
    headers TEXT NOT NULL                 -- JSON [[name, value], …] as received, secrets removed
);
INSERT INTO payloads (event, body, headers)
SELECT id, body, coalesce(headers, '[]') FROM events WHERE body IS NOT NULL ORDER BY id;

-- `events` without body and headers, rebuilt in one pass (SQLite's way to change a table;
-- two DROP COLUMNs would rewrite it twice). The migration runs with foreign keys off, so
-- dropping the old table deletes nothing that refers to it; the new one takes its name.
DROP VIEW recent_events;
CREATE TABLE events_v2 (
    id            INTEGER PRIMARY KEY,
    source        TEXT    NOT NULL,           -- the configured source (URL /hooks/<source>)
    account       TEXT    NOT NULL DEFAULT '',-- the source's configured account scope
    event_id      TEXT    NOT NULL,           -- the provider's stable event id
    sha256        TEXT    NOT NULL,           -- lowercase hex SHA-256 of the raw body
    size          INTEGER NOT NULL,           -- bytes in the raw body (in payloads until pruned)
    event_type    TEXT,                       -- the provider's event type, where the scheme has one
    provider_time TEXT,                       -- the provider's signed timestamp, where the scheme has one
    received_at   TEXT    NOT NULL,           -- when hookinbox committed it
    remote_addr   TEXT,                       -- who sent it: the peer, or the client a trusted proxy named
    pruned_at     TEXT,                       -- when its payload was dropped
    UNIQUE (source, account, event_id)
);
INSERT INTO events_v2 (id, source, account, event_id, sha256, size, event_type, provider_time,
                       received_at, remote_addr, pruned_at)
SELECT id, source, account, event_id, sha256, size, event_type, provider_time, received_at,
       remote_addr, pruned_at
  FROM events ORDER BY id;
DROP TABLE events;
-- The legacy rename leaves the views and the other tables' references alone: they name
-- `events`, which they find again once it is renamed.
PRAGMA legacy_alter_table = ON;
ALTER TABLE events_v2 RENAME TO events;
PRAGMA legacy_alter_table = OFF;
CREATE INDEX events_age ON events (source, received_at);
CREATE INDEX events_unpruned ON events (source, received_at) WHERE pruned_at IS NULL;

-- Newest events first, with a status in words derived from their deliveries:
-- 'stored' (no targets), 'pending', 'dead' (some target gave up), or 'delivered'.
CREATE VIEW recent_events AS
SELECT e.id, e.received_at, e.source, e.account, e.event_id, e.event_type, e.size,
       CASE
           WHEN NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event = e.id) THEN 'stored'
           WHEN EXISTS (SELECT 1 FROM deliveries d WHERE d.event = e.id
                        AND d.state IN ('pending', 'in_flight')) THEN 'pending'
           WHEN EXISTS (SELECT 1 FROM deliveries d WHERE d.event = e.id
                        AND d.state = 'dead') THEN 'dead'
           ELSE 'delivered'
       END AS status,
       (SELECT group_concat(d.target || '=' || d.state, ' ')
          FROM deliveries d WHERE d.event = e.id) AS deliveries,
       e.pruned_at IS NOT NULL AS pruned
  FROM events e
 ORDER BY e.id DESC;

-- One event with its payload, for `SELECT body FROM event_payloads WHERE event_id = …`.
CREATE VIEW event_payloads AS
SELECT e.id, e.source, e.account, e.event_id, e.received_at, p.body, p.headers
  FROM events e JOIN payloads p ON p.event = e.id;

-- migrate: 3

-- Secrets a provider hands over in a handshake instead of the operator configuring them
-- (Asana's X-Hook-Secret), one per source. Trusted only within a window the operator opens
-- (`hookinbox arm`), and used once: the row in `armed` is deleted when a secret is learnt.
CREATE TABLE learnt_secrets (
    source      TEXT PRIMARY KEY,
    secret      BLOB NOT NULL,
    learnt_at   TEXT NOT NULL,
    remote_addr TEXT                          -- who sent the handshake
);
CREATE TABLE armed (
    source   TEXT PRIMARY KEY,
    armed_at TEXT NOT NULL,
    until    TEXT NOT NULL                    -- handshakes after this are refused
);

-- migrate: 4

-- Targets an operator paused (`hookinbox pause SOURCE/TARGET`). Their deliveries stay
-- `pending` and are not claimed until the row is deleted (`hookinbox resume`), then go out
-- in their order. A row rather than a flag in memory, so that a pause outlives restarts and
-- reloads, and so that a claim tests it inside its own transaction: a pause committed
-- before a claim is never overtaken by it. One row per pair; pausing again changes nothing.
CREATE TABLE paused_targets (
    source    TEXT NOT NULL,                  -- the configured source
    target    TEXT NOT NULL,                  -- the target's name in the source's config
    paused_at TEXT NOT NULL,
    paused_by TEXT NOT NULL,                  -- who paused it: a user name, or what did it
    PRIMARY KEY (source, target)
);

-- Dead deliveries by when they died: the `dead` listing (newest first, a page at a time)
-- and the alert on deliveries that died in the last hour read this instead of every dead
-- row. Partial, so that only a delivery dying (or being replayed) touches it.
CREATE INDEX deliveries_dead ON deliveries (updated_at) WHERE state = 'dead';

-- migrate: 5

-- When each source was receiving, so that hookinbox knows its own gaps (`hookinbox gaps`)
-- and can ask the providers that keep a delivery log for what it missed (`hookinbox
-- recover`). One row per configured source, written by `serve`: at start, every heartbeat
-- (a few seconds apart) and at a clean stop.
CREATE TABLE receiving (
    source          TEXT PRIMARY KEY,
    started_at      TEXT NOT NULL,            -- when this serve started receiving
    heartbeat_at    TEXT NOT NULL,            -- the last time serve was seen receiving
    stopped_at      TEXT,                     -- a clean stop; NULL while serving, or after a crash
    rejecting_since TEXT,                     -- the first of a run of refused requests (401, 503)
                                              -- with no accepted one since
    rejecting_last  TEXT,                     -- the last of that run
    rejected        INTEGER NOT NULL DEFAULT 0,-- requests refused in that run
    rejected_by     TEXT                      -- how they were answered: "401:10,503:2"
);

-- Windows in which a source was not receiving: serve was down (found at the next start), or
-- refused every request the source sent (a wrong or rotated secret, a failing disk).
CREATE TABLE gaps (
    id           INTEGER PRIMARY KEY,
    source       TEXT NOT NULL,
    kind         TEXT NOT NULL CHECK (kind IN ('down', 'rejecting')),
    started_at   TEXT NOT NULL,
    ended_at     TEXT NOT NULL,
    detail       TEXT NOT NULL,               -- why, in words
    recovered_at TEXT,                        -- when a recovery covered the window
    recovery     TEXT                         -- what that recovery did, in words
);
CREATE INDEX gaps_started ON gaps (started_at);

-- Redeliveries hookinbox asked a provider for (GitHub), so that a second recovery does not
-- ask again while the first one's redelivery is on its way.
CREATE TABLE recovery_requests (
    source       TEXT NOT NULL,
    account      TEXT NOT NULL,
    event_id     TEXT NOT NULL,
    requested_at TEXT NOT NULL,               -- the last time it was asked for
    delivery     INTEGER NOT NULL,            -- the provider's delivery id asked for then
    asked        INTEGER NOT NULL DEFAULT 1,  -- how often
    PRIMARY KEY (source, account, event_id)
);

-- How an event reached the inbox: 'webhook' (signed, through /hooks/<source>) or 'api'
-- (fetched by `recover` from the provider's API over TLS with the operator's key).
ALTER TABLE events ADD COLUMN origin TEXT NOT NULL DEFAULT 'webhook'
    CHECK (origin IN ('webhook', 'api'));

DROP VIEW recent_events;
CREATE VIEW recent_events AS
SELECT e.id, e.received_at, e.source, e.account, e.event_id, e.event_type, e.size,
       CASE
           WHEN NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event = e.id) THEN 'stored'
           WHEN EXISTS (SELECT 1 FROM deliveries d WHERE d.event = e.id
                        AND d.state IN ('pending', 'in_flight')) THEN 'pending'
           WHEN EXISTS (SELECT 1 FROM deliveries d WHERE d.event = e.id
                        AND d.state = 'dead') THEN 'dead'
           ELSE 'delivered'
       END AS status,
       (SELECT group_concat(d.target || '=' || d.state, ' ')
          FROM deliveries d WHERE d.event = e.id) AS deliveries,
       e.pruned_at IS NOT NULL AS pruned,
       e.origin
  FROM events e
 ORDER BY e.id DESC;

-- migrate: 6

-- The newest event each source committed, for the web inbox's overview and the alert on a
-- silent source, because the index that answered it goes below. Moved on by the writer
-- when a new event's time is in a later minute than the row's (so that its page is not
-- written by every commit): up to a minute behind, which the newest rows cover. Retention
-- leaves it alone: it still names the time after the event itself was pruned.
CREATE TABLE latest_received (
    source      TEXT PRIMARY KEY,             -- the configured source
    received_at TEXT NOT NULL                 -- when its newest event was committed
) WITHOUT ROWID;
INSERT INTO latest_received (source, received_at)
SELECT source, max(received_at) FROM events GROUP BY source;

-- Two indexes by time go. Every index that grows at its end rewrites about two pages at
-- each commit (SQLite appends cheaply only to rowid tables); these two were a quarter of
-- the pages a commit wrote. Event ids follow commit time, so retention walks `events` in id
-- order from where a boundary found by time lies (see src/store/retention.rs), and counts
-- over a recent window read the rows after that boundary.
DROP INDEX events_age;
DROP INDEX events_unpruned;

-- migrate: 7

-- The idempotency key keeps its column and loses its UNIQUE index. The key is a hash of the
-- event's identity and the target, so each new delivery landed at a random place in that
-- index: with one target, its leaves were half of what a commit storing events wrote (20.7
-- KiB per stored event with it, 11.0 without) and a third of the writer's time. No two
-- deliveries of existing events share a key: one event has one delivery per target (UNIQUE
-- (event, target)), one identity one event. Nothing looks a delivery up by its key; an
-- operator's `WHERE idempotency_key = …` reads the table. Rebuilt in one pass, as version 2
-- rebuilt `events`: on a large inbox this start-up takes time in proportion to its
-- deliveries (logged when done).
CREATE TABLE deliveries_v7 (
    id              INTEGER PRIMARY KEY,
    event           INTEGER NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    source          TEXT    NOT NULL,         -- the event's source (targets are named per source)
    target          TEXT    NOT NULL,         -- the target's name in the source's config
    idempotency_key TEXT    NOT NULL,         -- fixed at insert, sent on every attempt forever
    state           TEXT    NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'in_flight', 'delivered', 'dead', 'superseded')),
    attempts        INTEGER NOT NULL DEFAULT 0, -- counted when claimed, so a crash mid-attempt counts
    schedule_base   INTEGER NOT NULL DEFAULT 0, -- attempts made before the current retry schedule began (a replay starts a new one)
    next_attempt_at TEXT    NOT NULL,         -- due time while pending
    lease_until     TEXT,                     -- while in_flight: when the claim expires
    last_error      TEXT,                     -- why the last attempt failed, or why it is dead
    order_key       TEXT,                     -- with ordering on: the event's order key
    order_version,                            -- … and its version (a number or text)
    created_at      TEXT    NOT NULL,
    updated_at      TEXT    NOT NULL,         -- last change of state
    UNIQUE (event, target)
);
INSERT INTO deliveries_v7 (id, event, source, target, idempotency_key, state, attempts,
                           schedule_base, next_attempt_at, lease_until, last_error, order_key,
                           order_version, created_at, updated_at)
SELECT id, event, source, target, idempotency_key, state, attempts, schedule_base,
       next_attempt_at, lease_until, last_error, order_key, order_version, created_at,
       updated_at
  FROM deliveries ORDER BY id;
DROP TABLE deliveries;
-- The legacy rename leaves the views and `attempts`' reference alone: they name
-- `deliveries`, which they find again once the new table is renamed.
PRAGMA legacy_alter_table = ON;
ALTER TABLE deliveries_v7 RENAME TO deliveries;
PRAGMA legacy_alter_table = OFF;
CREATE INDEX deliveries_due ON deliveries (source, target, state, next_attempt_at);
CREATE INDEX deliveries_leases ON deliveries (lease_until) WHERE state = 'in_flight';
CREATE INDEX deliveries_state ON deliveries (state, created_at);
CREATE INDEX deliveries_order ON deliveries (source, target, order_key, state)
    WHERE order_key IS NOT NULL;
CREATE INDEX deliveries_dead ON deliveries (updated_at) WHERE state = 'dead';


-- migrate: 8

-- The index of deliveries by state goes. Every new delivery is pending, so each commit that
-- stored events of a source with a target rewrote its tail: about two pages a commit, a
-- tenth of what such an event cost (11.0 KiB with it, 9.9 without, ordered ids). The
-- backlog's counts read each target's stretch of `deliveries_due`, which leads with
-- (source, target, state); the dead listings and replay's choice of dead deliveries use
-- `deliveries_dead`; the leases `deliveries_leases`. The view `pending_deliveries` now
-- reads every delivery unless a source and target are named.
DROP INDEX deliveries_state;

-- migrate: 9

-- What the front door keeps between runs, and that replicas share: the ACME account and the
-- certificates it obtained (so a restart orders nothing new), and the address lists that
-- providers publish (so a failed refresh keeps the last good one). One row per name, the
-- value as text (JSON or PEM), readable with `SELECT name, updated_at FROM kept`.
CREATE TABLE kept (
    name       TEXT PRIMARY KEY,
    value      TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
