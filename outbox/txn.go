package outbox

import (
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/txncheck"
	"github.com/ordercast/ordercast/sqldb"
)

// Exactly-once mode defaults and names.
const (
	// DefaultTakeoverAfter is how long a fenced (standby) relay waits for
	// the outbox to make progress before it takes over from the relay
	// that fenced it.
	DefaultTakeoverAfter = 5 * time.Second
	// DefaultTransactionTimeout bounds one relay transaction at the
	// broker (transaction.timeout.ms): a relay that stalls longer has its
	// transaction aborted by the coordinator.
	DefaultTransactionTimeout = 30 * time.Second
	// markerVersion is the version of the progress marker's JSON value
	// written when it names only its own transaction's rows;
	// markerVersionPrev the version of one that also names the previous
	// transaction's rows (marker.Prev), whose marking was still in flight.
	// A relay reads both; one of a release before markerVersionPrev stops
	// with an error on a version 2 marker rather than miss its Prev rows.
	markerVersion     = 1
	markerVersionPrev = 2
)

// Default name prefixes of the exactly-once relay (see TransactionalID and
// MarkerTopic; WithTransactionalID and WithMarkerTopicName replace them).
const (
	DefaultTransactionalIDPrefix = "ordercast-outbox-"
	DefaultMarkerTopicPrefix     = "ordercast.outbox."
)

// TransactionalID returns the default transactional id of the exactly-once
// relay named name: DefaultTransactionalIDPrefix + name
// ("ordercast-outbox-" + name). A relay given WithTransactionalID uses that
// instead; [Relay.TransactionalID] returns the one a relay uses. Derive ACLs
// (WRITE on the TransactionalId resource) from the relay's, not from this,
// when the option is used.
func TransactionalID(name string) string { return DefaultTransactionalIDPrefix + name }

// MarkerTopic returns the default progress marker topic of the exactly-once
// relay named name: DefaultMarkerTopicPrefix + name ("ordercast.outbox." +
// name; one partition, compacted). A relay given WithMarkerTopicName uses
// that instead; [Relay.MarkerTopic] returns the one a relay uses.
func MarkerTopic(name string) string { return DefaultMarkerTopicPrefix + name }

// txnConfig is the exactly-once mode's configuration.
type txnConfig struct {
	name string
	// txnID and markerTopic are the names in use: TransactionalID(name)
	// and MarkerTopic(name) unless set by WithTransactionalID or
	// WithMarkerTopicName (checked by NewTransactionalRelay).
	txnID, markerTopic string
	txnIDSet, topicSet bool
	clientOpts         []kgo.Opt
	perClient          func(role string) []kgo.Opt // WithClientOpts; nil: none
	rf                 int16
	minISR             int
	txnTimeout         time.Duration
	takeoverAfter      time.Duration
	idSuffix           string
}

// WithMarkerTopic sets the replication factor and min.insync.replicas of
// the progress marker topic when the exactly-once relay creates it (default
// -1 and 0: the broker's defaults). Use 3 and 2 on a real cluster. Ignored by
// a relay made with NewRelay.
func WithMarkerTopic(replicationFactor int16, minInsyncReplicas int) Opt {
	return func(r *Relay) {
		if r.txn != nil {
			r.txn.rf, r.txn.minISR = replicationFactor, minInsyncReplicas
		}
	}
}

// WithTakeoverAfter sets how long a standby relay (one that was fenced by
// another relay with the same transactional id) waits while rows are pending
// and the oldest unsent row does not change before it takes over (default
// DefaultTakeoverAfter). Values <= 0 are ignored, as is the option on a relay
// made with NewRelay.
func WithTakeoverAfter(d time.Duration) Opt {
	return func(r *Relay) {
		if r.txn != nil && d > 0 {
			r.txn.takeoverAfter = d
		}
	}
}

// WithTransactionTimeout sets the relay's transaction.timeout.ms (default
// DefaultTransactionTimeout). Values below 1 s are ignored, as is the option
// on a relay made with NewRelay.
func WithTransactionTimeout(d time.Duration) Opt {
	return func(r *Relay) {
		if r.txn != nil && d >= time.Second {
			r.txn.txnTimeout = d
		}
	}
}

// WithTransactionalID sets the exactly-once relay's transactional id
// (Kafka's transactional.id; default TransactionalID(name),
// "ordercast-outbox-<name>"). Every relay of one outbox must use the same id
// (that is what fences a zombie), and it must stay the same across restarts;
// the relay's principal needs WRITE on it. An empty id makes
// NewTransactionalRelay return an error. Ignored by a relay made with
// NewRelay.
func WithTransactionalID(id string) Opt {
	return func(r *Relay) {
		if r.txn != nil {
			r.txn.txnID, r.txn.txnIDSet = id, true
		}
	}
}

