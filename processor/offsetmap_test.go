package processor

import (
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// trackerWith builds a tracker holding offsets (ascending) with the done ones
// completed, as the processor would.
func trackerWith(offsets []int64, done map[int64]bool) (*offsetTracker, []*offsetEntry) {
	tr := newOffsetTracker()
	var es []*offsetEntry
	for _, o := range offsets {
		e := &offsetEntry{offset: o}
		if !tr.add(e) {
			panic("refused")
		}
		es = append(es, e)
	}
	for _, e := range es {
		if done[e.offset] {
			tr.complete(e)
		}
	}
	return tr, es
}

// TestOffsetMapRoundTrip: for random holdings (gaps in the offsets, random
// completions), the map decodes to exactly the completed offsets above the
// commit point, and its size stays within the tracker's bound.
func TestOffsetMapRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 2000 {
		n := 1 + rng.IntN(400)
		var offsets []int64
		off := int64(rng.IntN(1 << 20))
		for range n {
			offsets = append(offsets, off)
			off += 1 + int64(rng.IntN(3)) // gaps: compaction, markers
			if rng.IntN(50) == 0 {
				off += int64(rng.IntN(1 << 16)) // a large gap
			}
		}
		done := map[int64]bool{}
		p := rng.Float64()
		for _, o := range offsets {
			if rng.Float64() < p {
				done[o] = true
			}
		}
		tr, _ := trackerWith(offsets, done)
		base := tr.base()
		meta := tr.encodeOffsetMap(base, 0)
		var want []int64 // completed above the commit point
		for _, e := range tr.entries[tr.head:] {
			if e.done {
				want = append(want, e.offset)
			}
		}
		if len(want) == 0 {
			if meta != "" {
				t.Fatalf("round %d: nothing completed above %d, map %q", round, base, meta)
			}
			continue
		}
		if limit := len(offsetMapPrefix) + (10+tr.mapBound)*4/3 + 1; len(meta) > limit {
			t.Fatalf("round %d: map of %d bytes over the bound %d", round, len(meta), limit)
		}
		if want := boundFromScratch(tr); want != tr.mapBound {
			t.Fatalf("round %d: mapBound %d, computed from scratch %d", round, tr.mapBound, want)
		}
		ranges, err := decodeOffsetMap(meta, base)
		if err != nil {
			t.Fatalf("round %d: decode %q: %v", round, meta, err)
		}
		// Every held offset is in a range iff it is done; offsets in
		// gaps may fall either way.
		for _, e := range tr.entries[tr.head:] {
			if got := inRanges(ranges, e.offset); got != e.done {
				t.Fatalf("round %d: offset %d done=%v, map says %v", round, e.offset, e.done, got)
			}
		}
		if ranges[0].lo < base {
			t.Fatalf("round %d: range %v below the commit point %d", round, ranges[0], base)
		}
		// Skipping with doneEarlier agrees.
		tr2 := newOffsetTracker()
		tr2.earlier = ranges
		var skipped []int64
		for _, e := range tr.entries[tr.head:] {
			if tr2.doneEarlier(e.offset) {
				skipped = append(skipped, e.offset)
			}
		}
		if !slices.Equal(skipped, want) {
			t.Fatalf("round %d: skipped %v, want %v", round, skipped, want)
		}
	}
}

// boundFromScratch computes offsetTracker.mapBound by its definition: the
// uvarint length of each maximal completed run, plus that of the span of
// each entry not completed.
func boundFromScratch(tr *offsetTracker) int {
	sum := 0
	var run int64
	for _, e := range tr.entries[tr.head:] {
		if e.done {
			run += e.span
			continue
		}
		if run > 0 {
			sum += uvarintLen(uint64(run))
			run = 0
		}
		sum += uvarintLen(uint64(e.span))
	}
	if run > 0 {
		sum += uvarintLen(uint64(run))
	}
	return sum
}

func inRanges(rs []offsetRange, off int64) bool {
	for _, r := range rs {
		if r.lo <= off && off <= r.hi {
			return true
		}
	}
	return false
}

