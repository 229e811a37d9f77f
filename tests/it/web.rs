//! The web inbox in a real headless Chromium, driven over WebDriver (chromedriver): filter,
//! open an event, see its body, replay with actions on, be refused with them off, and a
//! provider's `<script>` in a body or a header never runs. The refusals of forged POSTs
//! (no token, another Origin, another Host) are checked with a plain HTTP client too, as an
//! attacker would send them.
//!
//! With `HOOKINBOX_SCREENSHOTS=DIR` the main pages are saved there as PNGs (the README's
//! pictures: `HOOKINBOX_SCREENSHOTS=docs/screenshots cargo test --all-features web::`).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};

use crate::sink::{Reply, Sink};
use crate::support::*;

/// A header and a body a hostile provider could send: each would run script if the page
/// put it into the HTML unescaped.
const HOSTILE_BODY: &str = r#"{"type":"invoice.paid","note":"</pre><script>document.title='pwned'</script>","img":"\"><img src=x onerror=\"document.title='pwned'\">"}"#;
const HOSTILE_HEADER: &str = "<script>document.title='pwned'</script>";

/// chromedriver and a headless Chromium session; the driver is killed on drop.
struct Browser {
    driver: Child,
    client: Client,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn find(program: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|p| p.is_file())
    })
}

/// Starts chromedriver on a free port and a headless session, or says why it cannot
/// (`HOOKINBOX_REQUIRE_BROWSER` turns that into a failure).
async fn browser(test: &str) -> Option<Browser> {
    let (Some(chromium), Some(driver)) = (
        find("chromium").or_else(|| find("chromium-browser")),
        find("chromedriver"),
    ) else {
        skip(
            "BROWSER",
            test,
            "chromium and chromedriver are not installed (Debian: apt install chromium chromium-driver)",
        );
        return None;
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let driver = Command::new(driver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "binary": chromium,
            // --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1280,900"],
        }),
    );
    let url = format!("http://127.0.0.1:{port}");
    let mut last = None;
    // chromedriver takes a moment to listen; a session takes a moment to start.
    for _ in 0..100 {
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        match ClientBuilder::new(connector)
            .capabilities(caps.clone())
            .connect(&url)
            .await
        {
            Ok(client) => return Some(Browser { driver, client }),
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no WebDriver session: {last:?}");
}

/// Saves a screenshot of the page as `name`.png when HOOKINBOX_SCREENSHOTS names a directory.
async fn screenshot(c: &Client, name: &str) {
    if let Some(dir) = std::env::var_os("HOOKINBOX_SCREENSHOTS") {
        let png = c.screenshot().await.unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(std::path::Path::new(&dir).join(format!("{name}.png")), png).unwrap();
    }
}

/// The text of the first element `css` finds.
async fn text_of(c: &Client, css: &str) -> String {
    c.find(Locator::Css(css))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Clicks the element `what` finds.
async fn click(c: &Client, what: Locator<'_>) {
    c.find(what).await.unwrap().click().await.unwrap();
}

/// Clicks the button whose text contains `button`, waits for the page it leads to (its
/// `h1` contains `heading`), and returns that page's main text.
async fn press(c: &Client, button: &str, heading: &str) -> String {
    c.find(Locator::XPath(&format!(
        "//button[contains(., '{button}')]"
    )))
    .await
    .unwrap()
    .click()
    .await
    .unwrap();
    c.wait()
        .for_element(Locator::XPath(&format!("//h1[contains(., '{heading}')]")))
        .await
        .unwrap();
    text_of(c, "main").await
}

/// Nothing a provider sent ran: no script element in the document and the title as the
/// page set it.
async fn assert_no_script_ran(c: &Client, page: &str) {
    let found = c
        .execute(
            "return [document.querySelectorAll('script').length, document.title, \
                     document.querySelectorAll('img').length]",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        found[0], 0,
        "{page}: a script element made it into the page"
    );
    assert_eq!(found[2], 0, "{page}: an img element made it into the page");
    assert!(
        !found[1].as_str().unwrap().contains("pwned"),
        "{page}: a provider's script ran"
    );
}

fn web_config(sink: &Sink, actions: bool) -> (String, String) {
    let server = format!("{SERVER}\nactions = {actions}\n");
    let sources = format!(
        "{}
[[sources]]
name = \"other\"
scheme = \"standard-webhooks\"
secrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]

# Never sent anything: silent after a second, for the banner.
[[sources]]
name = \"quiet\"
scheme = \"standard-webhooks\"
secrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]
expect_every = \"1s\"
",
        forwarding(&sink.url(), "")
    );
    (server, sources)
}

