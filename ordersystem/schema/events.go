package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hamba/avro/v2"

	"github.com/ordercast/ordercast/ordersystem/order"
)

// eventCodec converts one topic's event type to and from its encodings and
// checks its rules. Implementations are stateless and concurrency-safe.
type eventCodec interface {
	// typeName is the Go type, for messages ("order.OrderCreated").
	typeName() string
	// accepts reports whether v is a valid decode target: a non-nil *E.
	accepts(v any) bool
	// encodeAvro appends v's Avro body to w. v is E or *E; ok is false when
	// it is neither (or a nil *E).
	encodeAvro(w *avro.Writer, s avro.Schema, v any) (ok bool, err error)
	// decodeAvro decodes r into v, which must be a non-nil *E, and checks
	// the event's rules (a *ruleViolation error). The decoded event replaces
	// *v entirely, and only when decoding and the rules succeed.
	decodeAvro(r *avro.Reader, s avro.Schema, v any) (ok bool, err error)
	// decodeJSON is decodeAvro for a JSON object.
	decodeJSON(b []byte, v any) (ok bool, err error)
	// check applies the event's rules to v (E or *E). It returns the
	// offending field and the reason, or "" and "" when v is valid.
	check(v any) (ok bool, field, reason string)
}

// codecs maps each topic to the codec of its event type.
var codecs = map[string]eventCodec{
	order.TopicOrderCreated: &codec[order.OrderCreated, wireOrderCreated]{
		name: "order.OrderCreated", toWire: orderCreatedToWire, fromWire: orderCreatedFromWire, rules: checkOrderCreated,
	},
	order.TopicPaymentProcessed: &codec[order.PaymentProcessed, wirePaymentProcessed]{
		name: "order.PaymentProcessed", toWire: paymentToWire, fromWire: paymentFromWire, rules: checkPaymentProcessed,
	},
	order.TopicShipmentRequested: &codec[order.ShipmentRequested, wireShipmentRequested]{
		name: "order.ShipmentRequested", toWire: shipmentToWire, fromWire: shipmentFromWire, rules: checkShipmentRequested,
	},
}

// codec is the eventCodec of event type E with Avro wire struct W. The wire
// struct exists because hamba/avro maps a ["null", T] union only to a pointer
// (or interface) field, while the order package uses plain strings with ""
// meaning absent.
type codec[E, W any] struct {
	name     string
	toWire   func(*E, *W)
	fromWire func(*W, *E)
	rules    func(*E) (field, reason string)
}

func (c *codec[E, W]) typeName() string { return c.name }

func (c *codec[E, W]) accepts(v any) bool {
	p, ok := v.(*E)
	return ok && p != nil
}

func (c *codec[E, W]) event(v any) (*E, bool) {
	switch x := v.(type) {
	case *E:
		return x, x != nil
	case E:
		return &x, true
	}
	return nil, false
}

func (c *codec[E, W]) encodeAvro(w *avro.Writer, s avro.Schema, v any) (bool, error) {
	e, ok := c.event(v)
	if !ok {
		return false, nil
	}
	var wire W
	c.toWire(e, &wire)
	w.WriteVal(s, &wire)
	return true, w.Error
}

func (c *codec[E, W]) decodeAvro(r *avro.Reader, s avro.Schema, v any) (bool, error) {
	dst, ok := v.(*E)
	if !ok || dst == nil {
		return false, nil
	}
	var wire W
	r.ReadVal(s, &wire)
	if r.Error != nil {
		// Including io.EOF: unlike avro.Unmarshal, a body that ends early
		// is an error here, not a silently half-decoded event.
		return true, r.Error
	}
	if r.Peek(); r.Error == nil {
		return true, errTrailingBytes
	}
	var e E
	c.fromWire(&wire, &e)
	return true, c.commit(&e, dst)
}

// commit checks e's rules and, when they hold, stores it in dst.
func (c *codec[E, W]) commit(e, dst *E) error {
	if f, r := c.rules(e); f != "" {
		return &ruleViolation{field: f, reason: r}
	}
	*dst = *e
	return nil
}

// ruleViolation is a broken rule found while decoding.
type ruleViolation struct{ field, reason string }

func (v *ruleViolation) Error() string { return v.field + ": " + v.reason }

func (c *codec[E, W]) decodeJSON(b []byte, v any) (bool, error) {
	dst, ok := v.(*E)
	if !ok || dst == nil {
		return false, nil
	}
	var e E
	if err := json.Unmarshal(b, &e); err != nil {
		return true, err
	}
	return true, c.commit(&e, dst)
}

func (c *codec[E, W]) check(v any) (bool, string, string) {
	e, ok := c.event(v)
	if !ok {
		return false, "", ""
	}
	f, r := c.rules(e)
	return true, f, r
}

var errTrailingBytes = errors.New("trailing bytes after the Avro body")

