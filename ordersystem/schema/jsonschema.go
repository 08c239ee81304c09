package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/ordercast/ordercast/ordersystem/internal/jsonlimit"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// jsonSchema is a parsed JSON Schema in the small subset that this package
// generates from the Avro schemas: type, properties, required, items, enum
// (of strings) and format "date-time", plus the annotations $schema, $id,
// title and description. parseJSONSchema rejects every other keyword, so a
// rule added to a file can never be silently ignored.
type jsonSchema struct {
	types      []string // JSON types; "integer" is a JSON number without fraction or exponent that fits int64
	format     string   // "" or "date-time" (RFC 3339)
	enum       []string
	properties map[string]*jsonSchema
	required   []string
	items      *jsonSchema
}

var jsonTypes = []string{"object", "array", "string", "integer", "number", "boolean", "null"}

func parseJSONSchema(b []byte) (*jsonSchema, error) {
	var raw any
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, err
	}
	return buildJSONSchema("#", raw)
}

func buildJSONSchema(at string, raw any) (*jsonSchema, error) {
	m, ok := raw.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: schema must be an object", at)
	}
	s := &jsonSchema{}
	for k, v := range m {
		var err error
		switch k {
		case "$schema", "$id", "title", "description":
			if _, ok := v.(string); !ok {
				err = errors.New("must be a string")
			}
		case "type":
			s.types, err = stringOrStrings(v)
			for _, t := range s.types {
				if !slices.Contains(jsonTypes, t) {
					err = fmt.Errorf("unknown type %q", t)
				}
			}
		case "format":
			s.format, _ = v.(string)
			if s.format != "date-time" {
				err = fmt.Errorf("unsupported format %v", v)
			}
		case "enum":
			s.enum, err = stringOrStrings(v)
			if _, single := v.(string); single {
				err = errors.New("must be an array")
			}
		case "required":
			s.required, err = stringOrStrings(v)
			if _, single := v.(string); single {
				err = errors.New("must be an array")
			}
		case "properties":
			pm, ok := v.(map[string]any)
			if !ok {
				err = errors.New("must be an object")
				break
			}
			s.properties = make(map[string]*jsonSchema, len(pm))
			for name, sub := range pm {
				if s.properties[name], err = buildJSONSchema(at+"/properties/"+name, sub); err != nil {
					return nil, err
				}
			}
		case "items":
			if s.items, err = buildJSONSchema(at+"/items", v); err != nil {
				return nil, err
			}
		default:
			err = errors.New("keyword not supported by this validator")
		}
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", at, k, err)
		}
	}
	if len(s.types) == 0 {
		return nil, fmt.Errorf("%s: type is required", at)
	}
	for _, r := range s.required {
		if s.properties[r] == nil {
			return nil, fmt.Errorf("%s: required property %q has no schema", at, r)
		}
	}
	return s, nil
}

func stringOrStrings(v any) ([]string, error) {
	switch x := v.(type) {
	case string:
		return []string{x}, nil
	case []any:
		out := make([]string, 0, len(x))
		for _, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("must hold strings, has %v", e)
			}
			out = append(out, s)
		}
		return out, nil
	}
	return nil, fmt.Errorf("must be a string or an array of strings, is %T", v)
}

// parseJSONObject parses b, which must hold exactly one JSON value (numbers
// kept as json.Number), and returns it.
//
// Nesting deeper than jsonlimit.DefaultMaxDepth (32) is refused before
// decoding (an event has 4 levels); a member twice in one object is
// refused too, rather than the last one kept.
func parseJSONObject(b []byte) (any, error) {
	if err := jsonlimit.Check(b, 0); err != nil {
		if e, ok := err.(*jsonlimit.Error); !ok || e.Kind != jsonlimit.Syntax {
			return nil, err
		}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

// validate checks the JSON value v (as decoded by parseJSONObject) at path
// and returns the first offending field path and the reason, or "", "".
func (s *jsonSchema) validate(path string, v any) (string, string) {
	got := jsonTypeOf(v)
	if !s.allows(got) {
		want := s.types[0]
		if len(s.types) > 1 {
			want = fmt.Sprint(s.types)
		}
		if got == "number" && slices.Contains(s.types, "integer") {
			return fieldOr(path), fmt.Sprintf("must be an integer in int64 range written without fraction or exponent, is %s", v)
		}
		return fieldOr(path), fmt.Sprintf("must be %s, is %s", want, got)
	}
	switch x := v.(type) {
	case string:
		if len(s.enum) > 0 && !slices.Contains(s.enum, x) {
			return fieldOr(path), fmt.Sprintf("must be one of %v, is %q", s.enum, x)
		}
		if s.format == "date-time" {
			if _, err := time.Parse(time.RFC3339Nano, x); err != nil {
				return fieldOr(path), fmt.Sprintf("must be an RFC 3339 date-time, is %q", x)
			}
		}
	case map[string]any:
		for _, r := range s.required {
			if _, ok := x[r]; !ok {
				return join(path, r), "required field is missing"
			}
		}
		// Presence of required fields first, then the values present, by
		// sorted name, so that the reported field is deterministic.
		names := make([]string, 0, len(s.properties))
		for name := range s.properties {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			if pv, ok := x[name]; ok {
				if f, r := s.properties[name].validate(join(path, name), pv); f != "" {
					return f, r
				}
			}
		}
	case []any:
		if s.items != nil {
			for i, e := range x {
				if f, r := s.items.validate(path+"["+strconv.Itoa(i)+"]", e); f != "" {
					return f, r
				}
			}
		}
	}
	return "", ""
}

// prune returns the JSON value v (as decoded by parseJSONObject) without the
// object members that s does not declare, at any depth (properties of
// objects, items of arrays). Names are matched as encoding/json matches
// them to struct fields, ignoring case, so that decoding the result into
// the current Go type behaves as decoding v into the type of the schema
// version s was generated from. v's maps are modified in place.
func (s *jsonSchema) prune(v any) any {
	switch x := v.(type) {
	case map[string]any:
		if s.properties == nil {
			return x
		}
		for name, pv := range x {
			sub := s.property(name)
			if sub == nil {
				delete(x, name)
				continue
			}
			x[name] = sub.prune(pv)
		}
	case []any:
		if s.items != nil {
			for i := range x {
				x[i] = s.items.prune(x[i])
			}
		}
	}
	return v
}

// property returns the schema of the property name, matched exactly or else
// ignoring case, or nil.
func (s *jsonSchema) property(name string) *jsonSchema {
	if p, ok := s.properties[name]; ok {
		return p
	}
	for k, p := range s.properties {
		if strings.EqualFold(k, name) {
			return p
		}
	}
	return nil
}

func (s *jsonSchema) allows(got string) bool {
	for _, t := range s.types {
		if t == got || (t == "number" && got == "integer") {
			return true
		}
	}
	return false
}

func jsonTypeOf(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number:
		if _, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return "integer"
		}
		return "number"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	}
	return fmt.Sprintf("%T", v)
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func fieldOr(path string) string {
	if path == "" {
		return "$"
	}
	return path
}