// WithMarkerTopicName sets the name of the exactly-once relay's progress
// marker topic (default MarkerTopic(name), "ordercast.outbox.<name>"). Every
// relay of one outbox must use the same topic, and no other program may
// write to it; the relay's principal needs READ, WRITE and (unless the topic
// exists, with one partition and cleanup.policy=compact) CREATE on it. A
// name that is not a valid Kafka topic name (1 to 249 of a-z A-Z 0-9 '.' '_'
// '-', not "." or "..") makes NewTransactionalRelay return an error. Ignored
// by a relay made with NewRelay. (WithMarkerTopic sets its replication, not
// its name.)
func WithMarkerTopicName(topic string) Opt {
	return func(r *Relay) {
		if r.txn != nil {
			r.txn.markerTopic, r.txn.topicSet = topic, true
		}
	}
}

// Roles of the Kafka clients an exactly-once relay creates, as passed to
// the WithClientOpts function.
const (
	// ClientProducer is each session's transactional producer (one per
	// session: a failed step starts a new one).
	ClientProducer = "producer"
	// ClientConfirm is each session's read_committed reader of its own
	// progress markers (the read-back after each commit).
	ClientConfirm = "confirm"
	// ClientMarkers is the short-lived read_committed reader of the marker
	// topic that a session's recovery opens.
	ClientMarkers = "markers"
)

// WithClientOpts sets a function called each time the exactly-once relay
// creates a Kafka client, with the client's role (ClientProducer,
// ClientConfirm, ClientMarkers); the options it returns are appended to
// NewTransactionalRelay's clientOpts for that client only. Use it for what
// must be one per client: a kgo.ClientID per role, metrics hooks that keep
// per-client state (kprom). The function must not return transactional
// id, acks, consume or isolation options; it is called from the relay's
// goroutine (Run) only. Ignored by a relay made with NewRelay.
func WithClientOpts(fn func(role string) []kgo.Opt) Opt {
	return func(r *Relay) {
		if r.txn != nil {
			r.txn.perClient = fn
		}
	}
}

// clientOptsFor returns the options of a new client of the given role:
// clientOpts, then those of WithClientOpts.
func (tc *txnConfig) clientOptsFor(role string) []kgo.Opt {
	opts := append([]kgo.Opt{}, tc.clientOpts...)
	if tc.perClient != nil {
		opts = append(opts, tc.perClient(role)...)
	}
	return opts
}

// WithTransactionalIDSuffix appends suffix to the relay's transactional id
// (TransactionalID(name), or the WithTransactionalID id, + suffix); the
// marker topic keeps its name. Only for
// an embedded kfake broker that dies with this process: there a fresh id per
// start avoids a defect of kfake's recovery of transactions left open by a
// crashed producer. On a real cluster the id must stay
// the same across restarts, or a zombie relay is no longer fenced. Ignored by
// a relay made with NewRelay.
func WithTransactionalIDSuffix(suffix string) Opt {
	return func(r *Relay) {
		if r.txn != nil {
			r.txn.idSuffix = suffix
		}
	}
}

