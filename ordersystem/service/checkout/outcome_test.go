package checkout_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/service/checkout"
)

// With the broker down, a request sent without an
// Idempotency-Key gets a 503 that says the outcome is unknown and names the
// order, its status URL and a key the server issued; it is not told to
// retry with a key it never sent. A retry with the issued key, once the
// broker is back, is the same order (one event id), not a second one.
func TestBrokerDownKeylessOutcomeUnknown(t *testing.T) {
	testkafka.SkipIfReal(t, "the broker refusing every produce is a kfake Fault")
	e := newEnv(t, withProduceTimeout(300*time.Millisecond))
	fault := e.cluster.Fault(kfake.Fault{
		Keys:  []kmsg.Key{kmsg.Produce},
		Topic: order.TopicOrderCreated,
		Err:   kerr.NotEnoughReplicas,
		Count: -1,
	})
	const body = `{"customerId":"17850","lines":[{"stockCode":"85123A","quantity":2}]}`
	r := e.post(body)
	if r.status != http.StatusServiceUnavailable || r.errorCode(t) != checkout.CodeBrokerUnavailable {
		t.Fatalf("got %d %s, want 503 broker_unavailable", r.status, r.body)
	}
	var er order.ErrorResponse
	if err := json.Unmarshal(r.body, &er); err != nil {
		t.Fatal(err)
	}
	if er.OrderID == "" || er.StatusURL != "/orders/"+er.OrderID || !strings.HasPrefix(er.IdempotencyKey, "order:") {
		t.Fatalf("503 body %s: want orderId, statusUrl /orders/<id> and an issued idempotencyKey", r.body)
	}
	if r.header.Get("Location") != er.StatusURL || r.header.Get(checkout.HeaderIdempotencyKey) != er.IdempotencyKey {
		t.Errorf("503 headers Location %q Idempotency-Key %q, want %q and %q",
			r.header.Get("Location"), r.header.Get(checkout.HeaderIdempotencyKey), er.StatusURL, er.IdempotencyKey)
	}
	if strings.Contains(er.Error, "same Idempotency-Key") || !strings.Contains(er.Error, "unknown") || !strings.Contains(er.Error, er.IdempotencyKey) {
		t.Errorf("503 message %q: want it to say the outcome is unknown and name the issued key, not 'the same Idempotency-Key'", er.Error)
	}
	// The status URL answers: pending, the outcome not known yet.
	if g := e.do(http.MethodGet, er.StatusURL, ""); g.status != http.StatusOK || !strings.Contains(string(g.body), `"status":"pending"`) {
		t.Errorf("GET %s: %d %s, want 200 pending", er.StatusURL, g.status, g.body)
	}
	// A made-up key with the reserved prefix is refused; the issued one is
	// not, while the broker is still down (503 again, same order).
	if b := e.post(body, checkout.HeaderIdempotencyKey, "order:ord_madeup"); b.status != http.StatusBadRequest || b.errorCode(t) != checkout.CodeBadIdempotencyKey {
		t.Errorf("made-up issued key: %d %s, want 400 bad_idempotency_key", b.status, b.body)
	}

	fault.Remove()
	var ok order.PlaceOrderResponse
	eventually(t, "the retry with the issued key to be accepted", func() bool {
		r := e.post(body, checkout.HeaderIdempotencyKey, er.IdempotencyKey)
		if r.status == http.StatusServiceUnavailable {
			return false
		}
		ok = r.accepted(t)
		return true
	})
	if ok.OrderID != er.OrderID {
		t.Errorf("retry accepted order %s, want the 503's %s", ok.OrderID, er.OrderID)
	}
	if err := e.svc.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	n := int(e.topicCount())
	events := map[string]bool{}
	for _, c := range e.consume(n) {
		if c.ev.OrderID != er.OrderID {
			t.Errorf("record of order %s, want only %s", c.ev.OrderID, er.OrderID)
		}
		events[c.ev.EventID] = true
	}
	if len(events) != 1 {
		t.Errorf("order published as %d event ids %v, want 1", len(events), events)
	}
	if got := e.accepted(); got != 1 {
		t.Errorf("Accepted = %d, want 1", got)
	}
}
