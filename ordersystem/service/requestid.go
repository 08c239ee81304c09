package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
)

// HeaderRequestID is the response header that carries each HTTP request's
// id: the process's HTTP listener (package system) sets it on every answer,
// puts the id in the request's context (RequestID) and logs it with the
// full error of every 5xx answer, whose body names it instead of the error.
const HeaderRequestID = "X-Request-Id"

type requestIDKey struct{}

// NewRequestID returns a fresh request id: "req_" and 16 random hex digits.
func NewRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "req_" + hex.EncodeToString(b[:])
}

// WithRequestID returns ctx carrying the request id id.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID returns the request id ctx carries (WithRequestID), or "" for
// none. A handler logs it with an error it answers 5xx for, and names it in
// the answer (PublicError) rather than the error's text.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// PublicError returns what an HTTP answer may say about a failure of
// ctx's request: what happened (a fixed text such as "the database did
// not answer"; never an error's text, which names drivers, hosts, tables
// and other clients' orders), followed by the request id under which the
// full error is logged. The caller logs the error with
// slog.String("request_id", RequestID(ctx)).
func PublicError(ctx context.Context, what string) string {
	if id := RequestID(ctx); id != "" {
		return what + " (request id " + id + "; the server's log has the details)"
	}
	return what + " (the server's log has the details)"
}
