package processor

import (
	"fmt"
	"runtime/debug"

	"github.com/twmb/franz-go/pkg/kgo"
)

// deadLetter is a record written to the DLQ and the handler error that sent
// it there, for OnDeadLetter.
type deadLetter struct {
	rec    *kgo.Record
	reason error
	to     *kgo.Record // the DLQ record written (nil if unknown)
}

// deadLettered logs the dead-lettering and calls OnDeadLetter after a
// forward of it that wrote to (and returned err), if it went to the DLQ. Called by the worker without p.mu.
func (p *Processor) deadLettered(it *item, to *kgo.Record, err error) {
	if err != nil || !p.isDLQ(it.fail.target) {
		return
	}
	logDeadLetter(&p.cfg, it.view, to, it.fail.lastErr)
	if p.cfg.onDeadLetter != nil {
		callDeadLetter(&p.cfg, it.view, it.fail.lastErr)
	}
}

// notifyDead logs each record of a committed transaction that was
// dead-lettered in it and calls OnDeadLetter for it.
func (t *TxnProcessor) notifyDead(dead []deadLetter) {
	for _, d := range dead {
		logDeadLetter(&t.cfg, d.rec, d.to, d.reason)
		if t.cfg.onDeadLetter != nil {
			callDeadLetter(&t.cfg, d.rec, d.reason)
		}
	}
}

// logDeadLetter logs, at level warn, that r was dead-lettered: where it was
// consumed, the DLQ record written for it (to; nil when unknown), its error
// class and the error.
func logDeadLetter(c *cfg, r, to *kgo.Record, reason error) {
	attrs := []any{"topic", r.Topic, "partition", r.Partition, "offset", r.Offset, // group: in c.logger (New, NewQueue, NewTransactional)
		"error_class", ErrorClass(reason), "error", reason}
	if to != nil {
		attrs = append(attrs, "dlq_topic", to.Topic, "dlq_partition", to.Partition, "dlq_offset", to.Offset)
	}
	c.logger.Warn("record dead-lettered", attrs...)
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
