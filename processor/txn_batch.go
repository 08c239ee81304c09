package processor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TxnBatchHandler transforms several consumed records at once in the
// exactly-once mode, as a TxnHandler does one: it returns outs with one
// entry per record (outs[i] are recs[i]'s outputs, nil or empty for none;
// a nil outs means no outputs at all) and nil when every record is done, a
// *BatchError (FailRecords, StopAt; wrapped or not) when some records
// failed and the others are done, and any other error when the batch as a
// whole failed. A typical one reads what its records need in one query
// (the rows of every record's key) instead of one per record.
//
// The outputs of each record are produced in the Kafka transaction that
// commits the record's offset, exactly as a TxnHandler's: the records a
// batch completes complete together, so their outputs and offsets go into
// one transaction. The same rules hold as for TxnHandler: no side effects
// outside Kafka (a batch whose result is discarded, by an abort, a
// rebalance or a failure, runs again), outputs go to their Topic (or the
// client's DefaultProduceTopic) and to the partitioner's partition.
//
// What recs holds, and when it is called: as a BatchHandler's batch (see
// BatchHandler and WithBatchHandler): the records that could run at that
// moment, up to MaxBatch, per lane (a partition in OrderPartition, a key
// of one in OrderKey) consecutive records in offset order; the calling
// worker does not linger for more. Records that failed before (they back
// off in their lane), records whose outputs were refused by the brokers
// (until they commit), and the records of a batch that failed as a whole
// are never put in a batch: they run one at a time through the TxnHandler,
// with its attempts, backoff and DLQ.
//
// Outcome, record by record:
//   - nil: every record completes with outs[i];
//   - a *BatchError: per lane, in slice order, the records before the
//     lane's first failed one (and before StopAt's index) complete with
//     their outs; the lane's first failed record counts one failed attempt,
//     as a TxnHandler's error would (backoff in its lane, or at once the
//     DLQ record on a permanent error or after MaxAttempts); every later
//     record of that lane, and every record from StopAt's index on, is not
//     done and runs again later;
//   - any other error, a panic, a BatchError that is out of range or
//     reports nothing, an outs of another length than recs, or an output
//     that cannot be produced at all (nil, or without a topic): no record
//     completes, and each runs again alone through the TxnHandler (the
//     batch's failure is not counted as an attempt of its records).
//
// ctx is cancelled on shutdown, on an abort or rebalance that drops the
// batch's records, and after HandlerTimeout (for the whole batch). The
// slice and its records must not be modified or retained after the call;
// the outputs belong to the runtime once returned. Batches run
// concurrently (up to Concurrency calls, batches and single records
// together), never two holding records of one lane.
type TxnBatchHandler func(ctx context.Context, recs []*kgo.Record) (outs [][]*kgo.Record, err error)

// WithTxnBatchHandler has NewTransactional give h the records that are
// ready together, up to MaxBatch (default DefaultMaxBatch) per call, and
// its TxnHandler the records handled one at a time (retries, records whose
// batch failed); see TxnBatchHandler. NewTransactional only: New refuses it
// (New's batches take a BatchHandler, WithBatchHandler). A nil h is
// refused.
//
// Batching does not linger: under a light load a batch holds one record, so
// latency does not grow; batches fill up when records queue while the
// workers are busy, as after each fetch.
func WithTxnBatchHandler(h TxnBatchHandler) TxnOpt {
	return bothOpt(func(c *cfg) { c.txnBatch, c.txnBatchNil = h, h == nil })
}

// RecordOutputsTracer is an optional interface of a Tracer: when the Tracer
// has it, the outputs of each record of a TxnBatchHandler's batch are given
// to RecordOutputs with that record (instead of to Outputs, with the
// batch's context, for them all), so that each record's outputs can join
// the record's own trace rather than the batch's (proctrace.Tracer does:
// one trace per input, whether it was handled alone or in a batch). bctx is
// the batch's handler context (Tracer.Batch's); it is called before the
// outputs are produced, for every record of the batch with outputs.
type RecordOutputsTracer interface {
	RecordOutputs(bctx context.Context, rec *kgo.Record, outs []*kgo.Record)
}

