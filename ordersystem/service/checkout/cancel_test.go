package checkout_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/ordercast/ordercast/ordersystem/service/checkout"
)

// lockedBuffer is a bytes.Buffer safe for the service's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A client that hangs up is not a server failure: checkout answers 499
// client_closed_request (nginx's status for it), publishes nothing, and logs
// at info, not error, so a burst of client timeouts does not look like a
// database outage in the 5xx rate and the error log.
func TestClientHangUpIsNotAServerError(t *testing.T) {
	var logs lockedBuffer
	e := newEnv(t, func(s *envSettings) {
		s.cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	gone, cancel := context.WithCancel(testCtx(t))
	cancel()
	for _, tc := range []struct{ method, path, body, key string }{
		{http.MethodPost, "/orders", `{"customerId":"17850","lines":[{"stockCode":"85123A","quantity":1}]}`, "k-gone"},
		{http.MethodPost, "/orders", `{"customerId":"17850","lines":[{"stockCode":"85123A","quantity":1}]}`, ""},
		{http.MethodGet, "/orders/ord_x", "", ""},
	} {
		req := httptest.NewRequestWithContext(gone, tc.method, tc.path, strings.NewReader(tc.body))
		req.Header.Set("Content-Type", "application/json")
		if tc.key != "" {
			req.Header.Set("Idempotency-Key", tc.key)
		}
		r := e.serve(req)
		if r.status != checkout.StatusClientClosedRequest || r.errorCode(t) != checkout.CodeClientClosedRequest {
			t.Errorf("%s %s (key %q) from a client that hung up: %d %s; want 499 %s", tc.method, tc.path, tc.key, r.status, r.body, checkout.CodeClientClosedRequest)
		}
	}
	if n := e.topicCount(); n != 0 {
		t.Errorf("%d orderCreated records published for abandoned requests, want 0", n)
	}
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("a client hang-up was logged as an error:\n%s", logs.String())
	}
}

// A client that closes the connection before sending the whole body (here
// 20 of the 200 bytes its Content-Length announced) hung up; its request was
// not malformed: 499, counted under client_closed_request, not
// malformed_json.
func TestClientHangUpMidBody(t *testing.T) {
	e := newEnv(t)
	srv := httptest.NewServer(e.handler)
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	body := `{"customerId":"1785`
	if _, err := fmt.Fprintf(conn, "POST /orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n%s", body); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	eventually(t, "the hang-up counted as client_closed_request", func() bool {
		return e.metric("ordercast_checkout_orders_rejected_total", "code", checkout.CodeClientClosedRequest) == 1
	})
	if n := e.metric("ordercast_checkout_orders_rejected_total", "code", "malformed_json"); n != 0 {
		t.Errorf("the hang-up was also counted as malformed_json (%v)", n)
	}
}
