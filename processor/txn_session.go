package processor

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The exactly-once mode's transaction loop: a session polls records into
// its work (txn_work.go), where lanes transform them concurrently; every
// CommitInterval it begins a transaction, produces the outputs of the
// records completed since the last one, commits every partition's commit
// point with its completed-offsets map, ends the transaction, and concludes
// it (metrics, dead-letter callbacks, settling after an abort).

// runSession runs one session: polls, admits, and cuts transactions by
// time. It returns nil on shutdown (after committing what completed) and an
// error when the session must be replaced (outcome unknown, a fatal group
// error, a record that cannot be dead-lettered).
func (t *TxnProcessor) runSession(ctx context.Context, sess *kgo.GroupTransactSession) error {
	w := newTxnWork(t, ctx)
	t.mu.Lock()
	t.work = w
	t.mu.Unlock()
	defer func() {
		w.stop(t.cfg.drainTimeout)
		t.mu.Lock()
		t.work = nil
		t.mu.Unlock()
	}()
	ends := map[tp]int64{} // last stable offset per partition, from the latest fetch
	next := time.Now().Add(t.cfg.commitInterval)
	for {
		if ctx.Err() != nil {
			// Handlers are cancelled (their results discarded); what
			// completed commits.
			_, err := t.commitTxn(ctx, sess, w, ends)
			return err
		}
		if t.resync.Swap(false) {
			if err := t.resyncSession(ctx, sess, w, ends); err != nil {
				return err
			}
			continue
		}
		now := time.Now()
		room, due := w.room(), w.cutDue()
		if !now.Before(next) || due {
			next = now.Add(t.cfg.commitInterval)
			if stop, err := t.commitTxn(ctx, sess, w, ends); stop || err != nil {
				return err
			}
			continue
		}
		if room == 0 {
			// MaxInFlight held: no poll until records are committed.
			timer := time.NewTimer(next.Sub(now))
			select {
			case <-w.wake:
			case <-timer.C:
			case <-ctx.Done():
			}
			timer.Stop()
			continue
		}
		pctx, cancel := context.WithDeadline(ctx, next)
		t.setPollCancel(cancel)
		if w.cutDue() {
			cancel() // completed while the cancel was not set yet
		}
		fetches := sess.PollRecords(pctx, room)
		t.setPollCancel(nil)
		cancel()
		if fetches.IsClientClosed() {
			return nil
		}
		if fatal := t.noteFetches(fetches, ends); fatal != nil {
			return fatal
		}
		if t.resync.Load() {
			continue // polled across a rebalance: dropped, the resync reads where to resume
		}
		if ks := w.needInit(fetches); len(ks) > 0 {
			rctx, rcancel := context.WithTimeout(ctx, t.cfg.txnTimeout+30*time.Second)
			held, err := t.stableCommits(rctx, sess.Client())
			rcancel()
			if err != nil {
				if ctx.Err() != nil {
					continue
				}
				return fmt.Errorf("read committed offsets of assigned partitions: %w", err)
			}
			w.initParts(ks, held)
		}
		w.admit(fetches)
	}
}

// setPollCancel keeps the cancel of the poll in progress (nil: none), for
// a rebalance to end it (noteRebalance).
func (t *TxnProcessor) setPollCancel(c context.CancelFunc) {
	t.mu.Lock()
	t.pollCancel = c
	t.mu.Unlock()
}

// cancelPoll ends the poll in progress, if any.
func (t *TxnProcessor) cancelPoll() {
	t.mu.Lock()
	c := t.pollCancel
	t.mu.Unlock()
	if c != nil {
		c()
	}
}

// noteRebalance is the session's revoke and loss hook: the session's
// in-memory work is to be dropped and its partitions resynced from the
// broker (the session aborts the next transaction anyway).
func (t *TxnProcessor) noteRebalance(gone map[string][]int32) {
	t.resync.Store(true)
	t.mu.Lock()
	w, c := t.work, t.pollCancel
	t.mu.Unlock()
	if c != nil {
		c()
	}
	if w != nil {
		w.forget(gone)
		w.poke()
	}
}

