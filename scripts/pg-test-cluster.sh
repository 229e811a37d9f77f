#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the tests: created (initdb) and started (pg_ctl) under
# target/pg-test on first use, reused while it runs, and left running for the next test run
# (`scripts/pg-test-cluster.sh stop` stops it). Prints its URL, for a superuser that the
# tests use to create a database of their own each. Trust authentication, on 127.0.0.1 and
# a socket in the data directory only: it is for tests, never for data.
#
# As root (CI), the server runs as the `postgres` user that Debian's package creates:
# PostgreSQL refuses to run as root.
set -euo pipefail
cd "$(dirname "$0")/.."

bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
if [ -z "$bindir" ] || [ ! -x "$bindir/initdb" ]; then
    echo "pg-test-cluster: no PostgreSQL server here (Debian: apt-get install postgresql)" >&2
    exit 2
fi
dir=$PWD/target/pg-test
data=$dir/data
user=hookinbox_test
as_owner=()
if [ "$(id -u)" = 0 ]; then
    as_owner=(runuser -u postgres --)
fi

if [ "${1:-}" = stop ]; then
    [ -d "$data" ] && "${as_owner[@]}" "$bindir/pg_ctl" -D "$data" -m fast stop >/dev/null 2>&1 || true
    exit 0
fi

if [ ! -f "$data/PG_VERSION" ]; then
    rm -rf "$dir"
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown postgres: "$dir"
    "${as_owner[@]}" "$bindir/initdb" -D "$data" -U "$user" --auth=trust -E UTF8 \
        --no-instructions >"$dir/initdb.log" 2>&1 || {
        cat "$dir/initdb.log" >&2
        exit 1
    }
    # A free port, chosen once and kept with the cluster.
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' \
        > "$dir/port"
    [ "$(id -u)" = 0 ] && chown postgres: "$dir/port"
fi
port=$(cat "$dir/port")
if ! "${as_owner[@]}" "$bindir/pg_ctl" -D "$data" status >/dev/null 2>&1; then
    "${as_owner[@]}" "$bindir/pg_ctl" -D "$data" -w -l "$dir/server.log" \
        -o "-p $port -c listen_addresses=127.0.0.1 -k $data -c fsync=on -c max_connections=200" \
        start >/dev/null || {
        cat "$dir/server.log" >&2
        exit 1
    }
fi
echo "postgres://$user@127.0.0.1:$port/postgres"
