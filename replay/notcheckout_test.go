package replay

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// The URL is something other than checkout (a schema registry answers
// POST /orders with a plain 404): Run stops at the first such answer and
// says the URL does not look like checkout's POST /orders, instead of
// counting every sale as rejected.
func TestRunStopsWhenNotCheckout(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
	}{
		{"registry 404", http.StatusNotFound, `{"error_code":404,"message":"HTTP 404 Not Found"}`},
		{"plain 404", http.StatusNotFound, "404 page not found\n"},
		{"405", http.StatusMethodNotAllowed, "Method Not Allowed\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var requests atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				requests.Add(1)
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			sum, err := Run(context.Background(), readFile(t, oneDayFile), Options{BaseURL: srv.URL, Concurrency: 2, MaxAttempts: 2})
			var nc *NotCheckoutError
			if !errors.As(err, &nc) {
				t.Fatalf("err = %v, want a *NotCheckoutError; summary:\n%s", err, sum)
			}
			checkInvariant(t, sum)
			if n := requests.Load(); n > 4 {
				t.Errorf("%d requests sent, want the run stopped at the first answers", n)
			}
			if sum.RejectedTotal() != 0 || sum.Stopped != StoppedNotCheckout || sum.Unfinished != sum.Sales {
				t.Errorf("rejected %v, stopped %q, unfinished %d of %d", sum.Rejected, sum.Stopped, sum.Unfinished, sum.Sales)
			}
			for _, want := range []string{srv.URL + "/orders", "does not look like checkout's POST /orders", http.StatusText(tc.status)} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
		})
	}
}

// A 404 with checkout's JSON error body is a rejection like any other: the
// run goes on.
func TestRunCheckoutShaped404IsRejection(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"code":"unknown_product","error":"no such product"}`))
	}))
	defer srv.Close()
	sum, err := Run(context.Background(), readFile(t, oneDayFile), Options{BaseURL: srv.URL, Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Rejected["unknown_product"] != sum.Sales || sum.Unfinished != 0 {
		t.Errorf("rejected %v, unfinished %d of %d", sum.Rejected, sum.Unfinished, sum.Sales)
	}
}
