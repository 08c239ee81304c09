package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ordercast/ordercast/internal/ctxtime"
	"github.com/ordercast/ordercast/internal/faultproxy"
	"github.com/ordercast/ordercast/ordersystem/store"
)

// Cluster points a run at a real Apache Kafka cluster and PostgreSQL
// instead of the embedded broker and SQLite. The run owns both: it deletes
// every topic and consumer group of the cluster and every table of the
// database's public schema before it starts. The schema registry is still
// the embedded one of `ordercast devstack` (its broker is left idle).
type Cluster struct {
	// KafkaScript is scripts/kafka.sh. The cluster is the one its
	// environment names (ORDERCAST_KAFKA_STATE, ORDERCAST_KAFKA_PORT),
	// started before the run; the harness kills, pauses and restarts its
	// nodes with it (stop-node --kill, start-node, pid). Required.
	KafkaScript string
	// PostgresScript is scripts/postgres.sh (ORDERCAST_PG_* in the
	// environment), used to restart the server. Required.
	PostgresScript string
	// DSN is the PostgreSQL data source (postgres://...). Required.
	DSN string
	// Proxied routes every service's Kafka connections through fault
	// proxies that the harness runs (internal/faultproxy): the cluster
	// must have been created with ORDERCAST_KAFKA_PROXIED=1, so that each
	// node advertises its proxy's address on a listener of its own
	// (`kafka.sh proxies`). Needed for the net-* faults. The harness's own
	// clients (checks) connect directly.
	Proxied bool
	// MinInsyncReplicas of the topics the services create (RF 3 with 3
	// nodes). Default 2.
	MinInsyncReplicas int
}

// realCluster is the running view of a Cluster.
type realCluster struct {
	cfg     *Cluster
	direct  []string          // bootstrap servers, PLAINTEXT listeners
	nodes   int               // number of nodes
	proxy   *faultproxy.Proxy // nil unless Proxied
	proxied []string          // advertised proxy addresses, node order
	ups     []string          // upstream (EXTERNAL listener) per node
	// crashesPG: pg-restart is enabled, so commits must be durable
	// (synchronous_commit on).
	crashesPG bool
}

// nodeStartTimeout is how long start-node may take, in seconds, unless
// ORDERCAST_KAFKA_START_TIMEOUT says otherwise: a broker fault ends only when
// its node serves again, and on a loaded machine a JVM's start and the ISR
// rejoin can take minutes (kafka.sh's own default, 90 s, ended soak episodes
// early with the node still starting, so a second node could be taken down
// while the first was not back).
const nodeStartTimeout = 600

func (rc *realCluster) kafka(ctx context.Context, args ...string) (string, error) {
	limit, env := 4*time.Minute, []string(nil)
	if len(args) > 0 && args[0] == "start-node" && os.Getenv("ORDERCAST_KAFKA_START_TIMEOUT") == "" {
		limit = nodeStartTimeout*time.Second + time.Minute
		env = append(os.Environ(), "ORDERCAST_KAFKA_START_TIMEOUT="+strconv.Itoa(nodeStartTimeout))
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, rc.cfg.KafkaScript, args...)
	cmd.Env = env // nil: this process's environment
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", rc.cfg.KafkaScript, strings.Join(args, " "), err, lastLines(string(out), 5))
	}
	return string(out), nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// openRealCluster reads the cluster's addresses and starts the proxies.
func openRealCluster(ctx context.Context, cfg *Cluster) (*realCluster, error) {
	rc := &realCluster{cfg: cfg}
	out, err := exec.CommandContext(ctx, cfg.KafkaScript, "brokers").Output()
	if err != nil {
		return nil, fmt.Errorf("chaos: %s brokers: %w (is the cluster started?)", cfg.KafkaScript, err)
	}
	rc.direct = strings.Split(strings.TrimSpace(string(out)), ",")
	rc.nodes = len(rc.direct)
	if !cfg.Proxied {
		return rc, nil
	}
	out, err = exec.CommandContext(ctx, cfg.KafkaScript, "proxies").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("chaos: %s proxies: %w: %s", cfg.KafkaScript, err, out)
	}
	rc.proxy = faultproxy.New()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		adv, up, ok := strings.Cut(line, "=")
		if !ok {
			rc.proxy.Close()
			return nil, fmt.Errorf("chaos: %s proxies: bad line %q", cfg.KafkaScript, line)
		}
		if err := rc.proxy.Listen(adv, up); err != nil {
			rc.proxy.Close()
			return nil, fmt.Errorf("chaos: %w", err)
		}
		rc.proxied = append(rc.proxied, adv)
		rc.ups = append(rc.ups, up)
	}
	return rc, nil
}

// serviceBrokers are the bootstrap servers the services get.
func (rc *realCluster) serviceBrokers() string {
	if rc.proxy != nil {
		return strings.Join(rc.proxied, ",")
	}
	return strings.Join(rc.direct, ",")
}

