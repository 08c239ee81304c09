// This file holds the decoding of a record value for people: Payload, the
// pluggable Decoder, and the default that shows JSON, text or bytes.

package dlq

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// HexDumpMax is how many bytes of a value DecodeBytes shows as a hex dump
// (1 KiB); the dump then says how many more bytes there are.
const HexDumpMax = 1024

// Payload is a record value decoded for people. DecodeBytes fills Format,
// Decoded (JSON objects), Text and Hex; a Decoder that knows the Confluent
// wire format and a schema registry also fills SchemaID, Subjects, Contract
// and Error.
type Payload struct {
	// Format is "avro" (Confluent wire format), "json", "null" (a null
	// value), "text" (UTF-8 that is neither) or "bytes".
	Format string `json:"format"`
	// SchemaID is the wire-format schema id; Subjects are the registry
	// subjects it is registered under.
	SchemaID int      `json:"schemaId,omitempty"`
	Subjects []string `json:"subjects,omitempty"`
	// Decoded is the value as JSON: the Avro body decoded with its writer
	// schema (whatever the topic's contract says), or the JSON value itself
	// (indented by two spaces).
	Decoded json.RawMessage `json:"decoded,omitempty"`
	// Contract is "ok" when the value satisfies its topic's contract now,
	// or the error it fails with; empty when not checked (DecodeBytes
	// checks none).
	Contract string `json:"contract,omitempty"`
	// Error says why the value could not be decoded.
	Error string `json:"error,omitempty"`
	// Text is a value that is neither JSON nor wire format but printable
	// UTF-8 text.
	Text string `json:"text,omitempty"`
	// Hex is a hex dump (encoding/hex.Dump) of the first HexDumpMax bytes of
	// a value that was not decoded (text included).
	Hex string `json:"hex,omitempty"`
}

// Decoder decodes a record value of topic for display. The record's
// original topic is passed, so a decoder may check the value against that
// topic's contract. Decode must not fail: what could not be done goes in
// Payload.Error (or Contract). It may block on a schema registry, bounded by
// ctx. Implementations must be safe for concurrent use when the DLQ is
// shared (Show and List may run concurrently).
type Decoder interface {
	Decode(ctx context.Context, topic string, value []byte) *Payload
}

// DecoderFunc adapts a function to Decoder.
type DecoderFunc func(ctx context.Context, topic string, value []byte) *Payload

// Decode calls f.
func (f DecoderFunc) Decode(ctx context.Context, topic string, value []byte) *Payload {
	return f(ctx, topic, value)
}

// Bytes is the default Decoder: DecodeBytes, which reads no schema.
var Bytes Decoder = DecoderFunc(func(_ context.Context, _ string, value []byte) *Payload { return DecodeBytes(value) })

// DecodeBytes decodes value without a schema: Format "null" for a null
// value; "avro" (SchemaID set, Error saying a schema registry is needed) for
// the Confluent wire format (magic byte 0 and a 4-byte big-endian schema
// id, then the body: five bytes or more); "json" (Decoded) for a JSON
// object; "text" (Text) for printable UTF-8; "bytes" otherwise. Every value
// not decoded gets a Hex dump of at most HexDumpMax bytes. It does not
// block and never fails.
func DecodeBytes(value []byte) *Payload {
	pl := &Payload{}
	switch {
	case value == nil:
		pl.Format = "null"
		return pl
	case IsWireFormat(value):
		pl.Format = "avro"
		pl.SchemaID = WireSchemaID(value)
		pl.Error = "Confluent wire format: decoding it needs a schema registry (a Decoder that reads one)"
	case json.Valid(value) && bytes.HasPrefix(bytes.TrimLeft(value, " \t\r\n"), []byte("{")):
		pl.Format = "json"
		var buf bytes.Buffer
		if err := json.Indent(&buf, value, "", "  "); err == nil {
			pl.Decoded = buf.Bytes()
		}
	case printable(value):
		pl.Format = "text"
		pl.Text = string(value)
	default:
		pl.Format = "bytes"
	}
	pl.SetHex(value)
	return pl
}

// IsWireFormat reports whether value starts as the Confluent wire format
// does: magic byte 0, then a 4-byte schema id (at least 5 bytes).
func IsWireFormat(value []byte) bool { return len(value) >= 5 && value[0] == 0 }

// WireSchemaID returns the schema id of a wire-format value (bytes 1 to 4,
// big-endian); 0 when IsWireFormat is false.
func WireSchemaID(value []byte) int {
	if !IsWireFormat(value) {
		return 0
	}
	return int(uint32(value[1])<<24 | uint32(value[2])<<16 | uint32(value[3])<<8 | uint32(value[4]))
}

// SetHex sets p.Hex to the dump of value's first HexDumpMax bytes when
// p.Decoded is empty (a value that was not decoded); a Decoder calls it
// after its own decoding.
func (p *Payload) SetHex(value []byte) {
	if p.Decoded != nil || value == nil {
		return
	}
	p.Hex = hex.Dump(value[:min(len(value), HexDumpMax)])
	if len(value) > HexDumpMax {
		p.Hex += fmt.Sprintf("... %d more bytes\n", len(value)-HexDumpMax)
	}
}

// printable reports whether b is UTF-8 text of printable runes and white
// space only.
func printable(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if !unicode.IsPrint(r) && !unicode.IsSpace(r) {
			return false
		}
	}
	return true
}

// Decode sets r.Payload to dec's decoding of r.Value (Bytes when dec is
// nil), as a value of r.OriginalTopic, and returns it. It blocks as long as
// dec does.
func (r *Record) Decode(ctx context.Context, dec Decoder) *Payload {
	if dec == nil {
		dec = Bytes
	}
	r.Payload = dec.Decode(ctx, r.OriginalTopic, r.Value)
	return r.Payload
}
