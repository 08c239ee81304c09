package processor

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Queue mode: consumption as a member of a share group (KIP-932, queues for
// Kafka). The broker hands each record to one member at a time under an
// acquisition lock and counts its deliveries; the member acknowledges each
// record (accept, release, reject) instead of committing offsets. See
// NewQueue and docs/runtime.md, "Queue mode (share groups)".

// DefaultShareDeliveryLimit is the broker's default
// group.share.delivery.count.limit (KIP-932): the deliveries of a record
// after which the broker archives it. NewQueue's members use it when they
// cannot read the group's limit.
const DefaultShareDeliveryLimit = 5

// MaxDeliveries sets on which delivery of a record (the broker's delivery
// count, from 1) a transient failure sends it to the DLQ instead of
// releasing it for another delivery (NewQueue only; New refuses it: its
// in-place attempts are MaxAttempts). Default 0: the group's limit, the
// share.delivery.count.limit group config (KIP-1240) or else the broker's
// group.share.delivery.count.limit (KIP-932, default 5). A value above that
// limit acts as the limit, since the broker archives a record after its
// last allowed delivery; a negative value is refused.
func MaxDeliveries(n int) Opt { return opt(func(c *cfg) { c.maxDeliveries = n }) }

// DefaultShareSessions is the number of share sessions a QueueProcessor
// runs when ShareSessions is not given.
const DefaultShareSessions = 3

// ShareSessions sets how many share sessions a QueueProcessor runs (NewQueue
// only; New refuses it): n franz-go clients, each its own member of the
// share group, each polling up to Concurrency records (times
// ShareAcquireMultiple), their records sharing the processor's Concurrency
// handler slots. Default 3 (DefaultShareSessions); n must be >= 1.
//
// One session polls again only once every record of its previous poll is
// acknowledged, so with n = 1 a member's handlers idle while it polls, and
// one slow record idles them all until it finishes. With n = 2 one session
// acquires while the other's records run, and a slow record holds back
// only its own session's next poll. The processor then holds up to
// n x Concurrency records acquired (n x ShareAcquireMultiple x
// Concurrency with that option; locked to it by the broker, their locks
// renewed), of which at most Concurrency are in their handlers at once;
// the others wait for a slot. Each session is a member of the
// group: the group lists n members per process (ordercast groups), and
// every member adds fetches that contend for the same partitions at the
// broker. With a 20 ms handler, 12 processors on 6 partitions
// (BenchmarkShareVsGroup, docs/benchmarks.md "Share groups against a
// consumer group") gave against a consumer group, on Kafka 4.4, medians of
// 1.23x with 1 session, 1.67x with 2 and 1.81x with 3 (1.22x, 1.65x and
// 1.84x on the embedded broker). 3 is the default: the most the real
// broker gave, at 3 x Concurrency records held.
func ShareSessions(n int) Opt {
	return opt(func(c *cfg) { c.shareSessions, c.shareSessionsSet = n, true })
}

// MaxShareAcquireMultiple is the largest ShareAcquireMultiple.
const MaxShareAcquireMultiple = 4

// DefaultShareAcquireMultiple is ShareAcquireMultiple's default: 2, the
// value that took 12 queue-mode processors (3 share sessions each, a 20 ms
// handler, 6 partitions) to 1.93 times the rate of 12 consumer-group
// members on Kafka 4.4, against 1.80 times with 1, side by side in one run
// on a quiet machine (BenchmarkShareVsGroup, docs/benchmarks.md).
const DefaultShareAcquireMultiple = 2

// ShareAcquireMultiple sets how many records each share session's poll
// acquires, as a multiple k of Concurrency: up to k x Concurrency records
// per ShareFetch (NewQueue only; New refuses it). Default 2
// (DefaultShareAcquireMultiple); k must be from 1 to 4
// (MaxShareAcquireMultiple): NewQueue returns an error for another value.
// The records are KIP-932's acquired records.
//
// A session polls again only once every record of its poll is
// acknowledged, so each poll's round trip to the broker is paid once per
// k x Concurrency records instead of once per Concurrency. The processor
// then holds up to ShareSessions x k x Concurrency records acquired
// (locked to it by the broker, their locks renewed; Health().InFlight), of
// which at most Concurrency are in their handlers at once: more records
// wait for a handler slot, and a crash or a shutdown hands more records
// back to the broker (the crash: when it sees the connections close, else
// when their locks expire). Use 1 where a record waiting for a handler
// slot while another runs is to be avoided (a handler slower than the
// acquisition lock is long: the waiting records' locks are renewed, but
// each renewal is a request).
func ShareAcquireMultiple(k int) Opt {
	return opt(func(c *cfg) { c.shareAcquire, c.shareAcquireSet = k, true })
}

// QueueProcessor consumes topics as a member of a share group (one per
// share session, ShareSessions) and runs a Handler for every record it
// acquires. Create it with NewQueue, run it with Run. Its methods are safe
// for concurrent use.
type QueueProcessor struct {
	cfg      cfg
	sessions []*shareSession
	prod     *kgo.Client
	ownProd  bool
	// slots holds a token for every handler call running: Concurrency
	// in all, shared by the sessions.
	slots chan struct{}
	// limit is the delivery on which a transient failure is
	// dead-lettered: MaxDeliveries bounded by the group's limit, read by
	// Run before it joins.
	limit atomic.Int32
	// lockDur is the group's acquisition lock duration as Run read it (0:
	// unknown; the records' deadlines tell then).
	lockDur time.Duration
	// startLatest: the group starts a partition without share state at
	// its end (share.auto.offset.reset latest, as Run read or left it).
	startLatest bool

	mu      sync.Mutex
	held    int                   // records acquired and not acknowledged yet, over the sessions
	blocked map[*kgo.Record]error // records whose DLQ write keeps failing
	ran     bool
}

// shareSession is one share session of a QueueProcessor: a client that is
// a member of the share group, polling and acknowledging its own records.
type shareSession struct {
	q  *QueueProcessor
	cl *kgo.Client
	// stop is Run's stop context (set before the session polls).
	stop context.Context
	// acquired counts the records the session acquired (every delivery).
	acquired atomic.Int64

	mu sync.Mutex
	// deferred are the records released after stop: they are
	// acknowledged once no session has a fetch in flight (run).
	deferred []*kgo.Record
}

// queueRefused are the options that cannot apply to a share group, each
// with the field it sets (read on a cfg holding a sentinel in each) and
// why. A share group has no partitions of its own, offsets or order:
// the broker keeps each record's state and hands records to any member.
var queueRefused = []struct {
	name  string
	set   func(c *cfg) bool
	prime func(c *cfg)
	why   string
}{
	{"WithOrdering", func(c *cfg) bool { return c.ordering != -1 }, func(c *cfg) { c.ordering = -1 },
		"a share group hands records to members in no order"},
	{"RetryTopics", func(c *cfg) bool { return len(c.retryDelays) != 1 || c.retryDelays[0] != -1 }, func(c *cfg) { c.retryDelays = []time.Duration{-1} },
		"a transient failure is released to the broker, which redelivers it (Backoff, MaxDeliveries)"},
	{"RetryTopicPrefix", func(c *cfg) bool { return c.retryPrefix != "\x00" }, func(c *cfg) { c.retryPrefix = "\x00" },
		"there are no retry topics"},
	{"BlockKeys", func(c *cfg) bool { return c.keyBlock != 255 }, func(c *cfg) { c.keyBlock = 255 },
		"key order is not kept"},
	{"MaxBlockedKeys", func(c *cfg) bool { return c.maxBlockedKeys != -1 }, func(c *cfg) { c.maxBlockedKeys = -1 },
		"key order is not kept"},
	{"BlockedKeysTopic", func(c *cfg) bool { return c.blockedTopic != "\x00" }, func(c *cfg) { c.blockedTopic = "\x00" },
		"key order is not kept"},
	{"MaxAttempts", func(c *cfg) bool { return c.maxAttempts != -1 }, func(c *cfg) { c.maxAttempts = -1 },
		"every attempt is a delivery: use MaxDeliveries"},
	{"MaxInFlight", func(c *cfg) bool { return c.maxRecords != -1 || c.maxBytes != -1 }, func(c *cfg) { c.maxRecords, c.maxBytes = -1, -1 },
		"a member holds at most Concurrency records"},
	{"CommitInterval", func(c *cfg) bool { return c.commitInterval != -1 }, func(c *cfg) { c.commitInterval = -1 },
		"a share group has no offsets to commit: each record is acknowledged"},
	{"CommitRefreshInterval", func(c *cfg) bool { return c.commitRefresh != -1 }, func(c *cfg) { c.commitRefresh = -1 },
		"a share group has no offsets to commit"},
	{"CommitMetadataMaxBytes", func(c *cfg) bool { return c.metaMaxBytes != -1 }, func(c *cfg) { c.metaMaxBytes = -1 },
		"a share group has no offsets to commit"},
	{"StartOffset", func(c *cfg) bool { return c.start.kind != -1 }, func(c *cfg) { c.start.kind = -1 },
		"the group's share.auto.offset.reset config sets where a share group starts (Run sets earliest when the group has none)"},
	{"WithBatchHandler or MaxBatch", func(c *cfg) bool {
		return c.batch == nil || c.batch.max != -1 || c.batch.maxSet || c.batch.handler != nil
	}, func(c *cfg) { c.batch = &batchCfg{max: -1} },
		"each record is acknowledged on its own"},
	{"GroupProtocol", func(c *cfg) bool { return c.groupProtocol != "\x00" }, func(c *cfg) { c.groupProtocol = "\x00" },
		"a share group has a protocol of its own (KIP-932)"},
	{"InstanceID", func(c *cfg) bool { return c.instanceID != "\x00" }, func(c *cfg) { c.instanceID = "\x00" },
		"share groups have no static membership"},
	{"SessionTimeout", func(c *cfg) bool { return c.sessionTimeout != -1 }, func(c *cfg) { c.sessionTimeout = -1 },
		"the broker's group.share.session.timeout.ms sets it"},
	{"RebalanceTimeout", func(c *cfg) bool { return c.rebalanceTO != -1 }, func(c *cfg) { c.rebalanceTO = -1 },
		"share groups do not rebalance with a timeout: the broker assigns partitions to many members at once"},
	{"TransactionTimeout", func(c *cfg) bool { return c.txnTimeout != -1 }, func(c *cfg) { c.txnTimeout = -1 },
		"the queue mode is not transactional"},
	{"withHooks", func(c *cfg) bool { return !reflect.ValueOf(c.hooks).IsZero() }, func(c *cfg) { c.hooks = hooks{} },
		"the queue mode has no test hooks"},
}

// refusedQueueOpts names the options of opts that cannot apply to a share
// group: each option is applied alone to a cfg holding a sentinel in every
// field those options set.
func refusedQueueOpts(opts []Opt) error {
	var errs []error
	for i, o := range opts {
		var probe cfg
		for _, r := range queueRefused {
			r.prime(&probe)
		}
		o.apply(&probe)
		for _, r := range queueRefused {
			if r.set(&probe) {
				errs = append(errs, fmt.Errorf("%s (option %d): not in the queue mode: %s", r.name, i+1, r.why))
			}
		}
	}
	return errors.Join(errs...)
}

// NewQueue creates a QueueProcessor: a member of the share group Group
// (KIP-932; Kafka 4.2+ with share groups enabled, share.version >= 1; lock
// renewal needs KIP-1222, Kafka 4.2+) consuming Topics, with the same
// Handler, error classes, Backoff, DLQ record format and headers, metrics
// and shutdown as New. It does not contact the brokers; Run does.
//
// Delivery is at-least-once and in no order: the broker hands each record
// to one member at a time, under an acquisition lock (the group's
// share.record.lock.duration.ms, 30 s by default), and redelivers it when
// it is released or its lock expires. The member acknowledges each record
// after its handler call:
//
//   - nil: ACCEPT; the record is done for the group.
//   - a transient error on a delivery before the last (MaxDeliveries, the
//     broker's delivery count telling which one this is): the record is
//     kept for the Backoff of that attempt number, then RELEASEd, and the
//     broker delivers it again, to any member.
//   - a permanent error (IsPermanent), or a transient one on the last
//     delivery: the record is written to the DLQ (DeadLetterTopic, the
//     headers of New's DLQ records; HeaderAttempts is the delivery count),
//     OnDeadLetter is called, and then it is ACCEPTed. If the write fails
//     it is retried with Backoff (the record kept and its lock renewed;
//     Health.Blocked names it; its session polls no more meanwhile, the
//     others go on) until it succeeds or Run ends, which releases it. With DeadLetter(false) the record is REJECTed instead:
//     the broker archives it, or writes it to its own DLQ (KIP-1191).
//
// While a record is in its handler, its backoff or its DLQ write, the
// member renews its acquisition lock (AckRenew) every half of the lock
// duration (and of the client's ConnIdleTimeout, since the broker releases
// what a member holds when its connection closes), so a handler running
// longer than the lock keeps its record. HandlerTimeout (default 30 s)
// still bounds each call.
//
// The processor runs ShareSessions share sessions (default 3), each a
// franz-go client and a member of the group of its own. Each session's
// poll acquires up to Concurrency records (default 16; k x Concurrency with
// ShareAcquireMultiple(k); franz-go's ShareMaxRecords with
// ShareMaxRecordsStrict, no fetch ahead), and the session polls again once
// every one of them is acknowledged (franz-go accepts at a poll whatever
// the previous poll left unacknowledged, so none is left). The sessions
// share Concurrency handler slots: at most Concurrency handler calls run
// at once in the processor, and it holds at most ShareSessions x
// Concurrency records acquired (x ShareAcquireMultiple;
// Health().InFlight), the ones without a slot waiting for one, their locks
// renewed. A slow record therefore delays its own session's next poll,
// while the other sessions go on acquiring and handling records. The group lists
// ShareSessions members per processor, their client IDs ClientID with
// "-s0", "-s1"... appended (ClientID alone with one session).
//
// With WithMetrics, Run also exports the share group's backlog, read from
// the brokers every ShareLagInterval (share_lag, share_lag_total; see
// ShareLagInterval).
//
// Options: ShareSessions, ShareAcquireMultiple, MaxDeliveries and
// ShareLagInterval are NewQueue's own. Brokers, Group, Topics,
// WithHandler, HandleTopic, Concurrency, HandlerTimeout, Backoff,
// DeadLetter, DeadLetterTopic, CreateTopics, HeaderPrefix, OnDeadLetter,
// DrainTimeout, ClientID, Logger, WithMetrics, Tracing, ClientOpts,
// ConsumerOpts, ProducerOpts and Producer mean what they mean for New. The others cannot apply to a share group
// (WithOrdering, RetryTopics, RetryTopicPrefix, BlockKeys,
// MaxBlockedKeys, BlockedKeysTopic, MaxAttempts, MaxInFlight,
// CommitInterval, CommitRefreshInterval, CommitMetadataMaxBytes,
// StartOffset, WithBatchHandler, MaxBatch, GroupProtocol, InstanceID,
// SessionTimeout, RebalanceTimeout, TransactionTimeout): NewQueue refuses
// each, naming it, its position and why. It returns an error listing every
// invalid or refused option.
func NewQueue(opts ...Opt) (*QueueProcessor, error) {
	c := defaultCfg()
	c.queue = true
	if err := applyOpts(&c, opts); err != nil {
		return nil, fmt.Errorf("processor: invalid config: %w", err)
	}
	// Every refused option and every invalid value, in one error.
	if err := errors.Join(refusedQueueOpts(opts), c.validate()); err != nil {
		return nil, fmt.Errorf("processor: invalid config: %w", err)
	}
	if c.clientID == "" {
		c.clientID = c.group + "-" + randomID()
	}
	c.logger = c.logger.With("group", c.group, "client_id", c.clientID)
	if !c.shareSessionsSet {
		c.shareSessions = DefaultShareSessions
	}
	q := &QueueProcessor{cfg: c, blocked: make(map[*kgo.Record]error), slots: make(chan struct{}, c.concurrency)}
	q.limit.Store(DefaultShareDeliveryLimit)
	if c.maxDeliveries > 0 {
		q.limit.Store(int32(min(c.maxDeliveries, math.MaxInt32))) // bounded by the group's limit once Run reads it
	}
	c.metrics.initGroup(c.group, c.topics, nil, c.dlqTarget())
	c.metrics.initQueue(c.group, c.topics)

	closeAll := func() {
		for _, s := range q.sessions {
			s.cl.Close()
		}
	}
	for i := range c.shareSessions {
		id := c.clientID
		if c.shareSessions > 1 {
			id += "-s" + strconv.Itoa(i)
		}
		kopts := []kgo.Opt{kgo.FetchMaxWait(memberFetchMaxWait)}
		kopts = append(kopts, c.clientOpts...)
		kopts = append(kopts, c.consumerOpts...)
		kopts = append(kopts,
			kgo.SeedBrokers(c.brokers...),
			kgo.ClientID(id),
			kgo.ShareGroup(c.group),
			kgo.ShareMaxRecords(int32(min(c.pollMax(), 1<<30))),
			kgo.ShareMaxRecordsStrict(),
			kgo.MaxConcurrentFetches(0), // acquire only while polling
			kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			// No ConsumeTopics: franz-go joins as soon as its client
			// knows a topic, and the group's configs are read first (Run).
		)
		cl, err := kgo.NewClient(kopts...)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("processor: consumer client: %w", err)
		}
		q.sessions = append(q.sessions, &shareSession{q: q, cl: cl})
	}
	if c.producer != nil {
		q.prod = c.producer
	} else {
		popts := append(append([]kgo.Opt{}, c.clientOpts...), c.producerOpts...)
		popts = append(popts,
			kgo.SeedBrokers(c.brokers...),
			kgo.ClientID(c.clientID+"-dlq"),
			kgo.RequiredAcks(kgo.AllISRAcks()),
			kgo.ProducerLinger(0),
		)
		prod, err := kgo.NewClient(popts...)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("processor: producer client: %w", err)
		}
		q.prod, q.ownProd = prod, true
	}
	return q, nil
}

