package order

import "time"

// Topic names of the order system. Each is also the schema registry subject
// prefix under the TopicNameStrategy ("<topic>-value").
const (
	TopicOrderCreated      = "orderCreated"
	TopicPaymentProcessed  = "paymentProcessed"
	TopicShipmentRequested = "shipmentRequested"
)

// Consumer groups of the order system; each service is one group.
const (
	GroupOrders        = "orders"
	GroupPayments      = "payments"
	GroupNotifications = "notifications"
	GroupFulfillment   = "fulfillment"
)

// Groups lists every consumer group of the order system, in a stable order.
var Groups = []string{GroupOrders, GroupPayments, GroupNotifications, GroupFulfillment}

// OrderCreated is published by checkout once per accepted order. EventID is
// stable across re-publication (an Idempotency-Key retry re-sends the same
// event), so consumers deduplicate on it.
type OrderCreated struct {
	EventID string `json:"eventId"`
	Order
}

// Payment statuses carried by PaymentProcessed.
const (
	PaymentPaid    = "PAID"
	PaymentRefused = "REFUSED"
)

// Payment methods: a known customer pays from wallet credits; a guest has no
// wallet and pays by card, which this shop treats as always approved.
const (
	MethodWallet = "WALLET"
	MethodCard   = "CARD"
)

// PaymentProcessed is published (through the payments outbox) once per order:
// PAID with the amount debited, or REFUSED with a reason.
type PaymentProcessed struct {
	EventID     string    `json:"eventId"`
	OrderID     string    `json:"orderId"`
	CustomerID  string    `json:"customerId,omitempty"`
	Status      string    `json:"status"` // PaymentPaid or PaymentRefused
	Method      string    `json:"method"` // MethodWallet or MethodCard
	Amount      Money     `json:"amountMilli"`
	Reason      string    `json:"reason,omitempty"` // set when refused
	Country     string    `json:"country,omitempty"`
	ProcessedAt time.Time `json:"processedAt"`
}

// Key is the record key: the customer id, or the order id for a guest.
func (p *PaymentProcessed) Key() string { return KeyFor(p.CustomerID, p.OrderID) }

// ShipmentRequested is published by fulfillment, inside a Kafka transaction,
// exactly once per paid order for read_committed readers.
type ShipmentRequested struct {
	EventID     string    `json:"eventId"`
	ShipmentID  string    `json:"shipmentId"`
	OrderID     string    `json:"orderId"`
	CustomerID  string    `json:"customerId,omitempty"`
	Country     string    `json:"country,omitempty"`
	RequestedAt time.Time `json:"requestedAt"`
}

// Key is the record key: the customer id, or the order id for a guest.
func (s *ShipmentRequested) Key() string { return KeyFor(s.CustomerID, s.OrderID) }
