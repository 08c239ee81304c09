package outbox_test

import (
	"fmt"
	"testing"

	"github.com/ordercast/ordercast/internal/testkit/dbtest"
	"github.com/ordercast/ordercast/internal/testkit/txnchecktest"
	"github.com/ordercast/ordercast/outbox"
	"github.com/ordercast/ordercast/sqldb"
)

// TestTxnRelaySilentAbortIsRepublished: the relay's commits are answered
// nil but the first two were aborted. The relay must not mark those rows
// sent (they would be lost: paymentProcessed never published); it finds the
// abort by reading its marker back, and publishes them again: read_committed
// readers see every row exactly once.
func TestTxnRelaySilentAbortIsRepublished(t *testing.T) {
	dbtest.Each(t, dbtest.Runtime, func(t *testing.T, db *sqldb.DB) {
		c, addrs := txnchecktest.Fake(t, map[string]int32{"t": 3})
		turned := txnchecktest.AbortCommits(c, 2)
		enqueue(t, db, "t", 3, upTo(20)...)
		relay := txnRelay(t, db, addrs, "orders", outbox.MaxBatch(6))
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
