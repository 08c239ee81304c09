package processor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
)

// txnBatchInput is n records of 40 keys over 4 partitions of "in", each
// key's records in one partition and in sequence: value "k<key>-<seq>".
func txnBatchInput(n int) []*kgo.Record {
	var recs []*kgo.Record
	seq := map[int]int{}
	for i := range n {
		k := i % 40
		recs = append(recs, &kgo.Record{Topic: "in", Partition: int32(k % 4), Key: []byte(fmt.Sprintf("k%02d", k)),
			Value: []byte(fmt.Sprintf("k%02d-%04d", k, seq[k]))})
		seq[k]++
	}
	return recs
}

// echoOf is the output of one input (echo's): the same key and value on "out".
func echoOf(r *kgo.Record) []*kgo.Record {
	outs, _ := echo(context.Background(), r)
	return outs
}

// checkEcho checks that out holds exactly one output per input of in but
// those of skip, and each key's outputs in the inputs' order.
func checkEcho(t *testing.T, in, out []*kgo.Record, skip map[string]bool) {
	t.Helper()
	seen := map[string]int{}
	last := map[string]string{}
	for _, r := range out {
		v := string(r.Value)
		seen[v]++
		k := string(r.Key)
		if prev, ok := last[k]; ok && prev >= v {
			t.Errorf("key %s: output %s after %s (out of order or repeated)", k, v, prev)
		}
		last[k] = v
	}
	for _, r := range in {
		want := 1
		if skip[string(r.Value)] {
			want = 0
		}
		if got := seen[string(r.Value)]; got != want {
			t.Errorf("input %s: %d outputs, want %d", r.Value, got, want)
		}
	}
}

// aloneLog counts, by value, the records its handler (a TxnHandler that
// echoes) transformed alone. Safe for concurrent use.
type aloneLog struct {
	mu sync.Mutex
	n  map[string]int
}

func (a *aloneLog) handler(_ context.Context, r *kgo.Record) ([]*kgo.Record, error) {
	a.mu.Lock()
	if a.n == nil {
		a.n = map[string]int{}
	}
	a.n[string(r.Value)]++
	a.mu.Unlock()
	return echoOf(r), nil
}

// check fails t unless the records transformed alone are exactly those of
// failed (values whose batch failed them), each once.
func (a *aloneLog) check(t *testing.T, failed map[string]bool) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	for v := range failed {
		if a.n[v] != 1 {
			t.Errorf("%s: failed in its batch, transformed alone %d times, want 1", v, a.n[v])
		}
	}
	for v, c := range a.n {
		if !failed[v] {
			t.Errorf("%s: transformed alone %d times though no batch failed it", v, c)
		}
	}
}

