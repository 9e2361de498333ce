#!/usr/bin/env bash
# A throwaway PostgreSQL on loopback (127.0.0.1 and ::1) for tests and benchmarks: `start [DIR] [PORT]` prints its
# URL, `stop [DIR]` ends it (CONTRIBUTING.md). Durability is off unless PG_DURABLE=1, since tests
# need no crash safety; as root the cluster belongs to 'postgres' because initdb refuses root.
set -euo pipefail
cmd=${1:-start}
dir=${2:-/tmp/vaultgate-pg}
port=${3:-55432}

find_bin() {
  local b
  b=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  [ -n "$b" ] && echo "$b"
}

as_owner() {
  if [ "$(id -u)" = "0" ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

bin=$(find_bin || true)
if [ "$cmd" = "stop" ]; then
  [ -n "$bin" ] && [ -f "$dir/data/postmaster.pid" ] && as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >&2 || true
  exit 0
fi

if [ -z "$bin" ]; then
  echo "installing PostgreSQL from Debian's packages..." >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq postgresql >&2
  bin=$(find_bin)
fi

if [ "$(id -u)" = "0" ]; then
  mkdir -p "$dir"
  chown postgres: "$dir"
fi
if [ ! -f "$dir/data/PG_VERSION" ]; then
  as_owner "$bin/initdb" -D "$dir/data" -U vaultgate --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
fi
durability="-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
[ "${PG_DURABLE:-}" = "1" ] && durability=""
if ! as_owner "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
  as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w \
    -o "-h 127.0.0.1,::1 -p $port -k $dir -c max_connections=300 $durability" start >&2
fi
echo "postgres://vaultgate@127.0.0.1:$port/postgres"
