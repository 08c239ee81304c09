package processor

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The exactly-once mode's outputs that cannot be produced. A transaction
// commits only when every output was acknowledged, so one output the
// brokers refuse for good (a missing topic, a record over the size limit)
// would abort every transaction holding it, and the stage would retry it
// for ever. Such an output fails its input record instead: permanently,
// so the input goes to the DLQ with the reason, and the stage moves on.
//
//   - Found before producing (checkOutputs): a nil output record, or one
//     with no Topic when the client has no kgo.DefaultProduceTopic. The
//     input fails at once, no transaction aborts.
//   - Found by the produce (outputPromise): an error no retry fixes
//     (unproducibleErr). The transaction aborts (the others of its
//     records are redone, as after any abort) and the input's next
//     attempt fails with that error without calling the handler
//     (unproducible), so it is dead-lettered in the next transaction.

// tpo names one record: topic, partition, offset.
type tpo struct {
	topic     string
	partition int32
	offset    int64
}

// maxRefused bounds TxnProcessor.refused: inputs whose outputs were
// refused and that were not attempted again (their partition moved to
// another member). Past it the oldest entries are not kept; such an input
// aborts one transaction more on this member.
const maxRefused = 10_000

// checkOutputs returns a permanent error naming the first output of a
// handler's result that cannot be produced at all.
func (t *TxnProcessor) checkOutputs(outs []*kgo.Record) error {
	for i, o := range outs {
		if o == nil {
			return Permanentf("TxnHandler output %d of %d is nil", i+1, len(outs))
		}
		if o.Topic == "" {
			if dt := t.defaultTopic.Load(); dt == nil || *dt == "" {
				return Permanentf("TxnHandler output %d of %d has no Topic (and the client has no kgo.DefaultProduceTopic)", i+1, len(outs))
			}
		}
	}
	return nil
}

// unproducibleErr reports whether err, a produce error of an output, is
// one that no retry of the same record fixes.
func unproducibleErr(err error) bool {
	for _, e := range []error{
		kerr.UnknownTopicOrPartition, // after kgo.UnknownTopicRetries
		kerr.InvalidTopicException,
		kerr.MessageTooLarge, // over ProducerBatchMaxBytes (client) or max.message.bytes (broker)
		kerr.RecordListTooLarge,
		kerr.InvalidRecord,
		kerr.InvalidRequiredAcks,
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// outputPromise is the produce promise of src's outputs: a failure no
// retry fixes marks src (unproducible), then the batch's promise runs.
func (b *txnBatch) outputPromise(src *kgo.Record) func(*kgo.Record, error) {
	return func(o *kgo.Record, err error) {
		if err != nil && unproducibleErr(err) {
			t := b.t
			t.refusedMu.Lock()
			if t.refused == nil {
				t.refused = make(map[tpo]error)
			}
			if len(t.refused) >= maxRefused {
				for k := range t.refused {
					delete(t.refused, k)
					break
				}
			}
			t.refused[tpo{src.Topic, src.Partition, src.Offset}] = fmt.Errorf("output to %q could not be produced: %w", o.Topic, err)
			t.refusedMu.Unlock()
		}
		b.promise(o, err)
	}
}

// unproducible returns, once, the permanent error of r when one of its
// outputs was refused for good in an earlier transaction.
func (t *TxnProcessor) unproducible(r *kgo.Record) error {
	t.refusedMu.Lock()
	defer t.refusedMu.Unlock()
	k := tpo{r.Topic, r.Partition, r.Offset}
	err, ok := t.refused[k]
	if !ok {
		return nil
	}
	delete(t.refused, k)
	return Permanent(err)
}
