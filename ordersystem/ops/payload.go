package ops

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/schema"
)

// hexDumpMax bounds the bytes shown as a hex dump.
const hexDumpMax = 1024

// Payload is a record value decoded for people.
type Payload struct {
	// Format is "avro" (Confluent wire format), "json", "null" (a null
	// value), "text" (UTF-8 that is neither) or "bytes".
	Format string `json:"format"`
	// SchemaID is the wire-format schema id; Subjects are the registry
	// subjects it is registered under.
	SchemaID int      `json:"schemaId,omitempty"`
	Subjects []string `json:"subjects,omitempty"`
	// Decoded is the value as JSON: the Avro body decoded with its writer
	// schema (whatever the topic's contract says), or the JSON value itself.
	Decoded json.RawMessage `json:"decoded,omitempty"`
	// Contract is "ok" when the value satisfies its topic's contract now
	// (schema.Serde.Decode), or the error it fails with; empty when not
	// checked (no Serde, or a topic without a contract).
	Contract string `json:"contract,omitempty"`
	// Error says why the value could not be decoded.
	Error string `json:"error,omitempty"`
	// Text is a value that is neither JSON nor wire format but printable
	// UTF-8 text.
	Text string `json:"text,omitempty"`
	// Hex is a hex dump of the first 1 KiB of a value that was not decoded
	// (text included).
	Hex string `json:"hex,omitempty"`
}

// DecodePayload decodes value, a record of topic, for display. reg may be
// nil (Avro bodies are then not decoded: the error says to pass
// --registry); serde may be nil (no contract check). It never fails: what
// could not be done is in Payload.Error. It calls the registry at most twice
// (schema by id, subjects by id), bounded by ctx.
func DecodePayload(ctx context.Context, reg *sr.Client, serde *schema.Serde, topic string, value []byte) *Payload {
	pl := &Payload{}
	switch {
	case value == nil:
		pl.Format = "null"
		return pl
	case len(value) >= 5 && value[0] == 0:
		pl.Format = "avro"
		pl.SchemaID = int(binary.BigEndian.Uint32(value[1:5]))
		if reg == nil {
			pl.Error = "Confluent wire format: pass --registry (or SCHEMA_REGISTRY_URL) to decode it"
		} else {
			pl.Decoded, pl.Subjects, pl.Error = decodeAvro(ctx, reg, pl.SchemaID, value[5:])
		}
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
	if pl.Decoded == nil {
		pl.Hex = hex.Dump(value[:min(len(value), hexDumpMax)])
		if len(value) > hexDumpMax {
			pl.Hex += fmt.Sprintf("... %d more bytes\n", len(value)-hexDumpMax)
		}
	}
	if serde != nil {
		if target := eventFor(topic); target != nil {
			if _, err := serde.DecodeContext(ctx, topic, value, target); err != nil {
				pl.Contract = err.Error()
			} else {
				pl.Contract = "ok"
			}
		}
	}
	return pl
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

// eventFor returns a decode target for a topic of the order system, or nil.
func eventFor(topic string) any {
	switch topic {
	case order.TopicOrderCreated:
		return new(order.OrderCreated)
	case order.TopicPaymentProcessed:
		return new(order.PaymentProcessed)
	case order.TopicShipmentRequested:
		return new(order.ShipmentRequested)
	}
	return nil
}

// decodeAvro decodes an Avro body with the writer schema of id, generically.
func decodeAvro(ctx context.Context, reg *sr.Client, id int, body []byte) (out json.RawMessage, subjects []string, reason string) {
	sch, err := reg.SchemaByID(ctx, id)
	if err != nil {
		var re *sr.ResponseError
		if errors.As(err, &re) && re.ErrorCode == sr.ErrSchemaNotFound.Code {
			return nil, nil, fmt.Sprintf("schema id %d is unknown to the registry", id)
		}
		return nil, nil, fmt.Sprintf("schema registry lookup of id %d failed (is --registry right?): %v", id, err)
	}
	subjects, _ = reg.SubjectsByID(ctx, id)
	if sch.Type != sr.TypeAvro {
		return nil, subjects, fmt.Sprintf("schema id %d is %s, not AVRO", id, sch.Type)
	}
	s, err := avro.ParseWithCache(sch.Schema, "", &avro.SchemaCache{})
	if err != nil {
		return nil, subjects, fmt.Sprintf("schema id %d does not parse: %v", id, err)
	}
	var v any
	if err := safeUnmarshal(s, body, &v); err != nil {
		return nil, subjects, fmt.Sprintf("Avro body does not decode with schema id %d: %v", id, err)
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, subjects, fmt.Sprintf("decoded value does not render as JSON: %v", err)
	}
	return b, subjects, ""
}

// safeUnmarshal is avro.Unmarshal that turns a decoder panic on hostile
// bytes into an error.
func safeUnmarshal(s avro.Schema, body []byte, v any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("decoder panicked: %v", r)
		}
	}()
	return avro.Unmarshal(s, body, v)
}
