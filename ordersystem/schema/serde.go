package schema

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
)

// Format is the encoding Decode found in a record value.
type Format uint8

// Formats recognised by Decode.
const (
	// FormatUnknown: the bytes were not recognised (or the topic or target
	// was wrong before the bytes were looked at).
	FormatUnknown Format = iota
	// FormatAvro: Confluent wire format, magic byte 0, a 4-byte big-endian
	// schema id, then the Avro binary body.
	FormatAvro
	// FormatJSON: a plain JSON object, as sent by producers without a
	// registry.
	FormatJSON
)

// String returns "unknown", "avro" or "json".
func (f Format) String() string {
	switch f {
	case FormatAvro:
		return "avro"
	case FormatJSON:
		return "json"
	}
	return "unknown"
}

const (
	magicByte  = 0
	headerSize = 5

	defaultLookupTimeout = 10 * time.Second
	defaultNegativeTTL   = 30 * time.Second
)

// Opt configures New.
type Opt func(*options)

type options struct {
	lookupTimeout time.Duration
	negativeTTL   time.Duration
	lookupOnly    bool
	versions      map[string]int // topic -> released version, see WithVersion
	writers       map[string]int // topic -> released version, see WithWriterVersion
}

// WithLookupTimeout bounds each registry lookup that Decode makes for a
// schema id it has not seen (default 10s). d <= 0 keeps the default.
func WithLookupTimeout(d time.Duration) Opt {
	return func(o *options) {
		if d > 0 {
			o.lookupTimeout = d
		}
	}
}

// WithNegativeCacheTTL sets how long Decode remembers that a schema id is
// unknown, registered under another subject or incompatible before asking
// the registry again (default 30s), so that a burst of bad records does not
// become a burst of registry requests. d <= 0 disables negative caching.
// Good answers are cached forever: a schema id never changes its schema.
func WithNegativeCacheTTL(d time.Duration) Opt {
	return func(o *options) { o.negativeTTL = max(d, 0) }
}

// WithLookupOnly makes New look the schemas up (POST /subjects/{subject})
// instead of registering them, for principals without write access to the
// registry. New then fails if a schema of this build is not registered.
func WithLookupOnly() Opt {
	return func(o *options) { o.lookupOnly = true }
}

// WithVersion makes the Serde encode and decode topic's values with its
// released schema version n (avro/history/<topic>.v<n>.avsc, 1 to
// Versions(topic)) instead of the current one, exactly as a build that only
// knew version n would:
//
//   - New registers (or, with WithLookupOnly, looks up) version n under the
//     subject, and Encode writes its schema id and leaves out the fields
//     version n lacks (an OrderCreated's Channel under orderCreated v1);
//   - Decode reads Avro records of any writer version with version n as the
//     reader schema, so fields it lacks are skipped and stay zero in the
//     event; a JSON value is validated with version n's JSON Schema
//     (generated from it) and its members that version n does not declare
//     are ignored, as encoding/json ignores unknown fields.
//
// Default: every topic at its newest released version, Versions(topic),
// which is the current schema (n equal to it changes nothing). The last
// WithVersion for a topic wins. New fails, naming the versions there are,
// when the topic has no schema (ErrUnknownTopic) or n is not a released
// version.
//
// It emulates the old build, in tests side by side with new ones. It is
// not the production rollout pin: an instance pinned with it also reads as
// the old build, so its consumers drop the fields version n lacks (an
// orderCreated v2 record's channel) from every newer record. Production
// pins producers with WithVersion's writer-only twin, WithWriterVersion.
// New fails when WithVersion and WithWriterVersion name the same topic.
func WithVersion(topic string, n int) Opt {
	return func(o *options) {
		if o.versions == nil {
			o.versions = map[string]int{}
		}
		o.versions[topic] = n
	}
}

