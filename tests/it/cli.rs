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

    // A PostgreSQL store without a path: serve (check reads the config as serve does) and
    // the operator commands both say what the path is still for.
    let path_line = good.lines().find(|l| l.starts_with("path =")).unwrap();
    std::fs::write(
        &path,
        good.replace(
            path_line,
            "backend = \"postgres\"\nurl = \"postgres://hookinbox@127.0.0.1/hookinbox\"",
        ),
    )
    .unwrap();
    for command in ["check", "events"] {
        let (code, _, err) = hookinbox(&[command, "--config", path.to_str().unwrap()]);
        assert_eq!(code, 3, "{command}: {err}");
        assert!(
            err.contains("bad.toml")
                && err.contains("store.path is missing")
                && err.contains("reload status"),
            "{command}: {err}"
        );
    }

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
        let req = Signed::post(headers, hookinbox::scheme::demo_body(&id));
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

/// A config in its own directory (world-readable, so that another user may read it too).
fn config_in(dir: &std::path::Path, text: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = dir.join("hookinbox.toml");
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    path.display().to_string()
}

const DEMO_SOURCE: &str = r#"
[[sources]]
name = "demo"
scheme = "standard-webhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
"#;

#[test]
fn check_finds_what_serve_would_only_meet_at_run_time() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let not_executable = dir.path().join("handler.sh");
    std::fs::write(&not_executable, "#!/bin/sh\n").unwrap();
    let store = "[store]\npath = \"inbox.db\"\n";
    let with_command = |program: &str| {
        format!(
            "{store}{DEMO_SOURCE}[[sources.targets]]\nname = \"app\"\ncommand = [{program:?}]\n"
        )
    };
    for (text, want) in [
        (
            with_command("/usr/local/bin/no-such-handler"),
            "/usr/local/bin/no-such-handler",
        ),
        (with_command("no-such-handler"), "is not on the PATH"),
        (
            with_command(not_executable.to_str().unwrap()),
            "not executable",
        ),
        (
            format!("[server]\nlisten = \"127.0.0.1:9180\"\n{store}{DEMO_SOURCE}"),
            "same port",
        ),
        // The same socket to the kernel, written differently: the admin listener is on
        // 127.0.0.1:9180 by default.
        (
            format!("[server]\nlisten = \"[::ffff:127.0.0.1]:9180\"\n{store}{DEMO_SOURCE}"),
            "same port",
        ),
        (
            format!("[server]\nlisten = \"0.0.0.0:9180\"\n{store}{DEMO_SOURCE}"),
            "same port",
        ),
        (
            format!(
                "[server]\nlisten = \"[::]:9181\"\n[admin]\nlisten = \"10.0.0.1:9181\"\n\
                 {store}{DEMO_SOURCE}"
            ),
            "same port",
        ),
        (
            format!(
                "[store]\npath = {:?}\n{DEMO_SOURCE}",
                dir.path().display().to_string()
            ),
            "is a directory",
        ),
    ] {
        let config = config_in(dir.path(), &text);
        let (code, out, err) = hookinbox(&["check", "--config", &config]);
        assert_eq!(code, 3, "{want}: {out}{err}");
        assert!(
            out.contains(want) || err.contains(want),
            "{want}: {out}{err}"
        );
    }
    // A fixed program passes.
    std::fs::set_permissions(&not_executable, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = config_in(dir.path(), &with_command(not_executable.to_str().unwrap()));
    let (code, out, err) = hookinbox(&["check", "--config", &config]);
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn check_finds_an_inbox_directory_the_user_cannot_write() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let locked = dir.path().join("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o555)).unwrap();
    let text = format!(
        "[store]\npath = {:?}\n{DEMO_SOURCE}",
        locked.join("inbox.db").display().to_string()
    );
    let config = config_in(dir.path(), &text);
    // Root may write anywhere: run check as `nobody` then, as a service user would be.
    let root = nix::unistd::geteuid().is_root();
    let mut cmd = if root {
        let mut c = std::process::Command::new("setpriv");
        c.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"]);
        c.arg(env!("CARGO_BIN_EXE_hookinbox"));
        c
    } else {
        std::process::Command::new(env!("CARGO_BIN_EXE_hookinbox"))
    };
    let out = cmd.args(["check", "--config", &config]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("not writable by this user"), "{text}");
}

#[test]
fn check_says_how_to_add_a_source_and_that_credentials_are_read_under_systemd() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_in(dir.path(), "[store]\npath = \"inbox.db\"\n");
    let (code, out, err) = hookinbox(&["check", "--config", &config]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("no [[sources]]") && out.contains("[[sources.targets]]"),
        "{out}"
    );

    let text = "[store]\npath = \"inbox.db\"\n".to_owned()
        + &DEMO_SOURCE.replace("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "credential:demo");
    let config = config_in(dir.path(), &text);
    let (code, out, err) = hookinbox(&["check", "--config", &config]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("\"credential:demo\" is read from $CREDENTIALS_DIRECTORY when systemd starts"),
        "{out}"
    );
    // serve still needs it: outside systemd it cannot start.
    let (code, _, err) = hookinbox(&["serve", "--config", &config]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("CREDENTIALS_DIRECTORY"), "{err}");
}

#[test]
fn sign_for_one_source_needs_only_that_sources_secret() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[store]\npath = \"inbox.db\"\n{DEMO_SOURCE}\n[[sources]]\nname = \"other\"\nscheme = \"github\"\nsecrets = [\"env:HOOKINBOX_TEST_UNSET_OTHER\"]\n"
    );
    let config = config_in(dir.path(), &text);
    let (code, out, err) = hookinbox(&["sign", "--config", &config, "--source", "demo"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("webhook-signature"), "{out}");
    // The other source's own secret is still required to sign for it.
    let (code, _, err) = hookinbox(&["sign", "--config", &config, "--source", "other"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("HOOKINBOX_TEST_UNSET_OTHER"), "{err}");
}

/// `hookinbox check` on a config whose inbox is `inbox.db` in `dir`: the config's path and
/// what check printed (it must pass).
fn check_inbox_in(dir: &std::path::Path) -> (String, String) {
    let config = config_in(dir, &format!("[store]\npath = \"inbox.db\"\n{DEMO_SOURCE}"));
    let (code, out, err) = hookinbox(&["check", "--config", &config]);
    assert_eq!(code, 0, "{err}");
    (config, out)
}

#[test]
fn check_warns_before_serve_rewrites_an_older_inbox() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("inbox.db");
    // An inbox as hookinbox wrote it at schema version 1.
    let conn = rusqlite::Connection::open(&db).unwrap();
    let (_, v1) = hookinbox::store::sqlite::schema::migrations().remove(0);
    conn.execute_batch(&format!(
        "PRAGMA journal_mode = WAL; BEGIN; {v1}; PRAGMA user_version = 1; COMMIT;"
    ))
    .unwrap();
    drop(conn);
    let (config, out) = check_inbox_in(dir.path());
    assert!(
        out.contains(&format!(
            "schema version 1) is converted to version {} when `serve` next starts",
            hookinbox::store::sqlite::schema::schema_version()
        )) && out.contains("MiB free beside it at its peak")
            && out.contains("hookinbox backup"),
        "{out}"
    );
    // No deliveries to copy, so no word about copying them.
    assert!(!out.contains("deliveries, which `serve` copies"), "{out}");
    // The readers refuse it with the way out, rather than failing on a missing table.
    let (code, _, err) = hookinbox(&["events", "--config", &config]);
    assert_eq!(code, 1);
    assert!(err.contains("start `hookinbox serve` once"), "{err}");
}

