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
	defer p.mu.Unlock()
	for topic, parts := range assigned {
		for _, part := range parts {
			k := tp{topic, part}
			if old := p.parts[k]; old != nil && old.state != partGone {
				continue
			}
			ctx, cancel := context.WithCancel(p.baseCtx)
			p.parts[k] = &partState{tp: k, tracker: newOffsetTracker(), lanes: make(map[laneKey]*lane), committed: -1, ctx: ctx, cancel: cancel}
		}
	}
	// cl, not p.cl: the group may assign before New has stored p.cl.
	if p.paused {
		cl.PauseFetchPartitions(assigned)
	} else {
		cl.ResumeFetchPartitions(assigned) // a partition paused under an earlier assignment must not stay paused
	}
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

// release gives partitions up. With commit, it drains in-flight records (up to
// DrainTimeout) and synchronously commits the contiguous completed offsets
// before returning; without, it discards everything.
func (p *Processor) release(cl *kgo.Client, parts map[string][]int32, commit bool, why string) {
	p.mu.Lock()
	var list []*partState
	for topic, ps := range parts {
		for _, part := range ps {
			s := p.parts[tp{topic, part}]
			if s == nil || s.state != partActive {
				continue
			}
			s.state = partDraining
			p.dropQueuedLocked(s)
			list = append(list, s)
		}
	}
	if len(list) == 0 {
		p.mu.Unlock()
		return
	}
	if commit && p.cfg.drainTimeout > 0 {
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
	offsets := make(map[string]map[int32]kgo.EpochOffset)
	for _, s := range list {
		s.state = partGone
		s.cancel()
		if s.running > 0 {
			p.cfg.logger.Warn("in-flight records still running after drain timeout; they will be redelivered to the next owner", "topic", s.tp.topic, "partition", s.tp.partition, "running", s.running)
		}
		p.inRecs -= s.recs
		p.inBytes -= s.bytes
		s.recs, s.bytes = 0, 0
		if commit && s.tracker.mark > s.committed {
			if offsets[s.tp.topic] == nil {
				offsets[s.tp.topic] = make(map[int32]kgo.EpochOffset)
			}
			offsets[s.tp.topic][s.tp.partition] = kgo.EpochOffset{Epoch: -1, Offset: s.tracker.mark}
		}
		if p.parts[s.tp] == s {
			delete(p.parts, s.tp)
		}
		p.cfg.metrics.forget(p.cfg.group, s.tp)
	}
	p.cfg.metrics.setInFlight(p.cfg.group, p.cfg.clientID, p.inRecs, p.inBytes)
	p.maybeResumeLocked()
	p.cond.Broadcast()
	p.mu.Unlock()

	cl.ResumeFetchPartitions(parts) // clear pause state of partitions we no longer hold
	p.cfg.metrics.rebalance(p.cfg.group, why)
	p.cfg.logger.Info("partitions released", "why", why, "partitions", parts, "commit", offsets)
	if len(offsets) > 0 {
		p.commitMu.Lock()
		p.commitSync(cl, offsets)
		p.commitMu.Unlock()
	}
}

// dropQueuedLocked drops every record of s that no worker is processing.
func (p *Processor) dropQueuedLocked(s *partState) {
	for k, l := range s.lanes {
		keep := 0
		if l.running && len(l.queue) > 0 {
			keep = 1
		}
		for _, it := range l.queue[keep:] {
			p.inRecs--
			p.inBytes -= it.size
			s.recs--
			s.bytes -= it.size
		}
		clear(l.queue[keep:])
		l.queue = l.queue[:keep]
		if keep == 0 {
			l.active = false
			delete(s.lanes, k)
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
