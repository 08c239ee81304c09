package processor

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Delivery semantics: at least once (the default: a record's offset is
// committed after it is handled) or at most once (committed before).
// Exactly once is the other constructor, NewTransactional.

// DeliverySemantics is what a crash or a lost partition may cost: see
// Delivery.
type DeliverySemantics int

const (
	// AtLeastOnce commits a record's offset after its handler succeeded
	// (or it was written to a retry topic or the DLQ): a crash, or a
	// partition lost without its final commit, has the records handled
	// but not committed handled again by the next owner. Nothing is lost.
	// The default.
	AtLeastOnce DeliverySemantics = iota
	// AtMostOnce commits a record's offset before its handler runs: after
	// a crash the record whose handler was running is not handled again by
	// anyone (it is lost, with what its handler had not done), and no
	// record is ever handled twice by two members. For work where a
	// repeat is worse than a loss (a text message, a physical action).
	// A clean revoke or shutdown loses nothing: a record's offset is
	// committed only as its handler starts, and the handlers running
	// finish (DrainTimeout) before the partition is handed on. In-place
	// retries (MaxAttempts), retry topics and the DLQ work as with
	// AtLeastOnce. Needs OrderPartition (records of a partition start one
	// at a time, in offset order, so committing one's offset skips no
	// record that has not started) and a Handler (no BatchHandler). Each
	// record waits for one offset commit before it starts (the commits of
	// the partitions waiting are sent together): a partition runs at most
	// one record per commit round trip.
	AtMostOnce
)

func (d DeliverySemantics) String() string {
	switch d {
	case AtLeastOnce:
		return "at-least-once"
	case AtMostOnce:
		return "at-most-once"
	}
	return fmt.Sprintf("DeliverySemantics(%d)", int(d))
}

// ParseDeliverySemantics parses "at-least-once" or "at-most-once" (the
// forms String returns), for flags and configuration files.
func ParseDeliverySemantics(s string) (DeliverySemantics, error) {
	switch s {
	case "at-least-once":
		return AtLeastOnce, nil
	case "at-most-once":
		return AtMostOnce, nil
	}
	return 0, fmt.Errorf("delivery semantics %q: want at-least-once or at-most-once (exactly-once is NewTransactional)", s)
}

// Delivery sets when a record's offset is committed: AtLeastOnce (the
// default, after it is handled) or AtMostOnce (before its handler runs).
// New only; exactly-once is NewTransactional. New returns an error for
// AtMostOnce with an ordering other than OrderPartition, with
// WithBatchHandler, and for an unknown value.
func Delivery(d DeliverySemantics) Opt { return opt(func(c *cfg) { c.delivery = d }) }

// validateDelivery checks Delivery against the other options.
func (c *cfg) validateDelivery() error {
	switch c.delivery {
	case AtLeastOnce:
		return nil
	case AtMostOnce:
	default:
		return fmt.Errorf("Delivery: %v, want AtLeastOnce or AtMostOnce", c.delivery)
	}
	if c.ordering != OrderPartition {
		return fmt.Errorf("Delivery(AtMostOnce): needs OrderPartition, have %v (records of other orderings start out of offset order, so committing one's offset could skip records not started)", c.ordering)
	}
	if c.batch != nil && c.batch.handler != nil {
		return errors.New("Delivery(AtMostOnce): not with WithBatchHandler (use WithHandler)")
	}
	return nil
}

// preCommits holds the lanes whose head record waits for its offset to be
// committed before it starts (AtMostOnce). Guarded by p.mu.
type preCommits struct {
	lanes []*lane
	wake  chan struct{} // capacity 1: the pre-committer has work
	tries int           // consecutive rounds that committed nothing
}

// preCommitLocked parks lane l (taken by a worker, its head not committed
// yet) until the pre-committer has committed past its head. p.mu held.
func (p *Processor) preCommitLocked(l *lane) {
	p.pre.lanes = append(p.pre.lanes, l)
	select {
	case p.pre.wake <- struct{}{}:
	default:
	}
}

// preCommitter commits, for each lane parked by preCommitLocked, the offset
// after its head record, then hands the lanes back to the workers, until
// ctx ends. One OffsetCommit per round covers every partition waiting. A
// round whose commit failed is retried after the backoff; a lane whose
// partition was released meanwhile is dropped (the next owner starts from
// what was committed).
func (p *Processor) preCommitter(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.pre.wake:
		}
		p.commitMu.Lock()
		p.mu.Lock()
		lanes := p.pre.lanes
		p.pre.lanes = nil
		batch := make(map[*partState]commitPos)
		for _, l := range lanes {
			ps := l.part
			if ps == nil || ps.state != partActive || len(l.queue) == 0 {
				continue
			}
			if off := l.queue[0].rec.Offset + 1; off > ps.committed && off > batch[ps].offset {
				batch[ps] = commitPos{offset: off, meta: withGroupStart("", p.groupStart.get())}
			}
		}
		p.mu.Unlock()
		if len(batch) > 0 {
			p.commitSync(p.cl, batch)
		}
		p.commitMu.Unlock()
		p.mu.Lock()
		retry := false
		for _, l := range lanes {
			ps := l.part
			if ps == nil || ps.state != partActive || len(l.queue) == 0 || p.stopping {
				continue
			}
			if ps.committed > l.queue[0].rec.Offset {
				p.pushReady(l)
				continue
			}
			p.pre.lanes = append(p.pre.lanes, l) // the commit failed: again after the backoff
			retry = true
		}
		if retry {
			p.pre.tries++
			d := backoff(p.pre.tries, p.cfg.backoffMin, p.cfg.backoffMax)
			time.AfterFunc(d, func() {
				select {
				case p.pre.wake <- struct{}{}:
				default:
				}
			})
		} else {
			p.pre.tries = 0
		}
		p.mu.Unlock()
	}
}

// amoHeadTried reports whether the first record of s's lane has been
// attempted and is not running (it waits for a retry). p.mu held.
func amoHeadTried(s *partState) bool {
	l := s.partLane
	return l != nil && len(l.queue) > 0 && !l.running && l.queue[0].tried()
}

// amoReleasePosLocked is the final commit of a partition released under
// AtMostOnce, after the drain. Its committed offset is one past the last
// record whose handler started; a record whose offset was committed ahead
// of its start (the pre-commit landed, then the revoke came before a worker
// took it) must go to the next owner, so the commit moves back to the first
// record not started: the commit point of the completed records. When a
// record is still running (the drain timed out) or its first attempt
// failed and it waits for a retry, it was started: the committed offset
// stays past it (it is lost to the next owner, as in a crash). It returns
// false when nothing is to be committed. p.mu held.
func (p *Processor) amoReleasePosLocked(s *partState) (commitPos, bool) {
	if s.running > 0 || s.amoTried {
		return commitPos{}, false
	}
	// Sent even when it equals the offset committed: a pre-commit past
	// it may still be in flight (it holds commitMu, so this commit lands
	// after it).
	base := s.tracker.base()
	if base < 0 {
		return commitPos{}, false
	}
	return commitPos{offset: base, meta: withGroupStart("", p.groupStart.get())}, true
}
