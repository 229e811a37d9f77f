#!/usr/bin/env bash
# The long crash test: SIGKILL the real binary at random moments under load, N times
# (default 200), checking after each restart that every acknowledged event is in the inbox
# exactly once with identical bytes. A failure prints HOOKINBOX_CRASH_SEED to replay it.
#
#   scripts/crash-loop.sh          # 200 iterations
#   scripts/crash-loop.sh 20       # a shorter run
set -euo pipefail
cd "$(dirname "$0")/.."
export HOOKINBOX_CRASH_ITERATIONS="${1:-200}"
exec cargo test --release --test it crash:: -- --nocapture