// TestOffsetMapBoundAfterPassing: the bound stays an upper bound as the commit
// point passes entries (each entry's share is its distance to the previous
// entry, which is mark-1 once that one is passed).
func TestOffsetMapBoundAfterPassing(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var offsets []int64
	for i := range 3000 {
		offsets = append(offsets, int64(i*2+rng.IntN(2)))
	}
	tr, es := trackerWith(offsets, nil)
	order := rng.Perm(len(es))
	for i, k := range order {
		tr.complete(es[k])
		if i%97 != 0 {
			continue
		}
		meta := tr.encodeOffsetMap(tr.base(), 0)
		if limit := len(offsetMapPrefix) + (10+tr.mapBound)*4/3 + 1; len(meta) > limit {
			t.Fatalf("after %d completions: map of %d bytes over the bound %d", i, len(meta), limit)
		}
		if want := boundFromScratch(tr); want != tr.mapBound {
			t.Fatalf("after %d completions: mapBound %d, computed from scratch %d", i, tr.mapBound, want)
		}
	}
	if tr.mapBound != 0 || tr.pending() != 0 {
		t.Fatalf("all done: mapBound %d, pending %d", tr.mapBound, tr.pending())
	}
}

// TestDecodeOffsetMapRefuses: metadata of other clients, maps relative to
// another offset and malformed maps yield no ranges.
func TestDecodeOffsetMapRefuses(t *testing.T) {
	tr, _ := trackerWith([]int64{10, 11, 12}, map[int64]bool{11: true})
	good := tr.encodeOffsetMap(10, 0)
	if _, err := decodeOffsetMap(good, 10); err != nil {
		t.Fatalf("good map %q: %v", good, err)
	}
	for _, c := range []struct{ name, meta string }{
		{"another client's metadata", "hello"},
		{"empty", ""},
		{"bad base64", offsetMapPrefix + "!!"},
		{"truncated varint", offsetMapPrefix + "gA"},
		{"no completed run", offsetMapPrefix + "CgE"}, // base 10, one not-done run
		{"zero-length run", offsetMapPrefix + "CgAB"},
	} {
		if r, err := decodeOffsetMap(c.meta, 10); err == nil {
			t.Errorf("%s (%q): decoded to %v, want an error", c.name, c.meta, r)
		}
	}
	if r, err := decodeOffsetMap(good, 11); err == nil {
		t.Errorf("map relative to 10 decoded against committed offset 11: %v", r)
	}
}

// FuzzDecodeOffsetMap: commit metadata is outside input (any client may write
// it): decoding never panics, and what it returns is ascending, disjoint and
// at or above the committed offset.
func FuzzDecodeOffsetMap(f *testing.F) {
	tr, _ := trackerWith([]int64{10, 11, 12, 20}, map[int64]bool{11: true, 20: true})
	f.Add(tr.encodeOffsetMap(10, 0), int64(10))
	f.Add("oc1:", int64(0))
	f.Add("x", int64(5))
	f.Fuzz(func(t *testing.T, meta string, committed int64) {
		rs, err := decodeOffsetMap(meta, committed)
		if err != nil {
			return
		}
		last := committed - 1
		for _, r := range rs {
			if r.lo <= last || r.hi < r.lo {
				t.Fatalf("ranges %v not ascending and disjoint above %d", rs, committed)
			}
			last = r.hi
		}
	})
}

