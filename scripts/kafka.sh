#!/usr/bin/env bash
# scripts/kafka.sh - a local Apache Kafka 4.x (KRaft, no ZooKeeper) for Ordercast
# development and tests, on loopback only. Needs Java 17+ and Maven (Maven Central).
#
#   scripts/kafka.sh fetch                       download Kafka jars into the cache (idempotent)
#   scripts/kafka.sh start [--brokers 1|3] [--clean] [--secure]
#                                                start the cluster (or the nodes of the existing one
#                                                that are down) and wait until every broker answers
#                                                an admin client; prints KAFKA_BROKERS=...
#                                                --clean: delete the previous state first
#                                                --secure (new cluster only): SASL_SSL, see "Secure mode"
#   scripts/kafka.sh stop [--clean]              stop every node (SIGTERM, SIGKILL after 60 s);
#                                                --clean also deletes the state dir
#   scripts/kafka.sh status                      which nodes run (pid, ports, RSS); exit 0 if all
#                                                do, 3 otherwise
#   scripts/kafka.sh stop-node N [--kill]        stop one node (--kill: SIGKILL, i.e. a crash)
#   scripts/kafka.sh start-node N                start one node again; waits until it serves
#                                                requests and no partition is under-replicated
#   scripts/kafka.sh brokers                     print the bootstrap servers (127.0.0.1:19092,...)
#   scripts/kafka.sh pid N                       print node N's pid (exit 1 if it is not running)
#   scripts/kafka.sh proxies                     with ORDERCAST_KAFKA_PROXIED=1 at creation: one line
#                                                per node, ADVERTISED=LISTEN (see add_proxied_listener)
#   scripts/kafka.sh tool NAME|CLASS [ARGS...]   run a Kafka CLI tool with the cached jars, e.g.
#                                                tool topics --bootstrap-server 127.0.0.1:19092 --list
#                                                (topics, configs, consumer-groups, groups, features,
#                                                console-producer, console-consumer, metadata-quorum,
#                                                api-versions, transactions, ... see tool_class)
#
# Every node is a combined broker+controller (process.roles=broker,controller);
# with --brokers 3 the three controllers form a 3-voter quorum.
# Ports: node i listens on 127.0.0.1:(19092+2(i-1)) for clients, the next port for the controller:
#   1 node : 19092 (controller 19093)
#   3 nodes: 19092, 19094, 19096 (controllers 19093, 19095, 19097)
#
# Environment:
#   ORDERCAST_KAFKA_HOME           jar cache (default $HOME/.cache/ordercast/kafka-<version>)
#   ORDERCAST_KAFKA_STATE          data, configs, logs, pid files (default /tmp/ordercast-kafka)
#   ORDERCAST_KAFKA_PORT           first client port of a new cluster (default 19092; an existing
#                                  cluster keeps the ports it was created with)
#   ORDERCAST_KAFKA_HEAP           JVM heap flags per node (default -Xms128m -Xmx512m for 1 node,
#                                  -Xms128m -Xmx384m for 3 nodes)
#   ORDERCAST_KAFKA_START_TIMEOUT  seconds to wait for readiness (default 90)
#   ORDERCAST_KAFKA_STOP_TIMEOUT   seconds to wait after SIGTERM before SIGKILL (default 60)
#   ORDERCAST_KAFKA_QUORUM_GRACE   seconds a node may keep shutting down after the controller
#                                  quorum is gone before SIGKILL (default 10; see stop_pids)
#   ORDERCAST_KAFKA_PROXIED        1: when a cluster is created, give every node a second client
#                                  listener EXTERNAL that advertises a fault proxy's address
#                                  (add_proxied_listener); the PLAINTEXT listener is unchanged
#   ORDERCAST_KAFKA_EXTRA_PROPS    extra server.properties lines (newline separated key=value),
#                                  appended to every node's config when it is written
#   JAVA                           java binary (default: java on PATH / $JAVA_HOME/bin/java)
#   ORDERCAST_KAFKA_SCRAM_USERS    with --secure: more SCRAM-SHA-512 users created at format time,
#                                  comma separated name=password (default none; the admin always)
#
# Secure mode (start --secure): the client listener is SASL_SSL (SCRAM-SHA-512 over TLS 1.2+)
# with a CA and a broker certificate (127.0.0.1, localhost) made by openssl in $STATE/tls (PEM,
# ssl.keystore.type=PEM); the controller listener is SSL with client certificates (the broker's
# own, principal User:broker), so no listener takes unauthenticated connections. The
# StandardAuthorizer runs with allow.everyone.if.no.acl.found=false; super.users are User:admin
# (SCRAM, password in $STATE/tls/admin.password) and User:broker. The user admin exists from the
# format on; other users come from ORDERCAST_KAFKA_SCRAM_USERS or later (kafka-configs, or
# `ordercast acls --apply --create-users`). Files for clients: $STATE/tls/ca.pem (the CA to
# trust) and $STATE/tls/admin.properties (a tool's --command-config as admin); `start` prints
# them as KAFKA_TLS_CA=... and KAFKA_ADMIN_CONFIG=....
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
POM="$SCRIPT_DIR/kafka/pom.xml"
HOST=127.0.0.1

