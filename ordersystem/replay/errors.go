package replay

import (
	"fmt"
	"net/http"
	"time"
)

// UnreachableError is returned by [Replayer.Run] when the first sale to use
// up its Options.MaxAttempts did so before checkout had answered any attempt
// of the run: every attempt met a network error (connection refused, no
// route, a failed name lookup, a TLS failure) or a timeout. The other sales
// would fail the same way, so Run stops instead of trying each of them; the
// sales given up count as Failed, the others as Unfinished. Once checkout
// has answered an attempt, whatever its status, Run never returns it.
type UnreachableError struct {
	// URL is where the orders were POSTed.
	URL string
	// Attempts is the number of attempts made, none of them answered.
	Attempts int
	// Elapsed is the time from the start of Run.
	Elapsed time.Duration
	// Cause is the last attempt's error, such as "dial tcp
	// 127.0.0.1:8080: connect: connection refused".
	Cause string
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("replay: checkout at %s did not answer any of %d attempts in %s (last: %s)",
		e.URL, e.Attempts, fmtDuration(e.Elapsed), e.Cause)
}

// NotCheckoutError is returned by [Replayer.Run] when the URL answered a
// sale with 404 Not Found or 405 Method Not Allowed, whatever the body:
// checkout's POST /orders never answers either (checkout answers 404
// not_found only for a path outside its API, such as /healthz/orders or
// /bogus/path/orders, and 405 method_not_allowed only for a wrong method),
// so the URL is not checkout's POST /orders (a wrong path or port, a
// registry, a metrics port). Every other sale would be refused the same
// way, so Run stops at once, even if earlier sales were accepted; the sales
// without an outcome yet count as Unfinished, and the refused ones are not
// counted as rejected.
type NotCheckoutError struct {
	// URL is where the orders were POSTed (Options.BaseURL + "/orders").
	URL string
	// Status is the HTTP status of the answer.
	Status int
	// Code and Message are the code and error of a JSON error body in
	// checkout's form (order.ErrorResponse), such as "not_found" and "no
	// such resource: POST /bogus/path/orders"; empty without one.
	Code, Message string
	// Body is the start of the answer's body when it is not in checkout's
	// form, for the message; empty otherwise.
	Body string
}

func (e *NotCheckoutError) Error() string {
	msg := fmt.Sprintf("replay: %s does not look like checkout's POST /orders: it answered %d %s, which checkout's POST /orders never does",
		e.URL, e.Status, http.StatusText(e.Status))
	switch {
	case e.Code != "" && e.Message != "":
		msg += fmt.Sprintf(" (code %s: %s)", e.Code, e.Message)
	case e.Code != "":
		msg += fmt.Sprintf(" (code %s)", e.Code)
	case e.Body != "":
		msg += fmt.Sprintf(" (body %q)", e.Body)
	}
	return msg
}

// DefaultMaxRowErrorRate is the default of the fraction of malformed data
// rows above which [Summary.CheckInput] fails a replay: 0.01 (1%). The
// Online Retail data set has none; a file with more is most likely not
// in its shape.
const DefaultMaxRowErrorRate = 0.01

// InputError is returned by [Summary.CheckInput] for a file that a replay
// should fail on whatever checkout answers: one that gives no order to
// send, or with too many malformed rows.
type InputError struct {
	// Reason says which, with the counts, for people.
	Reason string
	// RowErrors and Lines are the malformed and all data rows; Sales the
	// sale invoices (the orders to send).
	RowErrors, Lines, Sales int
}

func (e *InputError) Error() string { return "replay: " + e.Reason }
