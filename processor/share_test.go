package processor

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestPartitionShareOfMaxInFlight: a partition holds at most its share of
// MaxInFlight (MaxInFlight / assigned partitions, rounded up; holdShare), so
// a fetch that brings one partition's backlog does not fill the room with
// that partition and stop polling while the others have nothing (without
// it, with a slow handler one or two partitions were handled at a time). In
// OrderPartition the share counts the partition's records; in OrderKey the
// records queued behind an earlier record of their key (here partition 0's
// backlog has two keys). Partition 0's backlog is written first and its
// handler blocks; the member must then hold 16 of its records (48 / 3; in
// OrderKey 16 plus its two keys' heads), not be paused, and go on polling,
// so that records written later to partitions 1 and 2 are handled while
// partition 0's first records are still in their handler. Without the share
// (shareFullLocked always false) partition 0 takes all 48, polling pauses,
// and partitions 1 and 2 are never fetched.
func TestPartitionShareOfMaxInFlight(t *testing.T) {
	for _, c := range []struct {
		order Ordering
		keys  int // of partition 0's backlog (0: null keys)
		held  int // partition 0's share, plus its keys' heads in OrderKey
	}{{OrderPartition, 0, 16}, {OrderKey, 2, 18}} {
		t.Run(c.order.String(), func(t *testing.T) { testPartitionShare(t, c.order, c.keys, c.held) })
	}
}

func testPartitionShare(t *testing.T, order Ordering, keys, held int) {
	addrs := testCluster(t, map[string]int32{"in": 3})
	var recs []*kgo.Record
	for i := range 100 {
		r := &kgo.Record{Topic: "in", Partition: 0, Value: val(i)}
		if keys > 0 {
			r.Key = []byte(fmt.Sprintf("k%d", i%keys))
		}
		recs = append(recs, r)
	}
	produce(t, addrs, recs...)
	release := make(chan struct{})
	var mu sync.Mutex
	inHandler := map[int32]int{}
	m := startMember(t, Brokers(addrs...), Group("g"), Topics("in"), WithOrdering(order),
		MaxInFlight(48, 64<<20), CommitInterval(10*time.Millisecond),
		WithHandler(func(ctx context.Context, r *kgo.Record) error {
			mu.Lock()
			inHandler[r.Partition]++
			mu.Unlock()
			defer func() {
				mu.Lock()
				inHandler[r.Partition]--
				mu.Unlock()
			}()
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}))
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	waitFor(t, 30*time.Second, "partition 0's records admitted up to its share", func() bool {
		return m.p.Health().InFlight >= held
	})
	// Admission is synchronous with the poll (enqueue), and partition 0's
	// surplus waits pending: what is held now is what it was given.
	h := m.p.Health()
	if h.InFlight > held {
		t.Fatalf("partition 0 holds %d records in flight, want %d (its share of MaxInFlight 48 over 3 partitions is 16)", h.InFlight, held)
	}
	if h.Paused {
		t.Fatal("polling paused for backpressure with one partition holding its share")
	}
	var more []*kgo.Record
	for i := range 10 {
		more = append(more, &kgo.Record{Topic: "in", Partition: 1, Value: val(i)}, &kgo.Record{Topic: "in", Partition: 2, Value: val(i)})
	}
	produce(t, addrs, more...)
	waitFor(t, 30*time.Second, "the three partitions in their handlers at once", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return inHandler[0] == max(1, keys) && inHandler[1] >= 1 && inHandler[2] >= 1
	})
	close(release)
	waitFor(t, 30*time.Second, "everything committed", func() bool {
		return committedEquals(t, addrs, "g", map[tp]int64{{"in", 0}: 100, {"in", 1}: 10, {"in", 2}: 10})
	})
	m.stop()
}
