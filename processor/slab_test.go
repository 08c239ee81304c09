package processor

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestItemSlabsReusedOnlyWhenPassed: item slabs (newItemLocked) go back to
// the pool only when the commit point passed every one of their items. One
// record of partition 0 is held in its handler while thousands of others,
// of every partition, complete (partition 0's later slabs whole, none
// passed) and the other partitions' slabs are reused: every record is
// still handled exactly once, as itself (an item reused too early would
// show its handler another record), in order per key, and the attempt
// context a handler kept past its return still says it ended, with its own
// deadline (contexts are never reused).
func TestItemSlabsReusedOnlyWhenPassed(t *testing.T) {
	const parts, perPart, keys = 6, 2000, 100
	const heldOffset = 3
	release := make(chan struct{})
	var (
		mu       sync.Mutex
		seen     = map[string]int{}
		lastSeq  = map[string]int{}
		bad      []string
		handled  int
		keptCtx  context.Context
		keptDead time.Time
	)
	h := func(ctx context.Context, r *kgo.Record) error {
		if r.Partition == 0 && r.Offset == heldOffset {
			<-release
		}
		mu.Lock()
		defer mu.Unlock()
		id := fmt.Sprintf("%d/%d", r.Partition, r.Offset)
		if want := id + "/" + string(r.Key); string(r.Value) != want {
			bad = append(bad, fmt.Sprintf("handled %q as record %s", r.Value, id))
		}
		seen[id]++
		lk := fmt.Sprintf("%d/%s", r.Partition, r.Key)
		if seq, ok := lastSeq[lk]; ok && seq >= int(r.Offset) {
			bad = append(bad, fmt.Sprintf("key %s: offset %d after %d", lk, r.Offset, seq))
		}
		lastSeq[lk] = int(r.Offset)
		if keptCtx == nil {
			keptCtx = ctx
			keptDead, _ = ctx.Deadline()
		}
		handled++
		return nil
	}
	p, err := New(Brokers("127.0.0.1:1"), Group("g"), Topics("t"), WithOrdering(OrderKey), Concurrency(8), WithHandler(h))
	if err != nil {
		t.Fatal(err)
	}
	defer p.cl.Close()
	var wg sync.WaitGroup
	p.mu.Lock()
	for i := range int32(parts) {
		k := tp{"t", i}
		ctx, cancel := context.WithCancel(p.baseCtx)
		p.parts[k] = &partState{tp: k, tracker: newOffsetTracker(), committed: -1, ctx: ctx, cancel: cancel}
		p.activeParts++
	}
	p.startWorkersLocked(&wg)
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.stopping = true
		p.workCond.Broadcast()
		p.mu.Unlock()
		wg.Wait()
	}()
	var releaseOnce sync.Once
	releaseHeld := func() { releaseOnce.Do(func() { close(release) }) }
	defer releaseHeld() // before the workers are stopped: a failed test must not leave the held handler blocked
	// admit moves what is pending into lanes as room frees (the poll
	// loop's part) and reports whether polling may go on.
	admit := func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		if !p.paused {
			p.unholdSharesLocked()
		}
		if !p.paused && p.pendingRecs > p.heldRecs {
			p.moveLocked()
		}
		return !p.paused && !p.pendingFull && p.pendingRecs == p.heldRecs
	}
	handledN := func() int { mu.Lock(); defer mu.Unlock(); return handled }
	const batch = 200
	for off := int64(0); off < perPart; off += batch {
		waitFor(t, 30*time.Second, "room to admit a poll", admit)
		var f kgo.FetchTopic
		f.Topic = "t"
		for i := range int32(parts) {
			recs := make([]*kgo.Record, batch)
			for j := range recs {
				o := off + int64(j)
				key := fmt.Sprintf("k%d", (int(o)*parts+int(i))%keys)
				if i == 0 && o == heldOffset {
					key = "held" // alone behind it: the partition's later slabs complete whole
				}
				recs[j] = &kgo.Record{Topic: "t", Partition: i, Offset: o, Key: []byte(key), Value: fmt.Appendf(nil, "%d/%d/%s", i, o, key)}
			}
			f.Partitions = append(f.Partitions, kgo.FetchPartition{Partition: i, Records: recs, HighWatermark: off + batch})
		}
		p.enqueue(kgo.Fetches{{Topics: []kgo.FetchTopic{f}}})
		if handledN() >= 3000 {
			select {
			case <-release:
			default:
				// Thousands completed with offset 3 of partition 0 in
				// its handler: partition 0's commit point stays at 3,
				// the other partitions' slabs were passed and reused.
				// Its tracker still holds its completed records
				// above the commit point, in offset order (an item
				// reused too early would put another record's entry
				// among them), and its completed-offsets map, the
				// handover's, names only records handled.
				p.mu.Lock()
				tr := p.parts[tp{"t", 0}].tracker
				mark0, prev, order := tr.mark, int64(-1), true
				for _, e := range tr.entries[tr.head:] {
					order = order && e.offset > prev
					prev = e.offset
				}
				meta := tr.encodeOffsetMap(tr.base(), 4096)
				p.mu.Unlock()
				if mark0 > heldOffset {
					t.Fatalf("partition 0's commit point %d passed the held offset %d", mark0, heldOffset)
				}
				if !order {
					t.Fatal("partition 0's tracker entries are out of offset order: an item was reused before its entry was passed")
				}
				ranges, err := decodeOffsetMap(meta, heldOffset)
				if err != nil {
					t.Fatalf("partition 0's completed-offsets map %q: %v", meta, err)
				}
				mu.Lock()
				var covered int64
				for _, r := range ranges {
					for o := r.lo; o <= r.hi; o++ {
						if seen[fmt.Sprintf("0/%d", o)] != 1 {
							t.Errorf("partition 0's completed-offsets map names offset %d, handled %d times", o, seen[fmt.Sprintf("0/%d", o)])
						}
					}
					covered += r.hi - r.lo + 1
				}
				mu.Unlock()
				if covered < 2*slabItems {
					t.Fatalf("partition 0's map covers %d completed offsets, want at least %d (whole slabs)", covered, 2*slabItems)
				}
				releaseHeld()
			}
		}
	}
	waitFor(t, 60*time.Second, "every record handled", func() bool { admit(); return handledN() == parts*perPart })
	mu.Lock()
	defer mu.Unlock()
	for _, b := range bad[:min(len(bad), 10)] {
		t.Error(b)
	}
	for i := range parts {
		for o := range perPart {
			if n := seen[fmt.Sprintf("%d/%d", i, o)]; n != 1 {
				t.Fatalf("record %d/%d handled %d times, want 1", i, o, n)
			}
		}
	}
	p.mu.Lock()
	for i := range int32(parts) {
		if m := p.parts[tp{"t", i}].tracker.mark; m != perPart {
			t.Errorf("partition %d: commit point %d, want %d", i, m, perPart)
		}
	}
	pooled := len(p.freeSlabs)
	p.mu.Unlock()
	if pooled == 0 {
		t.Error("no item slab went back to the pool")
	}
	if keptCtx.Err() == nil {
		t.Error("a handler's context kept past its return does not report it ended")
	}
	if d, _ := keptCtx.Deadline(); !d.Equal(keptDead) {
		t.Errorf("a kept context's deadline changed from %v to %v: its memory was reused", keptDead, d)
	}
}

