//! Being told: a silent source, a failing target, rising rejections, new conflicts and new
//! dead deliveries each become a notification POSTed to an `[[alerts]]` target (a real
//! sink), a banner in the web inbox, and an end notice once they clear. Notifications are
//! inbox events delivered by the delivery worker, so one still pending at a restart is
//! delivered after it, under its one key.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::Value;

use crate::sink::{Reply, Sink};
use crate::support::*;

/// The notifications the alert sink has received, parsed.
fn notices(sink: &Sink) -> Vec<(Value, String)> {
    sink.received()
        .iter()
        .map(|r| {
            (
                serde_json::from_slice(&r.body).expect("a notification is JSON"),
                r.key().to_owned(),
            )
        })
        .collect()
}

/// Waits (up to a minute: conditions are judged every second or so) until a notification
/// matching `alert`, `state` and `subject` has arrived, and returns it.
async fn wait_for_notice(sink: &Sink, alert: &str, state: &str, source: &str) -> Value {
    for _ in 0..600 {
        if let Some((n, _)) = notices(sink)
            .into_iter()
            .find(|(n, _)| n["alert"] == alert && n["state"] == state && n["source"] == source)
        {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "no {alert} {state} notice for {source}; received: {:?}",
        notices(sink)
    );
}

/// Sends one signed event to `sw`; it is stored.
async fn send(server: &TestServer, id: &str) {
    let body = event_body(id, "");
    assert_eq!(
        server.post("sw", &server.sign("sw", id, &body)).await.0,
        200
    );
}

fn alerts_table(url: &str) -> String {
    format!(
        r#"
[[alerts]]
name = "ops"
url = "{url}"
retry = ["1s"]
"#
    )
}

async fn a_silent_source_is_announced_shown_and_cleared(backend: Backend) {
    let sink = Sink::start(|_, _| Reply::Status(200)).await;
    let sources = format!(
        r#"
[[sources]]
name = "sw"
scheme = "standard-webhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
expect_every = "2s"
{}"#,
        alerts_table(&sink.url())
    );
    let test = "alerts::a_silent_source_is_announced_shown_and_cleared";
    let Some(server) = TestServer::on(backend, test, &sources).await else {
        return;
    };
    let started = wait_for_notice(&sink, "source_silent", "started", "sw").await;
    assert!(
        started["detail"].as_str().unwrap().contains("expect_every"),
        "{started}"
    );
    // The web inbox shows it on every page while it lasts.
    let page = server.admin_page("/events").await;
    assert!(
        page.contains("role=\"alert\"><strong>source_silent · sw</strong>"),
        "{page}"
    );

    // The alert target is a target like any other: on the overview, with its series.
    let overview = server.admin_page("/").await;
    assert!(overview.contains("hookinbox.alerts/ops"), "{overview}");
    let metrics = server.metrics().await;
    assert!(
        metrics.contains(
            "hookinbox_attempts_total{source=\"hookinbox.alerts\",target=\"ops\",result=\"delivered\"}"
        ),
        "{metrics}"
    );

    // An event ends the silence.
    send(&server, "evt_1").await;
    wait_for_notice(&sink, "source_silent", "ended", "sw").await;
    // Each notice is an inbox event of the internal source, delivered under its own key.
    let keys: Vec<String> = notices(&sink).into_iter().map(|(_, k)| k).collect();
    assert!(keys.len() >= 2);
    assert_ne!(keys[0], keys[1]);
    assert!(
        server.count("SELECT count(*) FROM events WHERE source = 'hookinbox.alerts'") >= 2,
        "notifications are stored in the inbox"
    );
    server.stop().await;
}

async fn failing_targets_dead_deliveries_rejections_and_conflicts_are_announced(backend: Backend) {
    let alerts = Sink::start(|_, _| Reply::Status(200)).await;
    let app = Sink::start(|_, _| Reply::Status(500)).await;
    let sources = format!(
        "{}{}",
        forwarding(&app.url(), "retry = []"),
        alerts_table(&alerts.url())
    );
    let test = "alerts::failing_targets_dead_deliveries_rejections_and_conflicts_are_announced";
    let Some(server) = TestServer::on(backend, test, &sources).await else {
        return;
    };
    for i in 0..3 {
        let id = format!("evt_{i}");
        let body = event_body(&id, "");
        assert_eq!(
            server.post("sw", &server.sign("sw", &id, &body)).await.0,
            200
        );
    }
    // Same id, other bytes: quarantined.
    let other = event_body("evt_0", r#","changed":true"#);
    assert_eq!(
        server
            .post("sw", &server.sign("sw", "evt_0", &other))
            .await
            .0,
        409
    );
    // A burst of bad signatures, as after a secret was rotated at the provider only.
    for i in 0..12 {
        let id = format!("evt_bad_{i}");
        let mut req = server.sign("sw", &id, &event_body(&id, ""));
        req.set(
            "webhook-signature",
            "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        );
        assert_eq!(server.post("sw", &req).await.0, 401);
    }
    let failing = wait_for_notice(&alerts, "target_failing", "started", "sw").await;
    assert_eq!(failing["target"], "app");
    assert!(
        failing["detail"].as_str().unwrap().contains("100%"),
        "{failing}"
    );
    let dead = wait_for_notice(&alerts, "new_dead_deliveries", "started", "sw").await;
    assert!(
        dead["detail"]
            .as_str()
            .unwrap()
            .contains("deliveries gave up"),
        "{dead}"
    );
    wait_for_notice(&alerts, "rejections_rising", "started", "sw").await;
    wait_for_notice(&alerts, "new_conflicts", "started", "sw").await;
    // Nothing of this makes the public side refuse webhooks.
    send(&server, "evt_after").await;
    let ready = server
        .client
        .get(format!("{}/readyz", server.admin))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status().as_u16(), 200);
    server.stop().await;
}

async fn a_notification_pending_at_a_restart_is_delivered_after_it_once(backend: Backend) {
    let up = Arc::new(AtomicBool::new(false));
    let flag = up.clone();
    let alerts = Sink::start(move |_, _| {
        Reply::Status(if flag.load(Ordering::SeqCst) {
            200
        } else {
            503
        })
    })
    .await;
    // Retries far enough apart that the notification is still waiting when serve stops.
    let sources = format!(
        r#"
[[sources]]
name = "sw"
scheme = "standard-webhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
expect_every = "2s"

[[alerts]]
name = "ops"
url = "{}"
retry = ["3s", "3s", "3s", "3s", "3s"]
"#,
        alerts.url()
    );
    let test = "alerts::a_notification_pending_at_a_restart_is_delivered_after_it_once";
    let Some(server) = TestServer::on(backend, test, &sources).await else {
        return;
    };
    // An event, then silence: the silence starts 2 s after the event, whoever judges it.
    send(&server, "evt_1").await;
    wait_for_notice(&alerts, "source_silent", "started", "sw").await;
    assert_eq!(
        server.count(
            "SELECT count(*) FROM deliveries
              WHERE source = 'hookinbox.alerts' AND state IN ('pending', 'in_flight')"
        ),
        1,
        "the refused notification waits for its retry"
    );
    let server = server.restart(&sources).await;
    up.store(true, Ordering::SeqCst);
    server
        .wait_count(
            "SELECT count(*) FROM deliveries
              WHERE source = 'hookinbox.alerts' AND state = 'delivered'",
            1,
        )
        .await;
    // Judged again after the restart, the same silence is the same event: not a second
    // notification.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let started: Vec<String> = notices(&alerts)
        .into_iter()
        .filter(|(n, _)| n["alert"] == "source_silent" && n["state"] == "started")
        .map(|(_, k)| k)
        .collect();
    assert!(
        started.len() >= 2,
        "refused once, then accepted: {started:?}"
    );
    assert!(
        started.iter().all(|k| *k == started[0]),
        "one notification under one key: {started:?}"
    );
    assert_eq!(
        server.count("SELECT count(*) FROM events WHERE source = 'hookinbox.alerts'"),
        1
    );
    server.stop().await;
}

/// Alert targets added by a reload are told of what is already on, as they would be after a
/// restart, each once.
async fn an_alert_target_added_by_reload_is_told_what_is_on(backend: Backend) {
    let sink = Sink::start(|_, _| Reply::Status(200)).await;
    let source = r#"
[[sources]]
name = "sw"
scheme = "standard-webhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
expect_every = "2s"
"#;
    let test = "alerts::an_alert_target_added_by_reload_is_told_what_is_on";
    let Some(mut server) = TestServer::on(backend, test, source).await else {
        return;
    };
    // On, with nobody to tell: shown, not stored.
    for _ in 0..600 {
        if server
            .admin_page("/events")
            .await
            .contains("source_silent · sw")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        server
            .admin_page("/events")
            .await
            .contains("source_silent · sw")
    );
    server
        .reload(&format!("{source}{}", alerts_table(&sink.url())))
        .await
        .unwrap();
    let started = wait_for_notice(&sink, "source_silent", "started", "sw").await;
    assert!(
        started["detail"].as_str().unwrap().contains("expect_every"),
        "{started}"
    );
    // A second target added later is told too, in a notice of its own; the first is not
    // told again, neither by the later turns nor by the second reload.
    let pager = Sink::start(|_, _| Reply::Status(200)).await;
    let second = format!(
        "\n[[alerts]]\nname = \"pager\"\nurl = \"{}\"\nretry = [\"1s\"]\n",
        pager.url()
    );
    server
        .reload(&format!("{source}{}{second}", alerts_table(&sink.url())))
        .await
        .unwrap();
    let paged = wait_for_notice(&pager, "source_silent", "started", "sw").await;
    assert_eq!(
        paged["since"], started["since"],
        "the same condition: {paged}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let told = |sink: &Sink| {
        notices(sink)
            .into_iter()
            .filter(|(n, _)| n["alert"] == "source_silent" && n["state"] == "started")
            .count()
    };
    assert_eq!(told(&sink), 1, "{:?}", notices(&sink));
    assert_eq!(told(&pager), 1, "{:?}", notices(&pager));
    server.stop().await;
}

on_both_backends!(
    a_silent_source_is_announced_shown_and_cleared,
    failing_targets_dead_deliveries_rejections_and_conflicts_are_announced,
    a_notification_pending_at_a_restart_is_delivered_after_it_once,
    an_alert_target_added_by_reload_is_told_what_is_on,
);
