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
	head    int            // entries[:head] are passed and nil
	mark    int64          // commit point: the next offset to consume; -1 until the first record is passed
	// mapBound is an upper bound of the raw bytes the run lengths of the
	// completed-offsets map of entries[head:] can take (see offsetmap.go):
	// the sum over those entries of the uvarint length of each one's
	// distance to the entry before it. A run's length is the sum of its
	// entries' distances, and the uvarint length of a sum is at most the
	// sum of the lengths, so the encoded map never exceeds it. It does not
	// change when the commit point passes an entry (the new first entry's
	// distance is to the passed one, mark-1).
	mapBound int
	// earlier lists the offsets completed by an earlier owner of the
	// partition above its commit point, from its commit's metadata
	// (ascending); such records are completed without a handler call.
	earlier []offsetRange
}

type offsetEntry struct {
	offset  int64
	fetched int64 // Unix nanoseconds
	done    bool
	mapLen  uint8 // this entry's share of offsetTracker.mapBound
}

func newOffsetTracker() *offsetTracker { return &offsetTracker{mark: -1} }

// add appends e, a fetched offset, and reports whether it was accepted.
// Offsets must be added in increasing order; an offset at or below the last
// added one is refused: it is a re-delivery from an older fetch and must not
// be handled again by this assignment.
func (t *offsetTracker) add(e *offsetEntry) bool {
	prev := e.offset - 1 // the first record ever: the map would start at it
	if n := len(t.entries); n > t.head {
		if e.offset <= t.entries[n-1].offset {
			return false
		}
		prev = t.entries[n-1].offset
	} else if t.mark >= 0 {
		if e.offset < t.mark {
			return false
		}
		prev = t.mark - 1
	}
	e.mapLen = uint8(uvarintLen(uint64(e.offset - prev)))
	t.mapBound += int(e.mapLen)
	t.entries = append(t.entries, e)
	return true
}

// mapCost is what admitting a record at off would add to mapBound.
func (t *offsetTracker) mapCost(off int64) int {
	prev := off - 1
	if n := len(t.entries); n > t.head {
		prev = t.entries[n-1].offset
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
	e.done = true
	moved := false
	for t.head < len(t.entries) && t.entries[t.head].done {
		t.mark = t.entries[t.head].offset + 1
		t.mapBound -= int(t.entries[t.head].mapLen)
		t.entries[t.head] = nil
		t.head++
		moved = true
	}
	if t.head > 64 && t.head*2 >= len(t.entries) {
		n := copy(t.entries, t.entries[t.head:])
		clear(t.entries[n:])
		t.entries = t.entries[:n]
		t.head = 0
	}
	return moved
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
	t.entries = t.entries[:0]
	t.head = 0
	t.mapBound = 0
}
