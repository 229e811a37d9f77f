#!/usr/bin/env bash
# The benchmark: prints numbers, asserts nothing. Everything runs on this machine, in one
# run, so compare the ratios, not the absolute figures (shared machines are noisy).
#
#   bench/run.sh                 # 3 rounds, 6 s per measurement
#   BENCH_SECONDS=20 BENCH_ROUNDS=5 bench/run.sh
#
# The ceiling, unique and duplicate runs are interleaved, round after round, and the table
# shows the median of each, the median and range of the per-round ratios, and the worst
# p99: on a shared machine one 6 s ceiling can come out 50% above the next one, so a ratio
# from a single pair of runs says more about the neighbours than about hookinbox.
#
# Measures, each with 32 keep-alive connections and 1.5 KB signed bodies:
#   ceiling    a bare hyper server that reads the body and answers 200
#   unique     hookinbox, synchronous=full, every event new (commit + 2xx)
#   duplicate  hookinbox, the same event over and over (verify + lookup + 2xx)
#   forward    hookinbox forwarding stored events to a local HTTP sink
#   peer       the Debian package `webhook` (adnanh/webhook) with an HMAC-SHA256 rule;
#              installed with apt-get when missing and run as root, else skipped
#   peak RSS   of hookinbox across the runs, and of the peer
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${BENCH_SECONDS:-6}
rounds=${BENCH_ROUNDS:-3}
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "BENCH_ROUNDS must be a whole number of rounds, 1 or more (got '$rounds')" >&2; exit 2; }
conns=32
cargo build --release --locked --features loadgen >&2
bin=$PWD/target/release
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pub=$(free_port); admin=$(free_port); bare=$(free_port)

config() { # $1 = file, $2 = inbox, $3 = extra target lines
    cat >"$1" <<TOML
[server]
listen = "127.0.0.1:$pub"
max_connections = 256
[admin]
listen = "127.0.0.1:$admin"
[store]
path = "$2"
synchronous = "full"
[[sources]]
name = "bench"
scheme = "standard-webhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
$3
TOML
}

wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done; echo "port $1 never opened" >&2; return 1; }

send_as() { # $1 = config, $2 = source, $3 = url, extra flags after
    local config=$1 source=$2 url=$3; shift 3
    "$bin/hookinbox-loadgen" send --config "$config" --source "$source" --url "$url" \
        --connections "$conns" --duration "${seconds}s" --body-size 1500 "$@"
}
send() { send_as "$work/plain.toml" bench "$@"; }

field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }

config "$work/plain.toml" "$work/plain.db" ""

# The ceiling, and hookinbox receiving unique events, then one duplicate over and over;
# one JSON line per run in $work/<name>.jsonl.
"$bin/hookinbox-loadgen" bare --listen "127.0.0.1:$bare" 2>/dev/null & pids+=($!)
"$bin/hookinbox" serve --config "$work/plain.toml" 2>"$work/serve.log" & serve=$!; pids+=("$serve")
wait_port "$bare"
wait_port "$pub"
for round in $(seq "$rounds"); do
    echo "round $round of $rounds" >&2
    send "http://127.0.0.1:$bare" >>"$work/ceiling.jsonl"
    send "http://127.0.0.1:$pub" >>"$work/unique.jsonl"
    send "http://127.0.0.1:$pub" --duplicates >>"$work/duplicate.jsonl"
done
rss_recv=$(awk '/VmHWM/ {print $2}' "/proc/$serve/status")
# The medians, as one JSON line like the load generator's, for the peer's and forwarding's
# ratios below.
ceiling=$(python3 - "$work/ceiling.jsonl" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
print(json.dumps({"per_second": statistics.median(r["per_second"] for r in runs)}))
PY
)
kill -TERM "$serve"; wait "$serve" || true
batches=$(sqlite3 "$work/plain.db" "SELECT count(*) FROM events WHERE event_id != 'load_dup'")

