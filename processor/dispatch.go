package processor

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"runtime/debug"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// laneKey identifies a lane inside a partition: the whole partition
// (OrderPartition: 0), one key (OrderKey: a 64-bit hash of the key, with the
// processor's random seed, nullLane for the null key), or nothing
// (OrderUnordered: offset+1, so every record is a lane of its own).
//
// A hash rather than the key itself: no string allocated and no key bytes
// hashed twice per record. Two keys whose hashes collide share a lane, which
// keeps each key's order (it only handles the two one after the other, as
// OrderPartition would); with about a thousand keys in flight the chance of
// any collision is about 2^-45.
type laneKey uint64

// nullLane is the lane of records with a null key (OrderKey).
const nullLane laneKey = 0

// lane is a FIFO of records that must be handled one at a time, in order.
// A lane is "active" from the moment it has work until it is empty: an active
// lane is in exactly one place, the ready queue, a worker, or a timer (retry
// backoff, retry-topic due time, failing forward). Only a lane held by a
// worker uses a Concurrency slot.
//
// A lane is "failing" from the first failure of its head (or from the moment
// its head has to wait for a retry-topic due time) until a head succeeds. The
// records of a failing lane are "parked": they are not counted against the
// MaxInFlight room that pauses fetching for everyone, so one poison key cannot
// stall the other keys and partitions (docs/scenarios.md S10). Parked records have a
// room of their own of the same size; when it is full, only the partitions
// holding parked records are paused.
type lane struct {
	part    *partState
	key     laneKey
	queue   []*item
	bytes   int64 // key+value bytes of queue
	active  bool
	running bool // a worker is processing queue[0] (a batch: queue[:batchN])
	batchN  int  // records of queue in a running batch (batch.go)
	waiting bool // a timer will put the lane back in the ready queue
	failing bool // the lane's records are parked (see above)
}

type stage uint8

const (
	stageHandle  stage = iota // run the handler
	stageForward              // write to a retry topic or the DLQ
)

// item is one fetched record on its way through the processor.
type item struct {
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

// enqueue takes a poll's records: the whole fetch the client buffered, every
// partition in it. Records for a partition this member does not hold (any
// more) are dropped: they were fetched under an older assignment. The others
// wait in their partition's pending queue until moveLocked admits them into
// lanes, round-robin across partitions, as MaxInFlight allows: so a fetch
// that carries thousands of records of one partition does not fill the room
// with that partition while the others starve (with a slow handler in
// OrderPartition, only one partition would be handled at a time).
func (p *Processor) enqueue(fetches kgo.Fetches) {
	wall := time.Now()
	p.clock.poke(wall)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fetchedAt = wall.UnixNano()
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		ps := p.parts[tp{fp.Topic, fp.Partition}]
		if ps == nil || ps.state != partActive {
			p.cfg.metrics.dropped(p.cfg.group, fp.Topic, len(fp.Records))
			return
		}
		end := fp.HighWatermark
		if fp.LastStableOffset > 0 {
			end = fp.LastStableOffset
		}
		if end > ps.hwm {
			ps.hwm = end
		}
		if len(ps.pending) == 0 && len(fp.Records) > 0 && ps.held == holdNone {
			p.pendingParts = append(p.pendingParts, ps)
		}
		ps.pending = append(ps.pending, fp.Records...)
		p.pendingRecs += len(fp.Records)
		var nb int64
		for _, r := range fp.Records {
			nb += int64(len(r.Key) + len(r.Value))
		}
		ps.pendingB += nb
		if ps.held != holdNone {
			p.heldRecs += len(fp.Records)
			if ps.held == holdShare {
				p.shareHeldB += nb
				p.checkPendingShareLocked(ps)
			}
		}
		p.cfg.metrics.setLag(p.cfg.group, ps)
	})
	p.moveLocked()
}

