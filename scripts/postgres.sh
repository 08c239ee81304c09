#!/usr/bin/env bash
# scripts/postgres.sh - a throwaway PostgreSQL for Ordercast's tests, on loopback only.
#
#   scripts/postgres.sh start     initdb (trust auth, superuser postgres) in the state dir and start
#                                 the server; prints ORDERCAST_TEST_POSTGRES=postgres://...
#                                 Idempotent: a running server is left as it is.
#   scripts/postgres.sh stop      stop the server and delete the state dir (it is throwaway)
#   scripts/postgres.sh restart   crash and restart the running server (pg_ctl restart -m immediate:
#                                 no checkpoint, WAL recovery at the start; same options), for the
#                                 crash harness (ordercast chaos)
#   scripts/postgres.sh status    exit 0 if it runs, 3 otherwise
#   scripts/postgres.sh dsn       print the DSN
#
# Durability is off (fsync, synchronous_commit, full_page_writes): tests only. For benchmark figures
# set ORDERCAST_PG_DURABLE=1: PostgreSQL's defaults then (fsync, synchronous_commit, full_page_writes on).
# track_commit_timestamp is on: the crash harness's wallet replay (chaos) orders payments by commit time.
# As root, the server runs as the user postgres (initdb refuses root).
#
# Environment:
#   ORDERCAST_PG_PORT    port (default 15432)
#   ORDERCAST_PG_STATE   data, socket and log (default ${TMPDIR:-/tmp}/ordercast-pg)
#   ORDERCAST_PG_DURABLE 1: keep PostgreSQL's default durability (for benchmarks); default: off (tests)
#   ORDERCAST_PG_OPTS    more server options, e.g. "-c shared_preload_libraries=pg_stat_statements" (profiling)
#   ORDERCAST_PG_BIN     directory of initdb/pg_ctl (default: the newest /usr/lib/postgresql/*/bin,
#                        else pg_config --bindir, else PATH)
set -euo pipefail

PORT=${ORDERCAST_PG_PORT:-15432}
STATE=${ORDERCAST_PG_STATE:-${TMPDIR:-/tmp}/ordercast-pg}
DATA="$STATE/data"
LOG="$STATE/postgres.log"
DSN="postgres://postgres@127.0.0.1:$PORT/postgres?sslmode=disable"

die() { echo "postgres.sh: error: $*" >&2; exit 1; }
log() { echo "postgres.sh: $*" >&2; }

find_bin() {
  if [[ -n "${ORDERCAST_PG_BIN:-}" ]]; then echo "$ORDERCAST_PG_BIN"; return; fi
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1 || true)
  if [[ -n "$d" && -x "$d/initdb" ]]; then echo "$d"; return; fi
  if command -v pg_config >/dev/null 2>&1; then d=$(pg_config --bindir); [[ -x "$d/initdb" ]] && { echo "$d"; return; }; fi
  d=$(dirname "$(command -v initdb 2>/dev/null || echo /nonexistent/initdb)")
  [[ -x "$d/initdb" ]] || die "initdb not found: install PostgreSQL (apt-get install postgresql) or set ORDERCAST_PG_BIN"
  echo "$d"
}

as_owner() { # run a server command as the data dir's owner (postgres when we are root)
  if [[ $(id -u) == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

running() { [[ -f "$DATA/postmaster.pid" ]] && as_owner "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

cmd_start() {
  local t0=$SECONDS
  if running; then log "already running in $STATE"; echo "ORDERCAST_TEST_POSTGRES=$DSN"; return 0; fi
  port_open "$PORT" && die "127.0.0.1:$PORT is already in use by another process (set ORDERCAST_PG_PORT)"
  mkdir -p "$STATE"
  if [[ $(id -u) == 0 ]]; then
    id postgres >/dev/null 2>&1 || die "running as root needs the user postgres (created by the postgresql package)"
    chown postgres: "$STATE"
    runuser -u postgres -- test -w "$STATE" ||
      die "the user postgres cannot reach $STATE: make its parent directories searchable (chmod o+x), or set ORDERCAST_PG_STATE"
  fi
  if [[ ! -f "$DATA/PG_VERSION" ]]; then
    rm -rf "$DATA"
    as_owner "$BIN/initdb" -D "$DATA" -U postgres -A trust -E UTF8 --locale=C --no-sync >"$STATE/initdb.log" 2>&1 ||
      { cat "$STATE/initdb.log" >&2; die "initdb failed"; }
  fi
  local durability="-c fsync=off -c synchronous_commit=off -c full_page_writes=off" what="durability off (tests)"
  if [[ "${ORDERCAST_PG_DURABLE:-}" == 1 ]]; then durability="" what="default durability (fsync, synchronous_commit on)"; fi
  if ! as_owner "$BIN/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 start \
      -o "-p $PORT -k $STATE -c listen_addresses=127.0.0.1 $durability -c max_connections=200 -c track_commit_timestamp=on ${ORDERCAST_PG_OPTS:-}" \
      >/dev/null; then
    tail -n 30 "$LOG" >&2 || true
    die "the server did not start (log $LOG)"
  fi
  log "PostgreSQL $("$BIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$PORT in $((SECONDS - t0)) s (state $STATE), $what"
  echo "ORDERCAST_TEST_POSTGRES=$DSN"
}

cmd_stop() {
  if running; then as_owner "$BIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null; log "stopped"; fi
  if [[ -d "$STATE" ]]; then
    [[ -f "$DATA/PG_VERSION" || -z "$(ls -A "$STATE")" || -f "$STATE/initdb.log" ]] ||
      die "$STATE does not look like postgres.sh's state dir; not deleting it"
    rm -rf "$STATE"
  fi
}

cmd_restart() {
  running || die "not running in $STATE"
  as_owner "$BIN/pg_ctl" -D "$DATA" -l "$LOG" -m immediate -w -t 60 restart >/dev/null ||
    { tail -n 30 "$LOG" >&2 || true; die "the server did not restart (log $LOG)"; }
}

BIN=$(find_bin)
case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  restart) cmd_restart ;;
  status) if running; then echo "running on 127.0.0.1:$PORT ($STATE)"; else echo "not running"; exit 3; fi ;;
  dsn) echo "$DSN" ;;
  *) awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0" >&2; exit 2 ;;
esac
