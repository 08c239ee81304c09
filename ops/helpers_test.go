package ops_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkafka"
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

// produce writes recs synchronously; a record with Partition >= 0 set
// explicitly goes to that partition (manual partitioner).
func produce(t *testing.T, addrs []string, recs ...*kgo.Record) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	res := cl.ProduceSync(context.Background(), recs...)
	if err := res.FirstErr(); err != nil {
		t.Fatal(err)
	}
	out := make([]*kgo.Record, len(res))
	for i, r := range res {
		out[i] = r.Record
	}
	return out
}

// waitFor polls cond every 10ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
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
