package processor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
)

// pauseLog records, per partition, the offsets whose handler started, in
// start order.
type pauseLog struct {
	mu      sync.Mutex
	started map[int32][]int64
}

func (l *pauseLog) add(r *kgo.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started == nil {
		l.started = map[int32][]int64{}
	}
	l.started[r.Partition] = append(l.started[r.Partition], r.Offset)
}

func (l *pauseLog) of(part int32) []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.started[part])
}

func isPausedInClient(p *Processor, topic string, part int32) bool {
	return slices.Contains(p.Client().PauseFetchPartitions(nil)[topic], part)
}

// TestPauseHoldsPartitionOthersGoOn: after Pause no handler starts for a
// record of the paused partition (those fetched before wait in the member,
// those produced after are not fetched), the handler calls in progress
// finish and are committed, the other partition goes on; after Resume every
// record of the paused partition is handled once, in order.
func TestPauseHoldsPartitionOthersGoOn(t *testing.T) {
	parallel(t)
	for _, mode := range []Ordering{OrderPartition, OrderKey} {
		t.Run(mode.String(), func(t *testing.T) {
			addrs := testCluster(t, map[string]int32{"in": 2})
			const keys = 3
			rec := func(part int32, i int) *kgo.Record {
				return &kgo.Record{Topic: "in", Partition: part, Key: []byte(fmt.Sprint("k", i%keys)), Value: val(i)}
			}
			var first []*kgo.Record
			for i := range 10 {
				first = append(first, rec(0, i))
			}
			produce(t, addrs, first...)
			var log pauseLog
			gate := make(chan struct{})
			m := startMember(t, Brokers(addrs...), Group("g"), Topics("in"), WithOrdering(mode), Concurrency(8),
				CommitInterval(10*time.Millisecond),
				WithHandler(func(ctx context.Context, r *kgo.Record) error {
					log.add(r)
					if r.Partition == 0 {
						select {
						case <-gate:
						case <-ctx.Done():
							return ctx.Err()
						}
					}
					return nil
				}))
			// OrderPartition: offset 0 runs; OrderKey: the first record of
			// each key.
			running := 1
			if mode == OrderKey {
				running = keys
			}
			waitFor(t, 20*time.Second, "the first handler calls of partition 0 running", func() bool { return len(log.of(0)) == running })
			if err := m.p.Pause("in", 0); err != nil {
				t.Fatal(err)
			}
			before := log.of(0)
			// Parked: the partition's 10 records (those running too), out
			// of the MaxInFlight room.
			if h := m.p.Health(); fmt.Sprint(h.PausedPartitions) != "[in[0]]" || h.Parked != 10 || h.InFlight != 10 {
				t.Fatalf("Health: paused %v, parked %d, in flight %d; want [in[0]], 10, 10", h.PausedPartitions, h.Parked, h.InFlight)
			}
			if !isPausedInClient(m.p, "in", 0) {
				t.Fatal("partition 0 not paused in the client")
			}
			close(gate) // the calls in progress finish
			var more []*kgo.Record
			for i := 10; i < 15; i++ {
				more = append(more, rec(0, i), rec(1, i))
			}
			produce(t, addrs, more...)
			waitFor(t, 20*time.Second, "partition 1 handled and committed, partition 0 up to its calls in progress",
				func() bool {
					c := committed(t, addrs, "g", "in")
					return c[1] == 5 && c[0] == int64(running)
				})
			if got := log.of(0); !slices.Equal(got, before) {
				t.Fatalf("partition 0 handled %v while paused, want only the calls in progress at Pause, %v", got, before)
			}
			if !isPausedInClient(m.p, "in", 0) || isPausedInClient(m.p, "in", 1) {
				t.Fatalf("client pauses %v, want in[0] only", m.p.Client().PauseFetchPartitions(nil))
			}
			if err := m.p.Resume("in", 0); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 20*time.Second, "partition 0 handled and committed after Resume", func() bool {
				return committed(t, addrs, "g", "in")[0] == 15
			})
			got := log.of(0)
			sorted := slices.Clone(got)
			slices.Sort(sorted)
			if len(slices.Compact(sorted)) != 15 || len(got) != 15 {
				t.Fatalf("partition 0 handled %v, want each of offsets 0..14 once", got)
			}
			perKey := map[int64][]int64{}
			for _, o := range got {
				perKey[o%keys] = append(perKey[o%keys], o)
			}
			for k, offs := range perKey {
				if mode == OrderPartition && !slices.IsSorted(got) || !slices.IsSorted(offs) {
					t.Fatalf("order broken (key %d): handled %v", k, got)
				}
			}
			if h := m.p.Health(); len(h.PausedPartitions) != 0 || isPausedInClient(m.p, "in", 0) {
				t.Fatalf("still paused after Resume: health %v, client %v", h.PausedPartitions, m.p.Client().PauseFetchPartitions(nil))
			}
		})
	}
}

