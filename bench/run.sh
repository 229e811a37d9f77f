#!/usr/bin/env bash
# The benchmark: prints numbers, asserts nothing. Everything runs on this machine, in one
# run, so compare the ratios, not the absolute figures (shared machines are noisy).
#
#   bench/run.sh                 # 3 rounds, 6 s per measurement (about 10 minutes)
#   BENCH_SECONDS=20 BENCH_ROUNDS=5 bench/run.sh
#
# Each round measures, in turn, with 32 keep-alive connections and 1.5 KB bodies:
#   wrk         Debian's wrk, a thread per core, against a bare hyper server that reads
#               the body and answers 200: the ceiling every ratio is taken against
#               (bench/ceiling.sh). wrk cannot sign, so it drives only the bare server
#   loadgen     hookinbox-loadgen, a thread per core, against the same bare server: how
#               much of the ceiling the signing load generator reaches, and its CPU per
#               request
#   loadgen1    the same with one sender thread, as it drives hookinbox in the runs
#               below: one thread leaves the most of the shared cores to the server
#               (two gave the same rate of unique events and 8–10% fewer duplicates)
#   ordered     hookinbox, synchronous=full, every event new, ids ordered by time
#               (UUIDv7- or ULID-like: the identity index grows at its end)
#   random      the same with random ids (UUIDs, as GitHub's): each insert lands at a
#               random place in the identity index
#   target      ordered ids to a source with one target (paused, so nothing is sent):
#               each event also writes its delivery row, as it does for every source
#               that forwards
#   live        the same with the target up (the default concurrency, 4), forwarding to
#               the bare server while events arrive: what a forwarding source costs,
#               with the deliveries it made meanwhile (their rate, the backlog left)
#   duplicate   the same signed event over and over (verify, find the identity, answer)
# Each round's ratios are against that round's wrk ceiling; the table shows the median
# rate of each row, the median and the range of its per-round ratios, and the worst p99.
# For hookinbox's rows it also shows, measured around each run: the server's CPU per
# request (/proc/PID/stat), the bytes it wrote per stored event (/proc/PID/io,
# write_bytes: WAL frames, checkpoints, everything), and the events per commit (/metrics);
# in the live row both include the forwarding done meanwhile.
# Then, once:
#   forward     events stored while their target is paused, then resumed with a local HTTP
#               sink (the bare server) up: accepted deliveries per second, from the first
#               acceptance to the last;
#               once from a source with ordering (every event its own key), once without
#   peer        the Debian package `webhook` (adnanh/webhook) with an HMAC-SHA256 rule,
#               driven by the load generator as hookinbox is
# wrk and webhook are installed with apt-get when missing and the script runs as root;
# without wrk it stops, without webhook it skips the peer and says so.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${BENCH_SECONDS:-6}
rounds=${BENCH_ROUNDS:-3}
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "BENCH_ROUNDS must be a whole number of rounds, 1 or more (got '$rounds')" >&2; exit 2; }
conns=32
cores=$(nproc)

