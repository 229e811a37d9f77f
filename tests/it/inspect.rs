//! The inspection commands (`events`, `show`, `conflicts`, `dead`) run as the real binary
//! against a real inbox: one filled by a running server whose deliveries have settled, with
//! two sources, a conflict, a dead delivery and delivered ones. Each test runs on SQLite
//! and on PostgreSQL.

use base64::Engine as _;
use serde_json::Value;

use crate::sink::{Reply, Sink};
use crate::support::*;

/// The `sw` source forwarding to the sink (`app`) and to a command (`audit`), and `billing`
/// forwarding to the sink. Fast retries, so that nothing waits long to settle.
fn two_sources(url: &str) -> String {
    let sw = forwarding(
        url,
        r#"timeout = "1s"
retry = ["100ms"]
[[sources.targets]]
name = "audit"
command = ["/bin/true"]"#,
    );
    format!(
        r#"{sw}
[[sources]]
name = "billing"
scheme = "standard-webhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
[[sources.targets]]
name = "app"
url = "{url}"
timeout = "1s"
retry = ["100ms"]
"#
    )
}

/// A body that is not UTF-8, stored as a BLOB.
const BINARY: &[u8] = b"\xff\xfe\x00binary\x80";

/// What the inbox holds after [`populated`], in arrival (and row id) order. `4242` is a
/// provider id made of digits; `shared_1` was sent by both sources.
const SENT: [(&str, &str); 9] = [
    ("sw", "msg_1"),
    ("sw", "msg_2"),
    ("billing", "inv_1"),
    ("sw", "msg_dead"),
    ("billing", "shared_1"),
    ("sw", "shared_1"),
    ("billing", "4242"),
    ("billing", "bin_1"),
    ("sw", "msg_3"),
];

/// Every delivery row: two targets per `sw` event, one per `billing` event.
const DELIVERIES: i64 = 5 * 2 + 4;

/// A server and sink with [`SENT`] stored, `msg_1` sent again with other bytes (a
/// conflict), and every delivery settled: `msg_dead` to `app` is dead (the sink answers
/// 410), everything else delivered.
async fn populated(backend: Backend, test: &str) -> Option<(TestServer, Sink)> {
    let sink = Sink::start(|r, _| {
        Reply::Status(if r.header("x-hookinbox-event-id") == "msg_dead" {
            410
        } else {
            200
        })
    })
    .await;
    let server = TestServer::on(backend, test, &two_sources(&sink.url())).await?;
    for (source, id) in SENT {
        let body = if id == "bin_1" {
            BINARY.to_vec()
        } else {
            event_body(id, source)
        };
        let req = server.sign(source, id, &body);
        assert_eq!(server.post(source, &req).await.0, 200, "{source} {id}");
    }
    let changed = server.sign("sw", "msg_1", &event_body("msg_1", "changed"));
    assert_eq!(server.post("sw", &changed).await.0, 409);
    let settled = server
        .wait_count(
            "SELECT count(*) FROM deliveries WHERE state IN ('delivered', 'dead')",
            DELIVERIES,
        )
        .await;
    assert_eq!(settled, DELIVERIES);
    Some((server, sink))
}

/// Runs the real binary with the server's config; (exit code, stdout bytes, stderr).
fn hookinbox(server: &TestServer, args: &[&str]) -> (i32, Vec<u8>, String) {
    let config = server.config.path.display().to_string();
    let mut all = args.to_vec();
    all.extend(["--config", &config]);
    run_binary(&all)
}

/// Runs a command that must succeed and prints text.
fn text(server: &TestServer, args: &[&str]) -> String {
    let (code, out, err) = hookinbox(server, args);
    assert_eq!(code, 0, "{args:?}: {err}");
    String::from_utf8(out).unwrap()
}

