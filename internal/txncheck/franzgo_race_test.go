package txncheck_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/internal/txncheck"
)

// TestFranzGoAbortsAnAcknowledgedWriteOnlyTxn reproduces, on either broker,
// the franz-go v1.22.3 defect this package guards against
// (docs/upstream/franz-go-write-only-txn-abort.md), and shows that
// Committed catches it.
//
// A client's first produce to a topic waits for the topic's metadata. The
// metadata goroutine then places the waiting records
// (storePartitionsUpdate: doPartition for each) and only afterwards stores
// the topic's partitions where EndTransaction looks for them (a deferred
// l.v.Store). A record placed first can be sent and acknowledged, and the
// caller's EndTransaction(TryCommit) run, inside that window: End finds no
// partition added to the transaction, aborts it and returns nil. In the
// wild the goroutine is descheduled there (1 in ~150 runs of cmd/ordercast
// TestOperatorCommands under -race, a fresh transactional client per DLQ
// purge); here a partitioner holds it there: the second waiting record's
// partitioning blocks until End has returned.
//
// The test asserts the defect: if a franz-go upgrade fixes it, End commits,
// the record reads back, and this test fails: then the read-back
// (internal/txncheck's callers) may be reconsidered.
func TestFranzGoAbortsAnAcknowledgedWriteOnlyTxn(t *testing.T) {
	addrs := testkafka.Cluster(t, map[string]int32{"t": 2})
	ctx := ctxT(t)
	hold, release := make(chan struct{}), make(chan struct{})
	held := false
	part := kgo.BasicConsistentPartitioner(func(string) func(*kgo.Record, int) int {
		return func(r *kgo.Record, _ int) int {
			if string(r.Value) == "second" && !held {
				held = true // runs under franz-go's per-topic partitioner lock
				close(hold)
				<-release
			}
			return int(r.Partition)
		}
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.TransactionalID("txncheck-franzgo-race"),
		kgo.RecordPartitioner(part), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	if _, _, err := cl.ProducerID(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	first := &kgo.Record{Topic: "t", Partition: 0, Value: []byte("first")}
	acked := make(chan error, 1)
	cl.Produce(ctx, first, func(_ *kgo.Record, err error) { acked <- err })
	secondDone := make(chan error, 1)
	cl.Produce(ctx, &kgo.Record{Topic: "t", Partition: 1, Value: []byte("second")}, func(_ *kgo.Record, err error) { secondDone <- err })
	select {
	case <-hold:
	case <-ctx.Done():
		t.Fatal("the metadata goroutine never placed the second record")
	}
	if err := <-acked; err != nil {
		t.Fatalf("first record: %v", err)
	}
	// The first record is acknowledged; the metadata goroutine is still
	// inside storePartitionsUpdate.
	endErr := cl.EndTransaction(ctx, kgo.TryCommit)
	close(release)
	if endErr != nil {
		t.Fatalf("EndTransaction(TryCommit): %v (the defect answers nil)", endErr)
	}
	<-secondDone // whatever it is: it was produced after the transaction ended

	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	ok, err := txncheck.Committed(rctx, []kgo.Opt{kgo.SeedBrokers(addrs...)}, first.Topic, first.Partition, first.Offset)
	if err != nil {
		t.Fatal(err)
	}
	if ok {
		t.Fatal("the acknowledged record of a transaction ended with TryCommit and nil is visible: franz-go no longer aborts it (see the doc above)")
	}
}
