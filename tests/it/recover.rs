//! Recovering what was sent while hookinbox was not receiving, against local stand-ins for
//! GitHub's and Stripe's APIs (`provider_api`) that behave as their documentation says:
//! a downtime after a SIGKILL is found at the next start and exactly the missing GitHub
//! deliveries are redelivered, signed, once; Stripe's missing events are stored with origin
//! `api` and a later webhook of one is a duplicate; a run of 401s is a gap; rate limits are
//! waited out; an API failure changes nothing and says so. The two downtimes run on SQLite
//! and on PostgreSQL.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::proc::Proc;
use crate::provider_api::{FakeGitHub, FakeStripe};
use crate::sink::{Reply, Sink};
use crate::support::*;

const TOKEN: &str = "github_pat_test_token";
const GH_SECRET: &str = "It's a Secret to Everybody";
const STRIPE_KEY: &str = "rk_test_recover_1234";
const STRIPE_SECRET: &str = "whsec_test_recover";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A config for the real binary listening on `port`, with its inbox on `backend`: a
/// provider's stand-in must know the URL it delivers to before hookinbox starts, and again
/// after a restart. None when there is no PostgreSQL server (after `skip` said so).
async fn on_port(
    backend: Backend,
    test: &str,
    port: u16,
    sources: &str,
) -> Option<(tempfile::TempDir, Inbox, std::path::PathBuf)> {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("inbox.db");
    let config = dir.path().join("hookinbox.toml");
    let server =
        format!("[server]\nlisten = \"127.0.0.1:{port}\"\n[admin]\nlisten = \"127.0.0.1:0\"\n");
    let (store, inbox) = match backend {
        Backend::Sqlite => (String::new(), Inbox::Sqlite(db.clone())),
        Backend::Postgres => {
            let url = fresh_database(&postgres(test)?).await;
            (pg_store(&url), Inbox::Postgres(url))
        }
    };
    std::fs::write(&config, config_text_store(&server, &db, &store, sources)).unwrap();
    Some((dir, inbox, config))
}

fn github_source(fake: &FakeGitHub, sink: &Sink, secret: &str) -> String {
    format!(
        r#"
[[sources]]
name = "gh"
scheme = "github"
secrets = ["{secret}"]
recover = {{ api = "github", repo = "octo/app", hook_id = {hook}, token = "{TOKEN}", api_url = "{api}" }}
[[sources.targets]]
name = "app"
url = "{sink}"
retry = ["200ms"]
timeout = "2s"
lease = "7s"
"#,
        hook = fake.hook_id,
        api = fake.url,
        sink = sink.url(),
    )
}

fn stripe_source(fake: &FakeStripe, sink: &Sink) -> String {
    format!(
        r#"
[[sources]]
name = "stripe"
scheme = "stripe"
secrets = ["{STRIPE_SECRET}"]
recover = {{ api = "stripe", key = "{STRIPE_KEY}", api_url = "{api}" }}
[[sources.targets]]
name = "app"
url = "{sink}"
retry = ["200ms"]
"#,
        api = fake.url,
        sink = sink.url(),
    )
}

fn body(guid: &str) -> Vec<u8> {
    format!(r#"{{"action":"opened","issue":{{"number":1,"title":"{guid}"}}}}"#).into_bytes()
}

async fn eventually(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn event_ids(inbox: &Inbox, source: &str) -> BTreeSet<String> {
    inbox
        .strings(&format!(
            "SELECT event_id FROM events WHERE source = '{source}'"
        ))
        .into_iter()
        .collect()
}

/// A sink, a server, and a GitHub stand-in delivering to the server's `/hooks/gh` (the
/// server gets its `gh` source from the test, by a reload naming the stand-in).
async fn github_stand_in() -> (Sink, TestServer, FakeGitHub) {
    let sink = Sink::start(|_, _| Reply::Status(200)).await;
    let server = TestServer::start(ONE_SOURCE).await;
    let fake = FakeGitHub::start(TOKEN, GH_SECRET, &format!("{}/hooks/gh", server.base)).await;
    (sink, server, fake)
}

/// `hookinbox ARGS…` off the runtime's threads: the fakes answer it meanwhile.
async fn cli(args: &[&str]) -> (i32, String, String) {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        hookinbox(&args)
    })
    .await
    .unwrap()
}

