package processor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestTxnExactlyOnceOutput: every input produces exactly one output for a
// read_committed reader, a poison record lands in the DLQ inside the same
// transactions, and a second member joining mid-stream (a rebalance that
// aborts open transactions, S12) does not duplicate or lose output.
func TestTxnExactlyOnceOutput(t *testing.T) {
	addrs := testCluster(t, map[string]int32{"in": 4, "out": 4, "g.dlq": 1})
	const n = 400
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: "in", Partition: int32(i % 4), Value: val(i)})
	}
	produce(t, addrs, recs...)
	h := func(ctx context.Context, r *kgo.Record) ([]*kgo.Record, error) {
		if string(r.Value) == string(val(7)) {
			return nil, Permanent(errors.New("poison"))
		}
		return []*kgo.Record{{Topic: "out", Key: r.Value, Value: r.Value}}, nil
	}
	start := func(id string) func() {
		tp, err := NewTransactional(id, h, Brokers(addrs...), Group("g"), Topics("in"), CommitInterval(20*time.Millisecond), MaxInFlight(10, 1<<20))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- tp.Run(ctx) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	}
	stopA := start("txn-a")
	stopB := start("txn-b")
	out := readCommitted(t, addrs, "out", n-1, 30*time.Second)
	stopA()
	stopB()
	seen := map[string]int{}
	for _, r := range out {
		seen[string(r.Value)]++
	}
	for i := range n {
		want := 1
		if i == 7 {
			want = 0
		}
		if seen[string(val(i))] != want {
			t.Fatalf("record %d: %d outputs, want %d", i, seen[string(val(i))], want)
		}
	}
	if dlq := readCommitted(t, addrs, "g.dlq", 1, 10*time.Second); len(dlq) != 1 {
		t.Fatalf("dlq: %d records", len(dlq))
	}
	// No more than n-1 outputs even after everything settles.
	if extra := readCommitted(t, addrs, "out", n, 2*time.Second); len(extra) != n-1 {
		t.Fatalf("out has %d committed records, want %d", len(extra), n-1)
	}
}

func readCommitted(t *testing.T, addrs []string, topic string, n int, within time.Duration) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}
