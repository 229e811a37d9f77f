#!/usr/bin/env bash
# What an attacker's connections cost hookinbox, and what a provider's signed request meets
# meanwhile. Prints numbers, asserts nothing.
#
#   bench/attack.sh               # every attack below
#   ATTACK_SECONDS=20 bench/attack.sh
#   ATTACK_SERVE=/path/to/an/older/hookinbox bench/attack.sh   # the same attacks on another build
#   ATTACKS="trickle rounds" bench/attack.sh                    # only these (names below)
#
# bodies  1000 unauthenticated connections each send all but the last byte of a 1 MiB
#         body (max_body = 1MiB), with the default body_budget (64 MiB) and, for
#         comparison in the same run, with a budget too large to matter (4 GiB): peak RSS
#         of serve, and what signed probe requests (one every 0.5 s) got.
# slow    2048 connections (2 x the default max_connections) trickle request heads one
#         header a second: how long a signed probe from a new connection waits.
# trickle 2 x max_connections connections (at the default 1024, and at 64) each send a
#         whole head declaring a 60,000-byte body, then a byte every 2 s, reconnecting
#         when closed: what the probes got, and how many trickling connections the
#         server closed.
# rounds  ten rounds of the bodies attack (ROUND_SECONDS each, 3 by default) on one serve:
#         its resident memory (VmRSS) once each round's connections are gone (the budget
#         reads 0 on /metrics and serve holds no more sockets than before), and a second
#         more for the allocator to give pages back. An attacker that exits with its bytes
#         unread leaves some of the server's sockets open for seconds (its resets fall
#         outside a full receive window), holding the budget's 64 MiB meanwhile.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${ATTACK_SECONDS:-10}
cargo build --release --locked --features loadgen >&2
bin=$PWD/target/release
serve_bin=${ATTACK_SERVE:-$bin/hookinbox}
work=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
# 1000-2048 attackers and as many accepted sockets, in one machine.
ulimit -n 16384

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done; echo "port $1 never opened" >&2; return 1; }
peak_mib() { awk '/VmHWM/ {printf "%.0f", $2 / 1024}' "/proc/$1/status"; }
rss_mib() { awk '/VmRSS/ {printf "%.0f", $2 / 1024}' "/proc/$1/status"; }

start() { # $1 = body_budget, $2 = max_connections; sets pid, pub and admin
    pub=$(free_port); admin=$(free_port)
    rm -f "$work"/inbox.db*
    cat >"$work/hookinbox.toml" <<TOML
[server]
listen = "127.0.0.1:$pub"
max_body = "1MiB"
body_budget = "$1"
max_connections = $2
[admin]
listen = "127.0.0.1:$admin"
[store]
path = "$work/inbox.db"
[[sources]]
name = "bench"
scheme = "standard-webhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
TOML
    RUST_LOG=error "$serve_bin" serve --config "$work/hookinbox.toml" 2>"$work/serve.log" &
    pid=$!
    wait_port "$pub"
}

stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=; }

attack() { # $1 = kind, $2 = connections, $3 = duration
    "$bin/hookinbox-loadgen" attack --config "$work/hookinbox.toml" --source bench \
        --addr "127.0.0.1:$pub" --kind "$1" --connections "$2" --duration "$3"
}

run() { # $1 = label, $2 = body_budget, $3 = kind, $4 = connections, $5 = max_connections
    start "$2" "${5:-1024}"
    local start_mib result
    start_mib=$(peak_mib "$pid")
    result=$(attack "$3" "$4" "${seconds}s")
    printf '%-42s peak RSS %4s MiB (%s at start)  probes: %s\n' "$1" "$(peak_mib "$pid")" "$start_mib" "$result"
    stop
}

fds() { find "/proc/$1/fd" -mindepth 1 | wc -l; }
budget_held() { curl -s "http://127.0.0.1:$admin/metrics" | awk '/^hookinbox_body_bytes_in_memory / {print $2}'; }

rounds() { # ten body floods on one serve; VmRSS after each, once its connections are gone
    start 64MiB 1024
    local after=() waited=() i t idle_fds
    idle_fds=$(fds "$pid")
    for i in $(seq 10); do
        attack bodies 1000 "${ROUND_SECONDS:-3}s" >/dev/null
        for t in $(seq 120); do
            [ "$(budget_held)" = 0 ] && [ "$(fds "$pid")" -le "$idle_fds" ] && break
            sleep 0.25
        done
        waited+=("$(awk "BEGIN {print $t / 4}")")
        sleep 1
        after+=("$(rss_mib "$pid")")
    done
    printf '%-42s VmRSS after each round (MiB): %s; peak %s MiB; connections gone after (s): %s\n' \
        "bodies x1000, ten rounds" "${after[*]}" "$(peak_mib "$pid")" "${waited[*]}"
    stop
}

want() { [ -z "${ATTACKS:-}" ] || [[ " $ATTACKS " == *" $1 "* ]]; }
if want bodies; then
    run "bodies x1000, body_budget 64MiB" 64MiB bodies 1000
    run "bodies x1000, body_budget 4GiB (off)" 4GiB bodies 1000
fi
if want slow; then run "slow heads x2048, max_connections 1024" 64MiB slow 2048; fi
if want trickle; then
    run "body tricklers x2048, max_connections 1024" 64MiB trickle 2048
    run "body tricklers x128, max_connections 64" 64MiB trickle 128 64
fi
if want rounds; then rounds; fi
