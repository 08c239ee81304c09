package processor

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
)

// TestTxnShortSessionTimeout: a TxnProcessor with a SessionTimeout under
// franz-go's fixed 3s heartbeat joins and keeps its partitions (it
// heartbeats every third of the session timeout, as New's members do).
// Without that it never held a partition: its session expired between
// heartbeats.
func TestTxnShortSessionTimeout(t *testing.T) {
	addrs := testCluster(t, map[string]int32{"in": 2, "out": 1})
	tx, err := NewTransactional("txn-hb", func(_ context.Context, r *kgo.Record) ([]*kgo.Record, error) { return nil, nil },
		Brokers(addrs...), Group("g"), Topics("in"), SessionTimeout(1500*time.Millisecond), RebalanceTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	testkafka.Run(t, tx)
	waitFor(t, 10*time.Second, "both partitions held", func() bool { return len(tx.Health().Partitions) == 2 })
	gen := tx.Health().Generation
	produce(t, addrs, &kgo.Record{Topic: "in", Partition: 0, Value: []byte("x")})
	waitFor(t, 10*time.Second, "the record committed", func() bool { return committed(t, addrs, "g", "in")[0] == 1 })
	if h := tx.Health(); h.Generation != gen || len(h.Partitions) != 2 {
		t.Fatalf("membership changed (generation %d -> %d, partitions %v): the session expired", gen, h.Generation, h.Partitions)
	}
}