// NewTransactionalRelay returns a relay that publishes db's outbox exactly
// once for read_committed readers. name identifies the outbox (one name per
// database): the relay's transactional id is TransactionalID(name) and its
// progress marker topic MarkerTopic(name) unless WithTransactionalID and
// WithMarkerTopicName choose others; name is also the key of its marker
// records. clientOpts configure the Kafka
// clients the relay creates and owns (kgo.SeedBrokers, TLS, SASL); do not
// pass a transactional id, acks or producer-id options.
//
// How it works. Each step reads up to the batch size of unsent rows in id
// order and, in one Kafka transaction, produces them and one progress marker
// record (key name, value: the exact ids of the batch and a checksum of
// their contents) to the marker topic, then commits, then reads the marker
// back as a read_committed reader, then marks the rows sent (an UPDATE that
// runs while the next step reads, produces and commits; see below). Kafka commits
// the rows and the marker together or neither. The read-back is there
// because franz-go v1.22.3's EndTransaction can abort a write-only
// transaction and return nil (internal/txncheck): a marker found aborted
// ends the session without marking, and the next session publishes the
// rows again. It costs one fetch the relay's reader (one client per
// session) is already waiting on. A crash
// after the commit and before the marking leaves the rows unmarked but the
// marker committed; a crash before the commit leaves an open transaction.
// Every (re)start of the relay, and every failed step, starts a new session:
// a new client whose InitProducerID (1) fences any other producer with the
// transactional id — a zombie relay of an earlier process can no longer
// commit anything — and (2) makes the coordinator abort a transaction left
// open (or finish one that was committing) before it answers. Only then does
// the relay read the last committed marker (read_committed, up to the last
// stable offset) and mark the rows it names as sent, before publishing
// anything else. So a row is in a committed transaction at most once, and
// read_committed consumers (the runtime's default) see each row exactly once;
// an aborted attempt is visible only to read_uncommitted readers.
//
// Why the marker names exact ids, not "everything up to id N": on
// PostgreSQL ids are taken at insert time, so a lower id may commit after
// a higher one was relayed. Only the last committed marker can name
// unmarked rows: a step's marking overlaps the next step only, which reads
// the unsent rows without the ones being marked, names them in its own
// marker too (version 2, "prev"), and waits for their marking to end once
// its commit is confirmed, so at most two transactions' rows are unmarked at
// a time and the last committed marker names them all.
//
// Several relays on one database (one per service instance) are safe: they
// share the transactional id, so the last one to start fences the others.
// A fenced relay goes to standby and takes over (fencing in turn) once rows
// are pending and the oldest unsent row has not changed for
// WithTakeoverAfter. The checksum guards against a marker topic left over
// from another database (a deleted SQLite file with a kept broker): a marker
// whose rows do not match is not trusted, and its rows are published again.
//
// What it does not cover: the database and Kafka are not committed
// atomically (there is no two-phase commit); the marker makes the pair
// recoverable, it does not make it atomic, so it holds only while the marker
// topic is kept (deleting it while rows are committed but unmarked
// re-publishes them). read_uncommitted readers see aborted attempts. A
// consumer with effects outside Kafka (a database, an e-mail) still needs its
// own inbox: its crash between effect and offset commit is its own.
//
// NewTransactionalRelay creates no client yet; Run does, and creates the
// marker topic (one partition, cleanup.policy=compact) if it is missing. It
// returns an error if name is empty or not a valid topic name suffix, if a
// WithTransactionalID id is empty, or a WithMarkerTopicName name is not a
// valid topic name.
func NewTransactionalRelay(db *sqldb.DB, name string, clientOpts []kgo.Opt, opts ...Opt) (*Relay, error) {
	if name == "" || strings.ContainsFunc(name, func(c rune) bool {
		return !(c == '.' || c == '_' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9')
	}) {
		return nil, fmt.Errorf("outbox: relay name %q: want letters, digits, '.', '_' or '-'", name)
	}
	r := NewRelay(db, nil)
	r.txn = &txnConfig{
		name:          name,
		clientOpts:    append([]kgo.Opt{}, clientOpts...),
		rf:            -1,
		txnTimeout:    DefaultTransactionTimeout,
		takeoverAfter: DefaultTakeoverAfter,
	}
	for _, o := range opts {
		o(r)
	}
	if err := r.txn.resolveNames(); err != nil {
		return nil, err
	}
	if err := r.bindTable(); err != nil {
		return nil, err
	}
	return r, nil
}

// resolveNames fills in the default names and checks the chosen ones.
func (tc *txnConfig) resolveNames() error {
	if !tc.txnIDSet {
		tc.txnID = TransactionalID(tc.name)
	} else if tc.txnID == "" {
		return errors.New("outbox: WithTransactionalID: empty transactional id")
	}
	if !tc.topicSet {
		tc.markerTopic = MarkerTopic(tc.name)
	}
	if err := checkTopicName(tc.markerTopic); err != nil {
		return fmt.Errorf("outbox: marker topic: %w", err)
	}
	return nil
}

// checkTopicName applies Kafka's topic name rule (org.apache.kafka.common.
// internals.Topic.validate): 1 to 249 characters of a-z A-Z 0-9 '.' '_'
// '-', and not "." or "..".
func checkTopicName(t string) error {
	switch {
	case t == "":
		return errors.New("empty topic name")
	case t == "." || t == "..":
		return fmt.Errorf("topic name %q is not allowed", t)
	case len(t) > 249:
		return fmt.Errorf("topic name of %d characters, want at most 249", len(t))
	case strings.ContainsFunc(t, func(c rune) bool {
		return !(c == '.' || c == '_' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9')
	}):
		return fmt.Errorf("topic name %q: want letters, digits, '.', '_' or '-'", t)
	}
	return nil
}

// TransactionalID returns the transactional id the exactly-once relay uses
// (without a WithTransactionalIDSuffix suffix), or "" for a relay made with
// NewRelay.
func (r *Relay) TransactionalID() string {
	if r.txn == nil {
		return ""
	}
	return r.txn.txnID
}

// MarkerTopic returns the progress marker topic the exactly-once relay uses,
// or "" for a relay made with NewRelay.
func (r *Relay) MarkerTopic() string {
	if r.txn == nil {
		return ""
	}
	return r.txn.markerTopic
}

// Stats are a relay's counters since it was created. Safe to read while
// Run runs.
type Stats struct {
	// Published counts rows published and marked sent by this relay.
	Published int64 `json:"published"`
	// Transactions counts committed transactions (exactly-once mode).
	Transactions int64 `json:"transactions"`
	// Aborted counts transactions aborted or whose commit outcome was
	// unknown (their rows are decided by the next session's marker read).
	Aborted int64 `json:"aborted"`
	// Recovered counts rows marked sent from the progress marker at the
	// start of a session: committed to Kafka by a relay that stopped
	// (crashed) before marking them. Each is a duplicate avoided.
	Recovered int64 `json:"recovered"`
	// Fenced counts the times another relay with the same transactional
	// id fenced this one (it then stands by).
	Fenced int64 `json:"fenced"`
	// Takeovers counts the times this relay left standby to take over.
	Takeovers int64 `json:"takeovers"`
	// MarkerMismatches counts markers whose rows did not match this
	// database (not trusted; those rows are published again).
	MarkerMismatches int64 `json:"markerMismatches"`
	// The time spent in each phase of the exactly-once relay's steps,
	// summed over the steps: reading the unsent rows (Load), producing
	// them and the marker until acknowledged (Produce), EndTxn (Commit),
	// reading the marker back read_committed (Confirm) and the UPDATE
	// that marks them sent (Mark, which overlaps the next step's other
	// phases). Divided by Transactions, the mean of one step.
	LoadTime    time.Duration `json:"loadTime"`
	ProduceTime time.Duration `json:"produceTime"`
	CommitTime  time.Duration `json:"commitTime"`
	ConfirmTime time.Duration `json:"confirmTime"`
	MarkTime    time.Duration `json:"markTime"`
}

// Stats returns the relay's counters.
func (r *Relay) Stats() Stats {
	return Stats{
		Published:        r.stats.published.Load(),
		Transactions:     r.stats.transactions.Load(),
		Aborted:          r.stats.aborted.Load(),
		Recovered:        r.stats.recovered.Load(),
		Fenced:           r.stats.fenced.Load(),
		Takeovers:        r.stats.takeovers.Load(),
		MarkerMismatches: r.stats.mismatches.Load(),
		LoadTime:         time.Duration(r.stats.loadNs.Load()),
		ProduceTime:      time.Duration(r.stats.produceNs.Load()),
		CommitTime:       time.Duration(r.stats.commitNs.Load()),
		ConfirmTime:      time.Duration(r.stats.confirmNs.Load()),
		MarkTime:         time.Duration(r.stats.markNs.Load()),
	}
}

// sleep waits d, or until Notify when wakeable; false when ctx ended.
func (r *Relay) sleep(ctx context.Context, d time.Duration, wakeable bool) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	var wake <-chan struct{}
	if wakeable {
		wake = r.wake
	}
	select {
	case <-ctx.Done():
		return false
	case <-wake:
	case <-t.C:
	}
	return true
}

// isFenced reports whether err says another producer with our
// transactional id took over.
func isFenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.TransactionalIDNotFound)
}