// adoptTxnBatch checks the exactly-once mode's batch options: MaxBatch
// must be >= 1 when given; without WithTxnBatchHandler MaxBatch has no
// effect.
func (c *cfg) adoptTxnBatch() error {
	var errs []error
	if c.txnBatchNil {
		errs = append(errs, errors.New("WithTxnBatchHandler: nil, want a TxnBatchHandler (leave the option out to transform records one at a time)"))
	}
	if c.batch != nil && c.batch.max < 1 {
		errs = append(errs, fmt.Errorf("MaxBatch: %d, want >= 1", c.batch.max))
	}
	return errors.Join(errs...)
}

// txnBatchMax is the most records of one TxnBatchHandler call.
func (c *cfg) txnBatchMax() int {
	if c.batch != nil && c.batch.max >= 1 {
		return c.batch.max
	}
	return DefaultMaxBatch
}

// batchableLocked reports whether rec, queued in a lane, may go into a
// batch: it never failed, its batch never failed, and its outputs were
// never refused (such a record runs alone, so that t.unproducible
// dead-letters it after MaxAttempts aborts). w.mu held.
func (w *txnWork) batchableLocked(rec *txnRec) bool {
	return w.t.cfg.txnBatch != nil && rec.it == nil && !rec.solo && !w.t.refusedRec(rec.rec)
}

// txnShare is one lane's share of a batch: its first n queued records.
type txnShare struct {
	l *txnLane
	n int
}

// runBatchLocked runs a batch whose first lane is l (taken from the ready
// queue by the calling worker; its first record batchableLocked): l's
// batchable records and those of the other ready lanes, up to MaxBatch,
// are given to the TxnBatchHandler without w.mu, and the outcome settled:
// completed records wait for the next transaction, lanes with records left
// are ready again (or aside for a failed record's backoff). It reports
// false, having done nothing, when l's first record is no longer batchable
// (an output promise may record a refusal of it meanwhile, without w.mu):
// the caller then runs it alone. w.mu held on entry and on return.
func (w *txnWork) runBatchLocked(l *txnLane) bool {
	t := w.t
	maxN := t.cfg.txnBatchMax()
	var shares []txnShare
	var recs []*txnRec
	take := func(l *txnLane) {
		n := 0
		for n < l.queue.len() && len(recs) < maxN && w.batchableLocked(l.queue.at(n)) {
			recs = append(recs, l.queue.at(n))
			n++
		}
		shares = append(shares, txnShare{l, n})
	}
	take(l)
	if len(recs) == 0 {
		return false
	}
	if len(recs) < maxN && w.ready.len() > 0 {
		w.ready.filter(func(o *txnLane) bool {
			if len(recs) < maxN && o.gen == w.gen && o.queue.len() > 0 && w.batchableLocked(o.queue.first()) {
				take(o)
				return false
			}
			return true
		})
	}
	in := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		in[i] = r.rec
	}
	ctx, gen := w.ctx, w.gen
	w.mu.Unlock()
	start := time.Now()
	outs, err := t.callTxnBatch(ctx, in)
	d := time.Since(start)
	w.mu.Lock()
	if gen != w.gen || ctx.Err() != nil {
		return true // dropped, or shutting down: the result is discarded (as a record's)
	}
	partial := partialOutcome(err, len(recs))
	t.cfg.metrics.batchDone(t.cfg.group, len(recs), d, err != nil && partial == nil)
	switch {
	case partial != nil:
		t.cfg.logger.Warn("batch transform reported failed records; the others are done", "records", len(recs),
			"failed", len(partial.failed), "not_handled_from", partial.notFrom, "error", err)
	case err != nil:
		t.cfg.logger.Warn("batch transform failed; transforming its records one at a time", "records", len(recs), "error", err)
	}
	at := 0 // the index in recs of the share's first record
	for _, s := range shares {
		first := at
		at += s.n
		aside := false
		switch {
		case err == nil:
			for i := range s.n {
				s.l.part.m.processedOne()
				w.completeLocked(s.l, outsAt(outs, first+i))
			}
		case partial != nil:
			aside = w.settlePartialLocked(s, first, outs, partial)
		default:
			for i := range s.n {
				s.l.queue.at(i).solo = true
			}
		}
		switch {
		case aside:
		case s.l.queue.len() == 0:
			s.l.part.idleLane(s.l)
		default:
			w.readyLocked(s.l)
		}
	}
	if w.cutDueLocked() {
		w.poke()
		t.cancelPoll()
	}
	return true
}

