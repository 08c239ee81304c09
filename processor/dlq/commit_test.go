package dlq_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/processor/dlq"
)

// TestAwaitCommittedReadsBack: what Purge and Replay check after each
// commit (franz-go's EndTransaction(TryCommit) can abort a transaction and
// return nil, and `dlq list` right after a purge then read the old
// position; internal/txncheck's test shows the defect). A committed record reads back true; an
// aborted one false (Purge and Replay then write it again); a transaction
// left open, which holds the last stable offset back, is an error after the
// wait instead of a silent return.
func TestAwaitCommittedReadsBack(t *testing.T) {
	addrs := testkafka.Cluster(t, map[string]int32{dlq.StateTopic: 1})
	seeds := []kgo.Opt{kgo.SeedBrokers(addrs...)}
	cl, err := kgo.NewClient(seeds...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	txn, err := kgo.NewClient(append(seeds, kgo.TransactionalID("test-await-committed"), kgo.ProducerLinger(0))...)
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	write := func(end *kgo.TransactionEndTry) int64 {
		t.Helper()
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		r, err := txn.ProduceSync(ctx, &kgo.Record{Topic: dlq.StateTopic, Key: []byte("k"), Value: []byte("v")}).First()
		if err != nil {
			t.Fatal(err)
		}
		if end != nil {
			if err := txn.EndTransaction(ctx, *end); err != nil {
				t.Fatal(err)
			}
		}
		return r.Offset
	}
	commit, abort := kgo.TryCommit, kgo.TryAbort
	// The defect above strikes a first transaction whose partition the
	// client is still placing, which would make the "committed" case below
	// abort for real: one transaction first, whose outcome is not checked,
	// leaves the producer id and the partition known.
	write(&commit)
	for _, c := range []struct {
		name string
		end  *kgo.TransactionEndTry
		want bool
	}{{"committed", &commit, true}, {"aborted", &abort, false}} {
		off := write(c.end)
		got, err := dlq.AwaitCommitted(ctx, seeds, off)
		if err != nil || got != c.want {
			t.Errorf("%s record at %d: read back %v, %v; want %v, nil", c.name, off, got, err, c.want)
		}
	}
	defer dlq.SetStableTimeout(300 * time.Millisecond)()
	off := write(nil) // left open
	start := time.Now()
	got, err := dlq.AwaitCommitted(ctx, seeds, off)
	if err == nil || !strings.Contains(err.Error(), "last stable offset") {
		t.Errorf("record of an open transaction: %v, %v; want an error naming the last stable offset", got, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("awaitCommitted took %v with a 300ms wait", d)
	}
	if err := txn.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
}
