package checkout_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/service/checkout"
)

// linesJSON returns n lines of one unit of 85123A.
func linesJSON(n int) string {
	var b strings.Builder
	b.WriteString(`{"lines":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"stockCode":"85123A","quantity":1}`)
	}
	b.WriteString(`]}`)
	return b.String()
}

func TestPlaceOrderRejections(t *testing.T) {
	e := newEnv(t)
	oneLine := `{"lines":[{"stockCode":"85123A","quantity":1}]}`
	big := `{"lines":[{"stockCode":"85123A","quantity":1}],"reference":"` + strings.Repeat("x", checkout.DefaultMaxBodyBytes) + `"}`
	cases := []struct {
		name     string
		method   string
		path     string
		body     string
		header   []string
		status   int
		code     string
		contains []string // in the error message
	}{
		{name: "empty body", body: ``, status: 400, code: order.ReasonMalformedJSON},
		{name: "truncated", body: `{"lines":[`, status: 400, code: order.ReasonMalformedJSON},
		{name: "trailing garbage", body: oneLine + ` x`, status: 400, code: order.ReasonMalformedJSON},
		{name: "two objects", body: oneLine + oneLine, status: 400, code: order.ReasonMalformedJSON},
		{name: "array", body: `[` + oneLine + `]`, status: 400, code: order.ReasonMalformedJSON},
		{name: "null", body: `null`, status: 400, code: order.ReasonMalformedJSON},
		{name: "quantity is a string", body: `{"lines":[{"stockCode":"85123A","quantity":"1"}]}`, status: 400, code: order.ReasonMalformedJSON,
			contains: []string{"lines[0].quantity must be an integer", "got a string"}},
		{name: "quantity is fractional", body: `{"lines":[{"stockCode":"85123A","quantity":1},{"stockCode":"85123A","quantity":1.5}]}`, status: 400, code: order.ReasonMalformedJSON,
			contains: []string{"lines[1].quantity must be an integer", "got the number 1.5"}},
		{name: "quantity beyond int64", body: `{"lines":[{"stockCode":"85123A","quantity":99999999999999999999}]}`, status: 400, code: order.ReasonMalformedJSON,
			contains: []string{"lines[0].quantity must be an integer"}},
		{name: "lines is an object", body: `{"lines":{"stockCode":"85123A","quantity":1}}`, status: 400, code: order.ReasonMalformedJSON,
			contains: []string{"lines must be an array", "got an object"}},
		{name: "line is a number", body: `{"lines":[1]}`, status: 400, code: order.ReasonMalformedJSON,
			contains: []string{"lines[0] must be an object", "got a number"}},
		{name: "stock code is a number", body: `{"lines":[{"stockCode":85123,"quantity":1}]}`, status: 400, code: order.ReasonMalformedJSON,
			contains: []string{"lines[0].stockCode must be a string or null", "got a number"}},
		{name: "customer id is a number", body: `{"customerId":17850,"lines":[{"stockCode":"85123A","quantity":1}]}`, status: 400, code: order.ReasonMalformedJSON,
			contains: []string{"customerId must be a string or null", "got a number"}},
		{name: "channel is a boolean", body: `{"channel":true,"lines":[{"stockCode":"85123A","quantity":1}]}`, status: 400, code: order.ReasonMalformedJSON,
			contains: []string{"channel must be a string or null", "got a boolean"}},
		{name: "customerID (wrong case)", body: `{"customerID":"17850","lines":[{"stockCode":"85123A","quantity":1}]}`, status: 400, code: order.ReasonUnknownField,
			contains: []string{`unknown field "customerID"`, `did you mean "customerId"?`}},
		{name: "customer_id", body: `{"customer_id":"17850","lines":[{"stockCode":"85123A","quantity":1}]}`, status: 400, code: order.ReasonUnknownField,
			contains: []string{`unknown field "customer_id"`, "customerId, country, reference, channel and lines"}},
		{name: "client total", body: `{"total":"0.01","lines":[{"stockCode":"85123A","quantity":1}]}`, status: 400, code: order.ReasonUnknownField,
			contains: []string{`unknown field "total"`}},
		{name: "client line price", body: `{"lines":[{"stockCode":"85123A","quantity":1},{"stockCode":"71053","quantity":2,"unitPriceMilli":1}]}`,
			status: 400, code: order.ReasonUnknownField, contains: []string{`unknown field "lines[1].unitPriceMilli"`, "prices come from the catalog"}},
		{name: "body too large", body: big, status: 413, code: order.ReasonBodyTooLarge},
		{name: "no lines key", body: `{"customerId":"17850"}`, status: 422, code: order.ReasonNoLines},
		{name: "empty lines", body: `{"lines":[]}`, status: 422, code: order.ReasonNoLines},
		{name: "too many lines", body: linesJSON(checkout.MaxLines + 1), status: 422, code: order.ReasonTooManyLines},
		{name: "zero quantity", body: `{"lines":[{"stockCode":"85123A","quantity":1},{"stockCode":"71053","quantity":0}]}`,
			status: 422, code: order.ReasonBadQuantity, contains: []string{"lines[1]", "quantity 0"}},
		{name: "negative quantity", body: `{"lines":[{"stockCode":"85123A","quantity":-3}]}`,
			status: 422, code: order.ReasonBadQuantity, contains: []string{"lines[0]", "-3"}},
		{name: "quantity too large", body: `{"lines":[{"stockCode":"85123A","quantity":1000001}]}`,
			status: 422, code: order.ReasonBadQuantity, contains: []string{"lines[0]", "1000001"}},
		{name: "unknown stock code", body: `{"lines":[{"stockCode":"85123A","quantity":1},{"stockCode":" nope9 ","quantity":1}]}`,
			status: 422, code: order.ReasonUnknownStockCode, contains: []string{"lines[1]", `"NOPE9"`}},
		{name: "duplicate customerId", body: `{"customerId":"a","customerId":"b","lines":[{"stockCode":"85123A","quantity":1}]}`,
			status: 400, code: order.ReasonMalformedJSON, contains: []string{`"customerId" appears more than once`}},
		{name: "duplicate line quantity", body: `{"lines":[{"stockCode":"85123A","quantity":1},{"stockCode":"71053","quantity":1,"quantity":9}]}`,
			status: 400, code: order.ReasonMalformedJSON, contains: []string{`"lines[1].quantity" appears more than once`}},
		{name: "missing quantity", body: `{"lines":[{"stockCode":"85123A"}]}`,
			status: 422, code: order.ReasonBadQuantity, contains: []string{"lines[0].quantity is required"}},
		{name: "null quantity", body: `{"lines":[{"stockCode":"85123A","quantity":1},{"stockCode":"71053","quantity":null}]}`,
			status: 422, code: order.ReasonBadQuantity, contains: []string{"lines[1].quantity is required"}},
		{name: "missing stock code", body: `{"lines":[{"quantity":1}]}`,
			status: 422, code: order.ReasonUnknownStockCode, contains: []string{"lines[0].stockCode is required"}},
		{name: "null stock code", body: `{"lines":[{"stockCode":null,"quantity":1}]}`,
			status: 422, code: order.ReasonUnknownStockCode, contains: []string{"lines[0].stockCode is required"}},
		{name: "country too long", body: `{"country":"` + strings.Repeat("é", 65) + `","lines":[{"stockCode":"85123A","quantity":1}]}`,
			status: 422, code: checkout.CodeBadCountry, contains: []string{"country is 65 characters long, more than 64"}},
		{name: "reference too long", body: `{"reference":"` + strings.Repeat("r", 129) + `","lines":[{"stockCode":"85123A","quantity":1}]}`,
			status: 422, code: checkout.CodeBadReference, contains: []string{"reference is 129 characters long, more than 128"}},
		{name: "empty stock code", body: `{"lines":[{"stockCode":"","quantity":1}]}`, status: 422, code: order.ReasonUnknownStockCode},
		{name: "empty customer id", body: `{"customerId":"","lines":[{"stockCode":"85123A","quantity":1}]}`, status: 422, code: order.ReasonBadCustomerID},
		{name: "customer id with a space", body: `{"customerId":"17 850","lines":[{"stockCode":"85123A","quantity":1}]}`, status: 422, code: order.ReasonBadCustomerID},
		{name: "customer id not ASCII", body: `{"customerId":"jürgen","lines":[{"stockCode":"85123A","quantity":1}]}`, status: 422, code: order.ReasonBadCustomerID},
		{name: "customer id too long", body: `{"customerId":"` + strings.Repeat("a", 65) + `","lines":[{"stockCode":"85123A","quantity":1}]}`, status: 422, code: order.ReasonBadCustomerID},
		{name: "empty channel", body: `{"channel":"","lines":[{"stockCode":"85123A","quantity":1}]}`, status: 422, code: order.ReasonBadChannel,
			contains: []string{`channel ""`, "omit it when unknown"}},
		{name: "channel upper case", body: `{"channel":"Web","lines":[{"stockCode":"85123A","quantity":1}]}`, status: 422, code: order.ReasonBadChannel,
			contains: []string{`channel "Web" must be 1 to 32 characters of a-z`}},
		{name: "channel with a space", body: `{"channel":"mobile app","lines":[{"stockCode":"85123A","quantity":1}]}`, status: 422, code: order.ReasonBadChannel},
		{name: "channel starting with a digit", body: `{"channel":"1web","lines":[{"stockCode":"85123A","quantity":1}]}`, status: 422, code: order.ReasonBadChannel},
		{name: "channel too long", body: `{"channel":"` + strings.Repeat("a", 33) + `","lines":[{"stockCode":"85123A","quantity":1}]}`, status: 422, code: order.ReasonBadChannel},
		{name: "line total overflow", body: `{"lines":[{"stockCode":"HUGE","quantity":2}]}`, status: 422, code: order.ReasonAmountOverflow},
		{name: "order total overflow", body: `{"lines":[{"stockCode":"HUGE","quantity":1},{"stockCode":"HUGE","quantity":1}]}`, status: 422, code: order.ReasonAmountOverflow},
		{name: "idempotency key too long", body: oneLine, header: []string{"Idempotency-Key", strings.Repeat("k", 201)}, status: 400, code: checkout.CodeBadIdempotencyKey},
		{name: "idempotency key empty", body: oneLine, header: []string{"Idempotency-Key", ""}, status: 400, code: checkout.CodeBadIdempotencyKey},
		{name: "idempotency key repeated", body: oneLine, header: []string{"Idempotency-Key", "a", "Idempotency-Key", "b"}, status: 400, code: checkout.CodeBadIdempotencyKey},
		{name: "idempotency key reserved prefix", body: oneLine, header: []string{"Idempotency-Key", "order:ord_1"}, status: 400, code: checkout.CodeBadIdempotencyKey},
		{name: "GET /orders", method: "GET", path: "/orders", status: 405, code: checkout.CodeMethodNotAllowed},
		{name: "PUT /orders", method: "PUT", path: "/orders", body: oneLine, status: 405, code: checkout.CodeMethodNotAllowed},
		{name: "DELETE /orders/{id}", method: "DELETE", path: "/orders/ord_1", status: 405, code: checkout.CodeMethodNotAllowed},
		{name: "POST /orders/{id}", method: "POST", path: "/orders/ord_1", body: oneLine, status: 405, code: checkout.CodeMethodNotAllowed},
		{name: "unknown path", method: "GET", path: "/nope", status: 404, code: checkout.CodeNotFound},
		{name: "unknown order", method: "GET", path: "/orders/ord_unknown", status: 404, code: checkout.CodeNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			method, path := tc.method, tc.path
			if method == "" {
				method, path = http.MethodPost, "/orders"
			}
			e.t = t
			r := e.do(method, path, tc.body, tc.header...)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d; body %s", r.status, tc.status, r.body)
			}
			if code := r.errorCode(t); code != tc.code {
				t.Fatalf("code %q, want %q; body %s", code, tc.code, r.body)
			}
			var msg order.ErrorResponse
			_ = json.Unmarshal(r.body, &msg)
			for _, s := range tc.contains {
				if !strings.Contains(msg.Error, s) {
					t.Errorf("message %s does not contain %q", r.body, s)
				}
			}
			// Messages speak JSON, never Go.
			for _, leak := range []string{"Go ", "struct", "int64", "[]", "order.", "checkout.", "placeBody", "json:"} {
				if strings.Contains(msg.Error, leak) {
					t.Errorf("message %s leaks %q", r.body, leak)
				}
			}
			if r.status == 405 && r.header.Get("Allow") == "" {
				t.Errorf("405 without an Allow header")
			}
		})
	}
	e.t = t
	if n := e.topicCount(); n != 0 {
		t.Errorf("%d records on the topic after rejections only, want 0", n)
	}
	if n := e.accepted(); n != 0 {
		t.Errorf("Accepted = %d after rejections only, want 0", n)
	}
	if got := e.metric("ordercast_checkout_orders_rejected_total", "code", order.ReasonBadQuantity); got != 5 {
		t.Errorf("rejected_total{code=bad_quantity} = %v, want 5", got)
	}
	if got := e.metric("ordercast_checkout_orders_rejected_total", "code", checkout.CodeNotFound); got != 0 {
		t.Errorf("rejected_total{code=not_found} = %v: a GET is not an order", got)
	}
	if got := e.metric("ordercast_checkout_http_requests_total", "route", "POST /orders", "code", "422"); got == 0 {
		t.Errorf("http_requests_total{route=POST /orders,code=422} = 0")
	}
}

