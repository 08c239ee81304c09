// Package payments is the payments service: consumer group "payments". For
// each orderCreated it debits the customer's wallet exactly once, or refuses
// the payment when credits are short, and records the paymentProcessed event
// in the outbox in the same database transaction as the debit and the inbox
// row. The outbox relay (package outbox) publishes it afterwards.
//
// A guest (no customer id) has no wallet and pays by card, which this shop
// treats as always approved: a PAID payment with method CARD and no debit.
package payments

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/schema"
	"github.com/ordercast/ordercast/ordersystem/service"
	"github.com/ordercast/ordercast/ordersystem/store"
	"github.com/ordercast/ordercast/outbox"
	"github.com/ordercast/ordercast/processor"
	"github.com/ordercast/ordercast/processor/middleware"
	"github.com/ordercast/ordercast/processor/proctrace"
)

// Topics are the topics the payments group consumes.
var Topics = []string{order.TopicOrderCreated}

// Produces are the event topics payments writes (through its outbox
// relay); system.Rights grants WRITE on them.
var Produces = []string{order.TopicPaymentProcessed}

// Refusal reasons carried by a REFUSED paymentProcessed.
const (
	ReasonInsufficientCredit = "insufficient_credit"
	ReasonNoWallet           = "no_wallet"
)

// Service is the payments service's record handler. Safe for concurrent use.
type Service struct {
	DB     *store.DB
	Serde  *schema.Serde
	Logger *slog.Logger
	// Relay, if set, is notified after each committed payment so the event
	// is published without waiting for the relay's next poll.
	Relay *outbox.Relay
	// Metrics, if set, counts the duplicates the inbox skipped.
	Metrics *service.Metrics
}

// Handle is the processor.Handler of the payments group.
func (s *Service) Handle(ctx context.Context, r *kgo.Record) error {
	ev, err := s.decode(ctx, r)
	if err != nil {
		return err
	}
	applied, err := service.Process(ctx, s.DB, s.Metrics, s.Logger, order.GroupPayments, ev.EventID, r, func(ctx context.Context, tx *sql.Tx) error {
		return s.charge(ctx, tx, &ev)
	})
	if err != nil {
		return err
	}
	if applied && s.Relay != nil {
		s.Relay.Notify()
	}
	return nil
}

// HandleBatch is the processor.BatchHandler of the payments group: the
// records' debits, payments, outbox rows and inbox rows in one transaction
// (service.ProcessBatch), in a number of SQL statements that does not grow
// with the batch (up to the chunk sizes below): the inbox claim, one SELECT
// of the claimed orders' wallets, one UPDATE of the debited ones, and one
// multi-row INSERT each of wallet_ledger, payments and outbox rows (chargeAll).
// The orders are decided sorted by customer id (stable, so records of one
// order or customer keep their offset order): a customer's later order sees
// the balance its earlier ones left. On PostgreSQL the SELECT locks the
// wallets (FOR UPDATE) in customer id order, so two batches lock shared
// wallets in the same order and cannot deadlock; each payment row's seq
// (store migration 5) numbers it in the decided order. The rows are those
// Handle writes for the same records handled one at a time in that order.
// Any record that fails (a contract violation included) fails the batch, and
// the runtime then handles its records one at a time with Handle, which the
// group needs besides (see service.HandleBatch).
func (s *Service) HandleBatch(ctx context.Context, recs []*kgo.Record) error {
	return middleware.DecodeBatch(s.decode, s.chargeBatch)(ctx, recs)
}

// decode decodes an orderCreated record: a permanent error for a record of
// another topic or one that breaks the contract, a transient one for a
// registry outage (service.Decode).
func (s *Service) decode(ctx context.Context, r *kgo.Record) (order.OrderCreated, error) {
	var ev order.OrderCreated
	if r.Topic != order.TopicOrderCreated {
		return ev, processor.Permanentf("payments: unexpected topic %q", r.Topic)
	}
	err := service.Decode(ctx, s.Serde, r, &ev)
	return ev, err
}

