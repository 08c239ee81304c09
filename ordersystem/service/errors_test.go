package service_test

import (
	"errors"
	"testing"

	"github.com/ordercast/ordercast/ordersystem/service"
	"github.com/ordercast/ordercast/processor"
)

// OrderConflict leaves errors other than a unique violation as they are:
// a database outage must stay transient.
func TestOrderConflictKeepsOtherErrors(t *testing.T) {
	if err := service.OrderConflict(nil, "orders", "ord_1", "evt_1"); err != nil {
		t.Errorf("nil: got %v", err)
	}
	other := errors.New("database is locked")
	if err := service.OrderConflict(other, "orders", "ord_1", "evt_1"); err != other || processor.IsPermanent(err) {
		t.Errorf("other error: got %v (permanent %v), want it unchanged", err, processor.IsPermanent(err))
	}
}