// TestPauseComposesWithRuntimePauses: the runtime's own pausing of a
// partition (a DLQ write failing or in progress) and the user's are
// independent: Resume does not lift the runtime's pause (partition 0: the
// record stays uncommitted and its partition paused while its DLQ write
// fails), and the runtime lifting its pause does not lift the user's
// (partition 1: the DLQ write in progress at Pause completes, and the next
// record still waits for Resume).
func TestPauseComposesWithRuntimePauses(t *testing.T) {
	c, addrs := testClusterC(t, map[string]int32{"in": 2})
	// A producer that refreshes metadata quickly: franz-go waits for a
	// refresh before it retries a NOT_ENOUGH_REPLICAS produce.
	prod, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.MetadataMinAge(10*time.Millisecond), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var log pauseLog
	m := startMember(t, Brokers(addrs...), Group("g"), Topics("in"), WithOrdering(OrderKey), CommitInterval(10*time.Millisecond),
		MaxAttempts(1), Producer(prod), Backoff(5*time.Millisecond, 20*time.Millisecond),
		WithHandler(func(ctx context.Context, r *kgo.Record) error {
			log.add(r)
			if string(r.Value) == "poison" {
				return Permanentf("poison record")
			}
			return nil
		}))
	waitFor(t, 20*time.Second, "partitions assigned", func() bool { return len(m.p.Health().Partitions) == 2 })

	// Partition 0: the DLQ refuses writes; the runtime pauses it.
	fault := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "g.dlq", Err: kerr.InvalidRecord, Count: -1})
	produce(t, addrs, &kgo.Record{Topic: "in", Partition: 0, Value: []byte("poison")}, &kgo.Record{Topic: "in", Partition: 0, Value: []byte("after")})
	waitFor(t, 20*time.Second, "partition 0 blocked", func() bool {
		b := m.p.Health().Blocked
		return len(b) == 1 && strings.HasPrefix(b[0], "in[0]")
	})
	if err := m.p.Pause("in", 0); err != nil {
		t.Fatal(err)
	}
	if err := m.p.Resume("in", 0); err != nil {
		t.Fatal(err)
	}
	hits := fault.Hits()
	waitFor(t, 10*time.Second, "the DLQ write retried after Resume", func() bool { return fault.Hits() >= hits+2 })
	if !isPausedInClient(m.p, "in", 0) || committed(t, addrs, "g", "in")[0] != 0 {
		t.Fatalf("after Pause and Resume of a blocked partition: client pauses %v, committed %v; want in[0] paused, nothing committed",
			m.p.Client().PauseFetchPartitions(nil), committed(t, addrs, "g", "in"))
	}
	fault.Remove()
	waitFor(t, 20*time.Second, "partition 0 released and committed", func() bool { return committed(t, addrs, "g", "in")[0] == 2 })

	// Partition 1: the DLQ refuses writes, the runtime pauses the
	// partition; then a write attempt hangs (the client retries a
	// retriable error), the user pauses, and the attempt goes through: the
	// runtime lifts its pause, the user's stays. (In OrderKey the runtime
	// pauses for a failing write only: the "after" record, parked behind
	// the poison one of its key, would not keep the partition paused.)
	fault = c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "g.dlq", Err: kerr.InvalidRecord, Count: -1})
	produce(t, addrs, &kgo.Record{Topic: "in", Partition: 1, Key: []byte("k"), Value: []byte("poison")},
		&kgo.Record{Topic: "in", Partition: 1, Key: []byte("k"), Value: []byte("after")})
	waitFor(t, 20*time.Second, "partition 1 blocked", func() bool {
		b := m.p.Health().Blocked
		return len(b) == 1 && strings.HasPrefix(b[0], "in[1]")
	})
	if !isPausedInClient(m.p, "in", 1) {
		t.Fatal("partition 1 not paused by the runtime while its DLQ write fails")
	}
	hang := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "g.dlq", Err: kerr.NotEnoughReplicas, Count: -1})
	fault.Remove()
	waitFor(t, 20*time.Second, "a DLQ write attempt in progress", func() bool { return hang.Hits() >= 1 })
	if err := m.p.Pause("in", 1); err != nil {
		t.Fatal(err)
	}
	hang.Remove()
	waitFor(t, 20*time.Second, "the poison record dead-lettered and committed", func() bool { return committed(t, addrs, "g", "in")[1] == 1 })
	if got := log.of(1); len(got) != 1 {
		t.Fatalf("partition 1 handled offsets %v while paused, want only the poison record (0)", got)
	}
	if !isPausedInClient(m.p, "in", 1) {
		t.Fatal("the runtime lifted the user's pause of partition 1")
	}
	if err := m.p.Resume("in", 1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "partition 1 handled after Resume", func() bool { return committed(t, addrs, "g", "in")[1] == 2 })
}

