package replay

import (
	"fmt"
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
