package processor

import (
	"errors"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrNotAssigned is wrapped by the error of Pause and Resume when a named
// partition is not held by this member (not assigned, or being released).
// Kafka's Java consumer throws IllegalStateException in the same case.
var ErrNotAssigned = errors.New("processor: partition not assigned to this member")

// notAssignedError is the error wrapping ErrNotAssigned: its message names
// the operation, the topic and the partitions without repeating the
// sentinel's prefix.
type notAssignedError struct{ msg string }

func (e *notAssignedError) Error() string        { return e.msg }
func (e *notAssignedError) Is(target error) bool { return target == ErrNotAssigned }

// namedHeld is the partition check of both engines' Pause and Resume
// (op "pause" or "resume"): with no partition named, all returns the held
// partitions of topic, and none held is an error; else get reports for each
// named partition whether it is held, and any not held is an error naming
// them. The errors wrap ErrNotAssigned.
func namedHeld[T any](op, topic string, partitions []int32, all func() []T, get func(int32) (T, bool)) ([]T, error) {
	if len(partitions) == 0 {
		list := all()
		if len(list) == 0 {
			return nil, &notAssignedError{fmt.Sprintf("processor: %s %s: no partition of the topic held: partition not assigned to this member", op, topic)}
		}
		return list, nil
	}
	var list []T
	var missing []int32
	for _, part := range partitions {
		v, ok := get(part)
		if !ok {
			missing = append(missing, part)
			continue
		}
		list = append(list, v)
	}
	if len(missing) > 0 {
		return nil, &notAssignedError{fmt.Sprintf("processor: %s %s partitions %v: partition not assigned to this member", op, topic, missing)}
	}
	return list, nil
}

// pauseState is a partition's user pause (Pause): part of partState, so
// it lives and dies with this member's hold of the partition.
type pauseState struct {
	on bool
	// lanes are the lanes a worker set aside because the partition was
	// paused (lane.waiting set, as for a timer): Resume puts them back in
	// the ready queue.
	lanes []*lane
}

// Pause stops the handling of the given partitions of topic (all of the
// topic's partitions this member holds when none are given) until Resume:
// no handler call, retry or retry-topic/DLQ write starts for their records
// after Pause returns, their fetching is paused in the client
// (kgo.Client.PauseFetchPartitions, Kafka's KafkaConsumer.pause), and
// records already fetched wait in the member. The other partitions go on:
// the waiting records count as parked (Health.Parked), not against
// MaxInFlight. Handler calls in progress are not interrupted; they finish,
// and what completes is committed as usual, so the commit point of a paused
// partition moves up to its first record not yet handled.
//
// A pause is of this member's hold of the partition, as with Kafka's
// consumer: a rebalance that takes the partition away (revoked or lost)
// forgets it, and when the partition comes back, to this member or another,
// it is handled again. A rebalance that leaves the partition with this
// member (the cooperative protocols keep most partitions where they are)
// keeps the pause. Pause composes with the runtime's own pausing for
// backpressure and failing writes: neither lifts the other's pause.
//
// Pausing a paused partition does nothing. Pause returns an error wrapping
// ErrNotAssigned, and pauses nothing, if a named partition is not held by
// this member, or if none of topic is when no partition is named. It does
// not block on handlers and is safe for concurrent use, also from a handler.
// Health.PausedPartitions lists the paused partitions.
func (p *Processor) Pause(topic string, partitions ...int32) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	list, err := p.heldLocked("pause", topic, partitions)
	if err != nil {
		return err
	}
	for _, ps := range list {
		if ps.pause.on {
			continue
		}
		ps.pause.on = true
		// Hold admission (admitHoldLocked answers holdPause from now on):
		// the pending records stay pending, outside pendingParts.
		if ps.held != holdNone {
			p.releaseHoldLocked(ps)
		} else if len(ps.pending) > 0 {
			p.pendingParts = slices.DeleteFunc(p.pendingParts, func(s *partState) bool { return s == ps })
		}
		p.setHoldLocked(ps, holdPause)
		// Admitted records wait: out of the MaxInFlight room, so that the
		// other partitions go on. A lane is parked until its next record
		// is handled after Resume, as a failing lane is.
		for _, l := range ps.lanes.lanes() {
			if len(l.queue) > 0 {
				p.setFailingLocked(l, true)
			}
		}
		p.syncPausesLocked(p.cl, ps)
	}
	p.checkBackpressureLocked()
	return nil
}

// Resume lifts Pause from the given partitions of topic (all of the topic's
// partitions this member holds when none are given): their waiting records
// are handled again, in their order, and their fetching resumes (with the
// fetch after the one in flight: kgo.FetchMaxWait, 500ms) unless the
// runtime itself keeps it paused (backpressure, a failing retry-topic/DLQ
// write). Resuming a partition that is not paused does nothing. It returns
// an error wrapping ErrNotAssigned, and resumes nothing, if a named
// partition is not held by this member (a rebalance took it away and with
// it the pause), or if none of topic is when no partition is named. Safe for
// concurrent use.
func (p *Processor) Resume(topic string, partitions ...int32) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	list, err := p.heldLocked("resume", topic, partitions)
	if err != nil {
		return err
	}
	for _, ps := range list {
		if !ps.pause.on {
			continue
		}
		ps.pause.on = false
		for _, l := range ps.pause.lanes {
			if l.waiting && ps.lanes.get(l.key) == l && len(l.queue) > 0 {
				l.waiting = false
				p.pushReady(l)
			}
		}
		ps.pause.lanes = nil
		if ps.held == holdPause {
			p.unholdLocked(ps) // admits what may be admitted, syncs the fetch pause
		}
		p.syncPausesLocked(p.cl, ps)
	}
	p.checkBackpressureLocked()
	p.cond.Broadcast() // the poll loop may have records to admit
	return nil
}