// TestPauseForgottenOnRevoke: a pause is of this member's hold of the
// partition. When a second member joins, the partition that moves to it is
// handled there; the one that stays with the first member stays paused;
// the first member's Pause and Resume of the moved one say it is not
// assigned. Pause of partitions not held pauses nothing.
func TestPauseForgottenOnRevoke(t *testing.T) {
	addrs := testCluster(t, map[string]int32{"in": 2})
	var logA, logB pauseLog
	a := startMember(t, rebalanceOpts(addrs, WithHandler(func(_ context.Context, r *kgo.Record) error { logA.add(r); return nil }))...)
	waitFor(t, 20*time.Second, "A holds both partitions", func() bool { return len(a.p.Health().Partitions) == 2 })
	if err := a.p.Pause("in", 0, 7); !errors.Is(err, ErrNotAssigned) || !strings.Contains(err.Error(), "[7]") {
		t.Fatalf("Pause of a partition not held: %v, want ErrNotAssigned naming 7", err)
	}
	if err := a.p.Pause("other"); !errors.Is(err, ErrNotAssigned) {
		t.Fatalf("Pause of a topic not consumed: %v, want ErrNotAssigned", err)
	}
	if h := a.p.Health(); len(h.PausedPartitions) != 0 {
		t.Fatalf("a refused Pause paused %v", h.PausedPartitions)
	}
	if err := a.p.Pause("in"); err != nil { // both
		t.Fatal(err)
	}
	if h := a.p.Health(); fmt.Sprint(h.PausedPartitions) != "[in[0] in[1]]" {
		t.Fatalf("paused %v, want both", h.PausedPartitions)
	}

	b := startMember(t, rebalanceOpts(addrs, WithHandler(func(_ context.Context, r *kgo.Record) error { logB.add(r); return nil }))...)
	waitFor(t, 20*time.Second, "one partition each", func() bool {
		return len(a.p.Health().Partitions) == 1 && len(b.p.Health().Partitions) == 1
	})
	kept := a.p.Health().Partitions[0]
	moved := int32(0)
	if kept == "in[0]" {
		moved = 1
	}
	if h := a.p.Health(); fmt.Sprint(h.PausedPartitions) != "["+kept+"]" {
		t.Fatalf("A's paused partitions %v, want the one it kept, %s", h.PausedPartitions, kept)
	}
	if err := a.p.Resume("in", moved); !errors.Is(err, ErrNotAssigned) {
		t.Fatalf("Resume of the moved partition: %v, want ErrNotAssigned", err)
	}
	produce(t, addrs, &kgo.Record{Topic: "in", Partition: 0, Value: []byte("x")}, &kgo.Record{Topic: "in", Partition: 1, Value: []byte("y")})
	waitFor(t, 20*time.Second, "B handles the moved partition", func() bool { return len(logB.of(moved)) == 1 })
	if len(logA.of(1-moved)) != 0 {
		t.Fatalf("A handled its paused partition: %v", logA.of(1-moved))
	}
	if len(b.p.Health().PausedPartitions) != 0 {
		t.Fatalf("B inherited a pause: %v", b.p.Health().PausedPartitions)
	}
}

