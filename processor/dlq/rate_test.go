package dlq_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/processor/dlq"
)

// TestReplayRatePaces: ReplayOptions.Rate paces the writes. Rate R admits
// one record at once (burst 1) and then one per 1/R, so N records replayed
// at R are written over at least (N-1)/R: the records' timestamps, which
// the producer stamps as each write starts, span that much. Only the lower
// bound is checked; a slow machine only makes the span longer.
func TestReplayRatePaces(t *testing.T) {
	const (
		n    = 6
		rate = 20.0                 // records per second
		tol  = 5 * time.Millisecond // timestamps are in milliseconds
	)
	addrs, _ := testCluster(t, map[string]int32{"events": 1, "g.dlq": 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, dlqRec("g", 0, "k"+itoa(i), "v"+itoa(i), "permanent", "events", i))
	}
	produce(t, addrs, recs...)
	d, err := dlq.New("g", kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()

	res, err := d.Replay(ctx, dlq.ReplayOptions{Rate: rate})
	if err != nil || len(res.Replayed) != n {
		t.Fatalf("Replay at %v/s: %+v, %v; want %d replayed", rate, res, err, n)
	}

	rd, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics("events"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var stamps []time.Time
	for len(stamps) < n {
		f := rd.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of the %d replayed records: %v", len(stamps), n, ctx.Err())
		}
		f.EachRecord(func(r *kgo.Record) { stamps = append(stamps, r.Timestamp) })
	}
	if len(stamps) != n {
		t.Fatalf("%d records in events, want the %d replayed", len(stamps), n)
	}
	span := slices.MaxFunc(stamps, time.Time.Compare).Sub(slices.MinFunc(stamps, time.Time.Compare))
	want := time.Duration(float64(n-1) / rate * float64(time.Second))
	if span < want-tol {
		t.Fatalf("%d records replayed at %v/s were written over %v, want at least %v", n, rate, span, want)
	}
	t.Logf("%d records at %v/s written over %v (at least %v)", n, rate, span, want)
}
