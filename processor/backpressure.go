package processor

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Backpressure: which partitions are paused for room in flight or parked, and
// the in-flight gauges.

// parkLocked adds n records of b bytes to the parked counts of ps (negative
// to remove them).
func (p *Processor) parkLocked(ps *partState, n int, b int64) {
	ps.parked += n
	ps.parkedB += b
	p.parked += n
	p.parkedB += b
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
