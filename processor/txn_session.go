package processor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/ctxtime"
)

// The exactly-once mode's transaction loop: a session polls, transforms (with
// in-place retries and dead letters) and produces into one transaction,
// ends it, and concludes it (metrics, dead-letter callbacks, settling).

// runSession runs transactions on one session, one after the other: each
// polls, transforms and produces (fill), ends (end) and is concluded
// (conclude). It returns nil on shutdown and an error when the session must
// be replaced (outcome unknown, a fatal group error, a record that cannot be
// dead-lettered).
func (t *TxnProcessor) runSession(ctx context.Context, sess *kgo.GroupTransactSession) error {
	ends := map[tp]int64{} // last stable offset per partition, from the latest fetch
	for {
		if ctx.Err() != nil {
			return nil
		}
		fetches := sess.PollRecords(ctx, t.cfg.maxRecords)
		if fetches.IsClientClosed() {
			return nil
		}
		if fatal := t.noteFetches(fetches, ends); fatal != nil {
			return fatal
		}
		recs := fetches.Records()
		if len(recs) == 0 {
			continue
		}
		if err := sess.Begin(); err != nil {
			return fmt.Errorf("begin transaction: %w", err)
		}
		b := &txnBatch{t: t, last: map[tp]int64{}}
		t.fill(ctx, sess, b, recs, ends)
		committed, prodErr, err := t.end(ctx, sess, b)
		if stop, err := t.conclude(ctx, sess, b, ends, committed, prodErr, err); stop || err != nil {
			return err
		}
	}
}

// txnBatch is one transaction of a session: what it read, what it
// produced, and what failed. The produce promises run on franz-go's
// goroutines: prodErr and deadErr are guarded by mu.
type txnBatch struct {
	t     *TxnProcessor
	abort bool         // end the transaction with an abort
	fatal error        // a fatal group error seen mid-transaction: abort, then return it
	n     int          // records transformed
	last  map[tp]int64 // highest offset per partition in this transaction
	// dead are the records dead-lettered in this transaction (for
	// OnDeadLetter once it commits).
	dead []deadLetter

	pending sync.WaitGroup // produce promises not run yet
	mu      sync.Mutex
	prodErr error
	// deadErr is the first record whose DLQ write failed: franz-go retries
	// what can be retried, so such a record would fail every transaction
	// again; the stage stops instead (see Run).
	deadErr *DeadLetterError
	// deadAt maps each dead-lettered source record to the DLQ record
	// written for it (set by its promise, under mu).
	deadAt map[*kgo.Record]*kgo.Record
}

// promise is the produce promise of an output record.
func (b *txnBatch) promise(r *kgo.Record, err error) {
	if ae := b.t.txnAuthzError(err, "produce", r); ae != nil {
		err = ae
	}
	if err != nil {
		b.mu.Lock()
		b.prodErr = errors.Join(b.prodErr, err)
		b.mu.Unlock()
	}
	b.pending.Done()
}

// deadPromise is the produce promise of src's DLQ record.
func (b *txnBatch) deadPromise(src *kgo.Record) func(*kgo.Record, error) {
	return func(r *kgo.Record, err error) {
		if ae := b.t.txnAuthzError(err, "DLQ write", r); ae != nil {
			err = ae // WRITE on the DLQ refused: named (authz.go)
		}
		b.mu.Lock()
		if err != nil && b.deadErr == nil {
			b.deadErr = &DeadLetterError{Topic: src.Topic, Partition: src.Partition, Offset: src.Offset, DLQ: r.Topic, Err: err}
		}
		if err == nil {
			if b.deadAt == nil {
				b.deadAt = map[*kgo.Record]*kgo.Record{}
			}
			b.deadAt[src] = r
		}
		b.mu.Unlock()
		b.promise(r, err)
	}
}

// errors returns what the promises that have run so far failed with.
func (b *txnBatch) errors() (prodErr error, deadErr *DeadLetterError) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.prodErr, b.deadErr
}