// heldLocked returns the partitions of topic named (all held ones of topic
// when none are), or an error naming those not held (namedHeld). p.mu held.
func (p *Processor) heldLocked(op, topic string, partitions []int32) ([]*partState, error) {
	return namedHeld(op, topic, partitions,
		func() []*partState {
			var list []*partState
			for k, ps := range p.parts {
				if k.topic == topic && ps.state == partActive {
					list = append(list, ps)
				}
			}
			return list
		},
		func(part int32) (*partState, bool) {
			ps := p.parts[tp{topic, part}]
			return ps, ps != nil && ps.state == partActive
		})
}

// setAsidePausedLocked is the worker's hook: if the partition of lane l is
// paused, it sets l aside until Resume (waiting, parked) and reports true;
// the worker then leaves l. p.mu held.
func (p *Processor) setAsidePausedLocked(l *lane) bool {
	ps := l.part
	if !ps.pause.on {
		return false
	}
	l.waiting = true
	ps.pause.lanes = append(ps.pause.lanes, l)
	if !l.failing {
		p.setFailingLocked(l, true)
		p.checkBackpressureLocked()
	}
	return true
}

// pausedPartitionsLocked lists the paused partitions ("topic[partition]",
// sorted) for Health. p.mu held.
func (p *Processor) pausedPartitionsLocked() []string {
	var out []string
	for k, ps := range p.parts {
		if ps.state == partActive && ps.pause.on {
			out = append(out, k.String())
		}
	}
	slices.Sort(out)
	return out
}

// Pause stops the transformation of the given partitions of topic (all of
// the topic's partitions this member holds when none are given) until
// Resume: their fetching is paused in the client
// (kgo.Client.PauseFetchPartitions, Kafka's KafkaConsumer.pause), and no
// poll after Pause returns brings their records; records of theirs that an
// earlier poll brought in (at most MaxInFlight) are still transformed and
// committed. Transactions go on for the other partitions.
//
// A pause is of this member's hold of the partition, as with Kafka's
// consumer: a rebalance that takes the partition away forgets it, and so
// does a session replaced after a failed transaction (the member leaves the
// group and joins again). Pausing a paused partition does nothing. Pause
// returns an error wrapping ErrNotAssigned, and pauses nothing, if a named
// partition is not held (or, with none named, no partition of topic is).
// Safe for concurrent use, also from the TxnHandler. Health.PausedPartitions
// lists the paused partitions.
func (t *TxnProcessor) Pause(topic string, partitions ...int32) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	parts, err := t.heldLocked("pause", topic, partitions)
	if err != nil {
		return err
	}
	if t.paused == nil {
		t.paused = map[tp]bool{}
	}
	for _, part := range parts {
		t.paused[tp{topic, part}] = true
	}
	t.sess.Client().PauseFetchPartitions(map[string][]int32{topic: parts})
	return nil
}

// Resume lifts Pause from the given partitions of topic (all of the topic's
// partitions this member holds when none are given): the next polls bring
// their records again, from where the member stopped. A resumed partition
// joins the fetch after the one in flight, which on idle partitions takes
// up to kgo.FetchMaxWait (500ms in both modes; ClientOpts or ConsumerOpts
// set it). Resuming a partition that is not paused does nothing. It returns an error wrapping
// ErrNotAssigned, and resumes nothing, if a named partition is not held (a
// rebalance took it away and with it the pause). Safe for concurrent use.
func (t *TxnProcessor) Resume(topic string, partitions ...int32) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	parts, err := t.heldLocked("resume", topic, partitions)
	if err != nil {
		return err
	}
	for _, part := range parts {
		delete(t.paused, tp{topic, part})
	}
	t.sess.Client().ResumeFetchPartitions(map[string][]int32{topic: parts})
	return nil
}

// heldLocked returns the named partitions of topic (all held ones when none
// are), or an error naming those the current session does not hold
// (namedHeld). t.mu held.
func (t *TxnProcessor) heldLocked(op, topic string, partitions []int32) ([]int32, error) {
	owned := t.owned[topic]
	if t.sess == nil {
		owned = nil
	}
	return namedHeld(op, topic, partitions,
		func() []int32 {
			var list []int32
			for part := range owned {
				list = append(list, part)
			}
			return list
		},
		func(part int32) (int32, bool) { return part, owned[part] })
}

// forgetPauses is the session's revoke and loss hook: the pauses of the
// partitions it gives up are forgotten, in the client too (franz-go keeps a
// paused partition paused across assignments).
func (t *TxnProcessor) forgetPauses(cl *kgo.Client, gone map[string][]int32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	resume := map[string][]int32{}
	for topic, parts := range gone {
		for _, part := range parts {
			if t.paused[tp{topic, part}] {
				delete(t.paused, tp{topic, part})
				resume[topic] = append(resume[topic], part)
			}
		}
	}
	if len(resume) > 0 {
		cl.ResumeFetchPartitions(resume)
	}
}
