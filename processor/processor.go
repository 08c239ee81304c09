// Package processor is a resilient Kafka consumer runtime built on franz-go:
// group consumption that commits only the contiguous run of completed
// offsets, three ordering modes with bounded in-flight work and fetch
// pausing as backpressure, in-place retries with backoff, retry topics, a
// dead-letter topic (DLQ), rebalance-safe draining, graceful shutdown, and an
// exactly-once consume-transform-produce mode (NewTransactional).
//
// # Delivery
//
// Three semantics, which differ in what a crash or a lost partition costs:
//
//   - At least once, the default (Delivery(AtLeastOnce)): New's Processor
//     calls a Handler for every record and commits a record's offset only
//     after its handler returned nil or after the record was written to a
//     retry topic or the DLQ. After a crash or a rebalance the records above
//     the committed offset are handled again; nothing is lost. Pair the
//     handler with an inbox (package inbox: the ids of the handled records,
//     written in the same database transaction as the effect) for
//     effectively-once effects.
//   - Exactly once (NewTransactional): the TxnProcessor's TxnHandler returns
//     the records to produce for its input, and the runtime produces them
//     and commits the input offsets in one Kafka transaction (KIP-98,
//     KIP-447), so read_committed readers see each input's outputs once.
//     Effects outside Kafka are not covered (an inbox again).
//   - At most once (Delivery(AtMostOnce), New with OrderPartition): a
//     record's offset is committed before its handler runs, so no record is
//     handled twice, and after a crash the record whose handler was running
//     is lost.
//
// NewQueue's QueueProcessor is a member of a share group (KIP-932): the
// broker hands each record to one member at a time and the member
// acknowledges it (accept, release for redelivery after Backoff, the DLQ on
// a permanent failure or the last delivery), at-least-once and in no order,
// with the same Handler.
//
// Package processor/dlq lists, replays and purges a group's dead letters
// (the DLQ below). Package processor/middleware wraps a Handler with panic
// recovery, timing, logging and decoding (Recover, Timing, Log, Decode).
//
// # Failed records
//
// A handler error is transient unless it is permanent (Permanent,
// IsPermanent). A transient failure is retried in place up to MaxAttempts
// with Backoff, then goes to the next retry topic (RetryTopics) or the DLQ;
// a permanent one goes to the DLQ at once. The runtime writes the record's
// key, value and headers there, plus headers naming its origin and the
// failure (HeaderOriginalTopic and the others), then commits past it and
// calls OnDeadLetter. If that write fails, the record's partition stays
// paused and its offset held (never skipped) while the write is retried;
// Health.Blocked, the forward_failures_total series and an ERROR log line
// report it. In the exactly-once mode, Run stops with a *DeadLetterError.
// Run checks at start that the DLQ and retry topics exist (a
// *MissingTopicError otherwise), or creates them (CreateTopics).
//
// # Shutdown and rebalances
//
// Cancel Run's context on SIGTERM (signal.NotifyContext): the member stops
// fetching, lets the handlers in flight finish (DrainTimeout, then their
// contexts are cancelled), commits what completed, leaves the group and
// returns nil. A revoked partition is drained the same way before the
// member lets it go, so that no two members handle a partition at once.
//
// # Handover
//
// In OrderKey and OrderUnordered, records above the commit point may
// complete while an earlier one is still running. Each commit carries in
// its metadata a compact map of those completed offsets
// (CommitMetadataMaxBytes), and the partition's next owner skips them: a
// handover handles nothing twice that had completed, and the order of a
// key's records never goes backwards.
//
// # Defaults
//
// Every default in one place (each option's doc has the details):
//
//   - One handler for every topic (WithHandler); HandleTopic gives a topic
//     its own, and New refuses a topic left without one.
//   - Ordering: OrderPartition; Concurrency 16 handler calls per member;
//     MaxInFlight 1000 records and 64 MiB of key+value bytes.
//   - No partition paused. Pause (Processor, TxnProcessor) pauses one until
//     Resume or until a rebalance takes it from this member (a pause is of
//     the member, as with Kafka's consumer); it never lifts, nor is lifted
//     by, the runtime's own pausing for backpressure.
//   - A group with no committed offset starts at the earliest offset
//     (StartOffset(Earliest), Kafka's auto.offset.reset=earliest).
//   - Reads are always read_committed (records of aborted transactions are
//     never handled); auto-commit is off: CommitInterval 1s (100ms for
//     NewTransactional), CommitRefreshInterval 5s, CommitMetadataMaxBytes
//     4096 (the broker's offset.metadata.max.bytes default).
//   - HandlerTimeout 30s; MaxAttempts 3; Backoff from 100ms doubling to 5s,
//     with jitter in [d/2, d].
//   - Retry topics: none. Their names, when RetryTopics gives delays:
//     "<group>.retry.<n>" (RetryTopicPrefix).
//   - DLQ: on (DeadLetter), named "<group>.dlq" (DeadLetterTopic); it must
//     exist (CreateTopics false). A DLQ or retry record goes to the
//     partition franz-go's default partitioner picks from its key (murmur2
//     of the key, as Kafka's Java client; records without a key stick to
//     one partition per batch), not to the source's partition number, so a
//     DLQ with fewer partitions works. It is written with acks=all by an
//     idempotent producer with no linger, each write bounded by 30s; the
//     error-message header is cut to 1024 bytes.
//   - Header prefix "ordercast-" (HeaderPrefix, DefaultHeaderPrefix).
//   - Group: classic protocol with the cooperative-sticky assignor
//     (GroupProtocol); SessionTimeout 45s, RebalanceTimeout 60s, heartbeats
//     every third of the session timeout (at most 3s); DrainTimeout 10s, or
//     half the RebalanceTimeout when that is shorter; TransactionTimeout 60s.
//   - Client id "<group>-<8 random hex digits>" (NewTransactional: the
//     transactional id); the DLQ producer's is that plus "-dlq".
//   - Fetching: kgo.FetchMaxWait 500ms (Kafka's fetch.max.wait.ms); fetch
//     sizes follow the MaxInFlight bytes and the compression ratio read: a
//     quarter of them per fetch and 1/32 per partition, decoded, at most 1
//     MiB compressed per partition (see MaxInFlight). ConsumerOpts may set
//     kgo.FetchMaxBytes and kgo.FetchMaxPartitionBytes, which then stay
//     fixed.
//   - Logger: one that discards everything (slog.DiscardHandler); pass
//     Logger to see the runtime's WARN and ERROR lines. Health and the
//     metrics report trouble whatever the logger.
//   - Metrics: none; with WithMetrics, names start with "ordercast_consumer_"
//     (MetricsNamespace, DefaultMetricsNamespace).
//   - The start check of the DLQ and retry topics: 30s.
//
// # Testing
//
// Package processortest starts an embedded broker (franz-go's kfake) with
// topics, for the tests of a service built on this package; the Examples
// here run on it.
package processor

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

