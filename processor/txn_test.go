package processor

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
)

// TestTxnExactlyOnceOutput: every input produces exactly one output for a
// read_committed reader, a poison record lands in the DLQ inside the same
// transactions, and a second member joining mid-stream (a rebalance that
// aborts open transactions, S12) does not duplicate or lose output.
func TestTxnExactlyOnceOutput(t *testing.T) {
	parallel(t)
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
	reg := prometheus.NewRegistry()
	metrics := mustMetrics(t, reg)
	start := func(id string) func() {
		tp, err := NewTransactional(id, h, Brokers(addrs...), Group("g"), Topics("in"), CommitInterval(20*time.Millisecond), MaxInFlight(10, 1<<20), WithMetrics(metrics))
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
	// The members report the runtime's metrics like New's: every input
	// processed (some twice, after aborts), the poison dead-lettered, and
	// lag back to 0 on every partition.
	waitFor(t, 20*time.Second, "lag 0 on every partition of in", func() bool {
		for p := range 4 {
			if gaugeValue(t, reg, "ordercast_consumer_lag", strconv.Itoa(p)) != 0 {
				return false
			}
		}
		return true
	})
	if got := counterValue(t, reg, "ordercast_consumer_records_processed_total"); got < n-1 {
		t.Errorf("records_processed_total = %v, want >= %d", got, n-1)
	}
	if got := counterValue(t, reg, "ordercast_consumer_records_dead_lettered_total"); got < 1 {
		t.Errorf("records_dead_lettered_total = %v, want >= 1", got)
	}
	if got := counterValue(t, reg, "ordercast_consumer_fetch_errors_total"); got != 0 {
		t.Errorf("fetch_errors_total = %v on a healthy broker, want 0 (a poll's own deadline is not a fetch error)", got)
	}
	if got := counterValue(t, reg, "ordercast_consumer_rebalances_total"); got < 2 {
		t.Errorf("rebalances_total = %v, want >= 2 (two members joined)", got)
	}
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
	return testkafka.ReadN(t, addrs, topic, n, within, true)
}

// TestTxnTransactionTimeout: TransactionTimeout reaches the transaction
// coordinator. A transaction that stays open longer than it (the member
// stalls after producing the transaction's outputs, before ending it: a
// test seam, as a slow handler no longer holds a transaction open) is aborted
// by the broker, the member resumes from the committed offsets, and every
// input still has exactly one committed output. With Kafka's default of 60s
// nothing would be aborted and the Aborted count would stay 0. Health lists
// the partitions the member holds while it runs.
func TestTxnTransactionTimeout(t *testing.T) {
	parallel(t)
	addrs := testCluster(t, map[string]int32{"in": 2, "out": 1, "g.dlq": 1})
	const n = 40
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: "in", Partition: 0, Value: val(i)})
	}
	produce(t, addrs, recs...)
	var stalled atomic.Bool
	h := func(ctx context.Context, r *kgo.Record) ([]*kgo.Record, error) {
		return []*kgo.Record{{Topic: "out", Value: r.Value}}, nil
	}
	tp, err := NewTransactional("txn-timeout", h, Brokers(addrs...), Group("g"), Topics("in"),
		CommitInterval(100*time.Millisecond), TransactionTimeout(2*time.Second), Backoff(50*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	tp.cfg.hooks.txnProduced = func(records int) {
		// A transaction of commits alone is not known to the coordinator
		// before its end (no AddPartitionsToTxn): stall one with records.
		if records > 0 && stalled.CompareAndSwap(false, true) {
			// Well past the 2s transaction timeout (plus the
			// coordinator's 1s expiry check on the test broker,
			// scripts/kafka.sh). The timeout itself stays well above
			// the commit interval, as TransactionTimeout's doc asks: at
			// 1s with a 1s interval, a loaded machine aborted every
			// transaction and nothing committed.
			time.Sleep(6 * time.Second)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tp.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for h := tp.Health(); !slices.Equal(h.Partitions, []string{"in[0]", "in[1]"}); h = tp.Health() {
		if time.Now().After(deadline) {
			t.Fatalf("Health.Partitions = %v, want [in[0] in[1]]", h.Partitions)
		}
		time.Sleep(10 * time.Millisecond)
	}
	out := readCommitted(t, addrs, "out", n, 30*time.Second)
	seen := map[string]int{}
	for _, r := range out {
		seen[string(r.Value)]++
	}
	for i := range n {
		if seen[string(val(i))] != 1 {
			t.Fatalf("record %d: %d committed outputs, want 1", i, seen[string(val(i))])
		}
	}
	if _, aborted := tp.Stats(); aborted == 0 {
		t.Fatal("no transaction was aborted: the 2s TransactionTimeout did not reach the coordinator")
	}
}

// TestTxnPollDeadlineIsNotAFetchError: a transaction keeps polling until its
// commit interval ends; that poll's own deadline is not a fetch error (it was
// logged as a WARN and counted, many times a second).
func TestTxnPollDeadlineIsNotAFetchError(t *testing.T) {
	addrs := testCluster(t, map[string]int32{"in": 1, "out": 1})
	produce(t, addrs, &kgo.Record{Topic: "in", Value: val(1)})
	reg := prometheus.NewRegistry()
	h := func(ctx context.Context, r *kgo.Record) ([]*kgo.Record, error) {
		return []*kgo.Record{{Topic: "out", Value: r.Value}}, nil
	}
	tp, err := NewTransactional("txn-deadline", h, Brokers(addrs...), Group("g"), Topics("in"),
		CommitInterval(300*time.Millisecond), WithMetrics(mustMetrics(t, reg)))
	if err != nil {
		t.Fatal(err)
	}
	stop := testkafka.Run(t, tp)
	if out := readCommitted(t, addrs, "out", 1, 30*time.Second); len(out) != 1 {
		t.Fatalf("%d outputs, want 1", len(out))
	}
	stop()
	if got := counterValue(t, reg, "ordercast_consumer_fetch_errors_total"); got != 0 {
		t.Fatalf("fetch_errors_total = %v, want 0", got)
	}
}

// TestTxnOutputFailedBeforeBuffering: an output that franz-go fails before
// buffering it (a record over the producer's size limit here; the runtime
// catches one with no topic before producing it) has its promise run on
// another goroutine, and Flush
// does not wait for it. The transaction must still abort: committing it
// would commit the input's offset without that output. Each of the 20
// inputs is its own transaction (MaxInFlight 1) and fails once, so 20
// transactions must abort; without waiting for every promise the runtime
// committed them (Flush had nothing buffered to wait for), and the inputs
// had no output at all.
func TestTxnOutputFailedBeforeBuffering(t *testing.T) {
	parallel(t)
	addrs := testCluster(t, map[string]int32{"in": 1, "out": 1, "g.dlq": 1})
	const n = 20
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: "in", Value: val(i)})
	}
	produce(t, addrs, recs...)
	var mu sync.Mutex
	failed := map[string]bool{}
	h := func(_ context.Context, r *kgo.Record) ([]*kgo.Record, error) {
		mu.Lock()
		defer mu.Unlock()
		if !failed[string(r.Value)] {
			failed[string(r.Value)] = true
			return []*kgo.Record{{Topic: "out", Value: bytes.Repeat(r.Value, 1<<20/len(r.Value)+1)}}, nil // over 1 MB: failed before buffering
		}
		return []*kgo.Record{{Topic: "out", Value: r.Value}}, nil
	}
	tp, err := NewTransactional("txn-before-buf", h, Brokers(addrs...), Group("g"), Topics("in"),
		CommitInterval(time.Second), MaxInFlight(1, 1<<20), Backoff(10*time.Millisecond, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	stop := testkafka.Run(t, tp)
	waitFor(t, 60*time.Second, "committed offsets at the end of in", func() bool {
		return committedEquals(t, addrs, "g", endOffsets(t, addrs, "in"))
	})
	stop()
	if committed, aborted := tp.Stats(); aborted < n {
		t.Fatalf("transactions committed=%d aborted=%d: a transaction whose output failed committed", committed, aborted)
	}
	out := readCommitted(t, addrs, "out", n+1, 2*time.Second)
	seen := map[string]int{}
	for _, r := range out {
		seen[string(r.Value)]++
	}
	for i := range n {
		if seen[string(val(i))] != 1 {
			t.Fatalf("input %s: %d committed outputs, want 1", val(i), seen[string(val(i))])
		}
	}
}