// runTxnBatch runs a member of group "g" on "in" in key order, with h and
// bh, committing every 20 ms, with its metrics on the returned registry.
func runTxnBatch(t *testing.T, addrs []string, id string, h TxnHandler, bh TxnBatchHandler, opts ...TxnOpt) (*prometheus.Registry, func()) {
	t.Helper()
	reg := prometheus.NewRegistry()
	base := []TxnOpt{Brokers(addrs...), Group("g"), Topics("in"), WithOrdering(OrderKey), WithTxnBatchHandler(bh),
		CommitInterval(20 * time.Millisecond), WithMetrics(mustMetrics(t, reg))}
	tp, err := NewTransactional(id, h, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return reg, testkafka.Run(t, tp)
}

// TestTxnBatchExactlyOnce: with a TxnBatchHandler every input has exactly one
// committed output, in each key's order, through a second member joining
// mid-stream (a rebalance that aborts open transactions), and the batches
// hold more than one record and at most MaxBatch; a record the batch reports
// failed permanently (FailRecords) goes to the DLQ inside the transaction
// while the rest of its batch is done; the TxnHandler sees only the
// records that do not go in a batch.
func TestTxnBatchExactlyOnce(t *testing.T) {
	parallel(t)
	addrs := testCluster(t, map[string]int32{"in": 4, "out": 4})
	const n, maxBatch = 2000, 16
	in := txnBatchInput(n)
	produce(t, addrs, in...)
	poison := string(in[77].Value)
	var largest, batches, singles atomic.Int64
	bh := func(ctx context.Context, recs []*kgo.Record) ([][]*kgo.Record, error) {
		batches.Add(1)
		if int64(len(recs)) > largest.Load() {
			largest.Store(int64(len(recs)))
		}
		outs := make([][]*kgo.Record, len(recs))
		failed := map[int]error{}
		for i, r := range recs {
			if string(r.Value) == poison {
				failed[i] = Permanent(errors.New("poison"))
				continue
			}
			outs[i] = echoOf(r)
		}
		if len(failed) > 0 {
			return outs, FailRecords(failed)
		}
		return outs, nil
	}
	h := func(ctx context.Context, r *kgo.Record) ([]*kgo.Record, error) {
		singles.Add(1)
		if string(r.Value) == poison {
			return nil, Permanent(errors.New("poison"))
		}
		return echoOf(r), nil
	}
	reg := prometheus.NewRegistry()
	metrics := mustMetrics(t, reg)
	start := func(id string) func() {
		tp, err := NewTransactional(id, h, Brokers(addrs...), Group("g"), Topics("in"), WithOrdering(OrderKey),
			WithTxnBatchHandler(bh), MaxBatch(maxBatch), CommitInterval(20*time.Millisecond), WithMetrics(metrics))
		if err != nil {
			t.Fatal(err)
		}
		return testkafka.Run(t, tp)
	}
	stopA := start("txn-batch-a")
	readCommitted(t, addrs, "out", n/4, 30*time.Second)
	stopB := start("txn-batch-b")
	out := readCommitted(t, addrs, "out", n-1, 30*time.Second)
	stopA()
	stopB()
	if extra := readCommitted(t, addrs, "out", n, 2*time.Second); len(extra) != n-1 {
		t.Fatalf("out has %d committed records, want %d", len(extra), n-1)
	}
	checkEcho(t, in, out, map[string]bool{poison: true})
	dlq := readCommitted(t, addrs, "g.dlq", 1, 10*time.Second)
	if len(dlq) != 1 || string(dlq[0].Value) != poison {
		t.Fatalf("dlq: %d records, want the poison alone", len(dlq))
	}
	if got := largest.Load(); got < 2 || got > maxBatch {
		t.Errorf("largest batch %d records, want 2..%d", got, maxBatch)
	}
	if got := counterValue(t, reg, "ordercast_consumer_records_processed_total"); got < n-1 {
		t.Errorf("records_processed_total = %v, want >= %d", got, n-1)
	}
	// A batch of one record whose lane's next records wait is still a
	// batch: the TxnHandler runs only what cannot be batched (here: none
	// but the failed poison, already dead-lettered by its batch).
	if got := singles.Load(); got != 0 {
		t.Errorf("TxnHandler called %d times, want 0 (every record could go in a batch)", got)
	}
	t.Logf("%d batches, largest %d", batches.Load(), largest.Load())
}

// TestTxnBatchFallsBack: a batch that fails as a whole (an error, a panic,
// outputs of another length than the records, an output without a topic)
// commits nothing of itself, and each of its records is transformed again
// alone by the TxnHandler, which then decides: every input has exactly one
// output, in each key's order, and the failure is counted as a fallback.
func TestTxnBatchFallsBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail func(recs []*kgo.Record) ([][]*kgo.Record, error)
	}{
		{"error", func([]*kgo.Record) ([][]*kgo.Record, error) { return nil, errors.New("database down") }},
		{"panic", func([]*kgo.Record) ([][]*kgo.Record, error) { panic("boom") }},
		{"short outputs", func(recs []*kgo.Record) ([][]*kgo.Record, error) {
			return make([][]*kgo.Record, len(recs)-1), nil
		}},
		{"output without topic", func(recs []*kgo.Record) ([][]*kgo.Record, error) {
			outs := make([][]*kgo.Record, len(recs))
			outs[0] = []*kgo.Record{{Value: []byte("x")}}
			return outs, nil
		}},
		{"empty BatchError", func([]*kgo.Record) ([][]*kgo.Record, error) { return nil, FailRecords(nil) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parallel(t)
			addrs := testCluster(t, map[string]int32{"in": 4, "out": 4})
			const n = 400
			in := txnBatchInput(n)
			produce(t, addrs, in...)
			var mu sync.Mutex
			failedOnce := map[string]bool{} // values whose batch failed
			var singles aloneLog            // values the TxnHandler transformed
			var failures atomic.Int64
			bh := func(ctx context.Context, recs []*kgo.Record) ([][]*kgo.Record, error) {
				if len(recs) > 1 && failures.Load() < 5 {
					failures.Add(1)
					mu.Lock()
					for _, r := range recs {
						failedOnce[string(r.Value)] = true
					}
					mu.Unlock()
					return tc.fail(recs)
				}
				return echoOuts(recs), nil
			}
			reg, stop := runTxnBatch(t, addrs, "txn-fallback", singles.handler, bh)
			out := readCommitted(t, addrs, "out", n, 30*time.Second)
			stop()
			checkEcho(t, in, out, nil)
			if failures.Load() == 0 {
				t.Fatal("no batch of more than one record: the fallback was not exercised")
			}
			mu.Lock()
			defer mu.Unlock()
			singles.check(t, failedOnce)
			if got := counterValue(t, reg, "ordercast_consumer_batch_fallbacks_total"); got != float64(failures.Load()) {
				t.Errorf("batch_fallbacks_total = %v, want %d", got, failures.Load())
			}
		})
	}
}

