package processor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Tests of the exactly-once mode's batches (txn_batch.go) at the
// level of the session's work (txnWork): no broker, the lanes and the
// batch's settlement driven directly, so that an interleaving can be set up
// deterministically.

// workTxn is a TxnProcessor with bh as its TxnBatchHandler (its
// TxnHandler echoes); conc workers run the work's lanes (0: none, the test
// drives runBatchLocked itself).
func workTxn(t *testing.T, bh TxnBatchHandler, conc int, opts ...TxnOpt) (*TxnProcessor, *txnWork) {
	t.Helper()
	base := []TxnOpt{Brokers("127.0.0.1:1"), Group("g"), Topics("in"), WithTxnBatchHandler(bh)}
	p, err := NewTransactional("work", echo, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	p.cfg.concurrency = conc
	w := newTxnWork(p, context.Background())
	t.Cleanup(func() { w.stop(5 * time.Second) })
	return p, w
}

// workPart gives the work partition in/part (no committed offset) and
// admits recs into it (offsets from 0, keys as given: "" for a null key).
func workPart(w *txnWork, part int32, keys ...string) *txnPart {
	k := tp{"in", part}
	w.initParts([]tp{k}, nil)
	w.mu.Lock()
	defer w.mu.Unlock()
	ps := w.parts[k]
	for i, key := range keys {
		r := &kgo.Record{Topic: "in", Partition: part, Offset: int64(i), Value: []byte(fmt.Sprintf("%d/%d", part, i))}
		if key != "" {
			r.Key = []byte(key)
		}
		w.admitLocked(ps, r, new(txnRec))
	}
	return ps
}

// completedOffsets are the offsets of ps's completed records, in completion
// order. w.mu held.
func completedOffsets(ps *txnPart) []int64 {
	var out []int64
	for _, r := range ps.completed {
		out = append(out, r.entry.offset)
	}
	return out
}

// echoOuts is each record's echo.
func echoOuts(recs []*kgo.Record) [][]*kgo.Record {
	outs := make([][]*kgo.Record, len(recs))
	for i, r := range recs {
		outs[i], _ = echo(context.Background(), r)
	}
	return outs
}

// TestTxnBatchNoEmptyBatch: the worker checks that the first record of its
// lane is batchable (batchableLocked) and runBatchLocked checks it again
// when it takes the lane's records; a refusal of that record's outputs is
// recorded without w.mu (outputPromise), so it may come in between. Then
// runBatchLocked takes nothing and reports false (the worker runs the
// record alone): the TxnBatchHandler is never called with no record. The
// interleaving is set up by entering runBatchLocked with the refusal
// already recorded, as the worker would after the race.
func TestTxnBatchNoEmptyBatch(t *testing.T) {
	var mu sync.Mutex
	var sizes []int
	bh := func(ctx context.Context, recs []*kgo.Record) ([][]*kgo.Record, error) {
		mu.Lock()
		sizes = append(sizes, len(recs))
		mu.Unlock()
		return echoOuts(recs), nil
	}
	p, w := workTxn(t, bh, 0)
	workPart(w, 0, "", "")
	w.mu.Lock()
	l := w.ready.pop()
	if !w.batchableLocked(l.queue.first()) {
		w.mu.Unlock()
		t.Fatal("setup: the first record is not batchable")
	}
	// The worker has found it batchable; an output of it, in the
	// transaction being ended, is refused now (outputPromise: no w.mu).
	p.refusedMu.Lock()
	p.refused = map[tpo]*refusal{{"in", 0, 0}: {err: errors.New("MESSAGE_TOO_LARGE")}}
	p.refusedN.Store(1)
	p.refusedMu.Unlock()
	ran := w.runBatchLocked(l)
	w.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	if ran || len(sizes) > 0 {
		t.Errorf("runBatchLocked = %v with calls of sizes %v; want false and no call (the refused record runs alone)", ran, sizes)
	}
}

// TestTxnBatchRefusalOfAMovedPartition: only the record whose outputs were
// refused is kept out of batches, not every record while a refusal is
// counted. A refusal is forgotten only when its input commits on this
// member (forgetRefusals); when the input's partition moves to another
// member before that, the entry stays (up to maxRefused), and batching
// would be off on this member for good if any refusal kept every record
// alone.
func TestTxnBatchRefusalOfAMovedPartition(t *testing.T) {
	bh := func(ctx context.Context, recs []*kgo.Record) ([][]*kgo.Record, error) { return echoOuts(recs), nil }
	p, w := workTxn(t, bh, 0)
	// An output of in/3@42 was refused (the transaction aborted), then in/3
	// was revoked: its input never commits here.
	p.refusedMu.Lock()
	p.refused = map[tpo]*refusal{{"in", 3, 42}: {err: errors.New("MESSAGE_TOO_LARGE"), aborted: 1}}
	p.refusedN.Store(1)
	p.refusedMu.Unlock()
	p.noteRebalance(map[string][]int32{"in": {3}})
	// The next commits: records of in/0.
	p.forgetRefusals(&txnCut{recs: []*txnRec{{rec: &kgo.Record{Topic: "in", Partition: 0, Offset: 7}}}})
	ps := workPart(w, 0, "")
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.batchableLocked(ps.lane.queue.first()) {
		t.Errorf("a record of in/0 is not batchable after a commit: the refusal of in/3@42 (revoked) keeps every record out of batches (refusedN %d)",
			p.refusedN.Load())
	}
}

// TestTxnBatchDropMidBatch: a batch whose records are dropped while
// the handler runs (an abort, a rebalance: drop) completes nothing, neither
// in the old partition nor in the new generation, and the worker goes on
// with the new generation's records.
func TestTxnBatchDropMidBatch(t *testing.T) {
	started := make(chan struct{}, 8)
	release := make(chan struct{})
	var mu sync.Mutex
	calls := 0
	bh := func(ctx context.Context, recs []*kgo.Record) ([][]*kgo.Record, error) {
		mu.Lock()
		calls++
		first := calls == 1
		mu.Unlock()
		started <- struct{}{}
		if first {
			<-release // returns its outputs even though ctx is cancelled
		}
		return echoOuts(recs), nil
	}
	_, w := workTxn(t, bh, 1)
	old := workPart(w, 0, "", "", "")
	<-started
	w.drop()
	fresh := workPart(w, 0, "")
	close(release)
	<-started // the second batch: the first one's settlement is over (one worker)
	waitFor(t, 5*time.Second, "the new generation's record completed", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(fresh.completed) == 1
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	if got := completedOffsets(old); len(got) != 0 {
		t.Errorf("dropped batch completed offsets %v", got)
	}
	if w.done != 1 || w.recs != 1 {
		t.Errorf("done %d, recs %d; want 1, 1 (the new generation's record only)", w.done, w.recs)
	}
}

// TestTxnBatchFailRecordsPerLane: FailRecords with a transient error
// on a lane's second record (OrderKey): the lane's first record completes,
// the failed one counts one attempt and the lane waits out its backoff
// with it first, the lane's later record (reported done) does not
// complete, and the other lane of the batch completes; lanes of other
// partitions in the same batch complete too.
func TestTxnBatchFailRecordsPerLane(t *testing.T) {
	var batch []*kgo.Record
	bh := func(ctx context.Context, recs []*kgo.Record) ([][]*kgo.Record, error) {
		batch = slices.Clone(recs)
		return echoOuts(recs), FailRecords(map[int]error{1: errors.New("transient")})
	}
	_, w := workTxn(t, bh, 0, WithOrdering(OrderKey), Backoff(time.Hour, time.Hour))
	p0 := workPart(w, 0, "a", "a", "a", "b", "b")
	p1 := workPart(w, 1, "c")
	w.mu.Lock()
	defer w.mu.Unlock()
	l := w.ready.pop()
	w.runBatchLocked(l)
	if len(batch) != 6 {
		t.Fatalf("batch of %d records, want 6 (two lanes of in/0, one of in/1)", len(batch))
	}
	if got := completedOffsets(p0); !slices.Equal(got, []int64{0, 3, 4}) {
		t.Errorf("in/0 completed %v, want [0 3 4]", got)
	}
	if got := completedOffsets(p1); !slices.Equal(got, []int64{0}) {
		t.Errorf("in/1 completed %v, want [0]", got)
	}
	a := p0.lanes["a"]
	if a == nil || a.queue.len() != 2 || a.queue.first().entry.offset != 1 || a.queue.first().it == nil {
		t.Fatalf("lane a: want offsets 1 (failed once) and 2 queued")
	}
	if f := a.queue.first().it.fail; f == nil || f.attempts != 1 {
		t.Errorf("failed record: attempts %+v, want 1", f)
	}
	if w.ready.len() != 0 {
		t.Errorf("%d lanes ready, want none (lane a waits out its backoff, the others are empty)", w.ready.len())
	}
	if w.done != 4 {
		t.Errorf("done %d, want 4", w.done)
	}
}

// TestTxnBatchTimeout: a batch that outlives HandlerTimeout and
// returns its context's error fails as a whole: nothing completes, no
// attempt is counted, each record is marked to run alone and its lane is
// ready again.
func TestTxnBatchTimeout(t *testing.T) {
	bh := func(ctx context.Context, recs []*kgo.Record) ([][]*kgo.Record, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	_, w := workTxn(t, bh, 0, HandlerTimeout(20*time.Millisecond))
	ps := workPart(w, 0, "", "")
	w.mu.Lock()
	defer w.mu.Unlock()
	w.runBatchLocked(w.ready.pop())
	if len(ps.completed) != 0 || w.done != 0 {
		t.Fatalf("completed %v, done %d; want nothing", completedOffsets(ps), w.done)
	}
	if w.ready.len() != 1 || ps.lane.queue.len() != 2 {
		t.Fatalf("ready %d, queued %d; want the lane ready with its 2 records", w.ready.len(), ps.lane.queue.len())
	}
	for i := range 2 {
		if r := ps.lane.queue.at(i); !r.solo || r.it != nil || w.batchableLocked(r) {
			t.Errorf("record %d: solo %v, failed %v; want solo, no attempt counted, not batchable", i, r.solo, r.it != nil)
		}
	}
}
