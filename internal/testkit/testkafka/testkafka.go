// Package testkafka gives a test a Kafka cluster: by default an in-process
// franz-go kfake broker, and the real cluster named by ORDERCAST_TEST_BROKERS
// when that variable is set. One suite, two brokers (the habit of franz-go's
// KGO_SEEDS and Watermill's pubsub tests):
//
//	go test ./...                                          # embedded kfake, one per test
//	ORDERCAST_TEST_BROKERS=127.0.0.1:19092 go test -p 1 -count=1 ./...   # = make test-kafka
//
// # A real cluster is shared
//
// Every test on a real cluster uses the same brokers, so Cluster first deletes
// every non-internal topic and every consumer group earlier tests left there,
// then creates the topics the test asks for. Tests on a real cluster therefore
// must not overlap: run them with `go test -p 1` (one package at a time; the
// Makefile's test-kafka target does) and do not call Cluster from tests
// marked t.Parallel. Never point ORDERCAST_TEST_BROKERS at a cluster whose
// topics you want to keep.
//
// The suite uses group session timeouts down to 100ms, the minimum kfake is
// given here (kfake.GroupMinSessionTimeout). Kafka's broker setting
// group.min.session.timeout.ms (default 6s, read-only) must be at most that;
// start the local broker with
//
//	ORDERCAST_KAFKA_EXTRA_PROPS=group.min.session.timeout.ms=100 scripts/kafka.sh start
//
// (.ci/run does). Cluster fails the test, saying so, when the broker's minimum
// is higher.
//
// # What only the embedded broker can do
//
// Broker-side faults (kfake Cluster.Fault, Control, ControlKey, SleepControl,
// MoveTopicPartition) exist only in kfake. Tests that need them call
// SkipIfReal with the reason and then Fake; process kills, restarts and
// group churn run on both.
//
// # Network faults on both
//
// Proxy routes a test's clients through a fault proxy (package
// internal/faultproxy: latency, connection resets, withheld responses, one
// request held past the client's timeout and delivered late, one response
// swallowed), which works the same in front of kfake and a real cluster.
package testkafka

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// EnvBrokers names the real cluster's bootstrap servers, comma separated
// (e.g. "127.0.0.1:19092,127.0.0.1:19094"). Empty: the embedded kfake broker.
const EnvBrokers = "ORDERCAST_TEST_BROKERS"

// MinSessionTimeout is the smallest group session timeout the suite uses:
// kfake's group.min.session.timeout.ms here, and the most a real cluster's
// may be.
const MinSessionTimeout = 100 * time.Millisecond

// resetTimeout bounds the whole reset of a real cluster.
const resetTimeout = 90 * time.Second

// Brokers returns the real cluster's bootstrap servers from EnvBrokers, or
// nil when the tests run on the embedded broker.
func Brokers() []string {
	var out []string
	for _, b := range strings.Split(os.Getenv(EnvBrokers), ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// Real reports whether the tests run against a real cluster (EnvBrokers set).
func Real() bool { return len(Brokers()) > 0 }

// SkipIfReal skips the test on a real cluster, saying why: for tests that
// need a broker-side fault or control only the embedded kfake broker can
// inject. They run in the default suite (make test).
func SkipIfReal(t testing.TB, why string) {
	t.Helper()
	if Real() {
		t.Skipf("embedded broker only (%s runs a real cluster): %s", EnvBrokers, why)
	}
}

// Cluster returns the bootstrap servers of a cluster holding exactly the
// given topics (name -> partitions), ready to produce to.
//
// By default it starts an in-process kfake broker for this test (closed when
// the test ends) with group.min.session.timeout.ms at MinSessionTimeout.
// With EnvBrokers set it returns the real cluster after deleting every
// non-internal topic and every consumer group left there, and creating the
// topics with replication factor min(3, brokers) and the brokers' default
// min.insync.replicas. It blocks (at most 90s) until every broker's
// metadata agrees: the deleted topics are listed by none and unknown by
// name, the created ones have the IDs the controller gave them and a leader
// on every partition, and the leaders answer ListOffsets on each (see
// topics.go for why each wait). It fails the test on any error, or on a
// condition not met by the deadline, naming it.
func Cluster(t testing.TB, topics map[string]int32) []string {
	t.Helper()
	if !Real() {
		_, addrs := Fake(t, topics)
		return addrs
	}
	brokers := Brokers()
	if err := reset(t, brokers, topics); err != nil {
		t.Fatalf("testkafka: real cluster %s (%s): %v", strings.Join(brokers, ","), EnvBrokers, err)
	}
	return brokers
}

// Fake starts an in-process kfake broker for this test with the given topics
// (name -> partitions, replication factor 1), whatever EnvBrokers says, and
// returns it for faults and controls along with its addresses. It is closed
// when the test ends. Tests calling it should call SkipIfReal first: the
// real-cluster run is about the real broker.
func Fake(t testing.TB, topics map[string]int32, opts ...kfake.Opt) (*kfake.Cluster, []string) {
	t.Helper()
	o := []kfake.Opt{kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(MinSessionTimeout)}
	for _, name := range sortedNames(topics) {
		o = append(o, kfake.SeedTopics(topics[name], name))
	}
	c, err := kfake.NewCluster(append(o, opts...)...)
	if err != nil {
		t.Fatalf("testkafka: kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c, c.ListenAddrs()
}

// ReplicationFactor returns the replication factor Cluster gives topics:
// min(3, brokers) on a real cluster, 1 on the embedded one.
func ReplicationFactor(t testing.TB) int16 {
	t.Helper()
	if !Real() {
		return 1
	}
	cl, adm := admin(t, Brokers())
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		t.Fatalf("testkafka: metadata of %s: %v", strings.Join(Brokers(), ","), err)
	}
	return int16(min(3, len(md.Brokers)))
}

func admin(t testing.TB, brokers []string) (*kgo.Client, *kadm.Client) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ClientID("ordercast-testkafka"))
	if err != nil {
		t.Fatalf("testkafka: client: %v", err)
	}
	return cl, kadm.NewClient(cl)
}

func sortedNames(topics map[string]int32) []string {
	names := make([]string, 0, len(topics))
	for n := range topics {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// checked remembers that the broker's group.min.session.timeout.ms was found
// low enough, once per test binary.
var checked sync.Map // bootstrap string -> error

// reset empties the real cluster and creates topics.
func reset(t testing.TB, brokers []string, topics map[string]int32) error {
	t.Helper()
	cl, adm := admin(t, brokers)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), resetTimeout)
	defer cancel()

	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return fmt.Errorf("is it running? (scripts/kafka.sh status): %w", err)
	}
	key := strings.Join(brokers, ",")
	v, ok := checked.Load(key)
	if !ok {
		v = checkSessionTimeout(ctx, adm, md)
		checked.Store(key, v)
	}
	if err, _ := v.(error); err != nil {
		return err
	}
	if err := deleteGroups(ctx, t, adm); err != nil {
		return err
	}
	return resetTopics(ctx, cl, adm, md, topics)
}