// runTxn is Run in the exactly-once mode: sessions until ctx ends.
func (r *Relay) runTxn(ctx context.Context) error {
	failures := 0
	standby := false
	for ctx.Err() == nil {
		if standby {
			if !r.awaitTakeover(ctx) {
				return nil
			}
			r.stats.takeovers.Add(1)
			r.logger.Info("outbox relay taking over: the outbox made no progress while standing by", "relay", r.txn.name)
			standby = false
		}
		err := r.session(ctx, failures > 0)
		if ctx.Err() != nil {
			return nil
		}
		var fatal *fatalError
		if errors.As(err, &fatal) {
			return fatal.err
		}
		if ae := r.stopOnAuthz(err); ae != nil {
			return ae
		}
		if isFenced(err) {
			r.stats.fenced.Add(1)
			r.logger.Info("outbox relay fenced by another relay with the same transactional id; standing by",
				"relay", r.txn.name, "err", err)
			standby, failures = true, 0
			continue
		}
		failures++
		backoff := r.backoff(failures)
		r.logger.Warn("outbox relay session failed; starting a new one from the progress marker",
			"relay", r.txn.name, "err", err, "consecutive_failures", failures, "backoff", backoff)
		if r.onError != nil {
			r.onError(err)
		}
		if !r.sleep(ctx, backoff, false) {
			return nil
		}
	}
	return nil
}

// awaitTakeover stands by until rows are pending and the oldest unsent row
// has not changed for takeoverAfter, or ctx ends (false).
func (r *Relay) awaitTakeover(ctx context.Context) bool {
	last, since := int64(-1), time.Now()
	for {
		if !r.sleep(ctx, r.pollInterval, true) {
			return false
		}
		var oldest sql.NullInt64
		if err := r.db.QueryRowContext(ctx, `SELECT MIN(id) FROM `+r.ob.table+` WHERE sent_at IS NULL`).Scan(&oldest); err != nil {
			continue
		}
		if !oldest.Valid || oldest.Int64 != last {
			last, since = oldest.Int64, time.Now()
			if !oldest.Valid {
				last = -1
			}
			continue
		}
		if time.Since(since) >= r.txn.takeoverAfter {
			return true
		}
	}
}

