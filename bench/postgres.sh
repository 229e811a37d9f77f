#!/usr/bin/env bash
# The PostgreSQL inbox against the SQLite one: prints numbers, asserts nothing. One run on
# this machine, so compare the ratios (shared machines are noisy).
#
#   bench/postgres.sh                 # 3 rounds, 6 s per measurement
#   BENCH_SECONDS=20 BENCH_ROUNDS=5 bench/postgres.sh
#
# Each round, in turn, with 32 keep-alive connections and 1.5 KB signed bodies, every event
# new:
#   ceiling      Debian's wrk against a bare hyper server that reads the body and answers
#                200 (bench/ceiling.sh): every ratio is taken against it
#   loadgen      the signing load generator against the same bare server, a thread per
#                core as wrk; it drives hookinbox below with one thread (bench/run.sh)
#   sqlite       hookinbox on its SQLite inbox, synchronous=full
#   pg-1         hookinbox on PostgreSQL, one replica
#   pg-2         two replicas on the same PostgreSQL, 16 connections each (rates summed,
#                the worse p99)
# then, once: forwarding to a local sink from SQLite, and from PostgreSQL with one replica
# and with two.
#
# PostgreSQL is the tests' throwaway cluster (scripts/pg-test-cluster.sh: Debian's server,
# its defaults, fsync and synchronous_commit on) on this same machine: the database, both
# replicas and the load generator share the two cores.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${BENCH_SECONDS:-6}
rounds=${BENCH_ROUNDS:-3}
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "BENCH_ROUNDS must be a whole number of rounds, 1 or more (got '$rounds')" >&2; exit 2; }
conns=32
cargo build --release --locked --features loadgen >&2
bin=$PWD/target/release
server=$(scripts/pg-test-cluster.sh)
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done; echo "port $1 never opened" >&2; return 1; }
psql_at() { psql -X -q -t -A "$@"; }

# A database of its own for each PostgreSQL run, dropped at the end.
new_db() { # (in a subshell when its output is read: a name from the clock, not a counter)
    local name="bench_$$_$(date +%s%N)"
    psql_at "$server" -c "CREATE DATABASE $name"
    echo "${server%/*}/$name"
}

config() { # $1 = file, $2 = public port, $3 = admin port, $4 = store lines, $5 = extra
    cat >"$1" <<TOML
[server]
listen = "127.0.0.1:$2"
max_connections = 256
[admin]
listen = "127.0.0.1:$3"
[store]
path = "$work/$(basename "$1" .toml).db"
$4
[[sources]]
name = "bench"
scheme = "standard-webhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
$5
TOML
}

send() { # $1 = url, $2 = connections, extra flags after
    local url=$1 n=$2; shift 2
    "$bin/hookinbox-loadgen" send --config "$work/sign.toml" --source bench --url "$url" \
        --connections "$n" --duration "${seconds}s" --body-size 1500 "$@"
}

start() { # $1 = config; prints the pid
    # stdout elsewhere: the caller reads this function's output.
    "$bin/hookinbox" serve --config "$1" >/dev/null 2>>"$work/serve.log" &
    echo $!
}

# The load generator signs with this config's secret; it is never served.
config "$work/sign.toml" 9 10 "" ""
bare=$(free_port)
"$bin/hookinbox-loadgen" bare --listen "127.0.0.1:$bare" >/dev/null 2>&1 & pids+=($!)
wait_port "$bare"

for round in $(seq "$rounds"); do
    echo "round $round of $rounds" >&2
    bench/ceiling.sh "http://127.0.0.1:$bare/" "$seconds" "$conns" >>"$work/ceiling.jsonl"
    send "http://127.0.0.1:$bare" "$conns" --threads "$(nproc)" >>"$work/loadgen.jsonl"

    p=$(free_port); a=$(free_port)
    rm -f "$work/sqlite.db"*
    config "$work/sqlite.toml" "$p" "$a" 'synchronous = "full"' ""
    pid=$(start "$work/sqlite.toml"); pids+=("$pid"); wait_port "$p"
    send "http://127.0.0.1:$p" "$conns" >>"$work/sqlite.jsonl"
    kill -TERM "$pid"; wait "$pid" 2>/dev/null || true

    url=$(new_db)
    p=$(free_port); a=$(free_port)
    config "$work/pg1.toml" "$p" "$a" "backend = \"postgres\"
