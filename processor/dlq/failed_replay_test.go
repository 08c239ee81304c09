package dlq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/processor"
	"github.com/ordercast/ordercast/processor/dlq"
)

// TestFailedReplayLeftOutOfBulkReplay: a still-poison record replayed from
// the DLQ comes back as a new DLQ record naming the record it was replayed
// from (ordercast-replayed-from, List's FailedReplays). A second replay of
// everything leaves that copy out (Skipped, not an error) and refuses the
// original as replayed, writing nothing; IncludeFailedReplays, or naming the
// copy by ID, replays it.
func TestFailedReplayLeftOutOfBulkReplay(t *testing.T) {
	ctx := context.Background()
	addrs, _ := testCluster(t, map[string]int32{"events": 1, "g.dlq": 1})
	seen := newCounter()
	runProcessor(t, processor.Brokers(addrs...), processor.Group("g"), processor.Topics("events"),
		processor.CommitInterval(20*time.Millisecond),
		processor.WithHandler(func(_ context.Context, r *kgo.Record) error {
			seen.add(r)
			if string(r.Value) == "poison" {
				return processor.Permanentf("still poison")
			}
			return nil
		}))
	produce(t, addrs, rec("events", 0, "k", "poison"))
	d, err := dlq.New("g", kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	list := func(n int) *dlq.Listing {
		t.Helper()
		var l *dlq.Listing
		waitFor(t, 10*time.Second, "DLQ records", func() bool {
			l, err = d.List(ctx, dlq.Selection{}, 0)
			return err == nil && l.Selected == n
		})
		return l
	}
	original := list(1).Records[0]
	if original.ReplayedFrom != "" {
		t.Fatalf("first DLQ record %+v names a replay", original)
	}

	// Replay everything: the record fails again and comes back as a copy.
	res, err := d.Replay(ctx, dlq.ReplayOptions{})
	if err != nil || len(res.Replayed) != 1 {
		t.Fatalf("first replay: %+v, %v", res, err)
	}
	l := list(2)
	copyRec := l.Records[1]
	if copyRec.ReplayedFrom != original.ID || l.FailedReplays != 1 || copyRec.Key != "k" || copyRec.Replay != nil {
		t.Fatalf("copy %+v (FailedReplays %d): want a record replayed from %s", copyRec, l.FailedReplays, original.ID)
	}

	// Replay everything again: nothing is written.
	for _, dry := range []bool{true, false} {
		res, err = d.Replay(ctx, dlq.ReplayOptions{DryRun: dry})
		var refused *dlq.RefusedError
		if !errors.As(err, &refused) || len(res.Replayed) != 0 || len(res.Refused) != 1 || !errors.Is(res.Refused[0].Err, dlq.ErrAlreadyReplayed) ||
			len(res.Skipped) != 1 || res.Skipped[0].ID != copyRec.ID || !errors.Is(res.Skipped[0].Err, dlq.ErrFailedReplay) {
			t.Fatalf("second replay (dry run %v): %+v, %v", dry, res, err)
		}
	}
	if n := seen.get("poison"); n != 2 {
		t.Errorf("the handler saw the poison record %d times after the skipping replay; want 2 (first, one replay)", n)
	}

	// Asked for, the copy is replayed: by flag, and by ID.
	res, err = d.Replay(ctx, dlq.ReplayOptions{DryRun: true, IncludeFailedReplays: true})
	if len(res.Replayed) != 1 || res.Replayed[0].From != copyRec.ID || len(res.Skipped) != 0 {
		t.Fatalf("replay with IncludeFailedReplays: %+v, %v", res, err)
	}
	res, err = d.Replay(ctx, dlq.ReplayOptions{Selection: dlq.Selection{IDs: []string{copyRec.ID}}})
	if err != nil || len(res.Replayed) != 1 || res.Replayed[0].From != copyRec.ID {
		t.Fatalf("replay of %s by ID: %+v, %v", copyRec.ID, res, err)
	}
	third := list(3).Records[2]
	if third.ReplayedFrom != copyRec.ID {
		t.Errorf("the copy's copy %+v: want replayed from %s", third, copyRec.ID)
	}
}
