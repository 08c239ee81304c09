package checkout_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/service/checkout"
	"github.com/ordercast/ordercast/ordersystem/store"
	"github.com/ordercast/ordercast/ordersystem/store/storetest"
)

const (
	keyedBody = `{"customerId":"12583","country":"France","reference":"536370","lines":[{"stockCode":"85123A","quantity":24},{"stockCode":"22423","quantity":3}]}`
	// keyedBodyReformatted asks for the same order as keyedBody: other
	// white space, member order and stock code case, and null for an
	// absent optional member.
	keyedBodyReformatted = `{ "lines" : [ { "quantity" : 24, "stockCode" : "85123a" },
		{ "stockCode" : "22423", "quantity" : 3 } ], "channel": null,
		"reference" : "536370", "country" : "France", "customerId" : "12583" }`
	// keyedBodyWithPrice is keyedBody plus a member checkout does not
	// have: refused, even with a key that has a stored answer.
	keyedBodyWithPrice = `{"customerId":"12583","country":"France","reference":"536370","price":1,"lines":[{"stockCode":"85123A","quantity":24},{"stockCode":"22423","quantity":3}]}`
)

func TestIdempotencyKeyReplaysSameOrder(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) { testIdempotencyKeyReplaysSameOrder(t, db) })
}

func testIdempotencyKeyReplaysSameOrder(t *testing.T, db *store.DB) {
	e := newEnvOn(t, db)
	first := e.post(keyedBody, "Idempotency-Key", "invoice-536370")
	ok := first.accepted(t)
	if first.header.Get(checkout.HeaderIdempotentReplayed) != "" {
		t.Errorf("first answer marked as replayed")
	}
	for _, body := range []string{keyedBody, keyedBodyReformatted} {
		again := e.post(body, "Idempotency-Key", "invoice-536370")
		if again.status != first.status || !bytes.Equal(again.body, first.body) {
			t.Fatalf("replay %d %q, want %d %q byte for byte", again.status, again.body, first.status, first.body)
		}
		if again.header.Get(checkout.HeaderIdempotentReplayed) != "true" {
			t.Errorf("replay lacks %s: true", checkout.HeaderIdempotentReplayed)
		}
	}
	if r := e.post(keyedBodyWithPrice, "Idempotency-Key", "invoice-536370"); r.status != http.StatusBadRequest ||
		r.errorCode(t) != order.ReasonUnknownField || r.header.Get(checkout.HeaderIdempotentReplayed) != "" {
		t.Errorf("same key, body with an unknown member: %d %s, want 400 unknown_field and no replay", r.status, r.body)
	}
	if n := e.topicCount(); n != 1 {
		t.Errorf("%d records on the topic, want 1", n)
	}
	if c := e.consume(1)[0]; c.ev.OrderID != ok.OrderID || c.key != "12583" {
		t.Errorf("record %s key %s, want order %s key 12583", c.ev.OrderID, c.key, ok.OrderID)
	}
	if status, id := e.requestRow("invoice-536370"); status != "published" || id != ok.OrderID {
		t.Errorf("row %s %s", status, id)
	}
	if n := e.accepted(); n != 1 {
		t.Errorf("Accepted = %d, want 1", n)
	}
	if got := e.metric("ordercast_checkout_idempotent_replays_total"); got != 2 {
		t.Errorf("idempotent_replays_total = %v, want 2", got)
	}
	if got := e.metric("ordercast_checkout_orders_accepted_total"); got != 1 {
		t.Errorf("orders_accepted_total = %v, want 1", got)
	}
}

func TestIdempotencyKeyReusedForAnotherRequest(t *testing.T) {
	e := newEnv(t)
	e.post(keyedBody, "Idempotency-Key", "k1").accepted(t)
	other := `{"customerId":"12583","lines":[{"stockCode":"85123A","quantity":25}]}`
	r := e.post(other, "Idempotency-Key", "k1")
	if r.status != http.StatusUnprocessableEntity || r.errorCode(t) != order.ReasonIdempotencyMismatch {
		t.Fatalf("got %d %s, want 422 %s", r.status, r.body, order.ReasonIdempotencyMismatch)
	}
	// An invalid new body with a used key is still just invalid.
	if r := e.post(`{"lines":[]}`, "Idempotency-Key", "k1"); r.status != 422 || r.errorCode(t) != order.ReasonNoLines {
		t.Errorf("got %d %s, want 422 no_lines", r.status, r.body)
	}
	if n := e.topicCount(); n != 1 {
		t.Errorf("%d records on the topic, want 1", n)
	}
}

