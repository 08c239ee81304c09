// This file holds the order system's names for the runtime's DLQ tools
// (processor/dlq): the operator's commands (`ordercast dlq ...`) and the
// console use them, with the order system's payload decoder (Decoder,
// payload.go) and error classes (ErrorClasses).

package ops

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/ordersystem/schema"
	"github.com/ordercast/ordercast/processor"
	"github.com/ordercast/ordercast/processor/dlq"
)

// The DLQ tools, as processor/dlq defines them.
type (
	DLQ             = dlq.DLQ
	DLQRecord       = dlq.Record
	Coord           = dlq.Coord
	Header          = dlq.Header
	Selection       = dlq.Selection
	PartitionState  = dlq.PartitionState
	Listing         = dlq.Listing
	BlockedKey      = dlq.BlockedKey
	ReplayMark      = dlq.ReplayMark
	Target          = dlq.Target
	ReplayOptions   = dlq.ReplayOptions
	ReplayedRecord  = dlq.ReplayedRecord
	Refusal         = dlq.Refusal
	ReplayResult    = dlq.ReplayResult
	RefusedError    = dlq.RefusedError
	PurgeOptions    = dlq.PurgeOptions
	PurgedPartition = dlq.PurgedPartition
	PurgeResult     = dlq.PurgeResult
)

// Replay targets (dlq.TargetSource, dlq.TargetRetry).
const (
	TargetSource = dlq.TargetSource
	TargetRetry  = dlq.TargetRetry
)

// StateTopic is the topic of the DLQ tools' purge positions and replay
// marks (dlq.StateTopic).
const StateTopic = dlq.StateTopic

// NewDLQ returns the DLQ tools for group (dlq.New).
func NewDLQ(group string, opts ...kgo.Opt) (*DLQ, error) { return dlq.New(group, opts...) }

// ParseCoord parses "<topic>/<partition>/<offset>" (dlq.ParseCoord).
func ParseCoord(s string) (Coord, error) { return dlq.ParseCoord(s) }

// ErrorClasses are the values of the ordercast-error-class header that the
// order system's consumers write (processor.ErrorClass): the schema
// package's classes of a record that cannot be decoded or breaks its
// contract, then "timeout" (a handler timeout), "permanent" (another
// permanent handler error) and "transient" (any other error, after the
// retries). A DLQ written by other handlers may hold other classes: those of
// errors with a Class() string method.
var ErrorClasses = []string{
	schema.ClassUndecodable, schema.ClassUnknownSchemaID, schema.ClassWrongSubject, schema.ClassIncompatibleSchema,
	schema.ClassInvalid, schema.ClassUnknownTopic, schema.ClassUnsupportedType,
	processor.ClassTimeout, processor.ClassPermanent, processor.ClassTransient,
}