#[test]
fn check_warns_before_serve_copies_many_deliveries() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("inbox.db");
    // An inbox at the schema version before the rebuild, holding 300,000 deliveries (their
    // events need not exist for this: foreign keys off, as an operator's shell has them).
    let conn = rusqlite::Connection::open(&db).unwrap();
    let rebuilt_in = hookinbox::store::sqlite::schema::DELIVERIES_REBUILT_IN;
    let before: Vec<&str> = hookinbox::store::sqlite::schema::migrations()
        .into_iter()
        .filter(|(v, _)| *v < rebuilt_in)
        .map(|(_, sql)| sql)
        .collect();
    conn.execute_batch(&format!(
        "PRAGMA foreign_keys = OFF; PRAGMA auto_vacuum = INCREMENTAL; PRAGMA journal_mode = WAL;
         BEGIN; {}; PRAGMA user_version = {}; COMMIT;",
        before.join(";\n"),
        rebuilt_in - 1
    ))
    .unwrap();
    conn.execute_batch(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300000)
         INSERT INTO deliveries (event, source, target, idempotency_key, next_attempt_at,
                                 created_at, updated_at)
         SELECT i, 'demo', 'app', 'hk_' || i, 'x', 'x', 'x' FROM n",
    )
    .unwrap();
    drop(conn);
    let (_, out) = check_inbox_in(dir.path());
    assert!(
        out.contains("holds 300000 deliveries, which `serve` copies once")
            && out.contains("about 2 s, with about 201 MiB free"),
        "{out}"
    );
    // Not the whole-file rewrite's warning: this inbox has incremental auto-vacuum.
    assert!(!out.contains("(VACUUM)"), "{out}");
    // A config on PostgreSQL never opens the file, left behind by `migrate-store`.
    let config = config_in(
        dir.path(),
        &format!(
            "[store]\npath = \"inbox.db\"\nbackend = \"postgres\"\n\
             url = \"postgres://hookinbox@127.0.0.1:1/hookinbox\"\n{DEMO_SOURCE}"
        ),
    );
    let (code, out, err) = hookinbox(&["check", "--config", &config]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("deliveries, which `serve` copies"), "{out}");
}

