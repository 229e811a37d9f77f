//! The configuration reference: every table of the file, every key it takes, its default
//! and what it means, as data. `hookinbox generate` renders it into the man page's
//! CONFIGURATION section.
//!
//! Invariant (kept by the tests below): each section lists exactly the keys its table
//! accepts — read from the parser's own "unknown field, expected …" error, not from a copy —
//! and every default it states is one the file may write without changing anything.
//!
//! To document a new key, add one [`Key`] to its section's `keys`. A kind of target lists
//! its own keys and tables in its file (`targets`); they are gathered here. A
//! scheme's own settings (`public_url`, `hmac = {…}`, `topics`, …) are not listed here:
//! docs/providers.md has a configuration to copy for every scheme, and the test suite
//! drives each one.

use crate::manual::{IfAbsent, Key, Section};
use crate::targets;

/// What the man page says before the tables.
pub const INTRO: &str = "One TOML file: --config FILE, or $HOOKINBOX_CONFIG; else \
    /etc/hookinbox/hookinbox.toml if it exists, else ./hookinbox.toml. An unknown key, a bad \
    value or a secret that cannot be loaded stops start-up with a message naming the file \
    and the key; hookinbox check validates a file without starting anything, and warns \
    about what works but should not be so.";

/// The forms values are written in, shared by many keys.
pub const FORMS: &[(&str, &str)] = &[
    (
        "duration",
        "A number and a unit, as text: \"500ms\", \"30s\", \"5m\", \"1h 30m\", \"30d\".",
    ),
    (
        "size",
        "A number and a unit, as text: \"512KiB\", \"1MiB\", \"2 MB\"; a bare number is bytes.",
    ),
    (
        "address",
        "An IP address and a port, as text: \"127.0.0.1:8080\", \"[::1]:8080\", \
         \"0.0.0.0:443\".",
    ),
    (
        "secret",
        "Where a secret is read from: \"env:NAME\", \"file:/path\" (one trailing newline \
         is dropped), \"credential:NAME\" (systemd LoadCredential=, read from \
         $CREDENTIALS_DIRECTORY), or the secret itself (check warns about that).",
    ),
    (
        "path",
        "A file name, as text; a relative one is relative to the directory of the \
         configuration file.",
    ),
    (
        "JSON pointer",
        "RFC 6901, as text: \"/id\", \"/data/object/id\".",
    ),
];

/// Every table, in the order the man page shows them: the targets' kinds add theirs after
/// `[[sources.targets]]`.
pub const SECTIONS: &[Section] = &gather::<_, { total(&SECTION_PARTS) }>(TARGETS, &SECTION_PARTS);

const SECTION_PARTS: [&[Section]; 4] = [FILE, &[TARGETS], &KIND_SECTIONS, &[ALERTS]];

const KIND_SECTIONS: [Section; total(targets::SECTIONS)] = gather(TARGETS, targets::SECTIONS);