die() { echo "kafka.sh: error: $*" >&2; exit 1; }
log() { echo "kafka.sh: $*" >&2; }

[[ -f "$POM" ]] || die "missing $POM"
KAFKA_VERSION=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$POM" | head -n1)
[[ -n "$KAFKA_VERSION" ]] || die "cannot read <kafka.version> from $POM"
KAFKA_HOME=${ORDERCAST_KAFKA_HOME:-$HOME/.cache/ordercast/kafka-$KAFKA_VERSION}
LIBS="$KAFKA_HOME/libs"
STATE=${ORDERCAST_KAFKA_STATE:-/tmp/ordercast-kafka}
BASE_PORT=${ORDERCAST_KAFKA_PORT:-19092}
START_TIMEOUT=${ORDERCAST_KAFKA_START_TIMEOUT:-90}
STOP_TIMEOUT=${ORDERCAST_KAFKA_STOP_TIMEOUT:-60}
QUORUM_GRACE=${ORDERCAST_KAFKA_QUORUM_GRACE:-10}
CONF="$STATE/cluster.conf"

if [[ -z "${JAVA:-}" ]]; then
  if [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then JAVA="$JAVA_HOME/bin/java"; else JAVA=java; fi
fi

broker_port() { echo $((BASE_PORT + 2 * ($1 - 1))); }
controller_port() { echo $((BASE_PORT + 2 * ($1 - 1) + 1)); }
node_dir() { echo "$STATE/node-$1"; }

bootstrap() { # bootstrap servers of an N-node cluster
  local n=$1 i s=""
  for ((i = 1; i <= n; i++)); do s+="${s:+,}$HOST:$(broker_port "$i")"; done
  echo "$s"
}

# ---------------------------------------------------------------- prerequisites

check_java() {
  command -v "$JAVA" >/dev/null 2>&1 || die "java not found (need Java 17+; set JAVA or JAVA_HOME)"
  local v
  v=$("$JAVA" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')
  [[ "$v" =~ ^[0-9]+$ ]] || die "cannot determine the Java version of $JAVA"
  ((v >= 17)) || die "Kafka $KAFKA_VERSION needs Java 17+, $JAVA is Java $v"
}

# Download Kafka and its runtime dependencies from Maven Central into $LIBS.
# Idempotent: a .complete marker is written only after a full copy; a partial
# copy is never used. Concurrent callers serialise on a lock file.
fetch() {
  if [[ -f "$KAFKA_HOME/.complete" && -d "$LIBS" ]]; then return 0; fi
  command -v mvn >/dev/null 2>&1 || die "mvn not found: Maven is needed to download Kafka $KAFKA_VERSION"
  mkdir -p "$KAFKA_HOME"
  local lock="$KAFKA_HOME/.lock"
  exec 8>"$lock"
  if command -v flock >/dev/null 2>&1; then
    flock -w 600 8 || die "another kafka.sh has been downloading into $KAFKA_HOME for 10 minutes ($lock)"
  fi
  if [[ -f "$KAFKA_HOME/.complete" && -d "$LIBS" ]]; then exec 8>&-; return 0; fi
  local tmp="$KAFKA_HOME/libs.tmp.$$" out="$KAFKA_HOME/mvn.log" t0=$SECONDS
  rm -rf "$tmp"
  log "downloading Apache Kafka $KAFKA_VERSION and its dependencies with Maven into $LIBS ..."
  if ! mvn -B -q -Dstyle.color=never -f "$POM" \
      dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$tmp" >"$out" 2>&1; then
    sed 's/\x1b\[[0-9;]*m//g' "$out" >&2
    rm -rf "$tmp"
    die "Maven could not fetch org.apache.kafka:kafka_2.13:$KAFKA_VERSION (full log above and in $out)"
  fi
  [[ -f "$tmp/kafka_2.13-$KAFKA_VERSION.jar" && -f "$tmp/kafka-tools-$KAFKA_VERSION.jar" ]] ||
    { cat "$out" >&2; die "Maven succeeded but kafka_2.13-$KAFKA_VERSION.jar is missing in $tmp"; }
  rm -rf "$LIBS"
  mv "$tmp" "$LIBS"
  echo "$KAFKA_VERSION" >"$KAFKA_HOME/.complete"
  log "fetched $(find "$LIBS" -name '*.jar' | wc -l) jars ($(du -sh "$LIBS" | cut -f1)) in $((SECONDS - t0)) s"
  exec 8>&-
}

# ---------------------------------------------------------------- process helpers

node_pid() { # prints the pid of node $1 if it is running, else nothing (and returns 1)
  local f pid cmdline
  f="$(node_dir "$1")/kafka.pid"
  [[ -f "$f" ]] || return 1
  pid=$(<"$f")
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  # guard against pid reuse: the process must be this node's broker
  cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
  [[ "$cmdline" == *"$(node_dir "$1")/server.properties"* ]] || return 1
  echo "$pid"
}

port_open() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

write_log4j() {
  # broker: INFO to stdout (redirected to node-N/server.log); tools: WARN to stderr
  cat >"$STATE/log4j2.properties" <<'EOF'
status = warn
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = STDOUT
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
EOF
  cat >"$STATE/tools-log4j2.properties" <<'EOF'
status = warn
appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = STDERR
EOF
}

run_tool() { # run_tool CLASS ARGS... (without a state dir log4j2 falls back to ERROR on stderr)
  local l4j="$STATE/tools-log4j2.properties"
  [[ -f "$l4j" ]] || l4j=""
  "$JAVA" -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true \
    ${l4j:+-Dlog4j2.configurationFile="$l4j"} -cp "$LIBS/*" "$@"
}

tool_class() {
  case "$1" in
    topics) echo org.apache.kafka.tools.TopicCommand ;;
    configs) echo org.apache.kafka.tools.ConfigCommand ;;
    consumer-groups) echo org.apache.kafka.tools.consumer.group.ConsumerGroupCommand ;;
    groups) echo org.apache.kafka.tools.GroupsCommand ;;
    console-producer) echo org.apache.kafka.tools.ConsoleProducer ;;
    console-consumer) echo org.apache.kafka.tools.consumer.ConsoleConsumer ;;
    features) echo org.apache.kafka.tools.FeatureCommand ;;
    metadata-quorum) echo org.apache.kafka.tools.MetadataQuorumCommand ;;
    api-versions) echo org.apache.kafka.tools.BrokerApiVersionsCommand ;;
    transactions) echo org.apache.kafka.tools.TransactionsCommand ;;
    leader-election) echo org.apache.kafka.tools.LeaderElectionCommand ;;
    reassign-partitions) echo org.apache.kafka.tools.reassign.ReassignPartitionsCommand ;;
    log-dirs) echo org.apache.kafka.tools.LogDirsCommand ;;
    delete-records) echo org.apache.kafka.tools.DeleteRecordsCommand ;;
    cluster) echo org.apache.kafka.tools.ClusterTool ;;
    storage) echo kafka.tools.StorageTool ;;
    *.*) echo "$1" ;;
    *) die "unknown tool '$1' (topics, configs, consumer-groups, groups, console-producer, console-consumer, features, metadata-quorum, api-versions, transactions, leader-election, reassign-partitions, log-dirs, delete-records, cluster, storage, or a class name)" ;;
  esac
}

