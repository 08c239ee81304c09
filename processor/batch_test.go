package processor

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// batchLog checks, across the batches of a BatchHandler, that per-key (or
// per-partition) order holds: a batch never holds a record whose key has a
// record in another batch still running, and each key's records arrive in
// offset order, once each.
type batchLog struct {
	mu        sync.Mutex
	unit      func(r *kgo.Record) string // the ordering unit: key or partition
	running   map[string]bool
	last      map[string]int64
	handled   map[string]int // value -> times applied
	sizes     []int
	violation []string
}

func newBatchLog(unit func(r *kgo.Record) string) *batchLog {
	return &batchLog{unit: unit, running: map[string]bool{}, last: map[string]int64{}, handled: map[string]int{}}
}

// start checks a batch at its start and marks its units running. It
// returns what end needs to undo the batch's order marks if it fails (its
// records are then handled again).
func (b *batchLog) start(recs []*kgo.Record) map[string]int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sizes = append(b.sizes, len(recs))
	mine := map[string]bool{}
	prev := map[string]int64{}
	for _, r := range recs {
		u := b.unit(r)
		if b.running[u] && !mine[u] {
			b.violation = append(b.violation, fmt.Sprintf("%s: offset %d in a batch while another batch runs it", u, r.Offset))
		}
		last, ok := b.last[u]
		if ok && r.Offset <= last {
			b.violation = append(b.violation, fmt.Sprintf("%s: offset %d after %d", u, r.Offset, last))
		}
		if _, seen := prev[u]; !seen {
			prev[u] = -1
			if ok {
				prev[u] = last
			}
		}
		b.last[u] = r.Offset
		b.running[u], mine[u] = true, true
	}
	return prev
}

// end unmarks the batch's units and, when applied, counts its records;
// when not, it undoes the batch's order marks (prev from start).
func (b *batchLog) end(recs []*kgo.Record, applied bool, prev map[string]int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range recs {
		delete(b.running, b.unit(r))
		if applied {
			b.handled[string(r.Value)]++
		}
	}
	if !applied {
		for u, o := range prev {
			if o < 0 {
				delete(b.last, u)
			} else {
				b.last[u] = o
			}
		}
	}
}

func (b *batchLog) count(v string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.handled[v]
}

func (b *batchLog) distinct() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.handled)
}

func (b *batchLog) maxSize() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := 0
	for _, s := range b.sizes {
		m = max(m, s)
	}
	return m
}

func sumCommitted(t *testing.T, addrs []string, group, topic string) int64 {
	t.Helper()
	var n int64
	for _, o := range committed(t, addrs, group, topic) {
		n += o
	}
	return n
}

