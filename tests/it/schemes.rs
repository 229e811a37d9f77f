//! Every scheme, end to end over HTTP.

use hookinbox::clock::unix_now;
use hookinbox::scheme::{Input, Reject, Scheme, Verdict};
use hyper::http::{HeaderMap, HeaderName, HeaderValue};

use crate::support::*;

const SOURCES: [&str; 7] = [
    "sw", "stripe", "github", "shopify", "slack", "gitlab", "hmac",
];

fn signs_timestamp(source: &str) -> bool {
    matches!(source, "sw" | "stripe" | "slack" | "hmac")
}

/// A scheme like `source`'s, but keyed with another secret.
fn with_other_secret(source: &str) -> Scheme {
    let other = match source {
        "sw" => "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
        _ => "not-the-configured-secret",
    };
    scheme_of(ALL_SCHEMES, source, &[other])
}

/// Changes one character of the signature, keeping it in the same alphabet.
fn flip_one(value: &str) -> String {
    let mut chars: Vec<char> = value.chars().collect();
    let i = chars.len() - 5;
    chars[i] = if chars[i] == 'a' { 'b' } else { 'a' };
    chars.into_iter().collect()
}

fn events_of(server: &TestServer, source: &str) -> i64 {
    server.count(&format!(
        "SELECT (SELECT count(*) FROM events WHERE source = '{source}')
              + (SELECT count(*) FROM conflicts WHERE source = '{source}')"
    ))
}

#[tokio::test]
async fn each_scheme_accepts_a_freshly_signed_request_and_stores_it_exactly() {
    let server = TestServer::start(ALL_SCHEMES).await;
    for source in SOURCES {
        let id = format!("{source}-evt-1");
        let body = event_body(&id, "fresh");
        let req = server.sign(source, &id, &body);
        assert_eq!(
            server.post(source, &req).await,
            (200, "accepted\n".into()),
            "{source}"
        );
        assert_eq!(
            server.stored_body(source, &id).as_deref(),
            Some(&body[..]),
            "{source}"
        );
        let targets = server.config.source(source).unwrap().targets.len() as i64;
        let deliveries = server.count(&format!(
            "SELECT count(*) FROM deliveries d JOIN events e ON e.id = d.event
             WHERE e.source = '{source}'"
        ));
        assert_eq!(deliveries, targets, "{source}: one delivery per target");
    }
    server.stop().await;
}

#[tokio::test]
async fn each_failure_reason_gets_a_generic_401_and_stores_nothing() {
    let server = TestServer::start(ALL_SCHEMES).await;
    for source in SOURCES {
        let id = format!("{source}-bad");
        let body = event_body(&id, "bad");
        let header = signature_header(source);
        let mut cases: Vec<(&str, Signed)> = Vec::new();

        let mut missing = server.sign(source, &id, &body);
        missing.remove(header);
        cases.push(("missing header", missing));

        let mut malformed = server.sign(source, &id, &body);
        malformed.set(header, "%%%not a signature%%%");
        cases.push(("malformed header", malformed));

        let wrong = sign_with(&with_other_secret(source), &id, &body, unix_now());
        cases.push(("wrong secret", wrong));

        let mut flipped = server.sign(source, &id, &body);
        let value = flip_one(flipped.get(header).unwrap());
        flipped.set(header, &value);
        cases.push(("one flipped character", flipped));

        // GitLab sends a shared token, not a signature over the body.
        if source != "gitlab" {
            let mut tampered = server.sign(source, &id, &body);
            tampered.body = event_body(&id, "tampered");
            cases.push(("body changed after signing", tampered));
        }

        if signs_timestamp(source) {
            cases.push((
                "301 s old",
                server.sign_at(source, &id, &body, unix_now() - 301),
            ));
            // The server reads its clock after the test did, so "ahead" shrinks by however
            // long the request takes: one second more would land inside the window. The
            // exact edge is checked in the schemes' unit tests, with a fixed clock.
            cases.push((
                "305 s ahead",
                server.sign_at(source, &id, &body, unix_now() + 305),
            ));
        }
        for (what, req) in &cases {
            assert_eq!(
                server.post(source, req).await,
                (401, "unauthorized\n".into()),
                "{source}: {what}"
            );
        }
        assert_eq!(events_of(&server, source), 0, "{source}: nothing stored");
    }
    let metrics = server.metrics().await;
    assert!(
        metric(
            &metrics,
            r#"hookinbox_signature_failures_total{source="sw",reason="timestamp_too_old"}"#
        ) >= 1.0
    );
    assert!(
        metric(
            &metrics,
            r#"hookinbox_signature_failures_total{source="sw",reason="missing_header"}"#
        ) >= 1.0
    );
    server.stop().await;
}

