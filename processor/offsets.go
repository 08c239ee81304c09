package processor

// offsetTracker computes a partition's commit point: the offset after the
// contiguous run of completed records, in the order they were fetched.
//
// Records of one partition arrive in offset order, but offsets are not dense
// (compaction and transaction markers leave gaps), so the tracker keeps the
// fetched offsets themselves rather than assuming offset+1. Completion order
// is arbitrary (key and unordered modes); the commit point only ever moves
// forward and never passes an offset that has not completed.
//
// Not safe for concurrent use: the processor guards it with its mutex.
type offsetTracker struct {
	entries []*offsetEntry // fetched, not yet passed by the commit point, in offset order
	head    int            // entries[:head] are passed (not cleared until the next compaction: see complete)
	shift   int64          // entries removed from the front of entries (offsetEntry.idx - shift is the position)
	mark    int64          // commit point: the next offset to consume; -1 until the first record is passed
	// last is the offset of entries[len(entries)-1] while len(entries) >
	// head: admission reads it for every record, and the entry itself
	// lives in the record's item, a cache miss away.
	last int64
	// mapBound is an upper bound of the raw bytes that the run lengths of
	// the completed-offsets map of entries[head:] (see offsetmap.go) can
	// take, now or after any further completions: the uvarint length of
	// each maximal run of completed entries, plus, for each entry not
	// completed, the uvarint length of its span (its distance to the entry
	// before it, or to mark-1). Any later map is made of runs that each
	// unite some of those completed runs and spans, and the uvarint length
	// of a sum is at most the sum of the lengths; so admission that keeps
	// mapBound within the budget keeps every map within it, whatever
	// completes next. It is kept exact as entries complete (runs merge).
	mapBound int
	// earlier lists the offsets completed by an earlier owner of the
	// partition above its commit point, from its commit's metadata
	// (ascending); such records are completed without a handler call.
	earlier []offsetRange
	// passed, if set, is called with each entry the commit point passes,
	// once, before the tracker forgets it (the processor reuses the
	// entry's item: Processor.itemPassed).
	passed func(*offsetEntry)
}

type offsetEntry struct {
	offset  int64
	fetched int64 // Unix nanoseconds
	idx     int64 // the entry's sequence number in its tracker
	span    int64 // offset minus the offset of the entry before it (or mark-1)
	// For a completed entry at either end of a maximal run of completed
	// entries: the idx of the run's other end.
	other int64
	done  bool
	slab  *itemSlab // the block holding the entry's item, if pooled (see itemSlab)
}

func newOffsetTracker() *offsetTracker { return &offsetTracker{mark: -1} }

// add appends e, a fetched offset, and reports whether it was accepted.
// Offsets must be added in increasing order; an offset at or below the last
// added one is refused: it is a re-delivery from an older fetch and must not
// be handled again by this assignment.
func (t *offsetTracker) add(e *offsetEntry) bool {
	prev := e.offset - 1 // the first record ever: the map would start at it
	if len(t.entries) > t.head {
		if e.offset <= t.last {
			return false
		}
		prev = t.last
	} else if t.mark >= 0 {
		if e.offset < t.mark {
			return false
		}
		prev = t.mark - 1
	}
	e.span = e.offset - prev
	e.idx = t.shift + int64(len(t.entries))
	e.done = false
	t.mapBound += uvarintLen(uint64(e.span))
	t.entries = append(t.entries, e)
	t.last = e.offset
	return true
}

// at returns the entry with sequence number idx.
func (t *offsetTracker) at(idx int64) *offsetEntry { return t.entries[idx-t.shift] }

// runLen is the number of offsets covered by the entries first..last
// (sequence numbers, inclusive): from the offset after the entry before
// first to last's offset.
func (t *offsetTracker) runLen(first, last int64) int64 {
	return t.at(last).offset - t.at(first).offset + t.at(first).span
}

// mapCost is what admitting a record at off would add to mapBound.
func (t *offsetTracker) mapCost(off int64) int {
	prev := off - 1
	if len(t.entries) > t.head {
		prev = t.last
	} else if t.mark >= 0 {
		prev = t.mark - 1
	}
	if off <= prev {
		return 0 // refused by add anyway
	}
	return uvarintLen(uint64(off - prev))
}

// base is the offset a commit of t's state would carry: the commit point, or
// before the first record was passed, the first record held (-1: none).
func (t *offsetTracker) base() int64 {
	if t.mark >= 0 {
		return t.mark
	}
	if t.head < len(t.entries) {
		return t.entries[t.head].offset
	}
	return -1
}

// doneEarlier reports whether an earlier owner completed off (see earlier),
// forgetting the ranges below off: offsets are asked in increasing order.
func (t *offsetTracker) doneEarlier(off int64) bool {
	for len(t.earlier) > 0 && t.earlier[0].hi < off {
		t.earlier = t.earlier[1:]
	}
	return len(t.earlier) > 0 && t.earlier[0].lo <= off
}

// complete marks e done and advances the commit point over the contiguous run
// of done entries. It reports whether the commit point moved.
func (t *offsetTracker) complete(e *offsetEntry) bool {
	if e.done {
		return false
	}
	// e leaves the not-done spans and joins the completed runs on either
	// side of it (see mapBound).
	t.mapBound -= uvarintLen(uint64(e.span))
	first, last := e.idx, e.idx
	pos := int(e.idx - t.shift)
	if pos > t.head && t.entries[pos-1].done {
		first = t.entries[pos-1].other
		t.mapBound -= uvarintLen(uint64(t.runLen(first, e.idx-1)))
	}
	if pos+1 < len(t.entries) && t.entries[pos+1].done {
		last = t.entries[pos+1].other
		t.mapBound -= uvarintLen(uint64(t.runLen(e.idx+1, last)))
	}
	e.done = true
	if pos != t.head {
		t.at(first).other, t.at(last).other = last, first
		t.mapBound += uvarintLen(uint64(t.runLen(first, last)))
		return false
	}
	// e was the first entry not done: the commit point passes it and the
	// completed run after it, and the entry after that is not done.
	end := int(last-t.shift) + 1
	t.mark = t.entries[end-1].offset + 1
	if t.passed != nil {
		for _, p := range t.entries[t.head:end] {
			t.passed(p)
		}
	}
	// The passed slots are not cleared one run at a time (a write barrier
	// per slot during a GC, for every record): the compaction below
	// overwrites or clears them all, so what they still point to (items
	// of slabs, pooled or not) is held at most until then, while the
	// passed slots are at most half of the array.
	t.head = end
	if t.head > 64 && t.head*2 >= len(t.entries) {
		n := copy(t.entries, t.entries[t.head:])
		clear(t.entries[n:])
		t.entries = t.entries[:n]
		t.shift += int64(t.head)
		t.head = 0
	}
	return true
}

// oldest returns the fetch time of the first offset not yet done, the oldest
// record held for the partition.
func (t *offsetTracker) oldest() (int64, bool) {
	if t.head < len(t.entries) {
		return t.entries[t.head].fetched, true
	}
	return 0, false
}

// pending is the number of fetched offsets not yet passed by the commit point.
func (t *offsetTracker) pending() int { return len(t.entries) - t.head }

// truncate forgets every entry not yet passed (records dropped on revoke or
// shutdown). The commit point stays where it is, so the dropped records will
// be fetched again by whoever owns the partition next.
func (t *offsetTracker) truncate() {
	clear(t.entries)
	t.shift += int64(len(t.entries))
	t.entries = t.entries[:0]
	t.head = 0
	t.mapBound = 0
}
