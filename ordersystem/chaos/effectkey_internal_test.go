package chaos

import (
	"testing"

	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/service/notifications"
)

// effectKey names the row each group's effect of an event is checked by:
// the inbox row's event id where the group claims one, the natural key where
// the effect deduplicates itself, by the event's original topic, so that a
// record read back from a retry topic is checked like the one first
// consumed.
func TestEffectKey(t *testing.T) {
	paid := eventInfo{topic: order.TopicPaymentProcessed, eventID: "evt_p1", orderID: "ord_1", status: order.PaymentPaid}
	refused := eventInfo{topic: order.TopicPaymentProcessed, eventID: "evt_p2", orderID: "ord_2", status: order.PaymentRefused}
	created := eventInfo{topic: order.TopicOrderCreated, eventID: "evt_c1", orderID: "ord_1"}
	shipped := eventInfo{topic: order.TopicShipmentRequested, eventID: "evt_s1", orderID: "ord_1"}
	for _, c := range []struct {
		group string
		ev    eventInfo
		want  string
	}{
		{order.GroupOrders, created, "evt_c1"},
		{order.GroupOrders, paid, "ord_1/paid"},
		{order.GroupOrders, refused, "ord_2/payment_refused"},
		{order.GroupOrders, shipped, "ord_1/shipment_requested"},
		{order.GroupPayments, created, "evt_c1"},
		{order.GroupNotifications, created, notifications.NotificationID("ord_1", notifications.KindOrderReceived)},
		{order.GroupNotifications, paid, notifications.NotificationID("ord_1", notifications.KindPaymentConfirmed)},
		{order.GroupNotifications, refused, notifications.NotificationID("ord_2", notifications.KindPaymentFailed)},
	} {
		if got := effectKey(c.group, c.ev); got != c.want {
			t.Errorf("effectKey(%s, %s event %s) = %q, want %q", c.group, c.ev.topic, c.ev.eventID, got, c.want)
		}
	}
}
