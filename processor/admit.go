package processor

import (
	"encoding/binary"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Admission: fetched records enter their partition's window and lane, or wait in
// pending behind a hold (the completed-offsets window, the in-flight share, the bytes budget).

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
	p.clock.poke(wall, fetches.NumRecords())
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
	it.entry.offset, it.entry.fetched = r.Offset, p.fetchedAt
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
	// Only an item that is handled holds its record (complete drops it):
	// one done at once above keeps its offset alone.
	it.rec, it.view = r, r
	it.size = int64(len(r.Key) + len(r.Value))
	if ps.retry {
		p.restoreFromRetry(it)
	}
	p.inRecs++
	p.inBytes += it.size
	ps.recs++
	ps.bytes += it.size
	ps.m.consumed(it.size)
	l := p.laneFor(ps, r)
	if l.keyHeld && p.blockerLocked(it) != nil {
		// The record its key is held behind (a replayed copy, or one
		// its previous owner did not complete): ahead of the held ones.
		l.queue = append(l.queue, nil)
		copy(l.queue[1:], l.queue)
		l.queue[0] = it
		l.bytes += it.size
		p.parkLocked(ps, 1, it.size)
		p.unholdLaneLocked(l)
		return
	}
	l.queue = append(l.queue, it)
	l.bytes += it.size
	if l.failing {
		p.parkLocked(ps, 1, it.size)
	}
	if !l.active {
		l.active = true
		if p.mustHoldLocked(ps, it) {
			p.holdLaneLocked(l) // a later record of a blocked key (keyblock.go)
			return
		}
		p.pushReady(l)
	}
}
