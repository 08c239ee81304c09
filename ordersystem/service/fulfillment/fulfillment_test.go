package fulfillment_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/schema/schematest"
	"github.com/ordercast/ordercast/ordersystem/service/fulfillment"
)

// TestTransformIsAFunctionOfItsInput: the same paymentProcessed, transformed
// twice (an aborted transaction re-run, a replayed record), yields the same
// shipmentRequested bytes, so the consumers' inboxes skip the second as a
// duplicate instead of refusing it as an event id reused for other content.
func TestTransformIsAFunctionOfItsInput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	serde := schematest.Serde(t, nil)
	paid := order.PaymentProcessed{EventID: "evt_pay_1", OrderID: "ord_1", CustomerID: "17850", Status: order.PaymentPaid,
		Method: order.MethodWallet, Amount: 15300, Country: "United Kingdom", ProcessedAt: time.Date(2010, 12, 1, 8, 26, 0, 0, time.UTC)}
	svc := &fulfillment.Service{Serde: serde, Payments: recordsOf(map[string]fulfillment.Payment{"ord_1": recordOf(paid)})}
	v, err := serde.Encode(order.TopicPaymentProcessed, &paid)
	if err != nil {
		t.Fatal(err)
	}
	var outs [][]byte
	for off := range int64(2) {
		recs, err := svc.Transform(ctx, &kgo.Record{Topic: order.TopicPaymentProcessed, Offset: off, Value: v})
		if err != nil || len(recs) != 1 {
			t.Fatalf("Transform: %d records, %v; want 1", len(recs), err)
		}
		outs = append(outs, recs[0].Value)
	}
	if !bytes.Equal(outs[0], outs[1]) {
		t.Fatal("two transforms of one paymentProcessed wrote different shipmentRequested bytes")
	}
	var sh order.ShipmentRequested
	if _, err := serde.DecodeContext(ctx, order.TopicShipmentRequested, outs[0], &sh); err != nil {
		t.Fatal(err)
	}
	if sh.EventID != "evt_shp_ord_1" || sh.ShipmentID != "shp_ord_1" || !sh.RequestedAt.Equal(paid.ProcessedAt) {
		t.Fatalf("shipment %+v: want event evt_shp_ord_1, shipment shp_ord_1, requested at the payment's time", sh)
	}
}
