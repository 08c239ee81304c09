package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/sqldb"
)

// Relay defaults.
const (
	// DefaultMaxBatch is how many rows one relay step reads and produces.
	DefaultMaxBatch = 500
	// DefaultPollInterval is how long an idle relay waits for a Notify
	// before it looks at the table again (rows enqueued by another process
	// are only found by polling).
	DefaultPollInterval = 200 * time.Millisecond
	// DefaultMinBackoff is the pause after the first failed step; it
	// doubles per consecutive failure up to DefaultMaxBackoff.
	DefaultMinBackoff = 100 * time.Millisecond
	// DefaultMaxBackoff is the longest pause between failed steps.
	DefaultMaxBackoff = 5 * time.Second
)

// Relay publishes the outbox of one database to Kafka. Create it with
// [NewRelay] and start it with [Relay.Run]. Notify and Pending are safe for
// concurrent use, also while Run runs; Run runs at most once at a time.
type Relay struct {
	db     *sqldb.DB
	client *kgo.Client
	// table is the outbox table's name (Table), ob the outbox on it.
	table string
	ob    *Outbox

	batchSize              int
	pollInterval           time.Duration
	minBackoff, maxBackoff time.Duration
	logger                 *slog.Logger
	onError                func(error)
	metrics                *Metrics      // WithMetrics
	mc                     relayCounters // the relay's series of metrics

	wake    chan struct{} // one slot: a pending Notify
	running atomic.Bool

	// txn is set for the exactly-once mode (NewTransactionalRelay).
	txn *txnConfig

	stats struct {
		published, transactions, aborted, recovered, fenced, takeovers, mismatches atomic.Int64
		// nanoseconds per phase of the exactly-once steps (Stats)
		loadNs, produceNs, commitNs, confirmNs, markNs atomic.Int64
	}

	// afterProduce, when set (tests only, see export_test.go), runs after
	// a batch was produced and before it is marked sent, with the ids about
	// to be marked; an error from it ends Run without marking, as a crash
	// at that point would.
	afterProduce func(ids []int64) error
	// afterCommit, when set (tests only), runs in the exactly-once mode
	// after a transaction committed and before its rows are marked sent;
	// an error from it ends Run without marking, as a crash there would.
	afterCommit func(ids []int64) error
	// beforeMark, when set (tests only), runs in the exactly-once mode on
	// the goroutine that marks a committed transaction's rows sent, before
	// the UPDATE; an error from it is the marking's error.
	beforeMark func(ids []int64) error
}

// NewRelay returns a relay that publishes db's outbox with client.
//
// The caller owns and configures the client: an idempotent producer (the
// kgo default; do not pass kgo.DisableIdempotentWrite) with acks=all (the kgo
// default, kgo.RequiredAcks(kgo.AllISRAcks())), not transactional, with no
// default produce topic needed (each row names its topic). Idempotence keeps
// the per-partition order across the producer's internal retries. The relay
// does not close the client.
//
// It returns an error when db or client is nil, or when the Table name is
// not a plain lower-case identifier (sqldb.CheckTableName), as
// NewTransactionalRelay does.
func NewRelay(db *sqldb.DB, client *kgo.Client, opts ...Opt) (*Relay, error) {
	if client == nil {
		return nil, errors.New("outbox: NewRelay: nil client")
	}
	r, err := newRelay(db, nil, opts)
	if err != nil {
		return nil, err
	}
	r.client = client
	r.mc = r.metrics.relay(r.table)
	return r, nil
}

// newRelay is a relay with the defaults, then opts applied (with txn set
// first, for the options of the exactly-once mode), on a checked table.
func newRelay(db *sqldb.DB, txn *txnConfig, opts []Opt) (*Relay, error) {
	if db == nil {
		return nil, errors.New("outbox: relay: nil database")
	}
	r := &Relay{
		db:           db,
		batchSize:    DefaultMaxBatch,
		pollInterval: DefaultPollInterval,
		minBackoff:   DefaultMinBackoff,
		maxBackoff:   DefaultMaxBackoff,
		logger:       slog.New(slog.DiscardHandler),
		wake:         make(chan struct{}, 1),
		table:        DefaultTable,
		txn:          txn,
	}
	for _, o := range opts {
		o(r)
	}
	ob, err := New(r.db, r.table)
	if err != nil {
		return nil, err
	}
	r.ob = ob
	return r, nil
}

