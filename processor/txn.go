package processor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ordercast/ordercast/internal/ctxtime"
)

// TxnHandler transforms one consumed record into the records to produce for
// it. It runs inside a Kafka transaction: its output and the consumed offset
// commit together or not at all. It must not have side effects outside Kafka
// (a database write or an e-mail is not covered by the transaction: use an
// inbox for those). A permanent error sends the record to the group's DLQ
// inside the same transaction; a transient error is retried in place up to
// MaxAttempts, then dead-lettered the same way.
type TxnHandler func(ctx context.Context, r *kgo.Record) ([]*kgo.Record, error)

// TxnProcessor is the exactly-once mode: transactional
// consume-transform-produce on franz-go's GroupTransactSession. Each
// transaction covers the records polled during one CommitInterval (or up to
// MaxInFlight records); their output records and their offsets (sent with the
// group's metadata, KIP-447) are committed atomically. Readers with
// isolation.level=read_committed see every input's output exactly once.
//
// On a rebalance or fencing (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, the
// KIP-890 epoch bump) mid-transaction the session aborts, the rest of the
// poll is discarded and consumption resumes from the committed offsets. An
// error from ending a transaction means the outcome is unknown: the session
// is closed and a new one re-reads the committed offsets instead of
// guessing. A transaction reported "not committed" may have
// committed (a lost EndTxn response): the member settles it (an epoch
// bump) and resumes from the offsets the broker holds, read with
// RequireStable, never from the ones franz-go cached. After a TxnOffsetCommit
// failed on the wire, the offsets are read back after each commit and
// re-committed if a stale copy landed late.
//
// The ordering mode is OrderPartition (records are transformed in offset
// order); Concurrency, retry topics, DeadLetter(false) and RetryTopicPrefix
// do not apply: a record that exhausts MaxAttempts, or fails permanently,
// always goes to the DLQ. A record that cannot be written there stops Run
// with a *DeadLetterError (see there why).
type TxnProcessor struct {
	cfg     cfg
	txnID   string
	handler TxnHandler

	mu    sync.Mutex
	sess  *kgo.GroupTransactSession
	owned map[string]map[int32]bool // partitions held by sess, from its rebalance callbacks
	// paused are the partitions of sess paused by Pause (pause.go).
	paused map[tp]bool

	// lateRisk is when (unix ns) a TxnOffsetCommit last failed on the wire
	// (a copy may still be in the network and land late); see
	// repairLateCommits.
	lateRisk atomic.Int64

	// groupStart is the group's start time (StartOffset(Latest) only, else
	// nil), kept across sessions.
	groupStart *groupStart

	// Committed counts committed transactions; Aborted counts aborted ones.
	statsMu   sync.Mutex
	committed int
	aborted   int
}

// NewTransactional creates the exactly-once processor. transactionalID must
// be unique per member and stable across its restarts (so a restarted member
// fences its zombie predecessor). It takes the options of both modes
// (TxnOpt: Brokers, Group, Topics, MaxAttempts, Backoff, CommitInterval,
// MaxInFlight, Logger, ClientOpts, WithMetrics, TransactionTimeout...);
// those of New alone (WithHandler, WithOrdering, Concurrency, RetryTopics,
// ...) do not compile here: it handles one record at a time per partition,
// in offset order, and retries in place. With WithMetrics the member reports the runtime's series as New's
// members do (consumed, processed, failed, retried, dead-lettered,
// rebalances, committed_offset and lag after each committed transaction,
// commit_duration_seconds for ending one); handler calls of aborted
// transactions are counted too, as they ran.
func NewTransactional(transactionalID string, h TxnHandler, opts ...TxnOpt) (*TxnProcessor, error) {
	c := defaultCfg()
	c.commitInterval = 100 * time.Millisecond
	c.handler = func(context.Context, *kgo.Record) error { return nil }
	c.txn = true
	if err := applyOpts(&c, txnOpts(opts)); err != nil {
		return nil, fmt.Errorf("processor: invalid config: %w", err)
	}
	if transactionalID == "" {
		return nil, errors.New("processor: NewTransactional: transactionalID is required")
	}
	if h == nil {
		return nil, errors.New("processor: NewTransactional: a TxnHandler is required")
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("processor: invalid config: %w", err)
	}
	if c.clientID == "" {
		c.clientID = transactionalID
	}
	c.logger = c.logger.With("group", c.group, "transactional_id", transactionalID)
	c.metrics.initGroup(c.group, c.topics, nil, c.dlqTopic)
	return &TxnProcessor{cfg: c, txnID: transactionalID, handler: h, groupStart: newGroupStart(&c)}, nil
}

