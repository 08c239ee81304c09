package ops_test

import (
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