// A body over the limit is refused also when its length is not announced.
func TestPlaceOrderBodyLimitWithoutContentLength(t *testing.T) {
	e := newEnv(t, withMaxBody(64))
	body := `{"lines":[{"stockCode":"85123A","quantity":1}],"reference":"` + strings.Repeat("x", 64) + `"}`
	req := httptest.NewRequestWithContext(testCtx(t), http.MethodPost, "/orders", struct{ *strings.Reader }{strings.NewReader(body)})
	req.ContentLength = -1
	req.Header.Set("Content-Type", "application/json")
	r := e.serve(req)
	if r.status != http.StatusRequestEntityTooLarge || r.errorCode(t) != order.ReasonBodyTooLarge {
		t.Fatalf("got %d %s, want 413 body_too_large", r.status, r.body)
	}
}

func TestPlaceOrderAccepted(t *testing.T) {
	e := newEnv(t)
	// Lower-case and padded stock codes, a channel, no Content-Type.
	body := `{
		"customerId": "17850", "country": "United Kingdom", "reference": "536365", "channel": "web",
		"lines": [
			{"stockCode": " 85123a", "quantity": 6},
			{"stockCode": "71053", "quantity": 2},
			{"stockCode": "FREE", "quantity": 1}
		]}`
	req := httptest.NewRequestWithContext(testCtx(t), http.MethodPost, "/orders", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	before := time.Now().UTC().Truncate(time.Millisecond)
	r := e.serve(req)
	ok := r.accepted(t)
	if !strings.HasPrefix(ok.OrderID, "ord_") {
		t.Errorf("order id %q lacks the ord_ prefix", ok.OrderID)
	}
	const wantTotal = 6*2550 + 2*3390 // 22080
	if ok.Total != order.Money(wantTotal).String() {
		t.Errorf("total %q, want %s", ok.Total, order.Money(wantTotal))
	}
	if loc := r.header.Get("Location"); loc != "/orders/"+ok.OrderID {
		t.Errorf("Location %q", loc)
	}

	recs := e.consume(1)
	c := recs[0]
	if c.key != "17850" {
		t.Errorf("record key %q, want the customer id", c.key)
	}
	ev := c.ev
	if ev.OrderID != ok.OrderID || !strings.HasPrefix(ev.EventID, "evt_") {
		t.Errorf("event ids %q/%q, want order %q and an evt_ id", ev.OrderID, ev.EventID, ok.OrderID)
	}
	if ev.CustomerID != "17850" || ev.Country != "United Kingdom" || ev.Reference != "536365" || ev.Channel != "web" {
		t.Errorf("event header fields %+v", ev.Order)
	}
	want := []order.Line{
		{StockCode: "85123A", Description: "WHITE HANGING HEART T-LIGHT HOLDER", Quantity: 6, UnitPrice: 2550, LineTotal: 15300},
		{StockCode: "71053", Description: "WHITE METAL LANTERN", Quantity: 2, UnitPrice: 3390, LineTotal: 6780},
		{StockCode: "FREE", Description: "free sample", Quantity: 1, UnitPrice: 0, LineTotal: 0},
	}
	if len(ev.Lines) != len(want) {
		t.Fatalf("lines %+v, want %+v", ev.Lines, want)
	}
	for i := range want {
		if ev.Lines[i] != want[i] {
			t.Errorf("line %d = %+v, want %+v", i, ev.Lines[i], want[i])
		}
	}
	if ev.Total != wantTotal {
		t.Errorf("event total %d, want %d", ev.Total, wantTotal)
	}
	if ev.CreatedAt.Location() != time.UTC || ev.CreatedAt.Nanosecond()%int(time.Millisecond) != 0 ||
		ev.CreatedAt.Before(before) || ev.CreatedAt.After(time.Now()) {
		t.Errorf("createdAt %v: want now, UTC, millisecond precision", ev.CreatedAt)
	}

	if status, id := e.requestRow("order:" + ok.OrderID); status != "published" || id != ok.OrderID {
		t.Errorf("keyless request row: %s %s, want published %s", status, id, ok.OrderID)
	}
	if n := e.accepted(); n != 1 {
		t.Errorf("Accepted = %d, want 1", n)
	}
	if got := e.metric("ordercast_checkout_orders_accepted_total"); got != 1 {
		t.Errorf("orders_accepted_total = %v, want 1", got)
	}
}

// Prices come from the catalog only: a client that sends one is told so,
// and nothing is ordered (before, the price was silently ignored).
func TestPlaceOrderRefusesClientPrice(t *testing.T) {
	e := newEnv(t)
	for _, body := range []string{
		`{"customerId":"17850","lines":[{"stockCode":"85123A","quantity":6,"unitPriceMilli":1}]}`,
		`{"customerId":"17850","lines":[{"stockCode":"85123A","quantity":6,"unitPrice":"0.01"}]}`,
		`{"customerId":"17850","total":"0.01","lines":[{"stockCode":"85123A","quantity":6}]}`,
	} {
		r := e.post(body, "Idempotency-Key", "price-1")
		if r.status != http.StatusBadRequest || r.errorCode(t) != order.ReasonUnknownField {
			t.Fatalf("%s: %d %s, want 400 unknown_field", body, r.status, r.body)
		}
	}
	if n := e.topicCount(); n != 0 {
		t.Errorf("%d records published for refused requests", n)
	}
	var rows int
	if err := e.db.QueryRowContext(testCtx(t), `SELECT COUNT(*) FROM checkout_requests`).Scan(&rows); err != nil || rows != 0 {
		t.Errorf("refused requests left %d checkout_requests rows (%v)", rows, err)
	}
	// The same key then works for the right body.
	if ok := e.post(`{"customerId":"17850","lines":[{"stockCode":"85123A","quantity":6}]}`, "Idempotency-Key", "price-1").accepted(t); ok.Total != "15.300" {
		t.Errorf("total %s, want the catalog's 15.300", ok.Total)
	}
}

func TestPlaceOrderGuestKeyedByOrderID(t *testing.T) {
	e := newEnv(t)
	ok := e.post(`{"lines":[{"stockCode":"22423","quantity":1}]}`).accepted(t)
	c := e.consume(1)[0]
	if c.key != ok.OrderID || c.ev.CustomerID != "" {
		t.Errorf("guest record key %q customer %q, want key %q", c.key, c.ev.CustomerID, ok.OrderID)
	}
	// A customerId of null is a guest too.
	ok2 := e.post(`{"customerId":null,"lines":[{"stockCode":"22423","quantity":1}]}`).accepted(t)
	if ok2.OrderID == ok.OrderID {
		t.Errorf("two requests without a key got the same order id")
	}
}

func TestPlaceOrderMaxLines(t *testing.T) {
	e := newEnv(t)
	ok := e.post(linesJSON(checkout.MaxLines)).accepted(t)
	if want := order.Money(checkout.MaxLines * 2550).String(); ok.Total != want {
		t.Errorf("total %s, want %s", ok.Total, want)
	}
	if n := len(e.consume(1)[0].ev.Lines); n != checkout.MaxLines {
		t.Errorf("event has %d lines, want %d", n, checkout.MaxLines)
	}
}

func TestReloadCatalog(t *testing.T) {
	e := newEnv(t)
	body := `{"lines":[{"stockCode":"22752","quantity":1}]}`
	if r := e.post(body); r.status != 422 || r.errorCode(t) != order.ReasonUnknownStockCode {
		t.Fatalf("before reload: %d %s", r.status, r.body)
	}
	ctx := testCtx(t)
	if _, err := e.db.ExecContext(ctx, e.db.Rebind(`INSERT INTO catalog (stock_code, description, unit_price_milli) VALUES (?, ?, ?)`),
		"22752", "SET 7 BABUSHKA NESTING BOXES", 7650); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.ReloadCatalog(ctx); err != nil {
		t.Fatal(err)
	}
	if ok := e.post(body).accepted(t); ok.Total != "7.650" {
		t.Errorf("total %s, want 7.650", ok.Total)
	}
	if n := e.svc.CatalogSize(); n != len(testCatalog)+1 {
		t.Errorf("CatalogSize = %d, want %d", n, len(testCatalog)+1)
	}
}

func TestNewConfigErrors(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	full := checkout.Config{DB: e.db, Serde: e.serde, Producer: e.producer}
	cases := []struct {
		name string
		edit func(*checkout.Config)
		want error
	}{
		{"no db", func(c *checkout.Config) { c.DB = nil }, checkout.ErrNoDB},
		{"no serde", func(c *checkout.Config) { c.Serde = nil }, checkout.ErrNoSerde},
		{"no producer", func(c *checkout.Config) { c.Producer = nil }, checkout.ErrNoProducer},
		{"negative timeout", func(c *checkout.Config) { c.ProduceTimeout = -time.Second }, nil},
		{"negative body limit", func(c *checkout.Config) { c.MaxBodyBytes = -1 }, nil},
		{"negative batch", func(c *checkout.Config) { c.MaxBatch = -1 }, nil},
		{"batch over a statement's parameters", func(c *checkout.Config) { c.MaxBatch = checkout.MaxMaxBatch + 1 }, nil},
		{"metrics registered twice", func(c *checkout.Config) { c.Registerer = e.reg }, nil},
	}
	for _, tc := range cases {
		cfg := full
		tc.edit(&cfg)
		_, err := checkout.New(ctx, cfg)
		if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: New error %v, want %v", tc.name, err, cmpErr(tc.want))
		}
	}
	// A second Service without a Registerer works.
	if _, err := checkout.New(ctx, full); err != nil {
		t.Errorf("New without Registerer: %v", err)
	}
}