// txnOpts is opts as Opts, for applyOpts.
func txnOpts(opts []TxnOpt) []Opt {
	out := make([]Opt, len(opts))
	for i, o := range opts {
		out[i] = o
	}
	return out
}

func (t *TxnProcessor) newSession() (*kgo.GroupTransactSession, error) {
	c := t.cfg
	opts := append(c.memberOpts(), c.clientOpts...) // client.go
	opts = append(append(opts, c.consumerOpts...), c.producerOpts...)
	start := newStarter(&c, nil, t.groupStart)
	opts = append(opts, start.opts()...)
	opts = append(opts, c.groupOpts()...)
	opts = append(opts,
		kgo.TransactionalID(t.txnID),
		kgo.TransactionTimeout(c.txnTimeout),
		kgo.ConsumeTopics(c.topics...),
		kgo.RequireStableFetchOffsets(),
		kgo.RequiredAcks(kgo.AllISRAcks()),
	)
	// The session wraps these two to abort its open transaction first, then
	// calls ours; they only keep Health's view of the assignment.
	opts = append(opts,
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { t.track(m, "assigned") }),
		kgo.OnPartitionsRevoked(func(_ context.Context, cl *kgo.Client, m map[string][]int32) {
			t.track(m, "revoked")
			t.forgetPauses(cl, m)
		}),
		kgo.OnPartitionsLost(func(_ context.Context, cl *kgo.Client, m map[string][]int32) {
			t.track(m, "lost")
			t.forgetPauses(cl, m)
		}),
	)
	opts = append(opts, kgo.WithHooks(lateCommitHook{t}))
	sess, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		return nil, err
	}
	start.setClient(sess.Client())
	return sess, nil
}

// Stats returns how many transactions committed and aborted so far.
func (t *TxnProcessor) Stats() (committed, aborted int) {
	t.statsMu.Lock()
	defer t.statsMu.Unlock()
	return t.committed, t.aborted
}