// Client returns the first share session's franz-go client (for admin
// lookups and metrics hooks; Clients returns every session's). Do not poll
// or acknowledge with it.
func (q *QueueProcessor) Client() *kgo.Client { return q.sessions[0].cl }

// Clients returns the franz-go client of every share session
// (ShareSessions of them), in order. Do not poll or acknowledge with them.
func (q *QueueProcessor) Clients() []*kgo.Client {
	cls := make([]*kgo.Client, len(q.sessions))
	for i, s := range q.sessions {
		cls[i] = s.cl
	}
	return cls
}

// Group returns the share group.
func (q *QueueProcessor) Group() string { return q.cfg.group }

// DeliveryLimit returns the delivery on which a transient failure is
// dead-lettered: MaxDeliveries bounded by the group's limit once Run has
// read it (before: MaxDeliveries, or DefaultShareDeliveryLimit).
func (q *QueueProcessor) DeliveryLimit() int { return int(q.limit.Load()) }

// QueueHealth is a point-in-time view of a QueueProcessor.
type QueueHealth struct {
	Group    string `json:"group"`
	ClientID string `json:"clientId"`
	// Sessions is the number of share sessions (ShareSessions): members
	// of the group.
	Sessions int `json:"sessions"`
	// InFlight counts the records acquired and not acknowledged yet, over
	// every session (in their handler, waiting for a handler slot, in
	// their backoff or their DLQ write): at most Sessions x Concurrency
	// (x ShareAcquireMultiple).
	InFlight int `json:"inFlight"`
	// DeliveryLimit is DeliveryLimit().
	DeliveryLimit int `json:"deliveryLimit"`
	// Blocked lists the records whose DLQ write keeps failing, as
	// "topic[partition]@offset: error".
	Blocked []string `json:"blocked,omitempty"`
}