/// The tables before the targets'.
const FILE: &[Section] = &[
    Section {
        header: "[server]",
        about: "The public webhook listener and its limits. A reload (SIGHUP) applies \
                trusted_proxies and allow_lists and re-reads the TLS files; the rest only a \
                restart applies.",
        keys: &[
            Key {
                name: "listen",
                form: "address",
                if_absent: IfAbsent::Default("\"127.0.0.1:8080\""),
                meaning: "Where providers' requests arrive, at POST /hooks/NAME. Keep it \
                          behind a TLS proxy, or set [server.tls]. With hookinbox.socket \
                          enabled, systemd binds the port and serve listens on the socket it \
                          passes (socket activation); keep this its address, which sign \
                          and check show.",
            },
            Key {
                name: "max_body",
                form: "size",
                if_absent: IfAbsent::Default("\"1MiB\""),
                meaning: "The largest body accepted; a larger one is answered 413 without \
                          being read. At most 64MiB.",
            },
            Key {
                name: "header_timeout",
                form: "duration",
                if_absent: IfAbsent::Default("\"10s\""),
                meaning: "How long a client may take to send its request head; also how \
                          long an idle keep-alive connection stays open. At most 1h.",
            },
            Key {
                name: "body_timeout",
                form: "duration",
                if_absent: IfAbsent::Default("\"10s\""),
                meaning: "How long a client may take to send its body once the head \
                          arrived (408 after it). At most 1h.",
            },
            Key {
                name: "max_connections",
                form: "integer",
                if_absent: IfAbsent::Default("1024"),
                meaning: "Connections served at once, 1 to 65536. At the cap, the \
                          connection that has been idle longest is closed to make room \
                          (a new one only after 100 ms without a request).",
            },
            Key {
                name: "body_budget",
                form: "size",
                if_absent: IfAbsent::Default("\"64MiB\""),
                meaning: "Bytes of request bodies held in memory at once, all connections \
                          together: what bounds memory. At least max_body, at most 4GiB. A \
                          body that finds no room within a second is answered 503.",
            },
            Key {
                name: "min_body_rate",
                form: "size a second",
                if_absent: IfAbsent::Default("\"1KiB/s\""),
                meaning: "The slowest a body may arrive: after its first second it must \
                          have averaged this rate, or the connection is closed (408 if it \
                          still reads). \"0/s\" turns the floor off; body_timeout still \
                          applies. At the connection cap a connection still sending a body \
                          is closed to make room like an idle one; a body that arrived \
                          whole is never cut.",
            },
            Key {
                name: "trusted_proxies",
                form: "list of addresses or ranges",
                if_absent: IfAbsent::Default("[]"),
                meaning: "Peers whose X-Forwarded-For is believed, like \"127.0.0.1\" or \
                          \"10.0.0.0/8\". The client is then the nearest address from the \
                          right that is not a trusted proxy; it is logged and stored with \
                          the event.",
            },
            Key {
                name: "allow_lists",
                form: "table of provider = URL",
                if_absent: IfAbsent::Derived("each provider's own list"),
                meaning: "Where a provider's list of webhook addresses, as a source's \
                          allow_from names it, is fetched from instead of the provider's \
                          own URL: a mirror for a machine that cannot reach the provider, \
                          or a local stand-in, like { github = \"https://mirror.internal/\
                          github-meta.json\" }. The document must have the provider's \
                          shape. https:// only, except to this machine.",
            },
            Key {
                name: "tls",
                form: "table",
                if_absent: IfAbsent::Off,
                meaning: "HTTPS on the public listener: see [server.tls]. Without it the \
                          listener speaks plain HTTP.",
            },
        ],
    },
    Section {
        header: "[server.tls]",
        about: "HTTPS on the public listener (HTTP/1.1, rustls): certificate files (cert and \
                key), or certificates obtained by ACME ([server.tls.acme]). The files are read \
                at start-up, again on every reload, and whenever they change on disk (looked \
                at every few seconds), so a renewed certificate needs no restart; switching \
                TLS on or off, or between files and ACME, does.",
        keys: &[
            Key {
                name: "cert",
                form: "path",
                if_absent: IfAbsent::Off,
                meaning: "The PEM certificate chain, leaf first. With key; not with acme.",
            },
            Key {
                name: "key",
                form: "path",
                if_absent: IfAbsent::Off,
                meaning: "Its private key, PEM (PKCS#8, PKCS#1 or SEC1). With cert.",
            },
            Key {
                name: "acme",
                form: "table",
                if_absent: IfAbsent::Off,
                meaning: "Certificates obtained and renewed by ACME: see [server.tls.acme].",
            },
        ],
    },
    Section {
        header: "[server.tls.acme]",
        about: "Certificates by ACME (RFC 8555), from Let's Encrypt by default. hookinbox \
                proves each name with the TLS-ALPN-01 challenge on its own listener, so the \
                names must resolve to it and the ACME server must reach it on port 443 \
                (server.listen = \"0.0.0.0:443\", or a forward of 443 to it); no port 80 is \
                needed, unless http01_listen asks for HTTP-01. The account (hookinbox \
                agrees to the ACME server's terms of service for it) and the certificate \
                with its private key are kept in the inbox, and so in its backups: a \
                restart orders nothing, and PostgreSQL replicas share one (one replica \
                orders at a time, and every replica answers its validations, wherever the \
                name leads). Until a certificate exists the listener completes no handshake \
                and /readyz says why. It is renewed at two thirds of its lifetime, without a \
                restart; a failure is retried after 1 minute, doubling up to 6 hours. A \
                change here takes a restart.",
        keys: &[
            Key {
                name: "domains",
                form: "list of DNS names",
                if_absent: IfAbsent::Required,
                meaning: "The names on the one certificate, like [\"hooks.example.com\"]. No \
                          wildcards (TLS-ALPN-01 cannot prove them) and no IP addresses.",
            },
            Key {
                name: "contact",
                form: "mailto: URL",
                if_absent: IfAbsent::Off,
                meaning: "The account's contact, like \"mailto:ops@example.com\", for the \
                          ACME server's notices.",
            },
            Key {
                name: "directory",
                form: "https URL",
                if_absent: IfAbsent::Default("\"https://acme-v02.api.letsencrypt.org/directory\""),
                meaning: "The ACME server's directory. Let's Encrypt's staging server is \
                          \"https://acme-staging-v02.api.letsencrypt.org/directory\".",
            },
            Key {
                name: "directory_ca",
                form: "path",
                if_absent: IfAbsent::Off,
                meaning: "A PEM file with the CA certificate trusted for the ACME server's \
                          HTTPS instead of the system's store (a private or test ACME server).",
            },
            Key {
                name: "http01_listen",
                form: "address",
                if_absent: IfAbsent::Off,
                meaning: "Prove the names with HTTP-01 instead: a plain HTTP listener, like \
                          \"0.0.0.0:80\", that answers only the ACME server's \
                          /.well-known/acme-challenge/ requests (404 to everything else). For \
                          a TCP load balancer that cannot pass TLS-ALPN-01's ALPN; the ACME \
                          server connects to port 80.",
            },
        ],
    },
    Section {
        header: "[admin]",
        about: "The admin listener: /metrics (Prometheus), /healthz, /readyz and the web \
                inbox at /. Only a restart applies a change.",
        keys: &[
            Key {
                name: "listen",
                form: "address",
                if_absent: IfAbsent::Default("\"127.0.0.1:9180\""),
                meaning: "Where the admin listener answers. Keep it local (browse the web \
                          inbox through an SSH tunnel); it must not share server.listen's \
                          port. With hookinbox.socket enabled, hookinbox-admin.socket binds \
                          it (keep the two equal).",
            },
            Key {
                name: "actions",
                form: "true or false",
                if_absent: IfAbsent::Default("false"),
                meaning: "Whether the web inbox may replay events and pause or resume \
                          targets. Off, it only reads.",
            },
            Key {
                name: "hosts",
                form: "list of host names",
                if_absent: IfAbsent::Default("[]"),
                meaning: "Names the admin listener answers to besides IP addresses and \
                          localhost (a name a reverse proxy forwards under, the name a \
                          scraper uses); any other Host gets 421 on every path, /metrics \
                          and /readyz included.",
            },
        ],
    },
    Section {
        header: "[store]",
        about: "The inbox: a SQLite file in WAL mode by default, or a PostgreSQL database \
                that several serve replicas share. Only a restart applies a change.",
        keys: &[
            Key {
                name: "path",
                form: "path",
                if_absent: IfAbsent::Required,
                meaning: "The inbox file, like \"/var/lib/hookinbox/inbox.db\"; serve \
                          creates it. One serve per inbox (serve locks inbox.db.lock). With \
                          backend = \"postgres\" it only places serve's local files (the \
                          reload status) and names the file migrate-store copies.",
            },
            Key {
                name: "backend",
                form: "\"sqlite\" or \"postgres\"",
                if_absent: IfAbsent::Default("\"sqlite\""),
                meaning: "Where the inbox lives. \"postgres\": the database at url, its \
                          schema made and migrated by serve at start; every replica answers \
                          2xx only after PostgreSQL committed (synchronous_commit on); \
                          the operator commands and the web inbox read and steer it as \
                          they do a file (backup excepted: use pg_dump).",
            },
            Key {
                name: "url",
                form: "URL",
                if_absent: IfAbsent::Derived("required with backend = \"postgres\""),
                meaning: "With backend = \"postgres\": postgres://USER@HOST/DATABASE, \
                          without a password and without sslmode.",
            },
            Key {
                name: "password",
                form: "secret",
                if_absent: IfAbsent::Off,
                meaning: "The database password, as any secret spec \
                          (\"file:/etc/hookinbox/secrets/pg\", \"credential:pg\").",
            },
            Key {
                name: "tls",
                form: "\"verify-full\" or \"off\"",
                if_absent: IfAbsent::Derived("\"off\" to this machine, else \"verify-full\""),
                meaning: "TLS to PostgreSQL with rustls: the certificate checked against the \
                          system's roots (or ca) and the host name. \"off\" only to this \
                          machine.",
            },
            Key {
                name: "ca",
                form: "path",
                if_absent: IfAbsent::Derived("the system's roots"),
                meaning: "A PEM file of the CA certificates the server's certificate is \
                          checked against.",
            },
            Key {
                name: "pool",
                form: "1 to 64",
                if_absent: IfAbsent::Derived("4 with backend = \"postgres\""),
                meaning: "Connections each replica reads with (what is due, the events to \
                          send, the gauges), besides one that commits received events and \
                          one for the delivery queue.",
            },
            Key {
                name: "synchronous",
                form: "\"full\" or \"normal\"",
                if_absent: IfAbsent::Default("\"full\""),
                meaning: "\"full\" syncs every commit to disk, so an answered event survives \
                          a power loss; \"normal\" survives only a crash of the process.",
            },
            Key {
                name: "retention_interval",
                form: "duration",
                if_absent: IfAbsent::Default("\"10m\""),
                meaning: "How often serve applies the sources' retention windows and gives \
                          freed pages back to the file system, 1s to 1d.",
            },
        ],
    },
    Section {
        header: "[[sources]]",
        about: "One per provider endpoint, served at /hooks/NAME with the methods its \
                provider uses. Any other key of the table is a setting of the source's \
                scheme (public_url, hmac, topics, verify_token, …): providers.md \
                (/usr/share/doc/hookinbox/providers.md) has a configuration to copy for \
                every scheme. A reload (SIGHUP) applies every change to sources and targets.",
        keys: &[
            Key {
                name: "name",
                form: "text",
                if_absent: IfAbsent::Required,
                meaning: "1 to 64 of a-z, 0-9, - and _; unique. The URL path segment, and \
                          part of every event's identity.",
            },
            Key {
                name: "scheme",
                form: "text",
                if_absent: IfAbsent::Required,
                meaning: "The provider, which decides how requests are verified and what \
                          identifies an event: one of the schemes listed below.",
            },
            Key {
                name: "secrets",
                form: "list of secrets",
                if_absent: IfAbsent::Off,
                meaning: "The provider's signing secrets or public keys. Several = \
                          rotation: any one verifies. Most schemes need at least one; a \
                          few take none (their trust comes from elsewhere).",
            },
            Key {
                name: "account",
                form: "text",
                if_absent: IfAbsent::Default("\"\""),
                meaning: "A scope inside the identity, for one source serving several \
                          accounts of a provider.",
            },
            Key {
                name: "tolerance",
                form: "duration",
                if_absent: IfAbsent::Derived("the scheme's window, 5m for most"),
                meaning: "How far a signed timestamp may be from now, either way, 1s to 7d. \
                          Only for schemes that sign one.",
            },
            Key {
                name: "on_conflict",
                form: "HTTP status",
                if_absent: IfAbsent::Default("409"),
                meaning: "The answer to an event id already stored with different bytes \
                          (200 to 599). The new version is quarantined (hookinbox \
                          conflicts), never forwarded.",
            },
            Key {
                name: "keep_payload",
                form: "duration",
                if_absent: IfAbsent::Default("\"30d\""),
                meaning: "Bodies and headers of finished events are dropped after this \
                          (the identity row stays, so a late redelivery is still a \
                          duplicate); conflicts and attempt history too.",
            },
            Key {
                name: "keep_identity",
                form: "duration",
                if_absent: IfAbsent::Default("\"400d\""),
                meaning: "Identity rows, with their deliveries and attempts, are dropped \
                          after this. At least keep_payload; check warns when it is shorter \
                          than the provider's redelivery horizon.",
            },
            Key {
                name: "expect_every",
                form: "duration",
                if_absent: IfAbsent::Off,
                meaning: "The source is silent (an alert) when no new event arrived for this \
                          long. At least 1s.",
            },
            Key {
                name: "id_header",
                form: "header name",
                if_absent: IfAbsent::Derived("the scheme's event id"),
                meaning: "Take the event id from this header. At most one of id_header, \
                          id_pointer and id; refused where the scheme signs its own id.",
            },
            Key {
                name: "id_pointer",
                form: "JSON pointer",
                if_absent: IfAbsent::Derived("the scheme's event id"),
                meaning: "Take the event id from the body, at this pointer.",
            },
            Key {
                name: "id",
                form: "text, or a list of text",
                if_absent: IfAbsent::Derived("the scheme's event id"),
                meaning: "The event id as a rule: \"sha256\" (the body's hash), \
                          \"header:NAME\" or a JSON pointer; or a list of two or more of \
                          those, joined with \":\".",
            },
            Key {
                name: "order",
                form: "table",
                if_absent: IfAbsent::Off,
                meaning: "Deliver events that share a key one at a time, in version order: \
                          see [sources.order]. Without it, events are delivered as they \
                          come.",
            },
            Key {
                name: "recover",
                form: "table",
                if_absent: IfAbsent::Off,
                meaning: "Fill the source's gaps from its provider's API (github, stripe): \
                          see [sources.recover]. Without it, hookinbox gaps still lists them \
                          and hookinbox recover cannot run for the source.",
            },
            Key {
                name: "allow_from",
                form: "list of addresses, ranges or provider names",
                if_absent: IfAbsent::Off,
                meaning: "Take requests only from these clients (the peer, or what a \
                          trusted proxy says): \"192.30.252.0/22\", \"2a0a:a440::/29\", \
                          \"203.0.113.7\", or a provider that publishes the addresses its \
                          webhooks come from: github (its meta API's hooks), stripe, zendesk \
                          (its public IPs API's egress addresses). Any \
                          other client is answered 403 before its body is read. A provider's \
                          list is fetched at start-up and daily, and kept in the inbox: a \
                          failed fetch, or a restart, goes on with the last good one; while \
                          none was ever had, what it would allow is answered 503 (the \
                          provider retries). Without allow_from, any address.",
            },
            Key {
                name: "targets",
                form: "list of tables",
                if_absent: IfAbsent::Off,
                meaning: "Where events are forwarded: see [[sources.targets]]; several = \
                          fan-out. Without any, events are stored and not forwarded.",
            },
        ],
    },
    Section {
        header: "[sources.order]",
        about: "Per-source ordering, also written inline: order = { key = \"/data/object/id\", \
                version = \"/created\" }. An event whose version is not newer than the last \
                one delivered for its key is superseded, not sent.",
        keys: &[
            Key {
                name: "key",
                form: "JSON pointer",
                if_absent: IfAbsent::Required,
                meaning: "What groups events: the object they are about.",
            },
            Key {
                name: "version",
                form: "JSON pointer",
                if_absent: IfAbsent::Required,
                meaning: "What orders them: a number, or text that sorts (digit strings \
                          compare as numbers).",
            },
        ],
    },
    Section {
        header: "[sources.recover]",
        about: "What serve asks the provider for after a gap (a downtime found at start-up, \
                a run of refused requests) and every `every` as a safety net; also \
                hookinbox recover. Also written inline: recover = { api = \"github\", repo \
                = \"owner/name\", hook_id = 123, token = \"file:…\" }. GitHub redelivers \
                what is missing (signed, through the normal path); Stripe's missing events \
                are fetched and stored with origin api.",
        keys: &[
            Key {
                name: "api",
                form: "github or stripe",
                if_absent: IfAbsent::Required,
                meaning: "The provider API; it must be the source's own scheme.",
            },
            Key {
                name: "api_url",
                form: "URL",
                if_absent: IfAbsent::Derived("https://api.github.com, https://api.stripe.com"),
                meaning: "The API's base URL: GitHub Enterprise Server's                           (https://HOST/api/v3), or a local stand-in. https:// only, except                           to this machine.",
            },
            Key {
                name: "every",
                form: "duration",
                if_absent: IfAbsent::Default("\"1h\""),
                meaning: "How often serve also recovers the last stretch of time (1m to 7d).",
            },
            Key {
                name: "repo",
                form: "owner/name",
                if_absent: IfAbsent::Off,
                meaning: "github: the repository of a repository hook (with hook_id).",
            },
            Key {
                name: "org",
                form: "text",
                if_absent: IfAbsent::Off,
                meaning: "github: the organisation of an organisation hook (with hook_id).",
            },
            Key {
                name: "hook_id",
                form: "integer",
                if_absent: IfAbsent::Off,
                meaning: "github: the hook's id, the number ending its settings URL.",
            },
            Key {
                name: "token",
                form: "secret spec",
                if_absent: IfAbsent::Off,
                meaning: "github: a token that may read and redeliver the hook's deliveries \
                          (fine-grained: Webhooks read and write), for repo and org hooks.",
            },
            Key {
                name: "app_id",
                form: "integer",
                if_absent: IfAbsent::Off,
                meaning: "github: a GitHub App's id; with private_key and neither repo nor \
                          org, recovery reads the App's own hook with a JWT.",
            },
            Key {
                name: "private_key",
                form: "secret spec",
                if_absent: IfAbsent::Off,
                meaning: "github: the App's private key (the PEM GitHub gave).",
            },
            Key {
                name: "key",
                form: "secret spec",
                if_absent: IfAbsent::Off,
                meaning: "stripe: a restricted key (rk_…) with read access to Events.",
            },
            Key {
                name: "types",
                form: "list of text",
                if_absent: IfAbsent::Off,
                meaning: "stripe: only events of these types (at most 20; invoice.* allowed), \
                          as the endpoint subscribes to them. Without it, every event the \
                          account's failed deliveries name.",
            },
        ],
    },
];

