package processor

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/promtest"
	"github.com/ordercast/ordercast/internal/testkit/testkafka"
)

// testCluster starts an embedded kfake broker with the given topics
// (name -> partitions) and returns its seed addresses. The cluster also holds
// "g.dlq" (1 partition) unless topics name it: the DLQ of group "g", which
// most tests use, since Run refuses to start without its DLQ.
func testCluster(t *testing.T, topics map[string]int32) []string {
	t.Helper()
	return testkafka.Cluster(t, withGroupDLQ(topics))
}

func withGroupDLQ(topics map[string]int32) map[string]int32 {
	out := map[string]int32{DLQTopic("g"): 1}
	for k, v := range topics {
		out[k] = v
	}
	return out
}

// testClusterC is testCluster that also returns the cluster, for faults and
// controls.
func testClusterC(t *testing.T, topics map[string]int32) (*kfake.Cluster, []string) {
	t.Helper()
	testkafka.SkipIfReal(t, "injects broker faults or controls (kfake)")
	return testkafka.Fake(t, withGroupDLQ(topics))
}

func produce(t *testing.T, addrs []string, recs ...*kgo.Record) { testkafka.Produce(t, addrs, recs...) }

// readAll reads every record of topic from the start (read_uncommitted)
// until n are read or within passes.
func readAll(t *testing.T, addrs []string, topic string, n int, within time.Duration) []*kgo.Record {
	t.Helper()
	return testkafka.ReadN(t, addrs, topic, n, within, false)
}

// committed returns the group's committed offsets for topic.
func committed(t *testing.T, addrs []string, group, topic string) map[int32]int64 {
	t.Helper()
	return testkafka.Committed(t, addrs, group, topic)
}

// waitFor polls cond every 10ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testkafka.WaitFor(t, d, what, cond)
}

// history records what handlers saw, concurrency-safe.
type history struct {
	mu   sync.Mutex
	seen map[string]int // value -> handled count
	log  []string
}

func newHistory() *history { return &history{seen: make(map[string]int)} }

func (h *history) add(v string) {
	h.mu.Lock()
	h.seen[v]++
	h.log = append(h.log, v)
	h.mu.Unlock()
}

func (h *history) count(v string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seen[v]
}

func (h *history) distinct() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.seen)
}

func runProcessor(t *testing.T, opts ...Opt) (cancel func()) {
	t.Helper()
	p, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return testkafka.Run(t, p)
}

func val(i int) []byte { return []byte(fmt.Sprintf("v%05d", i)) }

// endOffsets returns the end offsets (high watermarks) of topics.
func endOffsets(t testing.TB, addrs []string, topics ...string) map[tp]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), topics...)
	if err != nil {
		t.Fatal(err)
	}
	out := map[tp]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("end offset of %s[%d]: %v", o.Topic, o.Partition, o.Err)
		}
		out[tp{o.Topic, o.Partition}] = o.Offset
	})
	return out
}

// member is a running processor.
type member struct {
	p    *Processor
	stop func() // cancels Run and waits for it to return (30s at most)
}

// startMember creates and runs a processor; it is stopped at the end of the
// test if not before.
func startMember(t *testing.T, opts ...Opt) *member {
	t.Helper()
	p, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return &member{p: p, stop: testkafka.Run(t, p)}
}

// committedEquals reports whether the group's committed offsets for topic
// equal want for every partition in want.
func committedEquals(t *testing.T, addrs []string, group string, want map[tp]int64) bool {
	t.Helper()
	topics := map[string]bool{}
	for k := range want {
		topics[k.topic] = true
	}
	for topic := range topics {
		c := committed(t, addrs, group, topic)
		for k, w := range want {
			if k.topic == topic && c[k.partition] != w {
				return false
			}
		}
	}
	return true
}

// dlqHeaders returns the headers of r as a map (last value wins).
func headerMap(r *kgo.Record) map[string]string {
	m := map[string]string{}
	for _, h := range r.Headers {
		m[h.Key] = string(h.Value)
	}
	return m
}

// counterValue sums the values of every series of the counter or gauge name
// in reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	return promtest.Sum(t, reg, name)
}

// parallel runs t in parallel with the package's other parallel tests on the
// embedded broker (testkafka.Parallel): the tests that mostly wait (session
// and request timeouts, held requests) overlap, which keeps `make test`
// short. A test calling it must not change package state.
func parallel(t *testing.T) { testkafka.Parallel(t) }

// mustMetrics is NewMetrics, failing t on error.
func mustMetrics(t testing.TB, reg prometheus.Registerer, opts ...MetricsOpt) *Metrics {
	t.Helper()
	m, err := NewMetrics(reg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
