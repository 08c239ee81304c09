package checkout_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/ordercast/ordercast/service/checkout"
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