// Health returns the processor's current state.
func (q *QueueProcessor) Health() QueueHealth {
	q.mu.Lock()
	defer q.mu.Unlock()
	h := QueueHealth{Group: q.cfg.group, ClientID: q.cfg.clientID, Sessions: len(q.sessions), InFlight: q.held, DeliveryLimit: q.DeliveryLimit()}
	for r, err := range q.blocked {
		h.Blocked = append(h.Blocked, fmt.Sprintf("%s[%d]@%d: %v", r.Topic, r.Partition, r.Offset, err))
	}
	return h
}

// Run joins the share group (every share session, ShareSessions, as a
// member) and handles records until ctx is cancelled or a fatal error
// occurs in any session (which stops them all, as a cancellation does). Before joining it checks the DLQ (a
// *MissingTopicError, or creates it with CreateTopics) and reads the
// group's configs: share.delivery.count.limit (else the broker's
// group.share.delivery.count.limit), share.record.lock.duration.ms, and
// share.auto.offset.reset, which it sets to earliest when the group has no
// value of its own (a new share group otherwise starts at the end of each
// partition); a failure to read or set them is logged at WARN and the
// defaults are used. With WithMetrics it then reads the group's backlog
// every ShareLagInterval until it returns, and removes those series as it
// returns.
//
// On cancellation it stops polling, releases at once the records waiting
// out a backoff, lets the handlers in flight finish for up to DrainTimeout
// (then cancels their contexts), acknowledges each record as its result
// says (a record whose handler was cancelled or failed is released, never
// dead-lettered), flushes each session's acknowledgements, leaves the
// group (every session) and closes its clients; it returns nil. It waits for every handler call to
// return. It returns ErrClosed if called twice, a *FatalGroupError or an
// *AuthorizationError when the broker refuses the member.
func (q *QueueProcessor) Run(ctx context.Context) error {
	q.mu.Lock()
	if q.ran {
		q.mu.Unlock()
		return ErrClosed
	}
	q.ran = true
	q.mu.Unlock()
	admin := q.sessions[0].cl
	defer func() {
		for _, s := range q.sessions {
			s.cl.Close() // a second Close is a no-op
		}
		if q.ownProd {
			q.prod.Close()
		}
	}()
	if err := ensureTopics(ctx, admin, &q.cfg, q.cfg.writeTopics(nil)); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	q.readGroupConfigs(ctx)

	// stop ends every session's polling: Run's ctx, or a fatal error in
	// one session. Handler contexts end DrainTimeout after it.
	stop, cancelStop := context.WithCancel(ctx)
	defer cancelStop()
	work, cancelWork := context.WithCancel(context.Background())
	defer cancelWork()
	stopDrain := context.AfterFunc(stop, func() { time.AfterFunc(q.cfg.drainTimeout, cancelWork) })
	defer stopDrain()

	var (
		wg      sync.WaitGroup
		polling sync.WaitGroup // sessions that may have a fetch in flight
		errMu   sync.Mutex
		runErrs []error
	)
	var lagDone chan struct{}
	if q.cfg.metrics != nil {
		lagDone = make(chan struct{})
		go func() { defer close(lagDone); q.reportShareLag(stop) }()
	}
	polling.Add(len(q.sessions))
	quiet := make(chan struct{})
	go func() { polling.Wait(); close(quiet) }()
	for _, s := range q.sessions {
		s.stop = stop
		s.cl.AddConsumeTopics(q.cfg.topics...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.run(work, &polling, quiet); err != nil {
				errMu.Lock()
				runErrs = append(runErrs, err)
				errMu.Unlock()
				cancelStop()
			}
		}()
	}
	wg.Wait()
	cancelStop()
	if lagDone != nil {
		<-lagDone
	}
	q.cfg.logger.Info("processor stopped")
	if len(runErrs) > 0 {
		return runErrs[0] // the first; the others followed from it or repeat it
	}
	return nil
}

