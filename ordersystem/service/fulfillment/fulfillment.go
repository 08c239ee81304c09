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
//
// What it ships: only what the payments service's record confirms. Before a
// PAID event becomes a shipment, its order's payment record (Records, the
// payments table) must say PAID for the same customer, amount, method and
// time; an event it does not confirm (no record, a refused one, other
// values: a record written to paymentProcessed by a client that is not
// payments) is a permanent *UnconfirmedError, so it goes to the fulfillment
// DLQ with that reason and nothing ships. The record is committed before
// its event exists (payments writes both in one database transaction, the
// outbox relay publishes after the commit), so a genuine event always finds
// it.
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
	// Payments reads the payment records a PAID event is checked against
	// (DBRecords of the payments service's database). Required: with nil,
	// every PAID event goes to the DLQ unshipped.
	Payments Records
}

// ShipmentID returns the shipment id of an order: "shp_" + the order id.
func ShipmentID(orderID string) string { return "shp_" + orderID }

// Transform is the processor.TxnHandler of the fulfillment group: PAID
// confirmed by the payment record -> one shipmentRequested record; REFUSED
// -> nothing; PAID not confirmed -> a permanent *UnconfirmedError (the DLQ);
// a payment record that cannot be read -> that error (retried).
func (s *Service) Transform(ctx context.Context, r *kgo.Record) ([]*kgo.Record, error) {
	var ev order.PaymentProcessed
	if err := service.Decode(ctx, s.Serde, r, &ev); err != nil {
		return nil, err
	}
	if ev.Status != order.PaymentPaid {
		return nil, nil
	}
	if err := s.confirm(ctx, &ev); err != nil {
		s.logUnconfirmed(ctx, r, &ev, err)
		return nil, err
	}
	return s.shipment(&ev)
}

// TransformBatch is the processor.TxnBatchHandler of the fulfillment group:
// Transform for each record of recs, with the payment records of all their
// PAID events read in one query (BatchRecords.Payments) instead of one
// lookup per event. outs[i] is recs[i]'s shipmentRequested record (none for
// a REFUSED payment). A record that cannot be decoded or whose payment is
// not confirmed is reported in a processor.FailRecords error (the runtime
// dead-letters it; the batch's records before it in its lane are done, those
// after it run again); when the payment records cannot be
// read the whole batch fails, and the runtime transforms each record alone
// with Transform, which retries the read (lookupWait). Payments without
// BatchRecords are read one order at a time. Safe for concurrent use.
func (s *Service) TransformBatch(ctx context.Context, recs []*kgo.Record) ([][]*kgo.Record, error) {
	evs := make([]*order.PaymentProcessed, len(recs))
	failed := map[int]error{}
	ids := make([]string, 0, len(recs))
	for i, r := range recs {
		ev := new(order.PaymentProcessed)
		if err := service.Decode(ctx, s.Serde, r, ev); err != nil {
			failed[i] = err
			continue
		}
		evs[i] = ev
		if ev.Status == order.PaymentPaid {
			ids = append(ids, ev.OrderID)
		}
	}
	found, err := s.payments(ctx, ids)
	if err != nil {
		return nil, err
	}
	outs := make([][]*kgo.Record, len(recs))
	for i, ev := range evs {
		if ev == nil || ev.Status != order.PaymentPaid {
			continue
		}
		p, ok := found[ev.OrderID]
		if err := verify(ev, p, ok); err != nil {
			s.logUnconfirmed(ctx, recs[i], ev, err)
			failed[i] = err
			continue
		}
		if outs[i], err = s.shipment(ev); err != nil {
			failed[i] = err
		}
	}
	if len(failed) > 0 {
		return outs, processor.FailRecords(failed)
	}
	return outs, nil
}

// shipment is the shipmentRequested record of ev's confirmed payment.
func (s *Service) shipment(ev *order.PaymentProcessed) ([]*kgo.Record, error) {
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

// logUnconfirmed logs a PAID event the payment record does not confirm (a
// permanent err: it goes to the DLQ).
func (s *Service) logUnconfirmed(ctx context.Context, r *kgo.Record, ev *order.PaymentProcessed, err error) {
	if s.Logger != nil && processor.IsPermanent(err) {
		s.Logger.WarnContext(ctx, "fulfillment: PAID event not confirmed by the payment record; not shipped, sent to the DLQ",
			"order_id", ev.OrderID, "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "error", err)
	}
}
