package service_test

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/schema"
	"github.com/ordercast/ordercast/ordersystem/schema/schematest"
	"github.com/ordercast/ordercast/ordersystem/service"
	"github.com/ordercast/ordercast/ordersystem/service/notifications"
	"github.com/ordercast/ordercast/ordersystem/service/orders"
	"github.com/ordercast/ordercast/ordersystem/service/payments"
	"github.com/ordercast/ordercast/processor"
)

// A decode error fails a batch as a permanent error naming the record (the
// runtime then handles the records one at a time), while Handle returns the
// decoder's error as it is: a transient one (a registry outage) stays
// transient, so the record is retried rather than dead-lettered.
func TestDecodeErrorsOfHandleAndHandleBatch(t *testing.T) {
	outage := errors.New("schema registry unavailable")
	decode := func(_ context.Context, r *kgo.Record) (service.Event, struct{}, error) {
		if string(r.Value) == "down" {
			return service.Event{}, struct{}{}, outage
		}
		return service.Event{ID: string(r.Value), Record: r}, struct{}{}, nil
	}
	applyAll := func(context.Context, *sql.Tx, []struct{}, []bool) error {
		t.Error("a batch with a record that did not decode was applied")
		return nil
	}
	recs := []*kgo.Record{{Topic: "orderCreated", Partition: 1, Offset: 7, Value: []byte("e1")}, {Topic: "orderCreated", Partition: 1, Offset: 8, Value: []byte("down")}}
	err := service.HandleBatch(context.Background(), nil, nil, nil, "g", recs, decode, applyAll)
	if !errors.Is(err, outage) || !processor.IsPermanent(err) || !strings.Contains(err.Error(), "orderCreated/1/8") {
		t.Fatalf("HandleBatch: %v (permanent %v), want a permanent error wrapping the decode error and naming orderCreated/1/8", err, processor.IsPermanent(err))
	}

	one := func(ctx context.Context, r *kgo.Record) (service.Event, error) {
		ev, _, err := decode(ctx, r)
		return ev, err
	}
	err = service.Handle(context.Background(), nil, nil, nil, "g", recs[1], one)
	if err != outage || processor.IsPermanent(err) || processor.ErrorClass(err) != processor.ClassTransient {
		t.Fatalf("Handle: %v (permanent %v, class %q), want the decoder's transient error unchanged", err, processor.IsPermanent(err), processor.ErrorClass(err))
	}
}

// The services' one-record handlers keep the decoder's classification and
// message, which is why they decode with service.Decode rather than
// middleware.Decode (that one makes every decode error permanent and
// prefixes the record's coordinates): a schema id the registry cannot be
// asked about (it is down) is a transient error, retried, and a value that
// breaks the contract is permanent with the schema package's class and the
// message "permanent: <decode error>" that the DLQ record's error-message
// header carries.
func TestHandlersKeepDecodeClassesAndMessages(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	cl, err := sr.NewClient(sr.URLs(reg.URL()))
	if err != nil {
		t.Fatal(err)
	}
	serde := schematest.Serde(t, cl, schema.WithLookupTimeout(500*time.Millisecond))
	valid := schematest.Record(t, serde, order.TopicOrderCreated, "k", 0, &order.OrderCreated{EventID: "evt_1", Order: order.Order{
		OrderID: "ord_1", CustomerID: "c1", Country: "United Kingdom", CreatedAt: time.UnixMilli(1700000000000).UTC(),
		Lines: []order.Line{{StockCode: "85123A", Quantity: 1, UnitPrice: 1000, LineTotal: 1000}}, Total: 1000,
	}}).Value
	unseen := binary.BigEndian.AppendUint32([]byte{0}, 77) // a schema id of no registered schema
	unseen = append(unseen, valid[5:]...)
	garbage := []byte("not the wire format")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, decodeErr := serde.DecodeContext(ctx, order.TopicOrderCreated, garbage, new(order.OrderCreated))
	if decodeErr == nil {
		t.Fatal("the serde decoded garbage")
	}
	reg.Close()

	handlers := map[string]func(context.Context, *kgo.Record) error{
		"orders":        (&orders.Service{Serde: serde}).Handle,
		"notifications": (&notifications.Service{Serde: serde}).Handle,
		"payments":      (&payments.Service{Serde: serde}).Handle,
	}
	for name, h := range handlers {
		err := h(ctx, &kgo.Record{Topic: order.TopicOrderCreated, Value: unseen})
		if err == nil || processor.IsPermanent(err) || processor.ErrorClass(err) != processor.ClassTransient {
			t.Errorf("%s: schema id unknown with the registry down: %v (class %q), want a transient error", name, err, processor.ErrorClass(err))
		}
		err = h(ctx, &kgo.Record{Topic: order.TopicOrderCreated, Value: garbage})
		if !processor.IsPermanent(err) || processor.ErrorClass(err) != schema.ErrorClass(decodeErr) || err.Error() != "permanent: "+decodeErr.Error() {
			t.Errorf("%s: undecodable value: %v (class %q), want permanent: %v (class %q)", name, err, processor.ErrorClass(err), decodeErr, schema.ErrorClass(decodeErr))
		}
	}
}
