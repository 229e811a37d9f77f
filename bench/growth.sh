#!/usr/bin/env bash
# What a year of traffic costs: the receive rate and p99 on inboxes that already hold N
# events (identity rows kept, payloads pruned, as retention leaves them), for each N.
# Prints numbers, asserts nothing; compare the ratios (shared machines are noisy).
#
#   bench/growth.sh                                  # 100,000, 1 million and 10 million
#   GROWTH_SIZES="100000 1000000" BENCH_SECONDS=10 bench/growth.sh
#
# For each size and each kind of id (ordered: time first, as UUIDv7s and ULIDs; random:
# UUIDs, as GitHub's), the script fills a new inbox with N identity rows of that kind,
# spread over the year before now, with `sqlite3` (about a minute per 10 million), then
# measures, in turn: the ceiling (wrk against a bare hyper server, as bench/run.sh)
# and hookinbox storing new events of the same kind with 32 connections and 1.5 KB signed
# bodies, synchronous=full; then, with the server stopped, how long `hookinbox events`
# takes to print a page from half a year ago. The inbox stays in the page cache (this machine has the
# memory); on a VM whose memory cannot hold the identity index, random ids read a page
# from disk for most inserts.
#
# Needs sqlite3 and wrk (installed with apt-get as root when missing), and about 400 MB of
# disk per million events in the temporary directory.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${BENCH_SECONDS:-6}
sizes=${GROWTH_SIZES:-100000 1000000 10000000}
conns=32
for n in $sizes; do
    [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "GROWTH_SIZES holds whole numbers of events (got '$n')" >&2; exit 2; }
done
if ! command -v sqlite3 >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq sqlite3 >/dev/null 2>&1 || true
fi
command -v sqlite3 >/dev/null || { echo "bench/growth.sh needs sqlite3: apt-get install sqlite3 (as root)" >&2; exit 2; }

cargo build --release --locked --features loadgen >&2
bin=$PWD/target/release
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 300); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done; echo "port $1 never opened" >&2; return 1; }
pub=$(free_port); admin=$(free_port); bare=$(free_port)
cat >"$work/hookinbox.toml" <<TOML
[server]
listen = "127.0.0.1:$pub"
max_connections = 256
[admin]
listen = "127.0.0.1:$admin"
[store]
path = "$work/inbox.db"
synchronous = "full"
[[sources]]
name = "bench"
scheme = "standard-webhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
TOML
"$bin/hookinbox-loadgen" bare --listen "127.0.0.1:$bare" 2>/dev/null & pids+=($!)
wait_port "$bare"

# A new inbox holding $1 identity rows with ids of kind $2, received over the year before
# now (oldest first), their payloads pruned 30 days after. Ordered ids sort before every
# id the load generator sends now; random ones are spread over the whole index.
fill() {
    local n=$1 kind=$2
    rm -f "$work"/inbox.db*
    "$bin/hookinbox" serve --config "$work/hookinbox.toml" 2>>"$work/serve.log" & local s=$!
    wait_port "$pub"
    kill -TERM "$s"; wait "$s" || true
    local start_ms step_ms id order
    # The year before now (a minute before, so that every new id sorts after these).
    start_ms=$(($(date +%s%3N) - 60000 - 31536000000))
    step_ms=$((31536000000 / n))
    if [ "$kind" = ordered ]; then
        id="printf('load_%013d_%04d_%010d', ms, i % 32, i / 32)"
        order="i"
    else
        id="lower(printf('%s-%s-4%s-%s-%s', hex(randomblob(4)), hex(randomblob(2)),
                         substr(hex(randomblob(2)), 2), hex(randomblob(2)), hex(randomblob(6))))"
        order="event_id"
    fi
    sqlite3 "$work/inbox.db" >/dev/null <<SQL
