package checkout_test

import (
	"net/http"
	"slices"
	"sort"
	"testing"
)

// The HTTP metrics' route label takes a fixed set of values whatever the
// request: the two API routes, else "other"; never a raw path or a
// ServeMux catch-all pattern.
func TestHTTPMetricRouteLabels(t *testing.T) {
	e := newEnv(t)
	ok := e.post(`{"lines":[{"stockCode":"85123A","quantity":1}]}`).accepted(t)
	for _, req := range []struct{ method, path, body string }{
		{http.MethodPost, "/orders", `{"lines":[]}`},
		{http.MethodGet, "/orders/" + ok.OrderID, ""},
		{http.MethodHead, "/orders/" + ok.OrderID, ""},
		{http.MethodGet, "/orders/ord_unknown", ""},
		{http.MethodGet, "/orders", ""},
		{http.MethodPut, "/orders", `{}`},
		{http.MethodDelete, "/orders/" + ok.OrderID, ""},
		{http.MethodGet, "/orders/", ""},
		{http.MethodGet, "/orders/a/b", ""},
		{http.MethodGet, "/nope/" + ok.OrderID, ""},
		{http.MethodGet, "/", ""},
		{"BREW", "/orders", ""},
	} {
		e.do(req.method, req.path, req.body)
	}
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "ordercast_checkout_http_requests_total", "ordercast_checkout_http_request_duration_seconds":
		default:
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "route" {
					seen[lp.GetValue()] = true
				}
			}
		}
	}
	var got []string
	for r := range seen {
		got = append(got, r)
	}
	sort.Strings(got)
	if want := []string{"GET /orders/{id}", "POST /orders", "other"}; !slices.Equal(got, want) {
		t.Fatalf("route labels %q, want exactly %q", got, want)
	}
	if n := e.metric("ordercast_checkout_http_requests_total", "route", "GET /orders/{id}", "method", "HEAD", "code", "200"); n != 1 {
		t.Errorf("HEAD /orders/{id} counted %v times under GET /orders/{id}, want 1", n)
	}
	if n := e.metric("ordercast_checkout_http_requests_total", "route", "other", "method", "PUT", "code", "405"); n != 1 {
		t.Errorf("PUT /orders counted %v times as other/405, want 1", n)
	}
	if n := e.metric("ordercast_checkout_http_requests_total", "route", "other", "method", "other", "code", "405"); n != 1 {
		t.Errorf("BREW /orders counted %v times as other/other/405, want 1", n)
	}
}

// TestDBWriteDurationSteps: each new order is timed once at its claim (its
// Idempotency-Key row) and once at its mark (published after the
// acknowledgement); a repeated key is claimed again (the stored answer is
// found) but not marked; the histograms count requests, not batches.
func TestDBWriteDurationSteps(t *testing.T) {
	e := newEnv(t)
	const name = "ordercast_checkout_db_write_duration_seconds"
	body := `{"lines":[{"stockCode":"85123A","quantity":1}]}`
	e.post(body, "Idempotency-Key", "steps-1").accepted(t)
	e.post(body, "Idempotency-Key", "steps-2").accepted(t)
	if c, m := e.metric(name, "step", "claim"), e.metric(name, "step", "mark"); c != 2 || m != 2 {
		t.Fatalf("after 2 new orders: %v claims and %v marks timed, want 2 and 2", c, m)
	}
	e.post(body, "Idempotency-Key", "steps-1").accepted(t) // the stored answer
	if c, m := e.metric(name, "step", "claim"), e.metric(name, "step", "mark"); c != 3 || m != 2 {
		t.Fatalf("after a repeated key: %v claims and %v marks timed, want 3 and 2", c, m)
	}
}
