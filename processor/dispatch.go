package processor

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// laneKey identifies a lane inside a partition: the whole partition
// (OrderPartition), one key (OrderKey; null keys share one lane), or nothing
// (OrderUnordered: every record is a lane of its own).
type laneKey struct {
	null bool
	key  string
	seq  int64 // OrderUnordered: offset+1, so every record is a lane of its own
}

// lane is a FIFO of records that must be handled one at a time, in order.
// A lane is "active" from the moment it has work until it is empty: active
// lanes are either in the ready queue, held by a worker, or waiting on a timer
// (retry backoff, retry-topic due time, failing forward). Only a lane held by
// a worker uses a Concurrency slot.
type lane struct {
	part    *partState
	key     laneKey
	queue   []*item
	active  bool
	running bool // a worker is processing queue[0]
}

type stage int

const (
	stageHandle  stage = iota // run the handler
	stageForward              // write to a retry topic or the DLQ
)

// item is one fetched record on its way through the processor.
type item struct {
	rec     *kgo.Record // as fetched
	view    *kgo.Record // as shown to the handler (original coordinates for retry-topic records)
	entry   *offsetEntry
	size    int64
	fetched time.Time
	due     time.Time // retry-topic records: not before

	stage    stage
	attempts int // handler attempts, including earlier hops
	hopTries int // handler attempts in this hop
	fwdTries int
	target   string // retry topic or DLQ when stage == stageForward
	first    time.Time
	last     time.Time
	lastErr  error
}

// enqueue places polled records into their partition lanes. Records for a
// partition this member does not hold (any more), and offsets at or below one
// already seen in this assignment, are dropped: they were fetched under an
// older assignment.
func (p *Processor) enqueue(fetches kgo.Fetches) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		k := tp{fp.Topic, fp.Partition}
		ps := p.parts[k]
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
		for _, r := range fp.Records {
			e := ps.tracker.add(r.Offset)
			if e == nil {
				p.cfg.metrics.dropped(p.cfg.group, r.Topic, 1)
				continue
			}
			it := &item{rec: r, view: r, entry: e, size: int64(len(r.Key) + len(r.Value)), fetched: now}
			if _, isRetry := p.retryIndex[r.Topic]; isRetry {
				p.restoreFromRetry(it)
			}
			p.inRecs++
			p.inBytes += it.size
			ps.recs++
			ps.bytes += it.size
			p.cfg.metrics.consumed(p.cfg.group, r.Topic, r.Partition, it.size)
			l := p.laneFor(ps, r)
			l.queue = append(l.queue, it)
			if !l.active {
				l.active = true
				p.pushReady(l)
			}
		}
		p.cfg.metrics.setLag(p.cfg.group, ps)
	})
	p.cfg.metrics.setInFlight(p.cfg.group, p.cfg.clientID, p.inRecs, p.inBytes)
	if !p.paused && (p.inRecs >= p.cfg.maxRecords || p.inBytes >= p.cfg.maxBytes) {
		p.pauseLocked()
	}
}

func (p *Processor) laneFor(ps *partState, r *kgo.Record) *lane {
	var k laneKey
	switch p.cfg.ordering {
	case OrderUnordered:
		k = laneKey{seq: r.Offset + 1}
	case OrderKey:
		if r.Key == nil {
			k = laneKey{null: true}
		} else {
			k = laneKey{key: string(r.Key)}
		}
	}
	l := ps.lanes[k]
	if l == nil {
		l = &lane{part: ps, key: k}
		ps.lanes[k] = l
	}
	return l
}

// pushReady queues an active lane for a worker. p.mu must be held.
func (p *Processor) pushReady(l *lane) {
	p.ready = append(p.ready, l)
	p.cond.Broadcast()
}

// pauseLocked pauses fetching of every held partition (backpressure).
func (p *Processor) pauseLocked() {
	p.paused = true
	all := make(map[string][]int32)
	for k, ps := range p.parts {
		if ps.state == partActive {
			all[k.topic] = append(all[k.topic], k.partition)
		}
	}
	p.cl.PauseFetchPartitions(all)
	p.cfg.metrics.setPaused(p.cfg.group, p.cfg.clientID, true)
}

// maybeResumeLocked lifts backpressure once three quarters of the room is free.
// Partitions blocked on a failing forward stay paused.
func (p *Processor) maybeResumeLocked() {
	if !p.paused || p.inRecs > p.cfg.maxRecords*3/4 || p.inBytes > p.cfg.maxBytes*3/4 {
		return
	}
	p.paused = false
	resume := make(map[string][]int32)
	for k, ps := range p.parts {
		if ps.state == partActive && ps.blocked == nil {
			resume[k.topic] = append(resume[k.topic], k.partition)
		}
	}
	p.cl.ResumeFetchPartitions(resume)
	p.cfg.metrics.setPaused(p.cfg.group, p.cfg.clientID, false)
	p.cond.Broadcast()
}