// session runs one client: init (fencing), recovery from the marker, then
// steps until an error or ctx ends. probe makes the first step relay one
// row only (after a failure).
func (r *Relay) session(ctx context.Context, probe bool) error {
	tc := r.txn
	opts := append(tc.clientOptsFor(ClientProducer),
		kgo.TransactionalID(tc.txnID+tc.idSuffix),
		kgo.TransactionTimeout(tc.txnTimeout),
		kgo.RequiredAcks(kgo.AllISRAcks()),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return &fatalError{fmt.Errorf("outbox: relay client: %w", err)}
	}
	defer cl.Close()
	created, err := r.ensureMarkerTopic(ctx, cl)
	if err != nil {
		return err
	}
	// InitProducerID: fences every other producer with this transactional
	// id and resolves the transaction a predecessor left open, so that the
	// marker read below is final.
	if _, _, err := cl.ProducerID(ctx); err != nil {
		if ae := r.authzError(err, "init producer id", "", ""); ae != nil {
			err = ae
		}
		return fmt.Errorf("outbox: init producer id for %s: %w", tc.txnID+tc.idSuffix, err)
	}
	if !created { // a topic this session created holds no marker
		if err := r.recover(ctx, cl); err != nil {
			return err
		}
	}
	limit := r.batchSize
	if probe {
		limit = 1
	}
	conns, err := r.sessionConns(ctx)
	if err != nil {
		return err
	}
	defer conns.close()
	var tail *txncheck.Tail // reads the markers back; started at the first commit
	var marking *marking    // the last committed step's rows being marked sent
	defer func() {
		if marking != nil {
			<-marking.done // bounded (markSent's own timeout); an error is the next session's marker read's
		}
		if tail != nil {
			tail.Close()
		}
	}()
	for ctx.Err() == nil {
		n, err := r.txnStep(ctx, cl, conns, &tail, &marking, limit)
		if err != nil {
			return err
		}
		if n >= limit {
			limit = r.batchSize
			continue
		}
		limit = r.batchSize
		if !r.sleep(ctx, r.pollInterval, true) {
			return nil
		}
	}
	return nil
}

// ensureMarkerTopic creates the marker topic if missing and checks that it
// has one partition; created reports whether this call created it.
func (r *Relay) ensureMarkerTopic(ctx context.Context, cl *kgo.Client) (created bool, err error) {
	topic := r.txn.markerTopic
	adm := kadm.NewClient(cl)
	tds, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return false, fmt.Errorf("outbox: list marker topic %s: %w", topic, err)
	}
	if td, ok := tds[topic]; ok && td.Err != nil {
		if ae := r.authzError(td.Err, "marker topic", topic, "DESCRIBE"); ae != nil {
			return false, ae // not even DESCRIBE (READ and WRITE imply it)
		}
	}
	if td, ok := tds[topic]; ok && td.Err == nil {
		if n := len(td.Partitions); n != 1 {
			return false, &fatalError{fmt.Errorf("outbox: marker topic %s has %d partitions, want 1 (delete it; the relay recreates it)", topic, n)}
		}
		return false, nil
	}
	compact := "compact"
	cfg := map[string]*string{"cleanup.policy": &compact}
	if r.txn.minISR > 0 {
		v := strconv.Itoa(r.txn.minISR)
		cfg["min.insync.replicas"] = &v
	}
	resp, err := adm.CreateTopic(ctx, 1, r.txn.rf, cfg, topic)
	if err == nil {
		err = resp.Err
	}
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, kerr.TopicAlreadyExists): // another relay was quicker
		return false, nil
	default:
		if ae := r.authzError(err, "marker topic", topic, "CREATE"); ae != nil {
			err = ae
		}
		return false, fmt.Errorf("outbox: create marker topic %s (replication factor %d): %w", topic, r.txn.rf, err)
	}
}

// sessionConns are the connections an exactly-once relay session holds on
// PostgreSQL for its steps, taken from the pool once per session: one to
// read the unsent rows, one to mark them sent (the marking overlaps the next
// step's read). The relay is the one serial stage between the payments and
// fulfillment; on the pool its statements queued behind every consumer
// batch and checkout transaction waiting for a connection (the load runs:
// most of a step's time was its SELECT's wait for a connection). On SQLite
// both are nil: its writes must go through the pool's writer queue (InTx).
type sessionConns struct {
	load, mark *sql.Conn
}

// sessionConns takes the session's connections (none on SQLite).
func (r *Relay) sessionConns(ctx context.Context) (sessionConns, error) {
	var sc sessionConns
	if r.db.Dialect != sqldb.Postgres {
		return sc, nil
	}
	var err error
	if sc.load, err = r.db.Conn(ctx); err != nil {
		return sc, fmt.Errorf("outbox: relay connection: %w", err)
	}
	if sc.mark, err = r.db.Conn(ctx); err != nil {
		sc.close()
		return sessionConns{}, fmt.Errorf("outbox: relay connection: %w", err)
	}
	return sc, nil
}

// close returns the connections to the pool.
func (sc sessionConns) close() {
	for _, c := range []*sql.Conn{sc.load, sc.mark} {
		if c != nil {
			_ = c.Close()
		}
	}
}

