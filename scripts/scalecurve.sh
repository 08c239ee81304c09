#!/usr/bin/env bash
# scalecurve.sh: the order system's throughput and latency against the number of instances (consumer-group members)
# of each service group, on a 3-node Kafka 4.4 (RF 3, min.insync.replicas 2, acks=all) and durable PostgreSQL, up to
# the point where the machine saturates.
#
# usage: scripts/scalecurve.sh BIN [OUTDIR]
#   BIN     the ordercast binary under test (make build: bin/ordercast)
#   OUTDIR  where the runs go (default ./loadruns/scalecurve): one directory per run (scripts/loadrun.sh's files),
#           OUTDIR/table.md (one markdown table line per run, also printed) and OUTDIR/runs.jsonl (the summary lines)
#
# For each instance count N of SCALE_INSTANCES (default "1 2 4") and each rate of SCALE_RATES (orders/s, default
# "100 200 300 400"), in that order, one scripts/loadrun.sh run with LOADRUN_NODES=3 and
# `up --instances orders=N,payments=N,notifications=N,fulfillment=N`: a fresh 3-node Kafka and database, a warm-up
# (SCALE_WARMUP, default half the run's rate for 20 s: a warm-up above what the machine drains would leave a backlog
# that the measured minute's end-to-end latency counts), then LOADRUN_DURATION (default 60s) at the rate. Once a run is saturated (its
# invariants fail or it did not pass, it accepts under 95 % of the offered rate, its checkout p99 is over 1 s or its
# end-to-end p99 over 5 s: the consumers fall behind),
# the higher rates of that N are skipped. CPU seconds are of the measured part (after the warm-up, to the end of
# the drain; Kafka: the three brokers' sum); CPU ms/order is (up + PostgreSQL + Kafka) over the orders accepted in
# the measured part. The load client runs on the same 2 cores, as do the three brokers: the figures are of the
# whole machine's share, not of an isolated service.
# More flags for `up` (every run): SCALE_UP_FLAGS. Ports are loadrun.sh's (up's admin listener on LOADRUN_HTTP+3): ORDERCAST_KAFKA_PORT (19992, +2, +4 and
# the controllers on +1, +3, +5), ORDERCAST_PG_PORT (15482), LOADRUN_HTTP (18992, registry +1). At the end (or on
# SIGINT/SIGTERM) the Kafka of ORDERCAST_KAFKA_STATE is stopped and deleted, and PostgreSQL too if it was not running before.
set -u
[[ $# -ge 1 ]] || { sed -n '2,/^set -u/{/^#/p}' "$0"; exit 2; }
BIN=$(realpath "$1")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUTDIR=$(realpath -m "${2:-$ROOT/loadruns/scalecurve}")
mkdir -p "$OUTDIR"
export ORDERCAST_KAFKA_PORT=${ORDERCAST_KAFKA_PORT:-19992} ORDERCAST_KAFKA_STATE=${ORDERCAST_KAFKA_STATE:-/tmp/kafka-${ORDERCAST_KAFKA_PORT:-19992}}
export ORDERCAST_PG_PORT=${ORDERCAST_PG_PORT:-15482} ORDERCAST_PG_STATE=${ORDERCAST_PG_STATE:-/tmp/pg-${ORDERCAST_PG_PORT:-15482}}
# PostgreSQL stays up from run to run (loadrun.sh starts it if it is not running); stopped at the end if it was not running before
PGWAS=0; "$ROOT/scripts/postgres.sh" status >/dev/null 2>&1 && PGWAS=1
cleanup() {
  "$ROOT/scripts/kafka.sh" stop --clean >/dev/null 2>&1
  [[ $PGWAS == 1 ]] || "$ROOT/scripts/postgres.sh" stop >/dev/null 2>&1
}
trap cleanup EXIT
trap 'exit 130' INT TERM
export LOADRUN_NODES=3 LOADRUN_OUT=$OUTDIR LOADRUN_DURATION=${LOADRUN_DURATION:-60s}
read -r -a EXTRA <<< "${SCALE_UP_FLAGS:-}"
TABLE=$OUTDIR/table.md
{
  echo "<!-- $(date -u +%FT%TZ) $("$BIN" version 2>/dev/null | head -1) warm-up ${SCALE_WARMUP:-half the rate for 20s}, measured $LOADRUN_DURATION; 3 Kafka nodes (RF 3, min ISR 2), durable PostgreSQL; $(nproc) cores -->"
  echo "| instances | offered/s | accepted/s | checkout p50 ms | checkout p99 ms | e2e p99 ms | up CPU s | PG CPU s | Kafka CPU s | CPU ms/order | load average (before -> after) | status |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
} > "$TABLE"
cat "$TABLE"
for n in ${SCALE_INSTANCES:-1 2 4}; do
  for rate in ${SCALE_RATES:-100 200 300 400}; do
    export LOADRUN_WARMUP=${SCALE_WARMUP:-$(( rate / 2 )):20s}
    name=i${n}-r${rate}
    out=$("$ROOT/scripts/loadrun.sh" "$name" "$BIN" "$rate" \
      --instances "orders=$n,payments=$n,notifications=$n,fulfillment=$n" "${EXTRA[@]}" 2>&1)
    echo "$out" > "$OUTDIR/$name.out"
    summary=$OUTDIR/$name/summary.json
    if [[ ! -s $summary ]]; then
      # loadrun.sh failed before its summary (Kafka or up did not start): no figures, and no higher rate for this N
      echo "| $n | $rate | - | - | - | - | - | - | - | - | - | no summary: $(echo "$out" | tail -1 | tr '|' '/') |" | tee -a "$TABLE"
      break
    fi
    cat "$summary" >> "$OUTDIR/runs.jsonl"; echo >> "$OUTDIR/runs.jsonl"
    line=$(python3 - "$summary" "$OUTDIR/$name/run.json" "$n" "$rate" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); r = json.load(open(sys.argv[2])); n, rate = int(sys.argv[3]), float(sys.argv[4])
c, e, m = r['checkoutLatencyMs'], r['endToEndLatencyMs'], s['measured_cpu_s']
why = []
if s['status'] != 'passed':
    why.append(f"{s['status']}: {r.get('reason', '')[:120]}".replace('|', '/'))
if not s['invariants_hold']:
    why.append('invariants violated')
if s['accepted_s'] < 0.95 * rate:
    why.append(f"accepted {s['accepted_s'] / rate:.0%} of offered")
if c['p99'] > 1000:
    why.append('checkout p99 > 1 s')
if e['p99'] > 5000:
    why.append('end-to-end p99 > 5 s')
cpu_ms = (m['up'] + m['pg'] + m['kafka']) * 1000 / max(1, s['accepted'])
status = 'ok' if not why else 'saturated: ' + '; '.join(why)
print(f"| {n} | {rate:g} | {s['accepted_s']} | {c['p50']:.1f} | {c['p99']:.1f} | {e['p99']:.0f} | {m['up']} | {m['pg']} | {m['kafka']} "
      f"| {cpu_ms:.2f} | {s['load']} | {status} |")
sys.exit(3 if why else 0)
PY
    )
    rc=$?
    [[ $rc == 0 || $rc == 3 ]] || line="| $n | $rate | - | - | - | - | - | - | - | - | - | summary unreadable (see $name/summary.json) |"
    echo "$line" | tee -a "$TABLE"
    [[ $rc == 0 ]] || break
  done
done