async fn send_hostile(server: &TestServer, source: &str, id: &str) {
    let mut req = server.sign(source, id, HOSTILE_BODY.as_bytes());
    req.set("x-note", HOSTILE_HEADER);
    assert_eq!(server.post(source, &req).await.0, 200);
}

async fn a_browser_filters_opens_an_event_sees_its_body_and_replays_it(backend: Backend) {
    let test = "web::a_browser_filters_opens_an_event_sees_its_body_and_replays_it";
    let Some(b) = browser(test).await else {
        return;
    };
    let c = &b.client;
    let sink = Sink::start(|_, _| Reply::Status(200)).await;
    let (config, sources) = web_config(&sink, true);
    let Some(server) = TestServer::on_with(backend, test, &config, &sources).await else {
        return;
    };
    send_hostile(&server, "sw", "evt_hostile").await;
    for i in 0..3 {
        let body = event_body(&format!("evt_other_{i}"), "");
        let req = server.sign("other", &format!("evt_other_{i}"), &body);
        assert_eq!(server.post("other", &req).await.0, 200);
    }
    // A conflict: the same id with other bytes, for the side-by-side page.
    let req = server.sign(
        "sw",
        "evt_hostile",
        br#"{"type":"invoice.paid","note":"changed"}"#,
    );
    assert_eq!(server.post("sw", &req).await.0, 409);
    server
        .wait_count(
            "SELECT count(*) FROM deliveries WHERE state = 'delivered'",
            1,
        )
        .await;

    // The overview: every source and target, and nothing the provider sent ran.
    c.goto(&format!("{}/", server.admin)).await.unwrap();
    assert_eq!(c.title().await.unwrap(), "Overview · hookinbox");
    let overview = text_of(c, "main").await;
    assert!(overview.contains("sw/app"), "{overview}");
    assert!(overview.contains("other"), "{overview}");
    assert_no_script_ran(c, "overview").await;

    // Filter the events by source with the form, as a person would.
    c.goto(&format!("{}/events", server.admin)).await.unwrap();
    let form = c.form(Locator::Css("form.filters")).await.unwrap();
    form.set_by_name("source", "other").await.unwrap();
    form.submit().await.unwrap();
    // The page that comes back has the filter chosen in its form (as HTML, not as the
    // form's state before submitting).
    c.wait()
        .for_element(Locator::XPath("//option[@value='other' and @selected]"))
        .await
        .unwrap();
    let url = c.current_url().await.unwrap();
    assert!(url.as_str().contains("source=other"), "{url}");
    let rows = c
        .find_all(Locator::Css("main table tbody tr"))
        .await
        .unwrap();
    assert_eq!(rows.len(), 3, "three events of source other");
    for row in &rows {
        assert!(row.text().await.unwrap().contains("other"));
    }
    screenshot(c, "events").await;

    // By type, with a glob as a person would type it: the one invoice among the tests.
    c.goto(&format!("{}/events", server.admin)).await.unwrap();
    let form = c.form(Locator::Css("form.filters")).await.unwrap();
    form.set_by_name("type", "invoice.*").await.unwrap();
    form.submit().await.unwrap();
    c.wait()
        .for_element(Locator::XPath(
            "//input[@name='type' and @value='invoice.*']",
        ))
        .await
        .unwrap();
    let rows = c
        .find_all(Locator::Css("main table tbody tr"))
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "one invoice");
    let row = rows[0].text().await.unwrap();
    assert!(
        row.contains("evt_hostile") && row.contains("invoice.paid"),
        "{row}"
    );

    // Open the hostile event from the unfiltered list: its body is shown as text.
    c.goto(&format!("{}/events?source=sw", server.admin))
        .await
        .unwrap();
    click(c, Locator::LinkText("evt_hostile")).await;
    let h1 = text_of(c, "h1").await;
    assert!(h1.starts_with("Event "), "{h1}");
    let body = text_of(c, "pre.body").await;
    assert!(
        body.contains("<script>document.title='pwned'</script>"),
        "the body is shown as text: {body}"
    );
    assert!(
        body.contains("\"type\": \"invoice.paid\""),
        "laid out: {body}"
    );
    let headers = text_of(c, "table.headers").await;
    assert!(headers.contains(HOSTILE_HEADER), "{headers}");
    assert_no_script_ran(c, "event").await;
    screenshot(c, "event").await;

    // Replay it: a preview first, then the re-queue; the app gets it again, same key.
    let first = sink.received();
    assert_eq!(first.len(), 1);
    let row = "SELECT state || ' ' || updated_at FROM deliveries WHERE event = 1";
    let before = server.inbox().strings(row);
    let preview = press(c, "Replay this event", "preview").await;
    assert!(preview.contains("would re-queue 1"), "{preview}");
    let after = server.inbox().strings(row);
    assert_eq!(before, after, "a preview changes nothing");
    let done = press(c, "Re-queue", "Replayed").await;
    assert!(done.contains("Re-queued 1"), "{done}");
    for _ in 0..100 {
        if sink.received().len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let all = sink.received();
    assert_eq!(all.len(), 2, "the replay reached the app");
    assert_eq!(
        all[1].key(),
        first[0].key(),
        "under the same idempotency key"
    );
    assert_eq!(all[1].body, HOSTILE_BODY.as_bytes());

    // Pause the target from the overview; the inbox holds the pause.
    c.goto(&format!("{}/", server.admin)).await.unwrap();
    let paused = press(c, "Pause", "paused").await;
    assert!(
        paused.contains("not attempted until it is resumed"),
        "{paused}"
    );
    assert_eq!(
        server.count("SELECT count(*) FROM paused_targets WHERE source = 'sw' AND target = 'app'"),
        1
    );
    c.goto(&format!("{}/", server.admin)).await.unwrap();
    let overview = text_of(c, "main").await;
    assert!(overview.contains("paused"), "{overview}");
    press(c, "Resume", "resumed").await;
    assert_eq!(server.count("SELECT count(*) FROM paused_targets"), 0);

    // The conflict, original and quarantined bytes side by side.
    c.goto(&format!("{}/conflicts", server.admin))
        .await
        .unwrap();
    click(c, Locator::LinkText("evt_hostile")).await;
    let sides = c.find_all(Locator::Css("section.side")).await.unwrap();
    assert_eq!(sides.len(), 2);
    assert!(sides[0].text().await.unwrap().contains("pwned"));
    assert!(sides[1].text().await.unwrap().contains("changed"));
    assert_no_script_ran(c, "conflict").await;
    screenshot(c, "conflict").await;

    // What is wrong now is on every page: the source that never spoke is silent.
    c.goto(&format!("{}/", server.admin)).await.unwrap();
    // Judged every second: a minute is far more than it needs.
    for tries in 0.. {
        let mut silent = false;
        for b in c.find_all(Locator::Css("[role=alert]")).await.unwrap() {
            silent |= b.text().await.unwrap().starts_with("source_silent · quiet");
        }
        if silent {
            break;
        }
        assert!(tries < 300, "no banner for the silent source");
        tokio::time::sleep(Duration::from_millis(200)).await;
        c.refresh().await.unwrap();
    }
    screenshot(c, "overview").await;

    c.clone().close().await.unwrap();
    server.stop().await;
}