// marking is the UPDATE that marks a committed transaction's rows sent,
// running on its own goroutine while the next step reads, produces and
// commits the rows after them. done is closed when it has ended; err is its
// error (read after done).
type marking struct {
	ids  []int64
	sums []rowSum
	done chan struct{}
	err  error
}

// startMarking marks ids sent on a goroutine of its own; the UPDATE runs
// even if ctx ends (bounded to 10 s): the rows are in Kafka.
func (r *Relay) startMarking(ctx context.Context, conn *sql.Conn, ids []int64, sums []rowSum) *marking {
	m := &marking{ids: ids, sums: sums, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		start := time.Now()
		defer func() { r.stats.markNs.Add(int64(time.Since(start))) }()
		if r.beforeMark != nil {
			if m.err = r.beforeMark(ids); m.err != nil {
				return
			}
		}
		mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if m.err = r.markSent(mctx, conn, ids); m.err == nil {
			r.stats.published.Add(int64(len(ids)))
		}
	}()
	return m
}

// txnStep relays up to limit rows in one transaction and returns how many
// (all committed unless err is set). A commit is trusted only once its
// marker reads back read_committed (confirm): franz-go's EndTransaction can
// abort a write-only transaction and return nil.
//
// The marking of the rows runs on (*prev), overlapping the next step: that
// step reads the unsent rows without prev's, names prev's rows in its own
// marker as well (marker.Prev), so that whichever of the two markers is the
// last committed one names every row committed and perhaps not marked, and
// waits for prev's marking to end after its own commit was confirmed (an
// error of it ends the session, and the next session marks both from the
// marker). A step therefore never starts while more than one transaction's
// rows are unmarked, and the order of the rows in Kafka is that of the
// steps, as before.
func (r *Relay) txnStep(ctx context.Context, cl *kgo.Client, sc sessionConns, tail **txncheck.Tail, prev **marking, limit int) (int, error) {
	var carry *marking // prev, if its marking is still in flight
	if p := *prev; p != nil {
		select {
		case <-p.done:
			*prev = nil
			if p.err != nil {
				return 0, p.err // the next session marks them from the marker
			}
		default:
			carry = p
		}
	}
	var except []int64
	if carry != nil {
		except = carry.ids
	}
	start := time.Now()
	var q querier = r.db
	if sc.load != nil {
		q = sc.load
	}
	rows, err := r.load(ctx, q, limit, except)
	r.stats.loadNs.Add(int64(time.Since(start)))
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	ids := make([]int64, len(rows))
	recs := make([]*kgo.Record, 0, len(rows)+1)
	sums := make([]rowSum, len(rows))
	for i, rw := range rows {
		ids[i] = rw.id
		recs = append(recs, rw.rec)
		sums[i] = rowSum{id: rw.id, topic: rw.rec.Topic, key: rw.rec.Key, value: rw.rec.Value}
	}
	mk := marker{V: markerVersion, IDs: toRanges(ids), Sum: checksum(sums), At: time.Now().UnixMilli()}
	if carry != nil {
		mk.V, mk.Prev, mk.PrevSum = markerVersionPrev, toRanges(carry.ids), checksum(carry.sums)
	}
	mv, err := json.Marshal(mk)
	if err != nil {
		return 0, &fatalError{err}
	}
	mrec := &kgo.Record{Topic: r.txn.markerTopic, Key: []byte(r.txn.name), Value: mv}
	recs = append(recs, mrec)

	if err := cl.BeginTransaction(); err != nil {
		return 0, fmt.Errorf("outbox: begin transaction: %w", err)
	}
	start = time.Now()
	res := cl.ProduceSync(ctx, recs...)
	r.stats.produceNs.Add(int64(time.Since(start)))
	if res.FirstErr() != nil {
		err := res.FirstErr()
		if ae := r.produceAuthzError(err, res); ae != nil {
			err = ae
		}
		r.stats.aborted.Add(1)
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_ = cl.AbortBufferedRecords(actx)
		_ = cl.EndTransaction(actx, kgo.TryAbort)
		cancel()
		return 0, fmt.Errorf("outbox: produce %d rows from id %d (transaction aborted): %w", len(rows), ids[0], err)
	}
	if r.afterProduce != nil {
		if err := r.afterProduce(ids); err != nil {
			return 0, &fatalError{err}
		}
	}
	// Not cancelled by ctx: a cancelled EndTxn leaves the outcome unknown.
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	start = time.Now()
	err = cl.EndTransaction(ectx, kgo.TryCommit)
	r.stats.commitNs.Add(int64(time.Since(start)))
	cancel()
	if err != nil {
		r.stats.aborted.Add(1)
		return 0, fmt.Errorf("outbox: commit transaction of %d rows from id %d (outcome unknown until the next session reads the marker): %w", len(rows), ids[0], err)
	}
	start = time.Now()
	err = r.confirm(ctx, tail, mrec)
	r.stats.confirmNs.Add(int64(time.Since(start)))
	if err != nil {
		r.stats.aborted.Add(1)
		return 0, fmt.Errorf("outbox: commit transaction of %d rows from id %d: %w", len(rows), ids[0], err)
	}
	r.stats.transactions.Add(1)
	if r.afterCommit != nil {
		if err := r.afterCommit(ids); err != nil {
			return 0, &fatalError{err}
		}
	}
	if carry != nil {
		<-carry.done // bounded: markSent's own timeout
		*prev = nil
		if carry.err != nil {
			return 0, carry.err // this step's marker names its rows too: the next session marks both
		}
	}
	*prev = r.startMarking(ctx, sc.mark, ids, sums)
	return len(rows), nil
}

