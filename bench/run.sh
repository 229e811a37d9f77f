#!/usr/bin/env bash
# The benchmark: prints numbers, asserts nothing. Everything runs on this machine, in one
# run, so compare the ratios, not the absolute figures (shared machines are noisy).
#
#   bench/run.sh                 # 6 s per measurement
#   BENCH_SECONDS=20 bench/run.sh
#
# Measures, each with 32 keep-alive connections and 1.5 KB signed bodies:
#   ceiling    a bare hyper server that reads the body and answers 200
#   unique     hookinbox, synchronous=full, every event new (commit + 2xx)
#   duplicate  hookinbox, the same event over and over (verify + lookup + 2xx)
#   forward    hookinbox forwarding stored events to a local HTTP sink
#   peak RSS   of hookinbox across the runs
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${BENCH_SECONDS:-6}
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

wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done; echo "port $1 never opened" >&2; exit 1; }

send() { # $1 = url, extra flags after
    local url=$1; shift
    "$bin/hookinbox-loadgen" send --config "$work/plain.toml" --source bench --url "$url" \
        --connections "$conns" --duration "${seconds}s" --body-size 1500 "$@"
}

field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }

config "$work/plain.toml" "$work/plain.db" ""

# The ceiling.
"$bin/hookinbox-loadgen" bare --listen "127.0.0.1:$bare" 2>/dev/null & pids+=($!)
wait_port "$bare"
ceiling=$(send "http://127.0.0.1:$bare")

# hookinbox receiving: unique events, then one duplicate over and over.
"$bin/hookinbox" serve --config "$work/plain.toml" 2>"$work/serve.log" & serve=$!; pids+=($serve)
wait_port "$pub"
unique=$(send "http://127.0.0.1:$pub")
duplicate=$(send "http://127.0.0.1:$pub" --duplicates)
rss_recv=$(awk '/VmHWM/ {print $2}' "/proc/$serve/status")
kill -TERM "$serve"; wait "$serve" || true
batches=$(sqlite3 "$work/plain.db" "SELECT count(*) FROM events")

# hookinbox forwarding: events stored while the target is down, then the target comes up.
config "$work/fwd.toml" "$work/fwd.db" "[[sources.targets]]
name = \"sink\"
url = \"http://127.0.0.1:$bare/sink\"
concurrency = 32"
kill "${pids[0]}"; wait "${pids[0]}" 2>/dev/null || true
"$bin/hookinbox" serve --config "$work/fwd.toml" 2>"$work/fwd.log" & fwd=$!; pids+=($fwd)
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
printf '\n| run | events/s | ratio to ceiling | p50 ms | p99 ms |\n|---|---:|---:|---:|---:|\n'
for name in ceiling unique duplicate; do
    row=${!name}
    r=$(field "$row" per_second)
    printf '| %s | %s | %.2f | %s | %s |\n' "$name" "$r" "$(echo "$r / $c" | bc -l)" "$(field "$row" p50_ms)" "$(field "$row" p99_ms)"
done
printf '| forward (to a local sink) | %.0f | %.2f | | |\n' "$forward" "$(echo "$forward / $c" | bc -l)"
printf '\npeak RSS: %s KiB receiving, %s KiB forwarding; %s events stored in the unique run; %s forwarded\n' \
    "$rss_recv" "$rss_fwd" "$batches" "$stored"
printf 'non-2xx / errors: unique %s/%s, duplicate %s/%s\n' \
    "$(field "$unique" non_2xx)" "$(field "$unique" errors)" "$(field "$duplicate" non_2xx)" "$(field "$duplicate" errors)"