// WithWriterVersion makes the Serde encode topic's values with its released
// schema version n (avro/history/<topic>.v<n>.avsc, 1 to Versions(topic))
// while it keeps decoding with the newest schema of this build:
//
//   - New registers (or, with WithLookupOnly, looks up) version n under the
//     subject, and Encode writes its schema id and leaves out the fields
//     version n lacks (an OrderCreated's Channel under orderCreated v1),
//     exactly as WithVersion does;
//   - Decode reads records of every version, the ones written with version
//     n or older and the newer ones, with the current schema, as a Serde
//     without the option does: no field of a newer record is dropped.
//
// Default: every topic written with its newest released version (n equal to
// Versions(topic) changes nothing). The last WithWriterVersion for a topic
// wins. New fails, naming the versions there are, when the topic has no
// schema (ErrUnknownTopic) or n is not a released version, and when
// WithVersion names the same topic too (one would undo half of the other).
//
// It is the rolling-upgrade pin for producers. The registry's BACKWARD
// level guarantees that a new schema reads data written with the old one,
// so consumers are upgraded first; until every consumer runs a build that
// knows the new version, the upgraded instances write the old version with
// WithWriterVersion (and still read the new records of others fully), and
// the pin is removed once the old builds are gone. (A change that is also
// FORWARD compatible, such as an optional field added with a default, is
// read by old consumers too, as Avro resolution skips the writer's extra
// fields; the pin is then optional.) SchemaVersion reports n, so a producer
// can refuse input that version n cannot carry.
func WithWriterVersion(topic string, n int) Opt {
	return func(o *options) {
		if o.writers == nil {
			o.writers = map[string]int{}
		}
		o.writers[topic] = n
	}
}

// Serde encodes the order system's events to Confluent wire-format Avro and
// decodes them from it or from plain JSON, checking every event against its
// contract both ways.
//
// A Serde is safe for concurrent use by any number of goroutines; its caches
// (schema ids both ways, writer schemas, resolved reader schemas) are filled
// on first use and shared.
type Serde struct {
	client   *sr.Client
	opts     options
	topics   map[string]*topicState // immutable after New
	subjects []string
	compat   *avro.SchemaCompatibility

	plans sync.Map // planKey -> *plan, good plans only: bounded by the registry's versions

	mu        sync.Mutex
	negatives map[planKey]*plan // failed plans until they expire, at most maxNegatives
	fetches   map[int]*fetch    // in-flight registry lookups, by schema id
	now       func() time.Time
}

// maxNegatives bounds the negative cache, which hostile or corrupt input
// (a random schema id per record) could otherwise grow without limit.
const maxNegatives = 4096

// topicState is the contract this Serde decodes with, the one it encodes
// with (the same unless WithWriterVersion chose another) and the latter's
// schema id.
type topicState struct {
	*contract
	writer *contract
	id     int
	header [headerSize]byte
}

type planKey struct {
	topic string
	id    int
}

// plan is how to decode values of one (topic, schema id): with schema (the
// reader schema itself, or a writer->reader resolved composite), or not at
// all (err, until expires).
type plan struct {
	schema  avro.Schema
	err     *Error
	expires time.Time
}

// idInfo is what the registry says about a schema id.
type idInfo struct {
	schema   sr.Schema
	subjects []string
}

type fetch struct {
	done chan struct{}
	info *idInfo
	err  error // errNotFound or a transient error
}

var errNotFound = errors.New("not found")