// checkSessionTimeout fails early, with the fix, when the brokers refuse the
// suite's short session timeouts (the failure would otherwise surface as
// INVALID_SESSION_TIMEOUT deep inside a consumer).
func checkSessionTimeout(ctx context.Context, adm *kadm.Client, md kadm.Metadata) error {
	if len(md.Brokers) == 0 {
		return errors.New("metadata lists no brokers")
	}
	rcs, err := adm.DescribeBrokerConfigs(ctx, md.Brokers[0].NodeID)
	if err != nil {
		return fmt.Errorf("describe broker configs: %w", err)
	}
	for _, rc := range rcs {
		for _, c := range rc.Configs {
			if c.Key != "group.min.session.timeout.ms" || c.Value == nil {
				continue
			}
			ms, err := strconv.Atoi(*c.Value)
			if err == nil && time.Duration(ms)*time.Millisecond > MinSessionTimeout {
				return fmt.Errorf("broker %d has group.min.session.timeout.ms=%d, the suite needs <= %d "+
					"(start it with ORDERCAST_KAFKA_EXTRA_PROPS=group.min.session.timeout.ms=%d scripts/kafka.sh start --clean)",
					md.Brokers[0].NodeID, ms, MinSessionTimeout.Milliseconds(), MinSessionTimeout.Milliseconds())
			}
		}
	}
	return nil
}

// deleteGroups deletes every group. A group that still has members (a
// client of an earlier test not closed, or a killed process whose session
// has not expired) cannot be deleted; it is retried for a while and then
// left, with a log line: its offsets of the deleted topics go with them.
func deleteGroups(ctx context.Context, t testing.TB, adm *kadm.Client) error {
	gctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		listed, err := adm.ListGroups(ctx)
		if err != nil {
			return fmt.Errorf("list groups: %w", err)
		}
		names := listed.Groups()
		if len(names) == 0 {
			return nil
		}
		resp, err := adm.DeleteGroups(ctx, names...)
		if err != nil {
			return fmt.Errorf("delete groups %v: %w", names, err)
		}
		var busy []string
		for _, r := range resp.Sorted() {
			switch {
			case r.Err == nil, errors.Is(r.Err, kerr.GroupIDNotFound):
			case errors.Is(r.Err, kerr.NonEmptyGroup), errors.Is(r.Err, kerr.CoordinatorLoadInProgress),
				errors.Is(r.Err, kerr.NotCoordinator), errors.Is(r.Err, kerr.CoordinatorNotAvailable):
				busy = append(busy, r.Group)
			default:
				return fmt.Errorf("delete group %s: %w", r.Group, r.Err)
			}
		}
		if len(busy) == 0 {
			return nil
		}
		select {
		case <-gctx.Done():
			t.Logf("testkafka: groups %v still have members (a client not closed, or a killed process whose session has not expired); left in place", busy)
			return nil
		case <-tick.C:
		}
	}
}

// Parallel marks t as a test that may run in parallel with the other tests
// of its package that call Parallel (t.Parallel), on the embedded broker
// only: each such test has a kfake cluster of its own, while on a real
// cluster (Real) tests share the brokers and must run one at a time (see the
// package doc), so there Parallel does nothing. Call it first in the test,
// before Cluster; tests that change package state must not call it.
func Parallel(t *testing.T) {
	if !Real() {
		t.Parallel()
	}
}