// worker takes ready lanes and processes the head record of each.
func (p *Processor) worker() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		for len(p.ready) == 0 && !p.stopping {
			p.cond.Wait()
		}
		if p.stopping {
			return
		}
		l := p.ready[0]
		p.ready[0] = nil
		p.ready = p.ready[1:]
		ps := l.part
		if ps.state != partActive || len(l.queue) == 0 {
			continue // dropped by a revoke
		}
		it := l.queue[0]
		if it.stage == stageHandle && !it.due.IsZero() {
			if wait := time.Until(it.due); wait > 0 {
				p.afterLocked(l, wait) // not due yet: wait without holding a slot
				continue
			}
		}
		l.running = true
		ps.running++
		p.mu.Unlock()
		var err error
		if it.stage == stageHandle {
			err = p.handle(ps.ctx, it)
		} else {
			err = p.forward(ps.ctx, it)
		}
		p.mu.Lock()
		l.running = false
		ps.running--
		p.settle(l, it, err)
		p.cond.Broadcast()
	}
}

// afterLocked re-queues lane l after d, unless its partition is gone by then.
func (p *Processor) afterLocked(l *lane, d time.Duration) {
	time.AfterFunc(d, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if l.part.state == partActive && !p.stopping && len(l.queue) > 0 {
			p.pushReady(l)
		}
	})
}

// handle runs the handler once for it, with the per-record timeout, turning a
// panic into a transient error.
func (p *Processor) handle(ctx context.Context, it *item) (err error) {
	if p.cfg.handlerTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.cfg.handlerTimeout)
		defer cancel()
	}
	start := time.Now()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panic: %v\n%s", r, debug.Stack())
		}
		p.cfg.metrics.handled(p.cfg.group, it.view.Topic, time.Since(start), err)
		if p.cfg.hooks.afterHandle != nil {
			p.cfg.hooks.afterHandle(it.view, err)
		}
	}()
	err = p.cfg.handler(ctx, it.view)
	if err == nil && ctx.Err() != nil && p.cfg.handlerTimeout > 0 && ctx.Err() == context.DeadlineExceeded {
		// The handler returned nil after its deadline: its work is done, keep it.
		return nil
	}
	return err
}

// settle applies the outcome of one step of it, the head of lane l. p.mu held.
func (p *Processor) settle(l *lane, it *item, err error) {
	ps := l.part
	if ps.state == partGone {
		return // released: the completion is discarded, the next owner redoes it
	}
	if err == nil {
		if it.stage == stageForward {
			p.cfg.metrics.forwarded(p.cfg.group, it.target, p.isDLQ(it.target))
			if ps.blocked != nil {
				ps.blocked = nil
				if !p.paused {
					p.cl.ResumeFetchPartitions(map[string][]int32{ps.tp.topic: {ps.tp.partition}})
				}
			}
		}
		p.complete(l, it)
		return
	}
	if ps.state != partActive {
		return // draining: a failure is not retried here; the record stays uncommitted
	}
	now := time.Now()
	if it.stage == stageForward {
		it.fwdTries++
		if ps.blocked == nil {
			p.cl.PauseFetchPartitions(map[string][]int32{ps.tp.topic: {ps.tp.partition}})
		}
		ps.blocked = fmt.Errorf("writing to %s: %w", it.target, err)
		p.cfg.metrics.forwardFailed(p.cfg.group, it.target)
		p.cfg.logger.Error("retry/DLQ write failed; partition paused, offset held", "topic", ps.tp.topic, "partition", ps.tp.partition, "offset", it.rec.Offset, "target", it.target, "error", err)
		p.afterLocked(l, backoff(it.fwdTries, p.cfg.backoffMin, p.cfg.backoffMax))
		return
	}
	it.attempts++
	it.hopTries++
	it.lastErr = err
	if it.first.IsZero() {
		it.first = now
	}
	it.last = now
	permanent := IsPermanent(err)
	p.cfg.logger.Warn("handler failed", "topic", it.view.Topic, "partition", it.view.Partition, "offset", it.view.Offset,
		"attempt", it.hopTries, "permanent", permanent, "error", err)
	if !permanent && it.hopTries < p.cfg.maxAttempts {
		p.cfg.metrics.retried(p.cfg.group, it.view.Topic)
		p.afterLocked(l, backoff(it.hopTries, p.cfg.backoffMin, p.cfg.backoffMax))
		return
	}
	target := p.nextTarget(it, permanent)
	if target == "" {
		// No DLQ: hold the record and keep retrying at the maximum backoff.
		p.afterLocked(l, p.cfg.backoffMax)
		return
	}
	it.stage, it.target = stageForward, target
	p.pushReady(l)
}

// complete marks the lane head done, advances the commit point and moves the
// lane on. p.mu held.
func (p *Processor) complete(l *lane, it *item) {
	ps := l.part
	ps.tracker.complete(it.entry)
	p.inRecs--
	p.inBytes -= it.size
	ps.recs--
	ps.bytes -= it.size
	p.cfg.metrics.setInFlight(p.cfg.group, p.cfg.clientID, p.inRecs, p.inBytes)
	l.queue[0] = nil
	l.queue = l.queue[1:]
	if ps.state == partActive && len(l.queue) > 0 {
		p.pushReady(l)
	} else {
		l.active = false
		if len(l.queue) == 0 && ps.lanes[l.key] == l {
			delete(ps.lanes, l.key)
		}
	}
	p.maybeResumeLocked()
}

// oldestInFlight returns the age of the oldest record held. p.mu held.
func (p *Processor) oldestInFlightLocked(now time.Time) time.Duration {
	var oldest time.Duration
	for _, ps := range p.parts {
		for _, l := range ps.lanes {
			if len(l.queue) > 0 {
				if a := now.Sub(l.queue[0].fetched); a > oldest {
					oldest = a
				}
			}
		}
	}
	return oldest
}
