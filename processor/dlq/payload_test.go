package dlq_test

import (
	"context"
	"strings"
	"testing"

	"github.com/ordercast/ordercast/processor/dlq"
)

// TestDecodeBytes: the formats the default decoder tells apart, and the hex
// dump's bound.
func TestDecodeBytes(t *testing.T) {
	long := make([]byte, dlq.HexDumpMax+10)
	for _, c := range []struct {
		name   string
		value  []byte
		format string
		check  func(*dlq.Payload) bool
	}{
		{"null", nil, "null", func(p *dlq.Payload) bool { return p.Hex == "" && p.Decoded == nil }},
		{"json", []byte(`{"a":1}`), "json", func(p *dlq.Payload) bool { return string(p.Decoded) == "{\n  \"a\": 1\n}" && p.Hex == "" }},
		{"json array is text", []byte(`[1,2]`), "text", func(p *dlq.Payload) bool { return p.Text == "[1,2]" && p.Hex != "" }},
		{"text", []byte("hello\n"), "text", func(p *dlq.Payload) bool { return p.Text == "hello\n" }},
		{"wire format", []byte{0, 0, 0, 1, 2, 9}, "avro", func(p *dlq.Payload) bool {
			return p.SchemaID == 258 && strings.Contains(p.Error, "schema registry") && p.Hex != ""
		}},
		{"bytes", []byte{0xde, 0xad, 0xbe, 0xef}, "bytes", func(p *dlq.Payload) bool { return strings.Contains(p.Hex, "de ad be ef") }},
		{"long bytes", append([]byte{0xff}, long...), "bytes", func(p *dlq.Payload) bool { return strings.HasSuffix(p.Hex, "... 11 more bytes\n") }},
	} {
		p := dlq.DecodeBytes(c.value)
		if p.Format != c.format || !c.check(p) {
			t.Errorf("%s: %+v", c.name, p)
		}
	}
}

// TestRecordDecodeUsesDecoder: Record.Decode passes the original topic and
// the value to the Decoder given, and falls back to dlq.Bytes.
func TestRecordDecodeUsesDecoder(t *testing.T) {
	r := &dlq.Record{OriginalTopic: "invoices", Value: []byte(`{"x":true}`)}
	var gotTopic string
	p := r.Decode(context.Background(), dlq.DecoderFunc(func(_ context.Context, topic string, v []byte) *dlq.Payload {
		gotTopic = topic
		return &dlq.Payload{Format: "custom", Text: string(v)}
	}))
	if gotTopic != "invoices" || p.Format != "custom" || r.Payload != p || p.Text != `{"x":true}` {
		t.Errorf("custom decoder: topic %q, payload %+v", gotTopic, p)
	}
	if p := r.Decode(context.Background(), nil); p.Format != "json" || r.Payload != p {
		t.Errorf("default decoder: %+v", p)
	}
}

// FuzzDecodeBytes: any value decodes without panicking to one of the
// documented formats, with a bounded dump.
func FuzzDecodeBytes(f *testing.F) {
	for _, s := range []string{"", "{}", `{"a":[1,{"b":null}]}`, "\x00\x00\x00\x00\x01body", "\xff\xfe", "text"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		p := dlq.DecodeBytes(v)
		switch p.Format {
		case "json", "text", "bytes", "avro", "null":
		default:
			t.Fatalf("format %q", p.Format)
		}
		if len(p.Hex) > 5*dlq.HexDumpMax {
			t.Fatalf("hex dump of %d bytes for a %d-byte value", len(p.Hex), len(v))
		}
	})
}
