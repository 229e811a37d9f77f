#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the tests: created (initdb) and started (pg_ctl) in
# /tmp (one per checkout) on first use, reused while it runs, and left running for the next
# test run (`scripts/pg-test-cluster.sh stop` stops it). Prints its URL, for a superuser that the
# tests use to create a database of their own each. Trust authentication on 127.0.0.1 and
# no socket: it is for tests, never for data.
#
# HOOKINBOX_PG_CLUSTER=NAME makes (and stops) a cluster of that name instead: for a test that
# stops its server under load, without stopping everyone else's. `stop-all` stops every
# cluster of this checkout.
#
# As root (CI), the server runs as the `postgres` user that Debian's package creates:
# PostgreSQL refuses to run as root. Hence /tmp rather than the checkout: that user must be
# able to reach the directory, and a checkout may sit under a private one.
set -euo pipefail
cd "$(dirname "$0")/.."

base=${TMPDIR:-/tmp}/hookinbox-pg-test-$(id -u)-$(printf %s "$PWD" | cksum | cut -d' ' -f1)
if [ "${1:-}" = stop-all ]; then
    for d in "$base" "$base"-*; do
        [ -d "$d" ] && HOOKINBOX_PG_CLUSTER_DIR=$d "$0" stop
    done
    exit 0
fi
name=${HOOKINBOX_PG_CLUSTER:-}
if [ -n "$name" ] && ! [[ $name =~ ^[a-z0-9_]+$ ]]; then
    echo "pg-test-cluster: HOOKINBOX_PG_CLUSTER must be lowercase letters, digits and _" >&2
    exit 2
fi
dir=${HOOKINBOX_PG_CLUSTER_DIR:-$base${name:+-$name}}
data=$dir/data
user=hookinbox_test
as_owner=()
if [ "$(id -u)" = 0 ]; then
    as_owner=(runuser -u postgres --)
fi
mkdir -p "$dir"
chmod 755 "$dir"
[ "$(id -u)" = 0 ] && chown postgres: "$dir"
# The server's tools run from a directory their user can enter.
cd "$dir"
# One caller at a time (test processes run side by side under some runners).
exec 9>"$dir/lock"
flock 9

# The server that made the cluster starts it: after an upgrade the newest one would not.
bindir_for() {
    ls -d /usr/lib/postgresql/"$1"/bin 2>/dev/null
}
if [ -f "$data/PG_VERSION" ]; then
    bindir=$(bindir_for "$(cat "$data/PG_VERSION")") || bindir=
else
    bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1) || bindir=
fi

if [ "${1:-}" = stop ]; then
    if [ -n "$bindir" ] && [ -f "$data/PG_VERSION" ]; then
        "${as_owner[@]}" "$bindir/pg_ctl" -D "$data" -m fast stop >/dev/null 2>&1 || true
    fi
    exit 0
fi
if [ -z "$bindir" ] || [ ! -x "$bindir/initdb" ]; then
    echo "pg-test-cluster: no PostgreSQL server here (Debian: apt-get install postgresql)" >&2
    exit 2
fi

if [ ! -f "$data/PG_VERSION" ] || [ ! -s "$dir/port" ]; then
    rm -rf "$data" "$dir/port"
    "${as_owner[@]}" "$bindir/initdb" -D "$data" -U "$user" --auth=trust -E UTF8 \
        --no-instructions >"$dir/initdb.log" 2>&1 || {
        cat "$dir/initdb.log" >&2
        exit 1
    }
fi

running() {
    "${as_owner[@]}" "$bindir/pg_ctl" -D "$data" status >/dev/null 2>&1
}
# A port kept with the cluster; another one when it is taken (after a reboot, say).
tries=0
while ! running; do
    if [ ! -s "$dir/port" ] || [ "$tries" -gt 0 ]; then
        echo $((20000 + RANDOM % 40000)) >"$dir/port.new"
        mv "$dir/port.new" "$dir/port"
    fi
    port=$(cat "$dir/port")
    if "${as_owner[@]}" "$bindir/pg_ctl" -D "$data" -w -l "$dir/server.log" \
        -o "-p $port -c listen_addresses=127.0.0.1 -c unix_socket_directories= -c max_connections=200" \
        start >/dev/null 9>&-; then
        # (9>&-: the server must not inherit the lock, or it would hold it for ever.)
        break
    fi
    tries=$((tries + 1))
    if [ "$tries" -ge 5 ]; then
        cat "$dir/server.log" >&2
        exit 1
    fi
done
echo "postgres://$user@127.0.0.1:$(cat "$dir/port")/postgres"