// settlePartialLocked settles one lane's share of a batch that reported a
// *BatchError (see TxnBatchHandler): it completes the records before the
// lane's first failed one, and counts that one's failed attempt. It reports
// whether the lane was set aside for the failed record's backoff. w.mu held.
func (w *txnWork) settlePartialLocked(s txnShare, first int, outs [][]*kgo.Record, be *BatchError) (aside bool) {
	t := w.t
	for i := range s.n {
		idx := first + i
		if be.notFrom >= 0 && idx >= be.notFrom {
			return false // not handled: runs again, no attempt counted
		}
		rec := s.l.queue.first()
		ferr := be.failed[idx]
		if ferr == nil {
			s.l.part.m.processedOne()
			w.completeLocked(s.l, outsAt(outs, idx))
			continue
		}
		s.l.part.m.failedOne(ferr)
		dead, wait := t.failed(rec, ferr)
		if dead == nil {
			w.asideLocked(s.l, wait)
			return true
		}
		rec.dead = ferr
		w.completeLocked(s.l, dead)
		return false // the lane's later records run again, after it
	}
	return false
}

// outsAt returns outs[i], or nil when outs is nil (no outputs at all).
func outsAt(outs [][]*kgo.Record, i int) []*kgo.Record {
	if outs == nil {
		return nil
	}
	return outs[i]
}

// callTxnBatch runs the TxnBatchHandler once for recs, with HandlerTimeout
// for the whole batch, tracing, a panic turned into an error, and its
// result checked: outs of another length than recs, or an output that
// cannot be produced, is an error of the whole batch. Outputs are given to
// the tracer when the batch succeeded, in whole or in part (those of a
// partial outcome's failed and not-handled records too: they are dropped
// after).
func (t *TxnProcessor) callTxnBatch(ctx context.Context, recs []*kgo.Record) (outs [][]*kgo.Record, err error) {
	call := func(ctx context.Context) error {
		var err error
		outs, err = t.cfg.txnBatch(ctx, recs)
		if n := len(outs); outs != nil && n != len(recs) {
			outs = nil
			return fmt.Errorf("TxnBatchHandler returned outputs for %d records, want %d (one entry per record, or nil)", n, len(recs))
		}
		for i, o := range outs {
			if cerr := t.checkOutputs(o); cerr != nil {
				outs = nil
				return fmt.Errorf("record %d of the batch: %w", i, cerr)
			}
		}
		return err
	}
	traceOutputs := func(ctx context.Context, err error) {
		if outs == nil || t.cfg.tracer == nil || (err != nil && partialOutcome(err, len(recs)) == nil) {
			return
		}
		if ro, ok := t.cfg.tracer.(RecordOutputsTracer); ok {
			for i, o := range outs {
				if len(o) > 0 {
					ro.RecordOutputs(ctx, recs[i], o)
				}
			}
			return
		}
		for _, o := range outs {
			t.cfg.tracer.Outputs(ctx, o)
		}
	}
	err = callBatchHandler(ctx, &t.cfg, recs, call, traceOutputs)
	if err != nil && partialOutcome(err, len(recs)) == nil {
		outs = nil
	}
	return outs, err
}
