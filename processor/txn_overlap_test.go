package processor

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
)

// endStall holds the end of the first transaction carrying records (the
// txnEnding hook) until release is called or 30s pass, and reports when
// that end began.
type endStall struct {
	began    chan struct{}
	released chan struct{}
	taken    atomic.Bool
}

func newEndStall() *endStall {
	return &endStall{began: make(chan struct{}), released: make(chan struct{})}
}

func (s *endStall) hook(records int) {
	if records == 0 || !s.taken.CompareAndSwap(false, true) {
		return
	}
	close(s.began)
	select {
	case <-s.released:
	case <-time.After(30 * time.Second):
	}
}

func (s *endStall) release() {
	select {
	case <-s.released:
	default:
		close(s.released)
	}
}

// waitBegan fails t unless the stalled end began within d.
func (s *endStall) waitBegan(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-s.began:
	case <-time.After(d):
		t.Fatal("no transaction with records began to end")
	}
}

// TestTxnPollsWhileEnding: a transaction ends while the next one fills.
// While the end of the first transaction with records is held (before its
// flush and offset commit), records produced after it began are polled and
// transformed; once it is let go, they commit in a later transaction. Every
// input has exactly one output (read_committed): the records polled during
// the end are neither lost nor committed with the transaction that was
// ending, nor twice.
func TestTxnPollsWhileEnding(t *testing.T) {
	parallel(t)
	addrs := testCluster(t, map[string]int32{"in": 2, "out": 2})
	var first, second []*kgo.Record
	var want []string
	for i := range 20 {
		v := keyVal("a", i)
		first = append(first, &kgo.Record{Topic: "in", Partition: int32(i % 2), Key: []byte("a"), Value: []byte(v)})
		want = append(want, v)
	}
	var wantSecond []string
	for i := range 20 {
		v := keyVal("b", i)
		second = append(second, &kgo.Record{Topic: "in", Partition: int32(i % 2), Key: []byte("b"), Value: []byte(v)})
		want = append(want, v)
		wantSecond = append(wantSecond, v)
	}
	var stalled atomic.Bool // the first end is held
	var duringEnd atomic.Int32
	h := func(ctx context.Context, r *kgo.Record) ([]*kgo.Record, error) {
		if stalled.Load() && r.Value[0] == 'b' {
			duringEnd.Add(1)
		}
		return echo(ctx, r)
	}
	tx, err := NewTransactional("txn-overlap", h, Brokers(addrs...), Group("g"), Topics("in"), CommitInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	stall := newEndStall()
	tx.cfg.hooks.txnEnding = func(records int) {
		if records > 0 && !stall.taken.Load() {
			stalled.Store(true)
		}
		stall.hook(records)
		stalled.Store(false)
	}
	defer stall.release()
	out := watchCommitted(t, addrs, "out")
	stop := testkafka.Run(t, tx)
	produce(t, addrs, first...)
	stall.waitBegan(t, 30*time.Second)
	produce(t, addrs, second...)
	waitFor(t, 30*time.Second, "the second batch transformed while the first transaction ends", func() bool {
		return duringEnd.Load() == int32(len(second))
	})
	if out.seen(wantSecond[0]) {
		t.Fatal("an output of a record polled during the end was committed before the end was let go")
	}
	stall.release()
	waitFor(t, 30*time.Second, "every output read_committed", func() bool { return out.seen(want...) })
	stop()
	out.exactlyOnce(t, want)
	if c, ab := tx.Stats(); ab != 0 || c < 2 {
		t.Errorf("Stats() = %d committed, %d aborted; want >= 2 committed (the held one, then the records polled during it), 0 aborted", c, ab)
	}
}

// TestTxnRevokeWhileEnding: a rebalance revokes partitions of a member
// while one of its transactions is ending (held before its offset commit)
// and while it polls and transforms the next records. The held transaction
// aborts (the revoke reached franz-go's session before End), the member
// drops its work, including what it polled during the end, and resumes from
// the broker's offsets with the partitions it keeps; the second member takes
// the others. Every input has exactly one output (read_committed).
func TestTxnRevokeWhileEnding(t *testing.T) {
	parallel(t)
	addrs := testCluster(t, map[string]int32{"in": 4, "out": 4})
	const n = 200
	var recs []*kgo.Record
	var want []string
	for i := range n {
		v := keyVal(fmt.Sprintf("k%d", i%8), i)
		recs = append(recs, &kgo.Record{Topic: "in", Partition: int32(i % 4), Value: []byte(v)})
		want = append(want, v)
	}
	out := watchCommitted(t, addrs, "out")
	start := func(id string, stall *endStall) (*TxnProcessor, func()) {
		tx, err := NewTransactional(id, echo, Brokers(addrs...), Group("g"), Topics("in"), CommitInterval(20*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if stall != nil {
			tx.cfg.hooks.txnEnding = stall.hook
		}
		return tx, testkafka.Run(t, tx)
	}
	stall := newEndStall()
	defer stall.release()
	a, stopA := start("txn-revoke-a", stall)
	waitFor(t, 30*time.Second, "member a holds the 4 partitions", func() bool { return len(a.Health().Partitions) == 4 })
	produce(t, addrs, recs[:n/2]...)
	stall.waitBegan(t, 30*time.Second)
	produce(t, addrs, recs[n/2:]...)
	_, stopB := start("txn-revoke-b", nil)
	waitFor(t, 30*time.Second, "partitions of member a revoked while its transaction ends", func() bool {
		return len(a.Health().Partitions) < 4
	})
	stall.release()
	waitFor(t, 60*time.Second, "every output read_committed", func() bool { return out.seen(want...) })
	stopA()
	stopB()
	out.exactlyOnce(t, want)
	if _, ab := a.Stats(); ab == 0 {
		t.Error("member a aborted no transaction: the revoke did not reach the held one")
	}
}

// TestTxnShutdownWhileEnding: Run's context is cancelled while a
// transaction is ending (held before its offset commit) and the records
// polled during that end have completed. Run waits for the end, commits it,
// then commits the completed records in a last transaction, and returns
// nil: every input has exactly one output (read_committed), none of them
// from a second run.
func TestTxnShutdownWhileEnding(t *testing.T) {
	parallel(t)
	addrs := testCluster(t, map[string]int32{"in": 2, "out": 2})
	var first, second []*kgo.Record
	var want []string
	for i := range 20 {
		for _, k := range []string{"a", "b"} {
			v := keyVal(k, i)
			r := &kgo.Record{Topic: "in", Partition: int32(i % 2), Key: []byte(k), Value: []byte(v)}
			if k == "a" {
				first = append(first, r)
			} else {
				second = append(second, r)
			}
			want = append(want, v)
		}
	}
	var transformedB atomic.Int32
	h := func(ctx context.Context, r *kgo.Record) ([]*kgo.Record, error) {
		if r.Value[0] == 'b' {
			transformedB.Add(1)
		}
		return echo(ctx, r)
	}
	tx, err := NewTransactional("txn-shutdown-ending", h, Brokers(addrs...), Group("g"), Topics("in"), CommitInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	stall := newEndStall()
	tx.cfg.hooks.txnEnding = stall.hook
	defer stall.release()
	out := watchCommitted(t, addrs, "out")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- tx.Run(ctx) }()
	produce(t, addrs, first...)
	stall.waitBegan(t, 30*time.Second)
	produce(t, addrs, second...)
	waitFor(t, 30*time.Second, "the second batch transformed while the first transaction ends", func() bool {
		return transformedB.Load() == int32(len(second))
	})
	cancel()
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) while a transaction was ending", err)
	case <-time.After(50 * time.Millisecond):
	}
	stall.release()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30s of the end being let go")
	}
	waitFor(t, 30*time.Second, "every output read_committed", func() bool { return out.seen(want...) })
	out.exactlyOnce(t, want)
	if c, ab := tx.Stats(); ab != 0 || c < 2 {
		t.Errorf("Stats() = %d committed, %d aborted; want >= 2 committed (the held one, then the last), 0 aborted", c, ab)
	}
}