// A request that fails validation against the catalog records nothing, so
// its key stays free.
func TestIdempotencyKeyNotTakenByRejectedRequest(t *testing.T) {
	e := newEnv(t)
	if r := e.post(`{"lines":[{"stockCode":"NOPE","quantity":1}]}`, "Idempotency-Key", "k2"); r.status != 422 {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	e.post(keyedBody, "Idempotency-Key", "k2").accepted(t)
}

// Concurrent requests with one new key: one order, one record, one answer.
func TestIdempotencyKeyConcurrentRequests(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) { testIdempotencyKeyConcurrentRequests(t, db) })
}

func testIdempotencyKeyConcurrentRequests(t *testing.T, db *store.DB) {
	e := newEnvOn(t, db)
	const n = 8
	var (
		wg      sync.WaitGroup
		answers [n]response
	)
	for i := range n {
		wg.Go(func() {
			answers[i] = e.post(keyedBody, "Idempotency-Key", "concurrent")
		})
	}
	wg.Wait()
	first := answers[0].accepted(t)
	for i, a := range answers {
		if got := a.accepted(t); got != first {
			t.Errorf("answer %d: %+v, want %+v", i, got, first)
		}
	}
	if c := e.topicCount(); c != 1 {
		t.Errorf("%d records on the topic, want 1", c)
	}
	if got := e.metric("ordercast_checkout_idempotent_replays_total"); got != n-1 {
		t.Errorf("idempotent_replays_total = %v, want %d", got, n-1)
	}
}

// A pending row (a crash after the row was written, before or after the
// broker's acknowledgement) is re-published on retry: the same event, same
// order id and event id, and then marked published.
func TestPendingRowIsRepublished(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) { testPendingRowIsRepublished(t, db) })
}

