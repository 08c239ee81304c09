package processor

import (
	"fmt"
	"runtime/debug"
	"sync"
	"time"
)

// Workers: the goroutines that run the handler on a lane's head, settle its
// outcome (success, retry in place, retry topic, DLQ) and complete it.

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
	if p.ready.len() == 0 || p.wakes >= max(1, p.maxWakes) || p.stopping {
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
			for p.ready.len() == 0 && !p.stopping {
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
			l = p.ready.pop()
			p.wakeWorkerLocked() // lanes left: the next worker
		}
		ps := l.part
		if ps.state != partActive || len(l.queue) == 0 || l.waiting || l.keyHeld {
			l = nil // dropped by a revoke, or held behind its key until released
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
		if p.pre != nil && it.stage == stageHandle && ps.committed <= it.rec.Offset {
			p.preCommitLocked(l) // AtMostOnce: its offset is committed before it starts (delivery.go)
			l = nil
			continue
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
		var (
			blocker *BlockedKey // it blocks its key (keyblock.go)
			plan    blockPlan
		)
		if p.kb != nil {
			if it.stage == stageHandle {
				blocker = p.blockerLocked(it)
			} else if !it.fail.noBlock {
				plan = p.planForwardLocked(ps, it, it.fail.target)
				it.fail.holdKey = plan.hold
			}
		}
		p.mu.Unlock()
		var err error
		if it.stage == stageHandle {
			err = p.handle(ps, it)
			if err == nil && p.kb != nil && it.rec.Key != nil && (blocker != nil || ps.retry) {
				// Released before it completes (keyblock.go). A record
				// from a retry topic releases its key whatever this
				// member's copy of the table says: the copy may lag, and
				// a release of a record that blocks nothing is a no-op.
				id := recordID(it.view)
				if blocker != nil {
					id = blocker.ID
				}
				err = p.writeBlock(ps.ctx, it.rec.Key, &blockValue{State: stateReleased, ID: id})
			}
		} else {
			to, ferr := p.forwardKeyed(ps.ctx, it, plan)
			if h := p.cfg.hooks.forwarded; h != nil {
				h(it.view, it.fail.target, ferr)
			}
			p.deadLettered(it, to, ferr)
			err = ferr
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
		} else if p.ready.len() > 0 {
			// Take turns with the waiting lanes. No other worker needs
			// waking: this one takes the next lane itself.
			p.ready.push(l)
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
	var traced func(error)
	if p.cfg.tracer != nil {
		attempt := 1
		if it.fail != nil {
			attempt = it.fail.attempts + 1
		}
		ctx, traced = p.cfg.tracer.Attempt(ctx, p.cfg.group, it.view, attempt)
	}
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: debug.Stack()}
		}
		if traced != nil {
			traced(err)
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
		hold := it.stage == stageForward && it.fail.holdKey
		more = p.complete(l, it)
		if hold && more && p.holdForwardedLocked(l) {
			return false // the key's later records wait for the one forwarded (keyblock.go)
		}
		return more
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
	if target != "" && !p.roomForBlockLocked(it, target) {
		if !permanent {
			// The blocked-keys table is full: the record stays here,
			// holding its key, until there is room (MaxBlockedKeys).
			p.waitLocked(l, p.cfg.backoffMax)
			return false
		}
		f.noBlock = true // dead-lettered without holding its key
	}
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
	p.unaccountLocked(ps, l, it)
	// The commit point needs only the entry: the item drops its record,
	// which would otherwise keep the record's batch, and for an
	// uncompressed batch its whole fetch response, alive until the
	// commit point passes the item and its slab is reused.
	it.rec, it.view = nil, nil
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
