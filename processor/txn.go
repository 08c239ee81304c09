package processor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/txnretry"

	"github.com/ordercast/ordercast/internal/ctxtime"
)

// The exactly-once mode: TxnProcessor, its construction and options, the
// session's client, Run (sessions replaced after a failure), Stats and
// Health. The transaction loop is in txn_session.go, the committed offsets in
// txn_commit.go.

// TxnHandler transforms one consumed record into the records to produce for
// it. Its outputs are produced inside the Kafka transaction that commits the
// record's offset: they and the offset commit together or not at all. It
// must not have side effects outside Kafka (a database write or an e-mail is
// not covered by the transaction, and a handler whose result was discarded
// by an abort runs again: use an inbox for those). A permanent error sends
// the record to the group's DLQ inside the transaction that commits it; a
// transient error is retried in the record's lane up to MaxAttempts (after
// Backoff each time), then dead-lettered the same way. Calls for different
// lanes run concurrently (see TxnProcessor); ctx is cancelled on shutdown,
// on an abort or rebalance that drops the record, and after HandlerTimeout.
//
// Outputs go to their Topic (the client's DefaultProduceTopic when empty)
// and to the partition the client's partitioner picks: franz-go's default
// hashes the key as the Java producer does (murmur2), so the outputs of one
// key go to one partition in the order its lane produced them; a record's
// Partition field is ignored unless ClientOpts sets
// kgo.RecordPartitioner(kgo.ManualPartitioner()).
type TxnHandler func(ctx context.Context, r *kgo.Record) ([]*kgo.Record, error)