# ---------------------------------------------------------------- cluster state

lock_state() { # serialise start/start-node; the lock fd is closed in the broker JVMs
  exec 9>"$STATE/.lock"
  if command -v flock >/dev/null 2>&1; then
    flock -w "$((START_TIMEOUT + 30))" 9 || die "another kafka.sh start is running on $STATE ($STATE/.lock)"
  fi
}

new_cluster_id() { # what `kafka-storage random-uuid` prints (16 random bytes, base64url, no
  # padding; Kafka never hands out ids starting with '-'), without starting a JVM for it
  local id
  while :; do
    id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
    [[ "$id" == -* ]] || break
  done
  echo "$id"
}

read_conf() { # sets BROKERS, CLUSTER_ID, BASE_PORT from $CONF; returns 1 if there is no cluster
  [[ -f "$CONF" ]] || return 1
  BROKERS=$(sed -n 's/^BROKERS=//p' "$CONF")
  CLUSTER_ID=$(sed -n 's/^CLUSTER_ID=//p' "$CONF")
  CONF_PORT=$(sed -n 's/^PORT=//p' "$CONF")
  CONF_PORT=${CONF_PORT:-19092}
  SECURE=$(sed -n 's/^SECURE=//p' "$CONF")
  if [[ ! "$BROKERS" =~ ^[0-9]+$ || -z "$CLUSTER_ID" || ! "$CONF_PORT" =~ ^[0-9]+$ ]]; then
    # still let 'stop' find the nodes by their pid files
    BROKERS=$(find "$STATE" -maxdepth 1 -name 'node-*' -type d | wc -l)
    [[ "${ALLOW_CORRUPT_CONF:-0}" == 1 ]] && return 0
    die "corrupt $CONF; run: $0 stop --clean"
  fi
  BASE_PORT=$CONF_PORT # the ports are fixed when the cluster is created
}