install_missing() { # $1 = command, $2 = Debian package
    command -v "$1" >/dev/null && return
    [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null || return 0
    echo "installing the Debian package $2" >&2
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2"; }; } \
      >/dev/null 2>&1 || true
}
install_missing webhook webhook

cargo build --release --locked --features loadgen >&2
bin=$PWD/target/release
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pub=$(free_port); admin=$(free_port); bare=$(free_port)

config() { # $1 = file, $2 = inbox, $3 = lines after the source (its targets, more sources)
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

ceiling() { bench/ceiling.sh "http://127.0.0.1:$bare/hooks/bench" "$seconds" "$conns"; }

# One load generator run against serve ($1 = pid), with what serve spent on it: CPU per
# request, bytes written per stored event, events per commit. One JSON line.
measured() {
    local pid=$1; shift
    local before after out
    before=$(server_counters "$pid")
    out=$(send "http://127.0.0.1:$pub" "$@")
    after=$(server_counters "$pid")
    python3 - "$out" "$before" "$after" <<'PY'
import json, sys
run, a, b = (json.loads(x) for x in sys.argv[1:])
d = {k: b[k] - a[k] for k in a}
requests = run["acked"] + run["non_2xx"] + run["errors"]
run["server_cpu_us"] = d["cpu_s"] * 1e6 / max(requests, 1)
run["kib_per_event"] = d["write_bytes"] / 1024 / d["events"] if d["events"] else 0
run["per_commit"] = d["events"] / d["commits"] if d["commits"] else 0
print(json.dumps(run))
PY
}
server_counters() { # CPU seconds, bytes written, events and commits of the writer so far
    python3 - "$1" "$admin" <<'PY'
import json, os, sys, urllib.request
pid, admin = sys.argv[1], sys.argv[2]
stat = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
cpu = (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
io = dict(l.split(": ") for l in open(f"/proc/{pid}/io").read().splitlines())
m = {}
for line in urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics").read().decode().splitlines():
    if line.startswith("hookinbox_writer_batch_size_"):
        name, value = line.split()
        m[name] = float(value)
print(json.dumps({"cpu_s": cpu, "write_bytes": int(io["write_bytes"]),
                  "events": m["hookinbox_writer_batch_size_sum"],
                  "commits": m["hookinbox_writer_batch_size_count"]}))
PY
}

config "$work/plain.toml" "$work/plain.db" ""
# A second server whose source has one target, paused, as every source an operator
# forwards from: each event also gets its delivery row (the target is never sent to). An
# inbox of its own, so that the rows above measure one source's index as before.
pub_t=$(free_port); admin_t=$(free_port)
pub=$pub_t admin=$admin_t config "$work/target.toml" "$work/target.db" "[[sources.targets]]
name = \"app\"
url = \"http://127.0.0.1:$bare/app\""

# A third whose target is up, with the default concurrency: it forwards to the bare server
# while it receives.
pub_l=$(free_port); admin_l=$(free_port)
pub=$pub_l admin=$admin_l config "$work/live.toml" "$work/live.db" "[[sources.targets]]
name = \"app\"
url = \"http://127.0.0.1:$bare/app\""

"$bin/hookinbox-loadgen" bare --listen "127.0.0.1:$bare" 2>/dev/null & pids+=($!)
"$bin/hookinbox" serve --config "$work/plain.toml" 2>"$work/serve.log" & serve=$!; pids+=("$serve")
"$bin/hookinbox" serve --config "$work/target.toml" 2>"$work/target.log" & serve_t=$!; pids+=("$serve_t")
"$bin/hookinbox" serve --config "$work/live.toml" 2>"$work/live.log" & serve_l=$!; pids+=("$serve_l")
wait_port "$bare"
wait_port "$pub"
wait_port "$pub_t"
wait_port "$pub_l"
"$bin/hookinbox" pause bench/app --config "$work/target.toml" >/dev/null
# An inbox's deliveries so far ($1 = its name): accepted, and all of them.
delivered() { sqlite3 "$work/$1.db" "SELECT count(*) FILTER (WHERE state = 'delivered'), count(*) FROM deliveries" | tr '|' ' '; }
# Waits until every delivery of inbox $1 is accepted (at most 300 s); prints how long it took.
drain() {
    local started d
    started=$(date +%s.%N)
    while read -r -a d < <(delivered "$1") && [ "${d[0]}" -lt "${d[1]}" ]; do
        sleep 0.2
        if (( $(date +%s) - ${started%.*} > 300 )); then echo "the backlog of $1 did not drain" >&2; break; fi
    done
    echo "$(date +%s.%N) - $started" | bc -l
}
# One load generator run against serve ($1 = pid) whose inbox ($2) has a live target, with
# the deliveries accepted during it (per second) and the backlog left at its end; then the
# backlog drains, so that forwarding does not take the cores from what is measured next,
# and how long that took is recorded too. Flags for the load generator after.
measured_live() {
    local pid=$1 inbox=$2 d0 d1 out drained; shift 2
    read -r d0 _ < <(delivered "$inbox")
    out=$(measured "$pid" "$@")
    read -r -a d1 < <(delivered "$inbox")
    drained=$(drain "$inbox")
    python3 - "$out" "$d0" "${d1[0]}" "${d1[1]}" "$seconds" "$drained" <<'PY'
import json, sys
run = json.loads(sys.argv[1])
d0, d1, total, seconds, drained = (float(x) for x in sys.argv[2:])
run["forwarded_per_second"] = (d1 - d0) / seconds
run["backlog"] = total - d1
run["drained_s"] = drained
print(json.dumps(run))
PY
}
for round in $(seq "$rounds"); do
    echo "round $round of $rounds" >&2
    ceiling >>"$work/wrk.jsonl"
    send "http://127.0.0.1:$bare" --threads "$cores" >>"$work/loadgen.jsonl"
    send "http://127.0.0.1:$bare" >>"$work/loadgen1.jsonl"
    measured "$serve" --ids ordered >>"$work/ordered.jsonl"
    measured "$serve" --ids random >>"$work/random.jsonl"
    pub=$pub_t admin=$admin_t measured "$serve_t" --ids ordered >>"$work/target.jsonl"
    pub=$pub_l admin=$admin_l measured_live "$serve_l" live --ids ordered >>"$work/live.jsonl"
    measured "$serve" --ids duplicate >>"$work/duplicate.jsonl"
done
rss_recv=$(awk '/VmHWM/ {print $2}' "/proc/$serve/status")
kill -TERM "$serve" "$serve_t" "$serve_l"; wait "$serve" || true; wait "$serve_t" || true; wait "$serve_l" || true
stored=0
for db in plain target live; do stored=$((stored + $(sqlite3 "$work/$db.db" "SELECT count(*) FROM events"))); done
ceiling=$(python3 -c 'import json, statistics, sys
print(statistics.median(json.loads(l)["per_second"] for l in open(sys.argv[1])))' "$work/wrk.jsonl")

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

# Forwarding: events stored while the target is paused (so no attempt fails into a retry),
# then it resumes with the sink up. Sets forward (deliveries/s, first to last acceptance as
# the inbox recorded them), forward_cpu (server µs per delivery), rss_fwd and queued.
forwarding() { # $1 = name, $2 = lines of the source before its target (e.g. its order)
    config "$work/$1.toml" "$work/$1.db" "$2
[[sources.targets]]
name = \"sink\"
url = \"http://127.0.0.1:$bare/sink\"
concurrency = 32"
    "$bin/hookinbox" serve --config "$work/$1.toml" 2>"$work/$1.log" & fwd=$!; pids+=("$fwd")
    wait_port "$pub"
    "$bin/hookinbox" pause bench/sink --config "$work/$1.toml" >/dev/null
    send "http://127.0.0.1:$pub" >/dev/null
    queued=$(sqlite3 "$work/$1.db" "SELECT count(*) FROM events")
    local cpu_before cpu_after
    cpu_before=$(awk '{print $14 + $15}' "/proc/$fwd/stat")
    "$bin/hookinbox" resume bench/sink --config "$work/$1.toml" >/dev/null
    drain "$1" >/dev/null
    cpu_after=$(awk '{print $14 + $15}' "/proc/$fwd/stat")
    forward=$(sqlite3 "$work/$1.db" "SELECT count(*) / ((julianday(max(updated_at)) - julianday(min(updated_at))) * 86400.0)
                                      FROM deliveries WHERE state = 'delivered'")
    forward_cpu=$(python3 -c "import os, sys; print(f'{(int(sys.argv[2]) - int(sys.argv[1])) / os.sysconf(\"SC_CLK_TCK\") * 1e6 / int(sys.argv[3]):.1f}')" \
        "$cpu_before" "$cpu_after" "$queued")
    rss_fwd=$(awk '/VmHWM/ {print $2}' "/proc/$fwd/status")
    kill -TERM "$fwd"; wait "$fwd" || true
}
# A source with ordering, every event its own key: the ordering rule's own cost (each claim
# checks each row's key), which once grew with the backlog.
forwarding fwd_ordered 'order = { key = "/id", version = "/event_id" }'
ordered_row=$(printf '| forward, source with ordering | %.0f | %.2f | | | %s | | |' "$forward" "$(echo "$forward / $ceiling" | bc -l)" "$forward_cpu")
ordered_queued=$queued
forwarding fwd ''

# Sustained: events offered at a steady rate (the load generator's --rate) to a source whose
# target is up, with the default concurrency (4) and with 32: whether forwarding keeps up
# (the backlog at the end of each run) and what it accepted meanwhile. Each attempt waits
# for the commit of its claim, so at a given concurrency a fast target is limited by the
# writer's round trip, not by its own speed.
sustained() { # $1 = the target's concurrency
    local pid offered
    config "$work/steady$1.toml" "$work/steady$1.db" "[[sources.targets]]
name = \"sink\"
url = \"http://127.0.0.1:$bare/sink\"
concurrency = $1"
    "$bin/hookinbox" serve --config "$work/steady$1.toml" 2>"$work/steady$1.log" & pid=$!; pids+=("$pid")
    wait_port "$pub"
    for offered in 2000 5000 10000; do
        measured_live "$pid" "steady$1" --ids ordered --rate "$offered" \
            | python3 -c 'import json, sys; r = json.load(sys.stdin); r.update(concurrency=int(sys.argv[1]), offered=int(sys.argv[2])); print(json.dumps(r))' "$1" "$offered" \
            >>"$work/steady.jsonl"
    done
    kill -TERM "$pid"; wait "$pid" || true
}
echo "sustained forwarding" >&2
sustained 4
sustained 32

printf '\n%s rounds of %s s, %s connections; events/s and p50 are medians, p99 the worst round. A ratio\n' "$rounds" "$seconds" "$conns"
printf 'is the median of the rounds'"'"' ratios, each run against the wrk ceiling of its own round, range in\n'
printf 'brackets; forward and peer run once, against the median ceiling. CPU is per request, bytes\n'
printf 'per stored event.\n\n'
printf '| run | events/s | ratio to wrk | p50 ms | p99 ms | CPU µs | KiB written | per commit |\n'
printf '|---|---:|---:|---:|---:|---:|---:|---:|\n'
python3 - "$work" <<'PY'
import json, statistics, sys
def load(name):
    return [json.loads(l) for l in open(f"{sys.argv[1]}/{name}.jsonl")]
ceiling = load("wrk")
cores = ceiling[0]["threads"]
rows = [(f"ceiling: wrk -t{cores}, bare hyper", "wrk"),
        (f"ceiling: hookinbox-loadgen --threads {cores}, bare hyper", "loadgen"),
        ("hookinbox-loadgen --threads 1 (as below), bare hyper", "loadgen1"),
        ("unique, ordered ids", "ordered"), ("unique, random ids", "random"),
        ("unique, ordered ids, one target (paused)", "target"),
        ("unique, ordered ids, one target forwarding", "live"), ("duplicate", "duplicate")]
for label, name in rows:
    runs = load(name)
    ratios = [r["per_second"] / c["per_second"] for r, c in zip(runs, ceiling)]
    med = lambda k: statistics.median(r[k] for r in runs)
    cpu = f"{med('server_cpu_us'):.1f}" if "server_cpu_us" in runs[0] else (
        f"{med('cpu_us_per_request'):.1f} (its own)" if "cpu_us_per_request" in runs[0] else "")
    kib = f"{med('kib_per_event'):.2f}" if name in ("ordered", "random", "target", "live") else ""
    per = f"{med('per_commit'):.1f}" if name in ("ordered", "random", "target", "live") else ""
    print(f"| {label} | {med('per_second'):.0f} "
          f"| {statistics.median(ratios):.2f} [{min(ratios):.2f}–{max(ratios):.2f}] "
          f"| {med('p50_ms'):.2f} | {max(r['p99_ms'] for r in runs):.2f} | {cpu} | {kib} | {per} |")
live = load("live")
backlogs = ", ".join(str(int(r["backlog"])) for r in live)
drains = ", ".join(f"{r['drained_s']:.1f}" for r in live)
print(f"\n(forwarding while receiving: {statistics.median(r['forwarded_per_second'] for r in live):.0f}"
      f" deliveries/s accepted, median of the rounds; backlog at the end of each round:"
      f" {backlogs}; drained after it in {drains} s)\n")
PY
printf '| forward to a local sink | %.0f | %.2f | | | %s | | |\n' "$forward" "$(echo "$forward / $ceiling" | bc -l)" "$forward_cpu"
printf '%s\n' "$ordered_row"
if [ -n "$peer" ]; then
    r=$(field "$peer" per_second)
    printf '| %s | %s | %.2f | %s | %s | | | |\n' "$peer_label" "$r" "$(echo "$r / $ceiling" | bc -l)" "$(field "$peer" p50_ms)" "$(field "$peer" p99_ms)"
fi
printf '\nSustained: a source whose target is up, offered a steady rate for %s s each.\n\n' "$seconds"
printf '| target concurrency | offered events/s | stored/s | forwarded/s | backlog at the end | drained in s | p99 ms | non-2xx |\n'
printf '|---:|---:|---:|---:|---:|---:|---:|---:|\n'
python3 - "$work/steady.jsonl" <<'PY'
import json, sys
for r in map(json.loads, open(sys.argv[1])):
    print(f"| {r['concurrency']} | {r['offered']} | {r['per_second']:.0f} | {r['forwarded_per_second']:.0f} "
          f"| {int(r['backlog'])} | {r['drained_s']:.1f} | {r['p99_ms']:.2f} | {r['non_2xx'] + r['errors']} |")
PY
printf '\npeak RSS: %s KiB receiving, %s KiB forwarding; %s events stored in the rounds; %s forwarded (%s with ordering)\n' \
    "$rss_recv" "$rss_fwd" "$stored" "$queued" "$ordered_queued"
totals() { # non-2xx/errors summed over a .jsonl file's runs
    python3 -c 'import json, sys; runs = [json.loads(l) for l in open(sys.argv[1])]
print("/".join(str(sum(r[k] for r in runs)) for k in ("non_2xx", "errors")))' "$1"
}
printf 'non-2xx / errors over all rounds: wrk %s, loadgen %s and %s, ordered %s, random %s, one target %s, live %s, duplicate %s\n' \
    "$(totals "$work/wrk.jsonl")" "$(totals "$work/loadgen.jsonl")" "$(totals "$work/loadgen1.jsonl")" "$(totals "$work/ordered.jsonl")" \
    "$(totals "$work/random.jsonl")" "$(totals "$work/target.jsonl")" "$(totals "$work/live.jsonl")" \
    "$(totals "$work/duplicate.jsonl")"
if [ -n "$peer" ]; then
    printf 'peer: non-2xx / errors %s/%s, peak RSS %s KiB (webhook alone, not its /bin/true children); %s\n' \
        "$(field "$peer" non_2xx)" "$(field "$peer" errors)" "$rss_peer" "$peer_note"
else
    printf '%s\n' "$peer_note"
fi