// Notify wakes the relay to look for new rows now instead of at the next
// poll. It never blocks, and several calls before the relay wakes count as
// one. Call it after committing a transaction that enqueued rows. Safe for
// concurrent use; a Notify before Run starts makes Run's first wait return at
// once.
func (r *Relay) Notify() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Pending returns the number of rows of the relay's outbox table not yet
// marked sent; see [Outbox.Pending].
func (r *Relay) Pending(ctx context.Context) (int, error) { return r.ob.Pending(ctx) }

// Run publishes the outbox until ctx is done, then returns nil. Each step
// reads up to the batch size of unsent rows in id order, produces them with
// ProduceSync (the records are handed to the client in id order, so each
// partition receives them in that order), and marks sent, in one UPDATE, the
// longest run of rows from the start of the batch that Kafka acknowledged. A
// full batch is followed by the next step at once; otherwise the relay waits
// for Notify, the poll interval or ctx.
//
// When a step fails (a record not acknowledged, or a database error), the
// relay logs it, calls the OnError function, waits a backoff (doubling
// from the minimum to the maximum, reset by a successful step) and tries
// again from the first unsent row, which was not marked: it never skips a row
// and never marks a later row before an earlier one. Records after the failed
// one that Kafka did acknowledge are produced again (duplicates, absorbed by
// the consumers' inboxes); to keep that cheap, the retry produces only the
// first unsent row, and full batches resume once it succeeds. The marking
// UPDATE runs even when ctx ends during the step (bounded to 10 s), so a
// clean shutdown does not re-publish what it already published.
//
// Run returns ErrRunning if the relay is already running, an error wrapping kgo.ErrClientClosed
// if the client was closed, and an *AuthorizationError (not retried; the
// refused rows stay unsent) when the broker refuses the relay an ACL.
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer r.running.Store(false)
	if r.txn != nil {
		return r.runTxn(ctx)
	}

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	wait := func(d time.Duration, wakeable bool) bool {
		timer.Reset(d)
		defer timer.Stop()
		var wake <-chan struct{}
		if wakeable {
			wake = r.wake
		}
		select {
		case <-ctx.Done():
			return false
		case <-wake:
		case <-timer.C:
		}
		return true
	}

	limit := r.batchSize
	failures := 0
	for ctx.Err() == nil {
		n, err := r.step(ctx, limit)
		if err != nil {
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
			failures++
			backoff := r.backoff(failures)
			r.logger.Warn("outbox relay step failed; retrying from the first unsent row",
				"err", err, "consecutive_failures", failures, "backoff", backoff)
			add(r.mc.failures, 1)
			if r.onError != nil {
				r.onError(err)
			}
			limit = 1
			if !wait(backoff, false) {
				return nil
			}
			continue
		}
		failures = 0
		if n >= limit {
			limit = r.batchSize // a full batch (or a successful probe): more may be waiting
			continue
		}
		limit = r.batchSize
		if !wait(r.pollInterval, true) {
			return nil
		}
	}
	return nil
}

// backoff returns the pause after the given number of consecutive failures.
func (r *Relay) backoff(failures int) time.Duration {
	d := r.minBackoff
	for i := 1; i < failures && d < r.maxBackoff; i++ {
		d *= 2
	}
	return min(d, r.maxBackoff)
}

// row is one unsent outbox row.
type row struct {
	id  int64
	rec *kgo.Record
}

