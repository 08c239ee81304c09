package processor

// laneTable maps the lane keys of one partition to its lanes. It replaces a
// Go map because in OrderKey with many keys nearly every record opens a lane
// of its own and closes it when done: one insert and one delete per record,
// which in a map cost a hash of the key (already a hash), a probe of its
// control bytes and, on delete, a second lookup (about a tenth of the
// dispatch path's CPU in profiles).
//
// It is an open-addressing table with linear probing over a power-of-two
// array of slots, keeping at most half of them full, and deleting by
// backward shift (Knuth, TAOCP vol. 3, 6.4, Algorithm R), so there are no
// tombstones and a lookup stops at the first empty slot. The slot of a key is
// its Fibonacci hash (the key times 2^64/φ, top bits): OrderUnordered's keys
// are consecutive offsets, which would otherwise fill runs of adjacent
// slots. A table of more than laneTableKeep slots shrinks when an eighth
// or less of it is used, so a partition that once held many lanes does not
// keep all their slots.
//
// Not safe for concurrent use: the processor's p.mu guards it.
type laneTable struct {
	slots []laneSlot // nil or a power of two long
	shift uint8      // 64 - log2(len(slots))
	n     int
}

// laneSlot is one slot of a laneTable: empty when l is nil.
type laneSlot struct {
	key laneKey
	l   *lane
}

// laneTableMin is the slot count a table starts with. A table shrinks only
// above laneTableKeep slots (16 KiB): a partition's lane count swings
// between none and hundreds with every fetch, and shrinking and growing
// again with it would allocate a new array each time.
const (
	laneTableMin  = 16
	laneTableKeep = 1024
)

func (t *laneTable) len() int { return t.n }

// home is the slot where the probe for k starts.
func (t *laneTable) home(k laneKey) int {
	return int((uint64(k) * 0x9E3779B97F4A7C15) >> t.shift)
}

// get returns the lane of key k, or nil.
func (t *laneTable) get(k laneKey) *lane {
	if t.n == 0 {
		return nil
	}
	mask := len(t.slots) - 1
	for i := t.home(k); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.l == nil {
			return nil
		}
		if s.key == k {
			return s.l
		}
	}
}

// put maps k, which must not be in the table, to l (non-nil).
func (t *laneTable) put(k laneKey, l *lane) {
	if (t.n+1)*2 > len(t.slots) {
		t.resize(max(laneTableMin, 2*len(t.slots)))
	}
	t.insert(k, l)
	t.n++
}

func (t *laneTable) insert(k laneKey, l *lane) {
	mask := len(t.slots) - 1
	i := t.home(k)
	for t.slots[i].l != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = laneSlot{k, l}
}

// del removes key k if it maps to l, and reports whether it did.
func (t *laneTable) del(k laneKey, l *lane) bool {
	if t.n == 0 {
		return false
	}
	mask := len(t.slots) - 1
	i := t.home(k)
	for {
		s := &t.slots[i]
		if s.l == nil {
			return false
		}
		if s.key == k {
			if s.l != l {
				return false
			}
			break
		}
		i = (i + 1) & mask
	}
	// Backward shift: move up every later entry of the run whose probe
	// would otherwise pass the emptied slot i (its home is not in the
	// cyclic range (i, j]).
	for j := (i + 1) & mask; t.slots[j].l != nil; j = (j + 1) & mask {
		h := t.home(t.slots[j].key)
		if (j > i && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = laneSlot{}
	t.n--
	if len(t.slots) > laneTableKeep && t.n*8 <= len(t.slots) {
		t.resize(len(t.slots) / 2)
	}
	return true
}

// resize rehashes the table into size slots (a power of two, more than
// twice t.n).
func (t *laneTable) resize(size int) {
	old := t.slots
	t.slots = make([]laneSlot, size)
	t.shift = uint8(64 - log2(size))
	for _, s := range old {
		if s.l != nil {
			t.insert(s.key, s.l)
		}
	}
}

// lanes returns the table's lanes, in no particular order, in a slice of
// their own: the caller may delete from the table while it goes through
// them.
func (t *laneTable) lanes() []*lane {
	out := make([]*lane, 0, t.n)
	for _, s := range t.slots {
		if s.l != nil {
			out = append(out, s.l)
		}
	}
	return out
}

// log2 of n, a power of two.
func log2(n int) int {
	k := 0
	for n > 1 {
		n >>= 1
		k++
	}
	return k
}