// TestRecycledItemHasNoFailState: an item's failure state (item.fail, set
// on a failure or by a retry topic's headers) belongs to its record only. A
// pooled slab whose items failed goes back to the pool once the commit point
// passed them all, and the records that take its items next start with no
// failure state, stage or batch fallback of their own predecessors (one
// carried over would count another record's attempts against this one's
// MaxAttempts, delay it by another's retry due time, or keep it out of
// batches).
func TestRecycledItemHasNoFailState(t *testing.T) {
	p, err := New(Brokers("127.0.0.1:1"), Group("g"), Topics("t"), WithOrdering(OrderKey),
		WithHandler(func(context.Context, *kgo.Record) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	defer p.cl.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	ps := &partState{tp: tp{"t", 0}, tracker: newOffsetTracker(), committed: -1}
	// A poll's worth pending, so that items come from pooled slabs.
	ps.pending = make([]*kgo.Record, 4*slabItems)
	take := func() []*item {
		items := make([]*item, slabItems)
		for i := range items {
			items[i] = p.newItemLocked(ps)
		}
		return items
	}
	first := take()
	if first[0].entry.slab == nil {
		t.Fatal("items not from a pooled slab")
	}
	for i, it := range first {
		f := it.failState()
		f.attempts, f.hopTries, f.fwdTries = 3, 2, 1
		f.due, f.first, f.last = time.Now().Add(time.Hour), time.Now(), time.Now()
		f.target, f.lastErr = "t.retry.1", fmt.Errorf("failed %d", i)
		it.stage, it.solo = stageForward, true
	}
	old := make([]*itemFail, len(first))
	for i, it := range first {
		old[i] = it.fail
		p.itemPassed(&it.entry) // the commit point passed them all
	}
	if len(p.freeSlabs) != 1 {
		t.Fatalf("%d free slabs after passing a whole slab, want 1", len(p.freeSlabs))
	}
	second := take()
	if second[0].entry.slab != first[0].entry.slab {
		t.Fatal("the passed slab was not reused")
	}
	for i, it := range second {
		if it.fail != nil || it.stage != stageHandle || it.solo || it.tried() || !it.due().IsZero() {
			t.Fatalf("reused item %d: fail %+v, stage %d, solo %v", i, it.fail, it.stage, it.solo)
		}
		if it.failState() == old[i] {
			t.Fatalf("reused item %d shares its predecessor's failure state", i)
		}
	}
}
