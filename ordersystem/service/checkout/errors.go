package checkout

import (
	"errors"
	"net/http"
	"strconv"
)

// Error codes that checkout answers with besides the order.Reason* rejection
// reasons. Like those they are stable strings, sent in
// order.ErrorResponse.Code and used as the code label of the rejected-orders
// metric.
const (
	// CodeBadIdempotencyKey: the Idempotency-Key header is empty, repeated,
	// longer than MaxIdempotencyKeyLen, not printable ASCII, or uses the
	// reserved "order:" prefix. HTTP 400.
	CodeBadIdempotencyKey = "bad_idempotency_key"
	// CodeBrokerUnavailable: the orderCreated event was not acknowledged by
	// the broker within Config.ProduceTimeout, or another request with the
	// same Idempotency-Key was still publishing it. The outcome is unknown:
	// the order is recorded and its event may still be written (an
	// idempotent producer cannot take back a record it sent). The answer
	// names the order (orderId, statusUrl, Location) and the key to retry
	// with (idempotencyKey; for a request sent without one, a key the
	// server issued, also in the Idempotency-Key response header); a retry
	// with it publishes the same event, so it is one order. HTTP 503.
	CodeBrokerUnavailable = "broker_unavailable"
	// CodeDatabaseUnavailable: the database failed, or did not answer
	// within Config.DBTimeout (locked by another process, say), while
	// recording or reading. Nothing was recorded nor published: the order
	// is not accepted; retry (with or without a key). HTTP 503.
	CodeDatabaseUnavailable = "database_unavailable"
	// CodeUnsupportedMediaType: the request's Content-Type is not
	// application/json (or a +json type), or names a charset other than
	// utf-8. HTTP 415.
	CodeUnsupportedMediaType = "unsupported_media_type"
	// CodeUnsupportedContentEncoding: the request has a Content-Encoding
	// (gzip, ...) other than identity; bodies are read uncompressed only.
	// HTTP 415.
	CodeUnsupportedContentEncoding = "unsupported_content_encoding"
	// CodeBadText: a string member is not valid UTF-8, has an escaped lone
	// surrogate (\ud800), or a control character (U+0000 to U+001F, U+007F
	// to U+009F, NUL included); the message names the member. Such input
	// would otherwise be stored as U+FFFD or as invisible bytes. HTTP 400.
	CodeBadText = "bad_text"
	// CodeTooDeep: the body nests objects and arrays deeper than
	// MaxJSONDepth levels. HTTP 400.
	CodeTooDeep = "too_deep"
	// CodeBadCountry: country is longer than MaxCountryLen characters.
	// HTTP 422.
	CodeBadCountry = "bad_country"
	// CodeBadReference: reference is longer than MaxReferenceLen
	// characters. HTTP 422.
	CodeBadReference = "bad_reference"
	// CodeNotFound: GET /orders/{id} for an id that checkout and the orders
	// service do not know, or a path that is not part of the API. HTTP 404.
	CodeNotFound = "not_found"
	// CodeMethodNotAllowed: a known path with the wrong method; the Allow
	// header lists the right ones. HTTP 405.
	CodeMethodNotAllowed = "method_not_allowed"
	// CodeClientClosedRequest: the client hung up (its request context
	// ended) before the request was recorded or read; nothing was
	// published. Answered with HTTP 499 (the status nginx logs for it), which
	// the client no longer reads: it keeps these out of the 5xx rate and the
	// error log (they are logged at info).
	CodeClientClosedRequest = "client_closed_request"
	// CodeInternal: a bug or corrupt stored data (an event that does not
	// encode, a stored payload that does not decode). HTTP 500.
	CodeInternal = "internal"
)

// Configuration errors returned by New.
var (
	// ErrNoDB: Config.DB is nil.
	ErrNoDB = errors.New("checkout: Config.DB is required")
	// ErrNoSerde: Config.Serde is nil.
	ErrNoSerde = errors.New("checkout: Config.Serde is required")
	// ErrNoProducer: Config.Producer is nil.
	ErrNoProducer = errors.New("checkout: Config.Producer is required")
)

// StatusClientClosedRequest is nginx's non-standard status 499, for a
// request its client abandoned.
const StatusClientClosedRequest = 499

// clientGone is the answer to a request whose client hung up.
func clientGone(err error) *apiError {
	return reject(StatusClientClosedRequest, CodeClientClosedRequest, "the request was cancelled by the client: "+err.Error())
}

// apiError is an HTTP error answer: status, code and message of an
// order.ErrorResponse.
type apiError struct {
	status  int
	code    string
	message string
	// orderID and key are set on a 503 whose outcome is unknown (see
	// unknownOutcome): the recorded order and the key to retry with.
	orderID, key string
	// challenge is the WWW-Authenticate header of a 401 (or a 400 about
	// the Authorization header), "" for the other answers.
	challenge string
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

func reject(status int, code, message string) *apiError {
	return &apiError{status: status, code: code, message: message}
}

// unknownOutcome is the 503 broker_unavailable of an order recorded as
// pending under key whose event may or may not be written.
func unknownOutcome(orderID, key, why string) *apiError {
	e := reject(http.StatusServiceUnavailable, CodeBrokerUnavailable,
		why+"; the outcome is unknown (the event may still be written): retry with Idempotency-Key "+
			strconv.Quote(key)+", which publishes this same order at most once, or GET /orders/"+orderID)
	e.orderID, e.key = orderID, key
	return e
}

func unprocessable(code, message string) *apiError {
	return reject(http.StatusUnprocessableEntity, code, message)
}
