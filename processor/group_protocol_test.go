package processor

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestGroupProtocols runs one rebalance story under both group protocols:
// the classic protocol (JoinGroup/SyncGroup, cooperative-sticky) and the
// consumer protocol of KIP-848 (ConsumerGroupHeartbeat, server-side
// assignment, Kafka 4.0+). Member A consumes 4 partitions; B joins, so A
// has partitions revoked, and both handle a second batch; then A leaves, so
// B takes them all and handles a third.
// The history must show what S01 demands of any rebalance: no record lost,
// no commit past an unfinished record or for a partition the member no
// longer owns, nothing started on a partition after its revoke began, and
// (the drains finish in time) nothing handled twice. It runs on the
// embedded broker and on a real cluster alike.
func TestGroupProtocols(t *testing.T) {
	parallel(t)
	for _, proto := range []string{"classic", "consumer"} {
		t.Run(proto, func(t *testing.T) {
			addrs := testCluster(t, map[string]int32{"in": 4})
			h := newRecorder()
			const perBatch = 10 // per partition
			next := 0
			batch := func() {
				var recs []*kgo.Record
				for i := 0; i < 4*perBatch; i++ {
					recs = append(recs, &kgo.Record{Topic: "in", Partition: int32(i % 4), Value: val(next)})
					next++
				}
				produce(t, addrs, recs...)
			}
			allCommitted := func() bool {
				n := int64(next / 4)
				return committedEquals(t, addrs, "g", map[tp]int64{{"in", 0}: n, {"in", 1}: n, {"in", 2}: n, {"in", 3}: n})
			}
			assigned := func(member string) bool {
				return h.count(func(e event) bool { return e.Member == member && e.Kind == evAssigned }) > 0
			}
			handler := func(ctx context.Context, r *kgo.Record) error { return sleepOrCancel(ctx, 5*time.Millisecond) }
			opts := func(member string) []Opt {
				return rebalanceOpts(addrs, WithHandler(handler), GroupProtocol(proto), DrainTimeout(5*time.Second),
					SessionTimeout(6*time.Second), RebalanceTimeout(20*time.Second), h.hooks(member))
			}
			batch()
			a := startMember(t, opts("A")...)
			waitFor(t, 60*time.Second, "A committed the first batch", allCommitted)
			if gt := groupType(t, addrs, "g"); gt != proto {
				t.Fatalf("group g has type %q, want %q", gt, proto)
			}
			b := startMember(t, opts("B")...)
			waitFor(t, 60*time.Second, "B assigned partitions", func() bool { return assigned("B") })
			batch()
			waitFor(t, 60*time.Second, "the second batch committed by A and B", allCommitted)
			a.stop()
			batch()
			waitFor(t, 60*time.Second, "the third batch committed by B alone", allCommitted)
			b.stop()
			ev := h.snapshot()
			if countKind(ev, "A", evReleaseStart, "revoked") == 0 {
				t.Fatal("A never had a partition revoked: the scenario did not happen")
			}
			for _, m := range []string{"A", "B"} {
				if countKind(ev, m, evCompleted, "") == 0 {
					t.Fatalf("%s handled nothing", m)
				}
			}
			rep := checkHistory(t, ev, logOffsetsOf(t, addrs, "in"), true)
			if len(rep.duplicates) > 0 {
				t.Fatalf("records handled twice although every revoke drained in time: %v", rep.duplicates)
			}
		})
	}
}

// groupType returns the group's type as the broker lists it: "classic" or
// "consumer" (KIP-848).
func groupType(t *testing.T, addrs []string, group string) string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	groups, err := kadm.NewClient(cl).ListGroups(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return groups[group].GroupType
}