// TestTxnBatchPartial: a batch that reports StopAt(i, transient error)
// completes its records before i, counts one failed attempt of record i,
// which is retried alone by the TxnHandler after its backoff, and its
// records after i run again later (in a batch): every input has exactly one
// output in each key's order, and the failed record was transformed alone
// once.
func TestTxnBatchPartial(t *testing.T) {
	parallel(t)
	addrs := testCluster(t, map[string]int32{"in": 4, "out": 4})
	const n = 600
	in := txnBatchInput(n)
	produce(t, addrs, in...)
	var mu sync.Mutex
	stopped := map[string]bool{} // the records a batch stopped at
	var singles aloneLog
	bh := func(ctx context.Context, recs []*kgo.Record) ([][]*kgo.Record, error) {
		outs := make([][]*kgo.Record, len(recs))
		for i, r := range recs {
			v := string(r.Value)
			mu.Lock()
			stop := i > 0 && len(stopped) < 5 && !stopped[v]
			if stop {
				stopped[v] = true
			}
			mu.Unlock()
			if stop {
				return outs, StopAt(i, errors.New("transient"))
			}
			outs[i] = echoOf(r)
		}
		return outs, nil
	}
	reg, stop := runTxnBatch(t, addrs, "txn-partial", singles.handler, bh, Backoff(time.Millisecond, 5*time.Millisecond))
	out := readCommitted(t, addrs, "out", n, 30*time.Second)
	stop()
	checkEcho(t, in, out, nil)
	mu.Lock()
	defer mu.Unlock()
	if len(stopped) == 0 {
		t.Fatal("no batch stopped part-way: the partial outcome was not exercised")
	}
	singles.check(t, stopped)
	if got := counterValue(t, reg, "ordercast_consumer_records_failed_total"); got != float64(len(stopped)) {
		t.Errorf("records_failed_total = %v, want %d (one failed attempt per stopped record)", got, len(stopped))
	}
}

// TestTxnBatchOptions: WithTxnBatchHandler is NewTransactional's alone, nil
// is refused, MaxBatch must be >= 1.
func TestTxnBatchOptions(t *testing.T) {
	bh := WithTxnBatchHandler(func(context.Context, []*kgo.Record) ([][]*kgo.Record, error) { return nil, nil })
	h := func(context.Context, *kgo.Record) ([]*kgo.Record, error) { return nil, nil }
	base := []TxnOpt{Brokers("127.0.0.1:1"), Group("g"), Topics("in")}
	if _, err := NewTransactional("id", h, append(base, bh, MaxBatch(8))...); err != nil {
		t.Fatalf("WithTxnBatchHandler, MaxBatch(8): %v", err)
	}
	for _, tc := range []struct {
		name string
		opts []TxnOpt
		want string
	}{
		{"nil handler", []TxnOpt{WithTxnBatchHandler(nil)}, "WithTxnBatchHandler: nil"},
		{"MaxBatch 0", []TxnOpt{bh, MaxBatch(0)}, "MaxBatch: 0"},
	} {
		_, err := NewTransactional("id", h, append(base, tc.opts...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	nop := func(context.Context, *kgo.Record) error { return nil }
	_, err := New(Brokers("127.0.0.1:1"), Group("g"), Topics("in"), WithHandler(nop), bh)
	if err == nil || !strings.Contains(err.Error(), "WithTxnBatchHandler: for NewTransactional only") {
		t.Errorf("New with WithTxnBatchHandler: %v, want it refused", err)
	}
	_, err = NewQueue(Brokers("127.0.0.1:1"), Group("g"), Topics("in"), WithHandler(nop), bh)
	if err == nil || !strings.Contains(err.Error(), "WithTxnBatchHandler") {
		t.Errorf("NewQueue with WithTxnBatchHandler: %v, want it refused", err)
	}
}
