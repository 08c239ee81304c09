package dlq_test

import (
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/processor"
)

// testCluster starts an embedded kfake broker with the given topics
// (name -> partitions) and returns its seed addresses and an admin client.
func testCluster(t *testing.T, topics map[string]int32) ([]string, *kadm.Client) {
	t.Helper()
	addrs := testkafka.Cluster(t, topics)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	return addrs, adm
}

// produce writes recs synchronously (manual partitioner) and returns them
// as written.
func produce(t *testing.T, addrs []string, recs ...*kgo.Record) []*kgo.Record {
	t.Helper()
	return testkafka.Produce(t, addrs, recs...)
}

// waitFor polls cond every 10ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testkafka.WaitFor(t, d, what, cond)
}

// runProcessor starts a processor and returns a function that stops it
// (also called at cleanup) and waits for Run to return.
func runProcessor(t *testing.T, opts ...processor.Opt) (stop func()) {
	t.Helper()
	p, err := processor.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return testkafka.Run(t, p)
}

// counter counts handled values, concurrency-safe.
type counter struct {
	mu sync.Mutex
	n  map[string]int
	hs map[string][]kgo.RecordHeader
}

func newCounter() *counter {
	return &counter{n: map[string]int{}, hs: map[string][]kgo.RecordHeader{}}
}

func (c *counter) add(r *kgo.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[string(r.Value)]++
	c.hs[string(r.Value)] = r.Headers
}

func (c *counter) get(v string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[v]
}

func (c *counter) header(v, key string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, h := range c.hs[v] {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
