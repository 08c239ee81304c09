// Package fulfillment is the fulfillment service: consumer group
// "fulfillment", running in the runtime's exactly-once mode. It turns each
// PAID paymentProcessed event into one shipmentRequested event inside a Kafka
// transaction that also commits the consumed offset, so read_committed
// readers see exactly one shipmentRequested per paid order whatever crashes.
//
// What the transaction does not cover: nothing outside Kafka happens here.
// Duplicate paymentProcessed events cannot occur upstream because the
// payments outbox relay publishes transactionally (see package outbox); the
// shipment id is derived from the order id and the whole event from the
// input, so even a duplicate input would yield the same event again (same
// event id, same bytes), not a second shipment.
package fulfillment

import (
	"context"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/schema"
	"github.com/ordercast/ordercast/ordersystem/service"
	"github.com/ordercast/ordercast/processor"
)

// Topics are the topics the fulfillment group consumes.
var Topics = []string{order.TopicPaymentProcessed}

// Produces are the event topics fulfillment writes (in its transactions);
// system.Rights grants WRITE on them.
var Produces = []string{order.TopicShipmentRequested}

// Service is the fulfillment transform. Safe for concurrent use.
type Service struct {
	Serde  *schema.Serde
	Logger *slog.Logger
}

// ShipmentID returns the shipment id of an order: "shp_" + the order id.
func ShipmentID(orderID string) string { return "shp_" + orderID }

// Transform is the processor.TxnHandler of the fulfillment group: PAID ->
// one shipmentRequested record; REFUSED -> nothing.
func (s *Service) Transform(ctx context.Context, r *kgo.Record) ([]*kgo.Record, error) {
	var ev order.PaymentProcessed
	if err := service.Decode(ctx, s.Serde, r, &ev); err != nil {
		return nil, err
	}
	if ev.Status != order.PaymentPaid {
		return nil, nil
	}
	sh := order.ShipmentRequested{
		EventID:    "evt_shp_" + ev.OrderID,
		ShipmentID: ShipmentID(ev.OrderID),
		OrderID:    ev.OrderID,
		CustomerID: ev.CustomerID,
		Country:    ev.Country,
		// The payment's time, not the clock: the output is a function of
		// the input, so a re-run (an aborted transaction, a replayed
		// paymentProcessed) writes the same bytes, which the consumers'
		// inboxes skip as a duplicate rather than refuse as an event id
		// reused for other content.
		RequestedAt: ev.ProcessedAt.UTC().Truncate(time.Millisecond),
	}
	v, err := s.Serde.Encode(order.TopicShipmentRequested, &sh)
	if err != nil {
		return nil, processor.Permanent(err)
	}
	return []*kgo.Record{{Topic: order.TopicShipmentRequested, Key: []byte(sh.Key()), Value: v}}, nil
}