// moveLocked admits pending records into their lanes, one per partition in
// turn, until MaxInFlight is reached or nothing is pending. p.mu held.
func (p *Processor) moveLocked() {
	for len(p.pendingParts) > 0 && !p.paused {
		kept := p.pendingParts[:0]
		for _, ps := range p.pendingParts {
			if p.paused {
				kept = append(kept, ps)
				continue
			}
			r := ps.pending[0]
			if h := p.admitHoldLocked(ps, r); h != holdNone {
				// Out of pendingParts until it may admit again (see
				// unholdLocked).
				p.setHoldLocked(ps, h)
				continue
			}
			p.admitPendingLocked(ps)
			if len(ps.pending) > 0 {
				kept = append(kept, ps)
			}
		}
		clear(p.pendingParts[len(kept):])
		p.pendingParts = kept
	}
	p.inFlightChangedLocked()
	p.syncPausesLocked(p.cl, nil)
	p.checkBackpressureLocked()
}

// admitPendingLocked admits the next pending record of ps into its lane,
// and pauses polling when that reaches MaxInFlight. p.mu held.
func (p *Processor) admitPendingLocked(ps *partState) {
	r := ps.pending[0]
	ps.pending[0] = nil
	ps.pending = ps.pending[1:]
	if len(ps.pending) == 0 {
		ps.pending = nil
	}
	size := int64(len(r.Key) + len(r.Value))
	p.pendingRecs--
	ps.pendingB -= size
	if ps.held != holdNone {
		p.heldRecs--
		if ps.held == holdShare {
			p.shareHeldB -= size
			p.checkPendingShareLocked(ps)
		}
	}
	p.admitLocked(ps, r)
	if p.inRecs-p.parked >= p.cfg.maxRecords || p.inBytes-p.parkedB >= p.cfg.maxBytes {
		p.paused = true
		p.mm.setPaused(true)
	}
}

// windowBlocksLocked reports whether admitting r into ps could make the
// partition's completed-offsets map outgrow CommitMetadataMaxBytes (see
// offsetmap.go): the map's upper bound plus r's share, plus the varint of the
// base offset. The first record above the commit point is always admitted,
// so the partition always makes progress. OrderPartition completes records
// in offset order and so never builds a map of its own. p.mu held.
func (p *Processor) windowBlocksLocked(ps *partState, r *kgo.Record) bool {
	if p.cfg.metaMaxBytes == 0 || p.cfg.ordering == OrderPartition || ps.tracker.pending() == 0 {
		return false
	}
	return binary.MaxVarintLen64+ps.tracker.mapBound+ps.tracker.mapCost(r.Offset) > mapRawBudget(p.cfg.mapMaxBytes())
}

// hold is why a partition admits no more records for now (partState.held).
type hold uint8

const (
	holdNone   hold = iota
	holdWindow      // the completed-offsets map is full (windowBlocksLocked)
	holdShare       // OrderPartition, OrderKey: the partition holds its share of MaxInFlight (shareFullLocked)
	holdPause       // paused by the user (Pause, pause.go)
)

// admitHoldLocked reports whether r, the next pending record of ps, must
// wait, and why. p.mu held.
func (p *Processor) admitHoldLocked(ps *partState, r *kgo.Record) hold {
	switch {
	case ps.pause.on:
		return holdPause
	case p.windowBlocksLocked(ps, r):
		return holdWindow
	case p.shareFullLocked(ps):
		return holdShare
	}
	return holdNone
}

// shareFullLocked reports whether ps holds its share of MaxInFlight: in
// OrderPartition a partition's records are handled one at a time, so
// admitting hundreds of one partition's records (a fetch brings whole
// producer batches, about 1 MB each) while another partition has none would
// leave that other partition idle, and with a slow handler the member would
// handle one or two partitions at a time. Each assigned partition may hold
// at most MaxInFlight / assigned partitions records and the same share of
// the bytes (rounded up), counting only records that can make progress
// (not parked: a failing partition's records go on to the parked room, as
// before). Its surplus stays pending (checkPendingShareLocked pauses its
// fetching once it has enough pending).
//
// In OrderKey the same holds for the records that wait behind an earlier
// record of their key (held minus the partition's lanes): with few keys, a
// fetch of one partition's batches would fill MaxInFlight with records
// queued behind two or three keys while the other partitions' keys wait
// unfetched (with 10 keys and a 20 ms handler, slower than a raw loop). A
// partition whose records are nearly all of distinct keys is not held: its
// records run in parallel, so it may take the whole room when the others
// have nothing. p.mu held.
func (p *Processor) shareFullLocked(ps *partState) bool {
	var queued int
	switch p.cfg.ordering {
	case OrderPartition:
		queued = ps.recs - ps.parked
		if queued == 0 {
			return false // the first record is always admitted
		}
	case OrderKey:
		queued = ps.recs - ps.parked - ps.lanes.len()
		if queued <= 0 {
			return false
		}
	default:
		return false
	}
	// Rounded up: the shares add up to at least MaxInFlight, so the
	// member still reaches it (and pauses polling) when every partition
	// holds its share.
	n := max(1, p.activeParts)
	if queued >= (p.cfg.maxRecords+n-1)/n {
		return true
	}
	return p.cfg.ordering == OrderPartition && ps.bytes-ps.parkedB >= (p.cfg.maxBytes+int64(n)-1)/int64(n)
}