// run polls and handles the session's records until s.stop is cancelled
// or a fatal error, which it returns; then it flushes the session's
// acknowledgements and closes its client (leaving the group). work is the
// handlers' context. polling counts the sessions that may still have a
// fetch in flight, quiet is closed when none has.
//
// The records released after stop are acknowledged only once quiet is
// closed (or after quietWait): a session leaving the group waits for its
// last fetch (up to the fetch's max wait), which would acquire them, and
// release them again as it leaves, spending one of their deliveries.
func (s *shareSession) run(work context.Context, polling *sync.WaitGroup, quiet <-chan struct{}) error {
	q := s.q
	ctx := s.stop
	var runErr error
	for ctx.Err() == nil {
		fetches := s.cl.PollRecords(ctx, q.cfg.pollMax())
		if fetches.IsClientClosed() {
			runErr = errors.New("processor: client closed")
			break
		}
		var fatal error
		fetches.EachError(func(t string, part int32, err error) {
			if errors.Is(err, context.Canceled) || (errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil) {
				return // Run's context ended the poll (a cancel or a deadline): a stop, not a fetch error
			}
			if ae := fetchAuthzError(q.cfg.group, t, err); ae != nil {
				fatal = ae
				return
			}
			if f := fatalGroupError(q.cfg.group, err); f != nil {
				fatal = f
				return
			}
			q.cfg.logger.Warn("fetch error", "topic", t, "partition", part, "error", err)
			q.cfg.metrics.fetchError(q.cfg.group)
		})
		if recs := fetches.Records(); len(recs) > 0 {
			s.runBatch(ctx, work, recs)
		}
		if fatal != nil {
			runErr = fatal
			break
		}
	}
	// Every handler call of the session has returned: no more deferrals.
	s.mu.Lock()
	deferred := s.deferred
	s.deferred = nil
	s.mu.Unlock()
	flush := func() {
		flushCtx, cancel := context.WithTimeout(context.Background(), max(q.cfg.drainTimeout, time.Second))
		if err := s.cl.FlushAcks(flushCtx); err != nil {
			q.cfg.logger.Warn("flushing acknowledgements at shutdown", "error", err)
		}
		cancel()
	}
	if len(deferred) == 0 {
		// Possibly in a poll when stopped: a fetch may be in flight
		// until the client has left.
		flush()
		s.cl.Close()
		polling.Done()
		return runErr
	}
	// The session's last poll returned records and it has not polled
	// since (no fetch ahead): no fetch in flight.
	polling.Done()
	t := time.NewTimer(quietWait)
	select {
	case <-quiet:
	case <-t.C:
	}
	t.Stop()
	for _, r := range deferred {
		r.Ack(kgo.AckRelease)
	}
	flush()
	s.cl.Close()
	return runErr
}

