#!/usr/bin/env bash
# The long failpoint sweep: N rounds (default 10) of every durability boundary x every
# fault (error, SIGKILL, panic), each armed at a fresh seeded k-th pass, each run checked
# by the oracle. A failure prints HOOKINBOX_FAILPOINT_SEED to replay it.
#
#   scripts/failpoint-sweep.sh        # 10 rounds: 120 runs of the real binary
#   scripts/failpoint-sweep.sh 2
set -euo pipefail
cd "$(dirname "$0")/.."
export HOOKINBOX_FAILPOINT_ROUNDS="${1:-10}"
exec cargo test --release --all-features --test it failpoints:: -- --nocapture