async fn a_downtime_after_a_sigkill_is_found_and_exactly_the_missing_github_deliveries_come_back_once(
    backend: Backend,
) {
    let port = free_port();
    let sink = Sink::start(|_, _| Reply::Status(200)).await;
    let fake = FakeGitHub::start(
        TOKEN,
        GH_SECRET,
        &format!("http://127.0.0.1:{port}/hooks/gh"),
    )
    .await;
    let test = "recover::a_downtime_after_a_sigkill_is_found";
    let Some((_dir, db, config)) =
        on_port(backend, test, port, &github_source(&fake, &sink, GH_SECRET)).await
    else {
        return;
    };
    let config_arg = config.to_str().unwrap();

    // Missed hours ago, outside any gap: recovery of the downtime never touches it.
    let old = clock_now() - 5 * 3600;
    fake.record("old-missed", "issues", &body("old"), old, false);

    let first = Proc::spawn(&config);
    for guid in ["stored-1", "stored-2", "stored-3"] {
        assert_eq!(fake.deliver(guid, "issues", &body(guid)).await, 200);
    }
    first.sigkill();
    let missed = ["missed-1", "missed-2", "missed-3", "missed-4"];
    for guid in missed {
        // hookinbox is down: GitHub records a failed delivery and never tries again.
        assert_eq!(fake.deliver(guid, "issues", &body(guid)).await, 0);
    }

    let second = Proc::spawn(&config);
    eventually(
        "the missing deliveries to be redelivered",
        Duration::from_secs(30),
        || event_ids(&db, "gh").len() == 7,
    )
    .await;
    let asked: BTreeSet<String> = fake
        .redelivery_requests()
        .into_iter()
        .map(|(_, g)| g)
        .collect();
    assert_eq!(asked, missed.iter().map(|s| s.to_string()).collect());
    assert!(
        fake.api_calls().iter().any(|(m, p)| m == "GET"
            && p.starts_with(&format!(
                "/repos/octo/app/hooks/{}/deliveries",
                fake.hook_id
            ))),
        "{:?}",
        fake.api_calls()
    );

    // Every event reaches the app, each under one key.
    eventually("every event at the app", Duration::from_secs(20), || {
        sink.received()
            .iter()
            .map(|r| r.header("x-hookinbox-event-id").to_owned())
            .collect::<BTreeSet<_>>()
            .len()
            == 7
    })
    .await;
    for guid in missed {
        let keys: BTreeSet<String> = sink
            .received()
            .iter()
            .filter(|r| r.header("x-hookinbox-event-id") == guid)
            .map(|r| r.key().to_owned())
            .collect();
        assert_eq!(keys.len(), 1, "{guid}: {keys:?}");
        assert_eq!(
            sink.received()
                .iter()
                .find(|r| r.header("x-hookinbox-event-id") == guid)
                .unwrap()
                .header("x-hookinbox-origin"),
            "webhook",
            "a redelivery is a signed webhook"
        );
    }

    // The downtime is listed, with what recovery did.
    let (code, out, err) = cli(&["gaps", "--config", config_arg, "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let listed: serde_json::Value = serde_json::from_str(&out).unwrap();
    let gaps = listed["gaps"].as_array().unwrap();
    assert_eq!(gaps.len(), 1, "{out}");
    assert_eq!(gaps[0]["kind"], "down");
    assert!(
        gaps[0]["detail"].as_str().unwrap().contains("crash"),
        "{out}"
    );
    assert!(
        gaps[0]["recovery"]
            .as_str()
            .unwrap()
            .contains("asked for 4 redeliveries"),
        "{out}"
    );

    // A second run, by hand, over the last hour asks for nothing more.
    let (code, out, err) = cli(&[
        "recover", "--config", config_arg, "--source", "gh", "--since", "1h",
    ])
    .await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("nothing is missing"), "{out}");
    assert_eq!(fake.redelivery_requests().len(), 4);
    let (_, out, _) = cli(&["events", "--config", config_arg, "--source", "gh", "--json"]).await;
    let events: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        events["events"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["origin"] == "webhook")
    );
    second.sigterm();
}

