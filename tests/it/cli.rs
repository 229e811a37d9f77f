//! The binary's command line: `check` on good and bad configs, and `--help`.

use crate::support::hookinbox;

fn example() -> String {
    format!("{}/examples/quickstart.toml", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn check_prints_the_sources_and_warns_about_the_literal_demo_secret() {
    let (code, out, err) = hookinbox(&["check", "--config", &example()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("source  demo"), "{out}");
    assert!(
        out.contains("standard-webhooks") && out.contains("POST /hooks/demo"),
        "{out}"
    );
    assert!(
        out.contains("warning:") && out.contains("written in the config file"),
        "{out}"
    );
}

#[test]
fn a_bad_config_names_the_file_and_the_key_and_exits_3() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    let good = std::fs::read_to_string(example()).unwrap();

    std::fs::write(
        &path,
        good.replace("tolerance = \"5m\"", "tolerence = \"5m\""),
    )
    .unwrap();
    let (code, _, err) = hookinbox(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 3);
    assert!(
        err.contains("bad.toml") && err.contains("tolerence"),
        "{err}"
    );

    std::fs::write(
        &path,
        good.replace("tolerance = \"5m\"", "tolerance = \"five minutes\""),
    )
    .unwrap();
    let (code, _, err) = hookinbox(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 3);
    assert!(
        err.contains("bad.toml") && err.contains("bad duration"),
        "{err}"
    );

    let secret_line = good.lines().find(|l| l.starts_with("secrets")).unwrap();
    std::fs::write(
        &path,
        good.replace(
            secret_line,
            "secrets = [\"env:HOOKINBOX_TEST_UNSET_SECRET\"]",
        ),
    )
    .unwrap();
    let (code, _, err) = hookinbox(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 3);
    assert!(
        err.contains("secrets[0]") && err.contains("HOOKINBOX_TEST_UNSET_SECRET"),
        "{err}"
    );

    let (code, _, err) = hookinbox(&["check", "--config", "/nonexistent/hookinbox.toml"]);
    assert_eq!(code, 3);
    assert!(err.contains("/nonexistent/hookinbox.toml"), "{err}");
}

#[test]
fn help_explains_the_commands() {
    let (code, out, _) = hookinbox(&["--help"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("serve") && out.contains("check") && out.contains("--config"),
        "{out}"
    );
}

#[tokio::test]
async fn what_sign_prints_is_accepted_by_serve_for_every_scheme() {
    use crate::support::*;
    let server = TestServer::start(ALL_SCHEMES).await;
    let config = server.config.path.to_str().unwrap().to_owned();
    for source in [
        "sw", "stripe", "github", "shopify", "slack", "gitlab", "hmac",
    ] {
        let id = format!("signed-by-cli-{source}");
        let (code, out, err) = hookinbox(&[
            "sign", "--config", &config, "--source", source, "--id", &id, "--format", "headers",
        ]);
        assert_eq!(code, 0, "{err}");
        let headers = out
            .lines()
            .map(|l| {
                let (k, v) = l.split_once(": ").unwrap();
                (k.to_owned(), v.to_owned())
            })
            .collect();
        let req = Signed {
            headers,
            body: hookinbox::commands::sign::demo_body(&id),
        };
        assert_eq!(
            server.post(source, &req).await,
            (200, "accepted\n".into()),
            "{source}"
        );
        assert!(server.stored_body(source, &id).is_some(), "{source}");
    }
    let (code, _, err) = hookinbox(&["sign", "--config", &config, "--source", "nope"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("no source \"nope\"") && err.contains("sw, stripe"),
        "{err}"
    );
    server.stop().await;
}
