package fulfillment_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/schema/schematest"
	"github.com/ordercast/ordercast/ordersystem/service/fulfillment"
	"github.com/ordercast/ordercast/ordersystem/store"
	"github.com/ordercast/ordercast/processor"
)

// recordOf is the payment record payments writes for ev.
func recordOf(ev order.PaymentProcessed) fulfillment.Payment {
	return fulfillment.Payment{CustomerID: ev.CustomerID, Status: ev.Status, Method: ev.Method, Amount: ev.Amount, ProcessedAt: ev.ProcessedAt.UTC()}
}

func recordsOf(m map[string]fulfillment.Payment) fulfillment.Records {
	return fulfillment.RecordsFunc(func(_ context.Context, orderID string) (fulfillment.Payment, bool, error) {
		p, ok := m[orderID]
		return p, ok, nil
	})
}

// TestForgedPaidShipsNothing: a PAID paymentProcessed that the payments
// service's record (its payments table, here in SQLite) does not confirm
// ships nothing and is a permanent error naming the order and the reason
// (so the processor sends it to the DLQ): an order payments refused, an
// order it never decided, and a PAID copy with another amount or customer.
// The PAID event payments did write ships.
func TestForgedPaidShipsNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := store.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "ordercast.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := store.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2010, 12, 1, 8, 26, 0, 123e6, time.UTC)
	for _, row := range []struct {
		order, cust, status, method string
		amount                      int64
	}{
		{"ord_paid", "17850", order.PaymentPaid, order.MethodWallet, 15300},
		{"ord_refused", "17850", order.PaymentRefused, order.MethodWallet, 999000},
		{"ord_guest", "", order.PaymentPaid, order.MethodCard, 2500},
	} {
		var cust any
		if row.cust != "" {
			cust = row.cust
		}
		if _, err := db.ExecContext(ctx, db.Rebind(`INSERT INTO payments (order_id, customer_id, status, method, amount_milli, reason, processed_at) VALUES (?, ?, ?, ?, ?, '', ?)`),
			row.order, cust, row.status, row.method, row.amount, at.UnixMilli()); err != nil {
			t.Fatal(err)
		}
	}
	serde := schematest.Serde(t, nil)
	svc := &fulfillment.Service{Serde: serde, Payments: fulfillment.DBRecords(db)}
	paid := func(orderID, cust, method string, amount order.Money) *kgo.Record {
		ev := order.PaymentProcessed{EventID: "evt_" + orderID, OrderID: orderID, CustomerID: cust, Status: order.PaymentPaid,
			Method: method, Amount: amount, Country: "United Kingdom", ProcessedAt: at}
		v, err := serde.Encode(order.TopicPaymentProcessed, &ev)
		if err != nil {
			t.Fatal(err)
		}
		return &kgo.Record{Topic: order.TopicPaymentProcessed, Value: v}
	}
	for _, c := range []struct {
		name string
		rec  *kgo.Record
		why  string
	}{
		{"refused order", paid("ord_refused", "17850", order.MethodWallet, 999000), "recorded REFUSED"},
		{"unknown order", paid("ord_unknown", "17850", order.MethodWallet, 15300), "no payment record"},
		{"other amount", paid("ord_paid", "17850", order.MethodWallet, 1), "recorded amount"},
		{"other customer", paid("ord_paid", "12346", order.MethodWallet, 15300), "recorded for customer"},
		{"guest as a customer", paid("ord_guest", "17850", order.MethodCard, 2500), "recorded for customer"},
	} {
		outs, err := svc.Transform(ctx, c.rec)
		if len(outs) != 0 {
			t.Errorf("%s: %d shipmentRequested records; want none", c.name, len(outs))
		}
		var ue *fulfillment.UnconfirmedError
		if !errors.As(err, &ue) || !errors.Is(err, fulfillment.ErrUnconfirmed) || !processor.IsPermanent(err) || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%s: %v; want a permanent UnconfirmedError saying %q", c.name, err, c.why)
		}
	}
	for _, rec := range []*kgo.Record{paid("ord_paid", "17850", order.MethodWallet, 15300), paid("ord_guest", "", order.MethodCard, 2500)} {
		if outs, err := svc.Transform(ctx, rec); err != nil || len(outs) != 1 {
			t.Errorf("a PAID event the record confirms: %d records, %v; want one shipment", len(outs), err)
		}
	}

	// Without records nothing ships.
	if outs, err := (&fulfillment.Service{Serde: serde}).Transform(ctx, paid("ord_paid", "17850", order.MethodWallet, 15300)); len(outs) != 0 || !processor.IsPermanent(err) {
		t.Errorf("Service without Payments: %d records, %v; want none and a permanent error", len(outs), err)
	}
}

// TestUnreadableRecordIsTransient: a payment record that cannot be read
// (the database is away) ships nothing and is a transient error (retried,
// not dead-lettered as forged at the first attempt).
func TestUnreadableRecordIsTransient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	serde := schematest.Serde(t, nil)
	down := errors.New("database is down")
	calls := 0
	svc := &fulfillment.Service{Serde: serde, Payments: fulfillment.RecordsFunc(func(context.Context, string) (fulfillment.Payment, bool, error) {
		calls++
		return fulfillment.Payment{}, false, down
	})}
	ev := order.PaymentProcessed{EventID: "evt_1", OrderID: "ord_1", Status: order.PaymentPaid, Method: order.MethodCard, Amount: 1, ProcessedAt: time.Now()}
	v, err := serde.Encode(order.TopicPaymentProcessed, &ev)
	if err != nil {
		t.Fatal(err)
	}
	hctx, hcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer hcancel()
	outs, err := svc.Transform(hctx, &kgo.Record{Topic: order.TopicPaymentProcessed, Value: v})
	if len(outs) != 0 || !errors.Is(err, down) || processor.IsPermanent(err) {
		t.Errorf("unreadable record: %d records, %v; want none and the transient read error", len(outs), err)
	}
	if calls < 2 {
		t.Errorf("the record was read %d times before giving up; want retries", calls)
	}
}
