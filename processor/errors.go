package processor

import (
	"context"
	"errors"
	"fmt"
)

// ErrClosed is returned by Run when the processor was already run or closed.
var ErrClosed = errors.New("processor: already run or closed")

// PermanentError marks a failure that no retry can fix (an undecodable
// payload, a business rule that rejects the record). A record whose handler
// returns a PermanentError skips in-place retries and retry topics and goes to
// the group's dead-letter topic at once.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so that the runtime treats it as permanent. Permanent(nil)
// returns nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// Permanentf is fmt.Errorf followed by Permanent.
func Permanentf(format string, args ...any) error { return Permanent(fmt.Errorf(format, args...)) }

// IsPermanent reports whether err, or any error it wraps, is permanent: a
// *PermanentError, or an error with a method `Permanent() bool` returning true
// (so other packages, such as schema decode errors, can mark themselves without
// importing this one). Every other error, including context.DeadlineExceeded
// from a handler timeout, is transient.
func IsPermanent(err error) bool {
	if err == nil {
		return false
	}
	var pe *PermanentError
	if errors.As(err, &pe) {
		return true
	}
	var p interface{ Permanent() bool }
	if errors.As(err, &p) {
		return p.Permanent()
	}
	return false
}

// The classes ErrorClass gives errors without a Class() of their own.
const (
	ClassTimeout   = "timeout"   // the handler's context deadline (HandlerTimeout) passed
	ClassPermanent = "permanent" // a permanent error (Permanent, or Permanent() bool true)
	ClassTransient = "transient" // any other error
)

// ErrorClass returns the short class of a handler error that the runtime puts
// in the ordercast-error-class header of a DLQ record and in metric labels:
// the Class() of an error implementing `Class() string` (the schema package's
// decode errors do: "undecodable", "unknown_schema_id", ...), "timeout" for a
// handler timeout, "permanent" for other permanent errors and "transient"
// otherwise.
func ErrorClass(err error) string {
	var c interface{ Class() string }
	if errors.As(err, &c) {
		if s := c.Class(); s != "" {
			return s
		}
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return ClassTimeout
	case IsPermanent(err):
		return ClassPermanent
	default:
		return ClassTransient
	}
}

// RecordError is a failure tied to one record. The runtime logs it and passes
// it to DLQ headers; it wraps the handler's error.
type RecordError struct {
	Topic     string
	Partition int32
	Offset    int64
	Err       error
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("%s[%d]@%d: %v", e.Topic, e.Partition, e.Offset, e.Err)
}
func (e *RecordError) Unwrap() error { return e.Err }