// confirmTimeout bounds the wait for a committed marker to become visible
// to read_committed readers (Kafka writes the markers just after answering
// EndTxn; the coordinator retries them while a partition leader is away).
const confirmTimeout = 30 * time.Second

// confirm reads the transaction's progress marker (the last record it
// produced, m) back as a read_committed reader, through *tail (started at
// m's offset when nil). nil: the transaction committed. An error wrapping
// txncheck.ErrAborted: it was aborted although EndTransaction returned nil
// (franz-go v1.22.3, see internal/txncheck); the rows are not marked, and
// the next session, whose marker read does not see the aborted marker,
// publishes them again. Any other error leaves the outcome to that marker
// read too.
func (r *Relay) confirm(ctx context.Context, tail **txncheck.Tail, m *kgo.Record) error {
	if *tail == nil {
		t, err := txncheck.NewTail(r.txn.clientOptsFor(ClientConfirm), m.Topic, m.Partition, m.Offset)
		if err != nil {
			return err
		}
		*tail = t
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), confirmTimeout)
	defer cancel()
	ok, err := (*tail).Committed(cctx, m.Offset)
	switch {
	case err != nil:
		return fmt.Errorf("read back progress marker %s/%d@%d (outcome decided by the next session's marker read): %w", m.Topic, m.Partition, m.Offset, err)
	case !ok:
		r.logger.Warn("outbox relay: a transaction reported committed was aborted; its rows are published again",
			"relay", r.txn.name, "marker_topic", m.Topic, "marker_offset", m.Offset)
		return fmt.Errorf("progress marker %s/%d@%d: %w", m.Topic, m.Partition, m.Offset, txncheck.ErrAborted)
	}
	return nil
}

// recover reads the last committed marker and marks its rows sent: those of
// the previous transaction it names (marker.Prev) first, then its own.
func (r *Relay) recover(ctx context.Context, cl *kgo.Client) error {
	m, err := r.readMarker(ctx, cl)
	if err != nil || m == nil {
		return err
	}
	if len(m.Prev) > 0 {
		if err := r.recoverRows(ctx, m.Prev, m.PrevSum); err != nil {
			return err
		}
	}
	return r.recoverRows(ctx, m.IDs, m.Sum)
}