type tp struct {
	topic     string
	partition int32
}

func (t tp) String() string { return fmt.Sprintf("%s[%d]", t.topic, t.partition) }

// Processor consumes topics as one member of a consumer group and runs a
// Handler for every record. Create it with New, run it with Run. Its methods
// are safe for concurrent use.
type Processor struct {
	cfg         cfg
	cl          *kgo.Client
	prod        *kgo.Client
	ownProd     bool
	retryTopics []string
	retryIndex  map[string]int
	mm          *memberMetrics // nil without metrics
	clock       *coarseClock   // attempt start times
	reach       *reach         // brokers leaving the consumer waiting (Health.Unreachable)
	idle        atomic.Bool    // no records held (the clock sleeps)
	groupStart  *groupStart    // the group's start time (StartOffset(Latest) only, else nil)

	mu       sync.Mutex
	cond     *sync.Cond // state changes: backpressure lifted, handlers done, releases done (Broadcast)
	workCond *sync.Cond // a lane became ready (Signal: one worker takes it)
	// Workers waiting on workCond, those of them signalled and not yet
	// running, and how many may be signalled at a time (GOMAXPROCS; see
	// wakeWorkerLocked).
	idleWorkers, wakes, maxWakes int
	parts                        map[tp]*partState
	ready                        fifo[*lane]
	// laneSeed hashes keys to lanes (laneKey); freeLanes are emptied
	// lanes kept for reuse (freeLaneLocked).
	laneSeed  maphash.Seed
	kb        *keyBlocks  // BlockKeys' table, nil when off (keyblock.go)
	pre       *preCommits // AtMostOnce's lanes waiting for their head's commit, nil otherwise (delivery.go)
	freeLanes []*lane
	// Workers started (on demand, up to Concurrency; see
	// wakeWorkerLocked), counted in workerWG, which Run waits for.
	workers  int
	workerWG *sync.WaitGroup
	// Item slabs whose items were all passed, for reuse, and attempt
	// contexts to take (see newItemLocked).
	freeSlabs []*itemSlab
	ctxSlab   []attemptCtx

	// consumeTopics are the sources and retry topics, given to the
	// client by Run (New must not join the group).
	consumeTopics []string
	// Fetched records not admitted into lanes yet (see enqueue), and the
	// partitions that have some, in round-robin order.
	pendingParts []*partState
	pendingRecs  int
	// Of pendingRecs, those of held partitions (partState.held): they wait
	// outside pendingParts until the partition may admit again, and do not
	// hold the poll loop back. pendingBytes are the key+value bytes of all
	// pending records; pendingFull is set while they reach the pending
	// budget (see pendingBudget), and the poll loop then waits too.
	heldRecs int
	// Key+value bytes pending in partitions held by their share
	// (holdShare), and whether they reached the pending budget (a quarter
	// of the MaxInFlight bytes, a fetch's size): the poll loop then waits
	// too, so that many partitions' surplus cannot add up. Those
	// partitions' records are not parked, so their surplus drains.
	shareHeldB  int64
	pendingFull bool
	activeParts int   // partitions in partActive
	fetchedAt   int64 // Unix nanoseconds of the last poll
	inRecs      int   // records held, between fetch and completion
	inBytes     int64 // their key+value bytes
	parked      int   // of those, records in failing lanes (see lane.failing)
	parkedB     int64
	paused      bool // backpressure: the records that can make progress reached MaxInFlight
	parkFull    bool // parked records reached MaxInFlight: partitions holding parked records are paused
	stopping    bool
	ran         bool
	// overran are released partitions (gone from parts) whose handler
	// calls were still running when their release gave up waiting
	// (DrainTimeout): Health counts those calls in InFlight until they
	// return. Pruned by release and Health.
	overran []*partState

	commitMu sync.Mutex
	authz    authzStop // a refused request stops Run (authz.go)
	baseCtx  context.Context
	cancel   context.CancelFunc
}