// track adds (kind "assigned") or removes ("revoked", "lost") partitions of
// the current session, and counts the rebalance; a removed partition's
// committed_offset and lag series are deleted, as New's members do.
func (t *TxnProcessor) track(m map[string][]int32, kind string) {
	assigned := kind == "assigned"
	if len(m) > 0 {
		t.cfg.metrics.rebalance(t.cfg.group, kind)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.owned == nil {
		t.owned = map[string]map[int32]bool{}
	}
	for topic, ps := range m {
		for _, p := range ps {
			if assigned {
				if t.owned[topic] == nil {
					t.owned[topic] = map[int32]bool{}
				}
				t.owned[topic][p] = true
			} else {
				delete(t.owned[topic], p)
				t.cfg.metrics.forget(t.cfg.group, tp{topic, p})
			}
		}
	}
}

// Health reports the member's group state, the partitions it holds
// ("topic[partition]", sorted) and those paused by Pause. InFlight, Paused,
// Parked and Blocked stay zero: a transaction holds no records between
// polls. Safe for concurrent use.
func (t *TxnProcessor) Health() Health {
	t.mu.Lock()
	sess := t.sess
	h := Health{Group: t.cfg.group, ClientID: t.cfg.clientID, Generation: -1}
	for topic, ps := range t.owned {
		for p := range ps {
			h.Partitions = append(h.Partitions, tp{topic, p}.String())
		}
	}
	for k := range t.paused {
		h.PausedPartitions = append(h.PausedPartitions, k.String())
	}
	t.mu.Unlock()
	slices.Sort(h.Partitions)
	slices.Sort(h.PausedPartitions)
	if sess != nil {
		h.MemberID, h.Generation = sess.Client().GroupMetadata()
		h.Joined = h.MemberID != "" && h.Generation >= 0
	}
	return h
}

// Run consumes and transforms until ctx is cancelled, then ends the open
// transaction (committing what was transformed), leaves the group and
// returns nil. Sessions that fail are replaced after a backoff. It returns a
// *FatalGroupError (after aborting the open transaction) when the broker
// refuses the member's group session for good, an *AuthorizationError
// (after aborting it, or leaving it to the transaction timeout when EndTxn
// itself was refused) when the broker refuses a request for lack of an
// ACL, and an error if a session cannot be created.
func (t *TxnProcessor) Run(ctx context.Context) error {
	failures := 0
	checked := false
	for ctx.Err() == nil {
		// Cleared before the session exists: its client joins the group
		// at once, and its assignment callback may run before Run goes on.
		t.mu.Lock()
		t.owned, t.paused = nil, nil
		t.mu.Unlock()
		sess, err := t.newSession()
		if err != nil {
			return fmt.Errorf("processor: transactional session: %w", err)
		}
		if !checked {
			// Before the first poll: a missing DLQ would abort every
			// transaction holding a dead-lettered record.
			if err := ensureTopics(ctx, sess.Client(), &t.cfg, []string{t.cfg.dlqTopic}); err != nil {
				sess.Close()
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			checked = true
		}
		t.mu.Lock()
		t.sess = sess
		t.mu.Unlock()
		err = t.runSession(ctx, sess)
		sess.Close()
		t.mu.Lock()
		t.owned, t.paused = nil, nil
		t.mu.Unlock()
		if err == nil {
			return nil
		}
		if fe := (*FatalGroupError)(nil); errors.As(err, &fe) {
			return err
		}
		if de := (*DeadLetterError)(nil); errors.As(err, &de) {
			return err
		}
		if ae := t.txnAuthzError(err, "transaction", nil); ae != nil {
			t.cfg.logger.Error("authorization refused; stopping the member", "right", ae.Right(), "error", err)
			return ae
		}
		failures++
		t.cfg.logger.Error("transactional session failed; restarting from committed offsets", "error", err)
		ctxtime.Sleep(ctx, backoff(failures, t.cfg.backoffMin, t.cfg.backoffMax))
	}
	return nil
}

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
		if err != nil {
			b.mu.Lock()
			if b.deadErr == nil {
				b.deadErr = &DeadLetterError{Topic: src.Topic, Partition: src.Partition, Offset: src.Offset, DLQ: r.Topic, Err: err}
			}
			b.mu.Unlock()
		}
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
			outs, reason, err := t.transform(ctx, r)
			if err != nil { // shutdown mid-record
				b.abort = true
				return
			}
			done := b.promise
			if reason != nil {
				b.dead = append(b.dead, deadLetter{r, reason})
				done = b.deadPromise(r)
			}
			for _, o := range outs {
				// Not ctx: a shutdown must not fail records of a
				// transaction that is about to commit.
				b.pending.Add(1)
				sess.Produce(context.WithoutCancel(ctx), o, done)
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
	}
	return committed, prodErr, err
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

func (t *TxnProcessor) count(committed bool) {
	t.statsMu.Lock()
	defer t.statsMu.Unlock()
	if committed {
		t.committed++
	} else {
		t.aborted++
	}
}

// settle runs after End returned committed=false with no error, and moves the
// session's consume positions to the offsets the broker holds.
//
// Which End results are certain (franz-go v1.22.3, kgo/txn.go):
//   - committed=true, err=nil: the EndTxn(commit) was answered without error
//     (a retry of a commit whose first response was lost is answered as a
//     success too: Kafka and kfake replay it). The offsets franz-go now
//     caches are the broker's.
//   - err != nil: uncertain; Run replaces the session (the new one's
//     InitProducerID settles the transaction, its OffsetFetch waits for it).
//   - committed=false, err=nil: NOT certain. It is a clean abort (a revoke
//     or loss during the transaction, an abortable TxnOffsetCommit error, an
//     abort we asked for), or an EndTxn(commit) whose outcome franz-go could
//     not confirm: a lost response whose retry was answered with
//     UNKNOWN_SERVER_ERROR or TRANSACTION_ABORTABLE (or OPERATION_NOT_ATTEMPTED)
//     is retried as an abort, which a broker that already committed ignores.
//     franz-go then rewinds to the offsets it cached before the
//     transaction, and re-transforming from there writes the committed
//     transaction's outputs twice (S16). End's result does not say which of
//     the two happened.
//
// So settle treats every not-committed End alike, inside the session:
//
//  1. Settle the transaction's fate. After an unconfirmed EndTxn franz-go
//     marks the producer ID for reloading (kgo.EndTransaction's
//     failProducerID); ProducerID performs that reload now: InitProducerID
//     at the old epoch bumps it, which completes a prepared commit or aborts
//     what was ongoing, and fences any EndTxn or TxnOffsetCommit of the old
//     epoch still in the network. After a clean abort nothing is pending and
//     ProducerID returns the cached ID. (Begin would reload too, but only
//     after the next poll, with our positions already chosen.)
//  2. Read the group's committed offsets with RequireStable (KIP-447): the
//     broker answers UNSTABLE_OFFSET_COMMIT while any transactional offsets
//     of the group are pending, so a stable answer includes this
//     transaction's offsets if and only if it committed.
//  3. Move forward only: a partition the member consumes whose broker offset
//     is past the one franz-go rewound to is set to the broker's (SetOffsets,
//     which also makes the next transaction commit that offset, so
//     franz-go's cache is corrected by the next commit). Moving forward to an
//     offset the group committed is always safe: a transaction commits its
//     inputs' offsets and outputs atomically, so every input below it has its
//     output. Moving back is never done: an offset below the cached one
//     cannot come from this transaction, and rewinding to it would re-write
//     committed outputs.
//
// Why not replace the session instead (close it, start one with the same
// transactional ID: also safe)? Leaving and rejoining is a rebalance for
// every member of the group; most not-committed Ends are aborts caused by a
// rebalance, and answering each with another rebalance would chain them
// (each member's open transaction aborts on the next one). Settling in the
// session costs an OffsetFetch per abort and no rebalance. A settle that
// fails (a fenced producer, the offsets never stabilising within the
// transaction timeout) falls back to replacing the session.
//
// It returns whether the transaction's offsets landed (every partition of
// last is at or past its offset+1 on the broker) and the partitions moved,
// with their new offsets.
func (t *TxnProcessor) settle(sess *kgo.GroupTransactSession, last map[tp]int64) (landed bool, moved map[tp]int64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), t.cfg.txnTimeout+30*time.Second)
	defer cancel()
	cl := sess.Client()
	if _, _, err := cl.ProducerID(ctx); err != nil {
		return false, nil, fmt.Errorf("reload producer id: %w", err)
	}
	held, err := t.stableOffsets(ctx, cl)
	if err != nil {
		return false, nil, err
	}
	landed = len(last) > 0
	for k, off := range last {
		if held[k] < off+1 {
			landed = false
		}
	}
	cached := cl.CommittedOffsets()
	t.mu.Lock()
	owned := t.owned
	set := map[string]map[int32]kgo.EpochOffset{}
	for k, off := range held {
		if !owned[k.topic][k.partition] {
			continue
		}
		if c, ok := cached[k.topic][k.partition]; ok && c.Offset >= off {
			continue
		}
		if set[k.topic] == nil {
			set[k.topic] = map[int32]kgo.EpochOffset{}
		}
		set[k.topic][k.partition] = kgo.EpochOffset{Epoch: -1, Offset: off}
		if moved == nil {
			moved = map[tp]int64{}
		}
		moved[k] = off
	}
	t.mu.Unlock()
	cl.SetOffsets(set)
	if err := t.repairLateCommits(sess, held); err != nil {
		return landed, moved, fmt.Errorf("repair committed offsets: %w", err)
	}
	return landed, moved, nil
}