// unholdLocked admits what held ps may admit again. A partition held by
// its completed-offsets map goes back among the partitions with records to
// admit once its next record fits the map, and what fits is admitted (the
// poll loop may be blocked in a poll that brings nothing for ps: its
// fetching is paused). A partition held by its share admits its pending
// records directly as its share has room, and stays held until its pending
// records are all admitted (its fetching is paused by how much it has
// pending: checkPendingShareLocked). p.mu held.
func (p *Processor) unholdLocked(ps *partState) {
	switch ps.held {
	case holdNone:
		return
	case holdShare:
		if ps.state != partActive {
			return
		}
		for len(ps.pending) > 0 && !p.paused {
			h := p.admitHoldLocked(ps, ps.pending[0])
			if h == holdShare {
				break
			}
			if h != holdNone { // holdWindow, or holdPause
				p.releaseHoldLocked(ps)
				p.setHoldLocked(ps, h)
				return
			}
			p.admitPendingLocked(ps)
		}
		if len(ps.pending) == 0 {
			p.releaseHoldLocked(ps)
		}
		p.inFlightChangedLocked()
		p.checkBackpressureLocked()
		return
	}
	if len(ps.pending) > 0 {
		if h := p.admitHoldLocked(ps, ps.pending[0]); h != holdNone {
			if h != ps.held {
				p.releaseHoldLocked(ps)
				p.setHoldLocked(ps, h)
			}
			return
		}
	}
	p.releaseHoldLocked(ps)
	if len(ps.pending) > 0 {
		p.pendingParts = append(p.pendingParts, ps)
	}
	if ps.state == partActive {
		p.syncPausesLocked(p.cl, ps)
	}
	if !p.paused {
		p.moveLocked()
	}
}

// unholdSharesLocked lets every partition held by its share admit what its
// share has room for: the poll loop calls it when MaxInFlight leaves room,
// for a partition whose last completion came while polling was paused
// admits nothing by itself until then. p.mu held.
func (p *Processor) unholdSharesLocked() {
	if p.heldRecs == 0 {
		return
	}
	for _, ps := range p.parts {
		if ps.held == holdShare {
			p.unholdLocked(ps)
		}
	}
}

// setHoldLocked holds ps (not held) for reason h. p.mu held.
func (p *Processor) setHoldLocked(ps *partState, h hold) {
	ps.held = h
	p.heldRecs += len(ps.pending)
	switch h {
	case holdWindow:
		ps.m.windowFull(ps.tp, true)
	case holdShare:
		p.shareHeldB += ps.pendingB
		p.checkPendingShareLocked(ps)
	}
}

// checkPendingShareLocked pauses or resumes fetching of ps, held by its
// share, by its pending records: paused from its share of the pending budget
// (a quarter of the MaxInFlight bytes over the assigned partitions) until
// half of that. So a partition with a slow handler stops fetching once it
// has work queued and the fetches go to the others, while one whose handler
// keeps up goes on fetching ahead (pausing would make the client drop what
// it buffered for it, and a resumed partition waits for the fetch in flight).
// p.mu held.
func (p *Processor) checkPendingShareLocked(ps *partState) {
	limit := p.pendingBudget() / int64(max(1, p.activeParts))
	want := ps.pendingB >= limit || (ps.sharePaused && ps.pendingB > limit/2)
	if ps.held != holdShare {
		want = false
	}
	if want != ps.sharePaused {
		ps.sharePaused = want
		if ps.state == partActive {
			p.syncPausesLocked(p.cl, ps)
		}
	}
}