// TestOffsetMapBoundHoldsForEveryFuture: a bound taken at admission holds
// whatever completes afterwards: the worst map (every other entry done) of
// the entries held never exceeds the bound taken before any completed.
func TestOffsetMapBoundHoldsForEveryFuture(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for round := range 500 {
		var offsets []int64
		off := int64(rng.IntN(1000))
		for range 1 + rng.IntN(300) {
			offsets = append(offsets, off)
			off += 1 + int64(rng.IntN(200))
		}
		done := map[int64]bool{}
		for _, o := range offsets {
			if rng.IntN(3) == 0 {
				done[o] = true
			}
		}
		tr, es := trackerWith(offsets, done)
		bound := tr.mapBound
		// Complete the rest in a random order; the map never exceeds the
		// bound of the moment before.
		rest := []*offsetEntry{}
		for _, e := range es {
			if !e.done {
				rest = append(rest, e)
			}
		}
		rng.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
		for _, e := range rest {
			tr.complete(e)
			if base := tr.base(); base >= 0 {
				if raw := rawMapLen(t, tr.encodeOffsetMap(base, 0)); raw > 10+bound {
					t.Fatalf("round %d: map of %d raw bytes over the earlier bound %d", round, raw, 10+bound)
				}
			}
			if tr.mapBound > bound {
				t.Fatalf("round %d: bound grew from %d to %d on a completion", round, bound, tr.mapBound)
			}
			bound = tr.mapBound
		}
	}
}

func rawMapLen(t *testing.T, meta string) int {
	t.Helper()
	if meta == "" {
		return 0
	}
	raw, err := base64.RawURLEncoding.DecodeString(meta[len(offsetMapPrefix):])
	if err != nil {
		t.Fatal(err)
	}
	return len(raw)
}

