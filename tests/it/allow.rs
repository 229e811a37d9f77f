//! Sources pinned to their providers' addresses (`allow_from`): a signed request from an
//! allowed address is stored; from anywhere else it is answered 403 before its body is
//! read, counted, and nothing is stored; behind a trusted proxy the client it names
//! decides, and a forged `X-Forwarded-For` from anyone else changes nothing. A provider's
//! list comes from a local stand-in for GitHub's meta API (`provider_api::FakeMeta`): it is
//! fetched and kept in the inbox, and when the API fails a restarted server goes on with
//! the kept list; while no list was ever had, requests are answered 503 (the provider
//! retries); a kept list a week old is an `allow_list_stale` alert.

use std::io::{Read, Write};
use std::time::{Duration, SystemTime};

use crate::provider_api::FakeMeta;
use crate::sink::{Reply, Sink};
use crate::support::*;

const GH_SECRET: &str = "It's a Secret to Everybody";

/// A Standard Webhooks source `name` that takes requests only from `allow_from`.
fn source(name: &str, allow_from: &str) -> String {
    format!(
        r#"
[[sources]]
name = "{name}"
scheme = "standard-webhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
allow_from = {allow_from}
"#
    )
}

/// A GitHub source `gh` allowing GitHub's published addresses, fetched from `meta`
/// (`server.allow_lists`, a table of `[server]` written after the sources).
fn github_source(meta: &FakeMeta, more: &str) -> String {
    format!(
        r#"
[[sources]]
name = "gh"
scheme = "github"
secrets = ["{GH_SECRET}"]
allow_from = ["github"]
{more}
[server.allow_lists]
github = "{url}"
"#,
        url = meta.url
    )
}

fn events(server: &TestServer, source: &str) -> i64 {
    server.count(&format!(
        "SELECT count(*) FROM events WHERE source = '{source}'"
    ))
}

async fn post_signed(server: &TestServer, source: &str, id: &str) -> (u16, String) {
    let body = event_body(id, "");
    server.post(source, &server.sign(source, id, &body)).await
}

