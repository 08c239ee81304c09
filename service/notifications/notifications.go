// Package notifications is the notifications service: consumer group
// "notifications". It tells the customer that an order was received and
// whether its payment went through, recording one notification per (order,
// kind) in the notifications table (the sink), deduplicated both by the inbox
// and by a stable notification id.
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

	"github.com/ordercast/ordercast/order"
	"github.com/ordercast/ordercast/processor"
	"github.com/ordercast/ordercast/schema"
	"github.com/ordercast/ordercast/service"
	"github.com/ordercast/ordercast/store"
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
	ev, err := s.event(ctx, r)
	if err != nil {
		return err
	}
	_, err = service.Process(ctx, s.DB, s.Metrics, s.Logger, order.GroupNotifications, ev.ID, r, ev.Apply)
	return err
}

// HandleBatch is the processor.BatchHandler of the notifications group: the
// notifications and inbox rows of the records in one transaction
// (service.ProcessBatch). Any record that fails fails the batch, and the
// runtime then handles its records one at a time with Handle.
func (s *Service) HandleBatch(ctx context.Context, recs []*kgo.Record) error {
	events := make([]service.Event, len(recs))
	for i, r := range recs {
		ev, err := s.event(ctx, r)
		if err != nil {
			return err
		}
		events[i] = ev
	}
	_, err := service.ProcessBatch(ctx, s.DB, s.Metrics, s.Logger, order.GroupNotifications, events)
	return err
}

// event decodes r into the notification to record.
func (s *Service) event(ctx context.Context, r *kgo.Record) (service.Event, error) {
	switch r.Topic {
	case order.TopicOrderCreated:
		var ev order.OrderCreated
		if err := service.Decode(ctx, s.Serde, r, &ev); err != nil {
			return service.Event{}, err
		}
		body := fmt.Sprintf("We received your order %s (%d lines, total %s %s).", ev.OrderID, len(ev.Lines), ev.Total, order.Currency)
		return s.notify(r, ev.EventID, ev.OrderID, ev.CustomerID, KindOrderReceived, body), nil
	case order.TopicPaymentProcessed:
		var ev order.PaymentProcessed
		if err := service.Decode(ctx, s.Serde, r, &ev); err != nil {
			return service.Event{}, err
		}
		kind, body := KindPaymentConfirmed, fmt.Sprintf("Payment of %s %s for order %s confirmed.", ev.Amount, order.Currency, ev.OrderID)
		if ev.Status == order.PaymentRefused {
			kind, body = KindPaymentFailed, fmt.Sprintf("Payment for order %s was refused: %s.", ev.OrderID, ev.Reason)
		}
		return s.notify(r, ev.EventID, ev.OrderID, ev.CustomerID, kind, body), nil
	}
	return service.Event{}, processor.Permanentf("notifications: unexpected topic %q", r.Topic)
}

func (s *Service) notify(r *kgo.Record, eventID, orderID, customerID, kind, body string) service.Event {
	return service.Event{ID: eventID, Record: r, Apply: func(ctx context.Context, tx *sql.Tx) error {
		var cust any
		if customerID != "" {
			cust = customerID
		}
		_, err := tx.ExecContext(ctx, s.DB.Rebind(`INSERT INTO notifications (notification_id, order_id, kind, customer_id, body, created_at)
			VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (notification_id) DO NOTHING`),
			NotificationID(orderID, kind), orderID, kind, cust, body, time.Now().UnixMilli())
		if err != nil {
			return fmt.Errorf("notifications: insert %s for %s: %w", kind, orderID, err)
		}
		return nil
	}}
}
