package processor

import (
	"math/rand/v2"
	"testing"
)

// TestOffsetTrackerRandomCompletion completes fetched offsets (with gaps, as
// compaction and transaction markers leave) in random orders and checks after
// every step that the commit point is exactly the offset after the longest
// completed prefix: never beyond a record not yet done, never backwards.
func TestOffsetTrackerRandomCompletion(t *testing.T) {
	for seed := uint64(0); seed < 300; seed++ {
		rng := rand.New(rand.NewPCG(seed, seed*7+1))
		tr := newOffsetTracker()
		n := 1 + rng.IntN(300)
		offsets := make([]int64, n)
		entries := make([]*offsetEntry, n)
		next := int64(rng.IntN(1000))
		for i := range n {
			offsets[i] = next
			entries[i] = &offsetEntry{offset: next}
			if !tr.add(entries[i]) {
				t.Fatalf("seed %d: add(%d) refused", seed, next)
			}
			next += 1 + int64(rng.IntN(3)) // gaps
		}
		done := make([]bool, n)
		last := int64(-1)
		for _, i := range rng.Perm(n) {
			tr.complete(entries[i])
			done[i] = true
			want := int64(-1)
			for j := 0; j < n && done[j]; j++ {
				want = offsets[j] + 1
			}
			if tr.mark != want {
				t.Fatalf("seed %d: mark %d, want %d", seed, tr.mark, want)
			}
			if tr.mark < last {
				t.Fatalf("seed %d: mark moved backwards %d -> %d", seed, last, tr.mark)
			}
			last = tr.mark
		}
		if tr.pending() != 0 || tr.mark != offsets[n-1]+1 {
			t.Fatalf("seed %d: pending %d mark %d", seed, tr.pending(), tr.mark)
		}
	}
}

func TestOffsetTrackerRefusesOldOffsets(t *testing.T) {
	tr := newOffsetTracker()
	a := &offsetEntry{offset: 10}
	tr.add(a)
	if tr.add(&offsetEntry{offset: 10}) || tr.add(&offsetEntry{offset: 5}) {
		t.Fatal("re-added offsets must be refused")
	}
	tr.complete(a)
	if tr.add(&offsetEntry{offset: 9}) {
		t.Fatal("offset below the commit point must be refused")
	}
	if !tr.add(&offsetEntry{offset: 11}) {
		t.Fatal("next offset refused")
	}
	tr.truncate()
	if tr.mark != 11 || tr.pending() != 0 {
		t.Fatalf("after truncate: mark %d pending %d", tr.mark, tr.pending())
	}
}

func FuzzOffsetTracker(f *testing.F) {
	f.Add([]byte{3, 1, 2, 0})
	f.Fuzz(func(t *testing.T, order []byte) {
		n := len(order)
		if n == 0 || n > 200 {
			return
		}
		tr := newOffsetTracker()
		es := make([]*offsetEntry, n)
		for i := range n {
			es[i] = &offsetEntry{offset: int64(i * 2)}
			tr.add(es[i])
		}
		done := make([]bool, n)
		for _, b := range order {
			i := int(b) % n
			if done[i] {
				continue
			}
			done[i] = true
			tr.complete(es[i])
			want := int64(-1)
			for j := 0; j < n && done[j]; j++ {
				want = int64(j*2) + 1
			}
			if tr.mark != want {
				t.Fatalf("mark %d want %d", tr.mark, want)
			}
		}
	})
}