#[test]
fn each_subcommands_help_shows_its_own_options_first_and_ends_with_examples() {
    use clap::CommandFactory;
    let globals = ["--config", "--db", "--log-format"];
    for sub in hookinbox::cli::Cli::command().get_subcommands() {
        let name = sub.get_name();
        for flag in ["--help", "-h"] {
            let (code, out, err) = hookinbox(&[name, flag]);
            assert_eq!(code, 0, "{name} {flag}: {err}");
            let at = |what: &str| {
                out.find(what)
                    .unwrap_or_else(|| panic!("{name} {flag}: no {what:?} in\n{out}"))
            };
            let (own, global, examples) = (
                at("\nOptions:\n"),
                at("\nGlobal options:\n"),
                at("\nExamples:\n  hookinbox "),
            );
            assert!(own < global && global < examples, "{name} {flag}:\n{out}");
            // Its own options come before the global ones (arguments come first of all,
            // under clap's "Arguments:")...
            for long in sub.get_arguments().filter_map(|a| a.get_long()) {
                // (Searched for after the heading: a required one is in the usage line too.)
                let shown = out[own..].find(&format!("--{long}")).map(|i| own + i);
                assert!(
                    shown.is_some_and(|shown| shown < global),
                    "{name} {flag}: --{long} is not among its own options"
                );
            }
            // ...which follow under their heading.
            for g in globals {
                let after = &out[global..examples];
                assert!(
                    after.contains(g),
                    "{name} {flag}: {g} not under Global options"
                );
                assert!(
                    !out[..global].contains(&format!("{g} ")),
                    "{name} {flag}: {g} early"
                );
            }
        }
    }
    // The top level still lists the commands, and points to the examples and the man page.
    let (code, out, _) = hookinbox(&["--help"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("Commands:")
            && out.contains("Global options:")
            && out.contains("man hookinbox"),
        "{out}"
    );
}

#[test]
fn check_json_reports_sources_listeners_and_warnings() {
    let (code, out, err) = hookinbox(&["check", "--json", "--config", &example()]);
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["ok"], true);
    assert!(
        report["config"]
            .as_str()
            .unwrap()
            .ends_with("quickstart.toml")
    );
    assert_eq!(report["listeners"]["public"], "127.0.0.1:8080");
    assert_eq!(report["listeners"]["admin"], "127.0.0.1:9180");
    assert_eq!(report["listeners"]["tls"], false);
    assert!(
        report["inbox"]["path"]
            .as_str()
            .unwrap()
            .ends_with("quickstart-inbox.db")
    );
    assert_eq!(report["inbox"]["synchronous"], "full");
    let demo = &report["sources"][0];
    assert_eq!(demo["name"], "demo");
    assert_eq!(demo["scheme"], "standard-webhooks");
    assert_eq!(demo["methods"], serde_json::json!(["POST"]));
    assert_eq!(demo["path"], "/hooks/demo");
    assert_eq!(demo["secrets"], 1);
    assert_eq!(demo["event_id"], "header webhook-id");
    assert_eq!(demo["targets"][0]["name"], "log");
    let command = demo["targets"][0]["command"][0].as_str().unwrap();
    assert!(command.ends_with("on-event.sh"), "{command}");
    assert!(demo["targets"][0].get("url").is_none());
    let warnings = report["warnings"].as_array().unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap().contains("written in the config file")),
        "{warnings:?}"
    );
    assert_eq!(report["problems"], serde_json::json!([]));

    // What would fail at run time: ok is false, the problem is listed, the exit code is 3.
    let dir = tempfile::tempdir().unwrap();
    let config = config_in(
        dir.path(),
        &format!(
            "[store]\npath = \"inbox.db\"\n{DEMO_SOURCE}[[sources.targets]]\nname = \"app\"\n\
             url = \"https://app.example/hooks\"\n[[sources.targets]]\nname = \"audit\"\n\
             command = [\"/usr/local/bin/no-such-handler\"]\n"
        ),
    );
    let (code, out, err) = hookinbox(&["check", "--json", "--config", &config]);
    assert_eq!(code, 3, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["ok"], false);
    assert_eq!(
        report["sources"][0]["targets"][0]["url"],
        "https://app.example/hooks"
    );
    let problems = report["problems"].as_array().unwrap();
    assert!(
        problems.len() == 1 && problems[0].as_str().unwrap().contains("no-such-handler"),
        "{problems:?}"
    );
    assert!(err.contains("1 problem(s)"), "{err}");

    // A file that does not load: still JSON on stdout, the error on stderr too, exit 3.
    let config = config_in(dir.path(), "[store]\npath = \"inbox.db\"\nshceme = 1\n");
    let (code, out, err) = hookinbox(&["check", "--json", "--config", &config]);
    assert_eq!(code, 3);
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["ok"], false);
    assert_eq!(report["config"], config);
    assert!(
        report["error"].as_str().unwrap().contains("shceme"),
        "{report}"
    );
    assert!(err.contains("shceme"), "{err}");
}

