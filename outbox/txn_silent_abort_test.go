package outbox_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ordercast/ordercast/internal/testkafka"
	"github.com/ordercast/ordercast/outbox"
	"github.com/ordercast/ordercast/store"
	"github.com/ordercast/ordercast/store/storetest"
)

// abortCommits makes the embedded broker handle the next n EndTxn(commit)
// requests as aborts and answer them with success: what the relay sees when
// franz-go v1.22.3 turns its commit into an abort and returns nil
// (docs/upstream/franz-go-write-only-txn-abort.md).
func abortCommits(c *kfake.Cluster, n int32) *atomic.Int32 {
	var done atomic.Int32
	c.ControlKey(int16(kmsg.EndTxn), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if req := kreq.(*kmsg.EndTxnRequest); req.Commit && done.Load() < n {
			req.Commit = false
			done.Add(1)
		}
		return nil, nil, false
	})
	return &done
}

// TestTxnRelaySilentAbortIsRepublished: the relay's commits are answered
// nil but the first two were aborted. The relay must not mark those rows
// sent (they would be lost: paymentProcessed never published); it finds the
// abort by reading its marker back, and publishes them again: read_committed
// readers see every row exactly once.
func TestTxnRelaySilentAbortIsRepublished(t *testing.T) {
	testkafka.SkipIfReal(t, "turns EndTxn(commit) into an abort with a kfake control")
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		c, addrs := testkafka.Fake(t, map[string]int32{"t": 3})
		turned := abortCommits(c, 2)
		enqueue(t, db, "t", 3, upTo(20)...)
		relay := txnRelay(t, db, addrs, "orders", outbox.WithBatchSize(6))
		stop := run(t, relay)
		waitFor(t, "all rows marked sent", func() bool { return pending(t, db) == 0 })
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if turned.Load() != 2 {
			t.Fatalf("%d commits turned into aborts, want 2", turned.Load())
		}
		if got := seqs(t, readTopic(t, addrs, "t", true)); fmt.Sprint(got) != fmt.Sprint(upTo(20)) {
			t.Fatalf("read_committed got %v, want each of 1..20 once", got)
		}
		if st := relay.Stats(); st.Published != 20 || st.Aborted < 2 {
			t.Fatalf("stats %+v: want 20 published, the 2 silent aborts counted", st)
		}
	})
}
