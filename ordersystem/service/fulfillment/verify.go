package fulfillment

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/store"
	"github.com/ordercast/ordercast/processor"
)

// Payment is an order's payment as the payments service recorded it: its
// row of the payments table, written in the same database transaction as
// the wallet debit and the outbox row the paymentProcessed event is
// published from.
type Payment struct {
	CustomerID  string // "" for a guest (NULL in the table)
	Status      string // order.PaymentPaid or order.PaymentRefused
	Method      string // order.MethodWallet or order.MethodCard
	Amount      order.Money
	ProcessedAt time.Time // whole milliseconds, UTC
}

// Records reads payment records. Payment returns ok false, and a nil error,
// when the order has none; an error when they could not be read. It must be
// safe for concurrent use.
type Records interface {
	Payment(ctx context.Context, orderID string) (p Payment, ok bool, err error)
}

// BatchRecords is a Records that also reads the records of several orders
// in one call (DBRecords does). Payments returns the records found, by
// order id (an order without one is absent), or an error when they could
// not be read. It must be safe for concurrent use.
type BatchRecords interface {
	Records
	Payments(ctx context.Context, orderIDs []string) (map[string]Payment, error)
}

// RecordsFunc makes a function a Records.
type RecordsFunc func(ctx context.Context, orderID string) (Payment, bool, error)

// Payment calls f.
func (f RecordsFunc) Payment(ctx context.Context, orderID string) (Payment, bool, error) {
	return f(ctx, orderID)
}

// DBRecords reads the payments table of db: the database the payments
// service writes. A process running fulfillment needs SELECT on that table
// only (on PostgreSQL: GRANT SELECT ON payments TO the fulfillment role).
//
// Lookups made at the same time share one query: a Payment called while
// another one's query runs waits for it to return and then goes, with every
// other lookup that arrived meanwhile, into one SELECT of up to
// maxLookupBatch orders (WHERE order_id IN (...)). A lookup alone is not
// delayed; under load a burst of records (a fetch handled by Concurrency
// workers) costs one round trip instead of one each. A query's error is
// returned to every lookup it served. Payment returns at its context's end
// with that context's error, whether its lookup waits or its query runs;
// the query itself, bounded by lookupTimeout, still serves the others.
// Safe for concurrent use.
// The Records it returns is a BatchRecords.
func DBRecords(db *store.DB) Records { return &dbRecords{db: db} }

var _ BatchRecords = (*dbRecords)(nil)

// maxLookupBatch bounds the orders of one query (DBRecords).
const maxLookupBatch = 256

// lookupTimeout bounds one shared query: it serves several callers, so no
// one caller's context cancels it; each caller still returns at its own
// context's end.
const lookupTimeout = 30 * time.Second

type dbRecords struct {
	db       *store.DB
	mu       sync.Mutex
	queued   []*lookup // waiting for the next query
	running  bool      // a query runs (its goroutine takes queued next)
	querying int       // lookups in the running query
	queries  atomic.Int64
}

// lookup is one Payment call's request and, once done is closed, its result.
type lookup struct {
	orderID string
	p       Payment
	ok      bool
	err     error
	done    chan struct{}
}

func (r *dbRecords) Payment(ctx context.Context, orderID string) (Payment, bool, error) {
	l := &lookup{orderID: orderID, done: make(chan struct{})}
	r.mu.Lock()
	r.queued = append(r.queued, l)
	lead := !r.running
	r.running = true
	r.mu.Unlock()
	if lead {
		// On a goroutine of its own, so that this caller too returns at
		// its context's end while the query it started serves the others.
		go r.run(context.WithoutCancel(ctx))
	}
	select {
	case <-l.done:
		return l.p, l.ok, l.err
	case <-ctx.Done():
		return Payment{}, false, fmt.Errorf("fulfillment: read the payment of %s: %w", orderID, ctx.Err())
	}
}

// run queries for the queued lookups (up to maxLookupBatch), then, if more
// queued meanwhile, the next ones, until none is left. One run at a time
// (running); it runs on a goroutine of its own, started by the lookup that
// found none running.
func (r *dbRecords) run(ctx context.Context) {
	for {
		r.mu.Lock()
		n := min(len(r.queued), maxLookupBatch)
		r.querying = n
		if n == 0 {
			r.queued = nil
			r.running = false
			r.mu.Unlock()
			return
		}
		batch := r.queued[:n:n]
		r.queued = r.queued[n:]
		r.mu.Unlock()
		r.query(ctx, batch)
	}
}

// query reads the payment rows of batch's orders and completes each lookup.
func (r *dbRecords) query(ctx context.Context, batch []*lookup) {
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	ids := make([]string, len(batch))
	for i, l := range batch {
		ids[i] = l.orderID
	}
	found, err := r.read(ctx, ids)
	for _, l := range batch {
		if err != nil {
			l.err = fmt.Errorf("fulfillment: read the payment of %s: %w", l.orderID, err)
		} else {
			l.p, l.ok = found[l.orderID]
		}
		close(l.done)
	}
}

// Payments reads the payment rows of orderIDs (duplicates allowed) in
// queries of up to maxLookupBatch orders each, not through the shared
// lookups of Payment: its caller already holds a batch.
func (r *dbRecords) Payments(ctx context.Context, orderIDs []string) (map[string]Payment, error) {
	found := make(map[string]Payment, len(orderIDs))
	for chunk := range slices.Chunk(orderIDs, maxLookupBatch) {
		m, err := r.read(ctx, chunk)
		if err != nil {
			return nil, fmt.Errorf("fulfillment: read the payments of %d orders: %w", len(orderIDs), err)
		}
		maps.Copy(found, m)
	}
	return found, nil
}