write_server_properties() { # write_server_properties NODE N
  local i=$1 n=$2 voters="" j rf minisr dir
  for ((j = 1; j <= n; j++)); do voters+="${voters:+,}$j@$HOST:$(controller_port "$j")"; done
  if ((n >= 3)); then rf=3; minisr=2; else rf=$n; minisr=1; fi
  dir=$(node_dir "$i")
  mkdir -p "$dir/data" "$dir/logs"
  cat >"$dir/server.properties" <<EOF
# written by scripts/kafka.sh for a $n-node local cluster; node $i
process.roles=broker,controller
node.id=$i
controller.quorum.voters=$voters
listeners=PLAINTEXT://$HOST:$(broker_port "$i"),CONTROLLER://$HOST:$(controller_port "$i")
advertised.listeners=PLAINTEXT://$HOST:$(broker_port "$i"),CONTROLLER://$HOST:$(controller_port "$i")
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs=$dir/data

num.partitions=1
default.replication.factor=$rf
min.insync.replicas=$minisr
offsets.topic.replication.factor=$rf
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$minisr
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$minisr
# the internal topics are created on first use (first group / first transaction); 50
# partitions each (the default) take many seconds to create and load on 2 cores
offsets.topic.num.partitions=10
transaction.state.log.num.partitions=10
share.coordinator.state.topic.num.partitions=10
group.initial.rebalance.delay.ms=0
# the coordinator looks for expired transactions every 10 s by default; every
# 1 s here, so that a short transaction timeout (processor.TransactionTimeout,
# --transaction-timeout) takes effect within a test's patience
transaction.abort.timed.out.transaction.cleanup.interval.ms=1000
auto.create.topics.enable=false
unclean.leader.election.enable=false

# a 2-core machine: fewer threads than the defaults
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
background.threads=4
EOF
  if [[ -n "${ORDERCAST_KAFKA_EXTRA_PROPS:-}" ]]; then
    printf '\n# ORDERCAST_KAFKA_EXTRA_PROPS\n%s\n' "$ORDERCAST_KAFKA_EXTRA_PROPS" >>"$dir/server.properties"
  fi
}

# Share groups (KIP-932) need no flag here: formatting at Kafka 4.4's latest release version
# finalizes share.version=2 (share groups, and their broker-written DLQ, KIP-1191), as
# `scripts/kafka.sh tool features --bootstrap-server ... describe` shows; a cluster formatted by
# an older Kafka needs `tool features ... upgrade --feature share.version=2` after its upgrade.
format_node() { # format_node NODE: format the storage once (skipped if already formatted)
  local dir out
  dir=$(node_dir "$1")
  [[ -f "$dir/data/meta.properties" ]] && return 0
  scram_format_args
  if ! out=$(run_tool kafka.tools.StorageTool format -t "$CLUSTER_ID" -c "$dir/server.properties" "${SCRAM_ARGS[@]}" 2>&1); then
    echo "$out" >&2
    die "formatting the storage of node $1 failed"
  fi
}

# ---------------------------------------------------------------- secure mode (start --secure)

secure() { [[ "${SECURE:-0}" == 1 ]]; }
tls_dir() { echo "$STATE/tls"; }