# The peer: adnanh/webhook, one hook whose trigger rule is an HMAC-SHA256 of the raw body
# in GitHub's header (`X-Hub-Signature-256: sha256=<hex>`), signed by the load generator
# through a `scheme = "github"` source. Per request webhook reads the body, checks the rule,
# answers 200 and only then starts /bin/true in the background; it stores nothing and keeps
# no record of ids, so it has no durable commit and no dedup. A wrong signature gets 500
# from webhook 2.8 and a missing one the mismatch code set below (its default is 200).
peer_secret=bench-peer-6f1d0c2a9e
peer_config() { # $1 = file, $2 = secret; only read by the load generator to sign
    cat >"$1" <<TOML
[server]
listen = "127.0.0.1:$pub"
[store]
path = "$work/peer-unused.db"
[[sources]]
name = "peer"
scheme = "github"
secrets = ["$2"]
TOML
}
if ! command -v webhook >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing the Debian package webhook for the peer run" >&2
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq webhook \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq webhook; }; } \
      >/dev/null 2>&1 || true
fi
peer="" peer_note="" rss_peer=""
run_peer() {
    if ! command -v webhook >/dev/null; then
        peer_note="peer skipped: no webhook binary (the Debian package webhook; installed only as root with apt-get)"
        return
    fi
    local port wh wrong version
    version=$(webhook -version | awk '{print $3}')
    peer_label="peer: webhook (adnanh) ${version%.*}, HMAC rule"
    port=$(free_port)
    cat >"$work/hooks.json" <<JSON
[
  {
    "id": "peer",
    "execute-command": "/bin/true",
    "response-message": "ok",
    "trigger-rule-mismatch-http-response-code": 401,
    "trigger-rule": {
      "match": {
        "type": "payload-hmac-sha256",
        "secret": "$peer_secret",
        "parameter": { "source": "header", "name": "X-Hub-Signature-256" }
      }
    }
  }
]
JSON
    peer_config "$work/peer.toml" "$peer_secret"
    peer_config "$work/peer-wrong.toml" "not-$peer_secret"
    webhook -hooks "$work/hooks.json" -ip 127.0.0.1 -port "$port" 2>"$work/peer.log" & wh=$!; pids+=("$wh")
    if ! wait_port "$port"; then
        peer_note="peer skipped: webhook did not start ($(head -c 300 "$work/peer.log"))"
        return
    fi
    # Not a no-op peer: events signed with another secret must all be refused.
    wrong=$("$bin/hookinbox-loadgen" send --config "$work/peer-wrong.toml" --source peer \
        --url "http://127.0.0.1:$port" --connections 2 --duration 1s --body-size 1500)
    if [ "$(field "$wrong" acked)" != 0 ] || [ "$(field "$wrong" non_2xx)" = 0 ]; then
        peer_note="peer skipped: webhook did not refuse wrongly signed events: $wrong"
    else
        peer=$(send_as "$work/peer.toml" peer "http://127.0.0.1:$port")
        peer_note="peer refused all $(field "$wrong" non_2xx) wrongly signed events of a 1 s check"
        rss_peer=$(awk '/VmHWM/ {print $2}' "/proc/$wh/status")
    fi
    kill -TERM "$wh"; wait "$wh" || true
}
run_peer
echo "$peer_note" >&2

# hookinbox forwarding: events stored while the target is down, then the target comes up.
config "$work/fwd.toml" "$work/fwd.db" "[[sources.targets]]
name = \"sink\"
url = \"http://127.0.0.1:$bare/sink\"
concurrency = 32"
kill "${pids[0]}"; wait "${pids[0]}" 2>/dev/null || true
"$bin/hookinbox" serve --config "$work/fwd.toml" 2>"$work/fwd.log" & fwd=$!; pids+=("$fwd")
wait_port "$pub"
"$bin/hookinbox-loadgen" send --config "$work/plain.toml" --source bench --url "http://127.0.0.1:$pub" \
    --connections "$conns" --duration "${seconds}s" --body-size 1500 >/dev/null