async fn read_only_by_default_and_forged_posts_are_refused(backend: Backend) {
    let test = "web::read_only_by_default_and_forged_posts_are_refused";
    let Some(b) = browser(test).await else {
        return;
    };
    let c = &b.client;
    let sink = Sink::start(|_, _| Reply::Status(200)).await;
    let (_, sources) = web_config(&sink, false);
    let Some(server) = TestServer::on(backend, test, &sources).await else {
        return;
    };
    send_hostile(&server, "sw", "evt_1").await;
    server
        .wait_count(
            "SELECT count(*) FROM deliveries WHERE state = 'delivered'",
            1,
        )
        .await;

    // No action is offered, and the page says why.
    c.goto(&format!("{}/events/1", server.admin)).await.unwrap();
    assert!(
        c.find_all(Locator::Css("form[method=post]"))
            .await
            .unwrap()
            .is_empty()
    );
    let header = text_of(c, "header").await;
    assert!(header.contains("Read-only"), "{header}");
    assert_no_script_ran(c, "event").await;

    // A form the browser posts anyway (as a page of the same origin could) is refused.
    c.execute(
        "const f = document.createElement('form'); f.method = 'post'; \
         f.action = '/actions/pause'; \
         for (const [k, v] of [['source', 'sw'], ['target', 'app'], ['csrf', 'x']]) { \
           const i = document.createElement('input'); i.name = k; i.value = v; f.appendChild(i); } \
         document.body.appendChild(f); f.submit();",
        vec![],
    )
    .await
    .unwrap();
    c.wait()
        .for_element(Locator::XPath("//h1[.='Not done']"))
        .await
        .unwrap();
    let refused = text_of(c, "main").await;
    assert!(refused.contains("read-only"), "{refused}");
    assert_eq!(server.count("SELECT count(*) FROM paused_targets"), 0);
    c.clone().close().await.unwrap();
    server.stop().await;
}