fn clock_now() -> i64 {
    hookinbox::clock::unix_now()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recover_follows_pages_waits_out_rate_limits_and_a_second_run_asks_for_nothing() {
    let (sink, mut server, fake) = github_stand_in().await;
    server
        .reload(&github_source(&fake, &sink, GH_SECRET))
        .await
        .unwrap();
    let config = server.config.path.to_str().unwrap().to_owned();

    // 150 deliveries of the last half hour that never arrived, 20 that did.
    let now = clock_now();
    let mut missing = BTreeSet::new();
    for i in 0..150 {
        let guid = format!("missing-{i:03}");
        fake.record(&guid, "push", &body(&guid), now - 1800 + i, false);
        missing.insert(guid);
    }
    for i in 0..20 {
        let guid = format!("here-{i:02}");
        assert_eq!(fake.deliver(&guid, "push", &body(&guid)).await, 200);
    }

    // A dry run lists them and asks for nothing.
    let (code, out, err) = cli(&[
        "recover",
        "--config",
        &config,
        "--source",
        "gh",
        "--since",
        "1h",
        "--dry-run",
    ])
    .await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("170 listed, 20 already in the inbox"), "{out}");
    assert!(
        out.contains("would ask for a redelivery of 150 deliveries"),
        "{out}"
    );
    assert!(fake.redelivery_requests().is_empty());

    fake.rate_limit_next(1);
    fake.secondary_limit_next(1);
    let (code, out, err) = cli(&[
        "recover", "--config", &config, "--source", "gh", "--since", "1h", "--json",
    ])
    .await;
    assert_eq!(code, 0, "{out}{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["done"]["redeliveries_asked"], 150, "{out}");
    let asked: BTreeSet<String> = fake
        .redelivery_requests()
        .into_iter()
        .map(|(_, g)| g)
        .collect();
    assert_eq!(asked, missing);
    let pages = fake
        .api_calls()
        .iter()
        .filter(|(m, p)| m == "GET" && p.contains("/deliveries"))
        .count();
    assert!(
        pages >= 4,
        "two limits waited out and at least two pages: {:?}",
        fake.api_calls()
    );
    eventually(
        "the redeliveries in the inbox",
        Duration::from_secs(30),
        || event_ids(&server.inbox(), "gh").len() == 170,
    )
    .await;

    let (code, out, err) = cli(&[
        "recover", "--config", &config, "--source", "gh", "--since", "1h",
    ])
    .await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("nothing is missing"), "{out}");
    assert_eq!(fake.redelivery_requests().len(), 150);
    let metrics = server.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            r#"hookinbox_recovery_errors_total{source="gh",provider="github"}"#
        ),
        0.0
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redeliveries_on_their_way_are_not_asked_for_again() {
    let (sink, mut server, fake) = github_stand_in().await;
    server
        .reload(&github_source(&fake, &sink, GH_SECRET))
        .await
        .unwrap();
    let config = server.config.path.to_str().unwrap().to_owned();
    fake.record("slow-1", "push", &body("slow-1"), clock_now() - 60, false);
    fake.hold_redeliveries(true);
    let args = [
        "recover", "--config", &config, "--source", "gh", "--since", "10m",
    ];
    let (code, out, err) = cli(&args).await;
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(fake.redelivery_requests().len(), 1);
    // GitHub has not tried since it was asked: on its way, not asked again.
    let (code, out, _) = cli(&args).await;
    assert_eq!(code, 0);
    assert!(
        out.contains("1 redeliveries asked for before, on their way"),
        "{out}"
    );
    assert_eq!(fake.redelivery_requests().len(), 1);
    fake.hold_redeliveries(false);
    eventually("the held redelivery", Duration::from_secs(10), || {
        event_ids(&server.inbox(), "gh").contains("slow-1")
    })
    .await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stripes_missing_events_are_stored_with_origin_api_and_a_later_webhook_is_a_duplicate() {
    let sink = Sink::start(|_, _| Reply::Status(200)).await;
    let mut server = TestServer::start(ONE_SOURCE).await;
    let fake = FakeStripe::start(
        STRIPE_KEY,
        STRIPE_SECRET,
        &format!("{}/hooks/stripe", server.base),
    )
    .await;
    server.reload(&stripe_source(&fake, &sink)).await.unwrap();
    let config = server.config.path.to_str().unwrap().to_owned();
    let now = clock_now();

    fake.create("evt_delivered", "invoice.paid", now - 600, false);
    assert_eq!(fake.send_webhook("evt_delivered", false).await, 200);
    let before = server.stored_body("stripe", "evt_delivered").unwrap();
    let mut fetched = Vec::new();
    for (i, id) in ["evt_missed_1", "evt_missed_2", "evt_missed_3"]
        .iter()
        .enumerate()
    {
        fetched.push(fake.create(id, "invoice.paid", now - 500 + i as i64, false));
    }
    // Older than the window: left alone.
    fake.create("evt_long_ago", "invoice.paid", now - 7200, false);

    fake.rate_limit_next(2);
    let (code, out, err) = cli(&[
        "recover", "--config", &config, "--source", "stripe", "--since", "30m",
    ])
    .await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("storing 3 events with origin api"), "{out}");
    let ids = event_ids(&server.inbox(), "stripe");
    let want: BTreeSet<String> = [
        "evt_delivered",
        "evt_missed_1",
        "evt_missed_2",
        "evt_missed_3",
    ]
    .map(String::from)
    .into();
    assert_eq!(ids, want);
    // The stored event is the API's; the webhook's event is untouched.
    let value = |b: &[u8]| serde_json::from_slice::<serde_json::Value>(b).unwrap();
    assert_eq!(
        value(&server.stored_body("stripe", "evt_missed_1").unwrap()),
        value(&fetched[0])
    );
    assert_eq!(
        server.stored_body("stripe", "evt_delivered").unwrap(),
        before
    );
    assert_eq!(
        server.count("SELECT count(*) FROM events WHERE source = 'stripe' AND origin = 'api'"),
        3
    );

    // The app hears of them with their origin, under their one key.
    eventually(
        "the fetched events at the app",
        Duration::from_secs(20),
        || {
            sink.received()
                .iter()
                .filter(|r| r.header("x-hookinbox-origin") == "api")
                .count()
                == 3
        },
    )
    .await;

    // Stripe's own retry of a fetched event: the same JSON value in another layout.
    assert_eq!(fake.send_webhook("evt_missed_1", false).await, 200);
    // A real difference is still a conflict.
    assert_eq!(fake.send_webhook("evt_missed_2", true).await, 409);
    assert_eq!(server.count("SELECT count(*) FROM conflicts"), 1);
    assert_eq!(
        server.count("SELECT count(*) FROM events WHERE source = 'stripe'"),
        4
    );

    let (code, out, _) = cli(&[
        "recover", "--config", &config, "--source", "stripe", "--since", "30m",
    ])
    .await;
    assert_eq!(code, 0);
    assert!(out.contains("nothing is missing"), "{out}");
    let (_, shown, _) = cli(&[
        "show",
        "evt_missed_3",
        "--source",
        "stripe",
        "--config",
        &config,
    ])
    .await;
    assert!(shown.contains("fetched from the provider's API"), "{shown}");
    let metrics = server.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            r#"hookinbox_recovered_events_total{source="stripe",provider="stripe",how="stored"}"#
        ),
        0.0,
        "the CLI's own run is not serve's to count"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_api_failure_leaves_the_inbox_unchanged_and_is_reported() {
    let (sink, mut server, fake) = github_stand_in().await;
    // A token GitHub does not know.
    let wrong = github_source(&fake, &sink, GH_SECRET).replace(TOKEN, "github_pat_revoked");
    server.reload(&wrong).await.unwrap();
    let config = server.config.path.to_str().unwrap().to_owned();
    fake.record(
        "missing-1",
        "push",
        &body("missing-1"),
        clock_now() - 60,
        false,
    );
    let (code, out, err) = cli(&[
        "recover", "--config", &config, "--source", "gh", "--since", "10m",
    ])
    .await;
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("github refused the request (401): Bad credentials"),
        "{err}"
    );
    assert!(err.contains("nothing was changed"), "{err}");
    assert!(fake.redelivery_requests().is_empty());
    assert_eq!(server.count("SELECT count(*) FROM events"), 0);
    assert_eq!(server.count("SELECT count(*) FROM recovery_requests"), 0);

    // A failing API: tried again, then reported; still nothing changed.
    server
        .reload(&github_source(&fake, &sink, GH_SECRET))
        .await
        .unwrap();
    fake.fail_next(10, 502);
    let (code, _, err) = cli(&[
        "recover", "--config", &config, "--source", "gh", "--since", "10m",
    ])
    .await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("502"), "{err}");
    assert!(fake.redelivery_requests().is_empty());
    assert_eq!(server.count("SELECT count(*) FROM events"), 0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_of_401s_is_a_gap_and_serve_recovers_it_once_the_secret_is_right() {
    let (sink, mut server, fake) = github_stand_in().await;
    // The operator configured the secret before rotating it at GitHub.
    server
        .reload(&github_source(&fake, &sink, "the-old-secret"))
        .await
        .unwrap();
    for guid in ["refused-1", "refused-2"] {
        assert_eq!(fake.deliver(guid, "push", &body(guid)).await, 401);
    }
    server
        .reload(&github_source(&fake, &sink, GH_SECRET))
        .await
        .unwrap();
    assert_eq!(
        fake.deliver("accepted", "push", &body("accepted")).await,
        200
    );
    // The next heartbeat records the run as a gap; serve asks for what it refused.
    eventually(
        "the refused deliveries redelivered",
        Duration::from_secs(40),
        || {
            let ids = event_ids(&server.inbox(), "gh");
            ids.contains("refused-1") && ids.contains("refused-2")
        },
    )
    .await;
    let asked: BTreeSet<String> = fake
        .redelivery_requests()
        .into_iter()
        .map(|(_, g)| g)
        .collect();
    assert_eq!(asked, ["refused-1", "refused-2"].map(String::from).into());
    let gap: (String, String) = server
        .read()
        .query_row(
            "SELECT kind, detail FROM gaps WHERE source = 'gh'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(
        gap,
        ("rejecting".into(), "refused 2 requests (401 ×2)".into())
    );
    // The web inbox draws it on the source's strip and lists what recovery did.
    let page = server.admin_page("/gaps").await;
    assert!(page.contains(r#"<rect class="rejecting""#), "{page}");
    assert!(page.contains("refused 2 requests (401 ×2)"), "{page}");
    assert!(page.contains("asked for 2 redeliveries"), "{page}");
    let metrics = server.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            r#"hookinbox_gaps_total{source="gh",kind="rejecting"}"#
        ),
        1.0
    );
    assert_eq!(
        metric(
            &metrics,
            r#"hookinbox_recovered_events_total{source="gh",provider="github",how="redelivery_requested"}"#
        ),
        2.0
    );
    server.stop().await;
}

async fn after_a_downtime_serve_stores_stripes_missing_events_by_itself(backend: Backend) {
    let port = free_port();
    let sink = Sink::start(|_, _| Reply::Status(200)).await;
    let fake = FakeStripe::start(
        STRIPE_KEY,
        STRIPE_SECRET,
        &format!("http://127.0.0.1:{port}/hooks/stripe"),
    )
    .await;
    let test = "recover::after_a_downtime_serve_stores_stripes_missing_events_by_itself";
    let Some((_dir, db, config)) = on_port(backend, test, port, &stripe_source(&fake, &sink)).await
    else {
        return;
    };

    let first = Proc::spawn(&config);
    fake.create("evt_before", "charge.succeeded", clock_now(), false);
    assert_eq!(fake.send_webhook("evt_before", false).await, 200);
    // A clean stop this time: the gap starts at the stop marker.
    assert!(first.sigterm().success());
    for id in ["evt_down_1", "evt_down_2"] {
        fake.create(id, "charge.succeeded", clock_now(), false);
        assert_eq!(fake.send_webhook(id, false).await, 0, "hookinbox is down");
    }
    let second = Proc::spawn(&config);
    eventually("the missed events stored", Duration::from_secs(20), || {
        event_ids(&db, "stripe").len() == 3
    })
    .await;
    assert_eq!(
        db.count("SELECT count(*) FROM events WHERE origin = 'api'"),
        2
    );
    let gaps = db.strings("SELECT kind || ': ' || detail FROM gaps");
    let stopped = match backend {
        Backend::Sqlite => "down: stopped cleanly",
        Backend::Postgres => "down: no replica was receiving: stopped cleanly",
    };
    assert_eq!(gaps, [stopped]);
    eventually("every event at the app", Duration::from_secs(20), || {
        sink.received()
            .iter()
            .map(|r| r.header("x-hookinbox-event-id").to_owned())
            .collect::<BTreeSet<_>>()
            .len()
            == 3
    })
    .await;
    // Stripe's own retry, once hookinbox is back: a duplicate of the fetched event.
    assert_eq!(fake.send_webhook("evt_down_1", false).await, 200);
    assert_eq!(event_ids(&db, "stripe").len(), 3);
    second.sigterm();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_github_apps_own_hook_is_recovered_with_the_apps_jwt() {
    let (sink, mut server, fake) = github_stand_in().await;
    // The App's key as GitHub hands it out (PKCS#1 PEM), and its public half for the fake.
    let pem_path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/github-app-key.pem"
    );
    let pem = std::fs::read(pem_path).unwrap();
    use rustls::pki_types::pem::PemObject as _;
    let rustls::pki_types::PrivateKeyDer::Pkcs1(der) =
        rustls::pki_types::PrivateKeyDer::from_pem_slice(&pem).unwrap()
    else {
        panic!("the fixture is a PKCS#1 key")
    };
    let key = ring::signature::RsaKeyPair::from_der(der.secret_pkcs1_der()).unwrap();
    fake.accept_app_jwt(4242, key.public().as_ref().to_vec());
    let app = github_source(&fake, &sink, GH_SECRET).replace(
        &format!(
            "repo = \"octo/app\", hook_id = {}, token = \"{TOKEN}\"",
            fake.hook_id
        ),
        &format!("app_id = 4242, private_key = \"file:{pem_path}\""),
    );
    assert!(app.contains("app_id"), "{app}");
    server.reload(&app).await.unwrap();
    let config = server.config.path.to_str().unwrap().to_owned();
    fake.record(
        "app-missed",
        "installation",
        &body("app-missed"),
        clock_now() - 60,
        false,
    );
    let (code, out, err) = cli(&[
        "recover", "--config", &config, "--source", "gh", "--since", "10m",
    ])
    .await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        fake.api_calls()
            .iter()
            .any(|(m, p)| m == "GET" && p.starts_with("/app/hook/deliveries")),
        "{:?}",
        fake.api_calls()
    );
    eventually("the App hook's redelivery", Duration::from_secs(10), || {
        event_ids(&server.inbox(), "gh").contains("app-missed")
    })
    .await;
    server.stop().await;
}

on_both_backends!(
    a_downtime_after_a_sigkill_is_found_and_exactly_the_missing_github_deliveries_come_back_once,
    after_a_downtime_serve_stores_stripes_missing_events_by_itself,
);