// pollMax is how many records a share session's poll acquires at most.
func (c *cfg) pollMax() int {
	k := c.shareAcquire
	if !c.shareAcquireSet {
		k = DefaultShareAcquireMultiple
	}
	return c.concurrency * max(k, 1)
}

// quietWait bounds how long a stopping session waits for the others to
// leave before it releases its records: their last fetch's max wait and
// the leave request, with room.
const quietWait = memberFetchMaxWait + 5*time.Second

// readGroupConfigs reads the group's delivery limit and lock duration, and
// sets share.auto.offset.reset=earliest when the group has no value.
func (q *QueueProcessor) readGroupConfigs(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, topicCheckTimeout)
	defer cancel()
	limit := int32(0)
	req := kmsg.NewPtrDescribeConfigsRequest()
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	res.ResourceName = q.cfg.group
	res.ConfigNames = []string{"share.delivery.count.limit", "share.record.lock.duration.ms", "share.auto.offset.reset"}
	req.Resources = append(req.Resources, res)
	setReset := false
	resp, err := req.RequestWith(ctx, q.sessions[0].cl)
	if err == nil && len(resp.Resources) == 1 {
		if e := errCode(resp.Resources[0].ErrorCode); e != nil {
			err = e
		}
	}
	if err != nil {
		q.cfg.logger.Warn("reading the share group's configs (delivery limit, lock duration, start): using the defaults", "error", err)
	} else {
		for _, c := range resp.Resources[0].Configs {
			v := ""
			if c.Value != nil {
				v = *c.Value
			}
			switch c.Name {
			case "share.delivery.count.limit":
				if n, err := strconv.Atoi(v); err == nil && n > 0 {
					limit = int32(n)
				}
			case "share.record.lock.duration.ms":
				if n, err := strconv.Atoi(v); err == nil && n > 0 {
					q.lockDur = time.Duration(n) * time.Millisecond
				}
			case "share.auto.offset.reset":
				setReset = c.Source != kmsg.ConfigSourceGroupConfig
				q.startLatest = !setReset && v == "latest"
			}
		}
		if limit == 0 {
			limit = q.brokerDeliveryLimit(ctx)
		}
	}
	if limit == 0 {
		limit = DefaultShareDeliveryLimit
	}
	eff := limit
	if n := q.cfg.maxDeliveries; n > 0 && int32(n) < limit {
		eff = int32(n)
	} else if n > 0 {
		q.cfg.logger.Warn("MaxDeliveries above the share group's delivery limit: the limit applies", "max_deliveries", n, "limit", limit)
	}
	q.limit.Store(eff)
	if !setReset {
		return
	}
	alter := kmsg.NewPtrIncrementalAlterConfigsRequest()
	ar := kmsg.NewIncrementalAlterConfigsRequestResource()
	ar.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	ar.ResourceName = q.cfg.group
	cv := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	cv.Name = "share.auto.offset.reset"
	cv.Op = kmsg.IncrementalAlterConfigOpSet
	cv.Value = kmsg.StringPtr("earliest")
	ar.Configs = append(ar.Configs, cv)
	alter.Resources = append(alter.Resources, ar)
	aresp, err := alter.RequestWith(ctx, q.sessions[0].cl)
	if err == nil && len(aresp.Resources) == 1 {
		err = errCode(aresp.Resources[0].ErrorCode)
	}
	if err != nil {
		q.startLatest = true
		q.cfg.logger.Warn("setting share.auto.offset.reset=earliest on the share group (records written before its first member joined are not delivered)", "error", err)
	}
}