// TxnProcessor is the exactly-once mode: transactional
// consume-transform-produce on franz-go's GroupTransactSession (KIP-98,
// KIP-447). Readers with isolation.level=read_committed see every input's
// output exactly once.
//
// Concurrency. Records are transformed in lanes: one per partition
// (OrderPartition, the default) or one per key within a partition
// (OrderKey; a null key is a lane of its own). A lane runs its records one
// at a time in offset order; up to Concurrency handler calls run at once
// across lanes. A transient failure backs off inside its lane only: the
// lane is set aside for Backoff (holding no Concurrency slot) while the other
// lanes of the partition and the other partitions go on, and after
// MaxAttempts, or at once on a permanent error, the record's result is a DLQ
// record.
//
// Transactions are cut by time, not by work: every CommitInterval (earlier
// when half of MaxInFlight has completed, or an eighth when MaxInFlight is
// full) the session begins a transaction, produces the outputs (and DLQ
// records) of the records completed since the last one, commits the
// offsets and ends it. Ending it (the flush, the offset commit, EndTxn) runs
// while the member goes on polling and transforming; the next transaction
// begins once it has ended (with half of MaxInFlight completed, polling
// waits for that). Records still running or backing off carry over in
// memory to a later transaction; their outputs are produced only in the
// transaction that commits them. The committed offset of a partition is its
// first record not yet completed; the records completed above it travel in
// the commit's metadata as the completed-offsets map (as New's, budget
// CommitMetadataMaxBytes: past it the partition admits no more records until
// its commit point moves). MaxInFlight bounds the records held (running,
// waiting, completed and not yet committed): the session polls no more
// while it is full.
//
// Resuming. A partition starts from the group's committed offset read with
// RequireStable and skips the offsets its map says are completed (their
// outputs were committed with it). After an abort (a produce error, a
// rebalance, fencing: PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, the KIP-890
// epoch bump) or a revoke or loss, the member drops all its in-memory work
// (results not committed are discarded and their records redone: a
// handler has no side effects outside Kafka), settles the transaction
// (the producer ID is reloaded, an epoch bump, and the offsets read with
// RequireStable) and sets each partition it holds to exactly the broker's
// offset, back or forward, with its map's offsets skipped. A transaction
// reported "not committed" may have committed (a lost EndTxn response): the
// stable read tells, and the member resumes after it. An error from ending
// a transaction means the outcome is unknown: the session is closed and a
// new one re-reads the committed offsets instead of guessing. After a
// TxnOffsetCommit failed on the wire, the offsets are read back after each
// commit and compared with what this member last committed (offset and
// metadata); a stale copy that landed late is re-committed.
//
// WithOrdering takes OrderPartition and OrderKey (OrderUnordered is refused
// at NewTransactional); RetryTopics, RetryTopicPrefix, DeadLetter,
// WithHandler and BlockKeys are New's alone (they are not TxnOpts, so
// NewTransactional does not compile with them): a record that exhausts
// MaxAttempts, or fails permanently, always goes to the DLQ. A record that
// cannot be written there stops Run with a *DeadLetterError (see there why).
type TxnProcessor struct {
	cfg     cfg
	txnID   string
	handler TxnHandler

	mu    sync.Mutex
	ran   bool // Run was called: a second call returns ErrClosed
	sess  *kgo.GroupTransactSession
	owned map[string]map[int32]bool // partitions held by sess, from its rebalance callbacks
	// paused are the partitions of sess paused by Pause (pause.go).
	paused map[tp]bool
	// work is sess's records in memory (txn_work.go); pollCancel ends the
	// poll in progress (a rebalance: noteRebalance).
	work       *txnWork
	pollCancel context.CancelFunc
	// resync is set by a revoke or a loss: the session loop drops its
	// work and resumes from the broker's offsets.
	resync atomic.Bool

	// lateRisk is when (unix ns) a TxnOffsetCommit last failed on the wire
	// (a copy may still be in the network and land late); see
	// repairLateCommits.
	lateRisk atomic.Int64
	// describeTxnOff is set once the brokers refused a
	// DescribeTransactions (awaitPreviousEnd): it is not sent again.
	describeTxnOff atomic.Bool

	// defaultTopic is the session client's kgo.DefaultProduceTopic (set
	// by newSession): an output with no Topic goes there.
	defaultTopic atomic.Pointer[string]
	// refused maps an input record (topic, partition, offset) to the
	// transactions aborted by one of its outputs with an error no retry
	// fixes (a missing topic, a record over the size limit): after
	// MaxAttempts of them the input is dead-lettered instead of aborting
	// every transaction again (txn_outputs.go).
	refusedMu sync.Mutex
	refused   map[tpo]*refusal
	refusedN  atomic.Int32 // len(refused), read without the lock on every attempt

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
// MaxInFlight, WithOrdering, Concurrency, CommitMetadataMaxBytes, Logger,
// ClientOpts, WithMetrics, TransactionTimeout...); those of New alone
// (WithHandler, RetryTopics, RetryTopicPrefix, DeadLetter, BlockKeys, ...)
// do not compile here. It returns an error for OrderUnordered, and for
// OrderKey with CommitMetadataMaxBytes(0) (without the map a new owner would
// produce again the outputs of records committed above the commit point).
// With WithMetrics the member reports the runtime's series as New's
// members do (consumed, processed, failed, retried, dead-lettered,
// rebalances, committed_offset and lag after each committed transaction,
// commit_duration_seconds for ending one); handler calls whose results an
// abort discarded are counted too, as they ran.
func NewTransactional(transactionalID string, h TxnHandler, opts ...TxnOpt) (*TxnProcessor, error) {
	c := defaultCfg()
	c.commitInterval = 100 * time.Millisecond
	c.maxRecords = DefaultTxnMaxInFlight // a transaction holds its records until it commits
	c.handler = func(context.Context, *kgo.Record) error { return nil }
	c.txn = true
	if err := applyOpts(&c, txnOpts(opts)); err != nil {
		return nil, fmt.Errorf("processor: invalid config: %w", err)
	}
	var errs []error
	if transactionalID == "" {
		errs = append(errs, errors.New("NewTransactional: transactionalID is required"))
	}
	if h == nil {
		errs = append(errs, errors.New("NewTransactional: a TxnHandler is required"))
	}
	// Every invalid value, in one error.
	if err := errors.Join(append(errs, c.validate(), c.validateTxn(), c.adoptTxnBatch())...); err != nil {
		return nil, fmt.Errorf("processor: invalid config: %w", err)
	}
	if c.clientID == "" {
		c.clientID = transactionalID
	}
	c.logger = c.logger.With("group", c.group, "transactional_id", transactionalID)
	c.metrics.initGroup(c.group, c.topics, nil, c.dlqTopic)
	return &TxnProcessor{cfg: c, txnID: transactionalID, handler: h, groupStart: newGroupStart(&c)}, nil
}

// validateTxn refuses what the exactly-once mode cannot do: OrderUnordered
// (a lane is a partition or a key of one), and with OrderKey a disabled
// completed-offsets map (without it a new owner would produce again the
// outputs of records committed above the commit point).
func (c *cfg) validateTxn() error {
	var errs []error
	if c.ordering == OrderUnordered {
		errs = append(errs, errors.New("WithOrdering: OrderUnordered is not available with NewTransactional, want OrderPartition or OrderKey"))
	}
	if c.ordering == OrderKey && c.metaMaxBytes == 0 {
		errs = append(errs, errors.New("CommitMetadataMaxBytes: 0 with OrderKey, want >= 64: the exactly-once mode needs the completed-offsets map to skip records committed above the commit point"))
	}
	return errors.Join(errs...)
}

// txnOpts is opts as Opts, for applyOpts.
func txnOpts(opts []TxnOpt) []Opt {
	out := make([]Opt, len(opts))
	for i, o := range opts {
		out[i] = o
	}
	return out
}

// newSession builds the member's transactional session: memberOpts
// (client.go), the transactional retry options (txnretry), the user's ClientOpts, ConsumerOpts and ProducerOpts, the
// start position, groupOpts (client.go), then the transactional options and
// the rebalance hooks that keep Health's view of the assignment.
func (t *TxnProcessor) newSession() (*kgo.GroupTransactSession, error) {
	c := t.cfg
	// Retries of this client back off from 20 ms, and its metadata is
	// refreshed up to every 100 ms (txnretry): a transaction's first
	// produce after the previous one's end is often refused with
	// CONCURRENT_TRANSACTIONS, and waits for both. Before the user's
	// ClientOpts, which may change them.
	opts := append(c.memberOpts(), txnretry.Opts()...)
	opts = append(opts, c.clientOpts...) // client.go
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
			if len(m) > 0 {
				t.noteRebalance(m)
			}
		}),
		kgo.OnPartitionsLost(func(_ context.Context, cl *kgo.Client, m map[string][]int32) {
			t.track(m, "lost")
			t.forgetPauses(cl, m)
			t.noteRebalance(m)
		}),
	)
	opts = append(opts, kgo.WithHooks(lateCommitHook{t}))
	sess, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		return nil, err
	}
	start.setClient(sess.Client())
	dt, _ := sess.Client().OptValue(kgo.DefaultProduceTopic).(string)
	t.defaultTopic.Store(&dt)
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
// ("topic[partition]", sorted) and those paused by Pause. InFlight counts
// the records held (running, waiting or backing off, and completed but not
// yet committed); Paused, Parked and Blocked stay zero. Safe for concurrent
// use.
func (t *TxnProcessor) Health() Health {
	t.mu.Lock()
	sess := t.sess
	h := Health{Group: t.cfg.group, ClientID: t.cfg.clientID, Generation: -1}
	w := t.work
	for topic, ps := range t.owned {
		for p := range ps {
			h.Partitions = append(h.Partitions, tp{topic, p}.String())
		}
	}
	for k := range t.paused {
		h.PausedPartitions = append(h.PausedPartitions, k.String())
	}
	t.mu.Unlock()
	if w != nil {
		h.InFlight = w.held()
	}
	slices.Sort(h.Partitions)
	slices.Sort(h.PausedPartitions)
	if sess != nil {
		h.MemberID, h.Generation = sess.Client().GroupMetadata()
		h.Joined = h.MemberID != "" && h.Generation >= 0
	}
	return h
}

