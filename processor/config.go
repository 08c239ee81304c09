package processor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Handler processes one record. It returns nil when the record is done, a
// permanent error (see Permanent) when no retry can help, and any other error
// for a transient failure that is retried.
//
// ctx carries the per-record deadline (HandlerTimeout) and is cancelled when
// the processor shuts down or loses the partition. The record must not be
// modified or retained after the handler returns. For a record that came back
// from one of the group's retry topics, r.Topic, r.Partition, r.Offset and
// r.Timestamp are those of the original record, so a handler never needs to
// know about retry topics.
//
// A handler may be called concurrently for different records, within the
// guarantees of the ordering mode.
type Handler func(ctx context.Context, r *kgo.Record) error

// Ordering selects which records may be processed in parallel.
type Ordering int

const (
	// OrderPartition processes one record at a time per partition, in offset
	// order: the classic Kafka consumer. Parallelism is the number of
	// partitions assigned (up to Concurrency).
	OrderPartition Ordering = iota
	// OrderKey processes records of different keys in parallel, and records
	// of one key one at a time in offset order. Records with a null key are
	// one key of their own per partition (ordered among themselves).
	OrderKey
	// OrderUnordered processes any records in parallel. Commits still only
	// cover the contiguous run of completed records.
	OrderUnordered
)

func (o Ordering) String() string {
	switch o {
	case OrderPartition:
		return "partition"
	case OrderKey:
		return "key"
	case OrderUnordered:
		return "unordered"
	}
	return fmt.Sprintf("Ordering(%d)", int(o))
}

// ParseOrdering parses "partition", "key" or "unordered".
func ParseOrdering(s string) (Ordering, error) {
	switch s {
	case "partition":
		return OrderPartition, nil
	case "key":
		return OrderKey, nil
	case "unordered":
		return OrderUnordered, nil
	}
	return 0, fmt.Errorf("ordering %q: want partition, key or unordered", s)
}

// Opt configures a Processor made with New. Every option is an Opt; those
// the exactly-once mode takes as well are also a TxnOpt.
type Opt interface{ apply(*cfg) }

// TxnOpt is an option NewTransactional takes, as New does: the group, the
// topics, timeouts, attempts and backoff, the DLQ topic and CreateTopics,
// the start offset, the client options, logging and metrics, the ordering
// mode, Concurrency, the completed-offsets map's budget, and batching
// (WithTxnBatchHandler, MaxBatch). The options of
// New or NewQueue alone (WithHandler, HandleTopic, WithBatchHandler,
// RetryTopics, RetryTopicPrefix, DeadLetter, BlockKeys,
// MaxBlockedKeys, BlockedKeysTopic, CommitRefreshInterval, Producer,
// Delivery, MaxDeliveries, ShareSessions, ShareAcquireMultiple,
// ShareLagInterval) are an Opt only, so passing one to NewTransactional does
// not compile, as franz-go's kgo keeps ProducerOpt,
// ConsumerOpt and GroupOpt apart.
type TxnOpt interface {
	Opt
	txnOpt()
}

// opt is an option of New only; bothOpt one of both modes.
type (
	opt     func(*cfg)
	bothOpt func(*cfg)
)

func (o bothOpt) apply(c *cfg) { o(c) }
func (bothOpt) txnOpt()        {}