// pendingBudget is the most bytes partitions held by their share keep
// pending: a quarter of the MaxInFlight bytes (a fetch's size), at least
// 1 MiB.
func (p *Processor) pendingBudget() int64 { return max(p.cfg.maxBytes/4, 1<<20) }

// releaseHoldLocked clears the hold of ps (its pending records count as
// pending for admission again). p.mu held.
func (p *Processor) releaseHoldLocked(ps *partState) {
	switch ps.held {
	case holdWindow:
		ps.m.windowFull(ps.tp, false)
	case holdShare:
		p.shareHeldB -= ps.pendingB
	}
	ps.held = holdNone
	if ps.sharePaused {
		p.checkPendingShareLocked(ps)
	}
	p.heldRecs -= len(ps.pending)
}

// admitLocked puts a fetched record into its lane.
func (p *Processor) admitLocked(ps *partState, r *kgo.Record) {
	it := p.newItemLocked(ps)
	it.rec, it.view = r, r
	it.entry.offset, it.entry.fetched = r.Offset, p.fetchedAt
	it.size = int64(len(r.Key) + len(r.Value))
	if !ps.tracker.add(&it.entry) {
		p.cfg.metrics.dropped(p.cfg.group, ps.tp.topic, 1)
		p.itemPassed(&it.entry) // never in the tracker: unused
		return
	}
	if r.Attrs.IsControl() {
		// A transaction marker (KeepControlRecords): no handler call, done
		// at once, so the commit point passes it when every record before
		// it is done.
		ps.tracker.complete(&it.entry)
		return
	}
	if ps.tracker.doneEarlier(r.Offset) {
		// Completed by the partition's previous owner above its commit
		// point (the commit's completed-offsets map): done, not handled
		// again (docs/scenarios.md S17).
		ps.tracker.complete(&it.entry)
		ps.m.skippedEarlier()
		return
	}
	if ps.retry {
		p.restoreFromRetry(it)
	}
	p.inRecs++
	p.inBytes += it.size
	ps.recs++
	ps.bytes += it.size
	ps.m.consumed(it.size)
	l := p.laneFor(ps, r)
	l.queue = append(l.queue, it)
	l.bytes += it.size
	if l.failing {
		p.parkLocked(ps, 1, it.size)
	}
	if !l.active {
		l.active = true
		p.pushReady(l)
	}
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

func (p *Processor) laneFor(ps *partState, r *kgo.Record) *lane {
	var k laneKey
	switch p.cfg.ordering {
	case OrderPartition:
		if ps.partLane != nil {
			return ps.partLane // the partition's only lane: no map lookup per record
		}
	case OrderUnordered:
		k = laneKey(r.Offset + 1)
	case OrderKey:
		if r.Key != nil {
			k = laneKey(maphash.Bytes(p.laneSeed, r.Key))
			if k == nullLane {
				k = 1 // shares a lane with the keys hashed to 1 (see laneKey)
			}
		}
	}
	l := ps.lanes.get(k)
	if l == nil {
		l = p.newLane(ps, k)
		ps.lanes.put(k, l)
		if p.cfg.ordering == OrderPartition {
			ps.partLane = l
		}
	}
	return l
}

// newLane returns an empty lane of ps for key k, recycled if one is free.
// p.mu held.
func (p *Processor) newLane(ps *partState, k laneKey) *lane {
	n := len(p.freeLanes)
	if n == 0 {
		return &lane{part: ps, key: k}
	}
	l := p.freeLanes[n-1]
	p.freeLanes[n-1] = nil
	p.freeLanes = p.freeLanes[:n-1]
	*l = lane{part: ps, key: k, queue: l.queue[:0]}
	return l
}

// freeLaneLocked keeps l, an emptied lane that complete just deleted, for
// newLane: in OrderKey and OrderUnordered nearly every record would
// otherwise allocate a lane and its queue. Only complete's lanes are
// recycled: no timer, ready queue or worker refers to them any more (a
// lane dropped by a revoke may still be in the ready queue or have a timer
// pending). At most MaxInFlight records' worth are kept. p.mu held.
func (p *Processor) freeLaneLocked(l *lane) {
	if len(p.freeLanes) >= p.cfg.maxRecords || cap(l.queue) > 4 {
		return // a long queue's array is left to the GC
	}
	// complete left it empty, not active, running, waiting or failing,
	// and cleared each slot of its queue as its record completed; newLane
	// resets the rest. Only the partition is dropped here, so that a free
	// lane does not keep it.
	l.part = nil
	l.queue = l.queue[:0]
	p.freeLanes = append(p.freeLanes, l)
}

// deleteLane forgets lane l of ps.
func deleteLane(ps *partState, l *lane) {
	ps.lanes.del(l.key, l)
	if ps.partLane == l {
		ps.partLane = nil
	}
}

// pushReady queues an active lane for a worker. p.mu must be held.
func (p *Processor) pushReady(l *lane) {
	p.ready = append(p.ready, l)
	p.wakeWorkerLocked()
}

// wakeWorkerLocked wakes an idle worker for the ready lanes, or starts one
// while fewer than Concurrency run, unless enough are on their way already:
// at most one per CPU (GOMAXPROCS) is on its way at a time, and each woken
// worker that takes a lane wakes the next one while lanes are left (see
// worker). Waking one worker per ready lane at once (with
// Concurrency(1000), hundreds per poll) would have them all contend for
// p.mu, which the poll loop holds while it admits the poll's records, and
// with a fast handler the first workers woken would have taken the lanes
// before the others got there. Busy workers take the next ready lane
// themselves. A ready lane is so never left without a worker: either a
// woken (or started) worker is on its way, or no worker is idle, Concurrency
// run, and a busy one takes it when its lane is done.
//
// Workers are started on demand rather than all at once by Run: with a
// fast handler a few of them keep up, and Concurrency(1000) parked
// goroutines would cost a scan of 1,000 stacks in every GC cycle. A worker
// lives until Run stops. p.mu held.
func (p *Processor) wakeWorkerLocked() {
	if len(p.ready) == 0 || p.wakes >= max(1, p.maxWakes) || p.stopping {
		return
	}
	switch {
	case p.idleWorkers > p.wakes:
		p.wakes++
		p.workCond.Signal()
	case p.workerWG != nil && p.workers < p.cfg.concurrency:
		p.wakes++
		p.workers++
		wg := p.workerWG
		wg.Add(1)
		go func() { defer wg.Done(); p.worker() }()
	}
}

// startWorkersLocked lets wakeWorkerLocked start workers, each counted in
// wg until it returns (once stopping is set and workCond broadcast). Run
// calls it before polling. p.mu held.
func (p *Processor) startWorkersLocked(wg *sync.WaitGroup) {
	p.workerWG = wg
	p.wakeWorkerLocked()
}

// parkLocked adds n records of b bytes to the parked counts of ps (negative
// to remove them).
func (p *Processor) parkLocked(ps *partState, n int, b int64) {
	ps.parked += n
	ps.parkedB += b
	p.parked += n
	p.parkedB += b
}

// setFailingLocked marks lane l failing or not, moving its records in or out
// of the parked counts.
func (p *Processor) setFailingLocked(l *lane, on bool) {
	if l.failing == on {
		return
	}
	l.failing = on
	if on {
		p.parkLocked(l.part, len(l.queue), l.bytes)
	} else {
		p.parkLocked(l.part, -len(l.queue), -l.bytes)
	}
}

// checkBackpressureLocked applies the two memory bounds. When the records
// that can make progress (held minus parked) reach MaxInFlight, the poll loop
// stops polling (p.paused) until an eighth of the room is free again (at a
// quarter, a slow handler ran with 7/8 of MaxInFlight in flight on average:
// key order at 20 ms, 147x partition order instead of 150-153x);
// the client then holds at most the one fetch per broker it already
// buffered. Pausing the partitions in the client instead would make it drop
// that buffered fetch and fetch (and decompress) it again on resume. When the
// parked records reach their own room of the same size, the partitions
// holding parked records are paused in the client: their records cannot be
// used soon.
func (p *Processor) checkBackpressureLocked() {
	maxR, maxB := p.cfg.maxRecords, p.cfg.maxBytes
	activeR, activeB := p.inRecs-p.parked, p.inBytes-p.parkedB
	switch {
	case !p.paused && (activeR >= maxR || activeB >= maxB):
		p.paused = true
		p.mm.setPaused(true)
	case p.paused && activeR <= maxR-max(1, maxR/8) && activeB <= maxB-max(1, maxB/8):
		p.paused = false
		p.mm.setPaused(false)
		p.cond.Broadcast() // the poll loop waits for this
	}
	switch budget := p.pendingBudget(); {
	case !p.pendingFull && p.shareHeldB >= budget:
		p.pendingFull = true
	case p.pendingFull && p.shareHeldB < budget:
		p.pendingFull = false
		p.cond.Broadcast() // the poll loop waits for this
	}
	switch {
	case !p.parkFull && (p.parked >= maxR || p.parkedB >= maxB):
		p.parkFull = true
		p.syncPausesLocked(p.cl, nil)
	case p.parkFull && p.parked <= maxR*3/4 && p.parkedB <= maxB*3/4:
		p.parkFull = false
		p.syncPausesLocked(p.cl, nil)
	}
}

// wantPausedLocked reports whether fetching of ps should be paused in the
// client: a user pause (Pause), a failing retry-topic/DLQ write (S11), a full completed-offsets
// map (holdWindow), a partition held by its share with its share of the
// pending budget (checkPendingShareLocked), a full parked room with parked records in ps, or nothing held in ps able to make progress where
// fetching more cannot help either (partition order, whose single lane is
// failing, and retry topics, whose later records are due later still).
func (p *Processor) wantPausedLocked(ps *partState) bool {
	return ps.pause.on || ps.blocked != nil || ps.held == holdWindow || ps.sharePaused || (p.parkFull && ps.parked > 0) ||
		(ps.recs > 0 && ps.parked == ps.recs && (ps.retry || p.cfg.ordering == OrderPartition))
}

// syncPausesLocked brings the client's paused partitions in line with
// wantPausedLocked, for ps only or, with ps nil, for every held partition.
// cl is passed in because OnPartitionsAssigned may run before New stored
// p.cl.
func (p *Processor) syncPausesLocked(cl *kgo.Client, ps *partState) {
	var pause, resume map[string][]int32
	visit := func(s *partState) {
		if s.state != partActive {
			return
		}
		want := p.wantPausedLocked(s)
		if want == s.fetchPaused {
			return
		}
		s.fetchPaused = want
		m := &resume
		if want {
			m = &pause
		}
		if *m == nil {
			*m = make(map[string][]int32)
		}
		(*m)[s.tp.topic] = append((*m)[s.tp.topic], s.tp.partition)
	}
	if ps != nil {
		visit(ps)
	} else {
		for _, s := range p.parts {
			visit(s)
		}
	}
	if pause != nil {
		cl.PauseFetchPartitions(pause)
	}
	if resume != nil {
		cl.ResumeFetchPartitions(resume)
	}
}

// worker takes ready lanes and processes their head records. It keeps a lane
// as long as it has records and no other lane is waiting, so a partition in
// OrderPartition is handled without a hand-off per record.
func (p *Processor) worker() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.wakes > 0 {
		p.wakes-- // started by wakeWorkerLocked, counted as on its way
	}
	var l *lane
	for {
		if l == nil {
			for len(p.ready) == 0 && !p.stopping {
				p.idleWorkers++
				p.workCond.Wait()
				p.idleWorkers--
				if p.wakes > 0 {
					p.wakes-- // woken by wakeWorkerLocked (or by the stop's broadcast)
				}
			}
			if p.stopping {
				return
			}
			l = p.ready[0]
			p.ready[0] = nil
			p.ready = p.ready[1:]
			p.wakeWorkerLocked() // lanes left: the next worker
		}
		ps := l.part
		if ps.state != partActive || len(l.queue) == 0 || l.waiting {
			l = nil // dropped by a revoke
			continue
		}
		if p.setAsidePausedLocked(l) {
			l = nil // until Resume
			continue
		}
		it := l.queue[0]
		if it.stage == stageHandle && it.fail != nil && !it.fail.due.IsZero() {
			if wait := time.Until(it.fail.due); wait > 0 {
				// A retry-topic record that is not due yet: wait without
				// holding a slot, parked.
				p.setFailingLocked(l, true)
				p.waitLocked(l, wait)
				p.syncPausesLocked(p.cl, ps)
				p.checkBackpressureLocked()
				l = nil
				continue
			}
		}
		if p.cfg.batch != nil && p.batchable(l, it) {
			p.runBatchLocked(l) // batch.go
			l = nil
			continue
		}
		l.running = true
		ps.running++
		if h := p.cfg.hooks.handleStart; h != nil && it.stage == stageHandle {
			h(it.rec, it.view) // under p.mu: ordered with release-start
		}
		if it.stage == stageForward {
			if ps.forwarding == 0 {
				ps.forwardSince = time.Now()
			}
			ps.forwarding++
		}
		p.mu.Unlock()
		var err error
		if it.stage == stageHandle {
			err = p.handle(ps, it)
		} else {
			err = p.forward(ps.ctx, it)
			p.deadLettered(it, err)
		}
		p.mu.Lock()
		l.running = false
		ps.running--
		if it.stage == stageForward {
			ps.forwarding--
		}
		more := p.settle(l, it, err)
		if ps.held == holdShare && ps.state == partActive {
			p.unholdLocked(ps) // a failing lane's records are parked: out of the share
		}
		if ps.state == partDraining && ps.running == 0 {
			p.cond.Broadcast() // a release is waiting for this
		}
		if ps.state == partActive {
			p.syncPausesLocked(p.cl, ps)
			p.checkBackpressureLocked()
		}
		if !more {
			l = nil
		} else if len(p.ready) > 0 {
			// Take turns with the waiting lanes. No other worker needs
			// waking: this one takes the next lane itself.
			p.ready = append(p.ready, l)
			l = nil
		}
	}
}

