package schema

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/ordercast/ordercast/ordersystem/order"
)

// Every proper prefix of a valid encoding is undecodable, never a half
// event.
func TestTruncationsAreUndecodable(t *testing.T) {
	s, _ := newTestSerde(t)
	for topic, v := range map[string]any{
		order.TopicOrderCreated:      sampleOrder(3),
		order.TopicPaymentProcessed:  refusedGuestPayment(),
		order.TopicShipmentRequested: sampleShipment(),
	} {
		b, err := s.Encode(topic, v)
		if err != nil {
			t.Fatal(err)
		}
		for n := range len(b) {
			if _, err := s.Decode(topic, b[:n], newTarget(topic)); !errors.Is(err, ErrUndecodable) {
				t.Fatalf("%s: prefix of %d/%d bytes: %v, want ErrUndecodable", topic, n, len(b), err)
			}
		}
	}
}

// FuzzDecode: Decode never panics, whatever the bytes and the topic; it
// either succeeds with an event that passes Validate, or fails with a
// permanent *Error (the registry is up, so nothing is transient).
func FuzzDecode(f *testing.F) {
	s, _ := newTestSerde(f)
	for topic, v := range map[string]any{
		order.TopicOrderCreated:      sampleOrder(3),
		order.TopicPaymentProcessed:  samplePayment(),
		order.TopicShipmentRequested: sampleShipment(),
	} {
		b, err := s.Encode(topic, v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		j, _ := json.Marshal(v)
		f.Add(j)
	}
	g, _ := s.Encode(order.TopicOrderCreated, guestOrder())
	f.Add(g)
	f.Add([]byte{})
	f.Add([]byte{0})
	f.Add([]byte{0, 0, 0, 0, 1, 2, 'e'})
	f.Add([]byte(`{"lines":[{"quantity":1e400}]}`))
	f.Add([]byte(`{"eventId":null}`))

	topics := append(Topics(), "unknown")
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, topic := range topics {
			var target any = new(order.OrderCreated)
			if topic != "unknown" {
				target = newTarget(topic)
			}
			_, err := s.Decode(topic, b, target)
			if err != nil {
				if !IsDecodeError(err) {
					t.Fatalf("%s: non-permanent error with the registry up: %v", topic, err)
				}
				continue
			}
			if verr := Validate(topic, target); verr != nil {
				t.Fatalf("%s: decoded an invalid event: %v", topic, verr)
			}
		}
	})
}
