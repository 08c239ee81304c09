package processor

import (
	"fmt"
	"runtime/debug"

	"github.com/twmb/franz-go/pkg/kgo"
)

// OnDeadLetter sets a function called after a record was written to the DLQ,
// with the record as the handler saw it (for a record that came through
// retry topics: its original topic, partition, offset and timestamp) and
// the handler's last error, the reason it was dead-lettered (IsPermanent and
// ErrorClass tell which kind). Default none. Use it to alert, count by
// reason or keep an audit trail; the DLQ record itself carries the same as
// headers.
//
// New: fn runs on the worker goroutine that wrote the record, once the
// broker acknowledged the write (acks=all) and before the record's offset
// may be committed, with no lock of the runtime held. While it runs it
// holds that worker's Concurrency slot and the record's partition
// (OrderPartition) or key (OrderKey) waits; it may block briefly, and may
// call Health. A record written again after a crash or a rebalance (the
// commit had not passed it) is reported again: at-least-once, like the
// DLQ write.
//
// NewTransactional: fn runs on Run's goroutine after the transaction that
// wrote the record committed, before the next transaction begins, so
// blocking delays all of this member's processing. An aborted transaction
// reports nothing: its DLQ records were never visible.
//
// Calls are never concurrent for one record, but are for records of
// different partitions or keys (New): fn must be safe for concurrent use.
// A panic in fn is recovered and logged at ERROR; it does not affect the
// record.
func OnDeadLetter(fn func(r *kgo.Record, reason error)) TxnOpt {
	return bothOpt(func(c *cfg) { c.onDeadLetter = fn })
}

// deadLetter is a record written to the DLQ and the handler error that sent
// it there, for OnDeadLetter.
type deadLetter struct {
	rec    *kgo.Record
	reason error
}

// deadLettered calls OnDeadLetter after a forward of it that returned err,
// if it went to the DLQ. Called by the worker without p.mu.
func (p *Processor) deadLettered(it *item, err error) {
	if err != nil || p.cfg.onDeadLetter == nil || !p.isDLQ(it.fail.target) {
		return
	}
	callDeadLetter(&p.cfg, it.view, it.fail.lastErr)
}

// notifyDead calls OnDeadLetter for each record of a committed transaction
// that was dead-lettered in it.
func (t *TxnProcessor) notifyDead(dead []deadLetter) {
	if t.cfg.onDeadLetter == nil {
		return
	}
	for _, d := range dead {
		callDeadLetter(&t.cfg, d.rec, d.reason)
	}
}

func callDeadLetter(c *cfg, r *kgo.Record, reason error) {
	defer func() {
		if v := recover(); v != nil {
			c.logger.Error("OnDeadLetter panicked", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset,
				"error", fmt.Sprintf("%v\n%s", v, debug.Stack()))
		}
	}()
	c.onDeadLetter(r, reason)
}