make_certs() { # a CA and one broker certificate (127.0.0.1, localhost; server and client auth), PEM
  local d
  d=$(tls_dir)
  command -v openssl >/dev/null 2>&1 || die "--secure needs openssl to make the test certificates"
  mkdir -p "$d"
  chmod 700 "$d"
  (
    set -e
    cd "$d"
    openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=ordercast test CA" \
      -keyout ca.key -out ca.pem -addext basicConstraints=critical,CA:TRUE \
      -addext keyUsage=critical,keyCertSign,cRLSign
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out broker.key # PKCS#8, as Kafka's PEM store wants
    openssl req -new -key broker.key -subj "/CN=broker" -out broker.csr
    printf '%s\n' "subjectAltName=IP:$HOST,DNS:localhost" "extendedKeyUsage=serverAuth,clientAuth" \
      "keyUsage=critical,digitalSignature,keyEncipherment" >broker.ext
    openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 -sha256 \
      -extfile broker.ext -out broker.pem
    cat broker.key broker.pem ca.pem >broker-keystore.pem
    rm -f broker.csr broker.ext ca.srl
  ) >"$d/openssl.log" 2>&1 || { cat "$d/openssl.log" >&2; die "openssl could not make the test certificates in $d"; }
  od -An -tx1 -N16 /dev/urandom | tr -d ' \n' >"$d/admin.password"
  cat >"$d/admin.properties" <<EOF
# scripts/kafka.sh --secure: a Kafka tool's --command-config, as the super user admin
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$(<"$d/admin.password")";
ssl.truststore.type=PEM
ssl.truststore.location=$d/ca.pem
EOF
  chmod 600 "$d"/*.key "$d/admin.password" "$d/admin.properties" "$d/broker-keystore.pem"
}

write_secure_properties() { # write_secure_properties NODE: override the listeners (later keys win)
  local i=$1 d dir
  d=$(tls_dir)
  dir=$(node_dir "$i")
  cat >>"$dir/server.properties" <<EOF

# scripts/kafka.sh --secure: clients on SASL_SSL (SCRAM-SHA-512), the controllers on mutual TLS
listeners=SASL_SSL://$HOST:$(broker_port "$i"),CONTROLLER://$HOST:$(controller_port "$i")
advertised.listeners=SASL_SSL://$HOST:$(broker_port "$i"),CONTROLLER://$HOST:$(controller_port "$i")
listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:SSL
inter.broker.listener.name=SASL_SSL
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$(<"$d/admin.password")";
ssl.keystore.type=PEM
ssl.keystore.location=$d/broker-keystore.pem
ssl.truststore.type=PEM
ssl.truststore.location=$d/ca.pem
ssl.enabled.protocols=TLSv1.3,TLSv1.2
listener.name.controller.ssl.client.auth=required
ssl.principal.mapping.rules=RULE:^CN=([^,]+)(,.*)?\$/\$1/,DEFAULT
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:admin;User:broker
EOF
}

scram_format_args() { # sets SCRAM_ARGS: kafka-storage format --add-scram for admin and ORDERCAST_KAFKA_SCRAM_USERS
  SCRAM_ARGS=()
  secure || return 0
  local u name pass users
  SCRAM_ARGS+=(--add-scram "SCRAM-SHA-512=[name=admin,password=$(<"$(tls_dir)/admin.password")]")
  IFS=',' read -ra users <<<"${ORDERCAST_KAFKA_SCRAM_USERS:-}"
  for u in "${users[@]}"; do
    name=${u%%=*}
    pass=${u#*=}
    [[ "$u" == *=* && "$name" =~ ^[A-Za-z0-9._-]+$ && "$pass" =~ ^[A-Za-z0-9._-]+$ ]] ||
      die "ORDERCAST_KAFKA_SCRAM_USERS: '$u' is not name=password (letters, digits, '.', '_', '-')"
    SCRAM_ARGS+=(--add-scram "SCRAM-SHA-512=[name=$name,password=$pass]")
  done
}

tool_auth() { # the --command-config a tool needs on a secure cluster (nothing otherwise)
  if secure; then echo --command-config; echo "$(tls_dir)/admin.properties"; fi
}

launch_node() { # launch_node NODE: start the JVM in the background (does not wait)
  local i=$1 dir heap pid
  dir=$(node_dir "$i")
  if pid=$(node_pid "$i"); then log "node $i already running (pid $pid)"; return 0; fi
  local p
  for p in "$(broker_port "$i")" "$(controller_port "$i")"; do
    port_open "$p" && die "port $HOST:$p is already in use by another process (not node $i of $STATE)"
  done
  if ((BROKERS >= 3)); then heap="-Xms128m -Xmx384m"; else heap="-Xms128m -Xmx512m"; fi
  heap=${ORDERCAST_KAFKA_HEAP:-$heap}
  printf '\n===== kafka.sh: starting node %s at %s =====\n' "$i" "$(date -Is)" >>"$dir/server.log"
  stat -c %s "$dir/server.log" >"$dir/log.offset"
  # shellcheck disable=SC2086 # $heap is a list of flags
  setsid "$JAVA" $heap -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 \
    -XX:+ExplicitGCInvokesConcurrent -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$STATE/log4j2.properties" -Dkafka.logs.dir="$dir/logs" \
    -cp "$LIBS/*" kafka.Kafka "$dir/server.properties" \
    </dev/null >>"$dir/server.log" 2>&1 8>&- 9>&- &
  pid=$!
  echo "$pid" >"$dir/kafka.pid"
  # $! is first a forked bash, then setsid, then java (same pid): wait for the exec so that
  # node_pid (which checks the command line) recognises it
  local k
  for ((k = 0; k < 100; k++)); do
    node_pid "$i" >/dev/null && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  log "node $i starting (pid $pid, broker $HOST:$(broker_port "$i"), controller $HOST:$(controller_port "$i"), log $dir/server.log)"
}

new_log() { # the part of node $1's server.log written since its last start
  local dir off
  dir=$(node_dir "$1")
  off=$(cat "$dir/log.offset" 2>/dev/null || echo 0)
  tail -c +"$((off + 1))" "$dir/server.log" 2>/dev/null
}

fail_start() { # fail_start NODE MESSAGE
  local dir
  dir=$(node_dir "$1")
  echo "---- last 50 lines of $dir/server.log ----" >&2
  tail -n 50 "$dir/server.log" >&2 || true
  echo "----" >&2
  die "$2 (nodes that did start are left running for inspection: '$0 stop' ends them)"
}

# Wait until every node in "$@" runs, listens and logged that it started, then until an
# admin client sees all $BROKERS brokers of the cluster answering ApiVersions.
wait_ready() {
  local deadline=$((SECONDS + START_TIMEOUT)) i pending out count
  while :; do
    pending=""
    for i in "$@"; do
      node_pid "$i" >/dev/null || fail_start "$i" "node $i exited during startup"
      # (no "new_log | grep -q": with pipefail the writer's SIGPIPE would fail the test)
      if ! port_open "$(broker_port "$i")" || ! grep -q "Kafka Server started" <(new_log "$i"); then
        pending+=" $i"
      fi
    done
    [[ -z "$pending" ]] && break
    ((SECONDS < deadline)) || fail_start "${pending# }" "node(s)$pending not ready after $START_TIMEOUT s"
    sleep 0.5
  done
  # every broker of the cluster must be registered and answer (catches a node that is up
  # but not yet unfenced); BrokerApiVersionsCommand prints one "host:port (id: N ...) ->" per broker
  while :; do
    count=0
    if out=$(run_tool org.apache.kafka.tools.BrokerApiVersionsCommand \
        --bootstrap-server "$(bootstrap "$BROKERS")" $(tool_auth) 2>&1); then
      count=$(grep -c '(id: [0-9]* rack: .*) -> (' <<<"$out" || true)
    fi
    ((count >= BROKERS)) && return 0
    ((SECONDS < deadline)) || {
      echo "$out" | tail -n 20 >&2
      fail_start "$1" "only $count of $BROKERS brokers answer after $START_TIMEOUT s"
    }
    sleep 1
  done
}

wait_in_sync() { # wait until the cluster has no under-replicated partitions
  local deadline=$((SECONDS + START_TIMEOUT)) out
  while :; do
    if out=$(run_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$(bootstrap "$BROKERS")" $(tool_auth) \
        --describe --under-replicated-partitions 2>&1) && [[ -z "$out" ]]; then
      return 0
    fi
    ((SECONDS < deadline)) || { echo "$out" | tail -n 20 >&2; die "partitions still under-replicated after $START_TIMEOUT s"; }
    sleep 1
  done
}

# ---------------------------------------------------------------- fault proxies

# add_proxied_listener NODE: a second client listener, EXTERNAL, for clients that must reach
# node i only through a fault proxy (ordercast chaos, internal/faultproxy). The node listens on
# 127.0.2.i:<external port> and advertises 127.0.1.i:<its broker port>, where the proxy
# listens and forwards to 127.0.2.i; a client bootstrapping on an EXTERNAL address gets the
# EXTERNAL addresses in metadata, so every one of its connections passes a proxy. Inter-broker
# and controller traffic keep their listeners (not proxied). Kafka wants a port of its own per
# listener: node i's external port is base + 2N + i - 1 (a 3-node cluster on 19092 also takes
# 19098-19100); the proxy takes the broker's port number on 127.0.1.i (Linux routes 127/8 to
# lo, so another loopback address has its own ports). Appends overriding lines
# (java.util.Properties keeps the last), built from the lines already written, so that it
# composes with any other listener change.
external_port() { echo $((BASE_PORT + 2 * BROKERS + $1 - 1)); }

add_proxied_listener() {
  local i=$1 f port ext l a m
  f="$(node_dir "$i")/server.properties"
  port=$(broker_port "$i")
  ext=$(external_port "$i")
  l=$(sed -n 's/^listeners=//p' "$f" | tail -n1)
  a=$(sed -n 's/^advertised.listeners=//p' "$f" | tail -n1)
  m=$(sed -n 's/^listener.security.protocol.map=//p' "$f" | tail -n1)
  cat >>"$f" <<EOF

# kafka.sh add_proxied_listener: clients through a fault proxy
listeners=$l,EXTERNAL://127.0.2.$i:$ext
advertised.listeners=$a,EXTERNAL://127.0.1.$i:$port
listener.security.protocol.map=$m,EXTERNAL:PLAINTEXT
EOF
}

cmd_proxies() {
  read_conf || die "no cluster in $STATE"
  local i f
  for ((i = 1; i <= BROKERS; i++)); do
    f="$(node_dir "$i")/server.properties"
    grep -q '^# kafka.sh add_proxied_listener' "$f" || die "node $i has no proxied listener (create the cluster with ORDERCAST_KAFKA_PROXIED=1)"
    echo "127.0.1.$i:$(broker_port "$i")=127.0.2.$i:$(external_port "$i")"
  done
}

# ---------------------------------------------------------------- commands

stop_pids() { # stop_pids SIGNAL NODE...: signal the running nodes and wait for them to exit
  local sig=$1 i pid pids=() deadline=$((SECONDS + STOP_TIMEOUT)) alive running stranded_since="" quorum_killed=""
  shift
  for i in "$@"; do
    if pid=$(node_pid "$i"); then
      kill "-$sig" "$pid" 2>/dev/null || true
      pids+=("$pid")
      log "node $i: sent SIG$sig to pid $pid"
    fi
  done
  ((${#pids[@]})) || return 0
  while :; do
    alive=()
    for pid in "${pids[@]}"; do if kill -0 "$pid" 2>/dev/null; then alive+=("$pid"); fi; done
    ((${#alive[@]})) || break
    # A combined broker+controller asks the active controller to approve its controlled
    # shutdown and waits up to 5 minutes for it. Once fewer than a majority of the voters run
    # there is no controller, so the last node(s) of a cluster being stopped would hang:
    # give them QUORUM_GRACE seconds, then SIGKILL (their next start recovers the logs).
    running=0
    for ((i = 1; i <= BROKERS; i++)); do if node_pid "$i" >/dev/null; then running=$((running + 1)); fi; done
    if ((running < BROKERS / 2 + 1)); then
      stranded_since=${stranded_since:-$SECONDS}
      if ((SECONDS - stranded_since >= QUORUM_GRACE)) && [[ -z "$quorum_killed" ]]; then
        log "pid(s) ${alive[*]} cannot finish a controlled shutdown without a controller quorum; sending SIGKILL"
        kill -KILL "${alive[@]}" 2>/dev/null || true
        quorum_killed=1
      fi
    fi
    if ((SECONDS >= deadline)); then
      log "still running after $STOP_TIMEOUT s, sending SIGKILL to ${alive[*]}"
      kill -KILL "${alive[@]}" 2>/dev/null || true
      sleep 1
      break
    fi
    sleep 0.2
  done
  for i in "$@"; do rm -f "$(node_dir "$i")/kafka.pid"; done
}

cmd_start() {
  local n="" clean=0 i t0=$SECONDS want_secure=0
  while (($#)); do
    case "$1" in
      --brokers) [[ $# -ge 2 ]] || die "--brokers needs a value"; n=$2; shift 2 ;;
      --brokers=*) n=${1#--brokers=}; shift ;;
      --clean) clean=1; shift ;;
      --secure) want_secure=1; shift ;;
      *) die "start: unknown option $1" ;;
    esac
  done
  [[ -z "$n" || "$n" =~ ^[1-9]$ ]] || die "--brokers must be 1..9 (use 1 or 3)"
  check_java
  fetch
  if ((clean)); then cmd_stop --clean; fi
  mkdir -p "$STATE"
  lock_state
  if read_conf; then
    if [[ -n "$n" && "$n" != "$BROKERS" ]]; then
      die "$STATE holds a $BROKERS-node cluster; run '$0 stop --clean' first (or start --clean --brokers $n)"
    fi
    if [[ -n "${ORDERCAST_KAFKA_PORT:-}" && "$ORDERCAST_KAFKA_PORT" != "$CONF_PORT" ]]; then
      die "$STATE holds a cluster on port $CONF_PORT, not $ORDERCAST_KAFKA_PORT; run '$0 stop --clean' first (or start --clean)"
    fi
    if ((want_secure)) && ! secure; then
      die "$STATE holds a cluster without --secure; run '$0 stop --clean' first (or start --clean --secure)"
    fi
  else
    SECURE=$want_secure
    BROKERS=${n:-1}
    CLUSTER_ID=$(new_cluster_id)
    [[ "$CLUSTER_ID" =~ ^[A-Za-z0-9_-]{22}$ ]] || die "could not generate a cluster id (got '$CLUSTER_ID')"
    local p
    for ((i = 1; i <= BROKERS; i++)); do
      for p in "$(broker_port "$i")" "$(controller_port "$i")"; do
        port_open "$p" && die "port $HOST:$p is already in use (another Kafka? '$0 status' / ORDERCAST_KAFKA_STATE)"
      done
    done
    write_log4j
    if secure; then make_certs; fi
    for ((i = 1; i <= BROKERS; i++)); do
      write_server_properties "$i" "$BROKERS"
      if secure; then write_secure_properties "$i"; fi
    done
    if [[ "${ORDERCAST_KAFKA_PROXIED:-}" == 1 ]]; then
      for ((i = 1; i <= BROKERS; i++)); do add_proxied_listener "$i"; done
    fi
    for ((i = 1; i <= BROKERS; i++)); do format_node "$i"; done
    printf 'BROKERS=%s\nCLUSTER_ID=%s\nPORT=%s\nKAFKA_VERSION=%s\nSECURE=%s\n' \
      "$BROKERS" "$CLUSTER_ID" "$BASE_PORT" "$KAFKA_VERSION" "$SECURE" >"$CONF"
    log "formatted a $BROKERS-node KRaft cluster (id $CLUSTER_ID) in $STATE"
  fi
  local all=()
  for ((i = 1; i <= BROKERS; i++)); do launch_node "$i"; all+=("$i"); done
  wait_ready "${all[@]}"
  log "ready: $BROKERS node(s) of Kafka $KAFKA_VERSION in $((SECONDS - t0)) s"
  echo "KAFKA_BROKERS=$(bootstrap "$BROKERS")"
  if secure; then
    echo "KAFKA_TLS_CA=$(tls_dir)/ca.pem"
    echo "KAFKA_ADMIN_CONFIG=$(tls_dir)/admin.properties"
  fi
}

cmd_stop() {
  local clean=0
  while (($#)); do
    case "$1" in
      --clean) clean=1; shift ;;
      *) die "stop: unknown option $1" ;;
    esac
  done
  if ALLOW_CORRUPT_CONF=1 read_conf; then
    local i nodes=()
    for ((i = 1; i <= BROKERS; i++)); do nodes+=("$i"); done
    stop_pids TERM "${nodes[@]}"
  elif [[ -d "$STATE" && -n "$(ls -A "$STATE" 2>/dev/null)" ]]; then
    ((clean)) && die "$STATE has no cluster.conf: not deleting a directory kafka.sh did not create"
  fi
  if ((clean)) && [[ -f "$CONF" ]]; then
    rm -rf "$STATE"
    log "deleted $STATE"
  fi
  return 0
}

cmd_status() {
  if ! read_conf; then
    echo "no cluster in $STATE"
    return 3
  fi
  local i pid up=0
  echo "Kafka $KAFKA_VERSION, $BROKERS node(s), cluster id $CLUSTER_ID, state $STATE"
  for ((i = 1; i <= BROKERS; i++)); do
    if pid=$(node_pid "$i"); then
      up=$((up + 1))
      echo "node $i: running  pid $pid  broker $HOST:$(broker_port "$i")  controller $HOST:$(controller_port "$i")  rss $(($(awk '/VmRSS/{print $2}' "/proc/$pid/status") / 1024)) MiB"
    else
      echo "node $i: stopped  broker $HOST:$(broker_port "$i")  controller $HOST:$(controller_port "$i")"
    fi
  done
  echo "KAFKA_BROKERS=$(bootstrap "$BROKERS")"
  ((up == BROKERS)) || return 3
}

node_arg() {
  [[ "${1:-}" =~ ^[0-9]+$ ]] || die "expected a node number"
  read_conf || die "no cluster in $STATE; run '$0 start' first"
  (($1 >= 1 && $1 <= BROKERS)) || die "node $1 does not exist (cluster has $BROKERS node(s))"
}

cmd_stop_node() {
  local n=${1:-} sig=TERM
  node_arg "$n"
  shift
  [[ "${1:-}" == "--kill" ]] && sig=KILL
  stop_pids "$sig" "$n"
}

cmd_start_node() {
  local n=${1:-} t0=$SECONDS
  node_arg "$n"
  check_java
  fetch
  lock_state
  launch_node "$n"
  wait_ready "$n"
  log "node $n is serving requests after $((SECONDS - t0)) s; waiting for it to rejoin every ISR ..."
  wait_in_sync
  log "node $n ready, no under-replicated partitions, in $((SECONDS - t0)) s"
}

usage() { awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"; }

main() {
  local cmd=${1:-}
  (($#)) && shift
  case "$cmd" in
    fetch) check_java; fetch; echo "$LIBS" ;;
    start) cmd_start "$@" ;;
    stop) cmd_stop "$@" ;;
    status) cmd_status "$@" ;;
    stop-node) cmd_stop_node "$@" ;;
    start-node) cmd_start_node "$@" ;;
    brokers) read_conf || die "no cluster in $STATE"; bootstrap "$BROKERS" ;;
    pid) node_arg "${1:-}"; node_pid "$1" ;;
    proxies) cmd_proxies ;;
    tool)
      (($#)) || die "tool: name a tool"
      check_java; fetch
      local cls
      cls=$(tool_class "$1"); shift
      run_tool "$cls" "$@" ;;
    -h | --help | help) usage ;;
    "") usage >&2; exit 2 ;;
    *) usage >&2; die "unknown command '$cmd'" ;;
  esac
}

main "$@"
