#!/usr/bin/env bash
# dataset3.sh: the whole data set (data/online-retail/online_retail.csv.gz) through `ordercast up --replay
# --exit-when-done` on a 3-node Kafka 4.4 (RF 3, min.insync.replicas 2, acks=all) and PostgreSQL with its default
# durability, each fresh; as docs/benchmarks.md reports it.
#
# usage: scripts/dataset3.sh NAME BIN [extra 'ordercast up' flags...]
#   results in $DATASET_OUT/NAME (default ./loadruns/NAME): report.json, up.log, time.txt (GNU time -v), summary.json
# summary.json also has the CPU seconds of the three Kafka nodes and of PostgreSQL during `up` (from its start to its
# exit, the brokers' own start apart): the run shares 2 cores, and `up` is the smaller part of it.
# Ports: ORDERCAST_KAFKA_PORT (19992: brokers on it, +2, +4), ORDERCAST_PG_PORT (15482), DATASET_HTTP (18992; +1 registry)
set -u
[[ $# -ge 2 ]] || { sed -n 2,9p "$0"; exit 2; }
NAME=$1 BIN=$(realpath "$2"); shift 2
ROOT=$(cd "$(dirname "$0")/.." && pwd); cd "$ROOT"
export ORDERCAST_KAFKA_PORT=${ORDERCAST_KAFKA_PORT:-19992} ORDERCAST_KAFKA_STATE=${ORDERCAST_KAFKA_STATE:-/tmp/kafka3-${ORDERCAST_KAFKA_PORT:-19992}}
export ORDERCAST_KAFKA_START_TIMEOUT=${ORDERCAST_KAFKA_START_TIMEOUT:-400}
export ORDERCAST_PG_PORT=${ORDERCAST_PG_PORT:-15482} ORDERCAST_PG_STATE=${ORDERCAST_PG_STATE:-/tmp/pg-${ORDERCAST_PG_PORT:-15482}} ORDERCAST_PG_DURABLE=1
HTTP=${DATASET_HTTP:-18992} REG=$(( ${DATASET_HTTP:-18992} + 1 ))
OUT=${DATASET_OUT:-$ROOT/loadruns}/$NAME DATA=${DATASET_OUT:-$ROOT/loadruns}/$NAME.data
rm -rf "$OUT" "$DATA"; mkdir -p "$OUT"
scripts/postgres.sh status >/dev/null || scripts/postgres.sh start >/dev/null || { echo "dataset3: PostgreSQL did not start"; exit 1; }
scripts/kafka.sh stop --clean >/dev/null 2>&1
scripts/kafka.sh start --clean --brokers 3 > "$OUT/kafka.log" 2>&1 || { echo "dataset3: Kafka did not start ($OUT/kafka.log)"; scripts/kafka.sh stop --clean >/dev/null 2>&1; exit 1; }
DB=oc_$(echo "$NAME" | tr -c 'a-z0-9\n' '_')
psql -h 127.0.0.1 -p "$ORDERCAST_PG_PORT" -U postgres -qc "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB" >/dev/null 2>&1
DSN="postgres://postgres@127.0.0.1:$ORDERCAST_PG_PORT/$DB?sslmode=disable"
. scripts/cpu.sh
kcpu() { local t=0 i; for i in 1 2 3; do t=$((t + $(proccpu "$(scripts/kafka.sh pid $i)"))); done; echo "$t"; }
uptime > "$OUT/uptime.before"
K0=$(kcpu) PG0=$(pgcpu)
/usr/bin/time -v "$BIN" up --data-dir "$DATA" --brokers "$(scripts/kafka.sh brokers)" --db "$DSN" --broker-addr 127.0.0.1:0 \
  --http "127.0.0.1:$HTTP" --registry-addr "127.0.0.1:$REG" --replication-factor 3 --min-insync-replicas 2 \
  --replay data/online-retail/online_retail.csv.gz --exit-when-done --report "$OUT/report.json" "$@" > "$OUT/up.log" 2> "$OUT/time.txt"
echo "rc=$?" >> "$OUT/time.txt"
echo "kafka_ticks=$(( $(kcpu) - K0 )) pg_ticks=$(( $(pgcpu) - PG0 )) hz=$(getconf CLK_TCK)" > "$OUT/cpu.txt"
uptime > "$OUT/uptime.after"
scripts/kafka.sh stop --clean >/dev/null 2>&1
python3 - "$OUT" <<'PY'
import json, re, sys
out = sys.argv[1]; t = open(out + '/time.txt').read()
g = lambda k: re.search(k + r': (.*)', t).group(1)
try:
    r = json.load(open(out + '/report.json')); st = r.get('status'); acc = r.get('ordersAccepted', r.get('progress', {}).get('ordersAccepted'))
except Exception as e:
    st, acc = 'no report', str(e)
c = dict(kv.split('=') for kv in open(out + '/cpu.txt').read().split())
la = lambda f: open(out + f).read().split('load average:')[1].strip()
line = dict(status=st, accepted=acc, wall=g(r'Elapsed \(wall clock\) time \(h:mm:ss or m:ss\)'),
            up_cpu_s=round(float(g(r'User time \(seconds\)')) + float(g(r'System time \(seconds\)')), 1),
            kafka_cpu_s=round(int(c['kafka_ticks']) / int(c['hz']), 1), pg_cpu_s=round(int(c['pg_ticks']) / int(c['hz']), 1),
            peak_rss_mib=int(g(r'Maximum resident set size \(kbytes\)')) // 1024, load=la('/uptime.before') + ' -> ' + la('/uptime.after'))
print(json.dumps(line)); open(out + '/summary.json', 'w').write(json.dumps(line))
PY