// New returns a Serde that uses client to register (or, with
// WithLookupOnly, look up) each topic's Avro schema (the current one, or the
// released version chosen with WithVersion or WithWriterVersion) under its TopicNameStrategy
// subject "<topic>-value" and later to resolve the schema ids of records it
// decodes. Registering is idempotent: the registry answers an already
// registered schema with its existing id. The ids are cached both ways.
//
// It fails when client is nil, when a WithVersion or WithWriterVersion names
// a topic without a schema or a version that was not released, when both
// name the same topic, or when the registry refuses or
// cannot be reached (for example a schema that is not compatible with the
// versions already under its subject); the error names the subject. ctx
// bounds the registration calls only.
func New(ctx context.Context, client *sr.Client, opts ...Opt) (*Serde, error) {
	if client == nil {
		return nil, errors.New("schema: New: nil registry client")
	}
	o := options{lookupTimeout: defaultLookupTimeout, negativeTTL: defaultNegativeTTL}
	for _, opt := range opts {
		opt(&o)
	}
	chosen := make(map[string]*contract, len(contracts))
	for topic, c := range contracts {
		chosen[topic] = c
	}
	for topic, n := range o.versions {
		if w, ok := o.writers[topic]; ok {
			return nil, fmt.Errorf("schema: WithVersion(%q, %d) and WithWriterVersion(%q, %d) name the same topic; "+
				"use WithWriterVersion alone to pin what a producer writes", topic, n, topic, w)
		}
		c, err := releasedContract("WithVersion", topic, n)
		if err != nil {
			return nil, err
		}
		chosen[topic] = c
	}
	writers := make(map[string]*contract, len(contracts))
	for topic, n := range o.writers {
		c, err := releasedContract("WithWriterVersion", topic, n)
		if err != nil {
			return nil, err
		}
		writers[topic] = c
	}
	s := &Serde{
		client:    client,
		opts:      o,
		topics:    make(map[string]*topicState, len(contracts)),
		compat:    avro.NewSchemaCompatibility(),
		negatives: make(map[planKey]*plan),
		fetches:   make(map[int]*fetch),
		now:       time.Now,
	}
	for _, topic := range Topics() {
		r := chosen[topic]
		c := r
		if w, ok := writers[topic]; ok {
			c = w
		}
		in := sr.Schema{Schema: c.avroText, Type: sr.TypeAvro}
		var (
			ss  sr.SubjectSchema
			err error
		)
		if o.lookupOnly {
			ss, err = client.LookupSchema(ctx, c.subject, in)
		} else {
			ss, err = client.CreateSchema(ctx, c.subject, in)
		}
		if err != nil {
			verb := "register"
			if o.lookupOnly {
				verb = "look up"
			}
			return nil, fmt.Errorf("schema: %s schema of subject %s: %w", verb, c.subject, err)
		}
		ts := &topicState{contract: r, writer: c, id: ss.ID}
		ts.header[0] = magicByte
		binary.BigEndian.PutUint32(ts.header[1:], uint32(ss.ID))
		s.topics[topic] = ts
		s.subjects = append(s.subjects, c.subject)
		own := &plan{schema: r.avro} // how this Serde reads what it writes
		if c != r && c.avro.Fingerprint() != r.avro.Fingerprint() {
			resolved, err := s.compat.Resolve(r.avro, c.avro)
			if err != nil { // the schema gate keeps every release readable
				return nil, fmt.Errorf("schema: %s: this build's schema cannot read v%d: %w", topic, c.version, err)
			}
			own = &plan{schema: resolved}
		}
		s.plans.Store(planKey{topic, ss.ID}, own)
	}
	return s, nil
}

// Subjects returns the registry subjects of this Serde's schemas, sorted
// ("orderCreated-value", "paymentProcessed-value",
// "shipmentRequested-value"). The caller may modify the returned slice.
func (s *Serde) Subjects() []string { return slices.Clone(s.subjects) }

// SchemaText returns the Avro schema text that Encode writes for topic (the
// embedded .avsc, or the released version chosen with WithVersion or
// WithWriterVersion), or "" when the topic has no schema.
func (s *Serde) SchemaText(topic string) string {
	if t, ok := s.topics[topic]; ok {
		return t.writer.avroText
	}
	return ""
}

// SchemaID returns the registry id of the schema that Encode writes for
// topic, and false when the topic has no schema.
func (s *Serde) SchemaID(topic string) (int, bool) {
	if t, ok := s.topics[topic]; ok {
		return t.id, true
	}
	return 0, false
}

// SchemaVersion returns the released version of the schema that Encode
// writes for topic: Versions(topic) unless WithVersion or WithWriterVersion
// chose another; 0 when the topic has no schema. A producer compares it
// with the version that added a field to refuse input it cannot write.
func (s *Serde) SchemaVersion(topic string) int {
	if t, ok := s.topics[topic]; ok {
		return t.writer.version
	}
	return 0
}

// WritesField reports whether the schema that Encode writes for topic has a
// top-level field named field (false when the topic has no schema). A
// producer pinned to an older version (WithWriterVersion, WithVersion) asks
// it to refuse input it cannot write rather than drop it. Safe for
// concurrent use.
func (s *Serde) WritesField(topic, field string) bool {
	t, ok := s.topics[topic]
	if !ok {
		return false
	}
	rec, ok := t.writer.avro.(*avro.RecordSchema)
	if !ok {
		return false
	}
	for _, f := range rec.Fields() {
		if f.Name() == field {
			return true
		}
	}
	return false
}

