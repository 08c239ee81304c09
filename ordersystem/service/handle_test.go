package service_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/ordersystem/service"
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
