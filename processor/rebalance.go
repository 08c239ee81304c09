package processor

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// onAssigned creates the state of newly assigned partitions. With
// BlockRebalanceOnPoll it runs between polls, so no record of these
// partitions was enqueued before their state exists.
func (p *Processor) onAssigned(_ context.Context, cl *kgo.Client, assigned map[string][]int32) {
	p.mu.Lock()
	for topic, parts := range assigned {
		_, retry := p.retryIndex[topic]
		for _, part := range parts {
			k := tp{topic, part}
			if old := p.parts[k]; old != nil && old.state == partActive {
				continue
			}
			// An older state of k still being released (a shutdown racing a
			// rebalance) is replaced: its final commit is then refused,
			// because it no longer is p.parts[k] (see commitSync).
			ctx, cancel := context.WithCancel(p.baseCtx)
			p.parts[k] = &partState{tp: k, retry: retry, tracker: newOffsetTracker(), lanes: make(map[laneKey]*lane),
				committed: -1, ctx: ctx, cancel: cancel}
			p.parts[k].m = p.cfg.metrics.partition(p.cfg.group, topic)
		}
	}
	// cl, not p.cl: the group may assign before New has stored p.cl. A
	// partition paused under an earlier assignment must not stay paused.
	cl.ResumeFetchPartitions(assigned)
	if h := p.cfg.hooks.partitions; h != nil {
		h("assigned", assigned)
	}
	p.mu.Unlock()
	p.cfg.metrics.rebalance(p.cfg.group, "assigned")
	p.cfg.logger.Info("partitions assigned", "partitions", assigned)
}

// onRevoked stops dispatching the revoked partitions, drops their buffered
// records, lets in-flight ones finish up to DrainTimeout, commits what
// completed, and only then returns, letting the rebalance hand the partitions
// to another member (SCENARIOS S01, S03, S14).
func (p *Processor) onRevoked(_ context.Context, cl *kgo.Client, revoked map[string][]int32) {
	p.release(cl, revoked, true, "revoked")
}

// onLost drops the lost partitions at once without committing: another member
// may already own them, and a commit could move their offsets backwards (S02).
func (p *Processor) onLost(_ context.Context, cl *kgo.Client, lost map[string][]int32) {
	p.release(cl, lost, false, "lost")
}

// release gives partitions up. With commit (revoke, shutdown) it stops
// dispatching them, drops their queued records, waits for their in-flight
// handler calls up to DrainTimeout, stops accepting completions, and commits
// the contiguous completed offsets synchronously. Without commit (lost) it
// cancels and discards everything at once. Either way, when it returns no
// commit for these partitions is in flight and none will be sent: the
// partitions leave p.parts only after the final commit, and commitSync sends
// offsets only for partitions still in p.parts and not lost.
func (p *Processor) release(cl *kgo.Client, parts map[string][]int32, commit bool, why string) {
	p.mu.Lock()
	var list, others []*partState
	for topic, ps := range parts {
		for _, part := range ps {
			s := p.parts[tp{topic, part}]
			if s == nil {
				continue
			}
			if !commit {
				s.lost = true
			}
			if s.state != partActive {
				// Being released by a concurrent call (a shutdown racing a
				// rebalance): a revoke waits for it to finish, a loss
				// cancels it and forbids its commit.
				if commit {
					others = append(others, s)
				} else {
					s.cancel()
				}
				continue
			}
			s.state = partDraining
			p.dropPendingLocked(s)
			p.dropQueuedLocked(s)
			list = append(list, s)
		}
	}
	if h := p.cfg.hooks.partitions; h != nil {
		h("release-start:"+why, parts) // under p.mu: no handler starts after it
	}
	if commit && p.cfg.drainTimeout > 0 && anyRunning(list) {
		deadline := time.Now().Add(p.cfg.drainTimeout)
		timer := time.AfterFunc(p.cfg.drainTimeout, func() {
			p.mu.Lock()
			p.cond.Broadcast()
			p.mu.Unlock()
		})
		for anyRunning(list) && time.Now().Before(deadline) {
			p.cond.Wait()
		}
		timer.Stop()
	}
	batch := make(map[*partState]int64)
	for _, s := range list {
		s.state = partReleased // completions from now on are discarded
		s.cancel()
		if s.running > 0 && commit {
			p.cfg.logger.Warn("in-flight records still running after drain timeout; they will be redelivered to the next owner", "topic", s.tp.topic, "partition", s.tp.partition, "running", s.running)
		}
		if commit && !s.lost && s.tracker.mark > s.committed {
			batch[s] = s.tracker.mark
		}
	}
	p.mu.Unlock()

	if commit && len(list) > 0 {
		// commitMu also waits for a periodic commit in flight, which may
		// include these partitions. (A cooperative rebalance calls
		// OnPartitionsRevoked with nothing in it: that must not wait.)
		p.commitMu.Lock()
		if len(batch) > 0 {
			p.commitSync(cl, batch)
		}
		p.commitMu.Unlock()
	}

	p.mu.Lock()
	for _, s := range list {
		p.inRecs -= s.recs
		p.inBytes -= s.bytes
		p.parkLocked(s, -s.parked, -s.parkedB)
		s.recs, s.bytes = 0, 0
		if p.parts[s.tp] == s {
			delete(p.parts, s.tp)
		}
		p.cfg.metrics.forget(p.cfg.group, s.tp)
	}
	for !allReleased(p.parts, others) {
		p.cond.Wait()
	}
	p.inFlightChangedLocked()
	p.checkBackpressureLocked()
	p.cond.Broadcast()
	p.mu.Unlock()

	cl.ResumeFetchPartitions(parts) // clear pause state of partitions we no longer hold
	if h := p.cfg.hooks.partitions; h != nil {
		h("release-end:"+why, parts)
	}
	p.cfg.metrics.rebalance(p.cfg.group, why)
	p.cfg.logger.Info("partitions released", "why", why, "partitions", parts, "committed", len(batch))
}

// dropQueuedLocked drops every record of s that no worker is processing.
func (p *Processor) dropQueuedLocked(s *partState) {
	for _, l := range s.lanes {
		keep := 0
		if l.running && len(l.queue) > 0 {
			keep = 1
		}
		for _, it := range l.queue[keep:] {
			p.inRecs--
			p.inBytes -= it.size
			s.recs--
			s.bytes -= it.size
			l.bytes -= it.size
			if l.failing {
				p.parkLocked(s, -1, -it.size)
			}
		}
		clear(l.queue[keep:])
		l.queue = l.queue[:keep]
		l.waiting = false
		if keep == 0 {
			l.active = false
			l.failing = false
			deleteLane(s, l)
		}
	}
	// The tracker keeps the dropped offsets as not done: the commit point
	// cannot pass them, so the next owner handles them.
}

func anyRunning(list []*partState) bool {
	for _, s := range list {
		if s.running > 0 {
			return true
		}
	}
	return false
}

// allReleased reports whether none of list is in parts any more.
func allReleased(parts map[tp]*partState, list []*partState) bool {
	for _, s := range list {
		if parts[s.tp] == s {
			return false
		}
	}
	return true
}
