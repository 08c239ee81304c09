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