// brokerDeliveryLimit reads group.share.delivery.count.limit from any
// broker; 0 when it cannot.
func (q *QueueProcessor) brokerDeliveryLimit(ctx context.Context) int32 {
	req := kmsg.NewPtrDescribeConfigsRequest()
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeBroker
	res.ConfigNames = []string{"group.share.delivery.count.limit"}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, q.sessions[0].cl)
	if err != nil || len(resp.Resources) != 1 || resp.Resources[0].ErrorCode != 0 {
		return 0
	}
	for _, c := range resp.Resources[0].Configs {
		if c.Value != nil {
			if n, err := strconv.Atoi(*c.Value); err == nil && n > 0 {
				return int32(n)
			}
		}
	}
	return 0
}

// queueRec is one acquired record on its way to its acknowledgement.
type queueRec struct {
	s       *shareSession
	r       *kgo.Record
	done    atomic.Bool // acknowledged with a terminal status
	renewAt time.Time   // the renewer's own (one goroutine)
}

// ackKind is a terminal acknowledgement.
type ackKind int

const (
	ackAccept ackKind = iota
	ackRelease
	ackReject
)

// runBatch handles the records of one poll of the session, one goroutine
// each (a poll holds at most ShareAcquireMultiple x Concurrency records),
// each waiting for one of
// the processor's handler slots, renewing the locks of those not
// acknowledged yet, and returns once every one is acknowledged.
func (s *shareSession) runBatch(ctx, work context.Context, recs []*kgo.Record) {
	q := s.q
	now := time.Now()
	every := s.renewEvery(recs[0], now)
	batch := make([]*queueRec, len(recs))
	for i, r := range recs {
		batch[i] = &queueRec{s: s, r: r, renewAt: now.Add(every)}
		q.cfg.metrics.queueAcquired(q.cfg.group, r.Topic, r.DeliveryCount())
	}
	s.acquired.Add(int64(len(recs)))
	q.mu.Lock()
	q.held += len(recs)
	q.mu.Unlock()
	stopRenew := make(chan struct{})
	renewDone := make(chan struct{})
	go func() { defer close(renewDone); s.renew(batch, every, stopRenew) }()
	var wg sync.WaitGroup
	for _, qr := range batch {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q.handle(ctx, work, qr)
		}()
	}
	wg.Wait()
	close(stopRenew)
	<-renewDone
}