#[tokio::test]
async fn timestamps_inside_the_window_are_accepted() {
    let server = TestServer::start(ALL_SCHEMES).await;
    for source in ["sw", "stripe", "slack", "hmac"] {
        for (n, skew) in [-290i64, 290].into_iter().enumerate() {
            let id = format!("{source}-skew-{n}");
            let req = server.sign_at(source, &id, &event_body(&id, ""), unix_now() + skew);
            assert_eq!(
                server.post(source, &req).await.0,
                200,
                "{source} at {skew:+} s"
            );
        }
    }
    server.stop().await;
}

#[tokio::test]
async fn published_vectors_without_timestamps_are_accepted_by_the_server() {
    let server = TestServer::start(ALL_SCHEMES).await;
    // GitHub's documented example (validating-webhook-deliveries).
    let github = Signed::post(
        vec![
            (
                "X-Hub-Signature-256".into(),
                "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17".into(),
            ),
            (
                "X-GitHub-Delivery".into(),
                "72d3162e-cc78-11e3-81ab-4c9367dc0958".into(),
            ),
            ("X-GitHub-Event".into(), "ping".into()),
        ],
        b"Hello, World!".to_vec(),
    );
    assert_eq!(server.post("github", &github).await.0, 200);
    let event_type: String = server
        .read()
        .query_row(
            "SELECT event_type FROM events WHERE source = 'github'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(event_type, "ping");
    // The Shopify vector generated with the official library's test helper.
    let shopify = Signed::post(
        vec![
            (
                "X-Shopify-Hmac-Sha256".into(),
                "D0UMXmhjwBRi4y66TmhJrDlhQABD7zI2fm3p6/QLMo8=".into(),
            ),
            (
                "X-Shopify-Webhook-Id".into(),
                "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043".into(),
            ),
            ("X-Shopify-Topic".into(), "orders/create".into()),
        ],
        br#"{"id":820982911946154508,"email":"jon@example.com"}"#.to_vec(),
    );
    assert_eq!(server.post("shopify", &shopify).await.0, 200);
    server.stop().await;
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

#[tokio::test]
async fn published_vectors_with_timestamps_verify_at_their_time() {
    let server = TestServer::start(ALL_SCHEMES).await;
    // Standard Webhooks vector A, from the official libraries' test suites.
    let h = headers(&[
        ("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek"),
        ("webhook-timestamp", "1614265330"),
        (
            "webhook-signature",
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
        ),
    ]);
    let body = br#"{"test": 2432232314}"#;
    let v = server
        .scheme("sw")
        .verify(&Input::post(&h, body, 1614265330));
    assert!(
        matches!(v, Ok(Verdict::Event(ref i)) if i.event_id == "msg_p5jXN8AQM9LWM0D4loKWxJek"),
        "{v:?}"
    );
    // ... and the same request today is a replay outside the window.
    let v = server
        .scheme("sw")
        .verify(&Input::post(&h, body, unix_now()));
    assert_eq!(v, Err(Reject::TooOld));

    // Stripe, cross-checked between stripe-python and stripe-node.
    let h = headers(&[(
        "Stripe-Signature",
        "t=1700000000,v1=0c8670ed117751cc551a20e35839447075c42800ea3cf3e8a2fbda99cd1e6edd",
    )]);
    let body = br#"{"id":"evt_1","object":"event"}"#;
    let v = server
        .scheme("stripe")
        .verify(&Input::post(&h, body, 1700000000));
    assert!(
        matches!(v, Ok(Verdict::Event(ref i)) if i.event_id == "evt_1"),
        "{v:?}"
    );

    // Slack's documented example: a slash command, signed correctly but carrying no
    // event id, so it gets past the signature and stops at the identity (400, not 401).
    let body = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    let h = headers(&[
        ("X-Slack-Request-Timestamp", "1531420618"),
        (
            "X-Slack-Signature",
            "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503",
        ),
    ]);
    let v = server
        .scheme("slack")
        .verify(&Input::post(&h, body, 1531420618));
    assert!(matches!(v, Err(ref r) if !r.is_auth()), "{v:?}");
    server.stop().await;
}

const ROTATION: &str = r#"
[[sources]]
name = "rotating"
scheme = "standard-webhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"]

[[sources]]
name = "stripe2"
scheme = "stripe"
secrets = ["whsec_old", "whsec_new"]
"#;

#[tokio::test]
async fn rotation_accepts_either_secret_and_any_good_signature_in_the_header() {
    let server = TestServer::start(ROTATION).await;
    for (n, secret) in [
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
    ]
    .into_iter()
    .enumerate()
    {
        let one = scheme_of(ROTATION, "rotating", &[secret]);
        let id = format!("msg_rot_{n}");
        let req = sign_with(&one, &id, &event_body(&id, ""), unix_now());
        assert_eq!(server.post("rotating", &req).await.0, 200, "secret {n}");
    }
    // One bad and one good signature in the same header: accepted.
    let mut req = server.sign(
        "rotating",
        "msg_rot_mixed",
        &event_body("msg_rot_mixed", ""),
    );
    let good = req.get("webhook-signature").unwrap().to_owned();
    req.set(
        "webhook-signature",
        &format!("v1,{} {good}", "A".repeat(43) + "="),
    );
    assert_eq!(server.post("rotating", &req).await.0, 200);

    for (n, secret) in ["whsec_old", "whsec_new"].into_iter().enumerate() {
        let one = scheme_of(ROTATION, "stripe2", &[secret]);
        let id = format!("evt_rot_{n}");
        let req = sign_with(&one, &id, &event_body(&id, ""), unix_now());
        assert_eq!(
            server.post("stripe2", &req).await.0,
            200,
            "stripe secret {n}"
        );
    }
    let mut req = server.sign("stripe2", "evt_rot_mixed", &event_body("evt_rot_mixed", ""));
    let good = req.get("stripe-signature").unwrap().to_owned();
    let (t, v1) = good.split_once(',').unwrap();
    req.set(
        "stripe-signature",
        &format!("{t},v1={},{v1},v0=deadbeef", "0".repeat(64)),
    );
    assert_eq!(server.post("stripe2", &req).await.0, 200);
    assert_eq!(server.count("SELECT count(*) FROM events"), 6);
    server.stop().await;
}

#[tokio::test]
async fn slack_url_verification_is_answered_after_the_signature_and_not_stored() {
    let server = TestServer::start(ALL_SCHEMES).await;
    let body = br#"{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
    let req = server.sign("slack", "unused", body);
    let (status, answer) = server.post("slack", &req).await;
    assert_eq!(status, 200);
    let json: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(
        json["challenge"],
        "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"
    );
    // The same handshake with a bad signature is refused: no challenge for strangers.
    let mut forged = server.sign("slack", "unused", body);
    forged.set("x-slack-signature", &format!("v0={}", "0".repeat(64)));
    assert_eq!(server.post("slack", &forged).await.0, 401);
    assert_eq!(events_of(&server, "slack"), 0);
    server.stop().await;
}

#[tokio::test]
async fn routing_answers_404_and_405_and_stores_nothing() {
    let server = TestServer::start(ALL_SCHEMES).await;
    let req = server.sign("sw", "msg_route", &event_body("msg_route", ""));
    assert_eq!(server.post("nope", &req).await.0, 404);
    let r = server
        .client
        .get(format!("{}/hooks/sw", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 405);
    assert_eq!(r.headers()["allow"], "POST");
    let r = server
        .client
        .post(format!("{}/elsewhere", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    assert_eq!(server.count("SELECT count(*) FROM events"), 0);
    // The wrong method is counted under its source, as every refusal is.
    let metrics = server.metrics().await;
    assert!(
        metrics.contains(r#"hookinbox_requests_total{source="sw",outcome="method_not_allowed"} 1"#),
        "{metrics}"
    );
    server.stop().await;
}

#[tokio::test]
async fn an_authentic_request_without_an_event_id_is_400() {
    let server = TestServer::start(ALL_SCHEMES).await;
    // Stripe reads the id from the body; a validly signed body without one is unusable.
    let req = server.sign("stripe", "ignored", br#"{"object":"event"}"#);
    assert_eq!(
        server.post("stripe", &req).await,
        (400, "bad request\n".into())
    );
    let req = server.sign("stripe", "ignored", b"not json");
    assert_eq!(server.post("stripe", &req).await.0, 400);
    assert_eq!(server.count("SELECT count(*) FROM events"), 0);
    server.stop().await;
}

#[tokio::test]
async fn credentials_are_not_stored_with_the_headers() {
    let server = TestServer::start(ALL_SCHEMES).await;
    let mut req = server.sign("gitlab", "gl-1", &event_body("gl-1", ""));
    req.set("authorization", "Bearer something");
    req.set("x-gitlab-event", "Push Hook");
    assert_eq!(server.post("gitlab", &req).await.0, 200);
    let headers: String = server
        .read()
        .query_row(
            "SELECT headers FROM event_payloads WHERE source = 'gitlab'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(!headers.contains("glpat-shared-token"), "{headers}");
    assert!(
        !headers.to_lowercase().contains("authorization"),
        "{headers}"
    );
    assert!(headers.contains("Push Hook"), "{headers}");
    server.stop().await;
}
