package ops_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/ordersystem/ops"
)

// TestResetOffsets checks the dry run (counts, nothing committed), each
// target, and the refusal while the group has a member.
func TestResetOffsets(t *testing.T) {
	testkafka.Parallel(t)
	addrs, adm := testCluster(t, map[string]int32{"ev": 1})
	var recs []*kgo.Record
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	for i := range 10 {
		recs = append(recs, &kgo.Record{Topic: "ev", Partition: 0, Value: []byte("v"), Timestamp: base.Add(time.Duration(i) * time.Second)})
	}
	written := produce(t, addrs, recs...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	commit := func(at int64) {
		t.Helper()
		o := kadm.Offsets{}
		o.Add(kadm.Offset{Topic: "ev", Partition: 0, At: at, LeaderEpoch: -1})
		if err := adm.CommitAllOffsets(ctx, "g", o); err != nil {
			t.Fatal(err)
		}
	}
	committed := func() int64 {
		t.Helper()
		r, err := adm.FetchOffsets(ctx, "g")
		if err != nil {
			t.Fatal(err)
		}
		o, _ := r.Lookup("ev", 0)
		return o.At
	}
	commit(4)

	res, err := ops.ResetOffsets(ctx, adm, "g", ops.ResetOptions{To: ops.ResetLatest, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Skipped != 6 || res.Again != 0 || len(res.Partitions) != 1 || res.Partitions[0].New != 10 {
		t.Errorf("dry run to latest: %+v; want 6 skipped, new offset 10", res)
	}
	if c := committed(); c != 4 {
		t.Errorf("after a dry run the committed offset is %d; want 4", c)
	}
	for _, c := range []struct {
		o           ops.ResetOptions
		want, again int64
	}{
		{ops.ResetOptions{To: ops.ResetEarliest}, 0, 4},
		{ops.ResetOptions{To: ops.ResetOffset, Offset: 7, Topic: "ev"}, 7, 0},
		{ops.ResetOptions{To: ops.ResetOffset, Offset: 99}, 10, 0},
		{ops.ResetOptions{To: ops.ResetTime, Time: written[5].Timestamp}, 5, 5},
	} {
		res, err := ops.ResetOffsets(ctx, adm, "g", c.o)
		if err != nil {
			t.Fatalf("%+v: %v", c.o, err)
		}
		if got := committed(); got != c.want || res.Again != c.again {
			t.Errorf("reset %+v: committed %d, %d again; want %d, %d again", c.o, got, res.Again, c.want, c.again)
		}
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("ev"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	waitFor(t, 20*time.Second, "a member in group g", func() bool {
		cl.PollRecords(ctx, 1)
		gs, err := ops.DescribeGroups(ctx, adm, "g")
		return err == nil && len(gs[0].Members) > 0
	})
	if _, err := ops.ResetOffsets(ctx, adm, "g", ops.ResetOptions{To: ops.ResetEarliest}); !errors.Is(err, ops.ErrGroupActive) {
		t.Errorf("reset with a member: %v; want ErrGroupActive", err)
	}
}
