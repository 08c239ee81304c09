package system

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ordercast/ordercast/ordersystem/service"
)

// TestErrorBodiesNameNoInternals: a 5xx answer whose message carries a
// driver's text (user, database, address, another client's order id) goes
// out with a fixed message and the request id, which is also in the header
// and in the ERROR log line with the full answer; its other fields are kept,
// and answers below 500 pass unchanged.
func TestErrorBodiesNameNoInternals(t *testing.T) {
	const internals = `pq: password authentication failed for user "ordercast" database "orders_prod" at 10.1.2.3:5432 (order ord_someoneelse)`
	var logBuf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logBuf, nil))
	h := withRequestID(log, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/db":
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(map[string]string{"code": "database_unavailable", "error": internals})
		case "/plain":
			http.Error(w, internals, http.StatusInternalServerError)
		default:
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"code":"bad_request","error":"quantity must be positive"}`))
		}
	}))
	for _, path := range []string{"/db", "/plain"} {
		logBuf.Reset()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		id := rec.Header().Get(service.HeaderRequestID)
		body := rec.Body.String()
		if rec.Code < 500 || id == "" {
			t.Fatalf("%s: %d, request id %q", path, rec.Code, id)
		}
		for _, leak := range []string{"pq:", "ordercast", "orders_prod", "10.1.2.3", "ord_someoneelse"} {
			if strings.Contains(body, leak) {
				t.Errorf("%s: body names %q: %s", path, leak, body)
			}
		}
		if !strings.Contains(body, id) {
			t.Errorf("%s: body does not name the request id %s: %s", path, id, body)
		}
		if !strings.Contains(logBuf.String(), id) || !strings.Contains(logBuf.String(), "orders_prod") || !strings.Contains(logBuf.String(), `"level":"ERROR"`) {
			t.Errorf("%s: the log line lacks the id or the full error: %s", path, logBuf.String())
		}
		if path == "/db" {
			var b map[string]string
			if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil || b["code"] != "database_unavailable" {
				t.Errorf("/db: body %q (%v); want JSON keeping its code", body, err)
			}
			if rec.Header().Get("Retry-After") != "1" {
				t.Errorf("/db: Retry-After dropped")
			}
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/bad", nil))
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "quantity must be positive") {
		t.Errorf("a 400 was changed: %d %s", rec.Code, rec.Body.String())
	}
}