const TARGETS: Section = Section {
    header: "[[sources.targets]]",
    about: "One per place a source's events are forwarded to, each with its own queue, \
            retries and idempotency key (Idempotency-Key, the same on every attempt and \
            replay). A 2xx answer or exit status 0 means delivered; 410 gives up at \
            once; 429 and 503 wait for Retry-After.",
    keys: TARGET_KEYS,
};

const ALERTS: Section = Section {
    header: "[[alerts]]",
    about: "Where alerts (a silent source, a failing target, rejections rising, new \
            conflicts, new dead deliveries) are sent when they start and end: a JSON \
            POST, or a command's stdin. Each is a target of the internal source \
            hookinbox.alerts, delivered from the inbox like a webhook and retried across \
            restarts: it takes the keys of [[sources.targets]] (the alert_ keys mean \
            nothing for it).",
    keys: TARGET_KEYS,
};

/// The keys of a target: `[[sources.targets]]`, and `[[alerts]]`, whose entries are targets
/// too. Its name, then each kind's keys, then the keys every target takes.
const TARGET_KEYS: &[Key] = &gather::<_, { total(&TARGET_PARTS) }>(NAME, &TARGET_PARTS);

const TARGET_PARTS: [&[Key]; 3] = [&[NAME], &KIND_KEYS, TARGET_COMMON_KEYS];