// resyncSession follows a rebalance: End (an abort: no transaction is open
// between transactions) resets the session's revoked state, which would
// abort the next transaction, then settle drops the work and resumes every
// held partition from the broker's offsets.
func (t *TxnProcessor) resyncSession(ctx context.Context, sess *kgo.GroupTransactSession, w *txnWork, ends map[tp]int64) error {
	endCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if _, err := sess.End(endCtx, kgo.TryAbort); err != nil {
		return fmt.Errorf("end after a rebalance: %w", err)
	}
	if ctx.Err() != nil {
		return nil
	}
	_, moved, err := t.settle(sess, w, nil)
	if err != nil {
		return fmt.Errorf("settle after a rebalance: %w", err)
	}
	t.noteMoved(moved, ends)
	t.cfg.logger.Info("rebalance: in-memory work dropped; resuming from the broker's committed offsets", "partitions_moved", len(moved))
	return nil
}

// commitTxn cuts a transaction: the outputs of the records completed since
// the last one and the commits that follow (txnWork.cut), produced and
// committed together; a cut with nothing in it makes no transaction.
func (t *TxnProcessor) commitTxn(ctx context.Context, sess *kgo.GroupTransactSession, w *txnWork, ends map[tp]int64) (stop bool, _ error) {
	x := w.cut()
	if len(x.recs) == 0 && len(x.commits) == 0 {
		return false, nil
	}
	if err := sess.Begin(); err != nil {
		return true, fmt.Errorf("begin transaction: %w", err)
	}
	b := &txnBatch{t: t, cut: x}
	for _, r := range x.recs {
		pctx, done := ctx, b.promise
		if r.dead != nil {
			b.dead = append(b.dead, deadLetter{rec: r.rec, reason: r.dead})
			done = b.deadPromise(r.rec)
			if tr := t.cfg.tracer; tr != nil {
				// The DLQ write's send span, ended by its result; the
				// DLQ record carries its context.
				var fwdDone func(error)
				pctx, fwdDone = tr.Forward(ctx, t.cfg.group, r.rec, t.cfg.dlqTopic, true, r.dead)
				dead := done
				done = func(o *kgo.Record, err error) { fwdDone(err); dead(o, err) }
			}
		}
		if r.dead == nil {
			done = b.outputPromise(r.rec)
		}
		for _, o := range r.outs {
			// Not ctx: a shutdown must not fail records of a
			// transaction that is about to commit.
			b.pending.Add(1)
			sess.Produce(context.WithoutCancel(pctx), o, done)
		}
		b.n++
	}
	if h := t.cfg.hooks.txnProduced; h != nil {
		h(len(x.recs))
	}
	committed, prodErr, err := t.end(ctx, sess, w, b)
	return t.conclude(ctx, sess, w, b, ends, committed, prodErr, err)
}