func cmpErr(err error) string {
	if err == nil {
		return "an error"
	}
	return fmt.Sprint(err)
}

// Close returns at once when nothing is in flight.
func TestCloseIdle(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(testCtx(t), time.Second)
	defer cancel()
	if err := e.svc.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// Over a real HTTP server: JSON with a charset parameter is accepted.
func TestOverHTTP(t *testing.T) {
	e := newEnv(t)
	srv := httptest.NewServer(e.handler)
	defer srv.Close()
	ctx := testCtx(t)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/orders",
		strings.NewReader(`{"customerId":"17850","lines":[{"stockCode":"85123A","quantity":6}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json; charset=UTF-8")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var ok order.PlaceOrderResponse
	err = json.NewDecoder(resp.Body).Decode(&ok)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusAccepted || ok.Total != "15.300" {
		t.Fatalf("POST: %d %+v %v", resp.StatusCode, ok, err)
	}
	greq, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+resp.Header.Get("Location"), nil)
	gresp, err := srv.Client().Do(greq)
	if err != nil {
		t.Fatal(err)
	}
	var v checkout.OrderView
	err = json.NewDecoder(gresp.Body).Decode(&v)
	gresp.Body.Close()
	if err != nil || gresp.StatusCode != http.StatusOK || v.OrderID != ok.OrderID || v.Status != checkout.StageAccepted {
		t.Fatalf("GET: %d %+v %v", gresp.StatusCode, v, err)
	}
}