// step relays up to limit rows and returns how many it read (all of them
// produced and marked, unless err is set).
func (r *Relay) step(ctx context.Context, limit int) (int, error) {
	rows, err := r.load(ctx, r.db, limit, nil)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	recs := make([]*kgo.Record, len(rows))
	for i, rw := range rows {
		recs[i] = rw.rec
	}
	results := r.client.ProduceSync(ctx, recs...)
	errs := make(map[*kgo.Record]error, len(results))
	for _, res := range results {
		if res.Err != nil {
			errs[res.Record] = res.Err
		}
	}
	// The acknowledged prefix: results arrive in completion order, so look
	// each record up rather than trusting positions.
	acked := len(rows)
	var produceErr error
	for i, rw := range rows {
		if e, ok := errs[rw.rec]; ok {
			acked = i
			if ae := r.authzError(e, "produce", rw.rec.Topic, "WRITE"); ae != nil {
				e = ae
			}
			produceErr = fmt.Errorf("outbox: produce row %d to %s: %w", rw.id, rw.rec.Topic, e)
			if errors.Is(e, kgo.ErrClientClosed) {
				produceErr = &fatalError{produceErr}
			}
			break
		}
	}
	ids := make([]int64, acked)
	for i := range ids {
		ids[i] = rows[i].id
	}
	if r.afterProduce != nil {
		if err := r.afterProduce(ids); err != nil {
			return 0, &fatalError{err}
		}
	}
	if acked > 0 {
		// Mark even if ctx ended meanwhile: these records are in Kafka.
		mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		err := r.markSent(mctx, nil, ids)
		cancel()
		if err != nil {
			return 0, err
		}
		r.stats.published.Add(int64(acked))
		add(r.mc.published, int64(acked))
	}
	if produceErr != nil {
		return acked, produceErr
	}
	return len(rows), nil
}

// querier is what load reads through: the pool (*sql.DB) or a connection
// the exactly-once relay holds for its session (*sql.Conn).
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// load reads up to limit unsent rows in id order through q, leaving out the
// ids in except (rows committed to Kafka whose marking is in flight).
func (r *Relay) load(ctx context.Context, q querier, limit int, except []int64) ([]row, error) {
	sel := `SELECT id, topic, record_key, value, headers, trace_context FROM ` + r.ob.table + ` WHERE sent_at IS NULL`
	args := make([]any, 0, len(except)+1)
	if len(except) > 0 {
		sel += ` AND id NOT IN (?` + strings.Repeat(", ?", len(except)-1) + `)`
		for _, id := range except {
			args = append(args, id)
		}
	}
	args = append(args, limit)
	rs, err := q.QueryContext(ctx, r.db.Rebind(sel+` ORDER BY id LIMIT ?`), args...)
	if err != nil {
		return nil, fmt.Errorf("outbox: read unsent rows: %w", err)
	}
	defer rs.Close()
	var out []row
	for rs.Next() {
		var (
			id         int64
			topic      string
			key, value []byte
			headers    sql.NullString
			traceCtx   sql.NullString
		)
		if err := rs.Scan(&id, &topic, &key, &value, &headers, &traceCtx); err != nil {
			return nil, fmt.Errorf("outbox: read unsent rows: %w", err)
		}
		rec := &kgo.Record{Topic: topic, Key: key, Value: value}
		if headers.Valid && headers.String != "" {
			var hs []Header
			if err := json.Unmarshal([]byte(headers.String), &hs); err != nil {
				return nil, fmt.Errorf("outbox: row %d: decode headers: %w", id, err)
			}
			rec.Headers = make([]kgo.RecordHeader, len(hs))
			for i, h := range hs {
				rec.Headers[i] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
			}
		}
		if traceCtx.Valid && traceCtx.String != "" && !slices.ContainsFunc(rec.Headers, func(h kgo.RecordHeader) bool { return h.Key == HeaderTraceParent }) {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderTraceParent, Value: []byte(traceCtx.String)})
		}
		out = append(out, row{id: id, rec: rec})
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("outbox: read unsent rows: %w", err)
	}
	return out, nil
}

// markSent sets sent_at on exactly the given ids, in one UPDATE. (Not an id
// range: on PostgreSQL a row with an id inside the range may have committed
// after the batch was read, and must not be marked unsent-but-sent.)
//
// On conn (PostgreSQL only; nil: a transaction of the pool, InTx) the UPDATE
// runs as one statement, atomic by itself.
func (r *Relay) markSent(ctx context.Context, conn *sql.Conn, ids []int64) error {
	q := `UPDATE ` + r.ob.table + ` SET sent_at = ? WHERE id IN (?` + strings.Repeat(", ?", len(ids)-1) + `)`
	args := make([]any, 0, len(ids)+1)
	args = append(args, time.Now().UnixMilli())
	for _, id := range ids {
		args = append(args, id)
	}
	var err error
	if conn != nil {
		_, err = conn.ExecContext(ctx, r.db.Rebind(q), args...)
	} else {
		err = r.db.InTx(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, r.db.Rebind(q), args...)
			return err
		})
	}
	if err != nil {
		return fmt.Errorf("outbox: mark %d rows sent: %w", len(ids), err)
	}
	return nil
}