// fill transforms recs and produces their outputs in b's transaction, then
// polls for more and does the same until the commit interval has passed,
// maxRecords are in, a poll brings nothing, or a shutdown or a fatal group
// error sets b.abort.
func (t *TxnProcessor) fill(ctx context.Context, sess *kgo.GroupTransactSession, b *txnBatch, recs []*kgo.Record, ends map[tp]int64) {
	m := t.cfg.metrics
	deadline := time.Now().Add(t.cfg.commitInterval)
	for {
		for _, r := range recs {
			b.last[tp{r.Topic, r.Partition}] = r.Offset
			if r.Attrs.IsControl() {
				continue // a transaction marker: nothing to transform, its offset is still committed
			}
			m.partition(t.cfg.group, r.Topic).consumed(int64(len(r.Key) + len(r.Value)))
			outs, reason, fwd, err := t.transform(ctx, r)
			if err != nil { // shutdown mid-record
				b.abort = true
				return
			}
			pctx, done := ctx, b.promise
			if reason != nil {
				b.dead = append(b.dead, deadLetter{rec: r, reason: reason})
				done = b.deadPromise(r)
				if fwd != nil { // the DLQ write's send span ends with its result
					pctx = fwd.ctx
					dead := done
					done = func(o *kgo.Record, err error) { fwd.done(err); dead(o, err) }
				}
			}
			for _, o := range outs {
				// Not ctx: a shutdown must not fail records of a
				// transaction that is about to commit.
				b.pending.Add(1)
				sess.Produce(context.WithoutCancel(pctx), o, done)
			}
			b.n++
		}
		if time.Now().After(deadline) || b.n >= t.cfg.maxRecords {
			return
		}
		// Keep filling this transaction until the commit interval ends.
		pctx, cancel := context.WithDeadline(ctx, deadline)
		more := sess.PollRecords(pctx, t.cfg.maxRecords-b.n)
		cancel()
		if more.IsClientClosed() {
			b.abort = true
			return
		}
		if b.fatal = t.noteFetches(more, ends); b.fatal != nil {
			b.abort = true
			return
		}
		if recs = more.Records(); len(recs) == 0 {
			return
		}
	}
}

// end ends b's transaction: a commit once every output was acknowledged,
// else an abort. It returns whether it committed, the produce error that
// made it abort (if any), and End's error (the outcome is then unknown).
//
// Ending is not cut short by a shutdown (ctx), so that what was transformed
// commits; but once ctx is cancelled it gets at most DrainTimeout more,
// whatever the brokers do (a record franz-go keeps retrying would otherwise
// hold Run for 30s).
func (t *TxnProcessor) end(ctx context.Context, sess *kgo.GroupTransactSession, b *txnBatch) (committed bool, prodErr, err error) {
	endCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stopDrain := context.AfterFunc(ctx, func() { time.AfterFunc(t.cfg.drainTimeout, cancel) })
	defer stopDrain()
	if !b.abort {
		// Every produce promise must have run before prodErr is read:
		// End(TryCommit) aborts on a rebalance, not on a failed record, so
		// committing with an unseen produce failure would commit the
		// offsets without their output (the crash harness's fault
		// term-in-txn).
		_ = sess.Client().Flush(endCtx)
		// Flush waits for buffered records only. A record franz-go fails
		// before buffering it (no topic, larger than the producer's
		// limits) has its promise run on another goroutine, possibly after
		// Flush returned: without this wait a transaction whose only
		// outputs failed so would commit its inputs' offsets with no
		// output at all (TestTxnOutputFailedBeforeBuffering).
		if !waitGroupCtx(endCtx, &b.pending) {
			b.abort = true // a promise did not run within 30s: a record's outcome is unknown
		}
	}
	// A promise may still run (a shutdown does not wait for a record
	// franz-go keeps retrying): prodErr is read once.
	if prodErr, _ = b.errors(); prodErr != nil {
		b.abort = true
	}
	try := kgo.TryCommit
	if b.abort {
		try = kgo.TryAbort
	}
	endStart := time.Now()
	committed, err = sess.End(t.txnCommitCtx(endCtx, nil), try)
	if !b.abort {
		t.cfg.metrics.commitLatency(t.cfg.group, time.Since(endStart), err)
		if tr := t.cfg.tracer; tr != nil {
			terr := err
			if terr == nil && !committed {
				terr = errTxnNotCommitted
			}
			tr.Committed(t.cfg.group, b.nextOffsets(), terr)
		}
	}
	return committed, prodErr, err
}

