#!/usr/bin/env bash
# loadrun.sh: one measured load run of the order system on Kafka 4.4 (1 node) and PostgreSQL with their default
# durability (fsync, synchronous_commit on; acks=all), as docs/benchmarks.md reports them.
#
# usage: scripts/loadrun.sh NAME BIN RATE [extra 'ordercast up' flags...]
#   NAME  the run's name: its results go to $LOADRUN_OUT/NAME (default ./loadruns/NAME)
#   BIN   the ordercast binary under test (make build: bin/ordercast, or go -C cmd build -o BIN ./ordercast); `load` runs from LOADRUN_CLIENT (default BIN)
#   RATE  orders per second of the measured 60 s (LOADRUN_DURATION), after a 10 s warm-up at 200/s
#         (LOADRUN_WARMUP=RATE:DURATION sets another, such as 800:60s to warm a fresh broker's JIT first)
#
# Per run: a fresh Kafka (scripts/kafka.sh start --clean --brokers 1) and a fresh database on the PostgreSQL of
# scripts/postgres.sh (started here, durable, if it is not running); `up` with its default flags plus the extra ones;
# CPU is counted from the moment `up` is ready (its start, the broker's JVM start and JIT and the seeding are
# start_cpu_s, apart) to the end of the drain; then the summary line (status, accepted/s, checkout and end-to-end latency, CPU seconds of `up` and of PostgreSQL,
# CPU ms per order, Kafka's and the measured load client's CPU seconds, load average) on stdout and in NAME/summary.json, and /metrics in NAME/run.metrics.
# measured_cpu_s: the same CPU counted from the end of the warm-up (the measured minute and the drain only).
# cpu_ms_order is (up_cpu_s + pg_cpu_s) per order of the whole run, warm-up included, Kafka apart; the system's
# CPU per order of docs/benchmarks.md is the sum of measured_cpu_s (up, PostgreSQL and Kafka) over the measured orders.
# Ports: ORDERCAST_KAFKA_PORT (19992), ORDERCAST_PG_PORT (15482), LOADRUN_HTTP (18992; the registry on +1, up's admin
# listener on +3, the checkout process's on +4: /metrics goes to NAME/run.metrics, and up's to NAME/up.metrics with
# LOADRUN_CHECKOUT=process).
# With LOADRUN_CPUPROFILE=1, up's CPU profile goes to NAME/up.pprof.
# With LOADRUN_CHECKOUT=process, checkout runs as a process of its own (`ordercast run checkout`, HTTP on
# LOADRUN_HTTP+2, up's registry and dev signing key), as it is deployed, and the load goes to it; up's own checkout
# is idle; up_cpu_s then counts both processes, checkout_cpu_s the checkout process alone.
# LOADRUN_NODES=3 (default 1): a 3-node Kafka instead (kafka.sh start --brokers 3; clients on ORDERCAST_KAFKA_PORT,
# +2, +4, controllers on the next ports), `up` given all three addresses and --replication-factor 3
# --min-insync-replicas 2 (before the extra flags); kafka_cpu_s, start_cpu_s.kafka and measured_cpu_s.kafka are
# then the sum over the three broker processes, and the summary line has kafka_nodes=3.
set -u
[[ $# -ge 3 ]] || { sed -n '2,/^set -u/{/^#/p}' "$0"; exit 2; }
NAME=$1 BIN=$(realpath "$2") RATE=$3; shift 3
NODES=${LOADRUN_NODES:-1}
[[ $NODES == 1 || $NODES == 3 ]] || { echo "loadrun: LOADRUN_NODES=$NODES: 1 or 3"; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
export ORDERCAST_KAFKA_PORT=${ORDERCAST_KAFKA_PORT:-19992} ORDERCAST_KAFKA_STATE=${ORDERCAST_KAFKA_STATE:-/tmp/kafka-${ORDERCAST_KAFKA_PORT:-19992}}
export ORDERCAST_KAFKA_START_TIMEOUT=${ORDERCAST_KAFKA_START_TIMEOUT:-400}
export ORDERCAST_PG_PORT=${ORDERCAST_PG_PORT:-15482} ORDERCAST_PG_STATE=${ORDERCAST_PG_STATE:-/tmp/pg-${ORDERCAST_PG_PORT:-15482}} ORDERCAST_PG_DURABLE=1
HTTP=${LOADRUN_HTTP:-18992} REG=$(( ${LOADRUN_HTTP:-18992} + 1 ))
DURATION=${LOADRUN_DURATION:-60s}
ADMIN=127.0.0.1:$(( HTTP + 3 )) CKADMIN=127.0.0.1:$(( HTTP + 4 )) # admin listeners (/metrics): up's, the checkout process's
LOADBIN=${LOADRUN_CLIENT:-$BIN}
OUTROOT=${LOADRUN_OUT:-$ROOT/loadruns}
OUT=$OUTROOT/$NAME DATA=$OUTROOT/$NAME.data
rm -rf "$OUT" "$DATA"; mkdir -p "$OUT"
PGSTATE=$ORDERCAST_PG_STATE
scripts/postgres.sh status >/dev/null || scripts/postgres.sh start >/dev/null || { echo "loadrun: PostgreSQL did not start"; exit 1; }
scripts/kafka.sh stop --clean >/dev/null 2>&1
scripts/kafka.sh start --clean --brokers "$NODES" > "$OUT/kafka.log" 2>&1 || { echo "loadrun: Kafka did not start (see $OUT/kafka.log)"; scripts/kafka.sh stop --clean >/dev/null 2>&1; exit 1; }
BROKERS=127.0.0.1:$ORDERCAST_KAFKA_PORT REPL=()
[[ $NODES == 3 ]] && BROKERS=$(scripts/kafka.sh brokers) REPL=(--replication-factor 3 --min-insync-replicas 2)
DB=oc_$(echo "$NAME" | tr -c 'a-z0-9\n' '_')
psql -h 127.0.0.1 -p "$ORDERCAST_PG_PORT" -U postgres -qc "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB" >/dev/null 2>&1
DSN="postgres://postgres@127.0.0.1:$ORDERCAST_PG_PORT/$DB?sslmode=disable"
. scripts/cpu.sh
PG0=$(pgcpu)
KPIDS=$(for i in $(seq 1 "$NODES"); do scripts/kafka.sh pid "$i"; done)
kcpu() { local t=0 p; for p in $KPIDS; do t=$((t + $(proccpu "$p"))); done; echo "$t"; } # every broker process
PROF=()
[[ ${LOADRUN_CPUPROFILE:-} == 1 ]] && PROF=(env ORDERCAST_CPUPROFILE="$OUT/up.pprof")
UP=
for try in 1 2 3; do
  "${PROF[@]}" "$BIN" up --data-dir "$DATA" --brokers "$BROKERS" --db "$DSN" --broker-addr 127.0.0.1:0 \
    --http "127.0.0.1:$HTTP" --registry-addr "127.0.0.1:$REG" --admin-http "$ADMIN" "${REPL[@]}" "$@" > "$OUT/up.log" 2>&1 &
  UP=$!
  for _ in $(seq 1 120); do curl -sf "http://127.0.0.1:$HTTP/readyz" >/dev/null && break; kill -0 $UP 2>/dev/null || break; sleep 1; done
  curl -sf "http://127.0.0.1:$HTTP/readyz" >/dev/null && break
  echo "loadrun: up did not become ready (try $try, $OUT/up.try$try.log)"; kill -TERM $UP 2>/dev/null; wait $UP; cp "$OUT/up.log" "$OUT/up.try$try.log"; sleep 5
done
CK= CKURL="http://127.0.0.1:$HTTP"
if [[ ${LOADRUN_CHECKOUT:-} == process ]]; then
  CKHTTP=$(( HTTP + 2 ))
  "$BIN" run checkout --brokers "$BROKERS" --db "$DSN" --registry "http://127.0.0.1:$REG" --http "127.0.0.1:$CKHTTP" --admin-http "$CKADMIN" \
    --auth-dev-key "$DATA/auth/dev-signing-key.pem" > "$OUT/checkout.log" 2>&1 &
  CK=$!
  for _ in $(seq 1 60); do curl -sf "http://127.0.0.1:$CKHTTP/readyz" >/dev/null && break; kill -0 $CK 2>/dev/null || break; sleep 1; done
  curl -sf "http://127.0.0.1:$CKHTTP/readyz" >/dev/null || { echo "loadrun: the checkout process did not become ready (see $OUT/checkout.log)"; kill -TERM $UP $CK; wait; scripts/kafka.sh stop --clean >/dev/null 2>&1; exit 1; }
  CKURL="http://127.0.0.1:$CKHTTP"
fi
ckcpu() { if [[ -n $CK ]]; then awk '{print $14+$15}' "/proc/$CK/stat"; else echo 0; fi; }
uptime > "$OUT/uptime.before"
# CPU so far (start, topic creation, seeding, the JVM's start and JIT): subtracted, so the figures are the load's
UP0=$(( $(awk '{print $14+$15}' "/proc/$UP/stat") + $(ckcpu) )) CK0=$(ckcpu) KT0=$(kcpu) PGR=$(pgcpu)
common=(--brokers "$BROKERS" --db "$DSN" --url "$CKURL" --registry "http://127.0.0.1:$REG" --data-dir "$DATA")
WARMUP=${LOADRUN_WARMUP:-200:10s}
"$LOADBIN" load --rate "${WARMUP%%:*}" --duration "${WARMUP#*:}" "${common[@]}" --seed 7 --report "$OUT/warm.json" > "$OUT/warm.log" 2>&1
UPW=$(( $(proccpu "$UP") + $(ckcpu) )) KTW=$(kcpu) PGW=$(pgcpu) # after the warm-up: measured_cpu_s counts from here
/usr/bin/time -f '%U %S' -o "$OUT/load.cpu" "$LOADBIN" load --rate "$RATE" --duration "$DURATION" "${common[@]}" --seed 42 \
  --report "$OUT/run.json" --csv "$OUT/run.csv" > "$OUT/run.log" 2>&1
uptime > "$OUT/uptime.after"
if [[ -n $CK ]]; then
  curl -s "http://$CKADMIN/metrics" > "$OUT/run.metrics"
  curl -s "http://$ADMIN/metrics" > "$OUT/up.metrics"
else
  curl -s "http://$ADMIN/metrics" > "$OUT/run.metrics"
fi
CKT=$(ckcpu)
UPT=$(( $(awk '{print $14+$15}' "/proc/$UP/stat") + CKT ))
PG1=$(pgcpu)
KT=$(kcpu)
[[ -n $CK ]] && { kill -TERM $CK; wait $CK; }
kill -TERM $UP; wait $UP
scripts/kafka.sh stop --clean >/dev/null 2>&1
python3 - "$OUT" "$((UPT-UP0))" "$((PG1-PGR))" "$(getconf CLK_TCK)" "$((KT-KT0))" "$UP0" "$((PGR-PG0))" "$KT0" "$((UPT-UPW))" "$((PG1-PGW))" "$((KT-KTW))" "$((CKT-CK0))" "${LOADRUN_CHECKOUT:-up}" "$NODES" <<'PY'
import json, sys
out, upt, pgt, tck, kt = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
start = dict(up=int(sys.argv[6]), pg=int(sys.argv[7]), kafka=int(sys.argv[8]))
measured = dict(up=int(sys.argv[9]), pg=int(sys.argv[10]), kafka=int(sys.argv[11]))
lu, ls = open(out + '/load.cpu').read().split()[-2:]
r = json.load(open(out + '/run.json')); w = json.load(open(out + '/warm.json'))
orders = r['ordersAccepted'] + w['ordersAccepted']
c, e = r['checkoutLatencyMs'], r['endToEndLatencyMs']
la = lambda f: open(out + f).read().split('load average:')[1].strip()
line = dict(status=r['status'], accepted_s=round(r['acceptedPerSecond'], 1), sent=r['ordersSent'], accepted=r['ordersAccepted'],
            errors=r['errorsByStatus'], ck=f"{c['p50']:.1f} / {c['p99']:.1f} / {c['p99_9']:.1f}", e2e=f"{e['p50']:.0f} / {e['p99']:.0f}",
            up_cpu_s=round(upt / tck, 1), pg_cpu_s=round(pgt / tck, 1), cpu_ms_order=round((upt + pgt) / tck * 1000 / max(1, orders), 2),
            kafka_cpu_s=round(kt / tck, 1), load_client_cpu_s=round(float(lu) + float(ls), 1),
            start_cpu_s={k: round(v / tck, 1) for k, v in start.items()},
            measured_cpu_s={k: round(v / tck, 1) for k, v in measured.items()},
            max_send_lag_ms=round(r['maxSendLagMs']), load=la('/uptime.before') + ' -> ' + la('/uptime.after'),
            invariants_hold=all(v['ok'] for v in (r.get('invariants') or {}).values()))
if sys.argv[13] == 'process':
    line['checkout'] = 'process'; line['checkout_cpu_s'] = round(int(sys.argv[12]) / tck, 1)
if sys.argv[14] != '1':
    line['kafka_nodes'] = int(sys.argv[14])
print(json.dumps(line)); open(out + '/summary.json', 'w').write(json.dumps(line))
PY
