package schema

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/hamba/avro/v2"
)

// genJSONSchema derives the JSON Schema of a topic's JSON values from its Avro
// schema: records are objects whose fields without a default are required,
// ["null", T] unions are T or null, timestamp-millis longs are RFC 3339
// date-time strings (the encoding/json form of time.Time), other longs and
// ints are integers, enums are strings with an enum. Anything else is an
// error, so that a new construct is supported deliberately.
func genJSONSchema(topic string, s avro.Schema) ([]byte, error) {
	rec, ok := s.(*avro.RecordSchema)
	if !ok {
		return nil, fmt.Errorf("top-level schema is %s, want record", s.Type())
	}
	body, err := jsonNodeOf(rec)
	if err != nil {
		return nil, err
	}
	root := obj{
		{"$schema", "https://json-schema.org/draft/2020-12/schema"},
		{"$id", "urn:ordercast:schema:json:" + topic},
	}
	root = append(root, body...)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(root); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func jsonNodeOf(s avro.Schema) (obj, error) {
	switch x := s.(type) {
	case *avro.RecordSchema:
		props := obj{}
		required := []string{}
		for _, f := range x.Fields() {
			n, err := jsonNodeOf(f.Type())
			if err != nil {
				return nil, fmt.Errorf("%s.%s: %w", x.Name(), f.Name(), err)
			}
			if f.Doc() != "" {
				n = append(n, kv{"description", f.Doc()})
			}
			props = append(props, kv{f.Name(), n})
			if !f.HasDefault() {
				required = append(required, f.Name())
			}
		}
		n := obj{{"title", x.FullName()}}
		if x.Doc() != "" {
			n = append(n, kv{"description", x.Doc()})
		}
		return append(n, kv{"type", "object"}, kv{"properties", props}, kv{"required", required}), nil
	case *avro.EnumSchema:
		return obj{{"type", "string"}, {"enum", x.Symbols()}}, nil
	case *avro.ArraySchema:
		items, err := jsonNodeOf(x.Items())
		if err != nil {
			return nil, err
		}
		return obj{{"type", "array"}, {"items", items}}, nil
	case *avro.UnionSchema:
		ts := x.Types()
		if len(ts) != 2 || !x.Nullable() {
			return nil, fmt.Errorf("only [\"null\", T] unions are supported, got %s", x)
		}
		_, i := x.Indices()
		n, err := jsonNodeOf(ts[i])
		if err != nil {
			return nil, err
		}
		for j := range n {
			if n[j].k == "type" {
				t, ok := n[j].v.(string)
				if !ok {
					return nil, fmt.Errorf("nullable %s not supported", x)
				}
				n[j].v = []string{t, "null"}
			}
		}
		return n, nil
	case *avro.PrimitiveSchema:
		if l := x.Logical(); l != nil {
			if l.Type() == avro.TimestampMillis && x.Type() == avro.Long {
				return obj{{"type", "string"}, {"format", "date-time"}}, nil
			}
			return nil, fmt.Errorf("logical type %s not supported", l.Type())
		}
		switch x.Type() {
		case avro.String:
			return obj{{"type", "string"}}, nil
		case avro.Long, avro.Int:
			return obj{{"type", "integer"}}, nil
		case avro.Boolean:
			return obj{{"type", "boolean"}}, nil
		case avro.Double, avro.Float:
			return obj{{"type", "number"}}, nil
		}
	}
	return nil, fmt.Errorf("avro type %s not supported", s.Type())
}

// obj is a JSON object that keeps its keys in order.
type obj []kv

type kv struct {
	k string
	v any
}

func (o obj) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, e := range o {
		if i > 0 {
			buf.WriteByte(',')
		}
		k, _ := json.Marshal(e.k)
		buf.Write(k)
		buf.WriteByte(':')
		var vb bytes.Buffer
		enc := json.NewEncoder(&vb)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(e.v); err != nil {
			return nil, err
		}
		buf.Write(bytes.TrimRight(vb.Bytes(), "\n"))
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}
