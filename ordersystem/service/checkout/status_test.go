package checkout_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ordercast/ordercast/ordersystem/service/checkout"
	"github.com/ordercast/ordercast/ordersystem/store"
	"github.com/ordercast/ordercast/ordersystem/store/storetest"
)

func (e *testEnv) getOrder(id string) (checkout.OrderView, response) {
	e.t.Helper()
	r := e.do(http.MethodGet, "/orders/"+id, "")
	var v checkout.OrderView
	if r.status == http.StatusOK {
		if err := json.Unmarshal(r.body, &v); err != nil {
			e.t.Fatalf("GET body %s: %v", r.body, err)
		}
	}
	return v, r
}

func (e *testEnv) addStage(orderID, kind, detail string, at time.Time) {
	e.t.Helper()
	if _, err := e.db.ExecContext(testCtx(e.t), e.db.Rebind(`INSERT INTO order_status (order_id, kind, detail, at) VALUES (?, ?, ?, ?)`),
		orderID, kind, detail, at.UnixMilli()); err != nil {
		e.t.Fatalf("insert order_status: %v", err)
	}
}

func kinds(h []checkout.StageEntry) []string {
	var out []string
	for _, e := range h {
		out = append(out, e.Kind)
	}
	return out
}

// GET /orders/{id} on every available dialect (PostgreSQL when
// ORDERCAST_TEST_POSTGRES is set).
func TestGetOrder(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) { testGetOrder(t, db) })
}

func testGetOrder(t *testing.T, db *store.DB) {
	e := newEnvOn(t, db)
	ctx := testCtx(t)
	ok := e.post(keyedBody, "Idempotency-Key", "get-1").accepted(t)
	id := ok.OrderID

	v, r := e.getOrder(id)
	if r.status != http.StatusOK {
		t.Fatalf("GET: %d %s", r.status, r.body)
	}
	if v.OrderID != id || v.Status != checkout.StageAccepted || v.CustomerID != "12583" || v.Reference != "536370" ||
		v.Total != ok.Total || v.TotalMilli == nil || v.TotalMilli.String() != ok.Total || v.Notified ||
		!slices.Equal(kinds(v.History), []string{"accepted"}) || len(v.Notifications) != 0 {
		t.Errorf("freshly accepted: %s", r.body)
	}
	// The arrays are [] rather than null.
	if !strings.Contains(string(r.body), `"notifications":[]`) {
		t.Errorf("notifications not an empty array: %s", r.body)
	}

	t0 := time.Now().Add(time.Second).Truncate(time.Millisecond)
	// The orders service stored the order (with its own copy of the total).
	if _, err := db.ExecContext(ctx, db.Rebind(`INSERT INTO orders
		(order_id, customer_id, country, total_milli, line_count, reference, created_at, stored_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`), id, "12583", "France", 115200, 2, "536370", t0.UnixMilli(), t0.UnixMilli()); err != nil {
		t.Fatal(err)
	}
	e.addStage(id, checkout.StageCreated, "", t0)
	// Payment and notification rows arrive out of order, and at the same
	// millisecond as the creation.
	e.addStage(id, checkout.StagePaid, "WALLET 115.200", t0)
	e.addStage(id, checkout.StageNotified, "order_confirmed", t0.Add(time.Millisecond))
	for i, k := range []string{"payment_confirmed", "order_confirmed"} {
		if _, err := db.ExecContext(ctx, db.Rebind(`INSERT INTO notifications (notification_id, order_id, kind, customer_id, body, created_at)
			VALUES (?, ?, ?, ?, ?, ?)`), "ntf_"+k, id, k, "12583", "hello", t0.Add(time.Duration(2-i)*time.Second).UnixMilli()); err != nil {
			t.Fatal(err)
		}
	}
	v, r = e.getOrder(id)
	if v.Status != checkout.StagePaid || !v.Notified ||
		!slices.Equal(kinds(v.History), []string{"accepted", "created", "paid", "notified"}) ||
		!slices.Equal(v.Notifications, []string{"order_confirmed", "payment_confirmed"}) || v.Total != "115.200" || v.Country != "France" {
		t.Errorf("paid: %s", r.body)
	}
	if h := v.History[2]; h.Detail != "WALLET 115.200" || !h.At.Equal(t0) {
		t.Errorf("paid entry %+v, want detail and at %v", h, t0)
	}

	e.addStage(id, checkout.StageShipmentRequested, "shp_1", t0.Add(time.Second))
	if v, r = e.getOrder(id); v.Status != checkout.StageShipmentRequested {
		t.Errorf("shipped: %s", r.body)
	}

	// A refused payment.
	ok2 := e.post(`{"customerId":"99999","lines":[{"stockCode":"71053","quantity":1}]}`).accepted(t)
	e.addStage(ok2.OrderID, checkout.StageCreated, "", t0)
	e.addStage(ok2.OrderID, checkout.StagePaymentRefused, "insufficient credits", t0.Add(time.Millisecond))
	e.addStage(ok2.OrderID, "something_new", "", t0.Add(2*time.Millisecond))
	if v, r := e.getOrder(ok2.OrderID); v.Status != checkout.StagePaymentRefused ||
		!slices.Equal(kinds(v.History), []string{"accepted", "created", "payment_refused", "something_new"}) || v.CustomerID != "99999" {
		t.Errorf("refused: %s", r.body)
	}

	// An order only the orders service knows (checkout's row is gone).
	if _, err := db.ExecContext(ctx, db.Rebind(`INSERT INTO orders
		(order_id, customer_id, country, total_milli, line_count, reference, created_at, stored_at)
		VALUES (?, NULL, NULL, ?, ?, NULL, ?, ?)`), "ord_elsewhere", 2550, 1, t0.UnixMilli(), t0.UnixMilli()); err != nil {
		t.Fatal(err)
	}
	if v, r := e.getOrder("ord_elsewhere"); r.status != 200 || v.Status != checkout.StageAccepted || v.Total != "2.550" || v.CustomerID != "" {
		t.Errorf("orders-only: %d %s", r.status, r.body)
	}

	for _, id := range []string{"ord_unknown", strings.Repeat("x", 300), "order:" + ok2.OrderID} {
		if _, r := e.getOrder(id); r.status != http.StatusNotFound || r.errorCode(t) != checkout.CodeNotFound {
			t.Errorf("GET %.20s: %d %s, want 404 not_found", id, r.status, r.body)
		}
	}
	// HEAD is GET without a body.
	if r := e.do(http.MethodHead, "/orders/"+id, ""); r.status != http.StatusOK {
		t.Errorf("HEAD: %d", r.status)
	}
	if got := e.metric("ordercast_checkout_http_requests_total", "route", "GET /orders/{id}", "method", "GET", "code", "404"); got != 3 {
		t.Errorf("http_requests_total{GET /orders/{id},404} = %v, want 3", got)
	}
}