// ReaderVersion returns the released version of the schema that Decode
// reads topic's records with: Versions(topic) unless WithVersion chose
// another (WithWriterVersion does not change it); 0 when the topic has no
// schema.
func (s *Serde) ReaderVersion(topic string) int {
	if t, ok := s.topics[topic]; ok {
		return t.version
	}
	return 0
}

var writerPool = sync.Pool{New: func() any { return avro.NewWriter(nil, 1024, avro.WithWriterConfig(avroAPI)) }}

var readerPool = sync.Pool{New: func() any { return avro.NewReader(nil, 0, avro.WithReaderConfig(avroAPI)) }}

// Encode validates v, the topic's event (order.OrderCreated for
// order.TopicOrderCreated, order.PaymentProcessed, order.ShipmentRequested;
// by value or pointer), and returns it in Confluent wire format: magic byte
// 0, the 4-byte big-endian id of the topic's schema, the Avro binary body.
//
// An event that breaks its contract is never encoded: the error is an *Error
// wrapping ErrInvalid (see Validate for the rules; Field names the field),
// ErrUnknownTopic or ErrUnsupportedType, and the returned bytes are nil. It
// never calls the registry and is safe for concurrent use.
func (s *Serde) Encode(topic string, v any) (out []byte, err error) {
	t, ok := s.topics[topic]
	if !ok {
		return nil, newError(ErrUnknownTopic, topic, 0, "", "", nil)
	}
	if err := t.validate(v); err != nil {
		return nil, err
	}
	w := writerPool.Get().(*avro.Writer)
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, newError(ErrInvalid, topic, t.id, "", fmt.Sprintf("avro encoder panicked: %v", r), nil)
			return // the writer may be in any state: drop it
		}
		if cap(w.Buffer()) <= 64<<10 {
			w.Reset(nil)
			writerPool.Put(w)
		}
	}()
	w.Reset(nil)
	w.Error = nil
	_, _ = w.Write(t.header[:])
	if _, err := t.codec.encodeAvro(w, t.writer.avro, v); err != nil {
		return nil, newError(ErrInvalid, topic, t.id, "", "does not fit the Avro schema", err)
	}
	return bytes.Clone(w.Buffer()), nil
}

// Decode is DecodeContext with context.Background(); registry lookups are
// still bounded by WithLookupTimeout.
func (s *Serde) Decode(topic string, b []byte, v any) (Format, error) {
	return s.DecodeContext(context.Background(), topic, b, v)
}

// DecodeContext decodes the record value b of topic into v, which must be a
// non-nil pointer to the topic's event type (*order.OrderCreated for
// order.TopicOrderCreated, and so on), and reports the format it found. It
// accepts:
//
//   - Confluent wire-format Avro (first byte 0, then a 4-byte big-endian
//     schema id, then the body). The writer schema is fetched from the
//     registry by id on first sight and cached; it must be registered under
//     the topic's subject and be readable by this build's schema, and the
//     body is decoded with Avro schema resolution (writer -> reader: fields
//     the reader lacks are skipped, fields the writer lacks take the
//     reader's defaults). The whole body must be consumed.
//   - plain JSON (first non-space byte '{'): one JSON object satisfying the
//     topic's JSON Schema (JSONSchemaText), decoded with encoding/json.
//
// Every decoded event must then pass Validate. v is written only on success.
//
// Errors: an *Error (IsDecodeError reports true; permanent, one record to the
// DLQ) wrapping ErrUndecodable (anything else: nil or empty value, bad magic
// byte, truncated or corrupt Avro, trailing bytes, malformed JSON; also any
// decoder panic, which is recovered), ErrUnknownSchemaID, ErrWrongSubject,
// ErrIncompatibleSchema, ErrInvalid (JSON Schema or Validate failure; Field
// names the field), ErrUnknownTopic or ErrUnsupportedType. Otherwise a
// transient error, for which IsDecodeError reports false: ErrRegistryUnavailable
// (wrapped) when the registry could not answer a lookup, or ctx's error.
//
// It never panics and is safe for concurrent use.
func (s *Serde) DecodeContext(ctx context.Context, topic string, b []byte, v any) (Format, error) {
	t, ok := s.topics[topic]
	if !ok {
		return FormatUnknown, newError(ErrUnknownTopic, topic, 0, "", "", nil)
	}
	if !t.codec.accepts(v) {
		return FormatUnknown, t.unsupported(v)
	}
	switch {
	case len(b) == 0:
		return FormatUnknown, newError(ErrUndecodable, topic, 0, "", "empty value", nil)
	case b[0] == magicByte:
		return FormatAvro, s.decodeAvro(ctx, t, b, v)
	case isJSON(b):
		return FormatJSON, s.decodeJSON(t, b, v)
	}
	return FormatUnknown, newError(ErrUndecodable, topic, 0, "",
		fmt.Sprintf("neither Confluent wire format (magic byte 0) nor a JSON object: first byte 0x%02x", b[0]), nil)
}

