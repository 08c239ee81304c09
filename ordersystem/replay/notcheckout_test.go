package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The URL is not checkout's POST /orders (a schema registry answers
// POST /orders with a plain 404; checkout itself answers a path outside its
// API, such as --url http://host/bogus/path or /healthz, with a 404 and its
// own JSON error body, and a wrong method with 405): Run stops at the first
// such answer and says the URL does not look like checkout's POST /orders,
// instead of counting every sale as rejected.
func TestRunStopsWhenNotCheckout(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		want   string // in the error, besides the URL and the status
	}{
		{"registry 404", http.StatusNotFound, `{"error_code":404,"message":"HTTP 404 Not Found"}`, `body "{\"error_code\":404`},
		{"plain 404", http.StatusNotFound, "404 page not found\n", `body "404 page not found"`},
		{"405", http.StatusMethodNotAllowed, "Method Not Allowed\n", `body "Method Not Allowed"`},
		// What checkout answers for --url http://127.0.0.1:8080/bogus/path.
		{"checkout unknown path", http.StatusNotFound, `{"code":"not_found","error":"no such resource: POST /bogus/path/orders"}`,
			"code not_found: no such resource: POST /bogus/path/orders"},
		{"checkout 405", http.StatusMethodNotAllowed, `{"code":"method_not_allowed","error":"method POST not allowed"}`,
			"code method_not_allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var requests atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				requests.Add(1)
				if strings.HasPrefix(tc.body, "{") {
					w.Header().Set("Content-Type", "application/json")
				}
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			var progress bytes.Buffer
			sum, err := Run(context.Background(), readFile(t, oneDayFile), Options{BaseURL: srv.URL, Concurrency: 2, MaxAttempts: 2,
				Progress: &progress, ProgressInterval: time.Hour})
			var nc *NotCheckoutError
			if !errors.As(err, &nc) {
				t.Fatalf("err = %v, want a *NotCheckoutError; summary:\n%s", err, sum)
			}
			if out := strings.TrimSpace(progress.String()); !strings.HasSuffix(out, "stopped") {
				t.Errorf("final progress line of a stopped run does not say stopped: %q", out)
			}
			checkInvariant(t, sum)
			if n := requests.Load(); n > 4 {
				t.Errorf("%d requests sent, want the run stopped at the first answers", n)
			}
			if sum.RejectedTotal() != 0 || sum.Stopped != StoppedNotCheckout || sum.Unfinished != sum.Sales {
				t.Errorf("rejected %v, stopped %q, unfinished %d of %d", sum.Rejected, sum.Stopped, sum.Unfinished, sum.Sales)
			}
			if nc.Status != tc.status || nc.URL != srv.URL+"/orders" {
				t.Errorf("NotCheckoutError{URL: %q, Status: %d}, want %q and %d", nc.URL, nc.Status, srv.URL+"/orders", tc.status)
			}
			for _, want := range []string{srv.URL + "/orders", "does not look like checkout's POST /orders", http.StatusText(tc.status), tc.want} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
		})
	}
}

// A 4xx other than 404 and 405, with checkout's JSON error body, is a
// rejection like any other: the run goes on.
func TestRunCheckoutRejectionGoesOn(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnprocessableEntity)
		_, _ = w.Write([]byte(`{"code":"unknown_stock_code","error":"no such product"}`))
	}))
	defer srv.Close()
	sum, err := Run(context.Background(), readFile(t, oneDayFile), Options{BaseURL: srv.URL, Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Rejected["unknown_stock_code"] != sum.Sales || sum.Unfinished != 0 {
		t.Errorf("rejected %v, unfinished %d of %d", sum.Rejected, sum.Unfinished, sum.Sales)
	}
}

// A 404 with checkout's JSON error body stops the run even after earlier
// sales were accepted (checkout's POST /orders never answers 404): the
// accepted ones stay accepted, the rest are Unfinished, none rejected.
func TestRunNotCheckoutAfterAccepted(t *testing.T) {
	const accepted = 5
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		if n <= accepted {
			w.WriteHeader(http.StatusAccepted)
			_, _ = fmt.Fprintf(w, `{"orderId":"o%d"}`, n)
			return
		}
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"code":"not_found","error":"no such resource: POST /orders"}`))
	}))
	defer srv.Close()
	sum, err := Run(context.Background(), readFile(t, oneDayFile), Options{BaseURL: srv.URL, Concurrency: 1})
	var nc *NotCheckoutError
	if !errors.As(err, &nc) || nc.Code != "not_found" {
		t.Fatalf("err = %v, want a *NotCheckoutError with code not_found; summary:\n%s", err, sum)
	}
	checkInvariant(t, sum)
	if sum.OrdersAccepted != accepted || sum.RejectedTotal() != 0 || sum.Unfinished != sum.Sales-accepted ||
		sum.Stopped != StoppedNotCheckout {
		t.Errorf("accepted %d, rejected %v, unfinished %d of %d, stopped %q", sum.OrdersAccepted, sum.Rejected,
			sum.Unfinished, sum.Sales, sum.Stopped)
	}
	if n := requests.Load(); n != accepted+1 {
		t.Errorf("%d requests sent, want %d: the run stops at the first 404", n, accepted+1)
	}
}