url = \"$url\"" ""
    pid=$(start "$work/pg1.toml"); pids+=("$pid"); wait_port "$p"
    send "http://127.0.0.1:$p" "$conns" >>"$work/pg-1.jsonl"
    kill -TERM "$pid"; wait "$pid" 2>/dev/null || true

    url=$(new_db)
    p1=$(free_port); a1=$(free_port); p2=$(free_port); a2=$(free_port)
    store="backend = \"postgres\"
url = \"$url\""
    config "$work/pg2a.toml" "$p1" "$a1" "$store" ""
    config "$work/pg2b.toml" "$p2" "$a2" "$store" ""
    pid1=$(start "$work/pg2a.toml"); pids+=("$pid1"); wait_port "$p1"
    pid2=$(start "$work/pg2b.toml"); pids+=("$pid2"); wait_port "$p2"
    send "http://127.0.0.1:$p1" $((conns / 2)) >"$work/pg2a.json" &
    s1=$!
    send "http://127.0.0.1:$p2" $((conns / 2)) >"$work/pg2b.json"
    wait "$s1"
    python3 - "$work/pg2a.json" "$work/pg2b.json" >>"$work/pg-2.jsonl" <<'PY'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
print(json.dumps({
    "per_second": a["per_second"] + b["per_second"],
    "p50_ms": max(a["p50_ms"], b["p50_ms"]),
    "p99_ms": max(a["p99_ms"], b["p99_ms"]),
    "non_2xx": a["non_2xx"] + b["non_2xx"],
    "errors": a["errors"] + b["errors"],
}))
PY
    kill -TERM "$pid1" "$pid2"; wait "$pid1" "$pid2" 2>/dev/null || true
done

# Forwarding: events stored while their target is paused, then it resumes (the sink is up
# by then, so no attempt fails and waits for a retry); the rate is deliveries accepted per
# second between the first and the last, as the inbox recorded them.
forward() { # $1 = sqlite | postgres, $2 = replicas
    local url="" p a pids_fwd=() i stored started store count_sql first
    sink=$(free_port)
    "$bin/hookinbox-loadgen" bare --listen "127.0.0.1:$sink" >/dev/null 2>&1 & sinkpid=$!
    wait_port "$sink"
    if [ "$1" = postgres ]; then
        url=$(new_db)
        store="backend = \"postgres\"
url = \"$url\""
    else
        store='synchronous = "full"'
    fi
    for i in $(seq "$2"); do
        p=$(free_port); a=$(free_port)
        config "$work/fwd-$1-$i.toml" "$p" "$a" "$store" "[[sources.targets]]
name = \"sink\"
url = \"http://127.0.0.1:$sink/sink\"
concurrency = 32"
        pids_fwd+=("$(start "$work/fwd-$1-$i.toml")"); wait_port "$p"
        if [ "$i" = 1 ]; then first=$p; fi
    done
    if [ -n "$url" ]; then
        psql_at "$url" -c "INSERT INTO paused_targets VALUES ('bench', 'sink', '2026-01-01T00:00:00.000Z', 'bench')"
    else
        "$bin/hookinbox" pause bench/sink --config "$work/fwd-$1-1.toml" >/dev/null
    fi
    send "http://127.0.0.1:$first" "$conns" >/dev/null
    if [ -n "$url" ]; then
        stored=$(psql_at "$url" -c "SELECT count(*) FROM events")
        psql_at "$url" -c "DELETE FROM paused_targets"
    else
        stored=$(sqlite3 "$work/fwd-$1-1.db" "SELECT count(*) FROM events")
        "$bin/hookinbox" resume bench/sink --config "$work/fwd-$1-1.toml" >/dev/null
    fi
    count_sql="SELECT count(*) FROM deliveries WHERE state = 'delivered'"
    started=$(date +%s)
    while [ "$(if [ -n "$url" ]; then psql_at "$url" -c "$count_sql"; else sqlite3 "$work/fwd-$1-1.db" "$count_sql"; fi)" -lt "$stored" ]; do
        sleep 0.5
        if [ $(($(date +%s) - started)) -gt 300 ]; then echo "forwarding did not finish" >&2; break; fi
    done
    if [ -n "$url" ]; then
        psql_at "$url" -c "SELECT round(count(*) / extract(epoch FROM max(updated_at::timestamptz) - min(updated_at::timestamptz)))
                             FROM deliveries WHERE state = 'delivered'"
    else
        sqlite3 "$work/fwd-$1-1.db" "SELECT round(count(*) / ((julianday(max(updated_at)) - julianday(min(updated_at))) * 86400.0))
                                     FROM deliveries WHERE state = 'delivered'"
    fi
    echo "$stored" >"$work/forwarded-$1-$2"
    kill -TERM "${pids_fwd[@]}"; wait "${pids_fwd[@]}" 2>/dev/null || true
    kill "$sinkpid"; wait "$sinkpid" 2>/dev/null || true
}
fwd_sqlite=$(forward sqlite 1)
fwd1=$(forward postgres 1)
fwd2=$(forward postgres 2)

