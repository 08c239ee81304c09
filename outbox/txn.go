package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/txncheck"
	"github.com/ordercast/ordercast/internal/txnretry"
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

// Default name prefixes of the exactly-once relay (see DefaultTransactionalID and
// DefaultMarkerTopic; the options TransactionalID and MarkerTopic replace them).
const (
	DefaultTransactionalIDPrefix = "ordercast-outbox-"
	DefaultMarkerTopicPrefix     = "ordercast.outbox."
)

// DefaultTransactionalID returns the default transactional id of the exactly-once
// relay named name: DefaultTransactionalIDPrefix + name
// ("ordercast-outbox-" + name). A relay given TransactionalID uses that
// instead; [Relay.TransactionalID] returns the one a relay uses. Derive ACLs
// (WRITE on the TransactionalId resource) from the relay's, not from this,
// when the option is used.
func DefaultTransactionalID(name string) string { return DefaultTransactionalIDPrefix + name }

// DefaultMarkerTopic returns the default progress marker topic of the exactly-once
// relay named name: DefaultMarkerTopicPrefix + name ("ordercast.outbox." +
// name; one partition, compacted). A relay given MarkerTopic uses
// that instead; [Relay.MarkerTopic] returns the one a relay uses.
func DefaultMarkerTopic(name string) string { return DefaultMarkerTopicPrefix + name }

// NewTransactionalRelay returns a relay that publishes db's outbox exactly
// once for read_committed readers. name identifies the outbox (one name per
// database): the relay's transactional id is DefaultTransactionalID(name) and its
// progress marker topic DefaultMarkerTopic(name) unless TransactionalID and
// MarkerTopic choose others; name is also the key of its marker
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
// transaction and return nil (docs/upstream/franz-go-write-only-txn-abort.md
// in the project's repository): a marker found aborted
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
// TakeoverAfter. The checksum guards against a marker topic left over
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
// TransactionalID id is empty, or a MarkerTopic name is not a
// valid topic name.
func NewTransactionalRelay(db *sqldb.DB, name string, clientOpts []kgo.Opt, opts ...Opt) (*Relay, error) {
	if name == "" || strings.ContainsFunc(name, func(c rune) bool {
		return !(c == '.' || c == '_' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9')
	}) {
		return nil, fmt.Errorf("outbox: relay name %q: want letters, digits, '.', '_' or '-'", name)
	}
	r, err := newRelay(db, &txnConfig{
		name:          name,
		clientOpts:    append([]kgo.Opt{}, clientOpts...),
		rf:            -1,
		txnTimeout:    DefaultTransactionTimeout,
		takeoverAfter: DefaultTakeoverAfter,
	}, opts)
	if err != nil {
		return nil, err
	}
	if err := r.txn.resolveNames(); err != nil {
		return nil, err
	}
	r.mc = r.metrics.relay(name)
	return r, nil
}

// TransactionalID returns the transactional id the exactly-once relay uses
// (without a TransactionalIDSuffix suffix), or "" for a relay made with
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
			add(r.mc.takeovers, 1)
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
			add(r.mc.fenced, 1)
			r.logger.Info("outbox relay fenced by another relay with the same transactional id; standing by",
				"relay", r.txn.name, "err", err)
			standby, failures = true, 0
			continue
		}
		failures++
		backoff := r.backoff(failures)
		r.logger.Warn("outbox relay session failed; starting a new one from the progress marker",
			"relay", r.txn.name, "err", err, "consecutive_failures", failures, "backoff", backoff)
		add(r.mc.failures, 1)
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

// txnClientOpts are the options of the relay's transactional client:
// retries back off from 20 ms and metadata is refreshed up to every 100 ms
// (txnretry: a transaction's first produce after the previous one's end is
// often refused with CONCURRENT_TRANSACTIONS, and waits for both) unless the
// client options say otherwise, then the client options, then the
// transactional ID and timeout and acks=all.
func (r *Relay) txnClientOpts() []kgo.Opt {
	tc := r.txn
	opts := append(txnretry.Opts(), tc.clientOptsFor(ClientProducer)...)
	return append(opts,
		kgo.TransactionalID(tc.txnID+tc.idSuffix),
		kgo.TransactionTimeout(tc.txnTimeout),
		kgo.RequiredAcks(kgo.AllISRAcks()),
	)
}

// session runs one client: init (fencing), recovery from the marker, then
// steps until an error or ctx ends. probe makes the first step relay one
// row only (after a failure).
func (r *Relay) session(ctx context.Context, probe bool) error {
	tc := r.txn
	cl, err := kgo.NewClient(r.txnClientOpts()...)
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
