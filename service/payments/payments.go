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
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/order"
	"github.com/ordercast/ordercast/outbox"
	"github.com/ordercast/ordercast/processor"
	"github.com/ordercast/ordercast/schema"
	"github.com/ordercast/ordercast/service"
	"github.com/ordercast/ordercast/store"
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
	if r.Topic != order.TopicOrderCreated {
		return processor.Permanentf("payments: unexpected topic %q", r.Topic)
	}
	var ev order.OrderCreated
	if err := service.Decode(ctx, s.Serde, r, &ev); err != nil {
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
// (service.ProcessBatch). The orders are applied sorted by customer id
// (stable, so records of one order keep their offset order), so that two
// batches debit shared wallets in the same order and cannot deadlock on
// their row locks (PostgreSQL); each payment row's seq (store migration 5)
// numbers it in that order. Any record that fails (a contract violation
// included) fails the batch, and the runtime then handles its records one at
// a time with Handle.
func (s *Service) HandleBatch(ctx context.Context, recs []*kgo.Record) error {
	evs := make([]order.OrderCreated, len(recs))
	for i, r := range recs {
		if r.Topic != order.TopicOrderCreated {
			return processor.Permanentf("payments: unexpected topic %q", r.Topic)
		}
		if err := service.Decode(ctx, s.Serde, r, &evs[i]); err != nil {
			return err
		}
	}
	idx := make([]int, len(recs))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return evs[idx[a]].CustomerID < evs[idx[b]].CustomerID })
	events := make([]service.Event, len(recs))
	for j, i := range idx {
		ev := &evs[i]
		events[j] = service.Event{ID: ev.EventID, Record: recs[i], Apply: func(ctx context.Context, tx *sql.Tx) error {
			return s.charge(ctx, tx, ev)
		}}
	}
	applied, err := service.ProcessBatch(ctx, s.DB, s.Metrics, s.Logger, order.GroupPayments, events, nil)
	if err != nil {
		return err
	}
	if applied > 0 && s.Relay != nil {
		s.Relay.Notify()
	}
	return nil
}

// charge decides and applies the payment of one order inside tx.
func (s *Service) charge(ctx context.Context, tx *sql.Tx, ev *order.OrderCreated) error {
	now := time.Now().UTC().Truncate(time.Millisecond)
	pay := order.PaymentProcessed{
		EventID:     order.NewID("evt_"),
		OrderID:     ev.OrderID,
		CustomerID:  ev.CustomerID,
		Amount:      ev.Total,
		Country:     ev.Country,
		ProcessedAt: now,
	}
	switch {
	case ev.CustomerID == "":
		pay.Status, pay.Method = order.PaymentPaid, order.MethodCard
	default:
		pay.Method = order.MethodWallet
		var balance int64
		err := tx.QueryRowContext(ctx, s.DB.Rebind(`SELECT balance_milli FROM wallets WHERE customer_id = ?`), ev.CustomerID).Scan(&balance)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			pay.Status, pay.Reason = order.PaymentRefused, ReasonNoWallet
		case err != nil:
			return fmt.Errorf("payments: read wallet %s: %w", ev.CustomerID, err)
		case balance < int64(ev.Total):
			pay.Status, pay.Reason = order.PaymentRefused, ReasonInsufficientCredit
		default:
			res, err := tx.ExecContext(ctx, s.DB.Rebind(`UPDATE wallets SET balance_milli = balance_milli - ? WHERE customer_id = ? AND balance_milli >= ?`),
				int64(ev.Total), ev.CustomerID, int64(ev.Total))
			if err != nil {
				return fmt.Errorf("payments: debit wallet %s: %w", ev.CustomerID, err)
			}
			if n, _ := res.RowsAffected(); n != 1 {
				return fmt.Errorf("payments: debit wallet %s: balance changed concurrently", ev.CustomerID)
			}
			if _, err := tx.ExecContext(ctx, s.DB.Rebind(`INSERT INTO wallet_ledger (customer_id, order_id, amount_milli, created_at) VALUES (?, ?, ?, ?)`),
				ev.CustomerID, ev.OrderID, -int64(ev.Total), now.UnixMilli()); err != nil {
				return fmt.Errorf("payments: ledger %s: %w", ev.OrderID, err)
			}
			pay.Status = order.PaymentPaid
		}
	}
	var cust any
	if ev.CustomerID != "" {
		cust = ev.CustomerID
	}
	if _, err := tx.ExecContext(ctx, s.DB.Rebind(`INSERT INTO payments (order_id, customer_id, status, method, amount_milli, reason, processed_at) VALUES (?, ?, ?, ?, ?, ?, ?)`),
		ev.OrderID, cust, pay.Status, pay.Method, int64(pay.Amount), pay.Reason, now.UnixMilli()); err != nil {
		return service.OrderConflict(fmt.Errorf("payments: record payment %s: %w", ev.OrderID, err), order.GroupPayments, ev.OrderID, ev.EventID)
	}
	v, err := s.Serde.Encode(order.TopicPaymentProcessed, &pay)
	if err != nil {
		return processor.Permanent(fmt.Errorf("payments: encode paymentProcessed for %s: %w", ev.OrderID, err))
	}
	return outbox.Enqueue(ctx, tx, s.DB, outbox.Message{Topic: order.TopicPaymentProcessed, Key: []byte(pay.Key()), Value: v})
}
