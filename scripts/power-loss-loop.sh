#!/usr/bin/env bash
# The long power-loss test: the real binary on lossyfs (a FUSE file system in the test that
# forgets what was never synced), SIGKILL and a power loss at random moments under load, N
# times (default 100), checking after each restart that every acknowledged event survived;
# beside it the negative control with synchronous = "normal", which must lose some. Needs
# root and /dev/fuse. A failure prints HOOKINBOX_POWER_SEED to replay it.
#
#   scripts/power-loss-loop.sh         # 100 cycles (~8 minutes: each cycle reads the whole
#                                      # inbox through FUSE, so later ones are slower)
#   scripts/power-loss-loop.sh 20      # a shorter run
set -euo pipefail
cd "$(dirname "$0")/.."
export HOOKINBOX_POWER_CYCLES="${1:-100}"
exec cargo test --release --test it power_loss:: -- --nocapture
