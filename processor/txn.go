package processor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
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
// poll is discarded and consumption resumes from the committed offsets
// (SCENARIOS S12). An error from ending a transaction means the outcome is
// unknown: the session is closed and a new one re-reads the committed offsets
// instead of guessing (S13).
//
// The ordering mode is OrderPartition (records are transformed in offset
// order); Concurrency and retry topics do not apply.
type TxnProcessor struct {
	cfg     cfg
	txnID   string
	handler TxnHandler

	mu    sync.Mutex
	sess  *kgo.GroupTransactSession
	owned map[string]map[int32]bool // partitions held by sess, from its rebalance callbacks

	// Committed counts committed transactions; Aborted counts aborted ones.
	statsMu   sync.Mutex
	committed int
	aborted   int
}

// NewTransactional creates the exactly-once processor. transactionalID must
// be unique per member and stable across its restarts (so a restarted member
// fences its zombie predecessor). The same options as New apply (Brokers,
// Group, Topics, MaxAttempts, Backoff, CommitInterval, MaxInFlight, Logger,
// ClientOpts, WithMetrics...) plus TransactionTimeout; WithHandler is not
// used. With WithMetrics the member reports the runtime's series as New's
// members do (consumed, processed, failed, retried, dead-lettered,
// rebalances, committed_offset and lag after each committed transaction,
// commit_duration_seconds for ending one); handler calls of aborted
// transactions are counted too, as they ran.
func NewTransactional(transactionalID string, h TxnHandler, opts ...Opt) (*TxnProcessor, error) {
	c := defaultCfg()
	c.commitInterval = 100 * time.Millisecond
	c.handler = func(context.Context, *kgo.Record) error { return nil }
	for _, o := range opts {
		o.apply(&c)
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
	c.metrics.initGroup(c.group, c.topics, nil, true)
	return &TxnProcessor{cfg: c, txnID: transactionalID, handler: h}, nil
}

func (t *TxnProcessor) newSession() (*kgo.GroupTransactSession, error) {
	c := t.cfg
	opts := append([]kgo.Opt{}, c.clientOpts...)
	start := newStarter(&c, nil)
	opts = append(opts, start.opts()...)
	opts = append(opts,
		kgo.SeedBrokers(c.brokers...),
		kgo.ClientID(c.clientID),
		kgo.TransactionalID(t.txnID),
		kgo.TransactionTimeout(c.txnTimeout),
		kgo.ConsumerGroup(c.group),
		kgo.ConsumeTopics(c.topics...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.KeepControlRecords(), // see New: lets the committed offset pass a final transaction marker
		kgo.SessionTimeout(c.sessionTimeout),
		kgo.RebalanceTimeout(c.rebalanceTO),
		kgo.RequiredAcks(kgo.AllISRAcks()),
	)
	if c.instanceID != "" {
		opts = append(opts, kgo.InstanceID(c.instanceID))
	}
	// The session wraps these two to abort its open transaction first, then
	// calls ours; they only keep Health's view of the assignment.
	opts = append(opts,
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { t.track(m, "assigned") }),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { t.track(m, "revoked") }),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { t.track(m, "lost") }),
	)
	if c.groupProtocol == "consumer" {
		opts = append(opts, kgo.ServerSideBalancer(), kgo.Balancers(kgo.StickyBalancer()))
	} else {
		opts = append(opts, kgo.Balancers(kgo.CooperativeStickyBalancer()))
	}
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