// partState is this member's state for one assigned partition. It lives from
// OnPartitionsAssigned until the partition is revoked or lost.
type partState struct {
	tp          tp
	state       int  // partActive, partDraining, partReleased
	lost        bool // released without a commit: no commit may be sent for it any more
	retry       bool // one of the group's retry topics
	tracker     *offsetTracker
	lanes       laneTable
	partLane    *lane         // OrderPartition: the one lane, if it exists
	amoTried    bool          // AtMostOnce: at its release, its first record waited for a retry (delivery.go)
	pending     []*kgo.Record // fetched, not admitted into a lane yet
	pendingB    int64         // their key+value bytes
	slab        []item        // items to take for the next admitted records
	slabRef     *itemSlab     // the pooled slab slab is of, or nil (see newItemLocked)
	running     int           // handler calls or forward writes in progress
	recs        int           // records held (fetched, not completed or dropped)
	bytes       int64         // their key+value bytes
	parked      int           // records held in failing lanes
	parkedB     int64
	fetchPaused bool  // this processor has paused fetching of the partition in the client
	sharePaused bool  // held by its share with its share of the pending budget (checkPendingShareLocked)
	committed   int64 // last offset committed by this member (-1: none yet)
	// committedMeta is the metadata of that commit (the completed-offsets
	// map, and with StartOffset(Latest) the group's start time), and
	// committedAt when it was accepted (see CommitRefreshInterval).
	committedMeta string
	committedAt   time.Time
	// held: the partition admits no more records for now, and its
	// fetching is paused, because its next pending record would make the
	// completed-offsets map outgrow CommitMetadataMaxBytes (holdWindow:
	// admission waits for the commit point to move), or because it holds
	// its share of MaxInFlight (OrderPartition, OrderKey; holdShare: admission
	// waits for its records to complete). See admitHoldLocked.
	held    hold
	pause   pauseState   // the user's Pause (pause.go)
	hwm     int64        // last seen high watermark / last stable offset
	blocked error        // non-nil while a retry-topic/DLQ write keeps failing
	m       *partMetrics // nil without metrics
	// Retry-topic/DLQ writes in progress, and since when (the client
	// retries a retriable produce error itself, for up to 30s).
	forwarding   int
	forwardSince time.Time
	ctx          context.Context
	cancel       context.CancelFunc
}

