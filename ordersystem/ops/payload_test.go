package ops_test

import (
	"context"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/ordercast/ordercast/ordersystem/ops"
	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/schema/schematest"
)

// TestDecodePayload: the formats `dlq show` meets, with and without a
// registry.
func TestDecodePayload(t *testing.T) {
	ctx := context.Background()
	cl := schematest.Client(t)
	serde := schematest.Serde(t, cl)
	ev := order.OrderCreated{EventID: "evt_1", Order: order.Order{OrderID: "ord_1", CustomerID: "17850", CreatedAt: time.Date(2010, 12, 1, 8, 26, 0, 0, time.UTC),
		Lines: []order.Line{{StockCode: "85123A", Description: "HEART", Quantity: 2, UnitPrice: 2550, LineTotal: 5100}}, Total: 5100}}
	good, err := serde.Encode(order.TopicOrderCreated, &ev)
	if err != nil {
		t.Fatal(err)
	}
	unknown := append([]byte(nil), good...)
	binary.BigEndian.PutUint32(unknown[1:5], 424242)

	p := ops.DecodePayload(ctx, cl, serde, order.TopicOrderCreated, good)
	if p.Format != "avro" || p.Contract != "ok" || p.Error != "" || !strings.Contains(string(p.Decoded), `"orderId": "ord_1"`) ||
		len(p.Subjects) != 1 || p.Subjects[0] != "orderCreated-value" {
		t.Errorf("valid avro: %+v (%s)", p, p.Decoded)
	}
	p = ops.DecodePayload(ctx, cl, serde, order.TopicOrderCreated, unknown)
	if p.SchemaID != 424242 || !strings.Contains(p.Error, "unknown to the registry") || !strings.Contains(p.Contract, "unknown schema id") || p.Hex == "" {
		t.Errorf("unknown schema id: %+v", p)
	}
	p = ops.DecodePayload(ctx, nil, nil, order.TopicOrderCreated, good)
	if !strings.Contains(p.Error, "--registry") || p.Contract != "" || p.Hex == "" {
		t.Errorf("no registry: %+v", p)
	}
	p = ops.DecodePayload(ctx, cl, serde, order.TopicOrderCreated, []byte(`{"eventId":"e"}`))
	if p.Format != "json" || !strings.Contains(p.Contract, "required") {
		t.Errorf("json: %+v", p)
	}
	p = ops.DecodePayload(ctx, cl, serde, order.TopicOrderCreated, []byte{0xde, 0xad, 0xbe, 0xef})
	if p.Format != "bytes" || !strings.Contains(p.Hex, "de ad be ef") || !strings.Contains(p.Contract, "undecodable") {
		t.Errorf("bytes: %+v", p)
	}
	if p := ops.DecodePayload(ctx, cl, serde, "other", nil); p.Format != "null" || p.Contract != "" {
		t.Errorf("null: %+v", p)
	}
}