func testPendingRowIsRepublished(t *testing.T, db *store.DB) {
	e := newEnvOn(t, db)
	ctx := testCtx(t)
	hash, err := checkout.RequestHash([]byte(keyedBody))
	if err != nil {
		t.Fatal(err)
	}
	ev := order.OrderCreated{EventID: "evt_pending", Order: order.Order{
		OrderID: "ord_pending", CustomerID: "12583", Country: "France", Reference: "536370",
		Lines:     []order.Line{{StockCode: "85123A", Description: "WHITE HANGING HEART T-LIGHT HOLDER", Quantity: 24, UnitPrice: 2550, LineTotal: 61200}},
		Total:     61200,
		CreatedAt: time.Now().UTC().Truncate(time.Millisecond),
	}}
	payload, err := e.serde.Encode(order.TopicOrderCreated, &ev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.ExecContext(ctx, e.db.Rebind(`INSERT INTO checkout_requests
		(idempotency_key, request_hash, order_id, event_id, status, payload, created_at) VALUES (?, ?, ?, ?, 'pending', ?, ?)`),
		"pending-key", hash, ev.OrderID, ev.EventID, payload, time.Now().UnixMilli()); err != nil {
		t.Fatal(err)
	}
	if got := e.svc.Handler(); got == nil {
		t.Fatal("nil handler")
	}
	if v, err := e.svc.Order(ctx, "ord_pending"); err != nil || v.Status != checkout.StagePending {
		t.Errorf("GET before re-publication: %+v %v, want status pending", v, err)
	}

	r := e.post(keyedBodyReformatted, "Idempotency-Key", "pending-key")
	ok := r.accepted(t)
	if ok.OrderID != "ord_pending" || ok.Total != "61.200" {
		t.Errorf("answer %+v, want the stored order ord_pending, total 61.200 (from the stored event)", ok)
	}
	if r.header.Get(checkout.HeaderIdempotentReplayed) != "" {
		t.Errorf("a re-publication is not a replay")
	}
	c := e.consume(1)[0]
	if c.ev.EventID != "evt_pending" || c.ev.OrderID != "ord_pending" || c.key != "12583" {
		t.Errorf("record %s/%s key %s, want evt_pending/ord_pending key 12583", c.ev.EventID, c.ev.OrderID, c.key)
	}
	if status, _ := e.requestRow("pending-key"); status != "published" {
		t.Errorf("row status %s after re-publication, want published", status)
	}
	// Now it replays.
	again := e.post(keyedBody, "Idempotency-Key", "pending-key")
	if !bytes.Equal(again.body, r.body) || again.header.Get(checkout.HeaderIdempotentReplayed) != "true" {
		t.Errorf("replay %s, want %s replayed", again.body, r.body)
	}
	if n := e.topicCount(); n != 1 {
		t.Errorf("%d records, want 1", n)
	}
	if got := e.metric("ordercast_checkout_republished_total"); got != 1 {
		t.Errorf("republished_total = %v, want 1", got)
	}
}

// A crash after the broker's acknowledgement but before the row was marked:
// the retry publishes the same event again (a duplicate the consumers'
// inboxes absorb), never a second order.
func TestAcknowledgedButUnmarkedIsSameEvent(t *testing.T) {
	e := newEnv(t)
	ok := e.post(keyedBody, "Idempotency-Key", "crash").accepted(t)
	if _, err := e.db.ExecContext(testCtx(t), e.db.Rebind(`UPDATE checkout_requests
		SET status = 'pending', response_status = NULL, response_body = NULL, published_at = NULL
		WHERE idempotency_key = ?`), "crash"); err != nil {
		t.Fatal(err)
	}
	if again := e.post(keyedBody, "Idempotency-Key", "crash").accepted(t); again != ok {
		t.Errorf("retry answered %+v, want %+v", again, ok)
	}
	recs := e.consume(2)
	if recs[0].ev.EventID != recs[1].ev.EventID || recs[0].ev.OrderID != ok.OrderID || recs[1].ev.OrderID != ok.OrderID {
		t.Errorf("records %s/%s and %s/%s, want the same event of order %s twice",
			recs[0].ev.EventID, recs[0].ev.OrderID, recs[1].ev.EventID, recs[1].ev.OrderID, ok.OrderID)
	}
	if n := e.accepted(); n != 1 {
		t.Errorf("Accepted = %d, want 1", n)
	}
}

// A pending row without a payload is rebuilt from the (identical) retried
// request with the row's ids.
func TestPendingRowWithoutPayload(t *testing.T) {
	e := newEnv(t)
	hash, err := checkout.RequestHash([]byte(keyedBody))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.ExecContext(testCtx(t), e.db.Rebind(`INSERT INTO checkout_requests
		(idempotency_key, request_hash, order_id, event_id, status, created_at) VALUES (?, ?, ?, ?, 'pending', ?)`),
		"no-payload", hash, "ord_nopayload", "evt_nopayload", time.Now().UnixMilli()); err != nil {
		t.Fatal(err)
	}
	ok := e.post(keyedBody, "Idempotency-Key", "no-payload").accepted(t)
	if ok.OrderID != "ord_nopayload" || ok.Total != order.Money(24*2550+3*18000).String() {
		t.Errorf("answer %+v", ok)
	}
	if c := e.consume(1)[0]; c.ev.EventID != "evt_nopayload" {
		t.Errorf("event id %s, want evt_nopayload", c.ev.EventID)
	}
}

// A pending row whose stored event does not decode (corrupt data) is 500
// internal, and nothing is published: checkout does not make up another
// event for the key.
func TestPendingRowWithCorruptPayload(t *testing.T) {
	e := newEnv(t)
	hash, err := checkout.RequestHash([]byte(keyedBody))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.ExecContext(testCtx(t), e.db.Rebind(`INSERT INTO checkout_requests
		(idempotency_key, request_hash, order_id, event_id, status, payload, created_at) VALUES (?, ?, ?, ?, 'pending', ?, ?)`),
		"corrupt", hash, "ord_corrupt", "evt_corrupt", []byte{0, 0, 0, 0, 99, 1, 2}, time.Now().UnixMilli()); err != nil {
		t.Fatal(err)
	}
	r := e.post(keyedBody, "Idempotency-Key", "corrupt")
	if r.status != http.StatusInternalServerError || r.errorCode(t) != checkout.CodeInternal {
		t.Fatalf("retry of a row with a corrupt event: %d %s, want 500 internal", r.status, r.body)
	}
	if n := e.topicCount(); n != 0 {
		t.Errorf("%d records published for a corrupt stored event, want 0", n)
	}
}

// The broker refuses every produce: 503 broker_unavailable, the row stays
// pending; once the broker is back the same key succeeds with the same order.
func TestBrokerDownThenRecovers(t *testing.T) {
	testkafka.SkipIfReal(t, "the broker refusing every produce is a kfake Fault")
	storetest.Each(t, func(t *testing.T, db *store.DB) { testBrokerDownThenRecovers(t, db) })
}

func testBrokerDownThenRecovers(t *testing.T, db *store.DB) {
	e := newEnvOn(t, db, withProduceTimeout(300*time.Millisecond))
	fault := e.cluster.Fault(kfake.Fault{
		Keys:  []kmsg.Key{kmsg.Produce},
		Topic: order.TopicOrderCreated,
		Err:   kerr.NotEnoughReplicas,
		Count: -1,
	})
	r := e.post(keyedBody, "Idempotency-Key", "down")
	if r.status != http.StatusServiceUnavailable || r.errorCode(t) != checkout.CodeBrokerUnavailable {
		t.Fatalf("got %d %s, want 503 broker_unavailable", r.status, r.body)
	}
	if r.header.Get("Retry-After") == "" {
		t.Errorf("503 without Retry-After")
	}
	status, orderID := e.requestRow("down")
	if status != "pending" {
		t.Fatalf("row status %s after a failed produce, want pending", status)
	}
	// Without a key: 503 too, and nothing counts as accepted.
	if r := e.post(`{"lines":[{"stockCode":"22423","quantity":1}]}`); r.status != http.StatusServiceUnavailable {
		t.Fatalf("keyless: got %d %s, want 503", r.status, r.body)
	}
	if n := e.accepted(); n != 0 {
		t.Errorf("Accepted = %d while the broker is down, want 0", n)
	}
	if fault.Hits() == 0 {
		t.Errorf("the produce fault was never hit")
	}

	fault.Remove()
	var ok order.PlaceOrderResponse
	eventually(t, "the retried request to be accepted", func() bool {
		r := e.post(keyedBody, "Idempotency-Key", "down")
		if r.status == http.StatusServiceUnavailable {
			return false // the broker (or the earlier produce) still settling
		}
		ok = r.accepted(t)
		return true
	})
	if ok.OrderID != orderID {
		t.Errorf("after recovery order %s, want the pending row's %s", ok.OrderID, orderID)
	}
	if status, _ := e.requestRow("down"); status != "published" {
		t.Errorf("row status %s after recovery, want published", status)
	}
	// Every record of this key on the topic is the one event. (The keyless
	// request's event may also have landed late: its row then reads
	// published, which is the truth.)
	n := int(e.topicCount())
	var mine []consumed
	for _, c := range e.consume(n) {
		if c.ev.OrderID == orderID {
			mine = append(mine, c)
		}
	}
	if len(mine) == 0 {
		t.Fatalf("no record of order %s on the topic", orderID)
	}
	for _, c := range mine {
		if c.ev.EventID != mine[0].ev.EventID {
			t.Errorf("order %s published as two events %s and %s", orderID, mine[0].ev.EventID, c.ev.EventID)
		}
	}

	// The keyless request answered 503, but its record may have been
	// acknowledged later: once every produce has ended (Close waits for
	// them), its row is published exactly when its event is on the topic.
	ctx := testCtx(t)
	if err := e.svc.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var keylessStatus, keylessOrder string
	if err := e.db.QueryRowContext(ctx, `SELECT status, order_id FROM checkout_requests WHERE idempotency_key LIKE 'order:%'`).
		Scan(&keylessStatus, &keylessOrder); err != nil {
		t.Fatal(err)
	}
	onTopic := false
	n = int(e.topicCount())
	for _, c := range e.consume(n) {
		onTopic = onTopic || c.ev.OrderID == keylessOrder
	}
	if onTopic != (keylessStatus == "published") {
		t.Errorf("keyless order %s: row %s but on the topic: %v", keylessOrder, keylessStatus, onTopic)
	}
	if want := 1 + btoi(onTopic); e.accepted() != want {
		t.Errorf("Accepted = %d, want %d", e.accepted(), want)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Two checkout instances (two Services, each with its own in-process key
// lock) on one database race for one new key: one order, whatever the
// interleaving; the loser re-publishes the same event at worst.
func TestIdempotencyKeyAcrossInstances(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) { testIdempotencyKeyAcrossInstances(t, db) })
}

func testIdempotencyKeyAcrossInstances(t *testing.T, db *store.DB) {
	e := newEnvOn(t, db)
	other, err := checkout.New(testCtx(t), checkout.Config{DB: e.db, Serde: e.serde, Producer: e.producer})
	if err != nil {
		t.Fatal(err)
	}
	handlers := []http.Handler{e.handler, apiContract.wrap(t, other.Handler(), false)}
	const n = 6
	var (
		wg      sync.WaitGroup
		answers [n]response
	)
	for i := range n {
		wg.Go(func() {
			req := httptest.NewRequestWithContext(testCtx(t), http.MethodPost, "/orders", strings.NewReader(keyedBody))
			req.Header.Set("Idempotency-Key", "two-instances")
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			handlers[i%2].ServeHTTP(rec, req)
			answers[i] = response{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
		})
	}
	wg.Wait()
	first := answers[0].accepted(t)
	for i, a := range answers {
		if got := a.accepted(t); got != first {
			t.Errorf("answer %d: %+v, want %+v", i, got, first)
		}
	}
	c := int(e.topicCount())
	if c < 1 || c > n {
		t.Fatalf("%d records on the topic, want 1 to %d", c, n)
	}
	for _, r := range e.consume(c) {
		if r.ev.OrderID != first.OrderID {
			t.Errorf("record of order %s, want only %s", r.ev.OrderID, first.OrderID)
		}
	}
	if n := e.accepted(); n != 1 {
		t.Errorf("Accepted = %d, want 1", n)
	}
}

// The broker holds the produce request past ProduceTimeout and then
// acknowledges it: the client got 503, the row is marked published when the
// acknowledgement arrives, and the retry replays the 202; one record.
func TestLateAcknowledgementIsRecorded(t *testing.T) {
	testkafka.SkipIfReal(t, "holding a produce request is a kfake SleepControl")
	e := newEnv(t, withProduceTimeout(200*time.Millisecond))
	release := make(chan struct{})
	e.cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.DropControl()
		e.cluster.SleepControl(func() { <-release })
		return nil, nil, false // then handled normally
	})
	start := time.Now()
	r := e.post(keyedBody, "Idempotency-Key", "slow")
	if r.status != http.StatusServiceUnavailable || r.errorCode(t) != checkout.CodeBrokerUnavailable {
		t.Fatalf("got %d %s, want 503 broker_unavailable", r.status, r.body)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("503 after %v, want about the 200ms ProduceTimeout", d)
	}
	// A retry while the first produce is still in flight waits for it
	// (bounded), rather than producing a second record.
	if r := e.post(keyedBody, "Idempotency-Key", "slow"); r.status != http.StatusServiceUnavailable {
		t.Fatalf("retry during the stall: %d %s, want 503", r.status, r.body)
	}
	status, orderID := e.requestRow("slow")
	if status != "pending" {
		t.Fatalf("row %s during the stall, want pending", status)
	}
	close(release)
	if err := e.svc.Close(testCtx(t)); err != nil { // waits for the late acknowledgement
		t.Fatal(err)
	}
	if status, _ := e.requestRow("slow"); status != "published" {
		t.Fatalf("row %s after the late acknowledgement, want published", status)
	}
	again := e.post(keyedBody, "Idempotency-Key", "slow")
	if ok := again.accepted(t); ok.OrderID != orderID || again.header.Get(checkout.HeaderIdempotentReplayed) != "true" {
		t.Errorf("after the stall: %s (replayed %q), want the replayed order %s", again.body, again.header.Get(checkout.HeaderIdempotentReplayed), orderID)
	}
	if n := e.topicCount(); n != 1 {
		t.Errorf("%d records, want 1", n)
	}
	if got := e.metric("ordercast_checkout_produce_duration_seconds", "result", "timeout"); got != 1 {
		t.Errorf("produce_duration_seconds{result=timeout} count = %v, want 1", got)
	}
}

// A customer's 503 names the key the customer sent (not its scoped stored
// form), and a retry with it follows the same order.
func TestIdempotencyKeyOfCustomerIn503(t *testing.T) {
	testkafka.SkipIfReal(t, "the broker refusing every produce is a kfake Fault")
	idp := newIdP(t)
	e := newEnv(t, withAuth(idp.verifier(), false), withProduceTimeout(300*time.Millisecond))
	fault := e.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: order.TopicOrderCreated, Err: kerr.NotEnoughReplicas, Count: -1})
	h := append([]string{"Idempotency-Key", "down"}, bearer(idp.token("17850"))...)
	r := e.post(customerOrder, h...)
	if r.status != http.StatusServiceUnavailable || r.header.Get(checkout.HeaderIdempotencyKey) != "down" || !strings.Contains(string(r.body), `"idempotencyKey":"down"`) {
		t.Fatalf("got %d %s (Idempotency-Key %q), want 503 naming the key \"down\"", r.status, r.body, r.header.Get(checkout.HeaderIdempotencyKey))
	}
	_, pending := e.requestRow("customer\x1f17850\x1fdown")
	fault.Remove()
	eventually(t, "the retry with the named key to be accepted", func() bool {
		again := e.post(customerOrder, h...)
		if again.status == http.StatusServiceUnavailable {
			return false
		}
		if id := again.accepted(t).OrderID; id != pending {
			t.Fatalf("retry accepted order %s, want the pending %s", id, pending)
		}
		return true
	})
}
