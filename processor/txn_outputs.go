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
// would abort every transaction holding it, and the stage would redo it
// for ever. Each such abort counts as a failed attempt of its input, and
// after MaxAttempts of them the input fails permanently, without calling
// the handler again: it goes to the DLQ with the reason, and the stage
// moves on.
//
//   - Found before producing (checkOutputs): a nil output record, or one
//     with no Topic when the client has no kgo.DefaultProduceTopic. The
//     attempt fails like a handler error (retried in place with Backoff,
//     then dead-lettered); no transaction aborts.
//   - Found by the produce (outputPromise): an error no retry of the same
//     record fixes (unproducibleErr). The transaction aborts (its other
//     records are redone, as after any abort); the input's count in
//     TxnProcessor.refused goes up, and its next transform runs the
//     handler again unless the count reached MaxAttempts (unproducible).

// tpo names one record: topic, partition, offset.
type tpo struct {
	topic     string
	partition int32
	offset    int64
}

// maxRefused bounds TxnProcessor.refused: inputs whose outputs were
// refused and that did not commit since (their partition moved to another
// member). Past it an entry is dropped; its input then gets MaxAttempts
// aborts more.
const maxRefused = 10_000

// refusal is an input's count of transactions aborted by one of its
// outputs, and the last such produce error.
type refusal struct {
	err     error
	aborted int
}

// checkOutputs returns an error naming the first output of a handler's
// result that cannot be produced at all.
func (t *TxnProcessor) checkOutputs(outs []*kgo.Record) error {
	for i, o := range outs {
		if o == nil {
			return fmt.Errorf("TxnHandler output %d of %d is nil", i+1, len(outs))
		}
		if o.Topic == "" {
			if dt := t.defaultTopic.Load(); dt == nil || *dt == "" {
				return fmt.Errorf("TxnHandler output %d of %d has no Topic (and the client has no kgo.DefaultProduceTopic)", i+1, len(outs))
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
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// outputPromise is the produce promise of src's outputs: a failure no
// retry fixes counts against src (unproducible), then the batch's promise
// runs.
func (b *txnBatch) outputPromise(src *kgo.Record) func(*kgo.Record, error) {
	return func(o *kgo.Record, err error) {
		if err != nil && unproducibleErr(err) {
			t := b.t
			t.refusedMu.Lock()
			if t.refused == nil {
				t.refused = make(map[tpo]*refusal)
			}
			k := tpo{src.Topic, src.Partition, src.Offset}
			f := t.refused[k]
			if f == nil {
				if len(t.refused) >= maxRefused {
					for k := range t.refused {
						delete(t.refused, k)
						break
					}
				}
				f = &refusal{}
				t.refused[k] = f
			}
			t.refusedN.Store(int32(len(t.refused)))
			f.err = fmt.Errorf("output to %q could not be produced: %w", o.Topic, err)
			b.refusedBy = append(b.refusedBy, k)
			t.refusedMu.Unlock()
		}
		b.promise(o, err)
	}
}

// countRefusals counts one aborted transaction against each input whose
// output it could not produce (once per input per transaction).
func (t *TxnProcessor) countRefusals(b *txnBatch) {
	t.refusedMu.Lock()
	defer t.refusedMu.Unlock()
	seen := map[tpo]bool{}
	for _, k := range b.refusedBy {
		if f := t.refused[k]; f != nil && !seen[k] {
			seen[k] = true
			f.aborted++
		}
	}
}

// forgetRefusals drops the counts of the inputs x committed.
func (t *TxnProcessor) forgetRefusals(x *txnCut) {
	if t.refusedN.Load() == 0 {
		return
	}
	t.refusedMu.Lock()
	defer t.refusedMu.Unlock()
	for _, r := range x.recs {
		if r.rec != nil {
			delete(t.refused, tpo{r.rec.Topic, r.rec.Partition, r.rec.Offset})
		}
	}
	t.refusedN.Store(int32(len(t.refused)))
}

// refusedRec reports whether an output of r was refused (counted in
// refused, until r commits or its count is evicted).
func (t *TxnProcessor) refusedRec(r *kgo.Record) bool {
	if t.refusedN.Load() == 0 {
		return false // the common case, without the lock
	}
	t.refusedMu.Lock()
	defer t.refusedMu.Unlock()
	_, ok := t.refused[tpo{r.Topic, r.Partition, r.Offset}]
	return ok
}

// unproducible returns the permanent error of r once its outputs aborted
// MaxAttempts transactions.
func (t *TxnProcessor) unproducible(r *kgo.Record) error {
	if t.refusedN.Load() == 0 {
		return nil // the common case, without the lock: called for every attempt
	}
	t.refusedMu.Lock()
	defer t.refusedMu.Unlock()
	k := tpo{r.Topic, r.Partition, r.Offset}
	f := t.refused[k]
	if f == nil || f.aborted < t.cfg.maxAttempts {
		return nil
	}
	delete(t.refused, k)
	t.refusedN.Store(int32(len(t.refused)))
	return Permanent(fmt.Errorf("%w (%d transactions aborted by it)", f.err, f.aborted))
}