// lateCommitHook notes a TxnOffsetCommit that failed on the wire (a write
// error, or no response within the request timeout): the broker may still
// receive and apply it later.
type lateCommitHook struct{ t *TxnProcessor }

func (h lateCommitHook) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if key == int16(kmsg.TxnOffsetCommit) && e2e.Err() != nil {
		h.t.lateRisk.Store(time.Now().UnixNano())
	}
}

// lateRiskWindow is how long after a TxnOffsetCommit failed on the wire the
// runtime reads the group's offsets back after each commit. A copy held in
// the network longer than this is not defended against; twice the
// transaction timeout is far above a broker's request queue and the usual
// network hold (the client's own request timeout, 10s plus the request's).
func (t *TxnProcessor) lateRiskWindow() time.Duration { return max(2*t.cfg.txnTimeout, time.Minute) }

func (t *TxnProcessor) atLateRisk() bool {
	at := t.lateRisk.Load()
	return at != 0 && time.Since(time.Unix(0, at)) < t.lateRiskWindow()
}

// repairLateCommits re-commits, in a transaction of its own, the offsets of
// partitions this member consumes whose offset on the broker is below the
// one the member committed (franz-go's cache, updated only by a commit
// confirmed by EndTxn). held is the broker's offsets if the caller just read
// them; nil reads them (RequireStable).
//
// Why a stale transactional commit can land (S15, exactly-once half): a
// TxnOffsetCommit the client gave up on and re-sent can reach the broker
// later. Under KIP-890 part 2 (Kafka 4.x with transaction.version 2, kfake)
// every EndTxn bumps the producer epoch, so a copy from an ended transaction
// is refused (PRODUCER_FENCED). Below it (transaction.version 1, Kafka
// before 4.0) the epoch is the same for every transaction: a copy applied
// inside a later transaction, after that transaction's own TxnOffsetCommit,
// replaces its pending offsets and is committed with it; the group's offset
// ends below what the member completed, and nothing else commits again
// until new input arrives. Outside a transaction the broker refuses it
// (INVALID_TXN_STATE). A late copy can therefore only take effect with a
// commit of ours, so reading the offsets back after each commit, for a
// while after a TxnOffsetCommit failed on the wire (lateRiskWindow), finds
// every regression it causes; the repair needs no new input. The cost when
// nothing failed on the wire is nil.
func (t *TxnProcessor) repairLateCommits(sess *kgo.GroupTransactSession, held map[tp]int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), t.cfg.txnTimeout+30*time.Second)
	defer cancel()
	cl := sess.Client()
	for round := 0; ; round++ {
		if held == nil {
			var err error
			if held, err = t.stableOffsets(ctx, cl); err != nil {
				return err
			}
		}
		cached := cl.CommittedOffsets()
		want := map[string]map[int32]kgo.EpochOffset{}
		t.mu.Lock()
		for topic, ps := range cached {
			for p, eo := range ps {
				k := tp{topic, p}
				if b, ok := held[k]; t.owned[topic][p] && (!ok || b < eo.Offset) {
					if want[topic] == nil {
						want[topic] = map[int32]kgo.EpochOffset{}
					}
					want[topic][p] = eo
					t.cfg.logger.Warn("the group's committed offset is behind this member's last commit (a stale commit landed late); re-committing it",
						"topic", topic, "partition", p, "broker_offset", b, "committed", eo.Offset)
				}
			}
		}
		t.mu.Unlock()
		if len(want) == 0 {
			return nil
		}
		if round == 3 {
			return fmt.Errorf("offsets still behind after %d re-commits: %v", round, want)
		}
		if err := t.recommit(ctx, sess, want); err != nil {
			return err
		}
		held = nil // read back what the repair did
	}
}

