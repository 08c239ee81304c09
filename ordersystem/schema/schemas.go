package schema

import (
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"

	"github.com/hamba/avro/v2"
)

//go:embed avro/*.avsc avro/history/*.avsc json/*.json
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
	// version is the released version (avro/history/<topic>.v<N>.avsc)
	// this contract is; pinned is true when it is an older one than the
	// current file, chosen with WithVersion or WithWriterVersion.
	version int
	pinned  bool
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
		ct.version = len(releases[topic])
		m[topic] = ct
	}
	return m
}()

// releases holds the text of every released schema version by topic:
// releases[topic][n-1] is avro/history/<topic>.v<n>.avsc. The schema gate
// (TestBackwardCompatibleWithHistory) keeps the newest one equal to the
// current file and every version readable by it.
var releases = func() map[string][]string {
	m, err := loadReleases()
	if err != nil {
		panic(err)
	}
	return m
}()

var releaseName = regexp.MustCompile(`^(.+)\.v([1-9][0-9]*)\.avsc$`)

func loadReleases() (map[string][]string, error) {
	entries, err := fs.ReadDir(files, "avro/history")
	if err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	byTopic := map[string]map[int]string{}
	for _, e := range entries {
		m := releaseName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("schema: avro/history/%s: name must be <topic>.v<N>.avsc", e.Name())
		}
		n, _ := strconv.Atoi(m[2])
		b, err := files.ReadFile("avro/history/" + e.Name())
		if err != nil {
			return nil, fmt.Errorf("schema: %w", err)
		}
		if byTopic[m[1]] == nil {
			byTopic[m[1]] = map[int]string{}
		}
		byTopic[m[1]][n] = string(b)
	}
	out := make(map[string][]string, len(byTopic))
	for topic, vs := range byTopic {
		for n := 1; n <= len(vs); n++ {
			text, ok := vs[n]
			if !ok {
				return nil, fmt.Errorf("schema: avro/history: %s has %d versions but no v%d", topic, len(vs), n)
			}
			out[topic] = append(out[topic], text)
		}
	}
	return out, nil
}

// releasedContract returns the contract of topic's released version n: the
// current contract when n is the newest release, else one built from
// avro/history/<topic>.v<n>.avsc with the JSON Schema generated from it.
// opt names the option asking for it in errors ("WithVersion").
func releasedContract(opt, topic string, n int) (*contract, error) {
	cur, ok := contracts[topic]
	if !ok {
		return nil, fmt.Errorf("schema: %s(%q, %d): %w", opt, topic, n, ErrUnknownTopic)
	}
	vs := releases[topic]
	if n < 1 || n > len(vs) {
		return nil, fmt.Errorf("schema: %s(%q, %d): not a released version; %s has v1 to v%d (avro/history/%s.v<N>.avsc)",
			opt, topic, n, topic, len(vs), topic)
	}
	if n == len(vs) {
		return cur, nil
	}
	as, err := avro.ParseWithCache(vs[n-1], "", &avro.SchemaCache{})
	if err != nil {
		return nil, fmt.Errorf("schema: %s: parse avro/history/%s.v%d.avsc: %w", topic, topic, n, err)
	}
	jt, err := genJSONSchema(topic, as)
	if err != nil {
		return nil, fmt.Errorf("schema: %s: JSON Schema of v%d: %w", topic, n, err)
	}
	js, err := parseJSONSchema(jt)
	if err != nil {
		return nil, fmt.Errorf("schema: %s: JSON Schema of v%d: %w", topic, n, err)
	}
	return &contract{
		topic:    topic,
		subject:  cur.subject,
		avroText: vs[n-1],
		avro:     as,
		jsonText: string(jt),
		json:     js,
		codec:    cur.codec,
		version:  n,
		pinned:   true,
	}, nil
}

// Versions returns the number of released versions of a topic's schema
// (avro/history/<topic>.v1.avsc to .v<N>.avsc): the newest, N, is the schema
// this build writes by default, and 1 to N are what WithVersion and
// WithWriterVersion accept. It returns 0 for a topic without a schema.
func Versions(topic string) int { return len(releases[topic]) }

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
