package system_test

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/ordersystem/ops"
	"github.com/ordercast/ordercast/ordersystem/system"
)

// TestPaymentsRightsCoverItsRelay: the ACLs Rights derives for payments
// name the transactional id and the marker topic its running outbox relay
// uses (the relay's names are configurable; the order system keeps the
// defaults, which Rights assumes).
func TestPaymentsRightsCoverItsRelay(t *testing.T) {
	_, brokers := testkafka.Fake(t, nil)
	sys, err := startOn(t, brokers, system.Config{Services: []string{system.ServicePayments}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sys.Stop(context.Background()) })
	if sys.Relay == nil {
		t.Fatal("payments started without an outbox relay")
	}
	var txnID, marker bool
	for _, r := range system.Rights(system.ServicePayments, ops.Layout{}) {
		switch {
		case r.Type == kmsg.ACLResourceTypeTransactionalId && r.Name == sys.Relay.TransactionalID() &&
			r.Operation == kmsg.ACLOperationWrite && r.Pattern == kmsg.ACLResourcePatternTypeLiteral:
			txnID = true
		case r.Type == kmsg.ACLResourceTypeTopic && r.Name == sys.Relay.MarkerTopic() && r.Operation == kmsg.ACLOperationCreate:
			marker = true
		}
	}
	if !txnID || !marker {
		t.Fatalf("Rights(payments) covers the relay's transactional id %q: %v, its marker topic %q: %v",
			sys.Relay.TransactionalID(), txnID, sys.Relay.MarkerTopic(), marker)
	}
}