// recommit commits want (topic -> partition -> offset) in a transaction
// without records. franz-go's End sends only the offsets that moved since
// its last commit, so the repaired partitions are added to the
// TxnOffsetCommit it builds (kgo.PreTxnCommitFnContext).
func (t *TxnProcessor) recommit(ctx context.Context, sess *kgo.GroupTransactSession, want map[string]map[int32]kgo.EpochOffset) error {
	ids := map[string][16]byte{} // TxnOffsetCommit v6 names topics by ID (KIP-1319)
	topics := make([]string, 0, len(want))
	for topic := range want {
		topics = append(topics, topic)
	}
	details, err := kadm.NewClient(sess.Client()).ListTopics(ctx, topics...)
	if err != nil {
		return fmt.Errorf("topic ids: %w", err)
	}
	for topic, d := range details {
		ids[topic] = d.ID
	}
	if err := sess.Begin(); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	fn := func(req *kmsg.TxnOffsetCommitRequest) error {
		for topic, ps := range want {
			i := slices.IndexFunc(req.Topics, func(rt kmsg.TxnOffsetCommitRequestTopic) bool { return rt.Topic == topic })
			if i < 0 {
				rt := kmsg.NewTxnOffsetCommitRequestTopic()
				rt.Topic, rt.TopicID = topic, ids[topic]
				req.Topics = append(req.Topics, rt)
				i = len(req.Topics) - 1
			}
			rt := &req.Topics[i]
			for p, eo := range ps {
				if slices.ContainsFunc(rt.Partitions, func(rp kmsg.TxnOffsetCommitRequestTopicPartition) bool { return rp.Partition == p }) {
					continue // franz-go commits a newer position for it
				}
				rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
				rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata = p, eo.Offset, eo.Epoch, &req.MemberID
				rt.Partitions = append(rt.Partitions, rp)
			}
		}
		return nil
	}
	committed, err := sess.End(t.txnCommitCtx(ctx, fn), kgo.TryCommit)
	if err != nil {
		return fmt.Errorf("end: %w", err)
	}
	if !committed {
		// A rebalance aborted it; the caller reads back and retries,
		// and partitions no longer ours are dropped then.
		t.cfg.logger.Info("re-commit of offsets aborted")
	}
	return nil
}

