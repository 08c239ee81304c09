package processor

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// committer commits the commit points of held partitions every CommitInterval
// until ctx ends. It holds commitMu for the whole compute-and-commit step, and
// the revoke callback takes commitMu too: so a periodic commit is never sent
// for a partition after its revoke began, and at most one commit per
// partition is outstanding.
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
		offsets := make(map[string]map[int32]kgo.EpochOffset)
		for k, s := range p.parts {
			if s.state != partActive || s.tracker.mark <= s.committed {
				continue
			}
			if offsets[k.topic] == nil {
				offsets[k.topic] = make(map[int32]kgo.EpochOffset)
			}
			offsets[k.topic][k.partition] = kgo.EpochOffset{Epoch: -1, Offset: s.tracker.mark}
		}
		p.mu.Unlock()
		if len(offsets) > 0 {
			p.commitSync(p.cl, offsets)
		}
		p.commitMu.Unlock()
	}
}

// commitSync commits offsets and waits for the answer (bounded to 15s). Only
// offsets that move forward from what this member committed are ever built
// by the callers; a failed partition keeps its old committed offset and is
// retried at the next interval. commitMu must be held.
func (p *Processor) commitSync(cl *kgo.Client, offsets map[string]map[int32]kgo.EpochOffset) {
	if p.cfg.hooks.beforeCommit != nil {
		p.cfg.hooks.beforeCommit(offsets)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	start := time.Now()
	cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		p.cfg.metrics.commitLatency(p.cfg.group, time.Since(start), err)
		if err != nil {
			p.cfg.logger.Warn("commit failed", "error", err)
			return
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, t := range resp.Topics {
			for _, part := range t.Partitions {
				off := offsets[t.Topic][part.Partition].Offset
				if cerr := kerr.ErrorForCode(part.ErrorCode); cerr != nil {
					p.cfg.logger.Warn("commit rejected", "topic", t.Topic, "partition", part.Partition, "offset", off, "error", cerr)
					continue
				}
				p.cfg.metrics.committed(p.cfg.group, t.Topic, part.Partition, off)
				if s := p.parts[tp{t.Topic, part.Partition}]; s != nil && off > s.committed {
					s.committed = off
					p.cfg.metrics.setLag(p.cfg.group, s)
				}
			}
		}
	})
}