func (s *Serde) decodeAvro(ctx context.Context, t *topicState, b []byte, v any) (err error) {
	if len(b) < headerSize {
		return newError(ErrUndecodable, t.topic, 0, "", fmt.Sprintf("wire-format header truncated: %d bytes", len(b)), nil)
	}
	id := int(binary.BigEndian.Uint32(b[1:headerSize]))
	p, err := s.plan(ctx, t, id)
	if err != nil {
		return err
	}
	if p.err != nil {
		return p.err
	}
	r := readerPool.Get().(*avro.Reader)
	defer func() {
		if rec := recover(); rec != nil {
			err = newError(ErrUndecodable, t.topic, id, "", fmt.Sprintf("avro decoder panicked: %v", rec), nil)
			return // the reader may be in any state: drop it
		}
		r.Reset(nil)
		readerPool.Put(r)
	}()
	r.Reset(b[headerSize:])
	r.Error = nil
	if _, err := t.codec.decodeAvro(r, p.schema, v); err != nil {
		if rv, ok := err.(*ruleViolation); ok {
			return newError(ErrInvalid, t.topic, id, rv.field, rv.reason, nil)
		}
		return newError(ErrUndecodable, t.topic, id, "", "corrupt Avro body", err)
	}
	return nil
}

func (s *Serde) decodeJSON(t *topicState, b []byte, v any) error {
	doc, err := parseJSONObject(b)
	if err != nil {
		return newError(ErrUndecodable, t.topic, 0, "", "malformed JSON", err)
	}
	if field, reason := t.json.validate("", doc); field != "" {
		return newError(ErrInvalid, t.topic, 0, field, reason, nil)
	}
	if t.pinned {
		// What the older build's structs would see: only the members its
		// schema declares.
		if b, err = json.Marshal(t.json.prune(doc)); err != nil {
			return newError(ErrUndecodable, t.topic, 0, "", "re-encoding the JSON value", err)
		}
	}
	if _, err := t.codec.decodeJSON(b, v); err != nil {
		if rv, ok := err.(*ruleViolation); ok {
			return newError(ErrInvalid, t.topic, 0, rv.field, rv.reason, nil)
		}
		return newError(ErrInvalid, t.topic, 0, "", "JSON does not fit the event type", err)
	}
	return nil
}

// plan returns the cached decode plan of (topic, id), asking the registry on
// a miss. The error is transient (registry unreachable, ctx done); a
// permanent failure is a plan with err set.
func (s *Serde) plan(ctx context.Context, t *topicState, id int) (*plan, error) {
	key := planKey{t.topic, id}
	if p, ok := s.plans.Load(key); ok {
		return p.(*plan), nil
	}
	if p := s.negative(key); p != nil {
		return p, nil
	}
	var p *plan
	var transient error
	settle := func(info *idInfo, err error) {
		switch {
		case errors.Is(err, errNotFound):
			p = &plan{err: newError(ErrUnknownSchemaID, t.topic, id, "", "the registry does not know it", nil)}
		case err != nil:
			transient = err
			return
		default:
			p = s.buildPlan(t, id, info)
		}
		if p.err == nil {
			s.plans.Store(key, p)
		} else {
			s.storeNegative(key, p)
		}
	}
	info, err := s.fetchID(ctx, id, settle)
	if p == nil && transient == nil {
		settle(info, err) // waited on another caller's lookup: build this topic's plan from its answer
	}
	if transient != nil {
		return nil, transient
	}
	return p, nil
}

