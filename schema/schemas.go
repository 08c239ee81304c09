package schema

import (
	"embed"
	"fmt"
	"slices"

	"github.com/hamba/avro/v2"
)

//go:embed avro/*.avsc json/*.json
var files embed.FS

// avroAPI is the hamba/avro configuration of every encode and decode.
//
// TagKey "json": the Avro field names are the JSON names of the order
// package's types, so order.Line is encoded as it is (no copy) and an Avro
// field can never drift from its JSON twin.
//
// MaxSliceAllocSize bounds the array length a corrupt or hostile payload can
// make the decoder allocate (hamba's default is 2^48 elements, an OOM rather
// than an error). MaxLines is far above any real order.
var avroAPI = avro.Config{
	TagKey:            "json",
	MaxSliceAllocSize: MaxLines,
	MaxByteSliceSize:  1 << 20,
}.Freeze()

// MaxLines is the most lines an OrderCreated may carry; Validate enforces it
// and the Avro decoder refuses longer arrays before allocating them.
const MaxLines = 10_000

// contract is one topic's schemas and codec.
type contract struct {
	topic    string
	subject  string
	avroText string
	avro     avro.Schema
	jsonText string
	json     *jsonSchema
	codec    eventCodec
}

// contracts holds every topic's contract, parsed once at init; the embedded
// files are part of the build, so a malformed one is a programming error that
// the package's tests catch.
var contracts = func() map[string]*contract {
	m := make(map[string]*contract)
	for topic, c := range codecs {
		ct, err := loadContract(topic, c)
		if err != nil {
			panic(err)
		}
		m[topic] = ct
	}
	return m
}()

func loadContract(topic string, c eventCodec) (*contract, error) {
	at, err := files.ReadFile("avro/" + topic + ".avsc")
	if err != nil {
		return nil, fmt.Errorf("schema: %s: %w", topic, err)
	}
	// A private cache: named types of one file never leak into another
	// parse (hamba's default cache is global).
	as, err := avro.ParseBytesWithCache(at, "", &avro.SchemaCache{})
	if err != nil {
		return nil, fmt.Errorf("schema: %s: parse avro/%s.avsc: %w", topic, topic, err)
	}
	jt, err := files.ReadFile("json/" + topic + ".json")
	if err != nil {
		return nil, fmt.Errorf("schema: %s: %w", topic, err)
	}
	js, err := parseJSONSchema(jt)
	if err != nil {
		return nil, fmt.Errorf("schema: %s: parse json/%s.json: %w", topic, topic, err)
	}
	return &contract{
		topic:    topic,
		subject:  SubjectFor(topic),
		avroText: string(at),
		avro:     as,
		jsonText: string(jt),
		json:     js,
		codec:    c,
	}, nil
}

// SubjectFor returns the schema registry subject of a topic's record values
// under the TopicNameStrategy: "<topic>-value".
func SubjectFor(topic string) string { return topic + "-value" }

// Topics returns the topics that have a schema, sorted:
// order.TopicOrderCreated, order.TopicPaymentProcessed,
// order.TopicShipmentRequested.
func Topics() []string {
	ts := make([]string, 0, len(contracts))
	for t := range contracts {
		ts = append(ts, t)
	}
	slices.Sort(ts)
	return ts
}

// AvroSchemaText returns the Avro schema (.avsc JSON text) of a topic's
// values, as embedded in this build, or "" for a topic without a schema.
func AvroSchemaText(topic string) string {
	if c, ok := contracts[topic]; ok {
		return c.avroText
	}
	return ""
}

// JSONSchemaText returns the JSON Schema (draft 2020-12) that plain-JSON
// values of a topic must satisfy, or "" for a topic without a schema. It is
// generated from the Avro schema (see the package documentation).
func JSONSchemaText(topic string) string {
	if c, ok := contracts[topic]; ok {
		return c.jsonText
	}
	return ""
}
