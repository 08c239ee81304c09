package checkout

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/ordercast/ordercast/order"
)

// HeaderIdempotencyKey is the request header naming an idempotency key;
// HeaderIdempotentReplayed ("true") marks an answer replayed from storage.
const (
	HeaderIdempotencyKey     = "Idempotency-Key"
	HeaderIdempotentReplayed = "Idempotent-Replayed"
)

// keylessPrefix prefixes the checkout_requests key of an order placed
// without an Idempotency-Key ("order:<orderId>"); client keys may not use it.
const keylessPrefix = "order:"

// placeBody is the wire form of order.PlaceOrderRequest, with CustomerID a
// pointer to tell an absent (or null) customerId, a guest, from a present
// but invalid one. Unknown fields, such as a price sent by the client, are
// ignored.
type placeBody struct {
	CustomerID *string             `json:"customerId"`
	Country    string              `json:"country"`
	Reference  string              `json:"reference"`
	Lines      []order.RequestLine `json:"lines"`
}

// handlePlace serves POST /orders.
func (s *Service) handlePlace(w http.ResponseWriter, r *http.Request) {
	key, aerr := idempotencyKey(r.Header)
	if aerr == nil {
		var req *order.PlaceOrderRequest
		if req, aerr = s.readRequest(w, r); aerr == nil {
			var res *outcome
			if res, aerr = s.place(r.Context(), req, requestHash(req), key); aerr == nil {
				h := w.Header()
				h.Set("Location", "/orders/"+res.orderID)
				if res.replayed {
					h.Set(HeaderIdempotentReplayed, "true")
				}
				writeBody(w, res.status, res.body)
				return
			}
		}
	}
	s.metrics.rejected.WithLabelValues(aerr.code).Inc()
	s.writeError(w, aerr)
}

// idempotencyKey returns the request's Idempotency-Key, "" if it has none,
// or 400 bad_idempotency_key.
func idempotencyKey(h http.Header) (string, *apiError) {
	vals := h.Values(HeaderIdempotencyKey)
	bad := func(why string) (string, *apiError) {
		return "", reject(http.StatusBadRequest, CodeBadIdempotencyKey, "Idempotency-Key header "+why)
	}
	switch {
	case len(vals) == 0:
		return "", nil
	case len(vals) > 1:
		return bad("is repeated; send one")
	}
	k := vals[0]
	switch {
	case k == "":
		return bad("is empty; omit it or send 1 to 200 characters")
	case len(k) > MaxIdempotencyKeyLen:
		return bad(fmt.Sprintf("is %d characters long, more than %d", len(k), MaxIdempotencyKeyLen))
	case strings.HasPrefix(k, keylessPrefix):
		return bad(fmt.Sprintf("must not start with %q, which is reserved", keylessPrefix))
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c < 0x20 || c > 0x7e {
			return bad(fmt.Sprintf("has a byte 0x%02x at %d; use printable ASCII", c, i))
		}
	}
	return k, nil
}

// readRequest reads, decodes and validates the body of POST /orders and
// returns the request in canonical form: stock codes normalized, customer id
// "" for a guest. Errors: 413 body_too_large, 400 malformed_json, 400
// bad_customer_id, 422 no_lines, too_many_lines, bad_quantity. Catalog checks
// (unknown_stock_code, amount_overflow) come later, when the order is priced.
func (s *Service) readRequest(w http.ResponseWriter, r *http.Request) (*order.PlaceOrderRequest, *apiError) {
	limit := s.cfg.MaxBodyBytes
	tooLarge := func() *apiError {
		return reject(http.StatusRequestEntityTooLarge, order.ReasonBodyTooLarge,
			fmt.Sprintf("request body is larger than %d bytes", limit))
	}
	if r.ContentLength > limit {
		return nil, tooLarge()
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, tooLarge()
		}
		return nil, reject(http.StatusBadRequest, order.ReasonMalformedJSON, "reading the request body: "+err.Error())
	}
	return parseRequest(data)
}

// parseRequest decodes and validates a POST /orders body (see readRequest).
func parseRequest(data []byte) (*order.PlaceOrderRequest, *apiError) {
	malformed := func(msg string) (*order.PlaceOrderRequest, *apiError) {
		return nil, reject(http.StatusBadRequest, order.ReasonMalformedJSON, msg)
	}
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return malformed("the request body must be one JSON object (an order.PlaceOrderRequest)")
	}
	var b placeBody
	// json.Unmarshal also rejects anything but white space after the object.
	if err := json.Unmarshal(data, &b); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return malformed(fmt.Sprintf("invalid JSON at byte %d: %v", se.Offset, err))
		case errors.As(err, &te):
			return malformed(fmt.Sprintf("field %s: %v", te.Field, err))
		}
		return malformed("invalid JSON: " + err.Error())
	}
	req := &order.PlaceOrderRequest{Country: b.Country, Reference: b.Reference, Lines: b.Lines}
	if b.CustomerID != nil {
		if !validCustomerID(*b.CustomerID) {
			return nil, reject(http.StatusBadRequest, order.ReasonBadCustomerID,
				fmt.Sprintf("customerId %q must be 1 to %d characters of A-Z, a-z, 0-9, '_' and '-' (omit it for a guest)",
					truncate(*b.CustomerID, 80), MaxCustomerIDLen))
		}
		req.CustomerID = *b.CustomerID
	}
	switch n := len(req.Lines); {
	case n == 0:
		return nil, unprocessable(order.ReasonNoLines, "the order has no lines")
	case n > MaxLines:
		return nil, unprocessable(order.ReasonTooManyLines, fmt.Sprintf("the order has %d lines, more than %d", n, MaxLines))
	}
	for i := range req.Lines {
		l := &req.Lines[i]
		if l.Quantity <= 0 || l.Quantity > MaxQuantity {
			return nil, unprocessable(order.ReasonBadQuantity,
				fmt.Sprintf("lines[%d]: quantity %d is not between 1 and %d", i, l.Quantity, MaxQuantity))
		}
		l.StockCode = order.NormalizeStockCode(l.StockCode)
	}
	return req, nil
}

func validCustomerID(id string) bool {
	if len(id) == 0 || len(id) > MaxCustomerIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// truncate shortens s for an error message.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// requestHash is the hex sha256 of the canonical request: the validated
// request (normalized stock codes, unknown fields dropped) re-marshalled, so
// that two bodies that ask for the same order hash the same whatever their
// white space, field order or stock code case.
func requestHash(req *order.PlaceOrderRequest) string {
	sum := sha256.Sum256(marshal(req))
	return hex.EncodeToString(sum[:])
}
