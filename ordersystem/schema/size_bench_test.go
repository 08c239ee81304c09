package schema

import (
	"testing"

	"github.com/ordercast/ordercast/ordersystem/order"
)

// BenchmarkRecordSizes reports the encoded size of each event the order
// system writes (Confluent wire format: magic byte, schema id, Avro body),
// shaped as the load generator's orders are (`ordercast load`: 1 to 3 lines,
// time-ordered ids "ord_" / "evt_" + 32 hex digits, a 5-digit customer id),
// and of an Online Retail order of 21 lines (the data set's mean is about
// 21 lines per invoice). Sizes in bytes, as B-value metrics; ns/op is not
// meaningful. The record key is the customer id (5 bytes) or, for a guest,
// the order id (36).
//
//	go test -run '^$' -bench RecordSizes -benchtime 1x ./schema/   (in ordersystem/)
func BenchmarkRecordSizes(b *testing.B) {
	s, _ := newTestSerde(b)
	oid, eid := order.NewTimeOrderedID("ord_"), order.NewTimeOrderedID("evt_")
	created := func(lines int) *order.OrderCreated {
		o := sampleOrder(lines)
		o.EventID, o.OrderID = eid, oid
		return &o
	}
	pay := &order.PaymentProcessed{EventID: order.NewTimeOrderedID("evt_"), OrderID: oid, CustomerID: "17850",
		Status: order.PaymentPaid, Method: order.MethodWallet, Amount: 15300, Country: "United Kingdom", ProcessedAt: at}
	ship := &order.ShipmentRequested{EventID: "evt_shp_" + oid, ShipmentID: "shp_" + oid, OrderID: oid,
		CustomerID: "17850", Country: "United Kingdom", RequestedAt: at}
	for b.Loop() {
	}
	for _, c := range []struct {
		name, topic string
		v           any
	}{
		{"orderCreated-1line", order.TopicOrderCreated, created(1)},
		{"orderCreated-2lines", order.TopicOrderCreated, created(2)},
		{"orderCreated-3lines", order.TopicOrderCreated, created(3)},
		{"orderCreated-21lines", order.TopicOrderCreated, created(21)},
		{"paymentProcessed", order.TopicPaymentProcessed, pay},
		{"shipmentRequested", order.TopicShipmentRequested, ship},
	} {
		enc, err := s.Encode(c.topic, c.v)
		if err != nil {
			b.Fatalf("%s: %v", c.name, err)
		}
		b.ReportMetric(float64(len(enc)), c.name+"-B")
	}
	b.ReportMetric(0, "ns/op")
}
