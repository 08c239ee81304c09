package schema

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Every error that Encode, Decode or Validate returns for a
// record (rather than for the registry) is an *Error that wraps exactly one of
// the first six; test with errors.Is. They are permanent: the same bytes or
// the same value fail the same way every time, so a consumer sends the record
// to its DLQ instead of retrying (see IsDecodeError).
var (
	// ErrUndecodable: the bytes are neither Confluent wire-format Avro nor a
	// JSON object (empty or nil value, bad magic byte, truncated or trailing
	// bytes, corrupt Avro, malformed JSON). Class "undecodable".
	ErrUndecodable = errors.New("undecodable")

	// ErrUnknownSchemaID: the wire-format header names a schema id that the
	// registry does not know. Class "unknown_schema_id".
	ErrUnknownSchemaID = errors.New("unknown schema id")

	// ErrWrongSubject: the schema id exists but is not registered under the
	// topic's subject "<topic>-value" (a record of another topic, or a
	// producer using another subject name strategy). Class "wrong_subject".
	ErrWrongSubject = errors.New("schema id registered under another subject")

	// ErrIncompatibleSchema: the writer schema is registered under the
	// topic's subject but cannot be read with this build's reader schema (not
	// Avro, not parseable, or not backward compatible). Class
	// "incompatible_schema".
	ErrIncompatibleSchema = errors.New("writer schema incompatible with reader schema")

	// ErrInvalid: the event does not satisfy its contract: a JSON payload
	// that fails the topic's JSON Schema, or any event (encoded or decoded)
	// that breaks a rule of Validate. The message names the field. Class
	// "invalid".
	ErrInvalid = errors.New("invalid event")

	// ErrUnknownTopic: the topic has no schema in this package. Class
	// "unknown_topic".
	ErrUnknownTopic = errors.New("unknown topic")

	// ErrUnsupportedType: the Go value passed to Encode, Decode or Validate
	// is not the topic's event type (Decode needs a non-nil pointer to it).
	// Class "unsupported_type".
	ErrUnsupportedType = errors.New("unsupported type for topic")

	// ErrRegistryUnavailable is returned (wrapped, never inside an *Error)
	// when Decode could not reach the schema registry or the registry
	// answered anything but "not found" while looking up a schema id. It is
	// transient: IsDecodeError reports false, so the consumer retries rather
	// than dead-lettering a record that is probably fine.
	ErrRegistryUnavailable = errors.New("schema registry unavailable")
)

// Error classes, as returned by (*Error).Class and ErrorClass. They are
// stable strings meant for a DLQ header and metric labels.
const (
	ClassUndecodable        = "undecodable"
	ClassUnknownSchemaID    = "unknown_schema_id"
	ClassWrongSubject       = "wrong_subject"
	ClassIncompatibleSchema = "incompatible_schema"
	ClassInvalid            = "invalid"
	ClassUnknownTopic       = "unknown_topic"
	ClassUnsupportedType    = "unsupported_type"
)

var classOf = map[error]string{
	ErrUndecodable:        ClassUndecodable,
	ErrUnknownSchemaID:    ClassUnknownSchemaID,
	ErrWrongSubject:       ClassWrongSubject,
	ErrIncompatibleSchema: ClassIncompatibleSchema,
	ErrInvalid:            ClassInvalid,
	ErrUnknownTopic:       ClassUnknownTopic,
	ErrUnsupportedType:    ClassUnsupportedType,
}

// Error is the permanent error of an event that cannot be encoded or decoded.
// It wraps one sentinel (ErrUndecodable, ErrUnknownSchemaID, ErrWrongSubject,
// ErrIncompatibleSchema, ErrInvalid, ErrUnknownTopic, ErrUnsupportedType) and
// possibly an underlying cause; errors.Is works with both. An *Error is
// immutable and safe to share between goroutines.
type Error struct {
	// Topic is the topic the record was encoded for or decoded from.
	Topic string
	// SchemaID is the schema id of the wire-format header, or 0 when there
	// was none (JSON, or bytes too short for a header).
	SchemaID int
	// Field is the offending field, as a JSON path such as "orderId" or
	// "lines[2].quantity", for ErrInvalid; empty otherwise.
	Field string
	// Reason says what was wrong, for people.
	Reason string

	kind  error // the sentinel
	cause error // underlying error, may be nil
}

func newError(kind error, topic string, id int, field, reason string, cause error) *Error {
	return &Error{Topic: topic, SchemaID: id, Field: field, Reason: reason, kind: kind, cause: cause}
}

// Error formats the error as
// "schema: <topic>: <sentinel>[ (schema id N)][: field <f>]: <reason>[: <cause>]".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("schema: ")
	if e.Topic != "" {
		b.WriteString(e.Topic)
		b.WriteString(": ")
	}
	b.WriteString(e.kind.Error())
	if e.SchemaID != 0 {
		fmt.Fprintf(&b, " (schema id %d)", e.SchemaID)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, ": field %q", e.Field)
	}
	if e.Reason != "" {
		b.WriteString(": ")
		b.WriteString(e.Reason)
	}
	if e.cause != nil {
		b.WriteString(": ")
		b.WriteString(e.cause.Error())
	}
	return b.String()
}

// Class returns the short, stable error class (one of the Class* constants),
// suitable for a DLQ header such as "x-error-class".
func (e *Error) Class() string { return classOf[e.kind] }

// Unwrap returns the sentinel and, when there is one, the underlying cause.
func (e *Error) Unwrap() []error {
	if e.cause == nil {
		return []error{e.kind}
	}
	return []error{e.kind, e.cause}
}

// IsDecodeError reports whether err is (or wraps) an *Error: a permanent
// failure of this record's bytes or value that no retry can fix, to be sent
// to the DLQ. It reports false for nil, for ErrRegistryUnavailable and for
// context errors, which are transient.
func IsDecodeError(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

// ErrorClass returns the class of the *Error in err's chain (one of the
// Class* constants), or "" when err is nil or not an *Error.
func ErrorClass(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Class()
	}
	return ""
}