stored=$(sqlite3 "$work/fwd.db" "SELECT count(*) FROM events")
"$bin/hookinbox-loadgen" bare --listen "127.0.0.1:$bare" 2>/dev/null & pids+=($!)
started=$(date +%s.%N)
while [ "$(sqlite3 "$work/fwd.db" "SELECT count(*) FROM deliveries WHERE state = 'delivered'")" -lt "$stored" ]; do
    sleep 0.2
    if [ "$(echo "$(date +%s.%N) - $started > 300" | bc)" = 1 ]; then echo "forwarding did not finish" >&2; break; fi
done
# The span from the first to the last acceptance, as the inbox recorded it.
forward=$(sqlite3 "$work/fwd.db" "SELECT count(*) / ((julianday(max(updated_at)) - julianday(min(updated_at))) * 86400.0)
                                   FROM deliveries WHERE state = 'delivered'")
rss_fwd=$(awk '/VmHWM/ {print $2}' "/proc/$fwd/status")
kill -TERM "$fwd"; wait "$fwd" || true

c=$(field "$ceiling" per_second)
printf '\n%s rounds of %s s; events/s and p50 are medians, p99 the worst round; a ratio is the\n' "$rounds" "$seconds"
printf 'median of the rounds'"'"' ratios (each run against the ceiling of its own round), range in brackets;\n'
printf 'forward and peer run once, against the median ceiling.\n'
printf '\n| run | events/s | ratio to ceiling | p50 ms | p99 ms |\n|---|---:|---:|---:|---:|\n'
python3 - "$work" <<'PY'
import json, statistics, sys
def load(name):
    return [json.loads(l) for l in open(f"{sys.argv[1]}/{name}.jsonl")]
ceiling = load("ceiling")
for name in ("ceiling", "unique", "duplicate"):
    runs = load(name)
    ratios = [r["per_second"] / c["per_second"] for r, c in zip(runs, ceiling)]
    print(f"| {name} | {statistics.median(r['per_second'] for r in runs):.0f} "
          f"| {statistics.median(ratios):.2f} [{min(ratios):.2f}–{max(ratios):.2f}] "
          f"| {statistics.median(r['p50_ms'] for r in runs)} | {max(r['p99_ms'] for r in runs)} |")
PY
printf '| forward (to a local sink) | %.0f | %.2f | | |\n' "$forward" "$(echo "$forward / $c" | bc -l)"
if [ -n "$peer" ]; then
    r=$(field "$peer" per_second)
    printf '| %s | %s | %.2f | %s | %s |\n' "$peer_label" "$r" "$(echo "$r / $c" | bc -l)" "$(field "$peer" p50_ms)" "$(field "$peer" p99_ms)"
fi
printf '\npeak RSS: %s KiB receiving, %s KiB forwarding; %s events stored in the unique runs; %s forwarded\n' \
    "$rss_recv" "$rss_fwd" "$batches" "$stored"
totals() { # non-2xx/errors summed over a .jsonl file's runs
    python3 -c 'import json, sys; runs = [json.loads(l) for l in open(sys.argv[1])]
print("/".join(str(sum(r[k] for r in runs)) for k in ("non_2xx", "errors")))' "$1"
}
printf 'non-2xx / errors over all rounds: unique %s, duplicate %s\n' \
    "$(totals "$work/unique.jsonl")" "$(totals "$work/duplicate.jsonl")"
if [ -n "$peer" ]; then
    printf 'peer: non-2xx / errors %s/%s, peak RSS %s KiB (webhook alone, not its /bin/true children); %s\n' \
        "$(field "$peer" non_2xx)" "$(field "$peer" errors)" "$rss_peer" "$peer_note"
else
    printf '%s\n' "$peer_note"
fi