// chargeBatch is HandleBatch once its records are decoded (evs[i] is
// recs[i]'s event).
func (s *Service) chargeBatch(ctx context.Context, recs []*kgo.Record, evs []order.OrderCreated) error {
	idx := make([]int, len(recs))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return evs[idx[a]].CustomerID < evs[idx[b]].CustomerID })
	events := make([]service.Event, len(recs))
	sorted := make([]*order.OrderCreated, len(recs))
	for j, i := range idx {
		sorted[j] = &evs[i]
		events[j] = service.Event{ID: evs[i].EventID, Record: recs[i]}
	}
	applied, err := service.ProcessBatch(ctx, s.DB, s.Metrics, s.Logger, order.GroupPayments, events,
		func(ctx context.Context, tx *sql.Tx, claimed []bool) error {
			return s.chargeAll(ctx, tx, sorted, claimed)
		})
	if err != nil {
		return err
	}
	if applied > 0 && s.Relay != nil {
		s.Relay.Notify()
	}
	return nil
}

// walletsPerStatement bounds the wallets one SELECT or UPDATE of chargeAll
// names (2 parameters each in the UPDATE), below SQLite's 32,766 and
// PostgreSQL's 65,535 parameters.
const walletsPerStatement = 10000

// chargeAll decides and applies the payments of the claimed orders of evs
// (claimed[i] for evs[i]), in slice order, inside tx: the rows charge writes
// for each of them, in a few statements for all of them.
func (s *Service) chargeAll(ctx context.Context, tx *sql.Tx, evs []*order.OrderCreated, claimed []bool) error {
	now := time.Now().UTC().Truncate(time.Millisecond)
	var customers []string // distinct, sorted (evs is sorted by customer id)
	for i, ev := range evs {
		if claimed[i] && ev.CustomerID != "" && (len(customers) == 0 || customers[len(customers)-1] != ev.CustomerID) {
			customers = append(customers, ev.CustomerID)
		}
	}
	balance, err := s.lockWallets(ctx, tx, customers)
	if err != nil {
		return err
	}
	debit := map[string]int64{} // total debited per customer
	var ledgerRows, paymentRows [][]any
	var msgs []outbox.Message
	var orderIDs, eventIDs []string
	for i, ev := range evs {
		if !claimed[i] {
			continue
		}
		pay := newPayment(ev, now)
		if ev.CustomerID != "" {
			b, ok := balance[ev.CustomerID]
			pay.Status, pay.Reason = decide(ok, b, ev.Total)
			if pay.Status == order.PaymentPaid {
				balance[ev.CustomerID] = b - int64(ev.Total)
				debit[ev.CustomerID] += int64(ev.Total)
				ledgerRows = append(ledgerRows, []any{ev.CustomerID, ev.OrderID, -int64(ev.Total), now.UnixMilli()})
			}
		}
		paymentRows = append(paymentRows, paymentRow(ev, &pay, now))
		v, err := s.Serde.Encode(order.TopicPaymentProcessed, &pay)
		if err != nil {
			return processor.Permanent(fmt.Errorf("payments: encode paymentProcessed for %s: %w", ev.OrderID, err))
		}
		msgs = append(msgs, outbox.Message{Topic: order.TopicPaymentProcessed, Key: []byte(pay.Key()), Value: v, TraceContext: proctrace.TraceParent(ctx)})
		orderIDs, eventIDs = append(orderIDs, ev.OrderID), append(eventIDs, ev.EventID)
	}
	if err := s.debitAll(ctx, tx, customers, debit); err != nil {
		return err
	}
	if err := service.InsertRows(ctx, tx, s.DB, insertLedger, "", ledgerRows); err != nil {
		return fmt.Errorf("payments: ledger: %w", err)
	}
	if err := service.InsertRows(ctx, tx, s.DB, insertPayments, "", paymentRows); err != nil {
		err = fmt.Errorf("payments: record %d payments: %w", len(paymentRows), err)
		if len(orderIDs) == 1 {
			return service.OrderConflict(err, order.GroupPayments, orderIDs[0], eventIDs[0])
		}
		// Which of the batch's orders conflicts is not known here: the
		// runtime handles the records one at a time next, where Handle
		// names it.
		return service.OrderConflict(err, order.GroupPayments, "among "+some(orderIDs), "among "+some(eventIDs))
	}
	return outbox.EnqueueAll(ctx, tx, s.DB, msgs)
}