/// Forged requests as an attacker's page or script would send them, to a server with
/// actions on: each is refused and changes nothing. No browser needed.
async fn actions_need_the_token_the_origin_and_a_known_host(backend: Backend) {
    let sink = Sink::start(|_, _| Reply::Status(200)).await;
    let (config, sources) = web_config(&sink, true);
    let test = "web::actions_need_the_token_the_origin_and_a_known_host";
    let Some(server) = TestServer::on_with(backend, test, &config, &sources).await else {
        return;
    };
    let client = client();
    let page = client
        .get(format!("{}/", server.admin))
        .send()
        .await
        .unwrap();
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        csp.contains("default-src 'none'") && !csp.contains("script-src"),
        "{csp}"
    );
    let html = page.text().await.unwrap();
    let token = html
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the overview carries the token in its forms")
        .to_owned();
    let origin = server.admin.clone();
    let post = |origin: Option<String>, host: Option<&str>, token: String| {
        let mut req = client
            .post(format!("{}/actions/pause", server.admin))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("source=sw&target=app&csrf={token}"));
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        if let Some(h) = host {
            req = req.header("host", h);
        }
        req.send()
    };
    let cases = [
        (None, None, token.clone(), 403, "no Origin"),
        (
            Some("null".to_owned()),
            None,
            token.clone(),
            403,
            "Origin null",
        ),
        (Some(origin.clone()), None, String::new(), 403, "no token"),
        (
            Some("http://evil.example".to_owned()),
            None,
            token.clone(),
            403,
            "another Origin",
        ),
        (
            Some(origin.clone()),
            None,
            "0".repeat(64),
            403,
            "a wrong token",
        ),
        (
            Some("http://evil.example:80".to_owned()),
            Some("evil.example:80"),
            token.clone(),
            421,
            "a rebound name",
        ),
    ];
    for (origin, host, token, status, what) in cases {
        let resp = post(origin, host, token).await.unwrap();
        assert_eq!(resp.status().as_u16(), status, "{what}");
        assert_eq!(
            server.count("SELECT count(*) FROM paused_targets"),
            0,
            "{what} changed something"
        );
    }
    // A form posted as text/plain (what a cross-site form may send without a preflight).
    let resp = client
        .post(format!("{}/actions/pause", server.admin))
        .header("content-type", "text/plain")
        .header("origin", &origin)
        .body(format!("source=sw&target=app&csrf={token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 403, "text/plain");
    // Reading through a rebound name is refused too, and so is another site's page
    // loading the inbox in the background; following a link to it is not.
    let get = |host: Option<&str>, fetch: &[(&str, &str)]| {
        let mut req = client.get(format!("{}/events", server.admin));
        if let Some(h) = host {
            req = req.header("host", h);
        }
        for (k, v) in fetch {
            req = req.header(*k, *v);
        }
        req.send()
    };
    let cross = [
        ("sec-fetch-site", "cross-site"),
        ("sec-fetch-mode", "no-cors"),
        ("sec-fetch-dest", "image"),
    ];
    let link = [
        ("sec-fetch-site", "cross-site"),
        ("sec-fetch-mode", "navigate"),
        ("sec-fetch-dest", "document"),
    ];
    for (host, fetch, status, what) in [
        (Some("evil.example:9180"), &[][..], 421, "a rebound name"),
        (Some("LOCALHOST:9180"), &[][..], 200, "localhost"),
        (None, &cross[..], 403, "a cross-site image"),
        (None, &link[..], 200, "a link followed from another site"),
    ] {
        let resp = get(host, fetch).await.unwrap();
        assert_eq!(resp.status().as_u16(), status, "{what}");
    }
    // A time long before 1970 is a time, not a crash.
    let resp = client
        .get(format!("{}/events?since=100y", server.admin))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    // A page position that is not one is refused with the reason, as a bad time is.
    for query in ["before=abc", "since=yesterday"] {
        let resp = client
            .get(format!("{}/events?{query}", server.admin))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 400, "{query}");
        let page = resp.text().await.unwrap();
        let field = query.split('=').next().unwrap();
        assert!(page.contains(&format!("{field}: ")), "{query}: {page}");
    }
    // The real form, as the page sends it, works.
    let resp = post(Some(origin), None, token).await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(server.count("SELECT count(*) FROM paused_targets"), 1);
    // The exact bytes download, never rendered.
    let resp = client
        .get(format!("{}/events/1/body", server.admin))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 404, "no event yet");
    send_hostile(&server, "sw", "evt_1").await;
    let resp = client
        .get(format!("{}/events/1/body", server.admin))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["content-type"], "application/octet-stream");
    assert!(
        resp.headers()["content-disposition"]
            .to_str()
            .unwrap()
            .starts_with("attachment")
    );
    assert_eq!(resp.bytes().await.unwrap(), HOSTILE_BODY.as_bytes());
    server.stop().await;
}

on_both_backends!(
    a_browser_filters_opens_an_event_sees_its_body_and_replays_it,
    read_only_by_default_and_forged_posts_are_refused,
    actions_need_the_token_the_origin_and_a_known_host,
);