// TestTxnPause: TxnProcessor.Pause stops the polling of a partition (its
// records produced after Pause are not transformed) while transactions go
// on for the other; after Resume they are transformed and committed once.
func TestTxnPause(t *testing.T) {
	addrs := testCluster(t, map[string]int32{"in": 2, "out": 1})
	var log pauseLog
	tx, err := NewTransactional("txn-pause", func(_ context.Context, r *kgo.Record) ([]*kgo.Record, error) {
		log.add(r)
		return []*kgo.Record{{Topic: "out", Value: r.Value}}, nil
	}, Brokers(addrs...), Group("g"), Topics("in"), CommitInterval(10*time.Millisecond),
		ConsumerOpts(kgo.FetchMaxWait(100*time.Millisecond))) // a resumed partition joins the fetch after the one in flight
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Pause("in", 0); !errors.Is(err, ErrNotAssigned) {
		t.Fatalf("Pause before Run: %v, want ErrNotAssigned", err)
	}
	testkafka.Run(t, tx)
	recs := func(part int32, from, to int) (out []*kgo.Record) {
		for i := from; i < to; i++ {
			out = append(out, &kgo.Record{Topic: "in", Partition: part, Value: val(i)})
		}
		return out
	}
	produce(t, addrs, recs(0, 0, 3)...)
	waitFor(t, 20*time.Second, "partition 0 committed", func() bool { return committed(t, addrs, "g", "in")[0] == 3 })
	if err := tx.Pause("in", 0, 9); !errors.Is(err, ErrNotAssigned) {
		t.Fatalf("Pause of a partition not held: %v, want ErrNotAssigned", err)
	}
	if err := tx.Pause("in", 0); err != nil {
		t.Fatal(err)
	}
	if h := tx.Health(); fmt.Sprint(h.PausedPartitions) != "[in[0]]" {
		t.Fatalf("Health.PausedPartitions %v", h.PausedPartitions)
	}
	produce(t, addrs, append(recs(0, 3, 6), recs(1, 0, 3)...)...)
	waitFor(t, 20*time.Second, "partition 1 committed", func() bool { return committed(t, addrs, "g", "in")[1] == 3 })
	if got := log.of(0); len(got) != 3 {
		t.Fatalf("partition 0 transformed %v while paused, want offsets 0..2 only", got)
	}
	if err := tx.Resume("in"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "partition 0 committed after Resume", func() bool { return committed(t, addrs, "g", "in")[0] == 6 })
	if got := log.of(0); fmt.Sprint(got) != "[0 1 2 3 4 5]" {
		t.Fatalf("partition 0 transformed %v, want 0..5 once each, in order", got)
	}
	if h := tx.Health(); len(h.PausedPartitions) != 0 {
		t.Fatalf("still paused after Resume: %v", h.PausedPartitions)
	}
}

// TestTxnPauseForgottenOnRevoke: the partition a second member takes over
// loses its pause at the first member (in the client too: franz-go would
// keep it paused across assignments) and is transformed by the second; the
// one the first keeps stays paused.
func TestTxnPauseForgottenOnRevoke(t *testing.T) {
	parallel(t)
	addrs := testCluster(t, map[string]int32{"in": 2, "out": 1})
	var logA, logB pauseLog
	start := func(id string, log *pauseLog) *TxnProcessor {
		tx, err := NewTransactional(id, func(_ context.Context, r *kgo.Record) ([]*kgo.Record, error) {
			log.add(r)
			return []*kgo.Record{{Topic: "out", Value: r.Value}}, nil
		}, Brokers(addrs...), Group("g"), Topics("in"), CommitInterval(10*time.Millisecond),
			ConsumerOpts(kgo.FetchMaxWait(100*time.Millisecond)))
		if err != nil {
			t.Fatal(err)
		}
		testkafka.Run(t, tx)
		return tx
	}
	a := start("txn-a", &logA)
	waitFor(t, 20*time.Second, "A holds both partitions", func() bool { return len(a.Health().Partitions) == 2 })
	if err := a.Pause("in"); err != nil {
		t.Fatal(err)
	}
	b := start("txn-b", &logB)
	waitFor(t, 20*time.Second, "one partition each", func() bool {
		return len(a.Health().Partitions) == 1 && len(b.Health().Partitions) == 1
	})
	kept := a.Health().Partitions[0]
	moved := int32(0)
	if kept == "in[0]" {
		moved = 1
	}
	if h := a.Health(); fmt.Sprint(h.PausedPartitions) != "["+kept+"]" {
		t.Fatalf("A's paused partitions %v, want the one it kept, %s", h.PausedPartitions, kept)
	}
	a.mu.Lock()
	clientPaused := a.sess.Client().PauseFetchPartitions(nil)
	a.mu.Unlock()
	if slices.Contains(clientPaused["in"], moved) || !slices.Contains(clientPaused["in"], 1-moved) {
		t.Fatalf("A's client pauses %v, want in[%d] only", clientPaused, 1-moved)
	}
	produce(t, addrs, &kgo.Record{Topic: "in", Partition: 0, Value: []byte("x")}, &kgo.Record{Topic: "in", Partition: 1, Value: []byte("y")})
	waitFor(t, 20*time.Second, "B transforms the moved partition", func() bool { return len(logB.of(moved)) == 1 })
	if len(logA.of(1-moved)) != 0 || len(b.Health().PausedPartitions) != 0 {
		t.Fatalf("A transformed its paused partition (%v) or B inherited a pause (%v)", logA.of(1-moved), b.Health().PausedPartitions)
	}
}