PRAGMA synchronous = OFF;
PRAGMA cache_size = -1000000;
PRAGMA temp_store = MEMORY;
BEGIN;
-- The ids first, in the order they are inserted (for random ids, key order: the index is
-- then built in minutes instead of hours), then each row's time from its place.
CREATE TEMP TABLE ids AS
WITH RECURSIVE
  seq(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM seq WHERE i < $n - 1),
  at(i, ms) AS (SELECT i, $start_ms + i * $step_ms FROM seq)
SELECT $id AS event_id FROM at ORDER BY $order;
INSERT INTO events (source, account, event_id, sha256, size, event_type, provider_time,
                    received_at, remote_addr, pruned_at, origin)
SELECT 'bench', '', event_id, printf('%064x', rowid), 1500, 'load.test', t, t, '127.0.0.1', t,
       'webhook'
  FROM (SELECT rowid, event_id,
               strftime('%Y-%m-%dT%H:%M:%fZ', ($start_ms + (rowid - 1) * $step_ms) / 1000.0,
                        'unixepoch') AS t
          FROM ids)
 ORDER BY rowid;
COMMIT;
PRAGMA wal_checkpoint(TRUNCATE);
SQL
}

field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }
rows=()
for n in $sizes; do
    for kind in ordered random; do
        echo "filling an inbox with $n $kind identity rows" >&2
        started=$(date +%s)
        fill "$n" "$kind"
        filled=$(($(date +%s) - started))
        # The fill leaves gigabytes of dirty pages; written back during the run, they
        # would be measured as the server's fsyncs.
        sync
        size_mb=$(( $(stat -c %s "$work/inbox.db") / 1000000 ))
        "$bin/hookinbox" serve --config "$work/hookinbox.toml" 2>>"$work/serve.log" & serve=$!; pids+=("$serve")
        wait_port "$pub"
        ceiling=$(field "$(bench/ceiling.sh "http://127.0.0.1:$bare/" "$seconds" "$conns")" per_second)
        wb0=$(awk '/^write_bytes/ {print $2}' "/proc/$serve/io")
        run=$("$bin/hookinbox-loadgen" send --config "$work/hookinbox.toml" --source bench \
            --url "http://127.0.0.1:$pub" --connections "$conns" --duration "${seconds}s" \
            --body-size 1500 --ids "$kind")
        wb1=$(awk '/^write_bytes/ {print $2}' "/proc/$serve/io")
        kill -TERM "$serve"; wait "$serve" || true
        # What an operator waits for a page of the inbox from half a year ago.
        t0=$(date +%s%N)
        "$bin/hookinbox" events --config "$work/hookinbox.toml" --until 182d --limit 50 --json >/dev/null
        page_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
        rows+=("$(python3 - "$n" "$kind" "$ceiling" "$run" "$wb0" "$wb1" "$size_mb" "$filled" "$page_ms" <<'PY'
import json, sys
n, kind, ceiling, run, wb0, wb1, size, filled, page_ms = sys.argv[1:]
r = json.loads(run)
kib = (int(wb1) - int(wb0)) / 1024 / max(r["acked"], 1)
print(f"| {int(n):,} | {kind} | {size} MB | {r['per_second']:,.0f} | {r['per_second'] / float(ceiling):.2f} "
      f"| {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {kib:.2f} | {r['non_2xx']}/{r['errors']} | {filled} s "
      f"| {page_ms} |")
PY
)")
    done
done

printf '\n%s s per run, %s connections, 1.5 KB bodies, synchronous=full; the ratio is to the wrk\n' "$seconds" "$conns"
printf 'ceiling measured just before each run. KiB written per stored event (/proc/PID/io).\n'
printf 'page ms: `hookinbox events --until 182d --limit 50` afterwards, the whole command.\n\n'
printf '| events already in the inbox | ids | file | events/s | ratio to wrk | p50 ms | p99 ms | KiB written | non-2xx/errors | filled in | page ms |\n'
printf '|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n'
printf '%s\n' "${rows[@]}"
