package processor

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestAssignorsRefused(t *testing.T) {
	base := []Opt{Brokers("127.0.0.1:1"), Group("g"), Topics("in"), WithHandler(func(context.Context, *kgo.Record) error { return nil })}
	for _, tc := range []struct {
		opt  Opt
		want string
	}{
		{Assignors(), "Assignors: empty"},
		{Assignors("cooperative-sticky", "rangee"), `unknown assignor "rangee"`},
		{Assignors("range", "range"), `"range" given twice`},
	} {
		if _, err := New(append(base, tc.opt)...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New: %v, want an error with %q", err, tc.want)
		}
	}
	if _, err := New(append(base, Assignors("range"), GroupProtocol("consumer"))...); err == nil || !strings.Contains(err.Error(), "KIP-848") {
		t.Errorf("Assignors with GroupProtocol(consumer): %v, want an error naming KIP-848", err)
	}
	if _, err := New(append(base, Assignors(AssignorCooperativeSticky, AssignorKafkaJSRoundRobin))...); err != nil {
		t.Errorf("valid Assignors refused: %v", err)
	}
}

// eagerConsumer is another client's consumer in the group: a plain franz-go
// client offering only KafkaJS's assignor ("RoundRobinAssigner", eager),
// handling each poll's records, then committing them, and committing what
// it handled when its partitions are revoked (the usual at-least-once
// loop of a KafkaJS or Java consumer).
type eagerConsumer struct {
	cl     *kgo.Client
	mu     sync.Mutex
	owned  int
	done   chan struct{}
	record func(*kgo.Record)
}

func startEagerConsumer(t *testing.T, addrs []string, record func(*kgo.Record)) *eagerConsumer {
	t.Helper()
	e := &eagerConsumer{done: make(chan struct{}), record: record}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("in"),
		kgo.Balancers(renamedBalancer{kgo.RoundRobinBalancer(), AssignorKafkaJSRoundRobin}),
		kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(), kgo.SessionTimeout(6*time.Second),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			e.mu.Lock()
			e.owned += len(m["in"])
			e.mu.Unlock()
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
			if err := cl.CommitUncommittedOffsets(ctx); err != nil {
				t.Errorf("other client: commit on revoke: %v", err)
			}
			e.mu.Lock()
			e.owned -= len(m["in"])
			e.mu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	e.cl = cl
	go func() {
		defer close(e.done)
		for {
			fs := cl.PollFetches(context.Background())
			if fs.IsClientClosed() {
				return
			}
			fs.EachRecord(e.record)
			if err := cl.CommitUncommittedOffsets(context.Background()); err != nil && !errors.Is(err, kgo.ErrClientClosed) {
				t.Logf("other client: commit: %v", err)
			}
			cl.AllowRebalance()
		}
	}()
	return e
}

func (e *eagerConsumer) partitions() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.owned
}

// close leaves the group (its revoke commits what it handled).
func (e *eagerConsumer) close() {
	e.cl.Close()
	<-e.done
}

func groupProtocolName(t *testing.T, addrs []string, group string) string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	d, err := kadm.NewClient(cl).DescribeGroups(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	return d[group].Protocol
}

// A group shared during a migration: a member offering KafkaJS's assignor
// besides cooperative-sticky joins the group of an eager consumer of
// another client; they share the partitions (the group runs KafkaJS's
// round robin), every record is handled exactly once across the handovers
// (each side commits what it handled on revoke), the other client leaves,
// and when a member offering cooperative-sticky alone joins, the group
// moves to cooperative-sticky without a stop.
func TestAssignorsShareAGroupDuringMigration(t *testing.T) {
	parallel(t)
	addrs := testCluster(t, map[string]int32{"in": 4})
	var mu sync.Mutex
	handled := map[string][]string{} // value -> who handled it
	note := func(who string, r *kgo.Record) {
		mu.Lock()
		handled[string(r.Value)] = append(handled[string(r.Value)], who)
		mu.Unlock()
	}
	next := 0
	batch := func(n int) {
		var recs []*kgo.Record
		for i := 0; i < n; i++ {
			recs = append(recs, &kgo.Record{Topic: "in", Partition: int32(next % 4), Value: val(next)})
			next++
		}
		produce(t, addrs, recs...)
	}
	all := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == next
	}
	member := func(name string, extra ...Opt) *member {
		return startMember(t, rebalanceOpts(addrs, append([]Opt{DrainTimeout(2 * time.Second), SessionTimeout(6 * time.Second),
			WithHandler(func(_ context.Context, r *kgo.Record) error { note(name, r); return nil })}, extra...)...)...)
	}

	other := startEagerConsumer(t, addrs, func(r *kgo.Record) { note("kafkajs", r) })
	batch(40)
	waitFor(t, 30*time.Second, "the other client handled the first batch", all)

	a := member("A", Assignors(AssignorCooperativeSticky, AssignorKafkaJSRoundRobin))
	waitFor(t, 30*time.Second, "both hold partitions", func() bool {
		return other.partitions() > 0 && len(a.p.Health().Partitions) > 0 && other.partitions()+len(a.p.Health().Partitions) == 4
	})
	if got := groupProtocolName(t, addrs, "g"); got != AssignorKafkaJSRoundRobin {
		t.Fatalf("shared group runs %q, want %q (the only assignor both offer)", got, AssignorKafkaJSRoundRobin)
	}
	batch(40)
	waitFor(t, 30*time.Second, "the second batch handled by both", all)

	other.close()
	waitFor(t, 30*time.Second, "A holds every partition", func() bool { return len(a.p.Health().Partitions) == 4 })
	batch(40)
	waitFor(t, 30*time.Second, "the third batch handled", all)

	b := member("B") // cooperative-sticky alone: the second rolling step
	waitFor(t, 30*time.Second, "B holds partitions", func() bool { return len(b.p.Health().Partitions) > 0 })
	if got := groupProtocolName(t, addrs, "g"); got != AssignorCooperativeSticky {
		t.Fatalf("group runs %q once only Ordercast members are left, want %q", got, AssignorCooperativeSticky)
	}
	batch(40)
	waitFor(t, 30*time.Second, "the fourth batch handled", all)
	waitFor(t, 30*time.Second, "everything committed", func() bool {
		n := int64(next / 4)
		return committedEquals(t, addrs, "g", map[tp]int64{{"in", 0}: n, {"in", 1}: n, {"in", 2}: n, {"in", 3}: n})
	})
	a.stop()
	b.stop()

	mu.Lock()
	defer mu.Unlock()
	by := map[string]int{}
	for v, who := range handled {
		if len(who) != 1 {
			t.Errorf("%s handled %d times (%v), want once", v, len(who), who)
		}
		for _, w := range who {
			by[w]++
		}
	}
	if by["kafkajs"] == 0 || by["A"] == 0 || by["B"] == 0 {
		t.Fatalf("records handled per member %v: every member should have handled some", by)
	}
}
