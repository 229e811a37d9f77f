//! The fuzz corpora as regression tests: every file in `fuzz/corpus/<target>/` goes through
//! the fuzz harness itself (`fuzz/src`, included by path), on stable Rust and without
//! libFuzzer. A harness assertion fails here as it fails a fuzz run, so the inputs that once
//! found a bug, and the seeds that reach each scheme's valid path, are checked by every
//! `cargo test`. `scripts/fuzz.sh` runs the fuzzers themselves.

use std::path::PathBuf;

#[path = "../../fuzz/src/lib.rs"]
mod harness;

/// Runs every corpus file of `target` through its harness function.
fn replay(target: &str) {
    let (_, run) = harness::TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .expect("a fuzz target of that name");
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} is empty", dir.display());
    for file in files {
        // Shown with the failure, so that it names the input to run with `cargo fuzz run`.
        println!("{}", file.display());
        run(&std::fs::read(&file).unwrap());
    }
}

#[test]
fn standard_webhooks() {
    replay("standard_webhooks");
}

#[test]
fn stripe() {
    replay("stripe");
}

#[test]
fn github() {
    replay("github");
}

#[test]
fn shopify() {
    replay("shopify");
}

#[test]
fn slack() {
    replay("slack");
}

#[test]
fn gitlab() {
    replay("gitlab");
}

#[test]
fn hmac() {
    replay("hmac");
}

#[test]
fn raw_http() {
    replay("raw_http");
    // And the service still stores a valid request after all of them.
    harness::raw_http::check_alive();
    harness::raw_http::finish();
}

/// Every fuzz target has a harness entry and a test above; a new one needs all three.
#[test]
fn every_target_is_replayed() {
    let tested = [
        "github",
        "gitlab",
        "hmac",
        "raw_http",
        "shopify",
        "slack",
        "standard_webhooks",
        "stripe",
    ];
    let mut in_harness: Vec<&str> = harness::TARGETS.iter().map(|(name, _)| *name).collect();
    in_harness.sort_unstable();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/fuzz_targets");
    let mut built: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            e.unwrap()
                .path()
                .file_stem()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    built.sort_unstable();
    assert_eq!(in_harness, tested);
    assert_eq!(built, tested);
}
