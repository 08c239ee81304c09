package checkout_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/schema"
)

// During a rolling upgrade an instance pinned to write orderCreated v1
// (schema.WithWriterVersion) refuses a new order with a channel (400
// unknown_field, nothing stored), but answers the retry of an order an
// upgraded instance accepted as that instance would: the stored answer
// (published) or the stored event (pending), channel included.
func TestWriterPinnedInstanceReplaysOrdersWithChannel(t *testing.T) {
	cur := newEnv(t)
	pinned := cur.instance(withSerde(schema.WithWriterVersion(order.TopicOrderCreated, 1)))
	const body = `{"customerId":"17850","channel":"web","lines":[{"stockCode":"85123A","quantity":6}]}`

	first := cur.post(body, "Idempotency-Key", "k-published")
	ok := first.accepted(t)
	r := pinned.post(body, "Idempotency-Key", "k-published")
	if r.status != http.StatusAccepted || r.header.Get("Idempotent-Replayed") != "true" || string(r.body) != string(first.body) {
		t.Fatalf("retry on the pinned instance: %d %s (replayed %q), want 202 %s replayed", r.status, r.body,
			r.header.Get("Idempotent-Replayed"), first.body)
	}

	// A pending row of an upgraded instance is re-published by the pinned
	// one with its stored (v2) event.
	pend := cur.post(body, "Idempotency-Key", "k-pending").accepted(t)
	if _, err := cur.db.ExecContext(testCtx(t), cur.db.Rebind(`UPDATE checkout_requests
		SET status = 'pending', response_status = NULL, response_body = NULL, published_at = NULL
		WHERE idempotency_key = ?`), "k-pending"); err != nil {
		t.Fatal(err)
	}
	if got := pinned.post(body, "Idempotency-Key", "k-pending").accepted(t); got.OrderID != pend.OrderID {
		t.Fatalf("pending retry on the pinned instance: order %s, want %s", got.OrderID, pend.OrderID)
	}

	// New orders with a channel are refused by the pinned instance, with a
	// key or without, and leave no row.
	for _, key := range []string{"k-new", ""} {
		var r response
		if key == "" {
			r = pinned.post(body)
		} else {
			r = pinned.post(body, "Idempotency-Key", key)
		}
		if r.status != http.StatusBadRequest || r.errorCode(t) != order.ReasonUnknownField || !strings.Contains(string(r.body), "orderCreated v1") {
			t.Fatalf("new order with channel (key %q) on the pinned instance: %d %s, want 400 unknown_field", key, r.status, r.body)
		}
	}
	var rows int
	if err := cur.db.QueryRowContext(testCtx(t), cur.db.Rebind(`SELECT COUNT(*) FROM checkout_requests WHERE idempotency_key = ? OR idempotency_key LIKE ?`),
		"k-new", "order:%").Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("refused requests left %d rows (%v), want none", rows, err)
	}
	// The upgraded instance still takes the refused key.
	cur.post(body, "Idempotency-Key", "k-new").accepted(t)
	// The pinned instance takes orders without a channel, written as v1.
	plain := pinned.post(`{"lines":[{"stockCode":"85123A","quantity":1}]}`).accepted(t)

	recs := cur.consume(5) // k-published, k-pending twice, k-new, plain
	byOrder := map[string][]string{}
	for _, c := range recs {
		byOrder[c.ev.OrderID] = append(byOrder[c.ev.OrderID], c.ev.Channel)
	}
	if ch := byOrder[ok.OrderID]; len(ch) != 1 || ch[0] != "web" {
		t.Errorf("order %s records' channels %v, want one with web", ok.OrderID, ch)
	}
	if ch := byOrder[pend.OrderID]; len(ch) != 2 || ch[0] != "web" || ch[1] != "web" {
		t.Errorf("re-published order %s records' channels %v, want two with web", pend.OrderID, ch)
	}
	if ch := byOrder[plain.OrderID]; len(ch) != 1 || ch[0] != "" {
		t.Errorf("pinned order %s records' channels %v, want one without", plain.OrderID, ch)
	}
	if n := cur.topicCount(); n != 5 {
		t.Errorf("orderCreated holds %d records, want 5", n)
	}
}

// Requests of one new key with a channel race on an upgraded and a pinned
// instance: the pinned one answers the stored order or 400 unknown_field,
// never stores or publishes the order without its channel.
func TestWriterPinnedInstanceRace(t *testing.T) {
	cur := newEnv(t)
	pinned := cur.instance(withSerde(schema.WithWriterVersion(order.TopicOrderCreated, 1)))
	const body = `{"channel":"api","lines":[{"stockCode":"71053","quantity":2}]}`
	envs := []*testEnv{cur, pinned}
	const n = 8
	var (
		wg      sync.WaitGroup
		answers [n]response
	)
	for i := range n {
		wg.Go(func() { answers[i] = envs[i%2].post(body, "Idempotency-Key", "race") })
	}
	wg.Wait()
	var orderID string
	for i, a := range answers {
		switch {
		case a.status == http.StatusAccepted:
			ok := a.accepted(t)
			if orderID != "" && ok.OrderID != orderID {
				t.Errorf("answer %d: order %s, want %s", i, ok.OrderID, orderID)
			}
			orderID = ok.OrderID
		case i%2 == 1 && a.status == http.StatusBadRequest && a.errorCode(t) == order.ReasonUnknownField:
		default:
			t.Errorf("answer %d (%s instance): %d %s", i, map[bool]string{true: "pinned", false: "upgraded"}[i%2 == 1], a.status, a.body)
		}
	}
	if orderID == "" {
		t.Fatal("no request was accepted, want at least the upgraded instance's")
	}
	c := int(cur.topicCount())
	for _, r := range cur.consume(c) {
		if r.ev.OrderID != orderID || r.ev.Channel != "api" {
			t.Errorf("record of order %s channel %q, want %s with channel api", r.ev.OrderID, r.ev.Channel, orderID)
		}
	}
}
