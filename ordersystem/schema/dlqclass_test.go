package schema

import (
	"context"
	"fmt"
	"testing"

	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/processor"
)

// The serde's decode errors plug into the runtime's DLQ as processor's S08
// (TestS08_UndecodableBytes) assumes: random bytes between two valid events
// decode to an error that IsDecodeError reports, which the handler returns
// as processor.Permanent, and processor.ErrorClass (the DLQ record's
// ordercast-error-class header) gives its class "undecodable"; every other
// kind keeps its own class through Permanent and wrapping.
func TestDecodeErrorsClassTheDLQ(t *testing.T) {
	s, _ := newTestSerde(t)
	garbage := []byte{0xc3, 0xde, 0xad, 0xbe, 0xef, 0x13, 0x37, 0xff, 0x00, 0x7f}
	var ev order.OrderCreated
	_, err := s.DecodeContext(context.Background(), order.TopicOrderCreated, garbage, &ev)
	if err == nil || !IsDecodeError(err) {
		t.Fatalf("decode of random bytes: %v, want a decode error", err)
	}
	perm := processor.Permanent(err)
	if !processor.IsPermanent(perm) || processor.ErrorClass(perm) != ClassUndecodable {
		t.Fatalf("Permanent(decode error): permanent %v, class %q; want true, %q",
			processor.IsPermanent(perm), processor.ErrorClass(perm), ClassUndecodable)
	}
	for kind, class := range classOf {
		err := fmt.Errorf("handler: %w", processor.Permanent(newError(kind, order.TopicOrderCreated, 1, "", "test", nil)))
		if got := processor.ErrorClass(err); got != class {
			t.Errorf("processor.ErrorClass(%v) = %q, want %q", err, got, class)
		}
	}
}
