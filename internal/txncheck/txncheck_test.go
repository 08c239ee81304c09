package txncheck_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/internal/testkit/txnchecktest"
	"github.com/ordercast/ordercast/internal/txncheck"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// writeTxn runs one write-only transaction of n records to topic/0 ended
// with end, and returns the last record's offset.
func writeTxn(t *testing.T, ctx context.Context, cl *kgo.Client, topic string, n int, end kgo.TransactionEndTry) int64 {
	t.Helper()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	var last int64
	for i := 0; i < n; i++ {
		r, err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: []byte("v")}).First()
		if err != nil {
			t.Fatal(err)
		}
		last = r.Offset
	}
	if err := cl.EndTransaction(ctx, end); err != nil {
		t.Fatalf("EndTransaction(%v): %v", end, err)
	}
	return last
}

func txnClient(t *testing.T, addrs []string, id string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.TransactionalID(id),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// TestTailTellsCommittedFromAborted: on either broker, one Tail asked for
// the last record of each of a run of transactions tells the committed
// ones from the aborted ones, and the one-shot Committed agrees.
func TestTailTellsCommittedFromAborted(t *testing.T) {
	addrs := testkafka.Cluster(t, map[string]int32{"t": 1})
	ctx := ctxT(t)
	cl := txnClient(t, addrs, "txncheck-tail")
	plan := []kgo.TransactionEndTry{kgo.TryCommit, kgo.TryAbort, kgo.TryAbort, kgo.TryCommit, kgo.TryAbort, kgo.TryCommit}
	lasts := make([]int64, len(plan))
	for i, end := range plan {
		lasts[i] = writeTxn(t, ctx, cl, "t", 1+i%3, end)
	}
	tail, err := txncheck.NewTail([]kgo.Opt{kgo.SeedBrokers(addrs...)}, "t", 0, lasts[0])
	if err != nil {
		t.Fatal(err)
	}
	defer tail.Close()
	for i, end := range plan {
		got, err := tail.Committed(ctx, lasts[i])
		if err != nil {
			t.Fatalf("transaction %d: %v", i, err)
		}
		if got != bool(end) {
			t.Errorf("transaction %d (last record at %d): committed %v, want %v", i, lasts[i], got, bool(end))
		}
		one, err := txncheck.Committed(ctx, []kgo.Opt{kgo.SeedBrokers(addrs...)}, "t", 0, lasts[i])
		if err != nil || one != bool(end) {
			t.Errorf("transaction %d: one-shot Committed = %v, %v; want %v", i, one, err, bool(end))
		}
	}
	if _, err := tail.Committed(ctx, lasts[0]); err == nil {
		t.Error("an offset below one asked before: no error")
	}
	// The transaction marker after the last record is not a record.
	if _, err := tail.Committed(ctx, lasts[len(lasts)-1]+1); err == nil {
		t.Error("a transaction marker's offset: no error")
	}
}

// TestTailWaitsForAnOpenTransaction: while the transaction is open the
// last stable offset holds the reader back, so Committed blocks until ctx
// ends, and then answers once the transaction commits.
func TestTailWaitsForAnOpenTransaction(t *testing.T) {
	addrs := testkafka.Cluster(t, map[string]int32{"t": 1})
	ctx := ctxT(t)
	cl := txnClient(t, addrs, "txncheck-open")
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	r, err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Partition: 0, Value: []byte("v")}).First()
	if err != nil {
		t.Fatal(err)
	}
	tail, err := txncheck.NewTail([]kgo.Opt{kgo.SeedBrokers(addrs...)}, "t", 0, r.Offset)
	if err != nil {
		t.Fatal(err)
	}
	defer tail.Close()
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = tail.Committed(short, r.Offset)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("open transaction: %v, want the deadline", err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if ok, err := tail.Committed(ctx, r.Offset); !ok || err != nil {
		t.Fatalf("after the commit: %v, %v", ok, err)
	}
}

// TestSilentAbortIsCaught: EndTransaction(TryCommit) returns nil for a
// transaction the broker aborted; a read_committed reader never sees its
// record, and Committed says so. The condition is injected on the embedded
// broker (txnchecktest.AbortCommits); see docs/upstream/franz-go-write-only-txn-abort.md
// for how franz-go reaches it by itself.
func TestSilentAbortIsCaught(t *testing.T) {
	c, addrs := txnchecktest.Fake(t, map[string]int32{"t": 1})
	ctx := ctxT(t)
	turned := txnchecktest.AbortCommits(c, 1)
	cl := txnClient(t, addrs, "txncheck-silent")
	last := writeTxn(t, ctx, cl, "t", 2, kgo.TryCommit) // nil: looks committed
	if turned.Load() != 1 {
		t.Fatalf("%d commits turned into aborts, want 1", turned.Load())
	}
	ok, err := txncheck.Committed(ctx, []kgo.Opt{kgo.SeedBrokers(addrs...)}, "t", 0, last)
	if err != nil {
		t.Fatal(err)
	}
	if ok {
		t.Fatal("a transaction the broker aborted reads back as committed")
	}
	// The next transaction commits and is seen.
	last = writeTxn(t, ctx, cl, "t", 1, kgo.TryCommit)
	if ok, err := txncheck.Committed(ctx, []kgo.Opt{kgo.SeedBrokers(addrs...)}, "t", 0, last); !ok || err != nil {
		t.Fatalf("the next transaction: %v, %v", ok, err)
	}
}