// renewEvery is how often a held record's lock is renewed: half the lock
// duration (the group's, or what r's acquisition deadline leaves from now,
// whichever is shorter) and half the client's ConnIdleTimeout, at least
// 50ms.
func (s *shareSession) renewEvery(r *kgo.Record, now time.Time) time.Duration {
	lock := s.q.lockDur
	if d := r.AcquisitionDeadline(); !d.IsZero() && (lock == 0 || d.Sub(now) < lock) {
		lock = d.Sub(now)
	}
	if lock <= 0 {
		lock = 30 * time.Second
	}
	every := lock / 2
	if idle, ok := s.cl.OptValue(kgo.ConnIdleTimeout).(time.Duration); ok && idle > 0 {
		every = min(every, idle/2)
	}
	return max(every, 50*time.Millisecond)
}

// renew renews the locks of the records of batch not yet acknowledged,
// each every interval, until stop is closed.
func (s *shareSession) renew(batch []*queueRec, every time.Duration, stop <-chan struct{}) {
	q := s.q
	t := time.NewTicker(max(every/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			renewed := false
			for _, qr := range batch {
				if qr.done.Load() || now.Before(qr.renewAt) {
					continue
				}
				qr.r.Ack(kgo.AckRenew)
				qr.renewAt = now.Add(every)
				renewed = true
				q.cfg.metrics.queueRenewed(q.cfg.group)
			}
			if renewed {
				// Without a poll in progress (no fetch ahead) the
				// client sends acknowledgements only when flushed.
				ctx, cancel := context.WithTimeout(context.Background(), every)
				if err := s.cl.FlushAcks(ctx); err != nil {
					q.cfg.logger.Warn("sending lock renewals", "error", err)
				}
				cancel()
			}
		}
	}
}

// ack acknowledges qr with a terminal status; a release after stop is
// left to the session's end (shareSession.run).
func (q *QueueProcessor) ack(qr *queueRec, k ackKind) {
	switch k {
	case ackAccept:
		qr.r.Ack(kgo.AckAccept)
	case ackRelease:
		if qr.s.stop.Err() != nil {
			qr.s.mu.Lock()
			qr.s.deferred = append(qr.s.deferred, qr.r)
			qr.s.mu.Unlock()
		} else {
			qr.r.Ack(kgo.AckRelease)
		}
	case ackReject:
		qr.r.Ack(kgo.AckReject)
	}
	qr.done.Store(true)
	q.cfg.metrics.queueAcked(q.cfg.group, qr.r.Topic, k)
	q.mu.Lock()
	q.held--
	delete(q.blocked, qr.r)
	q.mu.Unlock()
}

