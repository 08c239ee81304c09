package service

import (
	"fmt"

	"github.com/ordercast/ordercast/ordersystem/store"
	"github.com/ordercast/ordercast/processor"
)

// OrderConflict returns err as a permanent error when it is a primary key or
// unique constraint violation (store.IsUniqueViolation: SQLite
// SQLITE_CONSTRAINT_PRIMARYKEY/UNIQUE, PostgreSQL 23505) on a row keyed by
// orderID: the order is already stored under another event id, so this
// event (eventID) conflicts with it. That is a contract violation (checkout
// publishes one event id per order) that no retry can fix, so the record goes
// to the DLQ at once, with a reason naming the order, the event and the
// conflict. Any other error, a nil one included, is returned unchanged, so a
// database outage stays transient.
func OrderConflict(err error, group, orderID, eventID string) error {
	if !store.IsUniqueViolation(err) {
		return err
	}
	return processor.Permanent(fmt.Errorf("%s: order %s already exists (stored from another event); conflicting orderCreated event %s refused: %w",
		group, orderID, eventID, err))
}