// Health reports the member's group state and the partitions it holds
// ("topic[partition]", sorted). InFlight, Paused, Parked and Blocked stay
// zero: a transaction holds no records between polls. Safe for concurrent
// use.
func (t *TxnProcessor) Health() Health {
	t.mu.Lock()
	sess := t.sess
	h := Health{Group: t.cfg.group, ClientID: t.cfg.clientID, Generation: -1}
	for topic, ps := range t.owned {
		for p := range ps {
			h.Partitions = append(h.Partitions, tp{topic, p}.String())
		}
	}
	t.mu.Unlock()
	slices.Sort(h.Partitions)
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
// refuses the member's group session for good, and an error if a session
// cannot be created.
func (t *TxnProcessor) Run(ctx context.Context) error {
	failures := 0
	for ctx.Err() == nil {
		sess, err := t.newSession()
		if err != nil {
			return fmt.Errorf("processor: transactional session: %w", err)
		}
		t.mu.Lock()
		t.sess, t.owned = sess, nil
		t.mu.Unlock()
		err = t.runSession(ctx, sess)
		sess.Close()
		t.mu.Lock()
		t.owned = nil
		t.mu.Unlock()
		if err == nil {
			return nil
		}
		if fe := (*FatalGroupError)(nil); errors.As(err, &fe) {
			return err
		}
		failures++
		t.cfg.logger.Error("transactional session failed; restarting from committed offsets", "error", err)
		sleepCtx(ctx, backoff(failures, t.cfg.backoffMin, t.cfg.backoffMax))
	}
	return nil
}

// runSession runs transactions on one session. It returns nil on shutdown and
// an error when the session must be replaced (outcome unknown).
func (t *TxnProcessor) runSession(ctx context.Context, sess *kgo.GroupTransactSession) error {
	m := t.cfg.metrics
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
		deadline := time.Now().Add(t.cfg.commitInterval)
		abort := false
		var fatal error // a fatal group error seen mid-transaction: abort, then return it
		var prodErr error
		var pmu sync.Mutex
		promise := func(_ *kgo.Record, err error) {
			if err != nil {
				pmu.Lock()
				prodErr = errors.Join(prodErr, err)
				pmu.Unlock()
			}
		}
		n := 0
		last := map[tp]int64{} // highest offset per partition in this transaction
		for {
			for _, r := range recs {
				last[tp{r.Topic, r.Partition}] = r.Offset
				if r.Attrs.IsControl() {
					continue // a transaction marker: nothing to transform, its offset is still committed
				}
				m.partition(t.cfg.group, r.Topic).consumed(int64(len(r.Key) + len(r.Value)))
				outs, err := t.transform(ctx, r)
				if err != nil { // shutdown mid-record
					abort = true
					break
				}
				for _, o := range outs {
					// Not ctx: a shutdown must not fail records of a
					// transaction that is about to commit.
					sess.Produce(context.WithoutCancel(ctx), o, promise)
				}
				n++
			}
			if abort || time.Now().After(deadline) || n >= t.cfg.maxRecords {
				break
			}
			// Keep filling this transaction until the commit interval ends.
			pctx, cancel := context.WithDeadline(ctx, deadline)
			more := sess.PollRecords(pctx, t.cfg.maxRecords-n)
			cancel()
			if more.IsClientClosed() {
				abort = true
				break
			}
			if fatal = t.noteFetches(more, ends); fatal != nil {
				abort = true
				break
			}
			recs = more.Records()
			if len(recs) == 0 {
				break
			}
		}
		endCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if !abort {
			// Every produce promise must have run before prodErr is read:
			// End(TryCommit) aborts on a rebalance, not on a failed
			// record, so committing with an unseen produce failure would
			// commit the offsets without their output (found by the
			// crash harness, fault term-in-txn).
			_ = sess.Client().Flush(endCtx)
		}
		pmu.Lock()
		if prodErr != nil {
			abort = true
		}
		pmu.Unlock()
		try := kgo.TryCommit
		if abort {
			try = kgo.TryAbort
		}
		endStart := time.Now()
		committed, err := sess.End(endCtx, try)
		cancel()
		if !abort {
			m.commitLatency(t.cfg.group, time.Since(endStart), err)
		}
		if committed && err == nil {
			for k, off := range last {
				m.committed(t.cfg.group, k.topic, k.partition, off+1)
				if end, ok := ends[k]; ok {
					m.setLagValue(t.cfg.group, k, end-(off+1))
				}
			}
		}
		t.statsMu.Lock()
		if committed {
			t.committed++
		} else {
			t.aborted++
		}
		t.statsMu.Unlock()
		if fatal != nil {
			return fatal
		}
		if err != nil {
			return fmt.Errorf("end transaction (outcome unknown): %w", err)
		}
		if !committed {
			t.cfg.logger.Info("transaction aborted; resuming from committed offsets", "records", n, "produce_error", prodErr)
		}
	}
}

// noteFetches logs and counts fetch errors and keeps each partition's last
// stable offset (for the lag gauge) in ends. It returns a *FatalGroupError
// if the fetches carry one, and nil otherwise.
func (t *TxnProcessor) noteFetches(f kgo.Fetches, ends map[tp]int64) (fatal error) {
	f.EachError(func(topic string, p int32, err error) {
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
// a permanent error, it returns a DLQ record instead of the output. It
// returns an error only when ctx ends.
func (t *TxnProcessor) transform(ctx context.Context, r *kgo.Record) ([]*kgo.Record, error) {
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
			return outs, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		now := time.Now()
		it.attempts++
		it.lastErr = err
		if it.first.IsZero() {
			it.first = now
		}
		it.last = now
		if IsPermanent(err) || it.attempts >= t.cfg.maxAttempts {
			t.cfg.logger.Warn("record dead-lettered inside the transaction", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "error", err)
			p := &Processor{cfg: t.cfg}
			t.cfg.metrics.forwarded(t.cfg.group, DLQTopic(t.cfg.group), true)
			return []*kgo.Record{{Topic: DLQTopic(t.cfg.group), Key: r.Key, Value: r.Value, Headers: p.forwardHeaders(it)}}, nil
		}
		t.cfg.metrics.retried(t.cfg.group, r.Topic)
		sleepCtx(ctx, backoff(it.attempts, t.cfg.backoffMin, t.cfg.backoffMax))
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