printf '\n%s rounds of %s s, 32 connections, 1.5 KB bodies, unique ids; events/s and p50 are\n' "$rounds" "$seconds"
printf 'medians, p99 the worst round; a ratio is the median of the rounds'"'"' ratios (each run\n'
printf 'against the wrk ceiling of its own round), range in brackets. Forwarding runs once, against\n'
printf 'the median ceiling.\n'
printf '\n| run | events/s | ratio to wrk | p50 ms | p99 ms |\n|---|---:|---:|---:|---:|\n'
python3 - "$work" "$fwd_sqlite" "$fwd1" "$fwd2" <<'PY'
import json, statistics, sys
work, fwd_sqlite, fwd1, fwd2 = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
def load(name):
    return [json.loads(l) for l in open(f"{work}/{name}.jsonl")]
ceiling = load("ceiling")
cores = ceiling[0]["threads"]
names = {"ceiling": f"ceiling: wrk -t{cores}, bare hyper",
         "loadgen": f"hookinbox-loadgen --threads {cores}, bare hyper",
         "sqlite": "SQLite, synchronous=full",
         "pg-1": "PostgreSQL, 1 replica", "pg-2": "PostgreSQL, 2 replicas"}
for name, label in names.items():
    runs = load(name)
    ratios = [r["per_second"] / c["per_second"] for r, c in zip(runs, ceiling)]
    print(f"| {label} | {statistics.median(r['per_second'] for r in runs):.0f} "
          f"| {statistics.median(ratios):.2f} [{min(ratios):.2f}–{max(ratios):.2f}] "
          f"| {statistics.median(r['p50_ms'] for r in runs)} | {max(r['p99_ms'] for r in runs)} |")
c = statistics.median(r["per_second"] for r in ceiling)
print(f"| forward from SQLite | {fwd_sqlite:.0f} | {fwd_sqlite / c:.2f} | | |")
print(f"| forward from PostgreSQL, 1 replica | {fwd1:.0f} | {fwd1 / c:.2f} | | |")
print(f"| forward from PostgreSQL, 2 replicas | {fwd2:.0f} | {fwd2 / c:.2f} | | |")
bad = {n: "/".join(str(sum(r[k] for r in load(n))) for k in ("non_2xx", "errors"))
       for n in ("sqlite", "pg-1", "pg-2")}
print("\nnon-2xx / errors over all rounds: " + ", ".join(f"{n} {v}" for n, v in bad.items()))
PY
printf 'forwarded: %s events from SQLite, %s from PostgreSQL with 1 replica, %s with 2\n' \
    "$(cat "$work/forwarded-sqlite-1")" "$(cat "$work/forwarded-postgres-1")" "$(cat "$work/forwarded-postgres-2")"
for db in $(psql_at "$server" -c "SELECT datname FROM pg_database WHERE datname LIKE 'bench\_$$\_%'"); do
    psql_at "$server" -c "DROP DATABASE $db" || true
done
