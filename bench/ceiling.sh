#!/usr/bin/env bash
# The ceiling every benchmark ratio is taken against: Debian's wrk posting a 1.5 KB JSON
# body over keep-alive connections to a bare server (`hookinbox-loadgen bare`, hyper
# reading the body and answering 200). wrk cannot sign, so it only measures what HTTP on
# this machine allows; the benchmarks then drive hookinbox with the signing load generator.
# Prints one JSON line: per_second, p50_ms, p99_ms, non_2xx, errors, threads.
#
#   bench/ceiling.sh http://127.0.0.1:PORT/ [SECONDS] [CONNECTIONS] [THREADS]
#
# wrk runs one thread per core by default: its best on a 2-core machine, where one thread
# reached 0.87–0.95 of two, and three or four threads less than two (BENCHMARKS.md, "The
# ceiling: wrk's threads"). A ceiling lower than the bare server allows would flatter
# every ratio.
#
# wrk is installed with apt-get when missing and this runs as root.
set -euo pipefail

url=${1:?usage: bench/ceiling.sh URL [SECONDS] [CONNECTIONS] [THREADS]}
seconds=${2:-6}
conns=${3:-32}
# wrk refuses more threads than connections.
cores=$(nproc)
threads=${4:-$((cores < conns ? cores : conns))}

if ! command -v wrk >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing the Debian package wrk" >&2
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk; }; } \
      >/dev/null 2>&1 || true
fi
command -v wrk >/dev/null || { echo "the benchmarks need wrk for their ceiling: apt-get install wrk (as root)" >&2; exit 2; }

script=$(mktemp --suffix=.lua)
trap 'rm -f "$script"' EXIT
# One JSON line of the load generator's size.
cat >"$script" <<'LUA'
wrk.method = "POST"
wrk.body = string.rep("x", 1500)
wrk.headers["Content-Type"] = "application/json"
LUA
wrk -t"$threads" -c"$conns" -d"${seconds}s" --latency -s "$script" "$url" |
    python3 -c '
import json, re, sys
out = sys.stdin.read()
def ms(v, unit):
    return float(v) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]
pct = {p: ms(v, u) for p, v, u in re.findall(r"^\s+(50|99)(?:\.0+)?%\s+([\d.]+)(us|ms|s)$", out, re.M)}
errors = sum(int(n) for n in re.findall(r"(?:connect|read|write|timeout) (\d+)", out))
non_2xx = int(m.group(1)) if (m := re.search(r"Non-2xx or 3xx responses: (\d+)", out)) else 0
rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
if rate is None:
    sys.exit("wrk printed no rate:\n" + out)
print(json.dumps({"per_second": float(rate.group(1)), "p50_ms": pct["50"], "p99_ms": pct["99"],
                  "non_2xx": non_2xx, "errors": errors, "threads": int(sys.argv[1])}))' "$threads"
