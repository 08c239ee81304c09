package processor

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestLaneTableMatchesMap drives a laneTable and a Go map with the same
// random inserts, lookups and deletes (keys from a pool of 64-bit hashes and from a small range, so runs of
// occupied slots form and deletes shift entries back across them, wrapping
// at the end of the array; consecutive keys as OrderUnordered's offsets; and
// keys forced into one home slot), growing and shrinking the table, and
// checks after every step that both agree on every key, on the count and on
// the lanes listed.
func TestLaneTableMatchesMap(t *testing.T) {
	pool := make([]laneKey, 600) // 64-bit hashes, as OrderKey's
	pr := rand.New(rand.NewPCG(7, 7))
	for i := range pool {
		pool[i] = laneKey(pr.Uint64())
	}
	for _, c := range []struct {
		name string
		key  func(r *rand.Rand) laneKey
	}{
		{"random", func(r *rand.Rand) laneKey { return pool[r.IntN(len(pool))] }},
		{"small range", func(r *rand.Rand) laneKey { return laneKey(r.IntN(300)) }},
		{"consecutive", func(r *rand.Rand) laneKey { return laneKey(1000 + r.IntN(100)) }},
		{"one home", func(r *rand.Rand) laneKey {
			// Keys whose home is slot 7 of a 16-slot table.
			for {
				k := laneKey(r.IntN(1 << 12))
				if (uint64(k)*0x9E3779B97F4A7C15)>>60 == 7 {
					return k
				}
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, uint64(len(c.name))))
			var tab laneTable
			ref := map[laneKey]*lane{}
			maxN := 0
			for step := range 20000 {
				k := c.key(r)
				switch got, want := tab.get(k), ref[k]; {
				case got != want:
					t.Fatalf("step %d: get(%d) = %p, map has %p", step, k, got, want)
				case want == nil && (step%1000 < 700 || len(ref) == 0):
					l := &lane{key: k}
					tab.put(k, l)
					ref[k] = l
				case want != nil:
					if tab.del(k, &lane{}) {
						t.Fatalf("step %d: del(%d) of another lane removed it", step, k)
					}
					if !tab.del(k, want) {
						t.Fatalf("step %d: del(%d) did not find it", step, k)
					}
					delete(ref, k)
					if tab.del(k, want) {
						t.Fatalf("step %d: del(%d) twice", step, k)
					}
				}
				maxN = max(maxN, len(ref))
				if tab.len() != len(ref) {
					t.Fatalf("step %d: len %d, map has %d", step, tab.len(), len(ref))
				}
				if step%97 == 0 {
					for rk, rl := range ref {
						if tab.get(rk) != rl {
							t.Fatalf("step %d: lost key %d", step, rk)
						}
					}
					got := tab.lanes()
					want := make([]*lane, 0, len(ref))
					for _, l := range ref {
						want = append(want, l)
					}
					slices.SortFunc(got, func(a, b *lane) int { return compareKeys(a.key, b.key) })
					slices.SortFunc(want, func(a, b *lane) int { return compareKeys(a.key, b.key) })
					if !slices.Equal(got, want) {
						t.Fatalf("step %d: lanes() lists %d lanes, map has %d", step, len(got), len(want))
					}
				}
				if n := len(tab.slots); n > laneTableKeep && tab.n*8 < n/2 {
					t.Fatalf("step %d: %d slots for %d lanes: did not shrink", step, n, tab.n)
				}
			}
			// Empty it: the table shrinks back.
			for k, l := range ref {
				if !tab.del(k, l) {
					t.Fatalf("final delete of %d failed", k)
				}
			}
			if tab.len() != 0 || len(tab.slots) > laneTableKeep {
				t.Fatalf("emptied: len %d, %d slots", tab.len(), len(tab.slots))
			}
			if maxN < 40 {
				t.Fatalf("only %d keys at once: the table never grew", maxN)
			}
		})
	}
}

func compareKeys(a, b laneKey) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
