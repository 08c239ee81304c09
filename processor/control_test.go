package processor

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestCommitPassesTransactionMarkers: on a topic written in transactions, the
// committed offset reaches the end of the log (past the last commit marker),
// so lag returns to 0 instead of staying at 1 per partition.
func TestCommitPassesTransactionMarkers(t *testing.T) {
	addrs := testCluster(t, map[string]int32{"txin": 1})
	prod, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.TransactionalID("ctl-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for i := range 3 {
		if err := prod.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := prod.ProduceSync(context.Background(), &kgo.Record{Topic: "txin", Value: val(i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := prod.EndTransaction(context.Background(), kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	}
	h := newHistory()
	runProcessor(t, Brokers(addrs...), Group("g"), Topics("txin"), CommitInterval(20*time.Millisecond),
		WithHandler(func(_ context.Context, r *kgo.Record) error {
			h.add(string(r.Value))
			return nil
		}))
	// 3 records and 3 commit markers: offsets 0..5, end offset 6.
	waitFor(t, 60*time.Second, "commit at the end of the log (6)", func() bool {
		return committed(t, addrs, "g", "txin")[0] == 6
	})
	if h.distinct() != 3 {
		t.Fatalf("handled %d records, want 3 (markers must not reach the handler)", h.distinct())
	}
}