// Per-key order (OrderKey) and per-partition order (OrderPartition) hold
// across batches: no record is in a batch while an earlier record of its key
// or partition is in another running batch, offsets of a key or partition go
// up, every record is applied once and committed, batches are at most
// MaxBatch and, with a backlog, hold more than one record.
func TestBatchKeepsOrder(t *testing.T) {
	for _, mode := range []Ordering{OrderKey, OrderPartition} {
		t.Run(mode.String(), func(t *testing.T) {
			addrs := testCluster(t, map[string]int32{"in": 4})
			const n, maxBatch = 2000, 32
			var recs []*kgo.Record
			for i := range n {
				recs = append(recs, &kgo.Record{Topic: "in", Partition: int32(i % 4), Key: []byte(strconv.Itoa(i % 23)), Value: val(i)})
			}
			produce(t, addrs, recs...)
			unit := func(r *kgo.Record) string { return fmt.Sprintf("%d/%s", r.Partition, r.Key) }
			if mode == OrderPartition {
				unit = func(r *kgo.Record) string { return strconv.Itoa(int(r.Partition)) }
			}
			bl := newBatchLog(unit)
			reg := prometheus.NewRegistry()
			stop := runProcessor(t, Brokers(addrs...), Group("g"), Topics("in"), WithOrdering(mode), Concurrency(4),
				CommitInterval(20*time.Millisecond), MaxBatch(maxBatch), WithMetrics(mustMetrics(t, reg)),
				WithBatchHandler(func(ctx context.Context, recs []*kgo.Record) error {
					prev := bl.start(recs)
					time.Sleep(time.Millisecond) // a database round trip: lets records queue
					bl.end(recs, true, prev)
					return nil
				}))
			waitFor(t, 30*time.Second, "all records handled", func() bool { return bl.distinct() == n })
			waitFor(t, 10*time.Second, "all committed", func() bool { return sumCommitted(t, addrs, "g", "in") == n })
			stop()
			if len(bl.violation) > 0 {
				t.Fatalf("%d order violations, first: %v", len(bl.violation), bl.violation[:min(5, len(bl.violation))])
			}
			for i := range n {
				if c := bl.count(string(val(i))); c != 1 {
					t.Fatalf("record %d applied %d times", i, c)
				}
			}
			if m := bl.maxSize(); m < 2 || m > maxBatch {
				t.Fatalf("largest batch %d records, want 2..%d", m, maxBatch)
			}
			if got := counterValue(t, reg, "ordercast_consumer_records_processed_total"); got != n {
				t.Fatalf("records_processed_total %v, want %d", got, n)
			}
			if got := counterValue(t, reg, "ordercast_consumer_batch_records"); got != float64(len(bl.sizes)) {
				t.Fatalf("batch_records count %v, want %d batches", got, len(bl.sizes))
			}
		})
	}
}

// A poison record in a batch: the batch fails (its transaction rolls back,
// nothing applied), its records are handled one at a time, the poison one
// goes to the DLQ alone and every other record is applied exactly once.
func TestBatchPoisonRecordAloneToDLQ(t *testing.T) {
	addrs := testCluster(t, map[string]int32{"in": 2, "g.dlq": 1})
	const n, poison = 200, 7
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: "in", Partition: int32(i % 2), Key: []byte(strconv.Itoa(i)), Value: val(i)})
	}
	produce(t, addrs, recs...)
	bl := newBatchLog(func(r *kgo.Record) string { return string(r.Key) })
	var poisonBatch atomic.Int32 // size of the largest batch the poison record was in
	reg := prometheus.NewRegistry()
	stop := runProcessor(t, Brokers(addrs...), Group("g"), Topics("in"), WithOrdering(OrderKey), Concurrency(2),
		CommitInterval(20*time.Millisecond), Backoff(time.Millisecond, 2*time.Millisecond), WithMetrics(mustMetrics(t, reg)),
		WithBatchHandler(func(ctx context.Context, recs []*kgo.Record) error {
			prev := bl.start(recs)
			for _, r := range recs {
				if string(r.Value) == string(val(poison)) {
					if int32(len(recs)) > poisonBatch.Load() {
						poisonBatch.Store(int32(len(recs)))
					}
					bl.end(recs, false, prev) // rolled back: nothing applied
					return Permanentf("poison record %s", r.Value)
				}
			}
			bl.end(recs, true, prev)
			return nil
		}))
	dlq := readAll(t, addrs, "g.dlq", 1, 20*time.Second)
	waitFor(t, 20*time.Second, "all others applied", func() bool { return bl.distinct() == n-1 })
	waitFor(t, 10*time.Second, "all committed", func() bool { return sumCommitted(t, addrs, "g", "in") == n })
	stop()
	if poisonBatch.Load() < 2 {
		t.Fatalf("the poison record was never in a batch with others (largest %d): the scenario did not happen", poisonBatch.Load())
	}
	if len(dlq) != 1 || string(dlq[0].Value) != string(val(poison)) {
		t.Fatalf("DLQ holds %d records, want exactly the poison one", len(dlq))
	}
	if extra := testkafkaReadAllNow(t, addrs, "g.dlq"); extra != 1 {
		t.Fatalf("DLQ holds %d records, want 1", extra)
	}
	for i := range n {
		want := 1
		if i == poison {
			want = 0
		}
		if c := bl.count(string(val(i))); c != want {
			t.Fatalf("record %d applied %d times, want %d", i, c, want)
		}
	}
	if got := counterValue(t, reg, "ordercast_consumer_batch_fallbacks_total"); got < 1 {
		t.Fatalf("batch_fallbacks_total %v, want >= 1", got)
	}
	if len(bl.violation) > 0 {
		t.Fatalf("order violations: %v", bl.violation)
	}
}

