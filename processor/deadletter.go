package processor

import "github.com/twmb/franz-go/pkg/kgo"

// deadLetter is a record written to the DLQ and the handler error that sent
// it there, for OnDeadLetter.
type deadLetter struct {
	rec    *kgo.Record
	reason error
}

// notifyDead calls the OnDeadLetter callback for each record of a committed
// transaction that was dead-lettered in it.
func (t *TxnProcessor) notifyDead(dead []deadLetter) {
	if t.cfg.onDeadLetter == nil {
		return
	}
	for _, d := range dead {
		t.cfg.onDeadLetter(d.rec, d.reason)
	}
}
