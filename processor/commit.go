package processor

import (
	"context"
	"encoding/binary"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// errNotOwned aborts a commit none of whose partitions this member holds any
// more.
var errNotOwned = errors.New("processor: commit skipped: partitions no longer held")

// commitPos is what a commit sends for one partition: the commit point and
// its metadata (offsetmap.go; "" for none): the completed-offsets map above
// it, mapLen bytes, followed with StartOffset(Latest) by the group's start
// time.
type commitPos struct {
	offset int64
	meta   string
	mapLen int
}

// committer commits the commit points of held partitions every CommitInterval
// until ctx ends: those that moved (or whose completed-offsets map changed)
// since this member's last accepted commit, and every one whose last commit
// is older than CommitRefreshInterval, unchanged or not (see
// CommitRefreshInterval: a stale commit that the broker applied late is
// repaired without new input). It holds commitMu for the whole
// compute-and-commit step, and a release takes commitMu before it returns: so
// at most one commit is outstanding, and none is left in flight once a revoke
// hands partitions on.
func (p *Processor) committer(ctx context.Context) {
	t := time.NewTicker(p.cfg.commitInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.commitMu.Lock()
		p.mu.Lock()
		now := time.Now()
		batch := make(map[*partState]commitPos)
		for _, s := range p.parts {
			if s.state != partActive || s.lost {
				continue
			}
			p.publishWindowLocked(s)
			if pos, ok := p.commitPosLocked(s); ok && (pos.offset > s.committed || pos.meta != s.committedMeta ||
				(s.committed >= 0 && now.Sub(s.committedAt) >= p.cfg.commitRefresh)) {
				batch[s] = pos
			}
		}
		p.mu.Unlock()
		if len(batch) > 0 {
			p.commitSync(p.cl, batch)
		}
		p.commitMu.Unlock()
	}
}

// publishWindowLocked sets the window-used gauge of s. p.mu held.
func (p *Processor) publishWindowLocked(s *partState) {
	if p.cfg.metrics == nil || p.cfg.metaMaxBytes == 0 || p.cfg.ordering == OrderPartition {
		return
	}
	used := 0.0
	if s.tracker.pending() > 0 {
		used = float64(binary.MaxVarintLen64+s.tracker.mapBound) / float64(mapRawBudget(p.cfg.mapMaxBytes()))
	}
	p.cfg.metrics.windowUsed(p.cfg.group, s.tp, used)
}

// commitPosLocked returns what a commit of s would send now, and false when
// there is nothing this member may commit for it: no record passed and none
// completed above, or a position below what this member already committed
// (commits never move backwards). An input partition's metadata ends with
// the group's start time when the member knows it (StartOffset(Latest)),
// so a member finds it in any commit of the group. p.mu held.
func (p *Processor) commitPosLocked(s *partState) (commitPos, bool) {
	pos, ok := p.mapPosLocked(s)
	if ok && !s.retry {
		pos.mapLen = len(pos.meta)
		pos.meta = withGroupStart(pos.meta, p.groupStart.get())
	}
	return pos, ok
}

// mapPosLocked is commitPosLocked without the group's start time: the
// commit point and the completed-offsets map above it. p.mu held.
func (p *Processor) mapPosLocked(s *partState) (commitPos, bool) {
	tr := s.tracker
	budget := p.cfg.mapMaxBytes()
	if budget == 0 {
		// No map: only the commit point.
		if tr.mark < 0 || tr.mark < s.committed {
			return commitPos{}, false
		}
		return commitPos{offset: tr.mark}, true
	}
	base := tr.base()
	if base < 0 || base < s.committed {
		return commitPos{}, false
	}
	meta := tr.encodeOffsetMap(base, budget)
	if tr.mark < 0 && meta == "" {
		return commitPos{}, false // the first record is still running: nothing to say yet
	}
	if len(meta) > budget {
		// Cannot happen (admission keeps mapBound within the budget);
		// if it did, the commit point alone is still right.
		p.cfg.logger.Error("completed-offsets map over budget; committed without it", "topic", s.tp.topic, "partition", s.tp.partition, "bytes", len(meta))
		meta = ""
	}
	return commitPos{offset: base, meta: meta}, true
}

// commitSync commits the commit point of each partition state in batch and
// waits for the answer (bounded to 15s). Callers only build offsets that move
// forward from what this member committed; a failed partition keeps its old
// committed offset and is retried at the next interval. commitMu must be
// held.
//
// Ownership is checked again just before the request is written, inside
// franz-go's PreCommitFnContext hook: at that point franz-go holds its
// join/sync gate, so the request's generation is the current one and cannot
// change until the commit is answered. A partition whose state is no longer
// the one the offset was computed from (released, lost, or lost and assigned
// again) is removed from the request. Without this, a commit computed before
// a lost session could be sent with the generation of the next session and be
// accepted for a partition that now belongs to another member, moving its
// offset backwards or past records not yet done (docs/scenarios.md S01, S02).
func (p *Processor) commitSync(cl *kgo.Client, batch map[*partState]commitPos) {
	offsets := make(map[string]map[int32]kgo.EpochOffset)
	byTP := make(map[tp]*partState, len(batch))
	for s, pos := range batch {
		if offsets[s.tp.topic] == nil {
			offsets[s.tp.topic] = make(map[int32]kgo.EpochOffset)
		}
		offsets[s.tp.topic][s.tp.partition] = kgo.EpochOffset{Epoch: -1, Offset: pos.offset}
		byTP[s.tp] = s
	}
	if h := p.cfg.hooks.beforeCommit; h != nil {
		h(offsets)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	ctx = kgo.PreCommitFnContext(ctx, func(req *kmsg.OffsetCommitRequest) error {
		p.mu.Lock()
		defer p.mu.Unlock()
		kept := req.Topics[:0]
		for _, t := range req.Topics {
			parts := t.Partitions[:0]
			for _, rp := range t.Partitions {
				s := byTP[tp{t.Topic, rp.Partition}]
				if s != nil && p.parts[s.tp] == s && !s.lost {
					if meta := batch[s].meta; meta != "" {
						rp.Metadata = &meta // the completed-offsets map (offsetmap.go)
					}
					parts = append(parts, rp)
					continue
				}
				p.cfg.logger.Info("commit dropped: partition no longer held", "topic", t.Topic, "partition", rp.Partition, "offset", rp.Offset)
			}
			if len(parts) > 0 {
				t.Partitions = parts
				kept = append(kept, t)
			}
		}
		req.Topics = kept
		if h := p.cfg.hooks.commitSent; h != nil && len(kept) > 0 {
			h(req.MemberID, req.Generation, commitOffsets(req))
		}
		if len(kept) == 0 {
			return errNotOwned
		}
		return nil
	})
	start := time.Now()
	cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if errors.Is(err, errNotOwned) {
			return
		}
		p.cfg.metrics.commitLatency(p.cfg.group, time.Since(start), err)
		accepted := make(map[string]map[int32]int64)
		defer func() {
			if h := p.cfg.hooks.commitDone; h != nil {
				h(accepted, err)
			}
			if t := p.cfg.tracer; t != nil {
				t.Committed(p.cfg.group, commitOffsets(req), err)
			}
		}()
		if err != nil {
			if !p.authzFailed(err, "offset commit", "", "READ") {
				p.cfg.logger.Warn("commit failed", "error", err)
			}
			return
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, t := range resp.Topics {
			for _, part := range t.Partitions {
				s := byTP[tp{t.Topic, part.Partition}]
				if s == nil {
					continue
				}
				pos := batch[s]
				off := pos.offset
				if cerr := kerr.ErrorForCode(part.ErrorCode); cerr != nil {
					if !p.authzFailed(cerr, "offset commit", t.Topic, "READ") {
						p.cfg.logger.Warn("commit rejected", "topic", t.Topic, "partition", part.Partition, "offset", off, "error", cerr)
					}
					continue
				}
				if accepted[t.Topic] == nil {
					accepted[t.Topic] = make(map[int32]int64)
				}
				accepted[t.Topic][part.Partition] = off
				p.cfg.metrics.committed(p.cfg.group, t.Topic, part.Partition, off)
				if off >= s.committed {
					s.committed, s.committedMeta, s.committedAt = off, pos.meta, time.Now()
					p.cfg.metrics.setLag(p.cfg.group, s)
					p.cfg.metrics.offsetMap(p.cfg.group, s.tp, pos.mapLen)
				}
			}
		}
	})
}

// commitOffsets lists the offsets of an OffsetCommit request.
func commitOffsets(req *kmsg.OffsetCommitRequest) map[string]map[int32]int64 {
	out := make(map[string]map[int32]int64)
	for _, t := range req.Topics {
		out[t.Topic] = make(map[int32]int64)
		for _, rp := range t.Partitions {
			out[t.Topic][rp.Partition] = rp.Offset
		}
	}
	return out
}
