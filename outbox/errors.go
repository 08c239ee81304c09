package outbox

import "errors"

// ErrRunning is returned by [Relay.Run] when the relay is already running
// (Run was called again before the first call returned).
var ErrRunning = errors.New("outbox: relay already running")

// fatalError ends Run instead of being retried: the Kafka client is closed,
// or the test hook simulated a crash.
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }
func (e *fatalError) Unwrap() error { return e.err }
