// Package semconv holds every OpenTelemetry attribute, span and event name
// the project's tracing uses, in one place: the messaging semantic
// conventions v1.44.0 for Kafka (https://opentelemetry.io/docs/specs/semconv/messaging/kafka/,
// .../messaging/messaging-spans/), the names of the runtime's own attributes
// and events, and the choice OTEL_SEMCONV_STABILITY_OPT_IN makes between the
// current names and the earlier experimental ones.
package semconv

import (
	"os"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
)

// SchemaURL is the schema of the conventions these names follow.
const SchemaURL = "https://opentelemetry.io/schemas/1.44.0"

// The attributes of messaging spans, v1.44.0.
const (
	MessagingSystem                 = "messaging.system"                   // "kafka"
	MessagingOperationName          = "messaging.operation.name"           // "send", "poll", "process", "commit"
	MessagingOperationType          = "messaging.operation.type"           // "send", "receive", "process", "settle"
	MessagingDestinationName        = "messaging.destination.name"         // the topic
	MessagingDestinationPartitionID = "messaging.destination.partition.id" // the partition, as a string
	MessagingConsumerGroupName      = "messaging.consumer.group.name"
	MessagingKafkaOffset            = "messaging.kafka.offset"
	MessagingKafkaMessageKey        = "messaging.kafka.message.key"
	MessagingBatchMessageCount      = "messaging.batch.message_count"
	ErrorType                       = "error.type"
)

// The experimental names (semantic conventions 1.24 and earlier, those of
// franz-go's kotel plugin) that the current ones replaced, emitted as well
// under OTEL_SEMCONV_STABILITY_OPT_IN=messaging/dup.
const (
	OldMessagingOperation          = "messaging.operation" // "publish", "receive", "process"
	OldMessagingKafkaPartition     = "messaging.kafka.destination.partition"
	OldMessagingKafkaConsumerGroup = "messaging.kafka.consumer.group"
	OldMessagingKafkaOffset        = "messaging.kafka.message.offset"
)

// The runtime's own attributes and span events (not part of the
// conventions, so under the ordercast. namespace).
const (
	// Attempt is the handler attempt a process span covers: 1 for the
	// record's first handler call, counting the calls of earlier retry-topic
	// hops.
	Attempt = "ordercast.attempt"
	// ErrorClass is the runtime's class of a handler error (transient,
	// permanent, timeout), on the span events of a forward.
	ErrorClass = "ordercast.error_class"
	// EventRetryTopicHop: the record is written to a retry topic.
	EventRetryTopicHop = "ordercast.retry_topic_hop"
	// EventDeadLetter: the record is written to the DLQ.
	EventDeadLetter = "ordercast.dead_letter"
	// EventCommit: an offset committed, one event per partition.
	EventCommit = "ordercast.commit"
	// EventOutboxEnqueued: a record stored in the outbox, published later
	// by the relay (whose send span continues this trace).
	EventOutboxEnqueued = "ordercast.outbox_enqueued"
)

// SystemKafka is messaging.system's value.
const SystemKafka = "kafka"

// Operation is one kind of messaging span: its operation name (the first
// word of the span name) and type.
type Operation struct{ Name, Type, old string }

// The operations of the conventions for Kafka.
var (
	Send    = Operation{Name: "send", Type: "send", old: "publish"}
	Poll    = Operation{Name: "poll", Type: "receive", old: "receive"}
	Process = Operation{Name: "process", Type: "process", old: "process"}
	Commit  = Operation{Name: "commit", Type: "settle"} // no experimental equivalent
)

// SpanName is the span name of op on topic: "send orderCreated".
func SpanName(op Operation, topic string) string { return op.Name + " " + topic }

// Conv says which names to emit.
type Conv struct {
	// Old adds the experimental names next to the current ones.
	Old bool
}

// EnvOptIn is the environment variable read by FromEnv.
const EnvOptIn = "OTEL_SEMCONV_STABILITY_OPT_IN"

// FromEnv reads OTEL_SEMCONV_STABILITY_OPT_IN, a comma-separated list, as
// the conventions describe it for messaging: "messaging" emits the current
// names only, "messaging/dup" both the current and the experimental ones.
// Without either it emits the current names: this instrumentation never
// emitted another version, so there is none to keep by default.
func FromEnv() Conv { return Parse(os.Getenv(EnvOptIn)) }

// Parse is FromEnv on the value v.
func Parse(v string) Conv {
	var c Conv
	for _, s := range strings.Split(v, ",") {
		if strings.TrimSpace(s) == "messaging/dup" {
			c.Old = true
		}
	}
	return c
}

// Record describes the record, or the partition, a span is about; a
// negative Partition or Offset, an empty Group and a nil Key are left out.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Group     string
	Key       []byte
}

// Attrs returns the attributes of an op span about r.
func (c Conv) Attrs(op Operation, r Record) []attribute.KeyValue {
	a := make([]attribute.KeyValue, 0, 12)
	a = append(a,
		attribute.String(MessagingSystem, SystemKafka),
		attribute.String(MessagingOperationName, op.Name),
		attribute.String(MessagingOperationType, op.Type),
		attribute.String(MessagingDestinationName, r.Topic),
	)
	if r.Partition >= 0 {
		a = append(a, attribute.String(MessagingDestinationPartitionID, strconv.Itoa(int(r.Partition))))
	}
	if r.Group != "" {
		a = append(a, attribute.String(MessagingConsumerGroupName, r.Group))
	}
	if r.Offset >= 0 {
		a = append(a, attribute.Int64(MessagingKafkaOffset, r.Offset))
	}
	if r.Key != nil && utf8.Valid(r.Key) {
		a = append(a, attribute.String(MessagingKafkaMessageKey, string(r.Key)))
	}
	if c.Old {
		if op.old != "" {
			a = append(a, attribute.String(OldMessagingOperation, op.old))
		}
		if r.Partition >= 0 {
			a = append(a, attribute.Int64(OldMessagingKafkaPartition, int64(r.Partition)))
		}
		if r.Group != "" {
			a = append(a, attribute.String(OldMessagingKafkaConsumerGroup, r.Group))
		}
		if r.Offset >= 0 {
			a = append(a, attribute.Int64(OldMessagingKafkaOffset, r.Offset))
		}
	}
	return a
}