// txnCommitCtx returns ctx for GroupTransactSession.End: the
// TxnOffsetCommit franz-go builds goes through fn (nil: none), then, when
// the member knows the group's start time (StartOffset(Latest)), every
// partition's metadata is set to carry it ("oc1:;t=<ms>", offsetmap.go;
// franz-go's default is the member ID), so that every member and every
// restart finds it. fn runs under franz-go's transaction lock: it must not
// block.
func (t *TxnProcessor) txnCommitCtx(ctx context.Context, fn func(*kmsg.TxnOffsetCommitRequest) error) context.Context {
	if fn == nil && t.groupStart == nil {
		return ctx
	}
	return kgo.PreTxnCommitFnContext(ctx, func(req *kmsg.TxnOffsetCommitRequest) error {
		if fn != nil {
			if err := fn(req); err != nil {
				return err
			}
		}
		if meta := withGroupStart("", t.groupStart.get()); meta != "" {
			for i := range req.Topics {
				for j := range req.Topics[i].Partitions {
					req.Topics[i].Partitions[j].Metadata = &meta
				}
			}
		}
		return nil
	})
}

// stableOffsets returns the group's committed offsets for its topics, read
// with RequireStable; it retries while they are unstable (a transaction of
// the group is pending) until ctx ends.
func (t *TxnProcessor) stableOffsets(ctx context.Context, cl *kgo.Client) (map[tp]int64, error) {
	adm := kadm.NewClient(cl)
	for attempt := 1; ; attempt++ {
		resp, err := adm.FetchOffsets(kadm.RequireStable(ctx), t.cfg.group)
		var held map[tp]int64
		if err == nil {
			held, err = t.ownStable(resp)
		}
		if err == nil {
			return held, nil
		}
		if !errors.Is(err, kerr.UnstableOffsetCommit) && !kerr.IsRetriable(err) {
			return nil, fmt.Errorf("fetch committed offsets: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("fetch committed offsets: still unstable after %d attempts: %w", attempt, err)
		case <-time.After(backoff(attempt, 10*time.Millisecond, 500*time.Millisecond)):
		}
	}
}

// ownStable returns the committed offsets of the group's input topics in
// resp, and the first error among the partitions this member holds. An error
// on another member's partition (UNSTABLE_OFFSET_COMMIT while that member's
// transaction is open: Kafka answers it per partition) is not waited for:
// with several members, some transaction of the group is nearly always open.
func (t *TxnProcessor) ownStable(resp kadm.OffsetResponses) (map[tp]int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	held := map[tp]int64{}
	var first error
	resp.Each(func(o kadm.OffsetResponse) {
		if !slices.Contains(t.cfg.topics, o.Topic) {
			return
		}
		if o.Err != nil {
			if t.owned[o.Topic][o.Partition] && first == nil {
				first = fmt.Errorf("%s[%d]: %w", o.Topic, o.Partition, o.Err)
			}
			return
		}
		if o.At >= 0 {
			held[tp{o.Topic, o.Partition}] = o.At
		}
	})
	return held, first
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
// a permanent error, it returns a DLQ record instead of the output, and the
// handler's last error as dead. It returns err only when ctx ends.
func (t *TxnProcessor) transform(ctx context.Context, r *kgo.Record) (outs []*kgo.Record, dead error, err error) {
	it := &item{rec: r, view: r}
	for {
		hctx, cancel := ctx, context.CancelFunc(func() {})
		if t.cfg.handlerTimeout > 0 {
			hctx, cancel = context.WithTimeout(ctx, t.cfg.handlerTimeout)
		}
		start := time.Now()
		outs, err := safeTransform(hctx, t.handler, r)
		cancel()
		t.cfg.metrics.handled(t.cfg.group, r.Topic, time.Since(start), err)
		if err == nil {
			return outs, nil, nil
		}
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
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
			return []*kgo.Record{{Topic: t.cfg.dlqTopic, Key: r.Key, Value: r.Value, Headers: forwardHeaders(&t.cfg, nil, it)}}, err, nil
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