func (rc *realCluster) close() {
	if rc.proxy != nil {
		rc.proxy.Close()
	}
}

// reset deletes every topic and group of the cluster and every table of the
// database, so the run's checks count only its own orders.
func (rc *realCluster) reset(ctx context.Context) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(rc.direct...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	groups, err := adm.ListGroups(ctx)
	if err != nil {
		return fmt.Errorf("chaos: list groups: %w", err)
	}
	if gs := groups.Groups(); len(gs) > 0 {
		if _, err := adm.DeleteGroups(ctx, gs...); err != nil {
			return fmt.Errorf("chaos: delete groups: %w", err)
		}
	}
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		return fmt.Errorf("chaos: list topics: %w", err)
	}
	if names := topics.Names(); len(names) > 0 {
		if _, err := adm.DeleteTopics(ctx, names...); err != nil {
			return fmt.Errorf("chaos: delete topics: %w", err)
		}
		deadline := time.Now().Add(time.Minute)
		for {
			left, err := adm.ListTopics(ctx)
			if err == nil && len(left.Names()) == 0 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("chaos: topics still listed a minute after their deletion: %v", left.Names())
			}
			ctxtime.Sleep(ctx, 500*time.Millisecond)
		}
	}
	db, err := store.Open(ctx, rc.cfg.DSN)
	if err != nil {
		return fmt.Errorf("chaos: open %s: %w", rc.cfg.DSN, err)
	}
	defer db.Close()
	// Commit timestamps give the wallets' replay its commit order
	// (payments has no rowid on PostgreSQL); the setting takes effect at
	// the next restart, which reset does itself.
	var syncCommit string
	if err := db.QueryRowContext(ctx, `SHOW synchronous_commit`).Scan(&syncCommit); err != nil {
		return fmt.Errorf("chaos: SHOW synchronous_commit: %w", err)
	}
	if syncCommit == "off" && rc.crashesPG {
		// Found by the first cluster run: a commit acknowledged with
		// synchronous_commit off is lost by the crash of pg-restart, and
		// the services had already committed their Kafka offsets.
		return fmt.Errorf("chaos: PostgreSQL runs with synchronous_commit off, so the crash of pg-restart loses acknowledged commits (the services' effects, whose offsets they then commit): start it with ORDERCAST_PG_DURABLE=1 scripts/postgres.sh start, or leave pg-restart out of --faults")
	}
	for _, q := range []string{`DROP SCHEMA public CASCADE`, `CREATE SCHEMA public`, `ALTER SYSTEM SET track_commit_timestamp = on`} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("chaos: empty the database: %s: %w", q, err)
		}
	}
	db.Close()
	return rc.restartPostgres(ctx)
}

// restartPostgres restarts the server (immediate shutdown: a crash, with
// WAL recovery at the start).
func (rc *realCluster) restartPostgres(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, rc.cfg.PostgresScript, "restart").CombinedOutput()
	if err != nil {
		return fmt.Errorf("chaos: %s restart: %w: %s", rc.cfg.PostgresScript, err, lastLines(string(out), 5))
	}
	return nil
}

// terminateBackends ends every other client connection to the database
// (pg_terminate_backend) and returns how many.
func terminateBackends(ctx context.Context, db *store.DB) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, `SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`).Scan(&n)
	return n, err
}

// activeController returns the node id of the KRaft quorum's leader
// (DescribeQuorum of __cluster_metadata, KIP-595; brokers forward it to the
// controllers).
func activeController(ctx context.Context, cl *kgo.Client) (int32, error) {
	req := kmsg.NewPtrDescribeQuorumRequest()
	t := kmsg.NewDescribeQuorumRequestTopic()
	t.Topic = "__cluster_metadata"
	p := kmsg.NewDescribeQuorumRequestTopicPartition()
	t.Partitions = append(t.Partitions, p)
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return -1, err
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode == 0 && p.LeaderID >= 0 {
				return p.LeaderID, nil
			}
		}
	}
	return -1, errors.New("DescribeQuorum named no leader")
}

// nodePid returns node n's pid (`kafka.sh pid`), 0 when it is not running.
func (rc *realCluster) nodePid(ctx context.Context, n int) int {
	out, err := exec.CommandContext(ctx, rc.cfg.KafkaScript, "pid", strconv.Itoa(n)).Output()
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	return pid
}

// restoreNodes brings every node back: SIGCONT, and start-node for the ones
// down.
func (rc *realCluster) restoreNodes(ctx context.Context) error {
	var errs []error
	for n := 1; n <= rc.nodes; n++ {
		if pid := rc.nodePid(ctx, n); pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGCONT)
			continue
		}
		if _, err := rc.kafka(ctx, "start-node", strconv.Itoa(n)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