// testkafkaReadAllNow counts every record of topic (read until its end
// offsets).
func testkafkaReadAllNow(t *testing.T, addrs []string, topic string) int {
	t.Helper()
	var n int64
	for _, o := range endOffsets(t, addrs, topic) {
		n += o
	}
	return int(n)
}

// A commit never covers a record of a batch still running, and the
// records of one batch are committed together: after a first record is
// committed (offset 1), the next batch blocks; commits keep being sent
// meanwhile (CommitRefreshInterval) and none passes offset 1; after it
// returns, no commit falls inside the batch.
func TestBatchCommitsOnlyAfterBatchCompleted(t *testing.T) {
	addrs := testCluster(t, map[string]int32{"in": 1})
	produce(t, addrs, &kgo.Record{Topic: "in", Key: []byte("first"), Value: val(0)})
	var (
		mu      sync.Mutex
		sent    []int64 // offsets of partition 0 in each commit sent
		inBatch = make(chan int, 1)
		release = make(chan struct{})
		once    sync.Once
	)
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	stop := runProcessor(t, Brokers(addrs...), Group("g"), Topics("in"), WithOrdering(OrderKey), Concurrency(1),
		CommitInterval(10*time.Millisecond), CommitRefreshInterval(10*time.Millisecond), MaxBatch(100),
		withHooks(hooks{commitSent: func(_ string, _ int32, offs map[string]map[int32]int64) {
			if o, ok := offs["in"][0]; ok {
				mu.Lock()
				sent = append(sent, o)
				mu.Unlock()
			}
		}}),
		WithBatchHandler(func(ctx context.Context, recs []*kgo.Record) error {
			if recs[0].Offset >= 1 && recs[0].Offset < 2 {
				inBatch <- len(recs)
				<-release
			}
			return nil
		}))
	waitFor(t, 20*time.Second, "the first record committed", func() bool { return sumCommitted(t, addrs, "g", "in") == 1 })
	const n = 10
	var recs []*kgo.Record
	for i := 1; i <= n; i++ {
		recs = append(recs, &kgo.Record{Topic: "in", Key: []byte(strconv.Itoa(i)), Value: val(i)})
	}
	produce(t, addrs, recs...)
	var size int
	select {
	case size = <-inBatch:
	case <-time.After(20 * time.Second):
		t.Fatal("no batch started")
	}
	if size < 2 {
		t.Fatalf("the blocked batch holds %d record, want several: the scenario did not happen", size)
	}
	mu.Lock()
	before := len(sent)
	mu.Unlock()
	waitFor(t, 10*time.Second, "commits sent while the batch runs", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(sent) >= before+3
	})
	mu.Lock()
	during := append([]int64(nil), sent...)
	mu.Unlock()
	unblock()
	waitFor(t, 10*time.Second, "everything committed", func() bool { return sumCommitted(t, addrs, "g", "in") == n+1 })
	stop()
	for _, o := range during {
		if o != 1 {
			t.Fatalf("a commit of offset %d was sent while the batch [1, %d] was running (commits: %v)", o, size, during)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, o := range sent {
		if o > 1 && o < int64(1+size) {
			t.Fatalf("a commit of offset %d split the batch [1, %d] (commits: %v)", o, size, sent)
		}
	}
}

// A rebalance while batches run: member B joins while A handles batches
// spanning partitions. A's revoke waits for its running batch (DrainTimeout),
// batches whose partition is released are cancelled, and the history holds:
// no record handled by a member after its revoke began, no commit passes an
// unfinished record, nothing lost.
func TestBatchRebalanceMidBatch(t *testing.T) {
	c, addrs := testClusterC(t, map[string]int32{"in": 4})
	const perPart = 60
	var recs []*kgo.Record
	for i := range 4 * perPart {
		// Two keys per partition: batches hold runs of one key's records.
		recs = append(recs, &kgo.Record{Topic: "in", Partition: int32(i % 4), Key: []byte(strconv.Itoa(i % 8)), Value: val(i)})
	}
	produce(t, addrs, recs...)
	h := newRecorder()
	observeCommits(t, c, addrs, h)
	var spanning atomic.Int32 // batches holding records of more than one partition
	var runningA, midBatch atomic.Int32
	handler := func(ctx context.Context, recs []*kgo.Record) error {
		if m, _ := ctx.Value(memberKey{}).(string); m == "A" {
			runningA.Add(1)
			defer runningA.Add(-1)
		}
		for _, r := range recs[1:] {
			if r.Partition != recs[0].Partition {
				spanning.Add(1)
				break
			}
		}
		return sleepOrCancel(ctx, 20*time.Millisecond)
	}
	opts := func(m string) []Opt {
		hs := h.hookSet(m)
		if m == "A" {
			inner := hs.partitions
			hs.partitions = func(ev string, parts map[string][]int32) {
				if ev == "release-start:revoked" && runningA.Load() > 0 {
					midBatch.Add(1)
				}
				inner(ev, parts)
			}
		}
		bh := func(ctx context.Context, recs []*kgo.Record) error {
			return handler(context.WithValue(ctx, memberKey{}, m), recs)
		}
		return rebalanceOpts(addrs, WithOrdering(OrderKey), Concurrency(2), MaxBatch(8), WithBatchHandler(bh), DrainTimeout(2*time.Second), withHooks(hs))
	}
	a := startMember(t, opts("A")...)
	waitFor(t, 20*time.Second, "A a quarter through", func() bool {
		return h.count(func(e event) bool { return e.Kind == evCompleted }) >= perPart
	})
	b := startMember(t, opts("B")...)
	waitFor(t, 30*time.Second, "everything committed", func() bool {
		return committedEquals(t, addrs, "g", map[tp]int64{{"in", 0}: perPart, {"in", 1}: perPart, {"in", 2}: perPart, {"in", 3}: perPart})
	})
	b.stop()
	a.stop()
	ev := h.snapshot()
	if n := countKind(ev, "A", evReleaseStart, "revoked"); n == 0 {
		t.Fatal("A never had a partition revoked: the scenario did not happen")
	}
	if n := countKind(ev, "B", evCompleted, ""); n == 0 {
		t.Fatal("B handled nothing")
	}
	if midBatch.Load() == 0 {
		t.Fatal("no revoke of A began while a batch of A was running: the scenario did not happen")
	}
	if spanning.Load() == 0 {
		t.Fatal("no batch spanned partitions: the scenario did not happen")
	}
	checkHistory(t, ev, logOffsetsOf(t, addrs, "in"), true)
	checkBrokerCommits(t, ev)
}

type memberKey struct{}

// Options: MaxBatch must be >= 1; NewTransactional refuses a BatchHandler;
// a BatchHandler alone is enough (records handled one at a time go to it as
// one-record batches).
func TestBatchOptions(t *testing.T) {
	bh := WithBatchHandler(func(context.Context, []*kgo.Record) error { return nil })
	base := []Opt{Brokers("127.0.0.1:1"), Group("g"), Topics("in")}
	if _, err := New(append(base, bh)...); err != nil {
		t.Fatalf("a BatchHandler without a Handler: %v", err)
	}
	_, err := New(append(base, bh, MaxBatch(0))...)
	if err == nil || !strings.Contains(err.Error(), "MaxBatch: 0") {
		t.Fatalf("MaxBatch(0): %v, want an error naming MaxBatch", err)
	}
	if _, ok := bh.(TxnOpt); ok {
		t.Fatal("WithBatchHandler is a TxnOpt: NewTransactional would take it")
	}
	_, err = New(append(base, MaxBatch(5))...)
	if err == nil || !strings.Contains(err.Error(), "WithHandler") {
		t.Fatalf("MaxBatch without a handler: %v, want the missing handler error", err)
	}
}