// some lists ids for an error message: all of them up to 5, else the first
// 5 and how many there are.
func some(ids []string) string {
	if len(ids) <= 5 {
		return strings.Join(ids, ", ")
	}
	return fmt.Sprintf("%s, ... (%d in all)", strings.Join(ids[:5], ", "), len(ids))
}

// lockWallets returns the balances of the wallets of customers (sorted,
// distinct) that exist, read in one SELECT per up to walletsPerStatement
// customers. On PostgreSQL the rows are locked (FOR UPDATE) until tx ends,
// in customer id order (byte order, COLLATE "C", the order Go's sort gives),
// so that concurrent batches lock shared wallets in one order; SQLite runs
// one write transaction at a time.
func (s *Service) lockWallets(ctx context.Context, tx *sql.Tx, customers []string) (map[string]int64, error) {
	balance := make(map[string]int64, len(customers))
	lock := ""
	if s.DB.Dialect == store.Postgres {
		lock = ` ORDER BY customer_id COLLATE "C" FOR UPDATE`
	}
	for from := 0; from < len(customers); from += walletsPerStatement {
		chunk := customers[from:min(from+walletsPerStatement, len(customers))]
		args := make([]any, len(chunk))
		for i, c := range chunk {
			args[i] = c
		}
		q := `SELECT customer_id, balance_milli FROM wallets WHERE customer_id IN (?` + strings.Repeat(`, ?`, len(chunk)-1) + `)` + lock
		rows, err := tx.QueryContext(ctx, s.DB.Rebind(q), args...)
		if err != nil {
			return nil, fmt.Errorf("payments: read %d wallets: %w", len(chunk), err)
		}
		for rows.Next() {
			var c string
			var b int64
			if err := rows.Scan(&c, &b); err != nil {
				rows.Close()
				return nil, fmt.Errorf("payments: read %d wallets: %w", len(chunk), err)
			}
			balance[c] = b
		}
		if err := rows.Close(); err != nil {
			return nil, fmt.Errorf("payments: read %d wallets: %w", len(chunk), err)
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("payments: read %d wallets: %w", len(chunk), err)
		}
	}
	return balance, nil
}

// debitAll subtracts debit[c] from the wallet of each customer c of
// customers (sorted) that has one, in one UPDATE per up to
// walletsPerStatement wallets. Each row is only debited while its balance
// covers the amount; a wallet not debited (it vanished or its balance
// changed since lockWallets read it) fails the call, so a debit never takes
// a balance below zero.
func (s *Service) debitAll(ctx context.Context, tx *sql.Tx, customers []string, debit map[string]int64) error {
	var ids []string
	for _, c := range customers {
		if _, ok := debit[c]; ok {
			ids = append(ids, c)
		}
	}
	for from := 0; from < len(ids); from += walletsPerStatement {
		chunk := ids[from:min(from+walletsPerStatement, len(ids))]
		args := make([]any, 0, 2*len(chunk))
		for _, c := range chunk {
			args = append(args, c, debit[c])
		}
		// The CTE and CAST run on both dialects (SQLite: UPDATE FROM since
		// 3.33); CAST types the amount for PostgreSQL.
		q := `WITH v (customer_id, amt) AS (VALUES (?, CAST(? AS BIGINT))` + strings.Repeat(`, (?, CAST(? AS BIGINT))`, len(chunk)-1) + `)
			UPDATE wallets SET balance_milli = wallets.balance_milli - v.amt FROM v
			WHERE wallets.customer_id = v.customer_id AND wallets.balance_milli >= v.amt`
		res, err := tx.ExecContext(ctx, s.DB.Rebind(q), args...)
		if err != nil {
			return fmt.Errorf("payments: debit %d wallets: %w", len(chunk), err)
		}
		if n, err := res.RowsAffected(); err != nil || n != int64(len(chunk)) {
			return fmt.Errorf("payments: debit %d wallets: %d debited (%v): balance changed concurrently", len(chunk), n, err)
		}
	}
	return nil
}

// The statements both paths write payments and ledger rows with.
const (
	insertLedger   = `INSERT INTO wallet_ledger (customer_id, order_id, amount_milli, created_at) VALUES`
	insertPayments = `INSERT INTO payments (order_id, customer_id, status, method, amount_milli, reason, processed_at) VALUES`
)