// Run consumes and transforms until ctx is cancelled, then cancels the
// handlers still running (their results are discarded), commits what
// completed in a last transaction, leaves the group and returns nil. Sessions that fail are replaced after a backoff. It returns a
// *FatalGroupError (after aborting the open transaction) when the broker
// refuses the member's group session for good, an *AuthorizationError
// (after aborting it, or leaving it to the transaction timeout when EndTxn
// itself was refused) when the broker refuses a request for lack of an
// ACL, and an error if a session cannot be created. A TxnProcessor runs
// once: a second call returns ErrClosed at once.
//
// An output the TxnHandler returns that cannot be produced fails an
// attempt of its input, so after MaxAttempts the input goes to the DLQ
// with the reason instead of aborting transactions for ever: a nil record,
// or one with no Topic, fails the attempt at once (retried in place with
// Backoff); an output the brokers or the client refuse with an error no
// retry fixes (a missing topic, a record over the producer's or the
// topic's size limit: kerr.UnknownTopicOrPartition, MessageTooLarge,
// RecordListTooLarge, InvalidTopicException, InvalidRecord) aborts its
// transaction (logged at WARN with the error), and the input's
// MaxAttempts-th such abort dead-letters it, permanently, without calling
// the handler again.
func (t *TxnProcessor) Run(ctx context.Context) error {
	t.mu.Lock()
	if t.ran {
		t.mu.Unlock()
		return ErrClosed
	}
	t.ran = true
	t.mu.Unlock()
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
		if errors.Is(err, kerr.InvalidTransactionTimeout) {
			// No new session gets a different answer.
			return fmt.Errorf("processor: TransactionTimeout %v: refused by the brokers, over their transaction.max.timeout.ms (default 15m): %w", t.cfg.txnTimeout, err)
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

// count counts one transaction as committed or aborted (Stats).
func (t *TxnProcessor) count(committed bool) {
	t.statsMu.Lock()
	defer t.statsMu.Unlock()
	if committed {
		t.committed++
	} else {
		t.aborted++
	}
}