// A partition is partActive while assigned; partDraining while a release
// waits for its in-flight handlers; partReleased once the release stopped
// accepting completions (its final commit may still be in flight). It leaves
// p.parts when the release is over: only then may another member own it.
const (
	partActive = iota
	partDraining
	partReleased
)

// New creates a Processor and its franz-go clients. It does not contact the
// brokers; Run does. It returns an error listing every invalid option, or
// naming the position (from 1) of a nil Opt.
func New(opts ...Opt) (*Processor, error) {
	c := defaultCfg()
	if err := applyOpts(&c, opts); err != nil {
		return nil, fmt.Errorf("processor: invalid config: %w", err)
	}
	if err := errors.Join(c.adoptBatch(), c.validate()); err != nil {
		return nil, fmt.Errorf("processor: invalid config: %w", err)
	}
	if c.clientID == "" {
		c.clientID = c.group + "-" + randomID()
	}
	c.logger = c.logger.With("group", c.group, "client_id", c.clientID)
	p := &Processor{
		cfg:        c,
		parts:      make(map[tp]*partState),
		retryIndex: make(map[string]int),
		groupStart: newGroupStart(&c),
	}
	p.cond = sync.NewCond(&p.mu)
	p.workCond = sync.NewCond(&p.mu)
	p.maxWakes = runtime.GOMAXPROCS(0)
	p.laneSeed = maphash.MakeSeed()
	p.kb = newKeyBlocks(&c)
	if c.delivery == AtMostOnce {
		p.pre = &preCommits{wake: make(chan struct{}, 1)}
	}
	p.mm = c.metrics.member(c.group, c.clientID)
	p.clock = newCoarseClock()
	p.reach = newReach(c.sessionTimeout / 3)
	p.baseCtx, p.cancel = context.WithCancel(context.Background())
	p.retryTopics = c.retryTopicNames()
	for i, t := range p.retryTopics {
		p.retryIndex[t] = i
	}
	topics := append(append([]string{}, c.topics...), p.retryTopics...)
	c.metrics.initGroup(c.group, c.topics, p.retryTopics, c.dlqTarget())

	// Fetch sizes follow the compression ratio of what is read (see
	// fetchSizer): the processor takes a whole fetch at a time and holds it
	// aside until there is room (see enqueue), while the client may buffer
	// the next one, so these bound the memory held beyond MaxInFlight.
	sizer := newFetchSizer(c.maxBytes)
	kopts := append(c.memberOpts(),
		kgo.FetchMaxBytes(sizer.fetch),
		kgo.FetchMaxPartitionBytes(sizer.part),
		kgo.WithHooks(sizer),
	)
	kopts = append(kopts, c.clientOpts...)
	kopts = append(kopts, c.consumerOpts...)
	start := newStarter(&c, p.retryTopics, p.groupStart)
	kopts = append(kopts, start.opts()...)
	kopts = append(kopts, c.groupOpts()...) // client.go
	kopts = append(kopts,
		// No ConsumeTopics here: franz-go joins the group as soon as
		// its client knows a topic, and New must not join (Run checks
		// the DLQ and retry topics first, then adds them: consumeTopics).
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(p.onAssigned),
		kgo.OnPartitionsRevoked(p.onRevoked),
		kgo.OnPartitionsLost(p.onLost),
		kgo.WithHooks(p.reach),
	)
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return nil, fmt.Errorf("processor: consumer client: %w", err)
	}
	p.cl = cl
	p.consumeTopics = topics
	sizer.start(cl)
	if w, ok := cl.OptValue(kgo.FetchMaxWait).(time.Duration); ok {
		p.reach.after = max(p.reach.after, 2*w) // a long poll is not a wait
	}
	start.setClient(cl)
	if c.producer != nil {
		p.prod = c.producer
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
			cl.Close()
			return nil, fmt.Errorf("processor: producer client: %w", err)
		}
		p.prod, p.ownProd = prod, true
	}
	return p, nil
}

// Client returns the consumer's franz-go client (for admin lookups and
// metrics hooks). Do not poll or commit with it.
func (p *Processor) Client() *kgo.Client { return p.cl }

// Group returns the consumer group.
func (p *Processor) Group() string { return p.cfg.group }