// errTxnNotCommitted is the error the tracer's Committed gets for a
// transaction that tried to commit and was aborted instead (a rebalance).
var errTxnNotCommitted = errors.New("transaction not committed")

// nextOffsets are the offsets b's transaction commits: topic -> partition
// -> the offset after the last record read.
func (b *txnBatch) nextOffsets() map[string]map[int32]int64 {
	out := make(map[string]map[int32]int64)
	for k, off := range b.last {
		if out[k.topic] == nil {
			out[k.topic] = make(map[int32]int64)
		}
		out[k.topic][k.partition] = off + 1
	}
	return out
}

// dlqTrace is the tracing of a DLQ write inside the transaction: the
// context to produce the record with (the tracer's Forward) and the end of
// its span.
type dlqTrace struct {
	ctx  context.Context
	done func(error)
}

// conclude acts on how b's transaction ended: the metrics and counts, the
// dead letters' callbacks, the repair of late commits, and after a
// not-committed end the settling of where to resume. stop reports that the
// session is to end without an error (a shutdown); err that it is to end
// and be replaced.
func (t *TxnProcessor) conclude(ctx context.Context, sess *kgo.GroupTransactSession, b *txnBatch, ends map[tp]int64,
	committed bool, prodErr, err error) (stop bool, _ error) {
	m := t.cfg.metrics
	if _, failedDead := b.errors(); failedDead != nil && !committed {
		t.count(false)
		m.forwardFailed(t.cfg.group, failedDead.DLQ)
		t.cfg.logger.Error("record could not be written to the DLQ; transaction aborted, stage stopped",
			"topic", failedDead.Topic, "partition", failedDead.Partition, "offset", failedDead.Offset,
			"dlq", failedDead.DLQ, "error", failedDead.Err)
		return true, failedDead
	}
	if committed && err == nil {
		for k, off := range b.last {
			m.committed(t.cfg.group, k.topic, k.partition, off+1)
			if end, ok := ends[k]; ok {
				m.setLagValue(t.cfg.group, k, end-(off+1))
			}
		}
	}
	fatal := b.fatal
	if ae := t.txnAuthzError(prodErr, "produce", nil); fatal == nil && ae != nil {
		fatal = ae // aborted: no output and no offset of it committed
	}
	if fatal != nil {
		t.count(committed && err == nil)
		return true, fatal
	}
	if err != nil {
		t.count(false)
		return true, fmt.Errorf("end transaction (outcome unknown): %w", err)
	}
	if committed {
		t.count(true)
		b.mu.Lock()
		for i := range b.dead {
			b.dead[i].to = b.deadAt[b.dead[i].rec]
		}
		b.mu.Unlock()
		t.notifyDead(b.dead)
		if t.atLateRisk() {
			if err := t.repairLateCommits(sess, nil); err != nil {
				return true, fmt.Errorf("repair committed offsets: %w", err)
			}
		}
		return false, nil
	}
	if ctx.Err() != nil {
		t.count(false)
		return true, nil // shutting down: where to resume is the next member's OffsetFetch
	}
	// Not committed, and no error: a clean abort, or an outcome franz-go
	// could not confirm and retried as an abort (see settle). Either way,
	// resume from what the broker holds.
	landed, moved, serr := t.settle(sess, b.last)
	if serr != nil {
		t.count(false)
		return true, fmt.Errorf("settle transaction (outcome unknown): %w", serr)
	}
	for k, off := range moved {
		m.committed(t.cfg.group, k.topic, k.partition, off)
		if end, ok := ends[k]; ok {
			m.setLagValue(t.cfg.group, k, end-off)
		}
	}
	t.count(landed)
	if landed && !b.abort {
		t.cfg.logger.Warn("transaction reported not committed, but the broker holds its offsets: it committed; resuming after it",
			"records", b.n, "partitions_moved", len(moved))
	} else {
		// moved is not empty after an abort when an earlier not-committed
		// End had in fact committed.
		t.cfg.logger.Info("transaction aborted; resuming from the broker's committed offsets",
			"records", b.n, "partitions_moved", len(moved), "produce_error", prodErr)
	}
	return false, nil
}