// recoverRows marks sent the unsent rows of the id ranges of one
// transaction, if the rows found match the checksum sum. One UPDATE marked
// all of a transaction's rows, so they are all unsent or all sent (and then
// perhaps pruned); only unsent rows are checked.
func (r *Relay) recoverRows(ctx context.Context, ranges [][2]int64, sum string) error {
	var ids []int64
	for _, rg := range ranges {
		for id := rg[0]; id <= rg[1]; id++ {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	rows, unsent, err := r.loadForCheck(ctx, ranges)
	if err != nil {
		return err
	}
	if len(unsent) == 0 {
		return nil // marked already (the usual case)
	}
	if len(rows) != len(ids) || checksum(rows) != sum {
		r.stats.mismatches.Add(1)
		r.logger.Error("outbox relay: the last progress marker does not match this database's rows; not trusting it, its rows are published again (was the database replaced while the broker was kept?)",
			"relay", r.txn.name, "marker_topic", r.txn.markerTopic, "first_id", ids[0], "rows", len(ids), "found", len(rows))
		return nil
	}
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	err = r.markSent(mctx, nil, unsent)
	cancel()
	if err != nil {
		return err
	}
	r.stats.recovered.Add(int64(len(unsent)))
	r.logger.Info("outbox relay: marked rows sent that an earlier relay committed to Kafka before stopping",
		"relay", r.txn.name, "rows", len(unsent), "first_id", unsent[0])
	return nil
}

// loadForCheck reads the rows of the given id ranges: all of them for the
// checksum, and the ids of those not marked sent.
func (r *Relay) loadForCheck(ctx context.Context, ranges [][2]int64) (rows []rowSum, unsent []int64, err error) {
	q := r.db.Rebind(`SELECT id, topic, record_key, value, sent_at FROM ` + r.ob.table + ` WHERE id >= ? AND id <= ? ORDER BY id`)
	for _, rg := range ranges {
		rs, err := r.db.QueryContext(ctx, q, rg[0], rg[1])
		if err != nil {
			return nil, nil, fmt.Errorf("outbox: read marker rows: %w", err)
		}
		for rs.Next() {
			var (
				s    rowSum
				sent sql.NullInt64
			)
			if err := rs.Scan(&s.id, &s.topic, &s.key, &s.value, &sent); err != nil {
				rs.Close()
				return nil, nil, fmt.Errorf("outbox: read marker rows: %w", err)
			}
			rows = append(rows, s)
			if !sent.Valid {
				unsent = append(unsent, s.id)
			}
		}
		err = rs.Err()
		rs.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("outbox: read marker rows: %w", err)
		}
	}
	return rows, unsent, nil
}

// marker is the progress marker's value: the exact ids of the rows its
// transaction published, as inclusive ranges, and their checksum; in
// version 2 also those of the previous transaction (Prev, PrevSum), whose
// rows were still being marked sent when this one was built.
type marker struct {
	V       int        `json:"v"`
	IDs     [][2]int64 `json:"ids"`
	Sum     string     `json:"sum"`
	Prev    [][2]int64 `json:"prev,omitempty"`
	PrevSum string     `json:"prevSum,omitempty"`
	At      int64      `json:"at"` // unix ms, informational
}

// toRanges compresses ascending ids into inclusive ranges.
func toRanges(ids []int64) [][2]int64 {
	var out [][2]int64
	for _, id := range ids {
		if n := len(out); n > 0 && out[n-1][1]+1 == id {
			out[n-1][1] = id
			continue
		}
		out = append(out, [2]int64{id, id})
	}
	return out
}

// rowSum is what the checksum covers of a row.
type rowSum struct {
	id         int64
	topic      string
	key, value []byte
}

// checksum is FNV-1a 64 over each row's id, topic, key and value (length
// prefixed, nil distinct from empty), in id order, as 16 hex digits.
func checksum(rows []rowSum) string {
	h := fnv.New64a()
	var b [8]byte
	put := func(p []byte, isNil bool) {
		n := int64(len(p))
		if isNil {
			n = -1
		}
		binary.BigEndian.PutUint64(b[:], uint64(n))
		h.Write(b[:])
		h.Write(p)
	}
	for _, rw := range rows {
		binary.BigEndian.PutUint64(b[:], uint64(rw.id))
		h.Write(b[:])
		put([]byte(rw.topic), false)
		put(rw.key, rw.key == nil)
		put(rw.value, rw.value == nil)
	}
	return fmt.Sprintf("%016x", h.Sum64())
}

// readMarker returns the last committed marker of this relay, or nil if
// there is none. It reads backwards from the last stable offset in growing
// windows.
func (r *Relay) readMarker(ctx context.Context, cl *kgo.Client) (*marker, error) {
	topic := r.txn.markerTopic
	adm := kadm.NewClient(cl)
	ends, err := adm.ListCommittedOffsets(ctx, topic) // last stable offset
	if err != nil {
		return nil, fmt.Errorf("outbox: marker topic %s end offset: %w", topic, err)
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("outbox: marker topic %s start offset: %w", topic, err)
	}
	end, ok1 := ends.Lookup(topic, 0)
	start, ok2 := starts.Lookup(topic, 0)
	if !ok1 || !ok2 || end.Err != nil || start.Err != nil {
		return nil, fmt.Errorf("outbox: marker topic %s partition 0 offsets unavailable: %v %v", topic, end.Err, start.Err)
	}
	if end.Offset <= start.Offset {
		return nil, nil
	}
	for window := int64(16); ; window *= 8 {
		from := max(start.Offset, end.Offset-window)
		m, err := r.scanMarkers(ctx, from, end.Offset)
		if err != nil || m != nil || from == start.Offset {
			return m, err
		}
	}
}

// scanMarkers reads [from, end) of the marker partition as a
// read_committed reader and returns the last marker with this relay's key.
func (r *Relay) scanMarkers(ctx context.Context, from, end int64) (*marker, error) {
	topic := r.txn.markerTopic
	rd, err := kgo.NewClient(append(r.txn.clientOptsFor(ClientMarkers),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(from)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), // the last offset below the LSO is usually a commit marker
	)...)
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var last *kgo.Record
	for done := false; !done; {
		fs := rd.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("outbox: reading marker topic %s from %d to %d: %w", topic, from, end, ctx.Err())
		}
		fs.EachRecord(func(rec *kgo.Record) {
			if rec.Offset >= end {
				done = true
				return
			}
			if !rec.Attrs.IsControl() && string(rec.Key) == r.txn.name {
				last = rec
			}
			if rec.Offset >= end-1 {
				done = true
			}
		})
	}
	if last == nil {
		return nil, nil
	}
	var m marker
	if err := json.Unmarshal(last.Value, &m); err != nil || (m.V != markerVersion && m.V != markerVersionPrev) {
		return nil, &fatalError{fmt.Errorf("outbox: marker at %s/0@%d is not a version %d or %d marker (%v): is another program writing to this topic?", topic, last.Offset, markerVersion, markerVersionPrev, err)}
	}
	return &m, nil
}
