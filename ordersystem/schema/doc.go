// Package schema holds the contracts of the order system's events and the
// serde that enforces them on the way into Kafka and on the way out.
//
// # Contracts
//
// Each topic has one event type from package order and three files:
//
//	topic              Go type                  Avro (embedded)               JSON Schema (embedded)
//	orderCreated       order.OrderCreated       avro/orderCreated.avsc       json/orderCreated.json
//	paymentProcessed   order.PaymentProcessed   avro/paymentProcessed.avsc   json/paymentProcessed.json
//	shipmentRequested  order.ShipmentRequested  avro/shipmentRequested.avsc  json/shipmentRequested.json
//
// The Avro records (namespace io.ordercast.events) match the Go structs
// field for field, under their JSON names: money is a long in thousandths
// (totalMilli, amountMilli, ...), times are long timestamp-millis (so they
// round-trip at millisecond precision, in UTC), optional fields are
// ["null", T] unions with default null, and "" in Go is null on the wire
// (customerId null or "" means a guest). Payment status and method are Avro
// enums (PAID|REFUSED, WALLET|CARD).
//
// The JSON Schemas are generated from the Avro schemas (genJSONSchema; a test
// keeps the files in step: regenerate with go test ./schema -run
// TestJSONSchemaGenerated -update) and validate plain-JSON values from
// producers without a registry, such as a Node.js kafkajs service: the same
// field names, integers for money, RFC 3339 strings for times (what
// JSON.stringify of a Date gives), null or absent for optional fields;
// unknown fields are allowed. They are validated by a small validator of the
// exact draft 2020-12 subset the generator emits (type, properties,
// required, items, enum, format date-time), which refuses any other keyword
// when the package loads, so no rule is ever silently ignored. Validate's rules (non-empty ids, line
// arithmetic, ...) are applied after decoding, whatever the format.
//
// # Wire format and registry
//
// Encode writes the Confluent wire format (byte 0, 4-byte big-endian schema
// id, Avro binary). New registers each schema under the TopicNameStrategy
// subject "<topic>-value". Decode reads any schema id registered under the
// topic's subject, resolving the writer's schema to this build's (Avro schema
// resolution), so that consumers built from this package read records of
// older producers as long as the schemas stay BACKWARD compatible, and of
// newer producers whose changes they can skip (fields added with a default).
//
// # Evolving a schema
//
// avro/history/<topic>.v<N>.avsc keeps every released version, embedded in
// the build (Versions). A change to avro/<topic>.avsc must be readable with
// every released version (fields added with defaults, fields removed, never
// a type change or a required field added); TestBackwardCompatibleWithHistory
// fails otherwise, and also until the new version is released by copying it
// to the next vN file. As with the registry's BACKWARD level, consumers are
// upgraded before producers; WithWriterVersion pins what a producer writes to
// a released version during a rolling upgrade (it still reads every version
// fully), and WithVersion pins a topic both ways (encode and decode exactly
// as a build that only knew it), for running "the old build" in tests.
//
// Released versions:
//
//	orderCreated       v1 initial; v2 adds channel (["null", "string"], default null)
//	paymentProcessed   v1 initial
//	shipmentRequested  v1 initial
//
// # Errors
//
// Every failure of a record is an *Error with a stable class (Class*) for
// the DLQ headers, and is permanent (IsDecodeError). Registry outages are
// the only transient decode failures (ErrRegistryUnavailable).
package schema
