#!/usr/bin/env bash
# Runs every fuzz target (fuzz/fuzz_targets) for SECONDS each, on nightly Rust with
# cargo-fuzz, which it installs if missing.
#
#   scripts/fuzz.sh [--ci] [--merge] [SECONDS] [TARGET...]
#
#   scripts/fuzz.sh                 the long run: every target for 600 s
#   scripts/fuzz.sh 3600 raw_http   one target for an hour
#   scripts/fuzz.sh --ci            CI's short run: 5 s per target, or a note that it skips
#                                   when there is no nightly toolchain or cargo-fuzz cannot
#                                   be installed (the corpora still run in `cargo test`,
#                                   as tests/it/fuzz_corpora.rs)
#   scripts/fuzz.sh --merge         after running, add to the committed corpora the new
#                                   inputs that reach code they did not
#
# The committed corpus fuzz/corpus/<target> seeds each run but is not written to: new
# inputs go to fuzz/target/corpus/<target>, so a run leaves the work tree clean. A failing
# input is saved in fuzz/artifacts/<target>/; reproduce it with
# `cd fuzz && cargo +nightly fuzz run <target> artifacts/<target>/<file>`, and once fixed,
# commit it to fuzz/corpus/<target>/ so that `cargo test` replays it from then on.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

ci=false
merge=false
while [ $# -gt 0 ]; do
    case "$1" in
        --ci) ci=true ;;
        --merge) merge=true ;;
        *) break ;;
    esac
    shift
done
if $ci; then seconds=${1:-5}; else seconds=${1:-600}; fi
[ $# -gt 0 ] && shift
targets=("$@")

skip() {
    echo "fuzz: skipped, $1; the corpora still run as regression tests (cargo test --test it fuzz_corpora)"
    # .ci/run lists every skip at its end.
    if [ -n "${HOOKINBOX_SKIP_LOG:-}" ]; then
        echo "SKIPPED fuzzing (scripts/fuzz.sh --ci): $1" >> "$HOOKINBOX_SKIP_LOG"
    fi
    exit 0
}

if ! cargo +nightly --version >/dev/null 2>&1; then
    $ci && skip "no nightly toolchain"
    echo "fuzz: cargo-fuzz needs a nightly toolchain: rustup toolchain install nightly" >&2
    exit 1
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz"
    if ! cargo install cargo-fuzz --locked; then
        $ci && skip "cargo-fuzz could not be installed"
        exit 1
    fi
fi

# raw_http's server keeps its inbox in a temporary directory that libFuzzer's exit leaves
# behind (a 10-minute run stores a hundred MB): here, not in /tmp, and gone at the next run.
export TMPDIR="$PWD/target/tmp"
rm -rf "$TMPDIR"
mkdir -p "$TMPDIR"

if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cargo +nightly fuzz list)
fi
cargo +nightly fuzz build

# libFuzzer's options:
# -timeout: one input may take this long; raw_http waits up to 10 s for an answer.
# -max_len: the longest input; past 16 KiB a request only meets the server's body limit.
# -rss_limit_mb: raw_http's server and its inbox grow over a long run.
# -print_final_stats: executions, coverage and corpus size, for the summary below.
for t in "${targets[@]}"; do
    mkdir -p "target/corpus/$t"
    echo "fuzz: $t for ${seconds}s"
    log="target/$t.log"
    if ! cargo +nightly fuzz run "$t" "target/corpus/$t" "corpus/$t" -- \
        -max_total_time="$seconds" -timeout=30 -max_len=16384 -rss_limit_mb=4096 \
        -print_final_stats=1 >"$log" 2>&1; then
        tail -n 60 "$log"
        echo "fuzz: $t FAILED; the input is in fuzz/artifacts/$t/, the log in fuzz/$log" >&2
        exit 1
    fi
    # libFuzzer's last status line (execs, coverage, corpus) and its executions per second.
    grep -E '^#[0-9]+' "$log" | tail -n 1 || true
    grep -E 'stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$log" || true
    # Into the committed corpus go only inputs that reach an edge it does not: covering
    # every edge (not every hit count) keeps it a few hundred files per target.
    if $merge; then
        cargo +nightly fuzz run "$t" "corpus/$t" "target/corpus/$t" -- -set_cover_merge=1 \
            -use_counters=0 -timeout=30 -max_len=16384 >"target/$t.merge.log" 2>&1
        grep -E 'MERGE-OUTER: [0-9]+ new files' "target/$t.merge.log" || true
    fi
done
rm -rf "$TMPDIR"
echo "fuzz: every target ran ${seconds}s without a failure"