const KIND_KEYS: [Key; total(targets::KEYS)] = gather(NAME, targets::KEYS);

const NAME: Key = Key {
    name: "name",
    form: "text",
    if_absent: IfAbsent::Required,
    meaning: "1 to 64 of a-z, 0-9, - and _; unique within the source, and part \
                  of the idempotency key.",
};

const TARGET_COMMON_KEYS: &[Key] = &[
    Key {
        name: "timeout",
        form: "duration",
        if_absent: IfAbsent::Default("\"15s\""),
        meaning: "The whole attempt: connect, send, answer (or the command's run \
                      time; then it is killed). At most 1h.",
    },
    Key {
        name: "retry",
        form: "list of durations",
        if_absent: IfAbsent::Default("[\"5s\", \"5m\", \"30m\", \"2h\", \"5h\", \"10h\", \"10h\"]"),
        meaning: "The waits between attempts, each varied by up to 20% and at most \
                      7d: one attempt more than waits, then the delivery is dead \
                      (hookinbox dead, hookinbox replay).",
    },
    Key {
        name: "concurrency",
        form: "integer",
        if_absent: IfAbsent::Default("4"),
        meaning: "Attempts in flight at once for this target, 1 to 256. Between two \
                      attempts a slot waits for the inbox to record the result and claim \
                      the next delivery (about a commit), so a slot takes at most about a \
                      thousand deliveries a second, however fast the target answers: raise \
                      it for a fast app that must keep up with more.",
    },
    Key {
        name: "lease",
        form: "duration",
        if_absent: IfAbsent::Derived("timeout + 30s"),
        meaning: "How long a claimed delivery stays claimed: after a crash \
                      mid-attempt it is tried again once this has passed. At least \
                      timeout + 5s, at most 2h.",
    },
    Key {
        name: "rate",
        form: "N/s, N/m or N/h",
        if_absent: IfAbsent::Off,
        meaning: "Attempts start no faster than this (a tenth of a second's worth may start \
                  together, at least one), beside concurrency: a backlog after an outage \
                  does not flatten the app. N from 1 to 1000000.",
    },
    Key {
        name: "alert_failure_share",
        form: "number above 0, at most 1",
        if_absent: IfAbsent::Default("0.5"),
        meaning: "The target is failing (an alert) when this share of its attempts \
                      in the last 10 minutes failed (at least 3 attempts).",
    },
    Key {
        name: "alert_pending_age",
        form: "duration",
        if_absent: IfAbsent::Default("\"15m\""),
        meaning: "…or when its oldest pending delivery has waited longer than this. \
                      A paused target is never failing.",
    },
];

