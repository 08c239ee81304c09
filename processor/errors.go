package processor

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrClosed is returned by Run when the processor was already run or closed.
var ErrClosed = errors.New("processor: already run or closed")

// FatalGroupError is returned by Run (Processor and TxnProcessor) when the
// broker refuses this member's group session with an error that no retry can
// fix: the member's configuration or permissions are wrong. franz-go keeps
// retrying the join and only reports such errors through PollFetches (as a
// *kgo.ErrGroupSession); a member that ignored them would stay up, hold no
// partition and look alive to everything but a readiness check of Health.
// Run stops instead, so the process exits and says why.
//
// The errors taken as fatal (Kafka protocol error codes; the Java consumer
// treats them the same way): INVALID_SESSION_TIMEOUT (session timeout outside the broker's group.min/max.session.timeout.ms),
// GROUP_AUTHORIZATION_FAILED (Run returns it as an *AuthorizationError),
// INVALID_GROUP_ID, INCONSISTENT_GROUP_PROTOCOL
// (the group is used by another kind of client), GROUP_MAX_SIZE_REACHED
// (group.max.size), FENCED_INSTANCE_ID and UNRELEASED_INSTANCE_ID (another
// live member uses the same static member id, KIP-345/KIP-848) and
// UNSUPPORTED_ASSIGNOR (KIP-848).
type FatalGroupError struct {
	Group string
	Err   error // the kerr error, wrapped
}

func (e *FatalGroupError) Error() string {
	return fmt.Sprintf("processor: group %s: the broker refuses this member: %v (not retryable: fix the member's configuration or the group's ACLs and restart)", e.Group, e.Err)
}

func (e *FatalGroupError) Unwrap() error { return e.Err }

var fatalGroupErrors = []error{
	kerr.InvalidSessionTimeout,
	kerr.GroupAuthorizationFailed,
	kerr.InvalidGroupID,
	kerr.InconsistentGroupProtocol,
	kerr.GroupMaxSizeReached,
	kerr.FencedInstanceID,
	kerr.UnreleasedInstanceID,
	kerr.UnsupportedAssignor,
}

// fatalGroupError returns a *FatalGroupError if err is a group session error
// (*kgo.ErrGroupSession) wrapping one of fatalGroupErrors, and nil otherwise.
func fatalGroupError(group string, err error) error {
	var gs *kgo.ErrGroupSession
	if !errors.As(err, &gs) {
		return nil
	}
	for _, f := range fatalGroupErrors {
		if errors.Is(gs.Err, f) {
			return &FatalGroupError{Group: group, Err: gs.Err}
		}
	}
	return nil
}

// PermanentError marks a failure that no retry can fix (an undecodable
// payload, a business rule that rejects the record). A record whose handler
// returns a PermanentError skips in-place retries and retry topics and goes to
// the group's dead-letter topic at once.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so that the runtime treats it as permanent. Permanent(nil)
// returns nil. The result's Error() is "permanent: " + err.Error(), and that
// is the text the DLQ record's HeaderErrorMessage carries; errors.Is and
// errors.As see err through it.
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
// the non-empty Class() of an error in err's chain implementing
// `Class() string` (an application's decode errors can name their own
// classes, such as "undecodable" or "unknown_schema_id"), "timeout" for a
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

// PanicError is a handler panic turned into an error: the value passed to
// panic and the stack of the panicking goroutine (runtime/debug.Stack).
// Every mode (New's Handler and BatchHandler, NewTransactional's
// TxnHandler, NewQueue) recovers a handler panic into one, so a panic fails
// its record instead of the process. The runtime writes Stack, when set, to
// the HeaderErrorStack header of the retry-topic or DLQ record (cut to
// 8 KiB), and Error() ("handler panic: <value>") to HeaderErrorMessage. It
// is transient, retried like any transient failure, unless wrapped with
// Permanent, as the Recover middleware of package processor/middleware
// does.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("handler panic: %v", e.Value) }

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

// DeadLetterError is returned by TxnProcessor.Run when a record could not be
// written to the DLQ inside its transaction (the topic was deleted, writes
// to it are not authorized, the record exceeds its max.message.bytes...).
// franz-go retries retriable produce errors by itself, so the error is one
// it gave up on. The transaction was aborted: nothing at or past the record
// was committed in its partition, and the next run starts again from the
// committed offsets. The stage stops rather than go on, because in the
// exactly-once mode the only way past the record is a commit of its offset,
// which without its DLQ copy would lose it; and retrying would abort every
// transaction that holds it, silently. Fix the DLQ topic and restart.
type DeadLetterError struct {
	Topic     string // the record's topic, partition and offset
	Partition int32
	Offset    int64
	DLQ       string // the DLQ topic
	Err       error  // the produce error
}

func (e *DeadLetterError) Error() string {
	return fmt.Sprintf("processor: record %s[%d]@%d could not be written to the DLQ topic %s: %v (transaction aborted, stage stopped; "+
		"check that %s exists and the member may write to it, then restart)", e.Topic, e.Partition, e.Offset, e.DLQ, e.Err, e.DLQ)
}

func (e *DeadLetterError) Unwrap() error { return e.Err }
