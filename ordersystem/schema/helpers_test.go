package schema

import (
	"context"
	"encoding/binary"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/ordercast/ordercast/ordersystem/order"
)

// fakeRegistry is srfake over httptest with a count of the schema-id lookups
// it served and a switch to make them fail with 503.
type fakeRegistry struct {
	*srfake.Registry
	client  *sr.Client
	lookups atomic.Int64 // GET /schemas/ids/...
	down    atomic.Bool
}

func newFakeRegistry(t testing.TB) *fakeRegistry {
	t.Helper()
	f := &fakeRegistry{Registry: srfake.New()}
	t.Cleanup(f.Close)
	f.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		if !strings.HasPrefix(r.URL.Path, "/schemas/ids/") {
			return false
		}
		f.lookups.Add(1)
		if f.down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error_code":50003,"message":"down for the test"}`))
			return true
		}
		return false
	})
	cl, err := sr.NewClient(sr.URLs(f.URL()))
	if err != nil {
		t.Fatal(err)
	}
	f.client = cl
	return f
}

func newTestSerde(t testing.TB, opts ...Opt) (*Serde, *fakeRegistry) {
	t.Helper()
	reg := newFakeRegistry(t)
	s, err := New(context.Background(), reg.client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s, reg
}

// wire returns a Confluent wire-format value: magic 0, id, body.
func wire(id int, body []byte) []byte {
	b := make([]byte, 5, 5+len(body))
	binary.BigEndian.PutUint32(b[1:], uint32(id))
	return append(b, body...)
}

// at is a millisecond-precision UTC time, as timestamp-millis round-trips.
var at = time.Date(2010, 12, 1, 8, 26, 0, 123_000_000, time.UTC)

func sampleOrder(lines int) order.OrderCreated {
	o := order.OrderCreated{
		EventID: "evt_1",
		Order: order.Order{
			OrderID:    "ord_1",
			CustomerID: "17850",
			Country:    "United Kingdom",
			CreatedAt:  at,
			Reference:  "536365",
			Channel:    "web",
		},
	}
	for i := range lines {
		price := order.Money(2550 + i)
		qty := int64(6 + i)
		total, _ := price.Times(qty)
		o.Lines = append(o.Lines, order.Line{
			StockCode:   "85123A",
			Description: "WHITE HANGING HEART T-LIGHT HOLDER",
			Quantity:    qty,
			UnitPrice:   price,
			LineTotal:   total,
		})
		o.Total += total
	}
	return o
}

func guestOrder() order.OrderCreated {
	o := sampleOrder(1)
	o.CustomerID, o.Country, o.Reference, o.Channel = "", "", "", ""
	return o
}

func samplePayment() order.PaymentProcessed {
	return order.PaymentProcessed{
		EventID:     "evt_2",
		OrderID:     "ord_1",
		CustomerID:  "17850",
		Status:      order.PaymentPaid,
		Method:      order.MethodWallet,
		Amount:      15300,
		Country:     "United Kingdom",
		ProcessedAt: at,
	}
}

func refusedGuestPayment() order.PaymentProcessed {
	return order.PaymentProcessed{
		EventID:     "evt_3",
		OrderID:     "ord_2",
		Status:      order.PaymentRefused,
		Method:      order.MethodCard,
		Amount:      1000,
		Reason:      "insufficient credits",
		ProcessedAt: at,
	}
}

func sampleShipment() order.ShipmentRequested {
	return order.ShipmentRequested{
		EventID:     "evt_4",
		ShipmentID:  "shp_1",
		OrderID:     "ord_1",
		CustomerID:  "17850",
		Country:     "France",
		RequestedAt: at,
	}
}

// newTarget returns a fresh decode target for topic.
func newTarget(topic string) any {
	switch topic {
	case order.TopicOrderCreated:
		return new(order.OrderCreated)
	case order.TopicPaymentProcessed:
		return new(order.PaymentProcessed)
	case order.TopicShipmentRequested:
		return new(order.ShipmentRequested)
	}
	panic("unknown topic " + topic)
}
