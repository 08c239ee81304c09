package system_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/ordersystem/devstack"
	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/system"
	"github.com/ordercast/ordercast/processor"
)

// TestForgedPaidGoesToDLQ: a paymentProcessed PAID written to the topic by a
// client that is not payments (the embedded broker takes any client) for an
// order payments refused, and one for an order it never decided, ship
// nothing: both land in fulfillment's DLQ with the reason, and the PAID
// event payments recorded, written after them to the same partition, ships.
func TestForgedPaidGoesToDLQ(t *testing.T) {
	_, brokers := testkafka.Fake(t, nil)
	forgedPaid(t, brokers, system.Config{})
}

// TestForgedPaidOnEmbeddedStack: the same on the embedded stack `ordercast
// up` runs (devstack: its broker and its guarded registry), the forged
// events written by a raw client of its broker.
func TestForgedPaidOnEmbeddedStack(t *testing.T) {
	st, err := devstack.Start(devstack.Config{DataDir: t.TempDir(), BrokerAddr: "127.0.0.1:0", RegistryAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	forgedPaid(t, st.Brokers, system.Config{
		Schema: system.SchemaConfig{RegistryURL: st.RegistryURL},
	})
}

func forgedPaid(t *testing.T, brokers []string, cfg system.Config) {
	sys, err := startFulfillment(t, brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sys.Stop(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	at := time.Now().UTC().Truncate(time.Millisecond)
	// The payments service's records: one paid, one refused.
	for _, row := range []struct{ id, status string }{{"ord_genuine", order.PaymentPaid}, {"ord_refused", order.PaymentRefused}} {
		if _, err := sys.DB.ExecContext(ctx, sys.DB.Rebind(`INSERT INTO payments (order_id, customer_id, status, method, amount_milli, reason, processed_at) VALUES (?, '17850', ?, ?, 15300, '', ?)`),
			row.id, row.status, order.MethodWallet, at.UnixMilli()); err != nil {
			t.Fatal(err)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(order.TopicShipmentRequested, processor.DLQTopic(order.GroupFulfillment)),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for _, id := range []string{"ord_refused", "ord_unknown", "ord_genuine"} {
		ev := order.PaymentProcessed{EventID: "evt_" + id, OrderID: id, CustomerID: "17850", Status: order.PaymentPaid,
			Method: order.MethodWallet, Amount: 15300, Country: "United Kingdom", ProcessedAt: at}
		v, err := sys.Serde.Encode(order.TopicPaymentProcessed, &ev)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Topic: order.TopicPaymentProcessed, Key: []byte(ev.Key()), Value: v})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	shipped := map[string]bool{}
	dead := map[string]string{} // order id -> error message header
	testkafka.WaitFor(t, 45*time.Second, "the genuine order shipped and both forged ones in the DLQ", func() bool {
		fctx, fcancel := context.WithTimeout(ctx, time.Second)
		defer fcancel()
		cl.PollFetches(fctx).EachRecord(func(r *kgo.Record) {
			switch r.Topic {
			case order.TopicShipmentRequested:
				var sh order.ShipmentRequested
				if _, err := sys.Serde.DecodeContext(ctx, r.Topic, r.Value, &sh); err == nil {
					shipped[sh.OrderID] = true
				}
			default:
				var ev order.PaymentProcessed
				if _, err := sys.Serde.DecodeContext(ctx, order.TopicPaymentProcessed, r.Value, &ev); err == nil {
					for _, h := range r.Headers {
						if h.Key == processor.HeaderErrorMessage {
							dead[ev.OrderID] = string(h.Value)
						}
					}
				}
			}
		})
		return shipped["ord_genuine"] && len(dead) == 2
	})
	t.Logf("shipped %v, dead %v", shipped, dead)
	for id, why := range map[string]string{"ord_refused": "recorded REFUSED", "ord_unknown": "no payment record"} {
		if shipped[id] {
			t.Errorf("%s shipped", id)
		}
		if !strings.Contains(dead[id], why) || !strings.Contains(dead[id], "not shipped") {
			t.Errorf("%s in the DLQ with %q; want a reason saying %q and not shipped", id, dead[id], why)
		}
	}
}