#[test]
fn the_man_page_holds_the_configuration_reference() {
    use hookinbox::config::reference::SECTIONS;
    let dir = tempfile::tempdir().unwrap();
    let assets = dir.path().join("assets");
    // As packaging/build-deb.sh runs it.
    let (code, _, err) = hookinbox(&["generate", "--out-dir", assets.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let page = assets.join("hookinbox.1");
    let source = std::fs::read_to_string(&page).unwrap();
    assert!(source.contains(".SH CONFIGURATION"), "{source}");
    for s in SECTIONS {
        assert!(
            source.contains(&format!(".SS {}", s.header)),
            "{}",
            s.header
        );
    }

    // And as `man` shows it: every section and key in the CONFIGURATION section.
    let man = std::process::Command::new("man")
        .args(["--warnings", "-l"])
        .arg(&page)
        .env("MANWIDTH", "100")
        .env("MANPAGER", "cat")
        .output();
    let out = match man {
        Ok(out) if out.status.success() => out,
        Ok(out) => panic!("man -l failed: {}", String::from_utf8_lossy(&out.stderr)),
        Err(e) => {
            return crate::support::skip(
                "MAN",
                "the_man_page_holds_the_configuration_reference",
                &format!("no man command to render the page ({e})"),
            );
        }
    };
    let warnings = String::from_utf8_lossy(&out.stderr);
    assert!(warnings.trim().is_empty(), "groff warns: {warnings}");
    let text = String::from_utf8_lossy(&out.stdout);
    let config = &text[text
        .find("\nCONFIGURATION\n")
        .expect("a CONFIGURATION section")..];
    let mut rest = config;
    for s in SECTIONS {
        let at = rest
            .find(&format!("\n   {}\n", s.header))
            .unwrap_or_else(|| panic!("{} is not shown, in order", s.header));
        rest = &rest[at..];
        for key in s.keys {
            assert!(
                rest.contains(&format!("\n       {} = ", key.name)),
                "{} {} is not shown",
                s.header,
                key.name
            );
        }
    }
    assert!(
        config.contains("max_body = size  (default: \"1MiB\")"),
        "{config}"
    );
    assert!(config.contains("standard-webhooks, stripe"), "{config}");

    // Every command with its options and examples, in this page: no pointer to a page of
    // its own (none is installed), and the notes at the end one per line.
    assert!(!source.contains("hookinbox\\-serve(1)"), "{source}");
    let commands = &text[text.find("\nCOMMANDS\n").expect("a COMMANDS section")
        ..text.find("\nCONFIGURATION\n").unwrap()];
    for shown in [
        "\n   hookinbox serve\n",
        "\n   hookinbox replay\n",
        "--dead",
        "--format <FORMAT>",
        "[possible values: curl, headers, json] [default: curl]",
        "hookinbox check --config examples/quickstart.toml\n",
    ] {
        assert!(commands.contains(shown), "{shown:?} in {commands}");
    }
    assert!(
        !commands.contains("[possible values: true, false]"),
        "{commands}"
    );
    assert!(text.contains("\n       Exit codes:"), "{text}");
}

/// `keypair --out` writes a new pair, and refuses without touching either file when one of
/// them exists: a new public key beside an old private one signs what its source refuses.
#[test]
fn keypair_out_never_replaces_half_a_pair() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("discord");
    let prefix = prefix.to_str().unwrap();
    let (code, out, err) = hookinbox(&["keypair", "--scheme", "discord", "--out", prefix]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("wrote"), "{out}");
    let read = |ext: &str| std::fs::read_to_string(format!("{prefix}{ext}")).unwrap();
    let (public, private) = (read(".pub"), read(".key"));
    assert!(!public.trim().is_empty() && !private.trim().is_empty());

    // Both exist: refused, both unchanged.
    let (code, _, err) = hookinbox(&["keypair", "--scheme", "discord", "--out", prefix]);
    assert_ne!(code, 0);
    assert!(err.contains("never replaces"), "{err}");
    assert_eq!(
        (read(".pub"), read(".key")),
        (public.clone(), private.clone())
    );

    // Only the public key exists: refused, it is unchanged and no private key is left.
    std::fs::remove_file(format!("{prefix}.key")).unwrap();
    let (code, _, err) = hookinbox(&["keypair", "--scheme", "discord", "--out", prefix]);
    assert_ne!(code, 0);
    assert!(err.contains(".pub"), "{err}");
    assert_eq!(read(".pub"), public);
    assert!(!std::path::Path::new(&format!("{prefix}.key")).exists());
}

/// `recover` on a source whose provider has no API hookinbox reads says so, rather than
/// suggesting a `recover` table that `check` would then refuse.
#[test]
fn recover_on_a_source_without_a_recover_api_says_what_to_do_instead() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_in(
        dir.path(),
        &format!(
            "[store]\npath = \"{}/inbox.db\"\n{DEMO_SOURCE}",
            dir.path().display()
        ),
    );
    let (code, _, err) = hookinbox(&[
        "recover",
        "--source",
        "demo",
        "--since",
        "6h",
        "--dry-run",
        "--config",
        &config,
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("cannot be recovered"), "{err}");
    assert!(err.contains("github and stripe"), "{err}");
    assert!(!err.contains("add recover ="), "{err}");
}

/// `prune --db` without a readable config says that prune needs the config, and does not
/// suggest the `--db` it was given.
#[test]
fn prune_with_db_but_no_config_asks_for_the_config() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("inbox.db");
    let missing = dir.path().join("missing.toml");
    let (code, _, err) = hookinbox(&[
        "prune",
        "--db",
        db.to_str().unwrap(),
        "--config",
        missing.to_str().unwrap(),
    ]);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("prune needs the config's retention windows"),
        "{err}"
    );
    assert!(err.contains("pass --config FILE"), "{err}");
    assert!(!err.contains("--db FILE for the inbox alone"), "{err}");
}

/// A time that is not one is a bad command line (exit 2) in every command that takes one,
/// with the forms it accepts.
#[test]
fn a_bad_time_is_a_usage_error_everywhere() {
    for args in [
        &["events", "--since", "yesterday"][..],
        &["replay", "--dead", "--since", "yesterday"],
        &["replay", "--dead", "--until", "yesterday"],
        &["recover", "--source", "demo", "--since", "yesterday"],
        &["gaps", "--since", "yesterday"],
    ] {
        let (code, _, err) = hookinbox(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(
            err.contains("RFC 3339") && err.contains("2h"),
            "{args:?}: {err}"
        );
    }
}

/// `--db` is global, so clap takes it anywhere; the commands that would ignore it refuse it
/// (exit 2) instead of silently using the config's inbox.
#[test]
fn commands_that_open_no_inbox_of_their_own_refuse_db() {
    for args in [
        &["serve", "--db", "other.db"][..],
        &["check", "--db", "other.db"],
        &["sign", "--source", "demo", "--db", "other.db"],
    ] {
        let (code, _, err) = hookinbox(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains("takes no --db"), "{args:?}: {err}");
    }
}
