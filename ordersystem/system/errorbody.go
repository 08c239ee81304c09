package system

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"

	"github.com/ordercast/ordercast/ordersystem/service"
)

// maxHeldBody bounds the 5xx body withRequestID holds to rewrite; the
// bodies of checkout's errors are a few hundred bytes.
const maxHeldBody = 64 << 10

// publicMessages are the messages of 5xx answers on the public listener,
// by the code of their body (checkout's codes): what happened and what the
// client may do, without the error that caused it.
var publicMessages = map[string]string{
	"database_unavailable": "the database did not answer; nothing was recorded nor published: retry",
	"internal":             "an internal error stopped this request",
}

// publicMessage is the message of a 5xx answer of code; withOrder says the
// body names an order (a 503 broker_unavailable whose outcome is unknown).
func publicMessage(code string, withOrder bool) string {
	if code == "broker_unavailable" {
		if withOrder {
			return "the order event was not acknowledged by Kafka in time; the outcome is unknown (the event may still be written): retry with this answer's idempotencyKey, which publishes this same order at most once, or GET its statusUrl"
		}
		return "the order could not be published in time (Kafka did not answer, or another request with this Idempotency-Key is still being published): retry with the same Idempotency-Key"
	}
	if m, ok := publicMessages[code]; ok {
		return m
	}
	return "the server could not answer this request"
}

// withRequestID gives every request of the public listener an id
// (service.NewRequestID): in the X-Request-Id header of its answer and in
// its context (service.RequestID). The message of a 5xx answer is replaced
// by one that says what happened without the error's text (publicMessage:
// a driver's message, a broker's address, another client's order id) and
// names the request id; the full answer is logged at ERROR under that id.
// The other fields of the JSON body (code, orderId, statusUrl,
// idempotencyKey) and the headers are kept; a body that is not JSON becomes
// plain text.
func withRequestID(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := service.NewRequestID()
		w.Header().Set(service.HeaderRequestID, id)
		r = r.WithContext(service.WithRequestID(r.Context(), id))
		hw := &holdWriter{ResponseWriter: w}
		next.ServeHTTP(hw, r)
		if hw.held != 0 {
			hw.rewrite(log, r, id)
		}
	})
}

// holdWriter passes an answer through, except one whose status is 5xx: it
// holds that one's status and body for withRequestID to rewrite.
type holdWriter struct {
	http.ResponseWriter
	wrote bool // the status went to the client, or is held
	held  int  // the held 5xx status, 0 for none
	body  bytes.Buffer
}

func (h *holdWriter) WriteHeader(status int) {
	if h.wrote {
		return
	}
	if status >= 500 {
		h.wrote, h.held = true, status
		return
	}
	if status >= 200 {
		h.wrote = true
	}
	h.ResponseWriter.WriteHeader(status)
}

func (h *holdWriter) Write(b []byte) (int, error) {
	if !h.wrote {
		h.WriteHeader(http.StatusOK)
	}
	if h.held == 0 {
		return h.ResponseWriter.Write(b)
	}
	if room := maxHeldBody - h.body.Len(); room < len(b) {
		h.body.Write(b[:max(room, 0)])
		return len(b), nil
	}
	return h.body.Write(b)
}

// Unwrap lets http.ResponseController (checkout's body deadlines) reach
// the connection's ResponseWriter.
func (h *holdWriter) Unwrap() http.ResponseWriter { return h.ResponseWriter }

func (h *holdWriter) rewrite(log *slog.Logger, r *http.Request, id string) {
	log.Error("HTTP request answered 5xx; the answer names the request id instead of the error",
		"request_id", id, "method", r.Method, "path", r.URL.Path, "status", h.held, "answer", h.body.String())
	hdr := h.ResponseWriter.Header()
	hdr.Del("Content-Length")
	var body map[string]any
	if err := json.Unmarshal(h.body.Bytes(), &body); err != nil || body == nil {
		hdr.Set("Content-Type", "text/plain; charset=utf-8")
		h.ResponseWriter.WriteHeader(h.held)
		_, _ = h.ResponseWriter.Write([]byte(service.PublicError(r.Context(), publicMessage("", false)) + "\n"))
		return
	}
	code, _ := body["code"].(string)
	_, withOrder := body["orderId"]
	body["error"] = service.PublicError(r.Context(), publicMessage(code, withOrder))
	b, _ := json.Marshal(body)
	h.ResponseWriter.WriteHeader(h.held)
	_, _ = h.ResponseWriter.Write(append(b, '\n'))
}