// negative returns the unexpired failed plan of key, or nil.
func (s *Serde) negative(key planKey) *plan {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.negatives[key]
	if !ok {
		return nil
	}
	if !s.now().Before(p.expires) {
		delete(s.negatives, key)
		return nil
	}
	return p
}

func (s *Serde) storeNegative(key planKey, p *plan) {
	if s.opts.negativeTTL <= 0 {
		return
	}
	now := s.now()
	p.expires = now.Add(s.opts.negativeTTL)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.negatives) >= maxNegatives {
		for k, q := range s.negatives {
			if !now.Before(q.expires) {
				delete(s.negatives, k)
			}
		}
		for k := range s.negatives { // still full: evict an arbitrary entry
			if len(s.negatives) < maxNegatives {
				break
			}
			delete(s.negatives, k)
		}
	}
	s.negatives[key] = p
}

func (s *Serde) buildPlan(t *topicState, id int, info *idInfo) *plan {
	fail := func(kind error, reason string, cause error) *plan {
		return &plan{err: newError(kind, t.topic, id, "", reason, cause)}
	}
	if !slices.Contains(info.subjects, t.subject) {
		return fail(ErrWrongSubject, fmt.Sprintf("registered under %v, want %s", info.subjects, t.subject), nil)
	}
	if info.schema.Type != sr.TypeAvro {
		return fail(ErrIncompatibleSchema, fmt.Sprintf("writer schema type is %s, want AVRO", info.schema.Type), nil)
	}
	if len(info.schema.References) > 0 {
		return fail(ErrIncompatibleSchema, "writer schema has references, which this serde does not resolve", nil)
	}
	writer, err := avro.ParseWithCache(info.schema.Schema, "", &avro.SchemaCache{})
	if err != nil {
		return fail(ErrIncompatibleSchema, "writer schema does not parse", err)
	}
	if writer.Fingerprint() == t.avro.Fingerprint() {
		return &plan{schema: t.avro}
	}
	resolved, err := s.compat.Resolve(t.avro, writer)
	if err != nil {
		return fail(ErrIncompatibleSchema, "cannot read the writer schema with this build's schema", err)
	}
	return &plan{schema: resolved}
}

// fetchID asks the registry for a schema id's schema and subjects, with one
// request in flight per id whatever the number of callers. The caller that
// makes the request runs settle with its answer before the request stops
// being in flight, so that its plan is cached before another caller can miss
// both the cache and the flight and ask again (TestConcurrentUse saw 4
// lookups instead of 2 about once in a few hundred runs); the callers that
// waited get the answer and settle it themselves.
func (s *Serde) fetchID(ctx context.Context, id int, settle func(*idInfo, error)) (*idInfo, error) {
	s.mu.Lock()
	if f, ok := s.fetches[id]; ok {
		s.mu.Unlock()
		select {
		case <-f.done:
			return f.info, f.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f := &fetch{done: make(chan struct{})}
	s.fetches[id] = f
	s.mu.Unlock()

	f.info, f.err = s.lookup(ctx, id)
	settle(f.info, f.err)

	s.mu.Lock()
	delete(s.fetches, id)
	s.mu.Unlock()
	close(f.done)
	return f.info, f.err
}

func (s *Serde) lookup(ctx context.Context, id int) (*idInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.lookupTimeout)
	defer cancel()
	sch, err := s.client.SchemaByID(ctx, id)
	if err != nil {
		return nil, registryError(id, err)
	}
	subjects, err := s.client.SubjectsByID(ctx, id)
	if err != nil {
		return nil, registryError(id, err)
	}
	return &idInfo{schema: sch, subjects: subjects}, nil
}

// registryError maps a lookup failure to errNotFound when the registry
// answered that the schema does not exist (error code 40403), and to a
// transient ErrRegistryUnavailable otherwise: a bare 404 without that code is
// more likely a wrong registry URL or a proxy than a bad record, and must not
// send every record to the DLQ.
func registryError(id int, err error) error {
	var re *sr.ResponseError
	if errors.As(err, &re) && re.ErrorCode == sr.ErrSchemaNotFound.Code {
		return errNotFound
	}
	return fmt.Errorf("schema: look up schema id %d: %w: %w", id, ErrRegistryUnavailable, err)
}
