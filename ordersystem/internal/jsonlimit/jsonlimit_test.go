package jsonlimit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func kindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return 0
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		in    string
		depth int
		kind  Kind
		path  string
	}{
		{in: `{"lines":[{"stockCode":"A","quantity":1}]}`},
		{in: `[]`}, {in: `{}`}, {in: ` 1 `}, {in: `"x"`}, {in: `[[],{},[{}]]`},
		{in: `[[1]]`, depth: 2},
		{in: `[[[1]]]`, depth: 2, kind: TooDeep, path: "[0][0]"},
		{in: `{"a":{"b":[0,{"c":{}}]}}`, depth: 4, kind: TooDeep, path: "a.b[1].c"},
		{in: `{"a":1,"a":2}`, kind: Duplicate, path: "a"},
		{in: `{"a":1,"\u0061":2}`, kind: Duplicate, path: "a"},
		{in: `{"é":1,"\u00e9":2}`, kind: Duplicate, path: "é"},
		{in: `{"a":1,"A":2}`},
		{in: `{"lines":[{"q":1},{"q":1,"s":"x","q":2}]}`, kind: Duplicate, path: "lines[1].q"},
		{in: `{"x":{"a":1,"a":1},"x":2}`, kind: Duplicate, path: "x.a"},
		{in: `{"x":{"a":1},"x":{"a":1,"a":2}}`, kind: Duplicate, path: "x"},
		{in: `{"a":1,"a":2,"d":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`, kind: TooDeep, path: "d" + strings.Repeat("[0]", 31)},
		{in: `{"a":1,}`, kind: Syntax}, {in: `{"a" 1}`, kind: Syntax}, {in: `[1 2]`, kind: Syntax},
		{in: `{"a":1}x`, kind: Syntax}, {in: ``, kind: Syntax}, {in: `[`, kind: Syntax}, {in: `{"a":tru}`, kind: Syntax},
		{in: "{\"a\n\":1}", kind: Syntax},
	} {
		err := Check([]byte(tc.in), tc.depth)
		if got := kindOf(err); got != tc.kind {
			t.Errorf("Check(%s) = %v, want kind %d", tc.in, err, tc.kind)
			continue
		}
		if tc.kind == TooDeep || tc.kind == Duplicate {
			if e := err.(*Error); e.Path != tc.path {
				t.Errorf("Check(%s): path %q, want %q", tc.in, e.Path, tc.path)
			}
		}
	}
}

// Many members: duplicates found by sorting, the first in the input's
// order reported.
func TestCheckManyMembers(t *testing.T) {
	var b bytes.Buffer
	b.WriteString("{")
	for i := range 1000 {
		fmt.Fprintf(&b, `"m%d":%d,`, i, i)
	}
	b.WriteString(`"m500":0,"m7":0,"last":0}`)
	err := Check(b.Bytes(), 0)
	if e, ok := err.(*Error); !ok || e.Kind != Duplicate || e.Path != "m500" {
		t.Fatalf("Check = %v, want the duplicate m500", err)
	}
}

// Depth is refused before the rest is read, and costs no more memory than
// its limit: a body nested 100,000 deep with long names.
func TestCheckDeepBounded(t *testing.T) {
	name := strings.Repeat("n", 50)
	body := []byte(strings.Repeat(`{"`+name+`":`, 100_000) + "1" + strings.Repeat("}", 100_000))
	allocs := testing.AllocsPerRun(5, func() {
		if kindOf(Check(body, 32)) != TooDeep {
			t.Fatal("not refused as too deep")
		}
	})
	if allocs > 30 {
		t.Errorf("%v allocations, want a handful", allocs)
	}
}

func TestUnmarshal(t *testing.T) {
	var v map[string]any
	if err := Unmarshal([]byte(`{"a":[1]}`), &v, 0); err != nil || len(v) != 1 {
		t.Fatalf("Unmarshal = %v, %v", v, err)
	}
	if err := Unmarshal([]byte(`{"a":1,"a":2}`), &v, 0); kindOf(err) != Duplicate {
		t.Errorf("duplicate: %v", err)
	}
	if err := Unmarshal([]byte(`{"a":1,}`), &v, 0); err == nil || kindOf(err) != 0 {
		t.Errorf("syntax: %v, want encoding/json's error", err)
	}
}

// dupReference is a simple walk of encoding/json's tokens: whether some
// object of data, valid JSON, has a member twice.
func dupReference(dec *json.Decoder) (bool, error) {
	tok, err := dec.Token()
	if err != nil {
		return false, err
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		dup := false
		for dec.More() {
			kt, _ := dec.Token()
			k, _ := kt.(string)
			dup = dup || seen[k]
			seen[k] = true
			d, err := dupReference(dec)
			if err != nil {
				return false, err
			}
			dup = dup || d
		}
		_, err = dec.Token()
		return dup, err
	case json.Delim('['):
		dup := false
		for dec.More() {
			d, err := dupReference(dec)
			if err != nil {
				return false, err
			}
			dup = dup || d
		}
		_, err = dec.Token()
		return dup, err
	}
	return false, nil
}

// FuzzCheck: valid JSON is never a Syntax error, and a duplicate is found
// exactly when encoding/json's tokens show one.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{`{"a":1,"a":2}`, `{"a":{"\u0061":1,"a":[]}}`, `[[[[1]]]]`, `{"x":"\ud800","x":"y"}`, `{"\ud800":1,"\udbff":2}`, "{\"\xff\":1,\"\xfe\":2}", `1e5`, `-0.5`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		err := Check(data, 8)
		if !json.Valid(data) {
			return
		}
		k := kindOf(err)
		if k == Syntax || (err != nil && k == 0) {
			t.Fatalf("valid JSON %q: %v", data, err)
		}
		if k == TooDeep {
			return
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		want, rerr := dupReference(dec)
		if rerr != nil {
			t.Skip()
		}
		if got := k == Duplicate; got != want {
			t.Fatalf("%q: Check says duplicate %v (%v), encoding/json's tokens %v", data, got, err, want)
		}
	})
}

func TestArrayLen(t *testing.T) {
	for in, want := range map[string]int{
		`[]`: 0, ` [ ] `: 0, `[1]`: 1, `[1,[2,3],{"a":1,"b":2},"x,y\",]"]`: 4, `{}`: -1, `1`: -1, ``: -1,
	} {
		if got := ArrayLen([]byte(in)); got != want {
			t.Errorf("ArrayLen(%s) = %d, want %d", in, got, want)
		}
	}
}