func TestOrderNotFoundError(t *testing.T) {
	e := newEnv(t)
	if _, err := e.svc.Order(testCtx(t), "ord_nope"); !errors.Is(err, checkout.ErrOrderNotFound) {
		t.Errorf("Order: %v, want ErrOrderNotFound", err)
	}
	if r := e.do(http.MethodHead, "/orders/ord_nope", ""); r.status != http.StatusNotFound {
		t.Errorf("HEAD of an unknown order: %d, want 404", r.status)
	}
}

// GET /orders/{id} when the database fails: 503 database_unavailable with
// Retry-After, not a 404 or a 500.
func TestGetOrderDatabaseFails(t *testing.T) {
	e := newEnv(t)
	id := e.post(`{"lines":[{"stockCode":"85123A","quantity":1}]}`).accepted(t).OrderID
	if err := e.db.Close(); err != nil {
		t.Fatal(err)
	}
	r := e.do(http.MethodGet, "/orders/"+id, "")
	if r.status != http.StatusServiceUnavailable || r.errorCode(t) != checkout.CodeDatabaseUnavailable || r.header.Get("Retry-After") == "" {
		t.Errorf("GET with the database closed: %d %s (Retry-After %q), want 503 database_unavailable with Retry-After", r.status, r.body, r.header.Get("Retry-After"))
	}
}

// The history is in time order, checkout's "accepted" included: the orders
// service may store the order before checkout records the broker's
// The history is in causal order, whatever the services'
// clocks say: paid stamped before accepted and created still comes after
// them; the unranked notified follows the pipeline's stages.
func TestGetOrderHistoryCausalOrder(t *testing.T) {
	e := newEnv(t)
	ok := e.post(`{"customerId":"17850","lines":[{"stockCode":"85123A","quantity":1}]}`).accepted(t)
	var published int64
	if err := e.db.QueryRowContext(testCtx(t), e.db.Rebind(`SELECT published_at FROM checkout_requests WHERE order_id = ?`), ok.OrderID).Scan(&published); err != nil {
		t.Fatal(err)
	}
	pub := time.UnixMilli(published).UTC()
	e.addStage(ok.OrderID, checkout.StageShipmentRequested, "", pub.Add(-1*time.Millisecond))
	e.addStage(ok.OrderID, checkout.StagePaid, "CARD 2.550", pub.Add(-7*time.Millisecond)) // payments' clock runs early
	e.addStage(ok.OrderID, checkout.StageCreated, "", pub.Add(-5*time.Millisecond))
	e.addStage(ok.OrderID, checkout.StageNotified, "order_received", pub.Add(-9*time.Millisecond))
	v, r := e.getOrder(ok.OrderID)
	if want := []string{"accepted", "created", "paid", "shipment_requested", "notified"}; !slices.Equal(kinds(v.History), want) {
		t.Fatalf("history %v, want %v: %s", kinds(v.History), want, r.body)
	}
	if v.Status != checkout.StageShipmentRequested {
		t.Errorf("status %s, want shipment_requested", v.Status)
	}
}

// GET shows the channel when the order has one: from checkout's own event
// until the orders service stored the order, then from its row.
func TestGetOrderShowsChannel(t *testing.T) {
	e := newEnv(t)
	ok := e.post(`{"channel":"api","lines":[{"stockCode":"85123A","quantity":1}]}`).accepted(t)
	if v, r := e.getOrder(ok.OrderID); v.Channel != "api" {
		t.Errorf("before the orders service: %s, want channel api", r.body)
	}
	if _, err := e.db.ExecContext(testCtx(t), e.db.Rebind(`INSERT INTO orders
		(order_id, customer_id, country, total_milli, line_count, reference, created_at, stored_at, channel)
		VALUES (?, NULL, NULL, 2550, 1, NULL, 1, 1, 'api')`), ok.OrderID); err != nil {
		t.Fatal(err)
	}
	if v, r := e.getOrder(ok.OrderID); v.Channel != "api" {
		t.Errorf("stored: %s, want channel api", r.body)
	}
	none := e.post(`{"lines":[{"stockCode":"85123A","quantity":1}]}`).accepted(t)
	if _, r := e.getOrder(none.OrderID); strings.Contains(string(r.body), `"channel"`) {
		t.Errorf("an order without channel shows one: %s", r.body)
	}
}