/// The number of items in `parts`.
const fn total<T>(parts: &[&[T]]) -> usize {
    let (mut n, mut i) = (0, 0);
    while i < parts.len() {
        n += parts[i].len();
        i += 1;
    }
    n
}

/// `parts` one after the other, gathered at compile time so that the tables stay constants
/// whatever kinds of target there are. `N` is their [`total`]; `filler` is overwritten (a
/// const fn makes no value from nothing).
const fn gather<T: Copy, const N: usize>(filler: T, parts: &[&[T]]) -> [T; N] {
    let mut out = [filler; N];
    let (mut n, mut i) = (0, 0);
    while i < parts.len() {
        let mut j = 0;
        while j < parts[i].len() {
            out[n] = parts[i][j];
            n += 1;
            j += 1;
        }
        i += 1;
    }
    assert!(n == N, "N is the parts' total");
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    use super::*;

    /// A file with every table the reference describes, each as small as it may be.
    /// `[server.tls]` is added only where asked: its files are read while validating.
    /// A target of each kind, named after it, as its kind's example writes it.
    fn base(with_tls: bool) -> String {
        let tls = if with_tls {
            "[server.tls]\ncert = \"cert.pem\"\nkey = \"key.pem\"\n"
        } else {
            ""
        };
        let targets: String = targets::NAMES
            .iter()
            .zip(targets::EXAMPLES)
            .map(|(name, example)| format!("[[sources.targets]]\nname = \"{name}\"\n{example}\n"))
            .collect();
        format!(
            "[server]\n{tls}\
             [admin]\n\
             [store]\npath = \"inbox.db\"\n\
             [[sources]]\nname = \"demo\"\nscheme = \"standard-webhooks\"\n\
             secrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]\n\
             [sources.order]\nkey = \"/k\"\nversion = \"/v\"\n\
             {targets}\
             [[sources]]\nname = \"gh\"\nscheme = \"github\"\nsecrets = [\"s\"]\n\
             [sources.recover]\napi = \"github\"\nrepo = \"o/r\"\nhook_id = 1\ntoken = \"t\"\n\
             [[alerts]]\nname = \"ops\"\nurl = \"http://127.0.0.1:3001/alerts\"\n"
        )
    }

    /// `text` with `line` written into the table `header` opens (at the top: the file's
    /// own keys).
    fn with_line(text: &str, header: Option<&str>, line: &str) -> String {
        match header {
            None => format!("{line}\n{text}"),
            Some(h) => {
                let opening = format!("{h}\n");
                assert!(text.contains(&opening), "the base has no {h}");
                text.replacen(&opening, &format!("{opening}{line}\n"), 1)
            }
        }
    }

    /// The base for keys of `header`: with the `[server.tls]` or `[server.tls.acme]` it
    /// needs.
    fn base_for(header: Option<&str>) -> String {
        match header {
            Some("[server.tls]") => base(true),
            Some("[server.tls.acme]") => base(false).replacen(
                "[server]\n",
                "[server]\n[server.tls.acme]\ndomains = [\"hooks.example.com\"]\n",
                1,
            ),
            _ => base(false),
        }
    }

    fn load(text: &str) -> anyhow::Result<super::super::Config> {
        super::super::from_str(text, Path::new("/nonexistent/hookinbox.toml"), None)
    }

    /// The keys a table accepts, as the parser says when it meets one it does not: serde's
    /// "unknown field `x`, expected one of `a`, `b`" (or "expected `a` or `b`").
    fn accepted_keys(header: Option<&str>) -> BTreeSet<String> {
        let bogus = "not_a_key_anywhere";
        let text = with_line(&base_for(header), header, &format!("{bogus} = 1"));
        let error = format!("{:#}", load(&text).unwrap_err());
        let (_, expected) = error
            .split_once(&format!("unknown field `{bogus}`, expected "))
            .unwrap_or_else(|| panic!("{header:?}: not an unknown-field error: {error}"));
        let expected = expected.lines().next().unwrap();
        expected
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    }

    fn documented(section: &Section) -> BTreeSet<String> {
        section.keys.iter().map(|k| k.name.to_owned()).collect()
    }

    fn section(header: &str) -> &'static Section {
        SECTIONS
            .iter()
            .find(|s| s.header == header)
            .unwrap_or_else(|| panic!("no section {header}"))
    }

    #[test]
    fn every_strict_table_is_documented_with_exactly_the_keys_it_accepts() {
        for s in SECTIONS.iter().filter(|s| s.header != "[[sources]]") {
            assert_eq!(
                documented(s),
                accepted_keys(Some(s.header)),
                "{}: the reference and the parser disagree; add or remove its Key",
                s.header
            );
        }
        // The file's own keys are its top-level tables.
        let tables: BTreeSet<String> = SECTIONS
            .iter()
            .map(|s| s.path().split('.').next().unwrap().to_owned())
            .collect();
        assert_eq!(tables, accepted_keys(None), "top-level tables");
    }

    #[test]
    fn a_source_is_documented_with_exactly_the_keys_every_source_takes() {
        use crate::scheme::setup::COMMON_KEYS;
        // A `[[sources]]` table hands the keys it does not know to its scheme, so serde has
        // no "expected" list to read. The list operators are shown instead is COMMON_KEYS
        // (the unknown-key error below prints it), and this binding names every field of
        // RawSource: a field added there fails to compile here until it is named, and then
        // the assertion asks for it in COMMON_KEYS and in the reference.
        macro_rules! fields {
            ($($field:ident),*) => {{
                #[allow(dead_code)]
                fn exhaustive(s: super::super::raw::RawSource) {
                    let super::super::raw::RawSource { $($field: _,)* settings: _ } = s;
                }
                [$(stringify!($field)),*]
            }};
        }
        let fields = fields!(
            name,
            scheme,
            secrets,
            account,
            tolerance,
            on_conflict,
            keep_payload,
            keep_identity,
            expect_every,
            id_header,
            id_pointer,
            id,
            order,
            recover,
            allow_from,
            targets
        );
        let fields: BTreeSet<String> = fields.iter().map(|f| f.to_string()).collect();
        let common: BTreeSet<String> = COMMON_KEYS.iter().map(|k| k.to_string()).collect();
        assert_eq!(fields, common, "RawSource's fields and COMMON_KEYS");
        assert_eq!(documented(section("[[sources]]")), common);

        let text = with_line(&base(false), Some("[[sources]]"), "not_a_key_anywhere = 1");
        let error = format!("{:#}", load(&text).unwrap_err());
        assert!(
            error.contains("not_a_key_anywhere") && error.contains(&COMMON_KEYS.join(", ")),
            "{error}"
        );
    }

    #[test]
    fn writing_a_stated_default_changes_nothing() {
        let plain = format!("{:?}", load(&base(false)).unwrap());
        let mut checked = 0;
        for s in SECTIONS {
            for key in s.keys {
                let IfAbsent::Default(value) = key.if_absent else {
                    continue;
                };
                let base = base_for(Some(s.header));
                let plain = format!("{:?}", load(&base).unwrap());
                let text = with_line(&base, Some(s.header), &format!("{} = {value}", key.name));
                let written = load(&text)
                    .unwrap_or_else(|e| panic!("{} {} = {value}: {e:#}", s.header, key.name));
                // Compared whole, but not printed whole: the message says what differs.
                assert!(
                    format!("{written:?}") == plain,
                    "{} {}: writing the stated default {value} changed the configuration",
                    s.header,
                    key.name
                );
                checked += 1;
            }
        }
        // And the check can fail: a value that is not the default does change it.
        let text = with_line(&base(false), Some("[server]"), "max_body = \"2MiB\"");
        assert_ne!(format!("{:?}", load(&text).unwrap()), plain);
        assert!(checked >= 15, "{checked}");
    }

    #[test]
    fn the_stated_defaults_are_the_named_constants() {
        use super::super::*;
        let default = |header: &str, name: &str| -> &'static str {
            match section(header)
                .keys
                .iter()
                .find(|k| k.name == name)
                .unwrap()
                .if_absent
            {
                IfAbsent::Default(v) => v.trim_matches('"'),
                other => panic!("{header} {name}: {other:?}"),
            }
        };
        let size = |h, n| parse_size(default(h, n)).unwrap();
        let duration = |h, n| parse_duration(default(h, n)).unwrap();
        assert_eq!(size("[server]", "max_body"), DEFAULT_MAX_BODY);
        assert_eq!(default("[server.tls.acme]", "directory"), LETS_ENCRYPT);
        assert_eq!(size("[server]", "body_budget"), DEFAULT_BODY_BUDGET);
        assert_eq!(
            duration("[server]", "header_timeout"),
            DEFAULT_HEADER_TIMEOUT
        );
        assert_eq!(duration("[server]", "body_timeout"), DEFAULT_BODY_TIMEOUT);
        assert_eq!(
            default("[server]", "max_connections"),
            DEFAULT_MAX_CONNECTIONS.to_string()
        );
        assert_eq!(
            duration("[store]", "retention_interval"),
            DEFAULT_RETENTION_INTERVAL
        );
        assert_eq!(
            default("[[sources]]", "on_conflict"),
            DEFAULT_ON_CONFLICT.to_string()
        );
        assert_eq!(
            duration("[[sources]]", "keep_payload"),
            DEFAULT_KEEP_PAYLOAD
        );
        assert_eq!(
            duration("[[sources]]", "keep_identity"),
            DEFAULT_KEEP_IDENTITY
        );
        assert_eq!(
            duration("[[sources.targets]]", "timeout"),
            DEFAULT_TARGET_TIMEOUT
        );
        assert_eq!(
            default("[[sources.targets]]", "concurrency"),
            DEFAULT_TARGET_CONCURRENCY.to_string()
        );
        let retry: Vec<String> = toml::from_str::<toml::Table>(&format!(
            "retry = {}",
            default("[[sources.targets]]", "retry")
        ))
        .unwrap()["retry"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect();
        let retry: Vec<_> = retry.iter().map(|r| parse_duration(r).unwrap()).collect();
        assert_eq!(retry, DEFAULT_RETRY);
        let lease = section("[[sources.targets]]")
            .keys
            .iter()
            .find(|k| k.name == "lease");
        assert_eq!(lease.unwrap().if_absent, IfAbsent::Derived("timeout + 30s"),);
        assert_eq!(LEASE_MARGIN, parse_duration("30s").unwrap());
    }
}