// read runs one SELECT of the payment rows of ids (duplicates allowed, at
// least one).
func (r *dbRecords) read(ctx context.Context, ids []string) (map[string]Payment, error) {
	r.queries.Add(1)
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	q := r.db.Rebind(`SELECT order_id, customer_id, status, method, amount_milli, processed_at FROM payments WHERE order_id IN (?` +
		strings.Repeat(", ?", len(ids)-1) + `)`)
	rows, err := r.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	found := make(map[string]Payment, len(ids))
	for rows.Next() {
		var (
			id      string
			p       Payment
			cust    sql.NullString
			amt, at int64
		)
		if err := rows.Scan(&id, &cust, &p.Status, &p.Method, &amt, &at); err != nil {
			return nil, err
		}
		p.CustomerID, p.Amount, p.ProcessedAt = cust.String, order.Money(amt), time.UnixMilli(at).UTC()
		found[id] = p
	}
	return found, rows.Err()
}

// ErrUnconfirmed is wrapped by every UnconfirmedError.
var ErrUnconfirmed = errors.New("PAID paymentProcessed not confirmed by the payment record: not shipped")

// UnconfirmedError is the permanent error (processor.Permanent) of a PAID
// paymentProcessed event that the payments service's record does not
// confirm: there is no record for the order, the record is not PAID, or it
// names another customer, amount, method or time. Such an event was not
// written by the payments service (a forged record, a client of the
// broker writing the topic without being payments); its record goes to the
// fulfillment DLQ with this error as its reason, and nothing ships.
type UnconfirmedError struct {
	OrderID string
	// Reason says what did not match, such as "no payment record" or
	// "recorded REFUSED".
	Reason string
}

func (e *UnconfirmedError) Error() string {
	return fmt.Sprintf("fulfillment: order %q: %s: %v", e.OrderID, e.Reason, ErrUnconfirmed)
}

// Unwrap returns ErrUnconfirmed.
func (e *UnconfirmedError) Unwrap() error { return ErrUnconfirmed }

// lookupWait bounds how long confirm retries a payment record that could
// not be read (the database restarting, SQLite busy) before the event
// counts as a transient failure of the processor; after MaxAttempts of those
// it goes to the DLQ, from where `ordercast dlq replay` ships it once the
// database is back.
const lookupWait = 10 * time.Second

// confirm returns nil when the payment record of ev's order says PAID for
// ev's customer, method, amount and time; a permanent *UnconfirmedError when
// it does not or there is none; the read error when it cannot be read within
// lookupWait.
func (s *Service) confirm(ctx context.Context, ev *order.PaymentProcessed) error {
	unconfirmed := func(format string, args ...any) error {
		return processor.Permanent(&UnconfirmedError{OrderID: ev.OrderID, Reason: fmt.Sprintf(format, args...)})
	}
	if s.Payments == nil {
		return unconfirmed("no payment records to check it against (fulfillment.Service.Payments is nil)")
	}
	var (
		p   Payment
		ok  bool
		err error
	)
	deadline := time.Now().Add(lookupWait)
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		if p, ok, err = s.Payments.Payment(ctx, ev.OrderID); err == nil || ctx.Err() != nil || time.Now().Add(wait).After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	if err != nil {
		return err
	}
	return verify(ev, p, ok)
}

// payments reads the payment records of ids for a batch: in one call with
// BatchRecords, else one Payment call each; an error when any cannot be
// read (no retry: the batch's records are then transformed alone, with
// confirm's).
func (s *Service) payments(ctx context.Context, ids []string) (map[string]Payment, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	if s.Payments == nil {
		// Transform, alone, says why each is not confirmed.
		return nil, errors.New("fulfillment: no payment records to check the batch against (fulfillment.Service.Payments is nil)")
	}
	if b, ok := s.Payments.(BatchRecords); ok {
		return b.Payments(ctx, ids)
	}
	found := make(map[string]Payment, len(ids))
	for _, id := range ids {
		p, ok, err := s.Payments.Payment(ctx, id)
		if err != nil {
			return nil, err
		}
		if ok {
			found[id] = p
		}
	}
	return found, nil
}

// verify returns nil when p, the payment record of ev's order (ok false:
// none), says PAID for ev's customer, method, amount and time; a permanent
// *UnconfirmedError otherwise.
func verify(ev *order.PaymentProcessed, p Payment, ok bool) error {
	unconfirmed := func(format string, args ...any) error {
		return processor.Permanent(&UnconfirmedError{OrderID: ev.OrderID, Reason: fmt.Sprintf(format, args...)})
	}
	switch {
	case !ok:
		return unconfirmed("no payment record (payments never decided this order)")
	case p.Status != order.PaymentPaid:
		return unconfirmed("recorded %s, not PAID", p.Status)
	case p.CustomerID != ev.CustomerID:
		return unconfirmed("recorded for customer %q, the event says %q", p.CustomerID, ev.CustomerID)
	case p.Amount != ev.Amount:
		return unconfirmed("recorded amount %v, the event says %v", p.Amount, ev.Amount)
	case p.Method != ev.Method:
		return unconfirmed("recorded method %s, the event says %s", p.Method, ev.Method)
	case !p.ProcessedAt.Equal(ev.ProcessedAt.UTC().Truncate(time.Millisecond)):
		return unconfirmed("recorded at %v, the event says %v", p.ProcessedAt, ev.ProcessedAt.UTC())
	}
	return nil
}