// handle runs the handler for qr and acknowledges it (see NewQueue). ctx
// is Run's (cancelled: shutdown has begun), work the handlers' (cancelled
// DrainTimeout later).
func (q *QueueProcessor) handle(ctx, work context.Context, qr *queueRec) {
	if ctx.Err() != nil {
		q.ack(qr, ackRelease) // fetched as the member stopped
		return
	}
	r := qr.r
	dc := int(r.DeliveryCount())
	select {
	case q.slots <- struct{}{}:
	case <-ctx.Done():
		q.ack(qr, ackRelease) // shutdown while waiting for a handler slot
		return
	}
	err := q.call(work, r, dc)
	<-q.slots
	switch {
	case err == nil:
		q.ack(qr, ackAccept)
		return
	case work.Err() != nil || ctx.Err() != nil && !IsPermanent(err):
		// Cancelled by the shutdown, or failed while it runs: the next
		// delivery decides (never dead-lettered for the shutdown).
		q.ack(qr, ackRelease)
		return
	case !IsPermanent(err) && dc < q.DeliveryLimit():
		q.cfg.logger.Warn("handler failed: releasing the record for redelivery", "topic", r.Topic, "partition", r.Partition,
			"offset", r.Offset, "delivery", dc, "error", err)
		q.cfg.metrics.retried(q.cfg.group, r.Topic)
		t := time.NewTimer(backoff(dc, q.cfg.backoffMin, q.cfg.backoffMax))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		q.ack(qr, ackRelease)
		return
	}
	if !q.cfg.dlq {
		q.cfg.logger.Warn("handler failed for good, no DLQ: rejecting the record (the broker archives it)", "topic", r.Topic,
			"partition", r.Partition, "offset", r.Offset, "delivery", dc, "error_class", ErrorClass(err), "error", err)
		q.ack(qr, ackReject)
		return
	}
	q.deadLetter(ctx, work, qr, dc, err)
}

// deadLetter writes qr to the DLQ, retrying with Backoff until it is
// written (then accepts it) or the shutdown (then releases it).
func (q *QueueProcessor) deadLetter(ctx, work context.Context, qr *queueRec, dc int, cause error) {
	r := qr.r
	now := time.Now()
	it := &item{rec: r, view: r, fail: &itemFail{attempts: dc, first: now, last: now, lastErr: cause, target: q.cfg.dlqTopic}}
	for try := 1; ; try++ {
		to, err := q.forward(work, it)
		if err == nil {
			q.cfg.metrics.forwarded(q.cfg.group, q.cfg.dlqTopic, true)
			logDeadLetter(&q.cfg, r, to, cause)
			if q.cfg.onDeadLetter != nil {
				callDeadLetter(&q.cfg, r, cause)
			}
			q.ack(qr, ackAccept)
			return
		}
		q.cfg.metrics.forwardFailed(q.cfg.group, q.cfg.dlqTopic)
		q.cfg.logger.Error("DLQ write failed: the record is kept and the write retried", "topic", r.Topic, "partition", r.Partition,
			"offset", r.Offset, "dlq_topic", q.cfg.dlqTopic, "error", err)
		q.mu.Lock()
		q.blocked[r] = err
		q.mu.Unlock()
		t := time.NewTimer(backoff(try, q.cfg.backoffMin, q.cfg.backoffMax))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			q.ack(qr, ackRelease)
			return
		}
	}
}

// forward writes it's record to the DLQ with New's DLQ headers.
func (q *QueueProcessor) forward(ctx context.Context, it *item) (*kgo.Record, error) {
	rec := &kgo.Record{
		Topic:   it.fail.target,
		Key:     it.rec.Key,
		Value:   it.rec.Value,
		Headers: forwardHeaders(&q.cfg, nil, it),
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var done func(error)
	if t := q.cfg.tracer; t != nil {
		ctx, done = t.Forward(ctx, q.cfg.group, it.view, rec.Topic, true, it.fail.lastErr)
	}
	err := q.prod.ProduceSync(ctx, rec).FirstErr()
	if done != nil {
		done(err)
	}
	if err != nil {
		return nil, err
	}
	return rec, nil
}

// call runs the handler once for r, its delivery dc the attempt number
// (Tracing), with HandlerTimeout; a panic is its error.
func (q *QueueProcessor) call(work context.Context, r *kgo.Record, dc int) (err error) {
	ctx := work
	if q.cfg.handlerTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(work, q.cfg.handlerTimeout)
		defer cancel()
	}
	var traced func(error)
	if q.cfg.tracer != nil {
		ctx, traced = q.cfg.tracer.Attempt(ctx, q.cfg.group, r, dc)
	}
	start := time.Now()
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
		if traced != nil {
			traced(err)
		}
		q.cfg.metrics.handled(q.cfg.group, r.Topic, time.Since(start), err)
	}()
	return q.cfg.handler(ctx, r)
}

// errCode is the kerr error of a response's error code (nil for 0).
func errCode(code int16) error {
	if code == 0 {
		return nil
	}
	return kerr.ErrorForCode(code)
}
