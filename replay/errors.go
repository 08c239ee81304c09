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
// sale with 404 Not Found or 405 Method Not Allowed without checkout's JSON
// error body (order.ErrorResponse with a code) before anything there had
// answered like checkout: the URL is not checkout's POST /orders (a
// registry, a metrics port, a wrong path prefix). Every other sale would be
// refused the same way, so Run stops at once; the sales not refused yet
// count as Unfinished, and the refused ones are not counted as rejected.
type NotCheckoutError struct {
	// URL is where the orders were POSTed (Options.BaseURL + "/orders").
	URL string
	// Status is the HTTP status of the answer.
	Status int
	// Body is the start of the answer's body, for the message.
	Body string
}

func (e *NotCheckoutError) Error() string {
	msg := fmt.Sprintf("replay: %s does not look like checkout's POST /orders: it answered %d %s without checkout's JSON error body",
		e.URL, e.Status, http.StatusText(e.Status))
	if e.Body != "" {
		msg += fmt.Sprintf(" (body %q)", e.Body)
	}
	return msg
}