// txnBatch is one transaction of a session: what it read, what it
// produced, and what failed. The produce promises run on franz-go's
// goroutines: prodErr and deadErr are guarded by mu.
type txnBatch struct {
	t     *TxnProcessor
	abort bool    // end the transaction with an abort
	fatal error   // a fatal group error seen mid-transaction: abort, then return it
	n     int     // records whose outputs it produces
	cut   *txnCut // its records and commits
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
	// refusedBy are the inputs an output of which failed with an error
	// no retry fixes (txn_outputs.go; under t.refusedMu).
	refusedBy []tpo
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

// end ends b's transaction: a commit once every output was acknowledged,
// else an abort. It returns whether it committed, the produce error that
// made it abort (if any), and End's error (the outcome is then unknown).
//
// Ending is not cut short by a shutdown (ctx), so that what was transformed
// commits; but once ctx is cancelled it gets at most DrainTimeout more,
// whatever the brokers do (a record franz-go keeps retrying would otherwise
// hold Run for 30s).
func (t *TxnProcessor) end(ctx context.Context, sess *kgo.GroupTransactSession, w *txnWork, b *txnBatch) (committed bool, prodErr, err error) {
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
	committed, err = sess.End(t.txnCommitCtx(endCtx, w.commitsFn(b.cut.commits)), try)
	if !b.abort {
		t.cfg.metrics.commitLatency(t.cfg.group, time.Since(endStart), err)
		if tr := t.cfg.tracer; tr != nil {
			terr := err
			if terr == nil && !committed {
				terr = errTxnNotCommitted
			}
			tr.Committed(t.cfg.group, b.cut.commitOffsets(), terr)
		}
	}
	return committed, prodErr, err
}

// errTxnNotCommitted is the error the tracer's Committed gets for a
// transaction that tried to commit and was aborted instead (a rebalance).
var errTxnNotCommitted = errors.New("transaction not committed")

// commitOffsets are the commit points x commits: topic -> partition ->
// offset.
func (x *txnCut) commitOffsets() map[string]map[int32]int64 {
	out := make(map[string]map[int32]int64)
	for k, c := range x.commits {
		if out[k.topic] == nil {
			out[k.topic] = make(map[int32]int64)
		}
		out[k.topic][k.partition] = c.offset
	}
	return out
}

// conclude acts on how b's transaction ended: the metrics and counts, the
// dead letters' callbacks, the repair of late commits, and after a
// not-committed end the settling of where to resume (the work is dropped).
// stop reports that the session is to end without an error (a shutdown);
// err that it is to end and be replaced.
func (t *TxnProcessor) conclude(ctx context.Context, sess *kgo.GroupTransactSession, w *txnWork, b *txnBatch, ends map[tp]int64,
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
		t.forgetRefusals(b.cut) // before committed drops the records
		w.committed(b.cut)
		for k, cp := range b.cut.commits {
			m.committed(t.cfg.group, k.topic, k.partition, cp.offset)
			if end, ok := ends[k]; ok {
				m.setLagValue(t.cfg.group, k, end-cp.offset)
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
			if err := t.repairLateCommits(sess, w, nil); err != nil {
				return true, fmt.Errorf("repair committed offsets: %w", err)
			}
		}
		w.admitPending()
		return false, nil
	}
	if !committed {
		t.countRefusals(b)
	}
	if ctx.Err() != nil {
		t.count(false)
		return true, nil // shutting down: where to resume is the next member's OffsetFetch
	}
	// Not committed, and no error: a clean abort, or an outcome franz-go
	// could not confirm and retried as an abort (see settle). Either way,
	// drop the work and resume from what the broker holds.
	landed, moved, serr := t.settle(sess, w, b.cut.commits)
	if serr != nil {
		t.count(false)
		return true, fmt.Errorf("settle transaction (outcome unknown): %w", serr)
	}
	t.noteMoved(moved, ends)
	t.count(landed)
	if landed && !b.abort {
		t.cfg.logger.Warn("transaction reported not committed, but the broker holds its offsets: it committed; resuming after it",
			"records", b.n, "partitions_moved", len(moved))
	} else if prodErr != nil {
		t.cfg.logger.Warn("transaction aborted: an output could not be produced; in-memory work dropped, resuming from the broker's committed offsets",
			"records", b.n, "partitions_moved", len(moved), "error", prodErr)
	} else {
		t.cfg.logger.Info("transaction aborted; in-memory work dropped, resuming from the broker's committed offsets",
			"records", b.n, "partitions_moved", len(moved))
	}
	return false, nil
}

// noteMoved sets the committed-offset and lag series of the partitions a
// settle moved to the broker's offsets.
func (t *TxnProcessor) noteMoved(moved map[tp]int64, ends map[tp]int64) {
	for k, off := range moved {
		t.cfg.metrics.committed(t.cfg.group, k.topic, k.partition, off)
		if end, ok := ends[k]; ok {
			t.cfg.metrics.setLagValue(t.cfg.group, k, end-off)
		}
	}
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

func safeTransform(ctx context.Context, h TxnHandler, r *kgo.Record) (outs []*kgo.Record, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &PanicError{Value: p, Stack: debug.Stack()}
		}
	}()
	return h(ctx, r)
}
