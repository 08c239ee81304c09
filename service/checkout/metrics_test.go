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