// Run joins the group and processes records until ctx is cancelled or a fatal
// client error occurs. On return it has stopped fetching, let in-flight
// records finish (up to DrainTimeout, then cancelled their contexts),
// committed what completed, left the group and closed its clients. It waits
// for every handler call to return, so a handler that ignores its context
// delays Run's return past DrainTimeout. It returns nil after a cancellation-triggered
// shutdown, ErrClosed if called twice, and otherwise the fatal error: a
// *FatalGroupError, or an *AuthorizationError when the broker refused a
// request for lack of an ACL (nothing past the refused record is
// committed).
func (p *Processor) Run(ctx context.Context) error {
	p.mu.Lock()
	if p.ran {
		p.mu.Unlock()
		return ErrClosed
	}
	p.ran = true
	p.mu.Unlock()

	if err := ensureTopics(ctx, p.cl, &p.cfg, p.cfg.writeTopics(p.retryTopics)); err != nil {
		p.cl.Close()
		p.cancel()
		if p.ownProd {
			p.prod.Close()
		}
		if ctx.Err() != nil {
			return nil // cancelled during the check: nothing was consumed
		}
		return err
	}

	if err := p.startKeyBlocks(ctx); err != nil {
		p.cl.Close()
		p.cancel()
		if p.ownProd {
			p.prod.Close()
		}
		if ctx.Err() != nil {
			return nil
		}
		return err
	}

	// Only now does the client learn its topics and join the group.
	p.cl.AddConsumeTopics(p.consumeTopics...)
	p.cfg.metrics.track(p)
	defer p.cfg.metrics.untrack(p)
	var wg sync.WaitGroup
	p.mu.Lock()
	p.startWorkersLocked(&wg)
	p.mu.Unlock()
	clockDone := make(chan struct{})
	defer close(clockDone)
	go p.clock.run(clockDone, p.idle.Load)
	commitCtx, stopCommitter := context.WithCancel(context.Background())
	committerDone := make(chan struct{})
	go func() { defer close(committerDone); p.committer(commitCtx) }()
	if p.pre != nil {
		preDone := make(chan struct{})
		go func() { defer close(preDone); p.preCommitter(commitCtx) }()
		defer func() { <-preDone }()
	}

	pollErr := p.pollLoop(p.authz.runContext(ctx))

	// Shutdown: nothing new is dispatched; in-flight records finish up to
	// DrainTimeout; what completed is committed; then the group is left.
	p.release(p.cl, p.ownedPartitions(), true, "shutdown")
	stopCommitter()
	<-committerDone
	p.mu.Lock()
	p.stopping = true
	p.cond.Broadcast()
	p.workCond.Broadcast()
	p.mu.Unlock()
	wg.Wait()
	p.cl.Close() // leaves the group; onRevoked finds nothing left to commit
	p.cancel()
	if p.kb != nil && p.kb.cl != nil {
		p.kb.cl.Close()
	}
	if p.ownProd {
		p.prod.Close()
	}
	p.cfg.logger.Info("processor stopped")
	pollErr = p.authz.result(pollErr)
	if pollErr != nil && !errors.Is(pollErr, context.Canceled) {
		return pollErr
	}
	return nil
}

// pollLoop fetches records and hands them to partition lanes until ctx ends.
// It polls only when every record of the last poll was admitted into a lane
// or waits in a held partition (whose fetching is paused, so the poll brings
// records of the others), MaxInFlight leaves room and the pending records
// are within their budget (backpressure). With BlockRebalanceOnPoll, a
// rebalance can only run between polls, after the polled records were
// enqueued: so a revoke callback always sees every record fetched under the
// old assignment (in a lane or still pending) and can drop them.
func (p *Processor) pollLoop(ctx context.Context) error {
	for {
		p.mu.Lock()
		for ctx.Err() == nil {
			if !p.paused {
				p.unholdSharesLocked() // room again: admit held records
			}
			if !p.paused && p.pendingRecs > p.heldRecs {
				p.moveLocked() // room again: admit pending records
				continue
			}
			if !p.paused && !p.pendingFull {
				break
			}
			p.waitWithContext(ctx)
		}
		p.mu.Unlock()
		if ctx.Err() != nil {
			return nil
		}
		fetches := p.cl.PollFetches(ctx)
		if fetches.IsClientClosed() {
			p.cl.AllowRebalance()
			return errors.New("processor: client closed")
		}
		var fatal error
		fetches.EachError(func(t string, part int32, err error) {
			if errors.Is(err, context.Canceled) || (errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil) {
				return // Run's context ended the poll (a cancel or a deadline): a stop, not a fetch error
			}
			if ae := fetchAuthzError(p.cfg.group, t, err); ae != nil {
				fatal = ae
				return
			}
			if f := fatalGroupError(p.cfg.group, err); f != nil {
				fatal = f
				return
			}
			p.cfg.logger.Warn("fetch error", "topic", t, "partition", part, "error", err)
			p.cfg.metrics.fetchError(p.cfg.group)
		})
		p.enqueue(fetches)
		p.cl.AllowRebalance()
		if fatal != nil {
			return fatal
		}
	}
}

