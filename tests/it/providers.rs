//! Every source in docs/providers.md, loaded from the document itself into a real server and
//! driven over HTTP: a freshly signed event is stored with its exact bytes; a replay is a
//! duplicate; each failure (no proof, another secret or key, a body changed after signing, a
//! stale timestamp) is 401 with nothing stored; each handshake gets its exact status,
//! content type and body, is counted, and stores nothing. Published vectors without a
//! timestamp go over HTTP too; those with one are checked by the loaded scheme at their
//! time (the server's clock is the real one). The README's scheme table and the document's
//! index both name every scheme of the registry, and the man page every recovery API.

use std::collections::{BTreeMap, BTreeSet};

use hookinbox::clock::unix_now;
use hookinbox::commands::keypair::{self, KeyScheme};
use hookinbox::scheme::{Draft, Input, Sample, Scheme, Verdict};
use hyper::http::Method;

use crate::support::*;

const DOC: &str = include_str!("../../docs/providers.md");
const README: &str = include_str!("../../README.md");
const SECRETS_DIR: &str = "file:/etc/hookinbox/secrets/";

/// The README's scheme table and this document's index each name every scheme of the
/// registry, and nothing else.
#[test]
fn the_readme_and_the_index_name_every_scheme() {
    let registry: BTreeSet<&str> = hookinbox::scheme::PROVIDERS
        .iter()
        .map(|p| p.name)
        .collect();
    for (file, listed) in [
        (
            "README.md",
            schemes_in_table(README, "| scheme | provider |"),
        ),
        (
            "docs/providers.md",
            schemes_in_table(DOC, "| scheme | verifies |"),
        ),
    ] {
        let missing: Vec<&&str> = registry.difference(&listed).collect();
        let unknown: Vec<&&str> = listed.difference(&registry).collect();
        assert!(
            missing.is_empty() && unknown.is_empty(),
            "{file}'s scheme table: missing {missing:?}, not a scheme {unknown:?}"
        );
    }
}

/// The man page's `[sources.recover]` names every provider with a recovery API, and its
/// default URL.
#[test]
fn the_man_page_names_every_recovery_api() {
    use hookinbox::config::reference::SECTIONS;
    use hookinbox::manual::IfAbsent;
    use hookinbox::scheme::providers;
    let apis = providers::names_with(|p| p.recovery.is_some());
    let urls: Vec<&str> = apis
        .iter()
        .filter_map(|name| providers::find(name)?.recovery.as_ref())
        .map(|r| r.url)
        .collect();
    let recover = SECTIONS
        .iter()
        .find(|s| s.header == "[sources.recover]")
        .expect("the man page has a [sources.recover]");
    let key = |name: &str| recover.keys.iter().find(|k| k.name == name).unwrap();
    assert_eq!(key("api").form, apis.join(" or "));
    let default_url = key("api_url").if_absent;
    assert!(
        matches!(default_url, IfAbsent::Derived(d) if d == urls.join(", ")),
        "{default_url:?}, but the providers declare {urls:?}"
    );
}

/// The names in backquotes in the first column of the table whose header row starts with
/// `header`.
fn schemes_in_table<'a>(text: &'a str, header: &str) -> BTreeSet<&'a str> {
    text.lines()
        .skip_while(|l| !l.starts_with(header))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .filter_map(|row| row.split('|').nth(1))
        .flat_map(|cell| cell.split('`').skip(1).step_by(2))
        .collect()
}

/// Every ```toml block of the document, in order.
fn snippets() -> Vec<&'static str> {
    DOC.split("```toml\n")
        .skip(1)
        .map(|rest| rest.split_once("```").expect("a closed block").0)
        .collect()
}

/// A source's test secret and, for the asymmetric schemes, the signing key that matches it.
struct Material {
    secret: String,
    signing_key: Option<String>,
}