// optional maps "" to null for a ["null", "string"] union.
func optional(s *string) *string {
	if *s == "" {
		return nil
	}
	return s
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Wire structs: field for field the Avro records, named by their json tags
// (avroAPI uses TagKey "json").

type wireOrderCreated struct {
	EventID    string       `json:"eventId"`
	OrderID    string       `json:"orderId"`
	CustomerID *string      `json:"customerId"`
	Country    *string      `json:"country"`
	Lines      []order.Line `json:"lines"`
	TotalMilli order.Money  `json:"totalMilli"`
	CreatedAt  time.Time    `json:"createdAt"`
	Reference  *string      `json:"reference"`
	Channel    *string      `json:"channel"` // since v2
}

func orderCreatedToWire(e *order.OrderCreated, w *wireOrderCreated) {
	*w = wireOrderCreated{
		EventID:    e.EventID,
		OrderID:    e.OrderID,
		CustomerID: optional(&e.CustomerID),
		Country:    optional(&e.Country),
		Lines:      e.Lines,
		TotalMilli: e.Total,
		CreatedAt:  e.CreatedAt,
		Reference:  optional(&e.Reference),
		Channel:    optional(&e.Channel),
	}
}

func orderCreatedFromWire(w *wireOrderCreated, e *order.OrderCreated) {
	*e = order.OrderCreated{
		EventID: w.EventID,
		Order: order.Order{
			OrderID:    w.OrderID,
			CustomerID: deref(w.CustomerID),
			Country:    deref(w.Country),
			Lines:      w.Lines,
			Total:      w.TotalMilli,
			CreatedAt:  w.CreatedAt,
			Reference:  deref(w.Reference),
			Channel:    deref(w.Channel),
		},
	}
}

type wirePaymentProcessed struct {
	EventID     string      `json:"eventId"`
	OrderID     string      `json:"orderId"`
	CustomerID  *string     `json:"customerId"`
	Status      string      `json:"status"`
	Method      string      `json:"method"`
	AmountMilli order.Money `json:"amountMilli"`
	Reason      *string     `json:"reason"`
	Country     *string     `json:"country"`
	ProcessedAt time.Time   `json:"processedAt"`
}

func paymentToWire(e *order.PaymentProcessed, w *wirePaymentProcessed) {
	*w = wirePaymentProcessed{
		EventID:     e.EventID,
		OrderID:     e.OrderID,
		CustomerID:  optional(&e.CustomerID),
		Status:      e.Status,
		Method:      e.Method,
		AmountMilli: e.Amount,
		Reason:      optional(&e.Reason),
		Country:     optional(&e.Country),
		ProcessedAt: e.ProcessedAt,
	}
}

func paymentFromWire(w *wirePaymentProcessed, e *order.PaymentProcessed) {
	*e = order.PaymentProcessed{
		EventID:     w.EventID,
		OrderID:     w.OrderID,
		CustomerID:  deref(w.CustomerID),
		Status:      w.Status,
		Method:      w.Method,
		Amount:      w.AmountMilli,
		Reason:      deref(w.Reason),
		Country:     deref(w.Country),
		ProcessedAt: w.ProcessedAt,
	}
}

type wireShipmentRequested struct {
	EventID     string    `json:"eventId"`
	ShipmentID  string    `json:"shipmentId"`
	OrderID     string    `json:"orderId"`
	CustomerID  *string   `json:"customerId"`
	Country     *string   `json:"country"`
	RequestedAt time.Time `json:"requestedAt"`
}

func shipmentToWire(e *order.ShipmentRequested, w *wireShipmentRequested) {
	*w = wireShipmentRequested{
		EventID:     e.EventID,
		ShipmentID:  e.ShipmentID,
		OrderID:     e.OrderID,
		CustomerID:  optional(&e.CustomerID),
		Country:     optional(&e.Country),
		RequestedAt: e.RequestedAt,
	}
}

func shipmentFromWire(w *wireShipmentRequested, e *order.ShipmentRequested) {
	*e = order.ShipmentRequested{
		EventID:     w.EventID,
		ShipmentID:  w.ShipmentID,
		OrderID:     w.OrderID,
		CustomerID:  deref(w.CustomerID),
		Country:     deref(w.Country),
		RequestedAt: w.RequestedAt,
	}
}

// The rules below are the semantic half of the contract (the schemas are the
// structural half). Each returns the offending field as a JSON path and the
// reason, or "", "" when the event is valid.

func checkOrderCreated(e *order.OrderCreated) (string, string) {
	switch {
	case e.EventID == "":
		return "eventId", "must not be empty"
	case e.OrderID == "":
		return "orderId", "must not be empty"
	case e.CreatedAt.IsZero():
		return "createdAt", "must be set"
	case e.Channel != "" && !order.ValidChannel(e.Channel):
		return "channel", fmt.Sprintf("must be null or 1 to %d characters of a-z, 0-9, '_' and '-' starting with a letter (the rule checkout applies), is %q",
			order.MaxChannelLen, truncate(e.Channel, 80))
	case len(e.Lines) == 0:
		return "lines", "must have at least one line"
	case len(e.Lines) > MaxLines:
		return "lines", fmt.Sprintf("must have at most %d lines, has %d", MaxLines, len(e.Lines))
	}
	var total order.Money
	for i := range e.Lines {
		l := &e.Lines[i]
		at := func(f string) string { return fmt.Sprintf("lines[%d].%s", i, f) }
		switch {
		case l.StockCode == "":
			return at("stockCode"), "must not be empty"
		case l.Quantity <= 0:
			return at("quantity"), fmt.Sprintf("must be > 0, is %d", l.Quantity)
		case l.UnitPrice < 0:
			return at("unitPriceMilli"), fmt.Sprintf("must be >= 0, is %d", l.UnitPrice)
		}
		want, ok := l.UnitPrice.Times(l.Quantity)
		if !ok {
			return at("lineTotalMilli"), "unitPriceMilli * quantity overflows"
		}
		if l.LineTotal != want {
			return at("lineTotalMilli"), fmt.Sprintf("must be unitPriceMilli * quantity = %d, is %d", want, l.LineTotal)
		}
		if total+want < total {
			return "totalMilli", "sum of lineTotalMilli overflows"
		}
		total += want
	}
	if e.Total != total {
		return "totalMilli", fmt.Sprintf("must be the sum of lineTotalMilli = %d, is %d", total, e.Total)
	}
	return "", ""
}

func checkPaymentProcessed(e *order.PaymentProcessed) (string, string) {
	switch {
	case e.EventID == "":
		return "eventId", "must not be empty"
	case e.OrderID == "":
		return "orderId", "must not be empty"
	case e.Status != order.PaymentPaid && e.Status != order.PaymentRefused:
		return "status", fmt.Sprintf("must be %s or %s, is %q", order.PaymentPaid, order.PaymentRefused, e.Status)
	case e.Method != order.MethodWallet && e.Method != order.MethodCard:
		return "method", fmt.Sprintf("must be %s or %s, is %q", order.MethodWallet, order.MethodCard, e.Method)
	case e.Amount < 0:
		return "amountMilli", fmt.Sprintf("must be >= 0, is %d", e.Amount)
	case e.Status == order.PaymentRefused && e.Reason == "":
		return "reason", "must be set when status is REFUSED"
	case e.ProcessedAt.IsZero():
		return "processedAt", "must be set"
	}
	return "", ""
}

func checkShipmentRequested(e *order.ShipmentRequested) (string, string) {
	switch {
	case e.EventID == "":
		return "eventId", "must not be empty"
	case e.ShipmentID == "":
		return "shipmentId", "must not be empty"
	case e.OrderID == "":
		return "orderId", "must not be empty"
	case e.RequestedAt.IsZero():
		return "requestedAt", "must be set"
	}
	return "", ""
}

// Validate checks v, the topic's event (order.OrderCreated,
// order.PaymentProcessed or order.ShipmentRequested, by value or pointer),
// against the rules of its contract. Encode and Decode apply it to every
// event; producers may call it earlier to reject bad input themselves.
//
// Rules (beyond the schemas' structure and enums):
//   - every event: eventId and the ids it carries (orderId, shipmentId) are
//     not empty; its timestamp (createdAt, processedAt, requestedAt) is set.
//   - OrderCreated: 1 to MaxLines lines; each line has a stockCode, a
//     quantity > 0, a unitPriceMilli >= 0 and lineTotalMilli =
//     unitPriceMilli * quantity (no overflow); totalMilli is the sum of the
//     line totals.
//   - PaymentProcessed: status is PAID or REFUSED; method is WALLET or CARD;
//     amountMilli >= 0; a REFUSED payment has a reason.
//
// It returns nil, or an *Error wrapping ErrInvalid (Field names the field),
// ErrUnknownTopic or ErrUnsupportedType. It is safe for concurrent use.
func Validate(topic string, v any) error {
	c, ok := contracts[topic]
	if !ok {
		return newError(ErrUnknownTopic, topic, 0, "", "", nil)
	}
	return c.validate(v)
}

func (c *contract) validate(v any) error {
	ok, field, reason := c.codec.check(v)
	if !ok {
		return c.unsupported(v)
	}
	if field != "" {
		return newError(ErrInvalid, c.topic, 0, field, reason, nil)
	}
	return nil
}

func (c *contract) unsupported(v any) error {
	return newError(ErrUnsupportedType, c.topic, 0, "",
		fmt.Sprintf("got %T, want %s or *%s (Decode: non-nil *%s)", v, c.codec.typeName(), c.codec.typeName(), c.codec.typeName()), nil)
}

// isJSON reports whether b's first non-space byte is '{'.
func isJSON(b []byte) bool {
	b = bytes.TrimLeft(b, " \t\r\n")
	return len(b) > 0 && b[0] == '{'
}

// truncate shortens s to n bytes for an error message.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