// waitLocked puts lane l back in the ready queue after d, unless its
// partition is released by then.
func (p *Processor) waitLocked(l *lane, d time.Duration) {
	l.waiting = true
	time.AfterFunc(d, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if !l.waiting {
			return // dropped by a revoke
		}
		l.waiting = false
		if l.part.state == partActive && !p.stopping && len(l.queue) > 0 {
			p.pushReady(l)
		}
	})
}

// handle runs the handler once for it, with the per-record timeout, turning a
// panic into a transient error.
func (p *Processor) handle(ps *partState, it *item) (err error) {
	ctx := ps.ctx
	if p.cfg.handlerTimeout > 0 {
		// The first attempt uses the context embedded in the item (one
		// allocation less per record); a retry gets a fresh one, since a
		// handler may still hold the context of an earlier attempt.
		actx := it.actx
		if actx == nil || it.tried() {
			actx = new(attemptCtx)
		}
		actx.init(ctx, p.clock.Now(), p.cfg.handlerTimeout)
		defer actx.release()
		ctx = actx
	}
	var start time.Time
	if p.cfg.metrics != nil {
		start = time.Now()
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panic: %v\n%s", r, debug.Stack())
		}
		if p.cfg.metrics != nil {
			if it.view.Topic == ps.tp.topic {
				ps.m.handled(time.Since(start), err)
			} else {
				p.cfg.metrics.handled(p.cfg.group, it.view.Topic, time.Since(start), err)
			}
		}
		if h := p.cfg.hooks.afterHandle; h != nil {
			h(it.rec, it.view, err)
		}
	}()
	// A handler that returns nil after its deadline has done its work: the
	// record counts as handled.
	return p.cfg.handler(ctx, it.view)
}