// applyOpts applies opts to c in order. It returns an error naming the
// position (from 1) of every nil Opt, such as a nil Opt variable or a
// conditional option left unset, and applies none of them then.
func applyOpts(c *cfg, opts []Opt) error {
	var errs []error
	for i, o := range opts {
		if o == nil || isNilOpt(o) {
			errs = append(errs, fmt.Errorf("option %d of %d is nil", i+1, len(opts)))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	for _, o := range opts {
		o.apply(c)
	}
	return nil
}

// isNilOpt reports whether o holds a nil func (an Opt interface holding a
// typed nil, such as opt(nil)).
func isNilOpt(o Opt) bool {
	switch f := o.(type) {
	case opt:
		return f == nil
	case bothOpt:
		return f == nil
	}
	return false
}

func (o opt) apply(c *cfg) { o(c) }

type cfg struct {
	brokers        []string
	group          string
	topics         []string
	handler        Handler
	topicHandlers  []topicHandler // HandleTopic, in order (topichandler.go)
	tracer         Tracer         // Tracing; nil: none (tracing.go)
	ordering       Ordering
	concurrency    int
	maxRecords     int
	maxBytes       int64
	handlerTimeout time.Duration
	maxAttempts    int
	backoffMin     time.Duration
	backoffMax     time.Duration
	retryDelays    []time.Duration
	keyBlock       KeyBlock
	maxBlockedKeys int
	blockedTopic   string // resolved by validate: BlockedKeysTopicName(group) unless BlockedKeysTopic
	dlq            bool
	dlqTopic       string // resolved by validate: DLQTopic(group) unless DeadLetterTopic
	createTopics   bool
	retryPrefix    string // resolved by validate: "<group>.retry." unless RetryTopicPrefix
	headerPrefix   string
	hdr            headerNames // resolved by validate from headerPrefix
	onDeadLetter   func(r *kgo.Record, reason error)
	commitInterval time.Duration
	commitRefresh  time.Duration
	metaMaxBytes   int
	drainTimeout   time.Duration
	drainSet       bool // DrainTimeout was given (otherwise it follows RebalanceTimeout)
	sessionTimeout time.Duration
	rebalanceTO    time.Duration
	instanceID     string
	clientID       string
	groupProtocol  string
	assignors      []string          // Assignors (assignors.go)
	delivery       DeliverySemantics // Delivery (delivery.go)
	assignorsSet   bool
	txnTimeout     time.Duration
	logger         *slog.Logger
	metrics        *Metrics
	clientOpts     []kgo.Opt // both clients (ClientOpts)
	consumerOpts   []kgo.Opt
	producerOpts   []kgo.Opt
	start          Start
	producer       *kgo.Client
	errorMsgMax    int
	hooks          hooks
	batch          *batchCfg       // WithBatchHandler, MaxBatch (batch.go)
	txnBatch       TxnBatchHandler // WithTxnBatchHandler (txn_batch.go)
	txn            bool            // NewTransactional (for its error hints)
	queue          bool            // NewQueue (queue.go)
	maxDeliveries  int             // MaxDeliveries (NewQueue only); 0: the broker's limit
	// ShareSessions (NewQueue only; queue.go); unset: DefaultShareSessions.
	shareSessions    int
	shareSessionsSet bool
	// ShareAcquireMultiple (NewQueue only; queue.go): a share session's
	// poll acquires up to shareAcquire x Concurrency records; unset:
	// DefaultShareAcquireMultiple.
	shareAcquire    int
	shareAcquireSet bool
	// ShareLagInterval (NewQueue only; queue_lag.go); unset: DefaultShareLagInterval.
	shareLagEvery time.Duration
	shareLagSet   bool
	// Set by the options whose empty value would otherwise fall back to
	// a default silently (DeadLetterTopic(""), RetryTopicPrefix(""),
	// Logger(nil), WithBatchHandler(nil)): validate refuses those.
	dlqTopicSet, retryPrefixSet, loggerNil, batchNil, txnBatchNil bool
}

// hooks are test seams that record a history of what the runtime did; they
// are nil in production. They run synchronously, some with p.mu held: they
// must not call back into the Processor.
type hooks struct {
	// handleStart and afterHandle run around every handler attempt; rec is
	// the record as fetched, view as shown to the handler.
	handleStart func(rec, view *kgo.Record)
	afterHandle func(rec, view *kgo.Record, err error)
	// completed runs when a record leaves the runtime and its offset may
	// be passed by the commit point: handled (forwardedTo "") or written to
	// a retry topic or the DLQ.
	completed func(rec, view *kgo.Record, forwardedTo string)
	// forwarded runs after a failed record's write to a retry topic or
	// the DLQ (with its blocked-keys writes), before the outcome is
	// settled, without locks held (a test may block in it to widen a
	// race).
	forwarded func(view *kgo.Record, target string, err error)
	// beforeCommit runs before a commit is handed to franz-go, without
	// locks held (a test may block in it to widen a race).
	beforeCommit func(offsets map[string]map[int32]kgo.EpochOffset)
	// commitSent runs with the request about to be written, after the
	// ownership check; commitDone with the offsets the broker accepted.
	commitSent func(member string, generation int32, offsets map[string]map[int32]int64)
	commitDone func(accepted map[string]map[int32]int64, err error)
	// partitions runs on "assigned", "release-start:<why>" and
	// "release-end:<why>" (why: revoked, lost, shutdown).
	partitions func(event string, parts map[string][]int32)
	// txnProduced runs in the exactly-once mode after a transaction's
	// outputs were handed to franz-go, before it is ended (a test may
	// stall in it to hold the transaction open), with the number of
	// records the transaction carries (0: commits only).
	txnProduced func(records int)
	// txnEnding runs in the exactly-once mode on the goroutine that ends a
	// transaction, before it flushes and commits (a test may stall it to
	// hold the end while the session goes on polling), with the number of
	// records the transaction carries.
	txnEnding func(records int)
}

func defaultCfg() cfg {
	return cfg{
		ordering:       OrderPartition,
		concurrency:    16,
		maxRecords:     1000,
		maxBytes:       64 << 20,
		handlerTimeout: 30 * time.Second,
		maxAttempts:    3,
		backoffMin:     100 * time.Millisecond,
		backoffMax:     5 * time.Second,
		dlq:            true,
		maxBlockedKeys: DefaultMaxBlockedKeys,
		commitInterval: time.Second,
		commitRefresh:  5 * time.Second,
		metaMaxBytes:   DefaultCommitMetadataMaxBytes,
		drainTimeout:   10 * time.Second,
		sessionTimeout: DefaultSessionTimeout,
		rebalanceTO:    60 * time.Second,
		groupProtocol:  "classic",
		txnTimeout:     60 * time.Second,
		logger:         slog.New(slog.DiscardHandler),
		errorMsgMax:    1024,
		headerPrefix:   DefaultHeaderPrefix,
	}
}

func (c *cfg) validate() error {
	var errs []error
	if len(c.brokers) == 0 {
		errs = append(errs, errors.New("Brokers: at least one seed broker is required (host:port)"))
	}
	for i, b := range c.brokers {
		if strings.TrimSpace(b) == "" {
			errs = append(errs, fmt.Errorf("Brokers: address %d of %d is empty, want host:port (an unset variable split on commas gives one)", i+1, len(c.brokers)))
		}
	}
	if c.group == "" {
		errs = append(errs, errors.New("Group: a group is required (the consumer group; the share group with NewQueue)"))
	}
	if len(c.topics) == 0 {
		errs = append(errs, errors.New("Topics: at least one topic is required"))
	}
	seen := make(map[string]int, len(c.topics))
	for i, t := range c.topics {
		switch j, dup := seen[t]; {
		case strings.TrimSpace(t) == "":
			errs = append(errs, fmt.Errorf("Topics: topic %d of %d is empty, want a topic name", i+1, len(c.topics)))
		case dup:
			errs = append(errs, fmt.Errorf("Topics: %q is given twice (topics %d and %d)", t, j+1, i+1))
		default:
			seen[t] = i
			if err := checkTopicName(t); err != nil {
				errs = append(errs, fmt.Errorf("Topics: topic %d of %d: %w", i+1, len(c.topics), err))
			}
		}
	}
	if c.loggerNil {
		errs = append(errs, errors.New("Logger: nil, want a *slog.Logger (leave the option out to discard the logs)"))
	}
	if c.batchNil {
		errs = append(errs, errors.New("WithBatchHandler: nil, want a BatchHandler (leave the option out to handle records one at a time)"))
	}
	if !c.txn && (c.txnBatch != nil || c.txnBatchNil) {
		errs = append(errs, errors.New("WithTxnBatchHandler: for NewTransactional only; New takes a BatchHandler (WithBatchHandler)"))
	}
	if c.dlqTopicSet && strings.TrimSpace(c.dlqTopic) == "" {
		errs = append(errs, fmt.Errorf("DeadLetterTopic: empty, want a topic name (leave the option out for %q)", DLQTopic(c.group)))
	} else if c.dlqTopicSet {
		if err := checkTopicName(c.dlqTopic); err != nil {
			errs = append(errs, fmt.Errorf("DeadLetterTopic: %w", err))
		}
	}
	if c.retryPrefixSet && strings.TrimSpace(c.retryPrefix) == "" {
		errs = append(errs, fmt.Errorf("RetryTopicPrefix: empty, want a prefix (leave the option out for %q)", c.group+".retry."))
	}
	if c.maxBlockedKeys < 1 && c.keyBlock == KeyBlockOff {
		errs = append(errs, fmt.Errorf("MaxBlockedKeys: %d, want >= 1", c.maxBlockedKeys))
	}
	if len(c.topicHandlers) > 0 {
		errs = append(errs, c.resolveTopicHandlers()...) // sets c.handler
	} else if c.handler == nil {
		errs = append(errs, errors.New("WithHandler: a handler is required"))
	}
	if c.ordering < OrderPartition || c.ordering > OrderUnordered {
		errs = append(errs, fmt.Errorf("WithOrdering: %v, want OrderPartition, OrderKey or OrderUnordered", c.ordering))
	}
	if c.handlerTimeout < 0 {
		errs = append(errs, fmt.Errorf("HandlerTimeout: %v, want >= 0 (0 disables)", c.handlerTimeout))
	}
	if c.concurrency < 1 {
		errs = append(errs, fmt.Errorf("Concurrency: %d, want >= 1", c.concurrency))
	}
	if c.maxRecords < 1 {
		errs = append(errs, fmt.Errorf("MaxInFlight records: %d, want >= 1", c.maxRecords))
	}
	if c.maxBytes < 1 {
		errs = append(errs, fmt.Errorf("MaxInFlight bytes: %d, want >= 1", c.maxBytes))
	}
	if c.maxAttempts < 1 {
		errs = append(errs, fmt.Errorf("MaxAttempts: %d, want >= 1", c.maxAttempts))
	}
	if c.backoffMin <= 0 || c.backoffMax < c.backoffMin {
		errs = append(errs, fmt.Errorf("Backoff: min %v max %v, want 0 < min <= max", c.backoffMin, c.backoffMax))
	}
	for i, d := range c.retryDelays {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("RetryTopics: delay %d is %v, want > 0", i+1, d))
		}
	}
	if c.commitInterval <= 0 {
		errs = append(errs, fmt.Errorf("CommitInterval: %v, want > 0", c.commitInterval))
	}
	if c.commitRefresh <= 0 {
		errs = append(errs, fmt.Errorf("CommitRefreshInterval: %v, want > 0", c.commitRefresh))
	}
	if c.metaMaxBytes != 0 && c.metaMaxBytes < 64 {
		errs = append(errs, fmt.Errorf("CommitMetadataMaxBytes: %d, want 0 (no map) or >= 64", c.metaMaxBytes))
	}
	if c.sessionTimeout <= 0 || c.rebalanceTO <= 0 {
		errs = append(errs, fmt.Errorf("SessionTimeout %v, RebalanceTimeout %v: want > 0", c.sessionTimeout, c.rebalanceTO))
	}
	if c.txnTimeout <= 0 {
		errs = append(errs, fmt.Errorf("TransactionTimeout: %v, want > 0", c.txnTimeout))
	}
	if !c.drainSet && c.rebalanceTO > 0 {
		c.drainTimeout = min(c.drainTimeout, c.rebalanceTO/2)
	}
	switch {
	case c.drainTimeout < 0:
		errs = append(errs, fmt.Errorf("DrainTimeout: %v, want >= 0", c.drainTimeout))
	case c.rebalanceTO > 0 && c.drainTimeout >= c.rebalanceTO:
		errs = append(errs, fmt.Errorf("DrainTimeout: %v, want less than RebalanceTimeout (%v): the revoke's commit must land before the group gives up on the member", c.drainTimeout, c.rebalanceTO))
	}
	if err := c.start.validate(); err != nil {
		errs = append(errs, fmt.Errorf("StartOffset: %w", err))
	}
	for _, o := range []struct {
		where string
		opts  []kgo.Opt
	}{{"ClientOpts", c.clientOpts}, {"ConsumerOpts", c.consumerOpts}, {"ProducerOpts", c.producerOpts}} {
		if err := refusedClientOpts(o.where, o.opts, c.txn); err != nil {
			errs = append(errs, err)
		}
	}
	if c.producer != nil && len(c.producerOpts) > 0 {
		errs = append(errs, errors.New("ProducerOpts: not used with Producer (the given client is used as it is): drop one"))
	}
	if c.groupProtocol != "classic" && c.groupProtocol != "consumer" {
		errs = append(errs, fmt.Errorf("GroupProtocol: %q, want classic or consumer (KIP-848)", c.groupProtocol))
	}
	if err := c.validateAssignors(); err != nil {
		errs = append(errs, err)
	}
	if c.headerPrefix == "" {
		errs = append(errs, errors.New(`HeaderPrefix: empty, want a prefix such as "ordercast-"`))
	}
	if c.dlqTopic == "" {
		c.dlqTopic = DLQTopic(c.group)
	}
	if c.retryPrefix == "" {
		c.retryPrefix = c.group + ".retry."
	}
	for _, t := range c.retryTopicNames() {
		if t == c.dlqTopic || slices.Contains(c.topics, t) {
			errs = append(errs, fmt.Errorf("RetryTopics: retry topic %q is also the DLQ or a source topic", t))
		}
		if err := checkTopicName(t); err != nil && c.group != "" {
			errs = append(errs, fmt.Errorf("RetryTopics: retry topic name from the prefix (RetryTopicPrefix, default the group and \".retry.\"): %w", err))
			break
		}
	}
	if c.dlq && !c.dlqTopicSet && c.group != "" {
		if err := checkTopicName(c.dlqTopic); err != nil {
			errs = append(errs, fmt.Errorf("Group: the default DLQ topic, the group and \".dlq\", is no legal topic name (%w): set DeadLetterTopic", err))
		}
	}
	if c.dlq && slices.Contains(c.topics, c.dlqTopic) {
		errs = append(errs, fmt.Errorf("DeadLetterTopic: %q is also a source topic", c.dlqTopic))
	}
	switch {
	case c.maxDeliveries != 0 && !c.queue:
		errs = append(errs, fmt.Errorf("MaxDeliveries: %d: only NewQueue takes it (use MaxAttempts)", c.maxDeliveries))
	case c.maxDeliveries < 0:
		errs = append(errs, fmt.Errorf("MaxDeliveries: %d, want >= 0 (0: the group's share.delivery.count.limit)", c.maxDeliveries))
	}
	switch {
	case c.shareSessionsSet && !c.queue:
		errs = append(errs, fmt.Errorf("ShareSessions: %d: only NewQueue takes it (a consumer group member has one session)", c.shareSessions))
	case c.shareSessionsSet && c.shareSessions < 1:
		errs = append(errs, fmt.Errorf("ShareSessions: %d, want >= 1 (default %d)", c.shareSessions, DefaultShareSessions))
	}
	switch {
	case c.shareAcquireSet && !c.queue:
		errs = append(errs, fmt.Errorf("ShareAcquireMultiple: %d: only NewQueue takes it", c.shareAcquire))
	case c.shareAcquireSet && (c.shareAcquire < 1 || c.shareAcquire > MaxShareAcquireMultiple):
		errs = append(errs, fmt.Errorf("ShareAcquireMultiple: %d, want 1 to %d (default %d)", c.shareAcquire, MaxShareAcquireMultiple, DefaultShareAcquireMultiple))
	}
	if err := c.validateShareLag(); err != nil {
		errs = append(errs, err)
	}
	c.hdr = newHeaderNames(c.headerPrefix)
	errs = append(errs, c.validateKeyBlock()...)
	if err := c.validateDelivery(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Brokers sets the seed brokers ("host:port"). Required. Kafka setting:
// bootstrap.servers. An empty (or blank) address is refused at New, naming
// its position: strings.Split of an unset variable gives [""].
func Brokers(brokers ...string) TxnOpt { return bothOpt(func(c *cfg) { c.brokers = brokers }) }

// Group sets the consumer group. Required. Kafka setting: group.id. By
// default the group's retry topics are "<group>.retry.<n>" and its DLQ is
// "<group>.dlq" (RetryTopicPrefix, DeadLetterTopic).
func Group(group string) TxnOpt { return bothOpt(func(c *cfg) { c.group = group }) }

// Topics sets the topics to consume. Required. The group's retry topics, if
// any, are consumed in addition and need not be listed.
func Topics(topics ...string) TxnOpt { return bothOpt(func(c *cfg) { c.topics = topics }) }

// WithHandler sets the record handler. Required, unless every topic has
// its own (HandleTopic); with HandleTopic options it handles the records of
// the topics without one.
func WithHandler(h Handler) Opt { return opt(func(c *cfg) { c.handler = h }) }

// WithOrdering sets the ordering mode. Default OrderPartition. New refuses
// a value other than OrderPartition, OrderKey and OrderUnordered;
// NewTransactional takes OrderPartition and OrderKey and refuses
// OrderUnordered (its lanes are a partition or a key of a partition: see
// TxnProcessor).
func WithOrdering(o Ordering) TxnOpt { return bothOpt(func(c *cfg) { c.ordering = o }) }

// Concurrency sets how many handler calls may run at once across all
// partitions of this member. Default 16. Records waiting for a retry backoff
// or parked behind a busy key do not hold one of these slots. Records of a
// failing key or partition (its head failed and waits for a retry, or waits
// for a retry topic's due time) do not use up MaxInFlight room either: they
// are "parked" (Health.Parked) until the key's next success. In
// NewTransactional it bounds the TxnHandler calls running at once the same
// way (a record backing off holds no slot).
func Concurrency(n int) TxnOpt { return bothOpt(func(c *cfg) { c.concurrency = n }) }

// DefaultTxnMaxInFlight is NewTransactional's default MaxInFlight records.
// A transaction is cut at half of it at the latest, and each costs a few
// round trips however many records it takes, so the bound sets the
// exactly-once rate of a fast stage. Measured on Kafka 4.4 (1 node; 5,000,000
// records of 100 bytes, 6 partitions, a no-op handler, CommitInterval 100ms,
// passes interleaved with the at-least-once mode's, BenchmarkTxnVsPlain):
// 100,000 ran at 0.84-0.99 of the at-least-once mode's rate (median 0.88, 92
// transactions a pass), 200,000 at 0.92-1.12 (46 transactions). Held
// records cost memory until their transaction commits (a record with
// outputs and the fetch buffer it pins, and each record's bookkeeping; the
// 64 MiB byte bound caps their keys and values): the peak heap of the no-op
// pass was 118-139 MiB at 200,000 against 95-108 MiB at 100,000 (73-94 MiB
// for New), and 234-250 MiB with 2 % of the records failing once in
// OrderKey (polling stops once an eighth of the bound waits for admission).
const DefaultTxnMaxInFlight = 200_000

// MaxInFlight bounds the records (count) and key+value bytes that this
// member has admitted for processing and not yet completed. When either bound
// is reached the processor stops polling, and goes on once an eighth of the
// room is free again (both below 7/8 of their bound): the backpressure that keeps a slow handler from
// growing memory. Defaults 1000 records (DefaultTxnMaxInFlight, 200,000, for
// NewTransactional, whose records are held until their transaction commits:
// a transaction is cut at half the bound at the latest) and 64 MiB. The
// closest Kafka
// settings are max.poll.records and fetch.max.bytes, which bound one poll,
// not the backlog.
//
// Records are taken a whole fetch at a time and admitted round-robin across
// the fetch's partitions as room frees up, so every partition gets its turn
// (one partition's records cannot fill the room while the others wait). In
// OrderPartition each assigned partition holds at most its share of the
// room (MaxInFlight / assigned partitions, rounded up); the rest of its
// fetched records wait aside, its fetching paused, so that the poll loop
// goes on fetching for the partitions that have nothing; those records are
// bounded by a quarter of the byte bound, past which polling waits. In
// OrderKey the same share bounds a partition's records that wait behind an
// earlier record of their key (so a partition of few keys cannot fill the
// room); a partition of distinct keys may take the whole room. The
// processor sizes fetches from the byte bound and the compression ratio of
// the batches it reads (fetch sizes count compressed bytes): at most a
// quarter of it per fetch and 1/32 of it per partition, decoded, the
// latter at most Kafka's default 1 MiB compressed (franz-go's FetchMaxBytes
// and FetchMaxPartitionBytes; ClientOpts may set them, and then they stay
// fixed). Memory held is thus about the MaxInFlight bytes plus two fetches.
//
// Records of a failing key (see Concurrency) have a room of their own of the
// same size: they do not use up this one, and when theirs is full only the
// partitions holding them pause.
func MaxInFlight(records int, bytes int64) TxnOpt {
	return bothOpt(func(c *cfg) { c.maxRecords, c.maxBytes = records, bytes })
}

// HandlerTimeout sets how long one attempt of one record may run before its
// context is cancelled and it counts as a transient failure. Default 30s; 0
// disables; a negative value is refused at New. Unlike max.poll.interval.ms it does not affect group membership:
// franz-go heartbeats from its own goroutine whatever the handler does. The
// deadline is measured from a clock refreshed every millisecond, so it is
// precise to about a millisecond; the context arms a timer only when the
// handler waits on Done.
func HandlerTimeout(d time.Duration) TxnOpt { return bothOpt(func(c *cfg) { c.handlerTimeout = d }) }

// MaxAttempts sets how many times a record is tried in place (the first try
// included) before it moves to the next retry topic or to the DLQ. Default 3.
func MaxAttempts(n int) TxnOpt { return bothOpt(func(c *cfg) { c.maxAttempts = n }) }

// Backoff sets the in-place retry delay: exponential from min, doubling per
// attempt, capped at max, each delay d drawn at random in [d/2, d] ("equal
// jitter"). Defaults 100ms and 5s.
// A record waiting out its backoff does not hold a Concurrency slot, and only
// delays the records behind it in its partition (OrderPartition) or key
// (OrderKey).
func Backoff(min, max time.Duration) TxnOpt {
	return bothOpt(func(c *cfg) { c.backoffMin, c.backoffMax = min, max })
}

// RetryTopics enables retry topics with the given delays, one topic per delay:
// "<group>.retry.1" for delays[0] and so on. A record whose in-place attempts
// are exhausted with a transient error is written to the next retry topic with
// a due time; the group consumes its retry topics and handles each record
// again once it is due, without blocking other partitions and without
// committing the retry topic record before it is handled. After the last retry
// topic the record goes to the DLQ. Default: none (straight to the DLQ). The
// topics must exist when Run starts, or CreateTopics(true) creates them.
func RetryTopics(delays ...time.Duration) Opt {
	return opt(func(c *cfg) { c.retryDelays = delays })
}

// BlockKeys keeps each key's order through the retry topics (see the
// runtime's guide, docs/runtime.md, "Key order through retry topics"): while
// a record of a key waits in a retry topic (KeyBlockRetries), or also in the
// DLQ until a replayed copy of it succeeds or it is purged
// (KeyBlockDeadLetters), the group's later records of that key wait at
// their source behind it, uncommitted and parked, and follow it in order
// once it is released. Which keys are blocked is kept in the group's
// compacted BlockedKeysTopic, so a hold survives rebalances and restarts.
// Records with a null key are never held. Default KeyBlockOff. It needs
// WithOrdering(OrderKey), and RetryTopics (KeyBlockRetries) or the DLQ
// (KeyBlockDeadLetters); New refuses it otherwise.
func BlockKeys(b KeyBlock) Opt { return opt(func(c *cfg) { c.keyBlock = b }) }

// MaxBlockedKeys bounds the group's blocked-keys table (BlockKeys). Default
// DefaultMaxBlockedKeys (10,000); it must be >= 1. When the table is full, a
// failing record whose key is not blocked yet does not move on: a transient
// failure is retried in place at the maximum backoff, holding its key in
// memory (order kept, and its partition paused once the parked room is
// full); a permanent failure is dead-lettered without holding its key
// (order of that key not kept). Each such refusal counts in
// <namespace>_key_blocks_refused_total.
func MaxBlockedKeys(n int) Opt { return opt(func(c *cfg) { c.maxBlockedKeys = n }) }

// BlockedKeysTopic sets the blocked-keys topic (BlockKeys). Default
// BlockedKeysTopicName(group), "<group>.blocked-keys". It should be
// compacted (cleanup.policy=compact); CreateTopics(true) creates it so,
// with one partition.
func BlockedKeysTopic(name string) Opt { return opt(func(c *cfg) { c.blockedTopic = name }) }

// DeadLetter enables or disables the DLQ (DeadLetterTopic, by default
// "<group>.dlq"). Default true; the topic must then exist when Run starts,
// or CreateTopics(true) creates it.
// With the DLQ disabled, a record that exhausts its attempts stays
// uncommitted and is retried with the maximum backoff until it succeeds,
// stalling its partition (or key): choose that only when losing order is
// worse than stalling.
func DeadLetter(enabled bool) Opt { return opt(func(c *cfg) { c.dlq = enabled }) }

// CommitInterval sets how often completed offsets are committed. Default 1s.
// Commits are also made on revoke and on shutdown. Kafka setting:
// auto.commit.interval.ms (auto-commit itself is disabled: offsets are
// committed only after records are processed).
func CommitInterval(d time.Duration) TxnOpt { return bothOpt(func(c *cfg) { c.commitInterval = d }) }

// CommitRefreshInterval sets how often the commit point of every held
// partition is committed again although it has not moved. Default 5s
// (Kafka's auto.commit.interval.ms default; the Java consumer's auto-commit
// re-commits unchanged positions the same way); it must be > 0. Commits are
// made on CommitInterval ticks, so an interval shorter than CommitInterval
// acts as CommitInterval. NewTransactional does not use it (see its
// read-back of offsets instead).
//
// Why: an OffsetCommit is not safe to send only once. When the network holds
// a commit past the client's request timeout, franz-go re-sends it on a new
// connection, the runtime goes on committing newer offsets, and the broker may
// apply the held request last: the group's offset then ends below what was
// completed. The broker refuses such a stale request only
// after a rebalance (its generation, or KIP-848 member epoch, is old); within
// one generation nothing but a later commit repairs it, and on a quiet
// partition no later commit would come. Reading the offsets back after a
// suspicious commit would not do either: the held request can land after the
// read. So the position is re-sent periodically, which bounds how long a
// stale commit can stand to this interval, at the cost of one OffsetCommit
// per member per interval. Re-commits go through the same ownership checks
// and the same one-outstanding-commit rule as every commit.
func CommitRefreshInterval(d time.Duration) Opt { return opt(func(c *cfg) { c.commitRefresh = d }) }

// CommitMetadataMaxBytes sets the budget, in bytes, of the completed-offsets
// map a commit carries in its metadata: the records completed
// above the commit point, which the next owner of the partition skips, so a
// handover handles nothing twice and key order never goes backwards
// (see "Handover" in the package doc). Default 4096, the default of the broker's
// offset.metadata.max.bytes; set it to the broker's value when that is
// lower (a larger metadata would fail the commit with
// OFFSET_METADATA_TOO_LARGE). The map never outgrows it: before it could,
// the partition admits no more records until its commit point moves
// (backpressure; about 3,000 records above a stuck record in the worst case,
// far more when completions come in runs). 0 disables the map: a new owner
// handles again every record above the commit point, as a consumer without
// it does. Otherwise at least 64. Only OrderKey and OrderUnordered complete
// records above the commit point; in OrderPartition the map is always empty.
// With StartOffset(Latest) the metadata of input partitions also carries the
// group's start time after the map (";t=<unix ms>", at most 22 bytes, kept
// out of the map's budget so the whole stays within n; with 0 the metadata
// is the start time alone, "oc1:;t=<unix ms>", at most 26 bytes): see
// StartOffset. In NewTransactional the map travels in the transaction's
// TxnOffsetCommit (KIP-447) and is what keeps a handover from producing a
// completed record's output twice, so with OrderKey NewTransactional refuses
// 0.
func CommitMetadataMaxBytes(n int) TxnOpt { return bothOpt(func(c *cfg) { c.metaMaxBytes = n }) }

// mapMaxBytes is the budget of the completed-offsets map itself: with
// StartOffset(Latest), CommitMetadataMaxBytes less the room the group's
// start time takes after the map (offsetmap.go), so the whole metadata
// stays within CommitMetadataMaxBytes. 0: no map.
func (c *cfg) mapMaxBytes() int {
	if c.metaMaxBytes == 0 || c.start.kind != startLatest {
		return c.metaMaxBytes
	}
	return c.metaMaxBytes - groupStartSuffixMaxLen
}

// DrainTimeout bounds how long a revoke or a shutdown waits for in-flight
// handler calls of the released partitions before committing what completed.
// Default 10s, or half the RebalanceTimeout when that is shorter; a value at
// or above RebalanceTimeout is refused (the revoke's commit must land before
// the group gives up on the member). Handlers still running after it are
// cancelled and their records are not committed (the next owner handles them
// again: at-least-once). A handler that ignores its context keeps running,
// though: Run returns only once every handler call has returned, so that no
// handler of this process overlaps the next owner's work after Run.
//
// NewTransactional: once Run's context is cancelled, ending the open
// transaction (commit, or abort on a failure) gets at most DrainTimeout
// more, whatever the brokers do; a transaction not ended by then is left to
// the coordinator, which aborts it after TransactionTimeout (a restart with
// the same transactional id fences it at once).
func DrainTimeout(d time.Duration) TxnOpt {
	return bothOpt(func(c *cfg) { c.drainTimeout, c.drainSet = d, true })
}

// DefaultSessionTimeout is the group session timeout (session.timeout.ms)
// when SessionTimeout is not given: 45s, the default of Kafka's consumer
// since KIP-735.
const DefaultSessionTimeout = 45 * time.Second

// SessionTimeout and RebalanceTimeout set the group's session.timeout.ms
// (default 45s) and rebalance.timeout.ms (default 60s). Heartbeats run in the
// background every third of the session timeout (at most every 3s, Kafka's
// heartbeat.interval.ms), so a slow handler never expires the session; the
// rebalance timeout must cover DrainTimeout plus a commit. The broker bounds
// the session timeout (group.min/max.session.timeout.ms).
func SessionTimeout(d time.Duration) TxnOpt { return bothOpt(func(c *cfg) { c.sessionTimeout = d }) }

// RebalanceTimeout: see SessionTimeout.
func RebalanceTimeout(d time.Duration) TxnOpt { return bothOpt(func(c *cfg) { c.rebalanceTO = d }) }

// TransactionTimeout sets transaction.timeout.ms for the exactly-once mode
// (NewTransactional; ignored by New). Default 60s, Kafka's default. It is
// how long the transaction coordinator waits before aborting a transaction
// whose producer stopped (a crashed member that is not restarted): until
// then read_committed readers of the output topics stop at its first
// record (the last stable offset). The coordinator looks for expired
// transactions every transaction.abort.timed.out.transaction.cleanup.interval.ms
// (default 10s), so the stall lasts up to the timeout plus that interval.
// A shorter timeout shortens that stall
// but must comfortably exceed CommitInterval plus the slowest handler call
// of a transaction, or healthy transactions are aborted and replayed. The
// broker refuses values above transaction.max.timeout.ms (default 15 min):
// Run then returns an error naming TransactionTimeout (wrapping
// kerr.InvalidTransactionTimeout). A restarted member with the same
// transactional id fences the old transaction at once, whatever this is.
func TransactionTimeout(d time.Duration) TxnOpt { return bothOpt(func(c *cfg) { c.txnTimeout = d }) }

// InstanceID sets a static group member id (KIP-345, group.instance.id).
// Default empty: dynamic membership.
func InstanceID(id string) TxnOpt { return bothOpt(func(c *cfg) { c.instanceID = id }) }

// ClientID sets the Kafka client.id, used in logs and metric labels. Default
// "<group>-<random>" (8 hex digits) for New, the transactional id for
// NewTransactional.
func ClientID(id string) TxnOpt { return bothOpt(func(c *cfg) { c.clientID = id }) }

// dlqTarget is the DLQ topic, or "" when the DLQ is disabled.
func (c *cfg) dlqTarget() string {
	if !c.dlq {
		return ""
	}
	return c.dlqTopic
}

// randomID returns 8 random hex digits, for default client ids.
func randomID() string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// GroupProtocol selects "classic" (default: JoinGroup/SyncGroup with the
// cooperative-sticky assignor, KIP-429, or those of Assignors) or "consumer"
// (KIP-848 server-side assignment; needs Kafka 4.0+).
func GroupProtocol(p string) TxnOpt { return bothOpt(func(c *cfg) { c.groupProtocol = p }) }

// Logger sets the slog logger. Default: a logger that discards everything
// (slog.DiscardHandler). The runtime logs at WARN a failed handler call,
// fetch or commit, and at ERROR a retry-topic or DLQ write that failed (the
// partition is then held), a record NewTransactional could not dead-letter
// and a transactional session replaced; INFO is about rebalances, start
// offsets and shutdown. Keys used: group, topic, partition, offset, error.
//
// A nil logger is refused (New, NewTransactional and NewQueue return an
// error naming Logger).
func Logger(l *slog.Logger) TxnOpt {
	return bothOpt(func(c *cfg) {
		if l == nil {
			c.loggerNil = true
			return
		}
		c.logger, c.loggerNil = l, false
	})
}

// WithMetrics sets the Prometheus metrics the processor updates. Default none.
// One *Metrics may be shared by every processor of a process.
func WithMetrics(m *Metrics) TxnOpt { return bothOpt(func(c *cfg) { c.metrics = m }) }

// ClientOpts adds franz-go options to both clients of New, the consumer and
// the producer of retry-topic and DLQ records (unless Producer gives one),
// and to the one client of NewTransactional: the options both need, such as
// TLS (kgo.DialTLSConfig), SASL (kgo.SASL), a dialer or timeouts.
//
// Each option is applied to each client, so an option that holds state must
// not be given here: a kgo.WithHooks with a plugin such as kprom.Metrics or
// kotel registers the one instance on two clients, which those plugins do
// not support (data races, series of the two clients mixed). Give such
// options to ConsumerOpts or ProducerOpts, one instance each.
//
// The runtime's defaults for kgo.FetchMaxWait, kgo.HeartbeatInterval,
// kgo.FetchMaxBytes and kgo.FetchMaxPartitionBytes are set before these, so
// these win.
//
// An option the runtime sets itself (group, topics, start and reset offsets,
// isolation level, auto-commit, rebalance callbacks and blocking, session and
// rebalance timeouts, balancers, static and transactional ids, client id,
// seed brokers, the DLQ producer's acks, idempotence and linger) is refused: New and NewTransactional return an error
// wrapping ErrClientOpt that names it and the processor option to use
// instead, rather than silently overriding it. To tell which options opts
// set, New applies them to two franz-go clients that are never started (no
// dial, no request) and closed at once; hooks in opts (kgo.WithHooks) see
// those clients created and closed.
func ClientOpts(opts ...kgo.Opt) TxnOpt {
	return bothOpt(func(c *cfg) { c.clientOpts = append(c.clientOpts, opts...) })
}

// ConsumerOpts adds franz-go options to the consumer client only (after
// ClientOpts): hooks and metrics plugins of the consumer (kgo.WithHooks with
// a kprom.Metrics), fetch sizes and waits. The options ClientOpts refuses
// are refused here too, with an error wrapping ErrClientOpt, found the same
// way (on probe clients that hooks see created and closed). With
// NewTransactional, whose one client consumes and produces, ConsumerOpts and
// ProducerOpts both go to that client.
func ConsumerOpts(opts ...kgo.Opt) TxnOpt {
	return bothOpt(func(c *cfg) { c.consumerOpts = append(c.consumerOpts, opts...) })
}

// ProducerOpts adds franz-go options to the producer client New creates for
// retry-topic and DLQ records (after ClientOpts): its hooks, batching and
// retries (kgo.RecordRetries, kgo.UnknownTopicRetries...). acks (always
// all), kgo.DisableIdempotentWrite (the producer is always idempotent) and
// linger (always 0) are refused, as with ClientOpts, with an error
// wrapping ErrClientOpt that names the option. It is an error
// together with Producer, whose client is used as given. See ConsumerOpts
// for NewTransactional.
func ProducerOpts(opts ...kgo.Opt) TxnOpt {
	return bothOpt(func(c *cfg) { c.producerOpts = append(c.producerOpts, opts...) })
}

// Producer sets the client used to write retry-topic and DLQ records. Default:
// the processor creates an idempotent producer (acks=all) and closes it on
// shutdown; a given producer is not closed.
func Producer(cl *kgo.Client) Opt { return opt(func(c *cfg) { c.producer = cl }) }

// DeadLetterTopic sets the DLQ topic. Default DLQTopic(group),
// "<group>.dlq". Kafka has no setting of its own for it (Kafka Connect's is
// errors.deadletterqueue.topic.name).
// An empty name is refused (an unset variable would otherwise fall back to
// the default without a word).
func DeadLetterTopic(name string) TxnOpt {
	return bothOpt(func(c *cfg) { c.dlqTopic, c.dlqTopicSet = name, true })
}

// RetryTopicPrefix sets the prefix of the retry topics: RetryTopics' n-th
// delay uses "<prefix><n>" (n from 1). Default "<group>.retry.", as
// RetryTopicNames. An empty prefix is refused.
func RetryTopicPrefix(prefix string) Opt {
	return opt(func(c *cfg) { c.retryPrefix, c.retryPrefixSet = prefix, true })
}

// validateKeyBlock checks the BlockKeys options and resolves the
// blocked-keys topic.
func (c *cfg) validateKeyBlock() []error {
	if c.keyBlock == KeyBlockOff {
		return nil
	}
	var errs []error
	if c.keyBlock > KeyBlockDeadLetters {
		errs = append(errs, fmt.Errorf("BlockKeys: %v, want KeyBlockOff, KeyBlockRetries or KeyBlockDeadLetters", c.keyBlock))
	}
	if c.ordering != OrderKey {
		errs = append(errs, fmt.Errorf("BlockKeys: needs WithOrdering(OrderKey), have %v", c.ordering))
	}
	if c.keyBlock == KeyBlockRetries && len(c.retryDelays) == 0 {
		errs = append(errs, errors.New("BlockKeys(KeyBlockRetries): needs RetryTopics (without them no record waits in a retry topic)"))
	}
	if c.keyBlock == KeyBlockDeadLetters && !c.dlq {
		errs = append(errs, errors.New("BlockKeys(KeyBlockDeadLetters): needs the DLQ (DeadLetter(true))"))
	}
	if c.maxBlockedKeys < 1 {
		errs = append(errs, fmt.Errorf("MaxBlockedKeys: %d, want >= 1", c.maxBlockedKeys))
	}
	if c.blockedTopic == "" {
		c.blockedTopic = BlockedKeysTopicName(c.group)
	}
	if c.blockedTopic == c.dlqTopic || slices.Contains(c.topics, c.blockedTopic) || slices.Contains(c.retryTopicNames(), c.blockedTopic) {
		errs = append(errs, fmt.Errorf("BlockedKeysTopic: %q is also a source, retry or DLQ topic", c.blockedTopic))
	}
	return errs
}

// retryTopicNames returns the retry topics, one per delay.
func (c *cfg) retryTopicNames() []string {
	out := make([]string, len(c.retryDelays))
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", c.retryPrefix, i+1)
	}
	return out
}

// DLQTopic returns the default dead-letter topic of a group: "<group>.dlq".
func DLQTopic(group string) string { return group + ".dlq" }

// RetryTopicNames returns the default retry topics of a group for n delays:
// "<group>.retry.1" .. "<group>.retry.<n>".
func RetryTopicNames(group string, n int) []string {
	out := make([]string, n)
	for i := range n {
		out[i] = fmt.Sprintf("%s.retry.%d", group, i+1)
	}
	return out
}

// withHooks installs test hooks. It is an option (not a field set after New)
// because the group may call OnPartitionsAssigned before New returns.
func withHooks(h hooks) Opt { return opt(func(c *cfg) { c.hooks = h }) }

// WithBatchHandler sets a handler that receives several records at once, as
// an alternative to WithHandler (one of the two is required; with both, h
// takes the batches and the Handler the records handled one at a time,
// below). New only: NewTransactional refuses it.
//
// Batching does not linger: when a worker is free it takes what is ready at
// that moment (the next record of each key or partition that is not in
// flight, and the records of that key or partition queued behind it), up to MaxBatch
// records, and calls h with them. Under a light load batches hold one
// record, so latency does not grow; they fill up when records queue while
// the workers are busy.
//
// Commit: the records of a batch complete together, under one lock, after h
// returned nil: an offset commit covers all of them or none, and never a
// record of a batch still running.
//
// Partial failure: when h returns a *BatchError (FailRecords, StopAt), the
// records it reports done complete and the failed ones go through the
// normal path below; see BatchError for the records behind a failed one.
//
// Failure: when h returns any other error or panics (or a batch's deadline
// passes), no record of the batch is completed and each of them is handled
// again one at a time, through the normal path: the Handler (or, without
// one, h with a one-record slice), with in-place retries, retry topics and
// the DLQ as configured (MaxAttempts, RetryTopics, DeadLetter). So a poison
// record goes to the DLQ alone and the others are applied; since a failed
// batch may have had effects before failing, effects must be idempotent or
// transactional (an inbox, package inbox, applied in the batch's own
// transaction: a rolled-back batch leaves nothing). The batch failure does
// not count as an attempt of its records. Records that wait for a retry
// (an earlier record of their key or partition is failing), records of retry topics and records that fell
// back are never put in a batch.
func WithBatchHandler(h BatchHandler) Opt {
	return opt(func(c *cfg) {
		if c.batch == nil {
			c.batch = &batchCfg{max: DefaultMaxBatch}
		}
		c.batch.handler, c.batchNil = h, h == nil
	})
}

// MaxBatch sets the most records one BatchHandler (New) or TxnBatchHandler
// (NewTransactional) call receives. Default DefaultMaxBatch (100); it has
// no effect without WithBatchHandler or WithTxnBatchHandler. Must be >= 1
// (1 makes every batch one record): New and NewTransactional refuse a
// smaller value whether or not a batch handler is given.
func MaxBatch(n int) TxnOpt {
	return bothOpt(func(c *cfg) {
		if c.batch == nil {
			c.batch = &batchCfg{}
		}
		c.batch.max, c.batch.maxSet = n, true
	})
}

// OnDeadLetter sets a function called after a record was written to the DLQ,
// with the record as the handler saw it (for a record that came through
// retry topics: its original topic, partition, offset and timestamp) and
// the handler's last error, the reason it was dead-lettered (IsPermanent and
// ErrorClass tell which kind). Default none. Use it to alert, count by
// reason or keep an audit trail; the DLQ record itself carries the same as
// headers.
//
// New: fn runs on the worker goroutine that wrote the record, once the
// broker acknowledged the write (acks=all) and before the record's offset
// may be committed, with no lock of the runtime held. While it runs it
// holds that worker's Concurrency slot and the record's partition
// (OrderPartition) or key (OrderKey) waits; it may block briefly, and may
// call Health. A record written again after a crash or a rebalance (the
// commit had not passed it) is reported again: at-least-once, like the
// DLQ write.
//
// NewTransactional: fn runs on Run's goroutine after the transaction that
// wrote the record committed, before the next transaction begins, so
// blocking delays all of this member's processing. An aborted transaction
// reports nothing: its DLQ records were never visible.
//
// Calls are never concurrent for one record, but are for records of
// different partitions or keys (New): fn must be safe for concurrent use.
// A panic in fn is recovered and logged at ERROR; it does not affect the
// record.
func OnDeadLetter(fn func(r *kgo.Record, reason error)) TxnOpt {
	return bothOpt(func(c *cfg) { c.onDeadLetter = fn })
}

// HeaderPrefix sets the prefix of the headers the runtime writes on
// retry-topic and DLQ records (see HeaderOriginalTopic and the others) and
// replaces on every hop. Default DefaultHeaderPrefix ("ordercast-"). Every
// member of a group, and every tool reading its DLQ, must use the same.
func HeaderPrefix(prefix string) TxnOpt { return bothOpt(func(c *cfg) { c.headerPrefix = prefix }) }

// StartOffset sets where the group begins reading an input partition for
// which it has no committed offset. Default Earliest. Kafka setting:
// auto.offset.reset (for a group without offsets; franz-go's
// ConsumeStartOffset).
//
// It applies to input partitions only, and only once per partition: when a
// member is first assigned a partition without a committed offset, it
// resolves Latest or AtTime to an offset (ListOffsets, read_committed) and
// commits that offset for the group before it fetches anything. A partition
// that then receives no record while the group is down is read from that
// committed offset on the next start, not resolved again: so with Latest no
// record written after the group first started is skipped, whichever
// partitions were quiet. A member that cannot resolve or commit the start
// offset (a broker error, a rebalance) leaves its group session and rejoins,
// so the partition is never read from an unresolved position. Earliest needs
// no commit (the log start only moves forward by deleting records) and costs
// nothing.
//
// It does not apply to a committed offset that is out of range (below the log
// start after retention deleted records, or past the end after the broker
// lost data). Kafka's consumer applies auto.offset.reset then too, so
// "latest" would skip every record still in the log; this runtime resumes at
// the log start instead, whatever StartOffset says: at-least-once, at the cost
// of handling again the records kept past a broker's data loss.
//
// It does not apply to the group's retry topics: they are always read from
// their start. Every record in "<group>.retry.<n>" was written by the group
// itself after it had completed (and committed) the input record, so skipping
// one would lose it; and in a new group's retry topics nothing older than the
// group can be found, unless the group name is reused after its offsets
// expired (offsets.retention.minutes) while the retry topics kept records: then
// those are handled again. Delete and recreate the retry topics before reusing a
// group name.
//
// With Latest, a partition added to an input topic after the group first
// started (CreatePartitions while the group runs, or while it is down) has
// no commit either, yet its records were all written after that start:
// resolving it to its end would skip those written before a member is
// assigned it (the flaw of Kafka's consumer with auto.offset.reset=latest,
// which KIP-842 proposes to fix by resetting new partitions to earliest).
// So Latest means "the records written after the group's first start, time
// T" (Unix milliseconds, the clock of the member that started first). T
// travels in the metadata of the commits the runtime makes for input
// partitions ("oc1:<map>;t=<T>", see CommitMetadataMaxBytes; at most 22
// bytes after the map, taken from that budget): the first time a member is assigned partitions,
// it reads the group's committed offsets (one OffsetFetch) and keeps the
// smallest T they carry. If none does and a partition needs resolving, the
// group is at its first start: T is now and partitions start at their end.
// Otherwise a partition without a commit is resolved as AtTime(T): the
// first record whose timestamp is at or after T (ListOffsets by timestamp,
// read_committed), or its end. Limits: a record of a new partition is
// compared by its timestamp, so one stamped before T (a producer setting
// old timestamps, a producer clock behind the member's) is skipped; commits
// by other clients (or an admin offset reset, kafka-consumer-groups
// --reset-offsets) carry no T, and once no commit of the group carries T
// any more, a new partition is resolved to its end, as at a first start
// (and that member's T, now, is carried from then on). Earliest and AtTime
// need no T and read nothing more.
//
// NewTransactional: the same, the start offset being committed with an
// OffsetCommit (outside any transaction) before the partition is fetched,
// and T set in the metadata of every partition of the TxnOffsetCommit of
// each transaction.
//
// A partition added to an input topic while the group runs is seen at the
// client's next metadata refresh (franz-go's MetadataMaxAge, 5 minutes by
// default like Kafka's metadata.max.age.ms; kgo.MetadataMaxAge with
// kgo.MetadataMinAge in ClientOpts to see it sooner). The zero Start is
// Earliest.
func StartOffset(s Start) TxnOpt { return bothOpt(func(c *cfg) { c.start = s }) }

// HandleTopic gives the records of topic their own handler: a Processor
// made with HandleTopic options calls h for the records of topic (and for
// those that come back from the group's retry topics with topic as their
// original topic: the handler sees r.Topic == topic) and the WithHandler
// handler for the records of the other topics. Ordering, retries, the DLQ,
// MaxInFlight and Concurrency are shared by all topics, as with one
// handler.
//
// New refuses (an error naming the topic) a HandleTopic for a topic not in
// Topics, two HandleTopic for one topic, a nil h, and a topic of Topics that
// has neither a HandleTopic nor a WithHandler to fall back on; WithHandler is
// not required when every topic has its own. NewTransactional does not take
// it (an Opt only; its TxnHandler sees r.Topic and can dispatch on it). See
// ByTopic for the same dispatch as a Handler.
func HandleTopic(topic string, h Handler) Opt {
	return opt(func(c *cfg) { c.topicHandlers = append(c.topicHandlers, topicHandler{topic, h}) })
}

// CreateTopics makes Run create the DLQ and the retry topics when they do
// not exist, before it joins the group: with the partition count of the
// source topic (the largest, with several Topics) and the cluster's default
// replication factor and configs (CreateTopics with replication factor -1,
// KIP-464; Kafka 2.4+). Default false: a missing topic is a
// *MissingTopicError from Run, since topic layout is usually the operator's.
// Either way the runtime checks the topics once at start; a topic deleted
// later makes the writes fail (see Health.Blocked). The check waits out a
// cluster that is briefly unreachable (a transient error: a broker
// restarting, a dropped connection, a coordinator moving) for up to 30 s,
// asking again with a backoff of 250 ms doubling to 2 s, and calls a topic
// missing only when the answers lack it for 5 s, 3 answers at least (a
// broker that has just restarted can answer before it has caught up with
// the cluster's metadata, and one that has just created the topic before
// its metadata has it).
func CreateTopics(create bool) TxnOpt { return bothOpt(func(c *cfg) { c.createTopics = create }) }
