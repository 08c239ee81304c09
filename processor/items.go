package processor

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Items: one record in flight with its state, allocated from per-partition slabs.

type stage uint8

const (
	stageHandle  stage = iota // run the handler
	stageForward              // write to a retry topic or the DLQ
)

// item is one fetched record on its way through the processor.
type item struct {
	// rec and view are nil once the item completes (complete) or when it
	// is done at admission (a transaction marker, a record its partition's
	// previous owner completed): a record aliases its fetched batch, and
	// an item waits in its slab for the commit point.
	rec   *kgo.Record // as fetched
	view  *kgo.Record // as shown to the handler (original coordinates for retry-topic records)
	entry offsetEntry // in the partition's offset tracker
	size  int64
	// The first handler attempt's context (with a HandlerTimeout), taken
	// from a slab of its own: unlike the item it is never reused, since a
	// handler may keep its context past its return.
	actx  *attemptCtx
	stage stage
	solo  bool // its batch failed: handled one at a time (batch.go)
	// fail is the record's failure and retry state, nil until the record
	// first fails or comes from a retry topic (failState): most records
	// never fail, and an item without it is half the size, for the slab
	// to clear and the GC to scan. Allocated per item, never shared or
	// reused: a slab's clear drops it with the item.
	fail *itemFail
}

// itemFail is the failure and retry state of an item (item.fail).
type itemFail struct {
	due      time.Time // retry-topic records: not before
	attempts int       // handler attempts, including earlier hops
	hopTries int       // handler attempts in this hop
	fwdTries int
	target   string // retry topic or DLQ when stage == stageForward
	holdKey  bool   // its forward blocks its key: hold the lane's later records (keyblock.go)
	noBlock  bool   // forwarded without blocking its key (the blocked-keys table is full)
	first    time.Time
	last     time.Time
	lastErr  error
}

// failState returns the failure state of it, allocating it on first use.
// The worker holding its lane (or the poll loop admitting it) only.
func (it *item) failState() *itemFail {
	if it.fail == nil {
		it.fail = new(itemFail)
	}
	return it.fail
}

// due is when a retry-topic record may be handled (zero: now).
func (it *item) due() time.Time {
	if it.fail == nil {
		return time.Time{}
	}
	return it.fail.due
}

// tried reports whether it has had a handler attempt (in this hop or an
// earlier one).
func (it *item) tried() bool {
	return it.fail != nil && (it.fail.attempts > 0 || it.fail.hopTries > 0)
}

// slabItems is the number of items of an itemSlab.
const slabItems = 64

// itemSlab is a block of items, allocated at once and reused once every
// one of them has been passed by its partition's commit point: one
// allocation per 64 records at most, and with a steady flow none, instead
// of 104 bytes per record for the GC to allocate, zero and scan.
type itemSlab struct {
	items [slabItems]item
	// live counts the items not yet passed by the commit point, taken or
	// not: the slab is free at 0. The items of a revoked partition's
	// dropped records are never passed: their slab is left to the GC.
	live int
}

// newItemLocked returns a zero item for the next admitted record of ps.
// Items are taken in order from the partition's current slab: a pooled
// slab (freeSlabs) when a poll brings enough records to fill one, else a
// block of just the records pending, left to the GC, so that a partition
// with one record now and then pins no more than it holds (a slab lives
// until its last record is passed: its size bounds how much a slow record
// can pin; franz-go pins its record batches the same way). With a
// HandlerTimeout the item gets its attempt context from a block of
// contexts, never reused. p.mu held.
func (p *Processor) newItemLocked(ps *partState) *item {
	if len(ps.slab) == 0 {
		ps.slabRef = nil
		if n := len(ps.pending) + 1; n < slabItems {
			ps.slab = make([]item, n)
		} else {
			if k := len(p.freeSlabs); k > 0 {
				ps.slabRef = p.freeSlabs[k-1]
				p.freeSlabs[k-1] = nil
				p.freeSlabs = p.freeSlabs[:k-1]
				// Its items were used: zero them in one clear (a
				// fresh slab comes zeroed).
				clear(ps.slabRef.items[:])
			} else {
				ps.slabRef = new(itemSlab)
			}
			ps.slabRef.live = slabItems
			ps.slab = ps.slabRef.items[:]
		}
		if ps.tracker.passed == nil {
			ps.tracker.passed = p.itemPassed
		}
	}
	it := &ps.slab[0]
	ps.slab = ps.slab[1:]
	// The item is zero: setting the fields needed, rather than assigning
	// a whole item, spares copying (and, during a GC, write-barriering)
	// its 104 bytes.
	it.entry.slab = ps.slabRef
	if p.cfg.handlerTimeout > 0 {
		if len(p.ctxSlab) == 0 {
			p.ctxSlab = make([]attemptCtx, slabItems)
		}
		it.actx = &p.ctxSlab[0]
		p.ctxSlab = p.ctxSlab[1:]
	}
	return it
}

// itemPassed is the trackers' hook (offsetTracker.passed): the commit point
// passed e, so nothing refers to its item any more (it left its lane when it
// completed), and a pooled slab whose items are all passed goes back to
// freeSlabs; at most enough for twice MaxInFlight records are kept. p.mu
// held.
func (p *Processor) itemPassed(e *offsetEntry) {
	s := e.slab
	if s == nil {
		return
	}
	if s.live--; s.live == 0 && len(p.freeSlabs) < max(4, 2*p.cfg.maxRecords/slabItems) {
		p.freeSlabs = append(p.freeSlabs, s)
	}
}

// dropPendingLocked forgets the pending records of s.
func (p *Processor) dropPendingLocked(s *partState) {
	if s.held != holdNone {
		p.releaseHoldLocked(s)
	}
	if len(s.pending) == 0 {
		return
	}
	p.pendingRecs -= len(s.pending)
	s.pendingB = 0
	s.pending = nil
	kept := p.pendingParts[:0]
	for _, ps := range p.pendingParts {
		if ps != s {
			kept = append(kept, ps)
		}
	}
	clear(p.pendingParts[len(kept):])
	p.pendingParts = kept
}

// unaccountLocked takes it out of the records and bytes in flight of p, of
// its partition ps and of its lane l, and out of the parked room when l is
// failing: when it completes, or when its partition is revoked before it
// ran. p.mu held.
func (p *Processor) unaccountLocked(ps *partState, l *lane, it *item) {
	p.inRecs--
	p.inBytes -= it.size
	ps.recs--
	ps.bytes -= it.size
	l.bytes -= it.size
	if l.failing {
		p.parkLocked(ps, -1, -it.size)
	}
}
