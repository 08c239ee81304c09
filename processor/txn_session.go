package processor

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
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
//
// A transaction ends while the next one fills: once its outputs are handed
// to franz-go, its flush, offset commit and EndTxn run on a goroutine of
// their own (txnEnding) while this loop goes on polling and admitting, and
// the workers go on transforming. The records completed meanwhile wait for
// the next transaction, which begins only after this one has ended and been
// concluded (Kafka allows one open transaction per producer). Everything
// else that touches the transaction state, the consume positions or the
// group's offsets (beginning a transaction, a resync after a rebalance,
// reading the offsets of new partitions, shutting down) first waits for the
// end in flight and concludes it. An end that does not commit drops the
// work (conclude, settle): the records polled while it ran go with it and
// are polled again from the broker's offsets.
//
// franz-go documents PollRecords concurrently with GroupTransactSession.End
// as invalid, because End's bookkeeping assumes no poll moves the consume
// positions meanwhile. This loop relies on what makes it safe here (franz-go
// v1.22): End and a poll take the group's lock for their updates of the
// uncommitted offsets, the offsets End commits are the runtime's own commit
// points (txnCommitCtx rewrites the TxnOffsetCommit), and after an end that
// does not commit the runtime's settle, not End's rewind, sets every
// position from the broker's offsets. TestTxnPollsWhileEnding,
// TestTxnRevokeWhileEnding and TestTxnShutdownWhileEnding hold an end open
// and check each case; rerun them (with -race) on every franz-go upgrade.
func (t *TxnProcessor) runSession(ctx context.Context, sess *kgo.GroupTransactSession) (err error) {
	w := newTxnWork(t, ctx)
	t.mu.Lock()
	t.work = w
	t.mu.Unlock()
	ends := map[tp]int64{} // last stable offset per partition, from the latest fetch
	var ending *txnEnding  // the transaction being ended, if any
	// join waits for the end in flight, if any, and concludes it.
	join := func() (stop bool, err error) {
		if ending == nil {
			return false, nil
		}
		e := ending
		ending = nil
		<-e.done
		return t.conclude(ctx, sess, w, e.b, ends, e.committed, e.prodErr, e.err)
	}
	defer func() {
		// An error return leaves no end behind: the session is closed
		// next, and a transaction must not be ended on a closed client.
		if _, jerr := join(); err == nil {
			err = jerr
		}
		w.stop(t.cfg.drainTimeout)
		t.mu.Lock()
		t.work = nil
		t.mu.Unlock()
	}()
	next := time.Now().Add(t.cfg.commitInterval)
	for {
		if ctx.Err() != nil {
			// Handlers are cancelled (their results discarded); what
			// completed commits.
			if stop, err := join(); stop || err != nil {
				return err
			}
			_, err := t.commitTxn(ctx, sess, w, ends)
			return err
		}
		if t.resync.Load() {
			if stop, err := join(); stop || err != nil {
				return err
			}
			if t.resync.Swap(false) {
				if err := t.resyncSession(ctx, sess, w, ends); err != nil {
					return err
				}
			}
			continue
		}
		if ending.ended() {
			if stop, err := join(); stop || err != nil {
				return err
			}
			continue
		}
		now := time.Now()
		room, due := w.room(), w.cutDue()
		timeDue := !now.Before(next)
		if ending != nil && due {
			// Half of MaxInFlight completed: the next transaction takes
			// them once this one has ended, and the room left is kept
			// for the one after.
			select {
			case <-ending.done:
			case <-ctx.Done():
			}
			continue
		}
		if ending == nil && (timeDue || due) {
			next = now.Add(t.cfg.commitInterval)
			e, stop, err := t.beginTxn(ctx, sess, w)
			if stop || err != nil {
				return err
			}
			if e != nil {
				ending = e
				go func() {
					e.committed, e.prodErr, e.err = t.end(ctx, sess, w, e.b)
					close(e.done)
					w.poke() // the loop concludes it
					t.cancelPoll()
				}()
			}
			continue
		}
		// Here no transaction is due, or one is due by time while the
		// previous one ends: the wait or poll lasts until the interval
		// ends, or in the latter case until the end completes (it wakes
		// the loop and cancels the poll).
		if room == 0 {
			// MaxInFlight held: no poll until records are committed.
			t.waitRoom(ctx, w, ending, next.Sub(now), timeDue)
			continue
		}
		pctx, cancel := context.WithCancel(ctx)
		if !timeDue {
			pctx, cancel = context.WithDeadline(ctx, next)
		}
		t.setPollCancel(cancel)
		if w.cutDue() || ending.ended() {
			cancel() // completed or ended while the cancel was not set yet
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
			// The group's offsets are read with no transaction of this
			// member pending, and its records go to the work as it is
			// after the end (a drop discards them).
			gen := w.generation()
			if stop, err := join(); stop || err != nil {
				return err
			}
			if t.resync.Load() || w.generation() != gen {
				continue // the end dropped the work: these records are polled again
			}
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

// waitRoom waits, with MaxInFlight held, for a completion to wake the loop
// (w.wake, poked by a completion that makes a cut due and by an end that
// completes), for the end in flight (nil: none) to complete, for ctx, and,
// unless timeDue, for d (the rest of the commit interval).
func (t *TxnProcessor) waitRoom(ctx context.Context, w *txnWork, ending *txnEnding, d time.Duration, timeDue bool) {
	var deadline <-chan time.Time
	if !timeDue {
		timer := time.NewTimer(d)
		defer timer.Stop()
		deadline = timer.C
	}
	select {
	case <-w.wake:
	case <-deadline:
	case <-ctx.Done():
	case <-ending.doneCh():
	}
}

// txnEnding is a transaction being ended on a goroutine of its own
// (runSession): its batch, and once done is closed, how End returned.
type txnEnding struct {
	b         *txnBatch
	done      chan struct{}
	committed bool
	prodErr   error
	err       error
}

// ended reports whether e (nil: none) has ended.
func (e *txnEnding) ended() bool {
	if e == nil {
		return false
	}
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// doneCh is e's done channel; nil (blocking for ever in a select) when e
// is nil.
func (e *txnEnding) doneCh() <-chan struct{} {
	if e == nil {
		return nil
	}
	return e.done
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

// commitTxn cuts a transaction and ends it (beginTxn, end, conclude), all
// on the calling goroutine; a cut with nothing in it makes no transaction.
func (t *TxnProcessor) commitTxn(ctx context.Context, sess *kgo.GroupTransactSession, w *txnWork, ends map[tp]int64) (stop bool, _ error) {
	e, stop, err := t.beginTxn(ctx, sess, w)
	if e == nil || stop || err != nil {
		return stop, err
	}
	committed, prodErr, err := t.end(ctx, sess, w, e.b)
	return t.conclude(ctx, sess, w, e.b, ends, committed, prodErr, err)
}

// beginTxn cuts a transaction: the outputs of the records completed since
// the last one and the commits that follow (txnWork.cut), handed to
// franz-go in a new transaction, to be ended by end. A cut with nothing in
// it makes no transaction (nil). No other transaction of sess may be open.
func (t *TxnProcessor) beginTxn(ctx context.Context, sess *kgo.GroupTransactSession, w *txnWork) (_ *txnEnding, stop bool, _ error) {
	x := w.cut()
	if x.n == 0 && len(x.commits) == 0 {
		return nil, false, nil
	}
	if err := sess.Begin(); err != nil {
		return nil, true, fmt.Errorf("begin transaction: %w", err)
	}
	b := &txnBatch{t: t, cut: x, n: x.n}
	for _, r := range x.recs {
		if r.dead == nil && len(r.outs) == 0 {
			continue // nothing to produce: no promise to make
		}
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
		// Not ctx: a shutdown must not fail records of a transaction
		// that is about to commit.
		pctx = context.WithoutCancel(pctx)
		for _, o := range r.outs {
			b.pending.Add(1)
			b.produced++
			sess.Produce(pctx, o, done)
		}
	}
	if h := t.cfg.hooks.txnProduced; h != nil {
		h(x.n)
	}
	return &txnEnding{b: b, done: make(chan struct{})}, false, nil
}

// txnBatch is one transaction of a session: what it read, what it
// produced, and what failed. The produce promises run on franz-go's
// goroutines: prodErr and deadErr are guarded by mu.
type txnBatch struct {
	t     *TxnProcessor
	abort bool  // end the transaction with an abort
	fatal error // a fatal group error seen mid-transaction: abort, then return it
	n     int   // records whose outputs it produces
	// produced counts the records handed to franz-go (outputs and DLQ
	// records).
	produced int
	cut      *txnCut // its records and commits
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
	if h := t.cfg.hooks.txnEnding; h != nil {
		h(b.n)
	}
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
	} else if b.produced == 0 {
		t.awaitPreviousEnd(endCtx, sess.Client())
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

// awaitPreviousEnd waits, before a transaction that produced no record
// commits its offsets, until the transaction coordinator has completed this
// member's previous transaction (its markers written): a TxnOffsetCommit
// that reaches the group coordinator before that is answered
// CONCURRENT_TRANSACTIONS (KIP-890 part 2: it adds the offsets partition to
// the transaction itself), which franz-go does not retry but answers by
// aborting the transaction, and the work of the whole transaction is
// redone. A produce joins the transaction only once the previous one
// completed (the broker and franz-go retry it), so a transaction with
// records is never in that window when it commits its offsets. It asks the
// coordinator with DescribeTransactions (allowed by the WRITE right on the
// transactional ID) every millisecond or so while the state is a Prepare
// one, for at most a second; a broker that cannot answer (an old version, no
// right) is not asked again, and the commit goes ahead as before.
func (t *TxnProcessor) awaitPreviousEnd(ctx context.Context, cl *kgo.Client) {
	if t.describeTxnOff.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	for attempt := 1; ; attempt++ {
		req := kmsg.NewPtrDescribeTransactionsRequest()
		req.TransactionalIDs = []string{t.txnID}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			if ctx.Err() == nil && !kerr.IsRetriable(err) {
				t.describeTxnOff.Store(true) // not supported: not asked again
			}
			return
		}
		if len(resp.TransactionStates) != 1 {
			return
		}
		st := resp.TransactionStates[0]
		if err := kerr.ErrorForCode(st.ErrorCode); err != nil {
			if !kerr.IsRetriable(err) {
				t.describeTxnOff.Store(true) // refused (no right): not asked again
			}
			return
		}
		if !strings.HasPrefix(st.State, "Prepare") {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff(attempt, 500*time.Microsecond, 5*time.Millisecond)):
		}
	}
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