/// Waits until `/metrics` shows `series` at `want` or more.
async fn wait_metric(server: &TestServer, series: &str, want: f64) -> f64 {
    for _ in 0..300 {
        let v = metric(&server.metrics().await, series);
        if v >= want {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{series} never reached {want}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_address_is_stored_and_any_other_refused_403_before_its_body_with_nothing_stored()
 {
    let sources = [
        source("inside", r#"["127.0.0.0/8", "::1"]"#),
        source("outside", r#"["192.0.2.0/24", "2001:db8::/32"]"#),
    ]
    .concat();
    let server = TestServer::start(&sources).await;

    assert_eq!(post_signed(&server, "inside", "evt_in").await.0, 200);
    assert_eq!(events(&server, "inside"), 1);

    let (status, body) = post_signed(&server, "outside", "evt_out").await;
    assert_eq!((status, body.as_str()), (403, "forbidden\n"));
    assert_eq!(events(&server, "outside"), 0);
    let forbidden = "hookinbox_requests_total{source=\"outside\",outcome=\"forbidden\"}";
    assert_eq!(metric(&server.metrics().await, forbidden), 1.0);
    assert_eq!(
        metric(
            &server.metrics().await,
            "hookinbox_requests_total{source=\"inside\",outcome=\"forbidden\"}"
        ),
        0.0
    );

    // A head that promises a body it never sends: answered 403 at once. Had the body been
    // waited for, body_timeout (1s) would have made it a 408.
    let mut stream = std::net::TcpStream::connect(server.public_addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .write_all(
            b"POST /hooks/outside HTTP/1.1\r\nHost: hooks.example\r\n\
              Content-Type: application/json\r\nContent-Length: 60000\r\n\r\n",
        )
        .unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 403 "), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
    assert_eq!(metric(&server.metrics().await, forbidden), 2.0);
    assert_eq!(events(&server, "outside"), 0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_trusted_proxy_the_client_it_names_decides_and_a_forged_header_does_not() {
    let sources =
        source("pinned", r#"["198.51.100.0/24"]"#) + &source("loopback", r#"["127.0.0.0/8"]"#);
    let trusting = SERVER.replace("max_body", "trusted_proxies = [\"127.0.0.1\"]\nmax_body");
    let server = TestServer::start_with(&trusting, &sources).await;
    let signed = |source: &str, id: &str, xff: &str| {
        let mut req = server.sign(source, id, &event_body(id, ""));
        req.set("x-forwarded-for", xff);
        req
    };
    // The proxy (127.0.0.1, trusted) appended the client it saw.
    let from_allowed = signed("pinned", "evt_proxied", "203.0.113.50, 198.51.100.7");
    assert_eq!(server.post("pinned", &from_allowed).await.0, 200);
    let from_elsewhere = signed("pinned", "evt_elsewhere", "198.51.100.7, 203.0.113.50");
    assert_eq!(server.post("pinned", &from_elsewhere).await.0, 403);
    assert_eq!(
        server
            .inbox()
            .strings("SELECT event_id || ' ' || remote_addr FROM events"),
        ["evt_proxied 198.51.100.7"]
    );
    // A source whose ranges cover the proxy itself: the client the proxy names decides,
    // and a request it names none for is nobody's, not the proxy's.
    let named = signed("loopback", "evt_named", "127.0.0.2");
    assert_eq!(server.post("loopback", &named).await.0, 200);
    let unnamed = server.sign("loopback", "evt_unnamed", &event_body("evt_unnamed", ""));
    assert_eq!(server.post("loopback", &unnamed).await.0, 403);
    let only_proxies = signed("loopback", "evt_only_proxies", "127.0.0.1");
    assert_eq!(server.post("loopback", &only_proxies).await.0, 403);
    assert_eq!(events(&server, "loopback"), 1);
    // check says where a range and the trusted proxies overlap, and only there.
    let (code, out, err) = hookinbox(&[
        "check",
        "--config",
        &server.config.path.display().to_string(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(
            "source \"loopback\": allow_from 127.0.0.0/8 overlaps server.trusted_proxies 127.0.0.1"
        ),
        "{out}"
    );
    assert!(!out.contains("source \"pinned\": allow_from"), "{out}");
    server.stop().await;

    // Without trusted proxies the header is anyone's to write: the peer decides.
    let server = TestServer::start(&sources).await;
    let mut forged = server.sign("pinned", "evt_forged", &event_body("evt_forged", ""));
    forged.set("x-forwarded-for", "198.51.100.7");
    assert_eq!(server.post("pinned", &forged).await.0, 403);
    assert_eq!(events(&server, "pinned"), 0);
    server.stop().await;
}

async fn a_providers_list_is_fetched_kept_and_used_after_its_api_fails_and_a_restart(
    backend: Backend,
) {
    let meta = FakeMeta::start(&["192.30.252.0/22", "127.0.0.0/8", "2a0a:a440::/29"]).await;
    let test = "allow::a_providers_list_is_fetched_kept_and_used_after_its_api_fails";
    let Some(server) = TestServer::on(backend, test, &github_source(&meta, "")).await else {
        return;
    };
    let fetched = "hookinbox_allow_list_updated_timestamp_seconds{provider=\"github\"}";
    let at = wait_metric(&server, fetched, 1.0).await;
    assert!(at > hookinbox::clock::unix_now() as f64 - 60.0, "{at}");
    assert_eq!(post_signed(&server, "gh", "delivery-1").await.0, 200);
    let kept = server
        .inbox()
        .strings("SELECT value FROM kept WHERE name = 'allow:github'");
    assert_eq!(
        kept,
        [r#"["192.30.252.0/22","127.0.0.0/8","2a0a:a440::/29"]"#]
    );

    // GitHub's API fails; the restarted server asks, hears 503, and goes on with the list
    // the inbox kept.
    meta.fail(true);
    let calls = meta.calls();
    let server = server.restart(&github_source(&meta, "")).await;
    let refused = "hookinbox_allow_list_refreshes_total{provider=\"github\",result=\"error\"}";
    wait_metric(&server, refused, 1.0).await;
    assert!(meta.calls() > calls);
    assert_eq!(post_signed(&server, "gh", "delivery-2").await.0, 200);
    assert_eq!(events(&server, "gh"), 2);
    // The list in use is the one fetched before the restart, as old as it is.
    let kept_at = metric(&server.metrics().await, fetched);
    assert!((kept_at - at).abs() < 5.0, "{kept_at} {at}");
    server.stop().await;
}

on_both_backends!(a_providers_list_is_fetched_kept_and_used_after_its_api_fails_and_a_restart);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_any_list_yet_a_request_is_answered_503_and_not_stored() {
    let meta = FakeMeta::start(&["127.0.0.0/8"]).await;
    meta.fail(true);
    let server = TestServer::start(&github_source(&meta, "")).await;
    let (status, _) = post_signed(&server, "gh", "delivery-early").await;
    assert_eq!(status, 503);
    assert_eq!(events(&server, "gh"), 0);
    assert_eq!(
        metric(
            &server.metrics().await,
            "hookinbox_requests_total{source=\"gh\",outcome=\"unavailable\"}"
        ),
        1.0
    );
    assert_eq!(
        metric(
            &server.metrics().await,
            "hookinbox_allow_list_updated_timestamp_seconds{provider=\"github\"}"
        ),
        0.0
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_list_a_week_old_is_used_and_announced_stale() {
    let sink = Sink::start(|_, _| Reply::Status(200)).await;
    let meta = FakeMeta::start(&["127.0.0.0/8"]).await;
    meta.fail(true);
    let alerts = format!("[[alerts]]\nname = \"ops\"\nurl = \"{}\"\n", sink.url());
    let server = TestServer::start(&github_source(&meta, &alerts)).await;
    // The list as a serve kept it eight days ago, GitHub's API failing ever since.
    let eight_days_ago = hookinbox::clock::iso(SystemTime::now() - Duration::from_secs(8 * 86_400));
    server.execute(&format!(
        "INSERT INTO kept (name, value, updated_at) \
         VALUES ('allow:github', '[\"127.0.0.0/8\"]', '{eight_days_ago}')"
    ));
    let server = server.restart(&github_source(&meta, &alerts)).await;
    assert_eq!(post_signed(&server, "gh", "delivery-old-list").await.0, 200);
    let age = hookinbox::clock::unix_now() as f64
        - metric(
            &server.metrics().await,
            "hookinbox_allow_list_updated_timestamp_seconds{provider=\"github\"}",
        );
    assert!(
        (8.0 * 86_400.0 - 60.0..8.0 * 86_400.0 + 60.0).contains(&age),
        "{age}"
    );

    let mut notice = None;
    for _ in 0..600 {
        notice = sink.received().iter().find_map(|r| {
            let n: serde_json::Value = serde_json::from_slice(&r.body).ok()?;
            (n["alert"] == "allow_list_stale" && n["state"] == "started" && n["source"] == "gh")
                .then_some(n)
        });
        if notice.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let notice = notice.expect("an allow_list_stale notice for gh");
    let detail = notice["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!("github's was last fetched at {eight_days_ago}")),
        "{detail}"
    );
    server.stop().await;
}

#[test]
fn check_says_what_each_entry_of_allow_from_means() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hookinbox.toml");
    let sources = r#"
[[sources]]
name = "gh"
scheme = "github"
secrets = ["s"]
allow_from = ["192.30.252.0/22", "::ffff:10.0.0.0/104", "github"]
"#;
    std::fs::write(
        &config,
        config_text(SERVER, &dir.path().join("inbox.db"), sources),
    )
    .unwrap();
    let (code, out, err) = hookinbox(&["check", "--config", config.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    for line in [
        "allow from (403 for any other address, before the body is read):",
        "            192.30.252.0/22\n",
        "            10.0.0.0/8\n",
        "            github: the `hooks` ranges of GitHub's meta API, from \
         https://api.github.com/meta, fetched at start-up and daily, kept in the inbox",
    ] {
        assert!(out.contains(line), "{line:?} not in:\n{out}");
    }
    let typo = config_text(
        SERVER,
        &dir.path().join("inbox.db"),
        &sources.replace("\"github\"]", "\"gihtub\"]"),
    );
    std::fs::write(&config, typo).unwrap();
    let (code, _, err) = hookinbox(&["check", "--config", config.to_str().unwrap()]);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("allow_from[2]: \"gihtub\" is not an address or range")
            && err.contains(
                "nor a provider that publishes its webhook addresses (github, stripe, zendesk)"
            ),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_pins_a_running_source_and_unpins_it() {
    let open = ONE_SOURCE.to_owned();
    let pinned = ONE_SOURCE.replace(
        "[[sources.targets]]",
        "allow_from = [\"192.0.2.0/24\"]\n[[sources.targets]]",
    );
    let mut server = TestServer::start(&open).await;
    assert_eq!(post_signed(&server, "sw", "evt_before").await.0, 200);
    server.reload(&pinned).await.unwrap();
    assert_eq!(post_signed(&server, "sw", "evt_pinned").await.0, 403);
    server.reload(&open).await.unwrap();
    assert_eq!(post_signed(&server, "sw", "evt_after").await.0, 200);
    assert_eq!(
        server
            .inbox()
            .strings("SELECT event_id FROM events WHERE source = 'sw' ORDER BY id"),
        ["evt_before", "evt_after"]
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ipv4_client_on_a_dual_stack_listener_matches_ipv4_ranges() {
    let test = "allow::an_ipv4_client_on_a_dual_stack_listener_matches_ipv4_ranges";
    if let Err(e) = std::net::TcpListener::bind("[::]:0") {
        skip("IPV6", test, &format!("no IPv6 socket here ({e})"));
        return;
    }
    let dual_stack = SERVER.replacen("listen = \"127.0.0.1:0\"", "listen = \"[::]:0\"", 1);
    let sources = [
        source("inside", r#"["127.0.0.0/8"]"#),
        source("outside", r#"["192.0.2.0/24"]"#),
    ]
    .concat();
    let server = TestServer::start_with(&dual_stack, &sources).await;
    // To the IPv4 loopback: the socket sees ::ffff:127.0.0.1.
    let v4 = format!("http://127.0.0.1:{}", server.public_addr().port());
    let post = |source: &'static str, id: &'static str| {
        let req = server.sign(source, id, &event_body(id, ""));
        let (client, v4) = (server.client.clone(), v4.clone());
        async move { send(&client, &v4, source, &req).await.unwrap().status() }
    };
    assert_eq!(post("inside", "evt_v4").await, 200);
    assert_eq!(post("outside", "evt_v4_out").await, 403);
    assert_eq!(
        server
            .inbox()
            .strings("SELECT source || ' ' || remote_addr FROM events"),
        ["inside ::ffff:127.0.0.1"]
    );
    server.stop().await;
}