/// The material for secret file `file` of a source with `scheme`: a new key pair where the
/// scheme is verified with public keys, else a secret in the form the scheme takes.
fn material(file: &str, scheme: &str) -> Material {
    let plain = |secret: &str| Material {
        secret: secret.to_owned(),
        signing_key: None,
    };
    match (file, KeyScheme::named(scheme)) {
        // Its shared `whsec_` secrets; its `v1a` public keys have their unit tests.
        ("standard-webhooks", _) => plain("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
        ("postmark" | "basic", _) => plain("hooks:pa55word"),
        (_, Some(keys)) => {
            let (secret, key) = keypair::generate(keys).unwrap();
            Material {
                secret,
                signing_key: Some(key),
            }
        }
        (other, None) => plain(&format!("test-secret-{other}")),
    }
}

/// Another secret of the same kind: signing with it must fail.
fn other_material(file: &str, scheme: &str) -> Material {
    match file {
        "standard-webhooks" => Material {
            secret: "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD".into(),
            signing_key: None,
        },
        "postmark" | "basic" => Material {
            secret: "hooks:guess".into(),
            signing_key: None,
        },
        other => material(&format!("{other}-other"), scheme),
    }
}

/// The document's sources, their secret files in `dir`.
struct Doc {
    sources: String,
    material: BTreeMap<String, Material>,
}

impl Doc {
    /// Whether the document holds what signs for `source`: not where the secret is learnt
    /// in a handshake (Asana, armed below) or the key fetched from the provider's host
    /// (SNS, see sns.rs).
    fn signs_for(&self, source: &str) -> bool {
        self.material.contains_key(source)
    }
}

fn load_doc(dir: &std::path::Path) -> Doc {
    let secrets = dir.join("secrets");
    std::fs::create_dir_all(&secrets).unwrap();
    let text = snippets().join("\n");
    let mut material = BTreeMap::new();
    for source in text.split("[[sources]]").skip(1) {
        let scheme = source
            .lines()
            .find_map(|l| l.strip_prefix("scheme = \""))
            .and_then(|rest| rest.strip_suffix('"'))
            .expect("every source names its scheme");
        for rest in source.split(SECRETS_DIR).skip(1) {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            let m = material_for(&name, scheme);
            std::fs::write(secrets.join(&name), &m.secret).unwrap();
            material.insert(name, m);
        }
    }
    Doc {
        sources: text.replace(SECRETS_DIR, &format!("file:{}/", secrets.display())),
        material,
    }
}

fn material_for(name: &str, scheme: &str) -> Material {
    if name == "meta-verify-token" {
        return Material {
            secret: "verify-me".into(),
            signing_key: None,
        };
    }
    material(name, scheme)
}

/// The scheme signs with the first secret; an asymmetric one needs the key.
fn sign(scheme: &Scheme, key: Option<&str>, body: &[u8], id: &str, now: i64, name: &str) -> Sample {
    let key = key.map(hookinbox::secret::Secret::new);
    let path = format!("/hooks/{name}");
    scheme.sign(&Draft {
        body,
        id,
        now,
        path: &path,
        signing_key: key.as_ref(),
    })
}

fn rows(server: &TestServer, source: &str) -> i64 {
    server.count(&format!(
        "SELECT (SELECT count(*) FROM events WHERE source = '{source}')
              + (SELECT count(*) FROM conflicts WHERE source = '{source}')"
    ))
}

#[tokio::test]
async fn every_documented_source_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let doc = load_doc(dir.path());
    let db = dir.path().join("inbox.db");
    let server = TestServer::start_at(dir, db, SERVER, &doc.sources).await;
    let names: Vec<String> = server
        .config
        .sources
        .iter()
        .map(|s| s.name.clone())
        .collect();
    assert!(names.len() >= 30, "{names:?}");
    for provider in hookinbox::scheme::PROVIDERS {
        assert!(
            server
                .config
                .sources
                .iter()
                .any(|s| s.scheme.name() == provider.name),
            "docs/providers.md has no configuration for scheme {}",
            provider.name
        );
    }
    for name in names.iter().filter(|n| doc.signs_for(n)) {
        let scheme = server.scheme(name);
        let m = &doc.material[name.as_str()];
        let key = m.signing_key.as_deref();
        let now = unix_now();
        let id = format!("{name}-evt-1");
        let body = scheme.demo_body(&id, now);

        // Fresh: stored exactly.
        let fresh = Signed::from_sample(sign(scheme, key, &body, &id, now, name));
        let (status, _) = server.post(name, &fresh).await;
        assert!((200..300).contains(&status), "{name}: fresh got {status}");
        assert_eq!(rows(&server, name), 1, "{name}: stored once");
        let event_id: String = server
            .read()
            .query_row(
                "SELECT event_id FROM events WHERE source = ?1",
                [name],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(
            server.stored_body(name, &event_id).as_deref(),
            Some(&fresh.body[..]),
            "{name}: the exact bytes"
        );

        // Replay: the same answer, nothing new.
        assert_eq!(server.post(name, &fresh).await.0, status, "{name}: replay");
        assert_eq!(rows(&server, name), 1, "{name}: a replay is a duplicate");

        // Each failure: 401, nothing stored.
        let mut failures: Vec<(&str, Signed)> = Vec::new();
        failures.push(("no proof", Signed::post(Vec::new(), b"{}".to_vec())));
        let other = other_material(name, scheme.name());
        let wrong = if key.is_some() {
            sign(scheme, other.signing_key.as_deref(), &body, &id, now, name)
        } else {
            // In the other scheme's shape: Graph's proof (clientState) is in the body.
            let other_scheme = scheme_of(&doc.sources, name, &[&other.secret]);
            let other_body = other_scheme.demo_body(&id, now);
            sign(&other_scheme, None, &other_body, &id, now, name)
        };
        failures.push(("another secret", Signed::from_sample(wrong)));
        if scheme.verifier().signs_whole_body() {
            let mut tampered = Signed::from_sample(sign(scheme, key, &body, &id, now, name));
            tampered.body.push(b' ');
            failures.push(("body changed after signing", tampered));
        }
        if scheme.verifier().signs_timestamp() {
            let stale = now - scheme.tolerance().as_secs() as i64 - 120;
            let old_body = scheme.demo_body(&format!("{id}-stale"), stale);
            let old = sign(scheme, key, &old_body, &format!("{id}-stale"), stale, name);
            failures.push(("stale", Signed::from_sample(old)));
        }
        for (what, req) in &failures {
            assert_eq!(server.post(name, req).await.0, 401, "{name}: {what}");
        }
        assert_eq!(
            rows(&server, name),
            1,
            "{name}: nothing stored by a failure"
        );

        // The handshake, where the provider has one.
        let draft_id = format!("challenge-{name}-0123456789");
        let path = format!("/hooks/{name}");
        let signing = key.map(hookinbox::secret::Secret::new);
        let draft = Draft {
            body: b"",
            id: &draft_id,
            now,
            path: &path,
            signing_key: signing.as_ref(),
        };
        let expected = expected_handshake(name, &draft_id, &doc);
        match (scheme.verifier().sign_handshake(&draft), expected) {
            (None, None) => {}
            (Some(sample), Some((kind, status, content_type, want))) => {
                let req = Signed::from_sample(sample);
                let resp = send(&server.client, &server.base, name, &req)
                    .await
                    .unwrap();
                assert_eq!(resp.status().as_u16(), status, "{name}: handshake status");
                let ct = resp
                    .headers()
                    .get("content-type")
                    .map(|v| v.to_str().unwrap().to_owned());
                assert_eq!(
                    ct.as_deref(),
                    content_type,
                    "{name}: handshake content type"
                );
                if name == "dropbox" {
                    assert_eq!(resp.headers()["x-content-type-options"], "nosniff");
                }
                let got = resp.bytes().await.unwrap();
                match want {
                    Want::Text(t) => assert_eq!(got, t.as_bytes(), "{name}: handshake body"),
                    Want::Json(j) => assert_eq!(
                        serde_json::from_slice::<serde_json::Value>(&got).unwrap(),
                        j,
                        "{name}: handshake body"
                    ),
                }
                assert_eq!(rows(&server, name), 1, "{name}: a handshake is not stored");
                let counted = metric(
                    &server.metrics().await,
                    &format!(r#"hookinbox_handshakes_total{{source="{name}",kind="{kind}"}}"#),
                );
                assert_eq!(counted, 1.0, "{name}: the handshake is counted");
            }
            (got, want) => panic!(
                "{name}: handshake {} but the test expects {}",
                if got.is_some() { "signed" } else { "none" },
                if want.is_some() { "one" } else { "none" }
            ),
        }
    }
    server.stop().await;
}

enum Want {
    Text(String),
    Json(serde_json::Value),
}

/// What each provider's protocol requires as the answer to its handshake:
/// (metric kind, status, content type, body).
fn expected_handshake(
    name: &str,
    id: &str,
    doc: &Doc,
) -> Option<(&'static str, u16, Option<&'static str>, Want)> {
    let text = |kind| Some((kind, 200, Some("text/plain"), Want::Text(id.to_owned())));
    match name {
        "slack" => Some((
            "url_verification",
            200,
            Some("application/json"),
            Want::Json(serde_json::json!({ "challenge": id })),
        )),
        "twitch" => text("callback_verification"),
        "meta" => text("subscribe"),
        "dropbox" => text("challenge"),
        "microsoft-graph" => text("validation"),
        "zoom" => {
            let key = ring::hmac::Key::new(
                ring::hmac::HMAC_SHA256,
                doc.material["zoom"].secret.as_bytes(),
            );
            let token = hex::encode(ring::hmac::sign(&key, id.as_bytes()).as_ref());
            Some((
                "url_validation",
                200,
                Some("application/json"),
                Want::Json(serde_json::json!({ "plainToken": id, "encryptedToken": token })),
            ))
        }
        "discord" => Some((
            "ping",
            200,
            Some("application/json"),
            Want::Json(serde_json::json!({ "type": 1 })),
        )),
        "okta" => Some((
            "verification",
            200,
            Some("application/json"),
            Want::Json(serde_json::json!({ "verification": id })),
        )),
        "woocommerce" => Some(("ping", 200, Some("text/plain"), Want::Text("ok\n".into()))),
        _ => None,
    }
}

#[tokio::test]
async fn handshakes_refuse_what_their_protocol_can_check() {
    let dir = tempfile::tempdir().unwrap();
    let doc = load_doc(dir.path());
    let db = dir.path().join("inbox.db");
    let server = TestServer::start_at(dir, db, SERVER, &doc.sources).await;
    let get = |query: &str| Signed {
        method: Method::GET,
        query: Some(query.to_owned()),
        headers: Vec::new(),
        body: Vec::new(),
    };
    // Meta: the wrong verify token is 401, and no challenge is echoed.
    let (status, body) = server
        .post(
            "meta",
            &get("hub.mode=subscribe&hub.verify_token=guess&hub.challenge=42"),
        )
        .await;
    assert_eq!((status, body.as_str()), (401, "unauthorized\n"));
    // Okta: the verification GET without the token is 401.
    let mut okta = get("");
    okta.headers
        .push(("X-Okta-Verification-Challenge".into(), "abc".into()));
    assert_eq!(server.post("okta", &okta).await.0, 401);
    // A source that sends only POST refuses GET with 405 and names what it takes.
    let resp = send(&server.client, &server.base, "stripe", &get(""))
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 405);
    assert_eq!(resp.headers()["allow"], "POST");
    let resp = send(&server.client, &server.base, "zendesk", &get(""))
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 405);
    assert_eq!(resp.headers()["allow"], "POST, PUT, PATCH");
    let resp = send(
        &server.client,
        &server.base,
        "meta",
        &Signed {
            method: Method::PUT,
            ..get("")
        },
    )
    .await
    .unwrap();
    assert_eq!(resp.headers()["allow"], "GET, POST");
    // A Discord interaction is answered with the deferral once stored.
    let scheme = server.scheme("discord");
    let key = doc.material["discord"].signing_key.as_deref();
    let body = scheme.demo_body("1234567890", unix_now());
    let req = Signed::from_sample(sign(scheme, key, &body, "x", unix_now(), "discord"));
    let (status, answer) = server.post("discord", &req).await;
    assert_eq!((status, answer.as_str()), (200, r#"{"type":5}"#));
    assert_eq!(server.count("SELECT count(*) FROM events"), 1);
    server.stop().await;
}

/// Vectors without a timestamp, over HTTP with their own secrets and URLs.
const VECTORS: &str = r#"
[[sources]]
name = "square"
scheme = "square"
secrets = ["Ibxx_5AKakO-3qeNVR61Dw"]
public_url = "https://webhook.site/679a4f3a-dcfa-49ee-bac5-9d0edad886b9"

[[sources]]
name = "dropbox"
scheme = "dropbox"
secrets = ["the_secret"]

[[sources]]
name = "twilio"
scheme = "twilio"
secrets = ["12345"]
public_url = "https://mycompany.com/myapp.php"
"#;

#[tokio::test]
async fn published_vectors_over_http() {
    let server = TestServer::start(VECTORS).await;
    let square = Signed::post(
        vec![("x-square-hmacsha256-signature".into(), "GF4YkrJgGBDZ9NIYbNXBnMzqb2HoL4RW/S6vkZ9/2N4=".into())],
        br#"{"merchant_id":"MLEFBHHSJGVHD","type":"webhooks.test_notification","event_id":"ac3ac95b-f97d-458c-a6e6-18981597e05f","created_at":"2022-07-13T20:30:59.037339943Z","data":{"type":"webhooks","id":"bc368e64-01aa-407e-b46e-3231809b1129"}}"#.to_vec(),
    );
    assert_eq!(server.post("square", &square).await.0, 200);
    assert!(
        server
            .stored_body("square", "ac3ac95b-f97d-458c-a6e6-18981597e05f")
            .is_some()
    );
    let dropbox = Signed::post(
        vec![(
            "X-Dropbox-Signature".into(),
            "0a8c16b085420b960dc78664279fe09e936a2a01b1f91064869d9e77dfd64529".into(),
        )],
        br#"{"delta": {"users": [12345]}}"#.to_vec(),
    );
    assert_eq!(server.post("dropbox", &dropbox).await.0, 200);
    let mut twilio = Signed::post(
        vec![
            ("X-Twilio-Signature".into(), "RSOYDt4T1cUTdK1PDd93/VVr8B8=".into()),
            ("Content-Type".into(), "application/x-www-form-urlencoded".into()),
        ],
        b"CallSid=CA1234567890ABCDE&Caller=%2B14158675309&Digits=1234&From=%2B14158675309&To=%2B18005551212".to_vec(),
    );
    twilio.query = Some("foo=1&bar=2".into());
    assert_eq!(server.post("twilio", &twilio).await.0, 200);
    // The same request signed for another URL, as a proxy's Host would suggest: refused.
    twilio.query = Some("foo=1&bar=3".into());
    assert_eq!(server.post("twilio", &twilio).await.0, 401);
    assert_eq!(server.count("SELECT count(*) FROM events"), 3);
    server.stop().await;
}

/// Vectors with a timestamp, through the schemes the server loaded, at their time.
#[tokio::test]
async fn published_vectors_with_timestamps_verify_at_their_time() {
    let sources = r#"
[[sources]]
name = "paddle"
scheme = "paddle"
secrets = ["pdl_ntfset_01hsdn8d43dt7mezr1ef2jtbaw_hKkRiCGyyRhbFwIUuqiTBgI7gnWoV0Gr"]

[[sources]]
name = "twitch"
scheme = "twitch"
secrets = ["Twitch4J"]

[[sources]]
name = "sendgrid"
scheme = "sendgrid"
secrets = ["MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEEDr2LjtURuePQzplybdC+u4CwrqDqBaWjcMMsTbhdbcwHBcepxo7yAQGhHPTnlvFYPAZFceEu/1FwCM/QmGUhA=="]
id = "sha256"
"#;
    let server = TestServer::start(sources).await;
    let check = |source: &str, headers: &[(&str, &str)], body: &[u8], now: i64| {
        let mut h = hyper::http::HeaderMap::new();
        for (k, v) in headers {
            h.append(
                hyper::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        server.scheme(source).verify(&Input::post(&h, body, now))
    };
    let paddle = br#"{"data":{"id":"pri_01hsdn96k2hxjzsq5yerecdj9j","name":null,"status":"active","quantity":{"maximum":999999,"minimum":1},"tax_mode":"account_setting","product_id":"pro_01hsdn8qp7yydry3x1yeg6a9rv","unit_price":{"amount":"1000","currency_code":"USD"},"custom_data":null,"description":"testing","import_meta":null,"trial_period":null,"billing_cycle":{"interval":"month","frequency":1},"unit_price_overrides":[]},"event_id":"evt_01hsdn97563968dy0szkmgjwh3","event_type":"price.created","occurred_at":"2024-03-20T10:07:35.590857Z","notification_id":"ntf_01hsdn977e920kbgzt6r6c9rqc"}"#;
    let v = check(
        "paddle",
        &[(
            "Paddle-Signature",
            "ts=1710929255;h1=6c05ef8fa83c44d751be6d259ec955ce5638e2c54095bf128e408e2fce1589c8",
        )],
        paddle,
        1710929255,
    );
    assert!(
        matches!(v, Ok(Verdict::Event(ref i)) if i.event_id == "evt_01hsdn97563968dy0szkmgjwh3"),
        "{v:?}"
    );
    let v = check(
        "twitch",
        &[
            (
                "Twitch-Eventsub-Message-Id",
                "7d4c39a4-10b3-4166-b1fb-56130d1f693b",
            ),
            (
                "Twitch-Eventsub-Message-Timestamp",
                "2020-12-13T14:15:16.1718Z",
            ),
            (
                "Twitch-Eventsub-Message-Signature",
                "sha256=2ac8d26bf60837663d8969f3cb4f22f685c8fa0a4b99d533c8bf622ed4596cc6",
            ),
        ],
        br#"{"hello":"world"}"#,
        1_607_868_916,
    );
    assert!(
        matches!(v, Ok(Verdict::Event(ref i)) if i.event_id == "7d4c39a4-10b3-4166-b1fb-56130d1f693b"),
        "{v:?}"
    );
    let v = check(
        "sendgrid",
        &[
            (
                "X-Twilio-Email-Event-Webhook-Signature",
                "MEUCIQCtIHJeH93Y+qpYeWrySphQgpNGNr/U+UyUlBkU6n7RAwIgJTz2C+8a8xonZGi6BpSzoQsbVRamr2nlxFDWYNH2j/0=",
            ),
            ("X-Twilio-Email-Event-Webhook-Timestamp", "1588788367"),
        ],
        br#"{"category":"example_payload","event":"test_event","message_id":"message_id"}"#,
        1_588_788_367,
    );
    assert!(matches!(v, Ok(Verdict::Event(_))), "{v:?}");
    server.stop().await;
}

const ASANA: &str = r#"
[[sources]]
name = "asana"
scheme = "asana"

[[sources]]
name = "stripe"
scheme = "stripe"
secrets = ["whsec_x"]
"#;

fn hook_secret(secret: &str) -> Signed {
    Signed::post(vec![("X-Hook-Secret".into(), secret.into())], Vec::new())
}

fn asana_event(secret: &str, body: &[u8]) -> Signed {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    let sig = hex::encode(ring::hmac::sign(&key, body).as_ref());
    Signed::post(vec![("X-Hook-Signature".into(), sig)], body.to_vec())
}

async fn asana_learns_its_secret_only_inside_an_armed_window(backend: Backend) {
    assert!(
        DOC.contains("scheme = \"asana\""),
        "docs/providers.md configures asana"
    );
    let keep = tempfile::tempdir().unwrap();
    let test = "providers::asana_learns_its_secret_only_inside_an_armed_window";
    let Some(server) = TestServer::on(backend, test, ASANA).await else {
        return;
    };
    // With replicas, another one that started before the secret was learnt.
    let other = match &server.pg {
        Some(url) => Some(TestServer::start_store(&pg_store(url), ASANA).await),
        None => None,
    };
    let config = server.config.path.display().to_string();
    const S: &str = "b537207f20cbfa02357cf448134da559";

    // No window: refused, nothing learnt.
    assert_eq!(server.post("asana", &hook_secret(S)).await.0, 401);
    assert_eq!(server.count("SELECT count(*) FROM learnt_secrets"), 0);
    let m = server.metrics().await;
    assert_eq!(
        metric(
            &m,
            r#"hookinbox_signature_failures_total{source="asana",reason="not_armed"}"#
        ),
        1.0
    );

    // arm refuses what cannot learn, then opens the window.
    let (code, _, err) = hookinbox(&["arm", "--config", &config, "--source", "stripe"]);
    assert_ne!(code, 0);
    assert!(
        err.contains("arm is for schemes that hand their secret over"),
        "{err}"
    );
    let (code, out, err) = hookinbox(&[
        "arm", "--config", &config, "--source", "asana", "--for", "5m",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("armed source \"asana\" until"), "{out}");

    // The handshake inside it: echoed once stored, and the window closes.
    let resp = send(&server.client, &server.base, "asana", &hook_secret(S))
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.headers()["x-hook-secret"], S);
    assert!(resp.bytes().await.unwrap().is_empty());
    assert_eq!(
        server.count("SELECT count(*) FROM learnt_secrets WHERE source = 'asana'"),
        1
    );
    assert_eq!(server.count("SELECT count(*) FROM armed"), 0);
    assert_eq!(
        server
            .post("asana", &hook_secret("an-intruder-secret"))
            .await
            .0,
        401
    );
    let learnt = server.inbox().bytes("SELECT secret FROM learnt_secrets");
    assert_eq!(
        learnt.as_deref(),
        Some(S.as_bytes()),
        "the second handshake changed nothing"
    );

    // Events: only the learnt secret verifies.
    let body = br#"{"events":[{"action":"changed","resource":{"gid":"1"}}]}"#;
    assert_eq!(server.post("asana", &asana_event(S, body)).await.0, 200);
    assert_eq!(
        server
            .post(
                "asana",
                &asana_event("an-intruder-secret", b"{\"events\":[]}")
            )
            .await
            .0,
        401
    );
    assert_eq!(
        server.count("SELECT count(*) FROM events WHERE source = 'asana'"),
        1
    );

    // `sign` signs with the learnt secret, read from the inbox.
    let body_file = keep.path().join("body.json");
    let signed_body = br#"{"events":[{"action":"added","resource":{"gid":"2"}}]}"#;
    std::fs::write(&body_file, signed_body).unwrap();
    let body_arg = body_file.display().to_string();
    let (code, out, err) = hookinbox(&[
        "sign", "--config", &config, "--source", "asana", "--body", &body_arg, "--format",
        "headers",
    ]);
    assert_eq!(code, 0, "{err}");
    let headers = out
        .lines()
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let req = Signed::post(headers, signed_body.to_vec());
    assert_eq!(server.post("asana", &req).await.0, 200);
    assert_eq!(
        server.count("SELECT count(*) FROM events WHERE source = 'asana'"),
        2
    );
    if let Some(other) = other {
        // The replica that did not see the handshake verifies with the learnt secret too,
        // and its window is the one closed.
        let body = br#"{"events":[{"action":"removed","resource":{"gid":"3"}}]}"#;
        assert_eq!(other.post("asana", &asana_event(S, body)).await.0, 200);
        assert_eq!(other.post("asana", &hook_secret("later")).await.0, 401);
        other.stop().await;
    }

    // After a restart the secret is still known.
    let server = server.restart(ASANA).await;
    assert_eq!(
        server
            .post("asana", &asana_event(S, b"{\"events\":[]}"))
            .await
            .0,
        200
    );
    server.stop().await;
}

/// What `hookinbox sign --format json` printed, as a request.
fn printed(out: &str) -> Signed {
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect("sign prints JSON");
    Signed {
        method: v["method"].as_str().unwrap().parse().unwrap(),
        query: v["query"].as_str().map(str::to_owned),
        headers: v["headers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| {
                (
                    h[0].as_str().unwrap().to_owned(),
                    h[1].as_str().unwrap().to_owned(),
                )
            })
            .collect(),
        body: v["body"].as_str().unwrap().as_bytes().to_vec(),
    }
}

#[tokio::test]
async fn what_sign_prints_is_accepted_for_every_documented_source() {
    let dir = tempfile::tempdir().unwrap();
    let doc = load_doc(dir.path());
    let keys = dir.path().join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    let db = dir.path().join("inbox.db");
    let server = TestServer::start_at(dir, db, SERVER, &doc.sources).await;
    let config = server.config.path.display().to_string();
    let names: Vec<String> = server
        .config
        .sources
        .iter()
        .map(|s| s.name.clone())
        .collect();
    for name in names.iter().filter(|n| doc.signs_for(n)) {
        let mut args = vec![
            "sign", "--config", &config, "--source", name, "--format", "json",
        ];
        let key_file = keys.join(name);
        let key_arg = format!("file:{}", key_file.display());
        if let Some(key) = &doc.material[name.as_str()].signing_key {
            std::fs::write(&key_file, key).unwrap();
            args.extend(["--signing-key", &key_arg]);
        }
        let (code, out, err) = hookinbox(&args);
        assert_eq!(code, 0, "{name}: {err}");
        let (status, _) = server.post(name, &printed(&out)).await;
        assert!(
            (200..300).contains(&status),
            "{name}: what sign printed got {status}"
        );
        if server
            .scheme(name)
            .verifier()
            .sign_handshake(&Draft {
                body: b"",
                id: "x",
                now: 0,
                path: "/",
                signing_key: None,
            })
            .is_some()
        {
            args.push("--handshake");
            let (code, out, err) = hookinbox(&args);
            assert_eq!(code, 0, "{name}: {err}");
            let (status, _) = server.post(name, &printed(&out)).await;
            assert_eq!(status, 200, "{name}: the handshake sign printed");
        }
    }
    // Without --signing-key, a public-key source says what it needs.
    let (code, _, err) = hookinbox(&["sign", "--config", &config, "--source", "discord"]);
    assert_ne!(code, 0);
    assert!(err.contains("--signing-key"), "{err}");
    let (code, _, err) = hookinbox(&[
        "sign",
        "--config",
        &config,
        "--source",
        "stripe",
        "--handshake",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("has no handshake"), "{err}");
    server.stop().await;
}

on_both_backends!(asana_learns_its_secret_only_inside_an_armed_window);