// waitGroupCtx waits for wg until ctx ends; it reports whether wg was done.
// On false, a goroutine stays blocked in wg.Wait until wg is done.
func waitGroupCtx(ctx context.Context, wg *sync.WaitGroup) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// noteFetches logs and counts fetch errors and keeps each partition's last
// stable offset (for the lag gauge) in ends. It returns a *FatalGroupError
// if the fetches carry one, and nil otherwise.
func (t *TxnProcessor) noteFetches(f kgo.Fetches, ends map[tp]int64) (fatal error) {
	f.EachError(func(topic string, p int32, err error) {
		if ae := fetchAuthzError(t.cfg.group, topic, err); ae != nil {
			fatal = ae
			return
		}
		if fe := fatalGroupError(t.cfg.group, err); fe != nil {
			fatal = fe
			return
		}
		// Our own poll deadlines (the end of a commit interval) and
		// shutdown end a poll this way; they are not fetch errors.
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			t.cfg.logger.Warn("fetch error", "topic", topic, "partition", p, "error", err)
			t.cfg.metrics.fetchError(t.cfg.group)
		}
	})
	f.EachPartition(func(p kgo.FetchTopicPartition) {
		if p.Err == nil && p.LastStableOffset > 0 {
			ends[tp{p.Topic, p.Partition}] = p.LastStableOffset
		}
	})
	return fatal
}

// transform runs the handler with in-place retries; after MaxAttempts, or on
// a permanent error, it returns a DLQ record instead of the output, the
// handler's last error as dead and, with a tracer, the DLQ write's tracing.
// It returns err only when ctx ends.
func (t *TxnProcessor) transform(ctx context.Context, r *kgo.Record) (outs []*kgo.Record, dead error, fwd *dlqTrace, err error) {
	it := &item{rec: r, view: r}
	for {
		hctx, cancel := ctx, context.CancelFunc(func() {})
		if t.cfg.handlerTimeout > 0 {
			hctx, cancel = context.WithTimeout(ctx, t.cfg.handlerTimeout)
		}
		start := time.Now()
		var traced func(error)
		if tr := t.cfg.tracer; tr != nil {
			attempt := 1
			if it.fail != nil {
				attempt = it.fail.attempts + 1
			}
			hctx, traced = tr.Attempt(hctx, t.cfg.group, r, attempt)
		}
		outs, err := safeTransform(hctx, t.handler, r)
		if traced != nil {
			if err == nil {
				t.cfg.tracer.Outputs(hctx, outs)
			}
			traced(err)
		}
		cancel()
		t.cfg.metrics.handled(t.cfg.group, r.Topic, time.Since(start), err)
		if err == nil {
			return outs, nil, nil, nil
		}
		if ctx.Err() != nil {
			return nil, nil, nil, ctx.Err()
		}
		now := time.Now()
		f := it.failState()
		f.attempts++
		f.lastErr = err
		if f.first.IsZero() {
			f.first = now
		}
		f.last = now
		if IsPermanent(err) || f.attempts >= t.cfg.maxAttempts {
			t.cfg.logger.Warn("record dead-lettered inside the transaction", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "error", err)
			t.cfg.metrics.forwarded(t.cfg.group, t.cfg.dlqTopic, true)
			dl := &kgo.Record{Topic: t.cfg.dlqTopic, Key: r.Key, Value: r.Value, Headers: forwardHeaders(&t.cfg, nil, it)}
			if tr := t.cfg.tracer; tr != nil {
				fwd = &dlqTrace{}
				fwd.ctx, fwd.done = tr.Forward(ctx, t.cfg.group, r, dl.Topic, true, err)
			}
			return []*kgo.Record{dl}, err, fwd, nil
		}
		t.cfg.metrics.retried(t.cfg.group, r.Topic)
		ctxtime.Sleep(ctx, backoff(f.attempts, t.cfg.backoffMin, t.cfg.backoffMax))
	}
}

func safeTransform(ctx context.Context, h TxnHandler, r *kgo.Record) (outs []*kgo.Record, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panic: %v", p)
		}
	}()
	return h(ctx, r)
}