// waitWithContext waits on p.cond (p.mu held) until a broadcast or ctx ends.
func (p *Processor) waitWithContext(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() {
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	})
	p.cond.Wait()
	stop()
}

// ownedPartitions returns the partitions this member currently holds.
func (p *Processor) ownedPartitions() map[string][]int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string][]int32)
	for k, ps := range p.parts {
		if ps.state == partActive {
			out[k.topic] = append(out[k.topic], k.partition)
		}
	}
	return out
}

// Health is a point-in-time view of a processor for readiness checks.
type Health struct {
	Group    string `json:"group"`
	ClientID string `json:"clientId"`
	// MemberID and Generation are the group membership (empty and -1
	// while not joined); Joined reports whether there is one.
	MemberID   string `json:"memberId"`
	Generation int32  `json:"generation"`
	Joined     bool   `json:"joined"`
	// Partitions lists the partitions held, as "topic[partition]".
	Partitions []string `json:"partitions"`
	// InFlight counts the records admitted and not yet completed, and the
	// records whose handler call still runs after their partition was
	// released (past DrainTimeout: the call was cancelled, its result will
	// be discarded and the next owner handles the record again; Run waits
	// for it).
	InFlight int `json:"inFlight"`
	// Paused reports backpressure: MaxInFlight is reached and polling
	// waits for room.
	Paused bool `json:"paused"`
	// Parked counts held records of failing keys or partitions, of
	// partitions paused by Pause, and retry-topic records waiting for
	// their due time: they do not use up MaxInFlight room.
	Parked int `json:"parked"`
	// PausedPartitions lists the partitions paused by Pause
	// ("topic[partition]", sorted); the runtime's own pausing is in
	// Paused and Blocked.
	PausedPartitions []string `json:"pausedPartitions,omitempty"`
	// Blocked lists partitions whose retry-topic or DLQ write keeps failing
	// (they are paused and their commit point is held), or has been in
	// progress for longer than the maximum Backoff (the client retries a
	// retriable broker error by itself before it reports a failure).
	Blocked []string `json:"blocked,omitempty"`
	// Unreachable lists the brokers ("host:port" as the consumer's client
	// dials them, seeds included) that have left this member waiting
	// longer than a third of the session timeout (the most Kafka's
	// heartbeat.interval.ms should be; at least twice the fetch max wait,
	// so a long poll is no wait): a request to the broker unanswered, or
	// its connection attempts failing, with no successful response in
	// between, while the member still tries. JoinGroup and SyncGroup, which
	// the coordinator holds during a rebalance by design, do not count. A
	// broker leaves the list with its next answer. Only the consumer's
	// client is tracked (through franz-go's broker hooks), not the
	// retry/DLQ producer; TxnProcessor leaves it empty.
	Unreachable []string `json:"unreachable,omitempty"`
}

// Health returns the processor's current state. Safe for concurrent use.
func (p *Processor) Health() Health {
	member, gen := p.cl.GroupMetadata()
	h := Health{Group: p.cfg.group, ClientID: p.cfg.clientID, MemberID: member, Generation: gen, Joined: member != "" && gen >= 0}
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, ps := range p.parts {
		if ps.state != partActive {
			continue
		}
		h.Partitions = append(h.Partitions, k.String())
		switch {
		case ps.blocked != nil:
			h.Blocked = append(h.Blocked, fmt.Sprintf("%s: %v", k, ps.blocked))
		case ps.forwarding > 0 && time.Since(ps.forwardSince) > p.cfg.backoffMax:
			h.Blocked = append(h.Blocked, fmt.Sprintf("%s: retry-topic/DLQ write in progress for %v", k, time.Since(ps.forwardSince).Round(time.Millisecond)))
		}
	}
	h.InFlight = p.inRecs + p.overranLocked()
	h.Paused = p.paused
	h.Parked = p.parked
	h.PausedPartitions = p.pausedPartitionsLocked()
	h.Unreachable = p.reach.unreachable(time.Now())
	return h
}