// settle applies the outcome of one step of it, the head of lane l, and
// reports whether the calling worker should go on with lane l. p.mu held.
func (p *Processor) settle(l *lane, it *item, err error) (more bool) {
	ps := l.part
	if ps.state != partActive && ps.state != partDraining {
		return false // released: the completion is discarded, the next owner redoes it
	}
	if err == nil {
		if it.stage == stageForward {
			p.cfg.metrics.forwarded(p.cfg.group, it.fail.target, p.isDLQ(it.fail.target))
			ps.blocked = nil
		}
		return p.complete(l, it)
	}
	if ps.state != partActive {
		return false // draining: a failure is not retried here; the record stays uncommitted
	}
	if p.authzFailedLocked(l, it, err) {
		return false // Run stops; the record stays uncompleted, so uncommitted
	}
	now := time.Now()
	p.setFailingLocked(l, true)
	f := it.failState()
	if it.stage == stageForward {
		f.fwdTries++
		ps.blocked = fmt.Errorf("writing offset %d to %s: %w", it.rec.Offset, f.target, err)
		p.cfg.metrics.forwardFailed(p.cfg.group, f.target)
		p.cfg.logger.Error("retry/DLQ write failed; partition paused, offset held", "topic", ps.tp.topic, "partition", ps.tp.partition, "offset", it.rec.Offset, "target", f.target, "error", err)
		p.waitLocked(l, backoff(f.fwdTries, p.cfg.backoffMin, p.cfg.backoffMax))
		return false
	}
	f.attempts++
	f.hopTries++
	f.lastErr = err
	if f.first.IsZero() {
		f.first = now
	}
	f.last = now
	permanent := IsPermanent(err)
	p.cfg.logger.Warn("handler failed", "topic", it.view.Topic, "partition", it.view.Partition, "offset", it.view.Offset,
		"attempt", f.hopTries, "permanent", permanent, "error", err)
	if !permanent && f.hopTries < p.cfg.maxAttempts {
		p.cfg.metrics.retried(p.cfg.group, it.view.Topic)
		p.waitLocked(l, backoff(f.hopTries, p.cfg.backoffMin, p.cfg.backoffMax))
		return false
	}
	target := p.nextTarget(it, permanent)
	if target == "" {
		// No DLQ: hold the record and keep retrying at the maximum backoff.
		p.waitLocked(l, p.cfg.backoffMax)
		return false
	}
	it.stage, f.target = stageForward, target
	return true // write it next
}

