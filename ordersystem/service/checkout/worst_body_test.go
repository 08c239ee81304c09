package checkout

import (
	"bytes"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// worstBodies are POST /orders bodies of DefaultMaxBodyBytes that are as
// costly as the parser allows: nested as deep as encoding/json takes
// (10,000 levels, with long member names so that each level's path is
// long), an object of many members, and long strings.
func worstBodies() map[string][]byte {
	const size = DefaultMaxBodyBytes
	deep := func(levels int) []byte {
		name := strings.Repeat("n", size/levels-8)
		var b bytes.Buffer
		for range levels {
			b.WriteString(`{"` + name + `":`)
		}
		b.WriteString("1")
		b.WriteString(strings.Repeat("}", levels))
		return b.Bytes()
	}
	many := func() []byte {
		var b bytes.Buffer
		b.WriteString(`{"x":{`)
		for i := 0; b.Len() < size-32; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`"` + strconv.Itoa(i) + `":0`)
		}
		b.WriteString(`}}`)
		return b.Bytes()
	}
	long := func() []byte {
		return []byte(`{"reference":"` + strings.Repeat("r", size-32) + `"}`)
	}
	deepArrays := func() []byte {
		return []byte(`{"lines":` + strings.Repeat("[", 9_990) + strings.Repeat("]", 9_990) + `}`)
	}
	manyLines := func() []byte {
		return []byte(`{"lines":[0` + strings.Repeat(",0", (size-32)/2) + `]}`)
	}
	maxLines := func() []byte {
		line := `{"stockCode":"` + strings.Repeat("s", size/MaxLines-40) + `","quantity":1}`
		return []byte(`{"lines":[` + line + strings.Repeat(","+line, MaxLines-1) + `]}`)
	}
	return map[string][]byte{
		"many-lines": manyLines(), "max-lines": maxLines(),
		"deep-9999": deep(9_999), "deep-1000": deep(1_000), "deep-arrays": deepArrays(),
		"many-members": many(), "long-string": long(),
	}
}

// BenchmarkParseWorstBody parses each worst-case body of worstBodies
// (B/op is the bytes allocated per request).
func BenchmarkParseWorstBody(b *testing.B) {
	for name, body := range worstBodies() {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				_, _ = parseRequest(body)
			}
		})
	}
}

// allocatedBy returns the bytes allocated while f runs once.
func allocatedBy(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// No body of at most the body limit makes the parser allocate more than a
// few MB: before the depth limit, a body nested 9,999 deep took gigabytes.
func TestWorstBodyAllocations(t *testing.T) {
	// 8 MiB: the largest accepted order (5,000 lines of long stock codes)
	// takes about 6.5 MB, every refused one at most 2.5 MB.
	const limit = 8 << 20
	for name, body := range worstBodies() {
		if len(body) > DefaultMaxBodyBytes {
			t.Fatalf("%s: body of %d bytes, over the limit", name, len(body))
		}
		var aerr *apiError
		got := allocatedBy(func() { _, aerr = parseRequest(body) })
		code := "accepted"
		switch {
		case aerr != nil && (aerr.status == 400 || aerr.status == 422):
			code = aerr.code
		case aerr != nil || name != "max-lines":
			t.Errorf("%s: %+v, want a 400 or 422", name, aerr)
		}
		t.Logf("%s: %d bytes allocated (%s)", name, got, code)
		if got > limit {
			t.Errorf("%s: %d bytes allocated for one body of %d bytes, want at most %d", name, got, len(body), limit)
		}
	}
}