// newPayment is the paymentProcessed of ev before the decision: PAID by
// card for a guest (no customer id), by wallet otherwise.
func newPayment(ev *order.OrderCreated, now time.Time) order.PaymentProcessed {
	pay := order.PaymentProcessed{
		EventID:     order.NewTimeOrderedID("evt_"),
		OrderID:     ev.OrderID,
		CustomerID:  ev.CustomerID,
		Amount:      ev.Total,
		Country:     ev.Country,
		ProcessedAt: now,
		Method:      order.MethodWallet,
	}
	if ev.CustomerID == "" {
		pay.Status, pay.Method = order.PaymentPaid, order.MethodCard
	}
	return pay
}

// decide is the status and refusal reason of a wallet payment of total
// from a wallet of balance (hasWallet false: the customer has none).
func decide(hasWallet bool, balance int64, total order.Money) (status, reason string) {
	switch {
	case !hasWallet:
		return order.PaymentRefused, ReasonNoWallet
	case balance < int64(total):
		return order.PaymentRefused, ReasonInsufficientCredit
	}
	return order.PaymentPaid, ""
}

// paymentRow is the payments row of pay (for ev) as insertPayments takes it.
func paymentRow(ev *order.OrderCreated, pay *order.PaymentProcessed, now time.Time) []any {
	var cust any // NULL for a guest
	if ev.CustomerID != "" {
		cust = ev.CustomerID
	}
	return []any{ev.OrderID, cust, pay.Status, pay.Method, int64(pay.Amount), pay.Reason, now.UnixMilli()}
}

// charge decides and applies the payment of one order inside tx: the
// single-record path (Handle), writing the rows chargeAll writes for it.
func (s *Service) charge(ctx context.Context, tx *sql.Tx, ev *order.OrderCreated) error {
	now := time.Now().UTC().Truncate(time.Millisecond)
	pay := newPayment(ev, now)
	if ev.CustomerID != "" {
		var balance int64
		err := tx.QueryRowContext(ctx, s.DB.Rebind(`SELECT balance_milli FROM wallets WHERE customer_id = ?`), ev.CustomerID).Scan(&balance)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("payments: read wallet %s: %w", ev.CustomerID, err)
		}
		pay.Status, pay.Reason = decide(err == nil, balance, ev.Total)
		if pay.Status == order.PaymentPaid {
			res, err := tx.ExecContext(ctx, s.DB.Rebind(`UPDATE wallets SET balance_milli = balance_milli - ? WHERE customer_id = ? AND balance_milli >= ?`),
				int64(ev.Total), ev.CustomerID, int64(ev.Total))
			if err != nil {
				return fmt.Errorf("payments: debit wallet %s: %w", ev.CustomerID, err)
			}
			if n, _ := res.RowsAffected(); n != 1 {
				return fmt.Errorf("payments: debit wallet %s: balance changed concurrently", ev.CustomerID)
			}
			if _, err := tx.ExecContext(ctx, s.DB.Rebind(insertLedger+` (?, ?, ?, ?)`),
				ev.CustomerID, ev.OrderID, -int64(ev.Total), now.UnixMilli()); err != nil {
				return fmt.Errorf("payments: ledger %s: %w", ev.OrderID, err)
			}
		}
	}
	if _, err := tx.ExecContext(ctx, s.DB.Rebind(insertPayments+` (?, ?, ?, ?, ?, ?, ?)`), paymentRow(ev, &pay, now)...); err != nil {
		return service.OrderConflict(fmt.Errorf("payments: record payment %s: %w", ev.OrderID, err), order.GroupPayments, ev.OrderID, ev.EventID)
	}
	v, err := s.Serde.Encode(order.TopicPaymentProcessed, &pay)
	if err != nil {
		return processor.Permanent(fmt.Errorf("payments: encode paymentProcessed for %s: %w", ev.OrderID, err))
	}
	return outbox.Enqueue(ctx, tx, s.DB, outbox.Message{Topic: order.TopicPaymentProcessed, Key: []byte(pay.Key()), Value: v, TraceContext: proctrace.TraceParent(ctx)})
}