// complete marks the lane head done, advances the commit point and moves the
// lane on. It reports whether the lane has more records to process. p.mu
// held.
func (p *Processor) complete(l *lane, it *item) (more bool) {
	ps := l.part
	ps.tracker.complete(&it.entry)
	if h := p.cfg.hooks.completed; h != nil {
		target := ""
		if it.stage == stageForward {
			target = it.fail.target
		}
		h(it.rec, it.view, target)
	}
	p.inRecs--
	p.inBytes -= it.size
	ps.recs--
	ps.bytes -= it.size
	l.bytes -= it.size
	if l.failing {
		p.parkLocked(ps, -1, -it.size)
	}
	l.queue[0] = nil
	if len(l.queue) == 1 {
		l.queue = l.queue[:0] // empty: the next record reuses the array from its start
	} else {
		l.queue = l.queue[1:]
	}
	if l.failing && it.stage == stageHandle && !p.mustWait(l) {
		p.setFailingLocked(l, false) // the key recovered
	}
	if ps.held != holdNone {
		// A completion merges runs (the map may have room again) and
		// frees share room; what is admitted joins l's queue.
		p.unholdLocked(ps)
	}
	p.inFlightChangedLocked()
	if ps.state == partActive && len(l.queue) > 0 {
		return true
	}
	l.active = false
	if len(l.queue) == 0 {
		p.setFailingLocked(l, false)
		deleteLane(ps, l)
		if p.cfg.ordering != OrderPartition {
			p.freeLaneLocked(l)
		}
	}
	return false
}

// mustWait reports whether the head of l is a retry-topic record not due yet.
func (p *Processor) mustWait(l *lane) bool {
	return len(l.queue) > 0 && l.queue[0].stage == stageHandle && !l.queue[0].due().IsZero() && time.Now().Before(l.queue[0].due())
}

// oldestInFlight returns the age of the oldest record this member holds
// (fetched, not yet completed), or 0. It is the age of the first not-done
// offset of each partition: records of a partition are fetched in offset
// order.
func (p *Processor) oldestInFlight(now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var oldest int64
	for _, ps := range p.parts {
		if f, ok := ps.tracker.oldest(); ok && (oldest == 0 || f < oldest) {
			oldest = f
		}
	}
	if oldest == 0 {
		return 0
	}
	return now.Sub(time.Unix(0, oldest))
}

// inFlightChangedLocked publishes the held records to metrics and to the
// coarse clock (which sleeps while nothing is held). p.mu held.
func (p *Processor) inFlightChangedLocked() {
	p.mm.setInFlight(p.inRecs, p.inBytes)
	if idle := p.inRecs == 0; idle != p.idle.Load() {
		p.idle.Store(idle)
	}
}
