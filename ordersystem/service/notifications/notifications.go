// Package notifications is the notifications service: consumer group
// "notifications". It tells the customer that an order was received and
// whether its payment went through, recording one notification per (order,
// kind) in the notifications table (the sink), deduplicated by a stable
// notification id (NotificationID): a redelivered event finds its row, so
// the group needs no inbox row (service.Event.ApplyOnce).
package notifications

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/schema"
	"github.com/ordercast/ordercast/ordersystem/service"
	"github.com/ordercast/ordercast/ordersystem/store"
	"github.com/ordercast/ordercast/processor"
)

// Topics are the topics the notifications group consumes.
var Topics = []string{order.TopicOrderCreated, order.TopicPaymentProcessed}

// Notification kinds.
const (
	KindOrderReceived    = "order_received"
	KindPaymentConfirmed = "payment_confirmed"
	KindPaymentFailed    = "payment_failed"
)

// NotificationID returns the stable id of the notification of kind for an
// order: hex of the first 16 bytes of sha256("<orderID>/<kind>"). The same
// (order, kind) always has the same id, so a redelivered event can never
// notify twice.
func NotificationID(orderID, kind string) string {
	sum := sha256.Sum256([]byte(orderID + "/" + kind))
	return "ntf_" + hex.EncodeToString(sum[:16])
}

// Service is the notifications service's record handler. Safe for
// concurrent use.
type Service struct {
	DB     *store.DB
	Serde  *schema.Serde
	Logger *slog.Logger
	// Metrics, if set, counts the duplicates the inbox skipped.
	Metrics *service.Metrics
}

// Handle is the processor.Handler of the notifications group.
func (s *Service) Handle(ctx context.Context, r *kgo.Record) error {
	return service.Handle(ctx, s.DB, s.Metrics, s.Logger, order.GroupNotifications, r, s.event)
}

// HandleBatch is the processor.BatchHandler of the notifications group: the
// notifications of the records in one transaction (service.ProcessBatch),
// in multi-row INSERTs. Any record
// that fails fails the batch, and the runtime then handles its records one
// at a time with Handle.
func (s *Service) HandleBatch(ctx context.Context, recs []*kgo.Record) error {
	return service.HandleBatch(ctx, s.DB, s.Metrics, s.Logger, order.GroupNotifications, recs, s.decode, s.insertAll)
}

// insertAll writes the notifications of the records (rows[i] is recs[i]'s
// notifications row, claimed[i] true for each: notifications deduplicate
// themselves) in multi-row INSERTs, and clears claimed[i] for each whose
// notification was there already (or came earlier in the batch).
func (s *Service) insertAll(ctx context.Context, tx *sql.Tx, rows [][]any, claimed []bool) error {
	args := make([]any, 0, notificationCols*len(rows))
	for i, ok := range claimed {
		if ok {
			args = append(args, rows[i]...)
		}
	}
	fresh, err := service.InsertReturning(ctx, tx, s.DB, insertHead, insertTail+` RETURNING notification_id`, notificationCols, args, 1)
	if err != nil {
		return fmt.Errorf("notifications: %w", err)
	}
	for i, ok := range claimed {
		if ok {
			claimed[i] = fresh.Take(rows[i][0].(string))
		}
	}
	return nil
}

// The notifications row: notification_id, order_id, kind, customer_id,
// body, created_at.
const (
	insertHead       = `INSERT INTO notifications (notification_id, order_id, kind, customer_id, body, created_at) VALUES`
	insertTail       = ` ON CONFLICT (notification_id) DO NOTHING`
	notificationCols = 6
)

// event decodes r into the notification to record.
func (s *Service) event(ctx context.Context, r *kgo.Record) (service.Event, error) {
	ev, _, err := s.decode(ctx, r)
	return ev, err
}

// decode decodes r into the notification to record alone, and its row.
func (s *Service) decode(ctx context.Context, r *kgo.Record) (service.Event, []any, error) {
	switch r.Topic {
	case order.TopicOrderCreated:
		var ev order.OrderCreated
		if err := service.Decode(ctx, s.Serde, r, &ev); err != nil {
			return service.Event{}, nil, err
		}
		body := fmt.Sprintf("We received your order %s (%d lines, total %s %s).", ev.OrderID, len(ev.Lines), ev.Total, order.Currency)
		e, row := s.notify(r, ev.EventID, ev.OrderID, ev.CustomerID, KindOrderReceived, body)
		return e, row, nil
	case order.TopicPaymentProcessed:
		var ev order.PaymentProcessed
		if err := service.Decode(ctx, s.Serde, r, &ev); err != nil {
			return service.Event{}, nil, err
		}
		kind, body := KindPaymentConfirmed, fmt.Sprintf("Payment of %s %s for order %s confirmed.", ev.Amount, order.Currency, ev.OrderID)
		if ev.Status == order.PaymentRefused {
			kind, body = KindPaymentFailed, fmt.Sprintf("Payment for order %s was refused: %s.", ev.OrderID, ev.Reason)
		}
		e, row := s.notify(r, ev.EventID, ev.OrderID, ev.CustomerID, kind, body)
		return e, row, nil
	}
	return service.Event{}, nil, processor.Permanentf("notifications: unexpected topic %q", r.Topic)
}

// notify returns the event recording a notification alone, and its row.
func (s *Service) notify(r *kgo.Record, eventID, orderID, customerID, kind, body string) (service.Event, []any) {
	var cust any
	if customerID != "" {
		cust = customerID
	}
	row := []any{NotificationID(orderID, kind), orderID, kind, cust, body, time.Now().UnixMilli()}
	return service.Event{ID: eventID, Record: r, ApplyOnce: func(ctx context.Context, tx *sql.Tx) (bool, error) {
		ok, err := service.InsertOnce(ctx, tx, s.DB.Rebind(insertHead+` (?, ?, ?, ?, ?, ?)`+insertTail), row...)
		if err != nil {
			return false, fmt.Errorf("notifications: insert %s for %s: %w", kind, orderID, err)
		}
		return ok, nil
	}}, row
}