/// Runs a command with `--json` that must succeed, and parses what it printed.
fn json(server: &TestServer, args: &[&str]) -> Value {
    let args = [args, &["--json"]].concat();
    let out = text(server, &args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
}

/// The `event_id`s of an `events --json` page, in order.
fn event_ids(page: &Value) -> Vec<String> {
    page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_id"].as_str().unwrap().to_owned())
        .collect()
}

/// The row id of the event `id` of `source`.
fn row_id(server: &TestServer, source: &str, id: &str) -> i64 {
    server.count(&format!(
        "SELECT id FROM events WHERE source = '{source}' AND event_id = '{id}'"
    ))
}

async fn events_lists_newest_first_with_filters_and_pages(backend: Backend) {
    let Some((server, _sink)) = populated(
        backend,
        "inspect::events_lists_newest_first_with_filters_and_pages",
    )
    .await
    else {
        return;
    };

    let all = json(&server, &["events"]);
    let newest_first: Vec<String> = SENT.iter().rev().map(|(_, id)| id.to_string()).collect();
    assert_eq!(event_ids(&all), newest_first);
    assert_eq!(all["next_before"], Value::Null, "one page holds them all");
    let dead = &all["events"][SENT.len() - 4];
    assert_eq!(dead["event_id"], "msg_dead");
    assert_eq!(dead["status"], "dead");
    assert_eq!(dead["source"], "sw");
    assert_eq!(dead["account"], "");
    assert_eq!(dead["pruned"], false);
    assert_eq!(
        dead["deliveries"],
        serde_json::json!([
            {"target": "app", "state": "dead", "attempts": 1},
            {"target": "audit", "state": "delivered", "attempts": 1},
        ])
    );

    let billing = json(&server, &["events", "--source", "billing"]);
    assert_eq!(event_ids(&billing), ["bin_1", "4242", "shared_1", "inv_1"]);
    assert_eq!(
        event_ids(&json(&server, &["events", "--status", "dead"])),
        ["msg_dead"]
    );
    assert_eq!(
        event_ids(&json(&server, &["events", "--status", "pending"])),
        Vec::<String>::new()
    );
    assert_eq!(
        event_ids(&json(&server, &["events", "--since", "1h"])).len(),
        SENT.len()
    );
    assert_eq!(
        event_ids(&json(&server, &["events", "--until", "1h"])).len(),
        0
    );
    assert_eq!(
        event_ids(&json(
            &server,
            &["events", "--since", "2099-01-01T00:00:00Z"]
        ))
        .len(),
        0
    );
    // Split at each event's own time: --since keeps the events received at or after it,
    // --until the others, whatever their source (on SQLite the window also bounds the ids
    // read, so an off-by-one there drops or adds an event at the edge).
    let times: Vec<(String, String)> = all["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let t = e["received_at"].as_str().unwrap().to_owned();
            (e["event_id"].as_str().unwrap().to_owned(), t)
        })
        .collect();
    for (_, t) in &times {
        let expect = |after: bool| -> Vec<String> {
            let keep = times.iter().filter(|(_, u)| (u >= t) == after);
            keep.map(|(id, _)| id.clone()).collect()
        };
        let since = json(&server, &["events", "--since", t]);
        assert_eq!(event_ids(&since), expect(true), "--since {t}");
        let until = json(&server, &["events", "--until", t]);
        assert_eq!(event_ids(&until), expect(false), "--until {t}");
    }
    let both = json(
        &server,
        &["events", "--since", &times[4].1, "--until", &times[1].1],
    );
    let middle: Vec<String> = times
        .iter()
        .filter(|(_, u)| *u >= times[4].1 && *u < times[1].1)
        .map(|(id, _)| id.clone())
        .collect();
    assert_eq!(event_ids(&both), middle);

    // Pages of 4, following next_before to the end: every event once, in order.
    let mut paged = Vec::new();
    let mut before: Option<i64> = None;
    for _ in 0..10 {
        let mut args = vec!["events".to_owned(), "--limit".into(), "4".into()];
        if let Some(b) = before {
            args.extend(["--before".into(), b.to_string()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let page = json(&server, &args);
        let ids = event_ids(&page);
        assert!(ids.len() <= 4);
        paged.extend(ids);
        before = page["next_before"].as_i64();
        if before.is_none() {
            break;
        }
        assert_eq!(
            page["events"][3]["id"].as_i64(),
            before,
            "the page's last id"
        );
    }
    assert_eq!(paged, newest_first);

    // The table: a header in capitals, aligned columns, and the next page on stderr.
    let (code, out, err) = hookinbox(&server, &["events", "--limit", "3"]);
    assert_eq!(code, 0, "{err}");
    let out = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert!(
        lines[0].starts_with("ID  ")
            && lines[0].contains("EVENT ID")
            && lines[0].ends_with("DELIVERIES"),
        "{out}"
    );
    let third = row_id(&server, "billing", "4242");
    assert_eq!(err.trim(), format!("more: --before {third}"));
    let table = text(&server, &["events"]);
    let dead_row = table.lines().find(|l| l.contains("msg_dead")).unwrap();
    assert!(
        dead_row.contains(" dead ") && dead_row.ends_with("app=dead audit=delivered"),
        "{table}"
    );
    let column = lines[0].find("EVENT ID").unwrap();
    assert!(
        table
            .lines()
            .skip(1)
            .all(|l| l[column..].starts_with(|c: char| c != ' ')),
        "{table}"
    );

    // Bad arguments are usage errors that say what is wrong.
    let (code, _, err) = hookinbox(&server, &["events", "--limit", "0"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = hookinbox(&server, &["events", "--since", "yesterday-ish"]);
    assert_eq!(code, 2);
    assert!(err.contains("not a time"), "{err}");
    server.stop().await;
}

async fn show_finds_an_event_by_row_id_or_provider_id_with_every_attempt(backend: Backend) {
    let Some((server, _sink)) = populated(
        backend,
        "inspect::show_finds_an_event_by_row_id_or_provider_id_with_every_attempt",
    )
    .await
    else {
        return;
    };
    let id = row_id(&server, "sw", "msg_dead");

    let by_row = json(&server, &["show", &id.to_string()]);
    assert_eq!(
        by_row,
        json(&server, &["show", "msg_dead"]),
        "both name one event"
    );
    assert_eq!(by_row["id"], id);
    assert_eq!(by_row["source"], "sw");
    assert_eq!(by_row["event_id"], "msg_dead");
    assert_eq!(by_row["event_type"], "test.event");
    let body = event_body("msg_dead", "sw");
    assert_eq!(by_row["size"], body.len());
    assert_eq!(by_row["body"], std::str::from_utf8(&body).unwrap());
    assert_eq!(by_row["body_encoding"], "utf-8");
    assert_eq!(by_row["pruned"], false);
    let headers = by_row["headers"].as_array().unwrap();
    assert!(
        headers.contains(&serde_json::json!(["webhook-id", "msg_dead"])),
        "{headers:?}"
    );

    let deliveries = by_row["deliveries"].as_array().unwrap();
    assert_eq!(deliveries.len(), 2);
    let app = &deliveries[0];
    assert_eq!(
        (&app["target"], &app["state"], &app["attempts"]),
        (&"app".into(), &"dead".into(), &1.into())
    );
    assert!(app["last_error"].as_str().unwrap().contains("410"), "{app}");
    assert!(!app["idempotency_key"].as_str().unwrap().is_empty());
    let attempt = &app["history"][0];
    assert_eq!(attempt["number"], 1);
    assert_eq!(attempt["outcome"], "dead");
    assert_eq!(attempt["status"], 410);
    assert_eq!(attempt["output"], "sink says hi");
    assert_eq!(deliveries[1]["target"], "audit");
    assert_eq!(deliveries[1]["history"][0]["outcome"], "delivered");

    // The text form shows the same.
    let shown = text(&server, &["show", "msg_dead"]);
    for want in [
        &format!("event {id}") as &str,
        "event id         msg_dead",
        "webhook-id: msg_dead",
        "delivery",
        "to app: dead",
        "attempt 1",
        "status 410",
        "output         sink says hi",
    ] {
        assert!(shown.contains(want), "{want:?} in\n{shown}");
    }
    assert!(!shown.contains("body"), "no body without --body:\n{shown}");
    // Dead and delivered: nothing is scheduled.
    assert!(!shown.contains("next attempt at"), "{shown}");

    // Digits that are no row id are a provider id; --source picks one of a shared id.
    assert_eq!(json(&server, &["show", "4242"])["source"], "billing");
    let shared = json(&server, &["show", "shared_1", "--source", "billing"]);
    assert_eq!(
        (&shared["source"], &shared["id"]),
        (
            &"billing".into(),
            &row_id(&server, "billing", "shared_1").into()
        )
    );

    // Piped, --body writes exactly the bytes received, UTF-8 or not.
    let (code, out, err) = hookinbox(&server, &["show", "msg_2", "--body"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, event_body("msg_2", "sw"));
    let (code, out, err) = hookinbox(&server, &["show", "bin_1", "--body"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, BINARY);
    let binary = json(&server, &["show", "bin_1"]);
    assert_eq!(binary["body_encoding"], "base64");
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(binary["body"].as_str().unwrap())
        .unwrap();
    assert_eq!(decoded, BINARY);

    // Once retention dropped the payload, --body has nothing to write: exit 4, no bytes.
    server.execute(
        "DELETE FROM payloads WHERE event = (SELECT id FROM events WHERE event_id = 'msg_2');
         UPDATE events SET pruned_at = '2026-01-01T00:00:00.000Z' WHERE event_id = 'msg_2';",
    );
    let (code, out, err) = hookinbox(&server, &["show", "msg_2", "--body"]);
    assert_eq!(code, 4, "{err}");
    assert!(
        out.is_empty() && err.contains("pruned at 2026-01-01"),
        "{err}"
    );
    let pruned = json(&server, &["show", "msg_2"]);
    assert_eq!(pruned["pruned"], true);
    assert_eq!(
        (&pruned["body"], &pruned["headers"]),
        (&Value::Null, &Value::Null)
    );
    assert!(text(&server, &["show", "msg_2"]).contains("payload          pruned at 2026-01-01"));
    let listed = json(&server, &["events", "--source", "sw", "--limit", "10"]);
    let msg_2 = listed["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event_id"] == "msg_2");
    assert_eq!(msg_2.unwrap()["pruned"], true);
    server.stop().await;
}

async fn show_refuses_unknown_and_ambiguous_ids(backend: Backend) {
    let Some((server, _sink)) =
        populated(backend, "inspect::show_refuses_unknown_and_ambiguous_ids").await
    else {
        return;
    };

    for args in [
        &["show", "evt_nope"][..],
        &["show", "999999"],
        &["show", "msg_1", "--source", "billing"],
    ] {
        let (code, out, err) = hookinbox(&server, args);
        assert_eq!(code, 4, "{args:?}: {err}");
        assert!(
            out.is_empty() && err.contains("no event"),
            "{args:?}: {err}"
        );
    }

    // What the operator typed is echoed escaped too (it may be pasted from a provider).
    let (code, _, err) = hookinbox(&server, &["show", "evt\u{1b}[2J\u{202e}"]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains(r#"no event "evt\x1b[2J\u{202e}""#), "{err:?}");
    assert!(
        !err.contains('\x1b') && !err.contains('\u{202e}'),
        "{err:?}"
    );

    // `shared_1` is in both sources: the error lists them and says how to pick one.
    let (code, out, err) = hookinbox(&server, &["show", "shared_1"]);
    assert_eq!(code, 1, "{err}");
    assert!(out.is_empty());
    let (in_billing, in_sw) = (
        row_id(&server, "billing", "shared_1"),
        row_id(&server, "sw", "shared_1"),
    );
    for want in [
        "matches several events".to_owned(),
        format!("source billing  account -  id {in_billing}"),
        format!("source sw  account -  id {in_sw}"),
        "--source".to_owned(),
    ] {
        assert!(err.contains(&want), "{want:?} in {err}");
    }
    server.stop().await;
}

async fn conflicts_and_dead_deliveries_are_listed(backend: Backend) {
    let Some((server, _sink)) =
        populated(backend, "inspect::conflicts_and_dead_deliveries_are_listed").await
    else {
        return;
    };
    let original = json(&server, &["show", "msg_1", "--source", "sw"]);

    let listed = json(&server, &["conflicts"]);
    let conflicts = listed["conflicts"].as_array().unwrap();
    assert_eq!(conflicts.len(), 1, "{listed}");
    let c = &conflicts[0];
    assert_eq!(
        (&c["source"], &c["event_id"], &c["seen"]),
        (&"sw".into(), &"msg_1".into(), &1.into())
    );
    assert_eq!(c["original_sha256"], original["sha256"]);
    assert_eq!(c["original_event"], original["id"]);
    let sha = c["sha256"].as_str().unwrap();
    assert_eq!(sha.len(), 64);
    assert_ne!(c["sha256"], c["original_sha256"]);
    assert_eq!(
        json(&server, &["conflicts", "--source", "billing"])["conflicts"],
        serde_json::json!([])
    );
    let table = text(&server, &["conflicts"]);
    let mut lines = table.lines();
    let header = lines.next().unwrap();
    assert!(
        header.starts_with("ID  LAST SEEN") && header.ends_with("ORIGINAL SHA256  SHA256"),
        "{table}"
    );
    let row = lines.next().unwrap();
    assert!(
        row.contains("msg_1") && row.ends_with(&sha[..12]) && !row.contains(sha),
        "{table}"
    );

    let listed = json(&server, &["dead"]);
    let dead = listed["dead"].as_array().unwrap();
    assert_eq!(dead.len(), 1, "{listed}");
    let d = &dead[0];
    assert_eq!(
        (&d["source"], &d["event_id"], &d["target"]),
        (&"sw".into(), &"msg_dead".into(), &"app".into())
    );
    assert_eq!(d["event"], row_id(&server, "sw", "msg_dead"));
    assert_eq!(d["attempts"], 1);
    assert!(d["last_error"].as_str().unwrap().contains("410"), "{d}");
    for filter in [&["--target", "audit"][..], &["--source", "billing"]] {
        let none = json(&server, &[&["dead"][..], filter].concat());
        assert_eq!(none["dead"], serde_json::json!([]), "{filter:?}");
    }
    assert_eq!(
        json(&server, &["dead", "--source", "sw", "--target", "app"])["dead"],
        listed["dead"]
    );
    let table = text(&server, &["dead"]);
    let mut lines = table.lines();
    let header = lines.next().unwrap();
    assert!(
        header.starts_with("DELIVERY  EVENT  DIED") && header.ends_with("ATTEMPTS  LAST ERROR"),
        "{table}"
    );
    let row = lines.next().unwrap();
    assert!(row.contains("msg_dead") && row.contains("410"), "{table}");
    assert!(
        lines.next().unwrap().starts_with("replay one delivery: "),
        "{table}"
    );
    assert!(lines.next().is_none());
    server.stop().await;
}

async fn provider_strings_reach_the_terminal_escaped(backend: Backend) {
    let sink = Sink::start(|_, _| Reply::Status(200)).await;
    let test = "inspect::provider_strings_reach_the_terminal_escaped";
    let Some(server) = TestServer::on(backend, test, &forwarding(&sink.url(), "")).await else {
        return;
    };
    // The type is read from the body's `/type`: JSON escapes that decode to ESC [2J (clear
    // the screen) and U+202E (right-to-left override). A header carries U+202E as raw
    // UTF-8; ESC cannot travel in an HTTP header (neither client nor server allow it).
    let body = br#"{"id":"evt_evil","type":"evil\u001b[2J\u202etxt.exe"}"#;
    let mut req = server.sign("sw", "evt_evil", body);
    req.set("x-note", "gnp.\u{202e}exe");
    assert_eq!(server.post("sw", &req).await.0, 200);
    let delivered = server
        .wait_count(
            "SELECT count(*) FROM deliveries WHERE state = 'delivered'",
            1,
        )
        .await;
    assert_eq!(delivered, 1);

    let raw = |s: &str| s.contains('\x1b') || s.contains('\u{202e}');
    let listed = text(&server, &["events"]);
    assert!(!raw(&listed), "{listed:?}");
    assert!(listed.contains(r"evil\x1b[2J\u{202e}txt.exe"), "{listed}");
    let shown = text(&server, &["show", "evt_evil"]);
    assert!(!raw(&shown), "{shown:?}");
    assert!(
        shown.contains(r"type             evil\x1b[2J\u{202e}txt.exe"),
        "{shown}"
    );
    assert!(shown.contains(r"x-note: gnp.\u{202e}exe"), "{shown}");

    // JSON escapes them too, and still means the exact text.
    let (code, out, err) = hookinbox(&server, &["show", "evt_evil", "--json"]);
    assert_eq!(code, 0, "{err}");
    let out = String::from_utf8(out).unwrap();
    assert!(!raw(&out), "{out:?}");
    let parsed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(parsed["event_type"], "evil\u{1b}[2J\u{202e}txt.exe");
    assert!(
        parsed["headers"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!(["x-note", "gnp.\u{202e}exe"]))
    );

    // Piped, --body is still the exact bytes: escaping is for terminals only.
    let (code, out, _) = hookinbox(&server, &["show", "evt_evil", "--body"]);
    assert_eq!((code, &out[..]), (0, &body[..]));
    server.stop().await;
}

/// A `--source` or `--target` the config does not have gets a warning that lists the
/// configured names (a typo would otherwise read as "nothing arrived"); the command still
/// shows what the inbox holds under that name, and exits 0.
async fn read_commands_warn_of_names_the_config_does_not_have(backend: Backend) {
    let test = "inspect::read_commands_warn_of_names_the_config_does_not_have";
    let Some((server, _sink)) = populated(backend, test).await else {
        return;
    };
    for args in [
        &["events", "--source", "biling"][..],
        &["conflicts", "--source", "biling"],
        &["dead", "--source", "biling"],
        &["gaps", "--source", "biling"],
    ] {
        let (code, _, err) = hookinbox(&server, args);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(
            err.contains(r#"warning: no source "biling""#)
                && err.contains("configured: sw, billing"),
            "{args:?}: {err}"
        );
    }
    let (code, _, err) = hookinbox(
        &server,
        &["dead", "--source", "billing", "--target", "audit"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(r#"warning: no target "audit""#) && err.contains("configured: billing/app"),
        "{err}"
    );
    for args in [
        &["events", "--source", "billing"][..],
        &["events", "--source", "hookinbox.alerts"],
        &["dead", "--target", "audit"],
        &["dead", "--source", "sw", "--target", "audit"],
    ] {
        let (code, _, err) = hookinbox(&server, args);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(!err.contains("warning"), "{args:?}: {err}");
    }
    server.stop().await;
}

on_both_backends!(
    events_lists_newest_first_with_filters_and_pages,
    show_finds_an_event_by_row_id_or_provider_id_with_every_attempt,
    show_refuses_unknown_and_ambiguous_ids,
    conflicts_and_dead_deliveries_are_listed,
    provider_strings_reach_the_terminal_escaped,
    read_commands_warn_of_names_the_config_does_not_have,
);
