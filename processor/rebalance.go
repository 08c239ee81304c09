package processor

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// onAssigned creates the state of newly assigned partitions. With
// BlockRebalanceOnPoll it runs between polls, so no record of these
// partitions was enqueued before their state exists.
func (p *Processor) onAssigned(_ context.Context, cl *kgo.Client, assigned map[string][]int32) {
	maps := p.fetchOffsetMaps(cl, assigned)
	p.syncKeyBlocks(30 * time.Second) // keyblock.go
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
			p.parts[k] = &partState{tp: k, retry: retry, tracker: newOffsetTracker(),
				committed: -1, ctx: ctx, cancel: cancel}
			p.parts[k].m = p.cfg.metrics.partition(p.cfg.group, topic)
			p.parts[k].tracker.earlier = maps[k]
			p.activeParts++
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

// fetchOffsetMaps reads the committed offsets of newly assigned partitions
// and decodes the completed-offsets maps in their metadata (offsetmap.go),
// so that records an earlier owner completed above its commit point are
// skipped (docs/scenarios.md S17). It runs before the partitions' state exists, and
// with BlockRebalanceOnPoll before any of their records can be polled; the
// earlier owner's final commit was made before its revoke returned, so this
// reads the commit franz-go starts fetching from. A partition whose metadata
// cannot be read or decoded (another client's commit, an older format) gets
// no map and is handled from its committed offset: at-least-once, as without
// the map.
func (p *Processor) fetchOffsetMaps(cl *kgo.Client, assigned map[string][]int32) map[tp][]offsetRange {
	if p.cfg.metaMaxBytes == 0 || len(assigned) == 0 {
		return nil
	}
	topics := make([]string, 0, len(assigned))
	for t := range assigned {
		topics = append(topics, t)
	}
	ctx, cancel := context.WithTimeout(p.baseCtx, 10*time.Second)
	defer cancel()
	resps, err := kadm.NewClient(cl).FetchOffsetsForTopics(ctx, p.cfg.group, topics...)
	if err != nil {
		p.cfg.logger.Warn("reading committed offset maps failed; records completed above the commit point by the previous owner will be handled again", "error", err)
		return nil
	}
	out := make(map[tp][]offsetRange)
	for topic, parts := range assigned {
		for _, part := range parts {
			r, ok := resps.Lookup(topic, part)
			if !ok || r.Err != nil || r.At < 0 || r.Metadata == "" {
				continue
			}
			ranges, err := decodeOffsetMap(r.Metadata, r.At)
			if err != nil {
				if !errors.Is(err, errNotOffsetMap) {
					p.cfg.logger.Warn("ignoring the completed-offsets map of a commit", "topic", topic, "partition", part, "offset", r.At, "error", err)
				}
				continue
			}
			out[tp{topic, part}] = ranges
		}
	}
	return out
}

// onRevoked stops dispatching the revoked partitions, drops their buffered
// records, lets in-flight ones finish up to DrainTimeout, commits what
// completed, and only then returns, letting the rebalance hand the partitions
// to another member (docs/scenarios.md S01, S03, S14).
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
			p.activeParts--
			if p.pre != nil {
				s.amoTried = amoHeadTried(s) // before its queue is dropped (delivery.go)
			}
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
	batch := make(map[*partState]commitPos)
	for _, s := range list {
		s.state = partReleased // completions from now on are discarded
		s.cancel()
		if s.running > 0 && commit {
			p.cfg.logger.Warn("in-flight records still running after drain timeout; they will be redelivered to the next owner", "topic", s.tp.topic, "partition", s.tp.partition, "running", s.running)
		}
		if !commit || s.lost {
			continue
		}
		if p.pre != nil {
			if pos, ok := p.amoReleasePosLocked(s); ok {
				batch[s] = pos
			}
			continue
		}
		// The final commit goes out even when unchanged: it is the one
		// the next owner starts from, and a stale commit may have landed
		// since this member's last one (see CommitRefreshInterval).
		if pos, ok := p.commitPosLocked(s); ok {
			batch[s] = pos
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
		if s.running > 0 {
			p.overran = append(p.overran, s)
		}
		p.cfg.metrics.forget(p.cfg.group, s.tp)
	}
	p.overranLocked() // prunes
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
	if len(list) > 0 {
		// Only a call that released something says so: the client's leave
		// after the shutdown's release revokes the same partitions again,
		// and finds nothing left.
		p.cfg.logger.Info("partitions released", "why", why, "partitions", parts, "committed", len(batch))
	}
}

// overranLocked drops from p.overran the released partitions whose handler
// calls have all returned, and returns how many records the others' calls
// still hold (partState.running). p.mu held.
func (p *Processor) overranLocked() int {
	p.overran = slices.DeleteFunc(p.overran, func(s *partState) bool { return s.running == 0 })
	n := 0
	for _, s := range p.overran {
		n += s.running
	}
	return n
}

// dropQueuedLocked drops every record of s that no worker is processing.
func (p *Processor) dropQueuedLocked(s *partState) {
	for _, l := range s.lanes.lanes() {
		keep := l.inFlight() // batch.go
		for _, it := range l.queue[keep:] {
			p.unaccountLocked(s, l, it)
		}
		clear(l.queue[keep:])
		l.queue = l.queue[:keep]
		l.waiting = false
		if keep == 0 {
			l.active = false
			l.failing = false
			if l.keyHeld {
				l.keyHeld = false
				delete(p.kb.held, l)
			}
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
