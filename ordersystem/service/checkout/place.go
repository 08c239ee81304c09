package checkout

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ordercast/ordercast/ordersystem/internal/jsonlimit"
	"github.com/ordercast/ordercast/ordersystem/order"
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

// handlePlace serves POST /orders.
func (s *Service) handlePlace(w http.ResponseWriter, r *http.Request) {
	p, aerr := s.admit(w, r)
	var key string
	if aerr == nil {
		key, aerr = idempotencyKey(r.Header)
	}
	if aerr == nil {
		var req *order.PlaceOrderRequest
		if req, aerr = s.readRequest(w, r); aerr == nil {
			aerr = s.authorizePlace(p, req)
		}
		if aerr == nil {
			var res *outcome
			if res, aerr = s.place(r.Context(), p, req, requestHash(req), key); aerr == nil {
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

// authorizePlace decides whether p may place req, and makes the token's
// customer the order's (before the request is hashed, so that a retry with
// and without the body's customerId is the same order): 401 for a request
// without a token that names a customer (or any, with AuthRequired), 403
// customer_mismatch for a token of another customer than the body's. Without
// Config.Auth every request is allowed as it is.
func (s *Service) authorizePlace(p principal, req *order.PlaceOrderRequest) *apiError {
	switch {
	case s.cfg.Auth == nil:
		return nil
	case p.customer == "" && s.cfg.AuthRequired:
		return needToken("this checkout takes orders from authenticated customers only (--auth-required)")
	case p.customer == "" && req.CustomerID != "":
		return needToken(fmt.Sprintf("an order for customer %q needs that customer's bearer token (omit customerId to order as a guest)", req.CustomerID))
	case p.customer == "":
		return nil // a guest order
	case req.CustomerID == "":
		req.CustomerID = p.customer
		return nil
	case req.CustomerID != p.customer:
		return reject(http.StatusForbidden, CodeCustomerMismatch, fmt.Sprintf(
			"customerId %q is not the customer of the bearer token (%q): a customer orders in their own name only (omit customerId to use the token's)",
			req.CustomerID, p.customer))
	}
	return nil
}

// idempotencyKey returns the request's Idempotency-Key, "" if it has none,
// or 400 bad_idempotency_key. A key starting with keylessPrefix is one the
// server issued (in a 503 to a request sent without a key); place accepts
// it only for an existing row.
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
// and channel "" when absent. Errors: 499 client_closed_request (the
// connection closed before the whole body arrived); 413 body_too_large; 400 malformed_json
// (not one JSON object, a member of the wrong JSON type, or a member that
// appears twice in one object) and unknown_field (a member the request does
// not have); 422 bad_customer_id, bad_channel, bad_country, bad_reference,
// no_lines, too_many_lines, bad_quantity (a line's quantity out of range,
// absent or null) and unknown_stock_code (a line's stockCode absent, null or
// empty). The catalog checks (unknown_stock_code for a code not in the
// catalog, amount_overflow) come later, when the order is priced.
func (s *Service) readRequest(w http.ResponseWriter, r *http.Request) (*order.PlaceOrderRequest, *apiError) {
	limit := s.cfg.MaxBodyBytes
	tooLarge := func() *apiError {
		return reject(http.StatusRequestEntityTooLarge, order.ReasonBodyTooLarge,
			fmt.Sprintf("request body is larger than %d bytes", limit))
	}
	if aerr := checkContentHeaders(r.Header); aerr != nil {
		return nil, aerr
	}
	if r.ContentLength > limit {
		return nil, tooLarge()
	}
	done := s.bodies.start(w, s.cfg.BodyTimeout)
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	done(err)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		w.Header().Set("Connection", "close")
		return nil, reject(http.StatusRequestTimeout, CodeRequestTimeout, fmt.Sprintf(
			"the request body did not arrive within %v (or the server is shutting down); send it whole, promptly", s.cfg.BodyTimeout))
	}
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, tooLarge()
		}
		// The connection closed before the body was complete (shorter than
		// its Content-Length, or a chunked body cut off): the client hung
		// up, the request was not malformed.
		if errors.Is(err, io.ErrUnexpectedEOF) || r.Context().Err() != nil {
			s.log.Info("checkout: the client hung up while sending the request body", slog.Any("error", err))
			return nil, clientGone(err)
		}
		return nil, reject(http.StatusBadRequest, order.ReasonMalformedJSON, "reading the request body: "+err.Error())
	}
	return parseRequest(data)
}

// unwritable answers 400 unknown_field for a request this instance cannot
// write: one with a channel when the orderCreated schema it writes
// (schema.WithWriterVersion or WithVersion, --schema-version) has no channel
// field (Serde.WritesField), as the build that only knew that version
// refused it, rather than accept it and drop the channel. place asks it only
// for a new order, after the Idempotency-Key lookup, so that a retry of an
// order an upgraded instance accepted is replayed here too.
func (s *Service) unwritable(req *order.PlaceOrderRequest) *apiError {
	if req.Channel == "" || s.serde.WritesField(order.TopicOrderCreated, "channel") {
		return nil
	}
	return reject(http.StatusBadRequest, order.ReasonUnknownField, fmt.Sprintf(
		"unknown member \"channel\": this checkout writes orderCreated v%d (--schema-version), which has no channel; send it to an upgraded instance or leave it out",
		s.serde.SchemaVersion(order.TopicOrderCreated)))
}

// The members of a POST /orders body and of each of its lines, by their
// exact (case-sensitive) names; any other member is 400 unknown_field.
var (
	requestMembers = []string{"customerId", "country", "reference", "channel", "lines"}
	lineMembers    = []string{"stockCode", "quantity"}
)

// parseRequest decodes and validates a POST /orders body (see readRequest).
//
// It decodes member by member rather than with json.Unmarshal into a
// struct, so that member names match exactly (encoding/json would take
// "customerID" for customerId) and every message names the member by its
// JSON path ("lines[2].quantity") and the JSON type expected, never a Go
// type.
func parseRequest(data []byte) (*order.PlaceOrderRequest, *apiError) {
	malformed := func(format string, args ...any) (*order.PlaceOrderRequest, *apiError) {
		return nil, reject(http.StatusBadRequest, order.ReasonMalformedJSON, fmt.Sprintf(format, args...))
	}
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return malformed(`the request body must be one JSON object, such as {"lines": [{"stockCode": "85123A", "quantity": 6}]}`)
	}
	if !utf8.Valid(data) { // outside the members badText names (a member name, say)
		i := 0
		for i < len(data) {
			r, n := utf8.DecodeRune(data[i:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			i += n
		}
		return nil, reject(http.StatusBadRequest, CodeBadText, fmt.Sprintf("the request body is not valid UTF-8 (byte %d)", i))
	}
	// One bounded walk first: nesting deeper than MaxJSONDepth is refused
	// before anything else reads the body, and duplicated members are
	// found without a string per level.
	limitErr := jsonlimit.Check(data, MaxJSONDepth)
	if le, ok := errors.AsType[*jsonlimit.Error](limitErr); ok && le.Kind == jsonlimit.TooDeep {
		return nil, reject(http.StatusBadRequest, CodeTooDeep, fmt.Sprintf(
			"the request body nests objects and arrays deeper than %d levels (at %s); an order needs 3", MaxJSONDepth, pathOrTop(le.Path)))
	}
	var top map[string]json.RawMessage
	// json.Unmarshal checks the whole input first: one value, nothing but
	// white space after it.
	if err := json.Unmarshal(data, &top); err != nil {
		if se, ok := errors.AsType[*json.SyntaxError](err); ok {
			return malformed("invalid JSON at byte %d: %s", se.Offset, strings.TrimPrefix(se.Error(), "json: "))
		}
		return malformed("invalid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if le, ok := errors.AsType[*jsonlimit.Error](limitErr); ok && le.Kind == jsonlimit.Duplicate {
		return malformed("member %q appears more than once; send each member once", truncate(le.Path, 100))
	}
	if aerr := checkMembers("", top, requestMembers, "a request has customerId, country, reference, channel and lines"); aerr != nil {
		return nil, aerr
	}
	req := &order.PlaceOrderRequest{}
	var customerID, channel *string
	var missingQty []int // lines whose quantity is absent or null
	for _, f := range []struct {
		name string
		dst  *string
		set  **string // non-nil: tell absent or null (nil) from a string
	}{
		{name: "customerId", set: &customerID},
		{name: "country", dst: &req.Country},
		{name: "reference", dst: &req.Reference},
		{name: "channel", set: &channel},
	} {
		v, ok, aerr := stringMember(top, "", f.name)
		if aerr != nil {
			return nil, aerr
		}
		if f.set != nil {
			if ok {
				*f.set = &v
			}
		} else {
			*f.dst = v
		}
	}
	for _, f := range []struct {
		name, code, v string
		max           int
	}{
		{"country", CodeBadCountry, req.Country, MaxCountryLen},
		{"reference", CodeBadReference, req.Reference, MaxReferenceLen},
	} {
		if n := utf8.RuneCountInString(f.v); n > f.max {
			return nil, unprocessable(f.code, fmt.Sprintf("%s is %d characters long, more than %d", f.name, n, f.max))
		}
	}
	if raw, ok := top["lines"]; ok && jsonType(raw) != "null" {
		var lines []json.RawMessage
		if jsonType(raw) != "an array" {
			return malformed("lines must be an array of {stockCode, quantity} objects, got %s", jsonType(raw))
		}
		// Counted before the slice is made (1 MB of "0," is 500,000
		// elements, 12 MB of slice).
		if n := jsonlimit.ArrayLen(raw); n > MaxLines {
			return nil, unprocessable(order.ReasonTooManyLines, fmt.Sprintf("the order has %d lines, more than %d", n, MaxLines))
		}
		line := func(i int, lm map[string]json.RawMessage) *apiError {
			at := "lines[" + strconv.Itoa(i) + "]"
			if aerr := checkMembers(at, lm, lineMembers, "a line has only stockCode and quantity; prices come from the catalog"); aerr != nil {
				return aerr
			}
			code, _, aerr := stringMember(lm, at, "stockCode")
			if aerr != nil {
				return aerr
			}
			qty, hasQty, aerr := intMember(lm, at, "quantity")
			if aerr != nil {
				return aerr
			}
			if !hasQty {
				missingQty = append(missingQty, i)
			}
			req.Lines[i] = order.RequestLine{StockCode: code, Quantity: qty}
			return nil
		}
		// Every line an object, the usual case: decoded at once, each
		// member copied once.
		var lms []map[string]json.RawMessage
		if json.Unmarshal(raw, &lms) == nil && !slices.ContainsFunc(lms, func(m map[string]json.RawMessage) bool { return m == nil }) {
			req.Lines = make([]order.RequestLine, len(lms))
			for i, lm := range lms {
				if aerr := line(i, lm); aerr != nil {
					return nil, aerr
				}
			}
		} else {
			// Some line is not an object: line by line, to name the
			// first that is wrong.
			if err := json.Unmarshal(raw, &lines); err != nil { // cannot fail: raw is a valid array
				return malformed("lines: %s", strings.TrimPrefix(err.Error(), "json: "))
			}
			req.Lines = make([]order.RequestLine, len(lines))
			for i, lr := range lines {
				if jsonType(lr) != "an object" {
					return malformed("lines[%d] must be an object {stockCode, quantity}, got %s", i, jsonType(lr))
				}
				var lm map[string]json.RawMessage
				if err := json.Unmarshal(lr, &lm); err != nil { // cannot fail either
					return malformed("lines[%d]: %s", i, strings.TrimPrefix(err.Error(), "json: "))
				}
				if aerr := line(i, lm); aerr != nil {
					return nil, aerr
				}
			}
		}
	}

	if customerID != nil {
		if !validCustomerID(*customerID) {
			return nil, unprocessable(order.ReasonBadCustomerID,
				fmt.Sprintf("customerId %q must be 1 to %d characters of A-Z, a-z, 0-9, '_' and '-' (omit it for a guest)",
					truncate(*customerID, 80), MaxCustomerIDLen))
		}
		req.CustomerID = *customerID
	}
	if channel != nil {
		if !order.ValidChannel(*channel) {
			return nil, unprocessable(order.ReasonBadChannel,
				fmt.Sprintf("channel %q must be 1 to %d characters of a-z, 0-9, '_' and '-', starting with a letter, such as \"web\" or \"api\" (omit it when unknown)",
					truncate(*channel, 80), MaxChannelLen))
		}
		req.Channel = *channel
	}
	if len(req.Lines) == 0 {
		return nil, unprocessable(order.ReasonNoLines, "the order has no lines")
	}
	for i := range req.Lines {
		l := &req.Lines[i]
		l.StockCode = order.NormalizeStockCode(l.StockCode)
		if l.StockCode == "" {
			return nil, unprocessable(order.ReasonUnknownStockCode,
				fmt.Sprintf("lines[%d].stockCode is required: the catalog's stock code, such as \"85123A\"", i))
		}
		if slices.Contains(missingQty, i) {
			return nil, unprocessable(order.ReasonBadQuantity,
				fmt.Sprintf("lines[%d].quantity is required: an integer between 1 and %d", i, MaxQuantity))
		}
		if l.Quantity <= 0 || l.Quantity > MaxQuantity {
			return nil, unprocessable(order.ReasonBadQuantity,
				fmt.Sprintf("lines[%d]: quantity %d is not between 1 and %d", i, l.Quantity, MaxQuantity))
		}
	}
	return req, nil
}

// checkMembers answers 400 unknown_field for the first member of m (by
// name) that is not in known, naming its path and, when it differs only in
// case, the member meant; hint says what the object has.
func checkMembers(at string, m map[string]json.RawMessage, known []string, hint string) *apiError {
	var unknown []string
	for name := range m {
		if !slices.Contains(known, name) {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	name := unknown[0]
	msg := fmt.Sprintf("unknown field %q", truncate(path(at, name), 100))
	for _, k := range known {
		if strings.EqualFold(k, name) {
			msg += fmt.Sprintf(" (did you mean %q?)", path(at, k))
		}
	}
	return reject(http.StatusBadRequest, order.ReasonUnknownField, msg+"; "+hint)
}

// stringMember returns member name of m: its string, and whether it was
// present and not null; 400 malformed_json when it is another JSON type.
func stringMember(m map[string]json.RawMessage, at, name string) (string, bool, *apiError) {
	raw, ok := m[name]
	if !ok || jsonType(raw) == "null" {
		return "", false, nil
	}
	var v string
	if jsonType(raw) != "a string" {
		return "", false, reject(http.StatusBadRequest, order.ReasonMalformedJSON,
			fmt.Sprintf("%s must be a string or null, got %s", path(at, name), jsonType(raw)))
	}
	if plain := raw[1 : len(raw)-1]; bytes.IndexByte(plain, '\\') < 0 {
		v = string(plain) // no escapes: the string is its bytes (valid UTF-8, checked)
	} else if json.Unmarshal(raw, &v) != nil {
		return "", false, reject(http.StatusBadRequest, order.ReasonMalformedJSON,
			fmt.Sprintf("%s must be a string or null, got %s", path(at, name), jsonType(raw)))
	}
	if why := badText(raw, v); why != "" {
		return "", false, reject(http.StatusBadRequest, CodeBadText, fmt.Sprintf("%s %s", path(at, name), why))
	}
	return v, true, nil
}

// intMember returns member name of m as an integer and whether it was
// present and not null; 400 malformed_json when it is not a JSON integer in
// int64 range.
func intMember(m map[string]json.RawMessage, at, name string) (int64, bool, *apiError) {
	raw, ok := m[name]
	if !ok || jsonType(raw) == "null" {
		return 0, false, nil
	}
	v, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		got := jsonType(raw)
		if got == "a number" {
			got = "the number " + truncate(string(raw), 40)
		}
		return 0, false, reject(http.StatusBadRequest, order.ReasonMalformedJSON,
			fmt.Sprintf("%s must be an integer (no fraction or exponent, at most 19 digits), got %s", path(at, name), got))
	}
	return v, true, nil
}

func pathOrTop(p string) string {
	if p == "" {
		return "the top level"
	}
	return p
}

// jsonType names the JSON type of a valid JSON value as messages do: "a
// string", "a number", "an object", "an array", "a boolean" or "null".
func jsonType(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// path joins a JSON path and a member name.
func path(at, name string) string {
	if at == "" {
		return name
	}
	return at + "." + name
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
// request (normalized stock codes, null members dropped) re-marshalled, so
// that two bodies that ask for the same order hash the same whatever their
// white space, member order or stock code case. A request without channel
// hashes as before channel existed (it is omitted when empty).
func requestHash(req *order.PlaceOrderRequest) string {
	sum := sha256.Sum256(marshal(req))
	return hex.EncodeToString(sum[:])
}

// checkContentHeaders answers 415 for a body this API does not read: a
// Content-Encoding other than identity (unsupported_content_encoding: it
// would be parsed compressed), or a Content-Type that is not JSON in UTF-8
// (unsupported_media_type; absent counts as not JSON).
func checkContentHeaders(h http.Header) *apiError {
	for _, v := range h.Values("Content-Encoding") {
		for _, enc := range strings.Split(v, ",") {
			if enc = strings.TrimSpace(enc); enc != "" && !strings.EqualFold(enc, "identity") {
				return reject(http.StatusUnsupportedMediaType, CodeUnsupportedContentEncoding,
					fmt.Sprintf("Content-Encoding %q is not supported: send the body uncompressed", truncate(enc, 40)))
			}
		}
	}
	ct := h.Get("Content-Type")
	mt, params, err := mime.ParseMediaType(ct)
	switch {
	case ct == "":
		return reject(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType, "Content-Type is missing: send application/json")
	case err != nil || (mt != "application/json" && !(strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))):
		return reject(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType,
			fmt.Sprintf("Content-Type %q is not supported: send application/json", truncate(ct, 80)))
	case params["charset"] != "" && !strings.EqualFold(params["charset"], "utf-8"):
		return reject(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType,
			fmt.Sprintf("charset %q is not supported: send UTF-8", truncate(params["charset"], 40)))
	}
	return nil
}

// badText says what is wrong with raw, a JSON string literal (quotes
// included) from a valid UTF-8 body, decoded as v, or "" when nothing is:
// an escaped lone surrogate (\ud800 without its pair: encoding/json would
// make it U+FFFD) or a control character, escaped (\u0000) or not.
func badText(raw []byte, v string) string {
	for i, r := range v {
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) {
			return fmt.Sprintf("has the control character U+%04X at byte %d; send printable text", r, i)
		}
	}
	// Surrogates appear only as \u escapes (raw is valid UTF-8): check each
	// high one is followed by a low one and no low one stands alone.
	for i := 0; i+1 < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		if raw[i+1] != 'u' || i+6 > len(raw) {
			i++ // an escaped character, skip it
			continue
		}
		u, err := strconv.ParseUint(string(raw[i+2:i+6]), 16, 16)
		if err != nil {
			return "has an invalid \\u escape"
		}
		switch {
		case u >= 0xd800 && u <= 0xdbff:
			if i+12 <= len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' {
				if lo, err := strconv.ParseUint(string(raw[i+8:i+12]), 16, 16); err == nil && lo >= 0xdc00 && lo <= 0xdfff {
					i += 11
					continue
				}
			}
			return fmt.Sprintf("has a lone surrogate \\u%04x (a high surrogate without its low half); send valid UTF-16 escapes or UTF-8", u)
		case u >= 0xdc00 && u <= 0xdfff:
			return fmt.Sprintf("has a lone surrogate \\u%04x (a low surrogate without its high half); send valid UTF-16 escapes or UTF-8", u)
		}
		i += 5
	}
	return ""
}