// TestGroupStartSuffix: the group's start time after the map (";t=<ms>") is
// read back by decodeGroupStart and ignored by decodeOffsetMap; without a
// map before it the metadata is no map, not an error; anything but ";t="
// and 1 to 19 digits of a positive time carries no time.
func TestGroupStartSuffix(t *testing.T) {
	const ms = int64(1764590000000)
	tr, _ := trackerWith([]int64{10, 11, 12, 20}, map[int64]bool{11: true, 20: true})
	good := tr.encodeOffsetMap(10, 0)
	want, err := decodeOffsetMap(good, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := withGroupStart("", ms); got != "oc1:;t=1764590000000" {
		t.Errorf("withGroupStart(\"\") = %q", got)
	}
	if got := withGroupStart(good, 0); got != good {
		t.Errorf("withGroupStart with no time = %q, want the map unchanged", got)
	}
	for _, meta := range []string{withGroupStart("", ms), withGroupStart(good, ms)} {
		if got, ok := decodeGroupStart(meta); !ok || got != ms {
			t.Errorf("decodeGroupStart(%q) = %d, %v; want %d", meta, got, ok, ms)
		}
	}
	if r, err := decodeOffsetMap(withGroupStart(good, ms), 10); err != nil || fmt.Sprint(r) != fmt.Sprint(want) {
		t.Errorf("map with the suffix decoded to %v, %v; want %v", r, err, want)
	}
	if r, err := decodeOffsetMap(withGroupStart("", ms), 10); err != nil || r != nil {
		t.Errorf("suffix alone decoded to %v, %v; want no map and no error", r, err)
	}
	if _, err := decodeOffsetMap(offsetMapPrefix+"!!;t=5", 10); err == nil {
		t.Error("a bad map before the suffix decoded")
	}
	for _, meta := range []string{
		"", "hello", "t=5", ";t=5", "oc2:;t=5", offsetMapPrefix, good,
		"oc1:;t=", "oc1:;t=0", "oc1:;t=000", "oc1:;t=-5", "oc1:;t=+5", "oc1:;t= 5", "oc1:;t=5 ", "oc1:;t=5x",
		"oc1:;x=5", "oc1:;t=5;t=6", "oc1:;t=99999999999999999999", "oc1:;t=9223372036854775808",
	} {
		if got, ok := decodeGroupStart(meta); ok {
			t.Errorf("decodeGroupStart(%q) = %d, want no time", meta, got)
		}
	}
	if got, ok := decodeGroupStart("oc1:;t=9223372036854775807"); !ok || got != 1<<63-1 {
		t.Errorf("the largest time: %d, %v", got, ok)
	}
	if l := len(withGroupStart("", 1<<63-1)) - len(offsetMapPrefix); l != groupStartSuffixMaxLen {
		t.Errorf("longest suffix %d bytes, groupStartSuffixMaxLen %d", l, groupStartSuffixMaxLen)
	}
}

// FuzzGroupStartSuffix: decodeGroupStart never panics and returns only
// positive times; appending a time to metadata without a ';' (a map, valid
// or not) leaves what decodeOffsetMap makes of it unchanged, and the time
// reads back.
func FuzzGroupStartSuffix(f *testing.F) {
	tr, _ := trackerWith([]int64{10, 11, 12, 20}, map[int64]bool{11: true, 20: true})
	f.Add(tr.encodeOffsetMap(10, 0), int64(10), int64(1764590000000))
	f.Add("", int64(0), int64(1))
	f.Add("oc1:;t=17", int64(0), int64(5))
	f.Add("oc1:", int64(3), int64(1<<63-1))
	f.Fuzz(func(t *testing.T, meta string, committed, ms int64) {
		if got, ok := decodeGroupStart(meta); ok && got <= 0 {
			t.Fatalf("decodeGroupStart(%q) = %d", meta, got)
		}
		if strings.Contains(meta, ";") || ms <= 0 || (meta != "" && !strings.HasPrefix(meta, offsetMapPrefix)) {
			return
		}
		full := withGroupStart(meta, ms)
		if got, ok := decodeGroupStart(full); !ok || got != ms {
			t.Fatalf("decodeGroupStart(%q) = %d, %v; want %d", full, got, ok, ms)
		}
		r, err := decodeOffsetMap(full, committed)
		if meta == "" || meta == offsetMapPrefix {
			if err != nil || r != nil {
				t.Fatalf("decodeOffsetMap(%q) = %v, %v; want no map and no error", full, r, err)
			}
			return
		}
		r0, err0 := decodeOffsetMap(meta, committed)
		if (err == nil) != (err0 == nil) || fmt.Sprint(r) != fmt.Sprint(r0) {
			t.Fatalf("decodeOffsetMap(%q) = %v, %v; without the suffix %v, %v", full, r, err, r0, err0)
		}
	})
}

// TestCommitMetadataWithinBudgetWithGroupStart: with StartOffset(Latest) a
// partition whose completed-offsets map is as large as admission lets it
// grow (every other record done above a running one) still commits
// metadata within CommitMetadataMaxBytes, the group's start time included:
// the map's budget keeps room for it. A commit over the broker's
// offset.metadata.max.bytes would be refused (OFFSET_METADATA_TOO_LARGE)
// at every interval.
func TestCommitMetadataWithinBudgetWithGroupStart(t *testing.T) {
	for _, max := range []int{64, 200, DefaultCommitMetadataMaxBytes} {
		c := defaultCfg()
		c.start, c.metaMaxBytes, c.ordering = Latest, max, OrderKey
		p := &Processor{cfg: c, groupStart: newGroupStart(&c)}
		p.groupStart.learn(1<<63 - 1) // the longest suffix
		s := &partState{tracker: newOffsetTracker(), committed: -1}
		for off := int64(100); ; off += 1 + off%3 {
			if p.windowBlocksLocked(s, &kgo.Record{Offset: off}) {
				break
			}
			if s.tracker.pending() > 100000 {
				t.Fatalf("max %d: admission never stopped", max)
			}
			e := &offsetEntry{offset: off}
			s.tracker.add(e)
			if len(s.tracker.entries)%2 == 0 {
				s.tracker.complete(e)
			}
		}
		pos, ok := p.commitPosLocked(s)
		if !ok {
			t.Fatalf("max %d: nothing to commit", max)
		}
		if len(pos.meta) > max {
			t.Errorf("max %d: metadata of %d bytes", max, len(pos.meta))
		}
		if ms, ok := decodeGroupStart(pos.meta); !ok || ms != 1<<63-1 {
			t.Errorf("max %d: metadata %q carries no start time", max, pos.meta)
		}
		if r, err := decodeOffsetMap(pos.meta, pos.offset); err != nil || len(r) == 0 {
			t.Errorf("max %d: map %v, %v", max, r, err)
		}
		if pos.mapLen+len(groupStartSep)+19 != len(pos.meta) {
			t.Errorf("max %d: mapLen %d of %d bytes", max, pos.mapLen, len(pos.meta))
		}
	}
}
