// Package jsonlimit bounds the cost of JSON read from outside: one walk over
// the input, before it is decoded, that refuses nesting deeper than a limit
// and finds members that appear twice in one object, in time linear in the
// input and memory bounded by it (the names of the objects open at once),
// without a string per nesting level. The JSON path of an offending value
// ("lines[2].quantity") is built only for the error that names it.
//
// encoding/json takes 10,000 levels of nesting and keeps the last of
// duplicated members silently; RFC 8259 section 4 leaves duplicate names'
// meaning undefined, and RFC 7519 section 4 and RFC 7515 section 5.2 allow a
// JWT's parser to refuse them.
package jsonlimit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// DefaultMaxDepth is the nesting limit the order system applies to JSON
// from outside: 32 levels (an order body needs 3, a JWKS 3, an event 4).
const DefaultMaxDepth = 32

// maxPathLen bounds the JSON path an Error names, in bytes.
const maxPathLen = 200

// Kind is what an Error found.
type Kind int

const (
	// TooDeep: an object or array opens at a nesting depth above the limit.
	TooDeep Kind = iota + 1
	// Duplicate: a member name appears twice in one object (names compared
	// after unescaping, as encoding/json compares them).
	Duplicate
	// Syntax: the input is not JSON where the walk stopped. The walk is no
	// validator: decode the input with encoding/json for its message.
	Syntax
)

// Error is what Check refuses. Path is the JSON path of the value at fault
// (the too deep object or array, the second of the duplicated members),
// "" for the top level, at most 200 bytes ("..." ending a cut one); Offset
// is its byte offset in the input.
type Error struct {
	Kind     Kind
	Path     string
	Offset   int
	MaxDepth int
}

func (e *Error) Error() string {
	switch e.Kind {
	case TooDeep:
		return fmt.Sprintf("JSON nested deeper than %d levels at byte %d (%s)", e.MaxDepth, e.Offset, pathOrTop(e.Path))
	case Duplicate:
		return fmt.Sprintf("JSON member %q appears more than once in its object (byte %d)", e.Path, e.Offset)
	}
	return fmt.Sprintf("invalid JSON at byte %d", e.Offset)
}

func pathOrTop(p string) string {
	if p == "" {
		return "the top level"
	}
	return p
}

// frame is an object or array open during the walk.
type frame struct {
	object bool
	index  int // array: the current element's index
	first  int // object: index in w.names of its first member
	arena  int // object: len(w.arena) when it opened
}

// name is a member name: its bytes, data[start:end] for a name without
// escapes nor non-ASCII bytes, else w.arena[start:end&^inArena] unescaped,
// and the offset of its opening quote.
type name struct {
	start, end uint32
	off        int32
}

const inArena = 1 << 31

type walker struct {
	data     []byte
	maxDepth int
	stack    []frame
	arena    []byte // unescaped names (those that need it) of the open objects, stack-like
	names    []name // the members of the open objects, stack-like
	dup      *Error // the earliest duplicate found
	sized    bool   // names has the capacity of every member left
}

// Check walks data, one JSON value, and returns nil or an *Error: TooDeep
// for the first object or array that opens deeper than maxDepth levels
// (the top-level value is level 1; maxDepth <= 0 means DefaultMaxDepth),
// at once, without walking further; else Syntax where data stops being
// JSON; else Duplicate for the first duplicated member in the input's
// order. Its allocations are bounded by the member names of the objects
// open at once (at most len(data)) and by maxDepth. Safe for concurrent
// use; data is not modified.
func Check(data []byte, maxDepth int) error {
	if maxDepth <= 0 {
		maxDepth = DefaultMaxDepth
	}
	if len(data) > 1<<31-1 {
		return &Error{Kind: Syntax, Offset: 1<<31 - 1, MaxDepth: maxDepth}
	}
	w := &walker{data: data, maxDepth: maxDepth}
	if err := w.walk(); err != nil {
		return err
	}
	if w.dup != nil {
		return w.dup
	}
	return nil
}

// Unmarshal is Check, then json.Unmarshal into v: an *Error for a value too
// deep or a duplicated member, else encoding/json's error, if any.
func Unmarshal(data []byte, v any, maxDepth int) error {
	if err := Check(data, maxDepth); err != nil {
		var e *Error
		if !errors.As(err, &e) || e.Kind != Syntax {
			return err
		}
	}
	return json.Unmarshal(data, v)
}

func (w *walker) syntax(i int) error {
	return &Error{Kind: Syntax, Offset: i, MaxDepth: w.maxDepth}
}

func skipSpace(d []byte, i int) int {
	for i < len(d) && (d[i] == ' ' || d[i] == '\t' || d[i] == '\n' || d[i] == '\r') {
		i++
	}
	return i
}

// walk is an iterative scanner: at each step it expects a value, or the
// member or element after one.
func (w *walker) walk() error {
	d := w.data
	i := skipSpace(d, 0)
	for {
		// A value at i.
		if i >= len(d) {
			return w.syntax(i)
		}
		switch c := d[i]; {
		case c == '{' || c == '[':
			if len(w.stack) >= w.maxDepth {
				return &Error{Kind: TooDeep, Path: w.path(-1), Offset: i, MaxDepth: w.maxDepth}
			}
			w.stack = append(w.stack, frame{object: c == '{', first: len(w.names), arena: len(w.arena)})
			i = skipSpace(d, i+1)
			closer := byte(']')
			if c == '{' {
				closer = '}'
			}
			if i < len(d) && d[i] == closer {
				i++
				w.pop()
				break
			}
			if c == '{' {
				var err error
				if i, err = w.member(i); err != nil {
					return err
				}
			}
			continue
		case c == '"':
			end, _, err := w.str(i)
			if err != nil {
				return err
			}
			i = end
		case c == '-' || '0' <= c && c <= '9':
			j := i + 1
			for j < len(d) && (d[j] >= '0' && d[j] <= '9' || d[j] == '.' || d[j] == 'e' || d[j] == 'E' || d[j] == '+' || d[j] == '-') {
				j++
			}
			i = j
		default:
			lit := ""
			switch c {
			case 't':
				lit = "true"
			case 'f':
				lit = "false"
			case 'n':
				lit = "null"
			}
			if lit == "" || !bytes.HasPrefix(d[i:], []byte(lit)) {
				return w.syntax(i)
			}
			i += len(lit)
		}
		// After a value: the next member or element, or the end of
		// containers.
		for {
			i = skipSpace(d, i)
			if len(w.stack) == 0 {
				if i != len(d) {
					return w.syntax(i)
				}
				return nil
			}
			top := &w.stack[len(w.stack)-1]
			if i >= len(d) {
				return w.syntax(i)
			}
			switch {
			case d[i] == ',':
				i = skipSpace(d, i+1)
				if top.object {
					var err error
					if i, err = w.member(i); err != nil {
						return err
					}
				} else {
					top.index++
				}
			case top.object && d[i] == '}', !top.object && d[i] == ']':
				i++
				w.pop()
				continue
			default:
				return w.syntax(i)
			}
			break
		}
	}
}

// member reads a member name and its colon at i, records the name in the
// innermost object, and returns the offset of its value.
func (w *walker) member(i int) (int, error) {
	d := w.data
	if i >= len(d) || d[i] != '"' {
		return 0, w.syntax(i)
	}
	end, esc, err := w.str(i)
	if err != nil {
		return 0, err
	}
	n := name{start: uint32(i + 1), end: uint32(end - 1), off: int32(i)}
	if esc {
		n.start = uint32(len(w.arena))
		w.arena = unescape(w.arena, d[i+1:end-1])
		n.end = uint32(len(w.arena)) | inArena
	}
	if len(w.names) == cap(w.names) && len(w.names) >= 64 && !w.sized {
		// Many members: room for all those left, at once, rather than
		// append's repeated growth (5 times the final size in all).
		w.sized = true
		w.names = slices.Grow(w.names, countMembers(d[i:]))
	}
	w.names = append(w.names, n)
	j := skipSpace(d, end)
	if j >= len(d) || d[j] != ':' {
		return 0, w.syntax(j)
	}
	return skipSpace(d, j+1), nil
}

// pop closes the innermost container: an object's names are checked for
// duplicates, then forgotten.
func (w *walker) pop() {
	f := w.stack[len(w.stack)-1]
	if f.object {
		w.checkNames(f.first)
		w.arena = w.arena[:f.arena]
		w.names = w.names[:f.first]
	}
	w.stack = w.stack[:len(w.stack)-1]
}

// checkNames records the earliest duplicate among w.names[first:], the
// members of the innermost object (still on the stack, for its path).
func (w *walker) checkNames(first int) {
	ns := w.names[first:]
	if len(ns) < 2 {
		return
	}
	get := w.bytes
	best := -1 // index in ns of the earliest second occurrence
	if len(ns) <= 16 {
		for j := 1; j < len(ns) && best < 0; j++ {
			for k := 0; k < j; k++ {
				if bytes.Equal(get(ns[j]), get(ns[k])) {
					best = j
					break
				}
			}
		}
	} else {
		// Sort the members by name (then offset), in place (they are
		// forgotten when the object closes): a duplicate's occurrences are
		// adjacent, the later one second.
		sorted := ns
		slices.SortFunc(sorted, func(a, b name) int {
			if c := bytes.Compare(get(a), get(b)); c != 0 {
				return c
			}
			return int(a.off - b.off)
		})
		var off int32 = -1
		for j := 1; j < len(sorted); j++ {
			if bytes.Equal(get(sorted[j]), get(sorted[j-1])) && (off < 0 || sorted[j].off < off) {
				off = sorted[j].off
			}
		}
		for j, n := range ns {
			if n.off == off {
				best = j
			}
		}
	}
	if best < 0 || (w.dup != nil && w.dup.Offset <= int(ns[best].off)) {
		return
	}
	// The path of the duplicate: the object's path, then its name.
	n := ns[best]
	w.dup = &Error{Kind: Duplicate, Path: truncate(join(w.path(len(w.stack)-1), string(get(n)))), Offset: int(n.off), MaxDepth: w.maxDepth}
}

// path is the JSON path of the value being read in the first upto frames
// (upto < 0: all of them): member names joined with ".", array indexes in
// brackets. It allocates: call it only for an error.
func (w *walker) path(upto int) string {
	if upto < 0 || upto > len(w.stack) {
		upto = len(w.stack)
	}
	// The member being read of an object frame is the last of its names,
	// which end where the names of the next object frame above it begin.
	cur := make([]int, upto)
	next := len(w.names)
	for k := len(w.stack) - 1; k >= 0; k-- {
		if f := w.stack[k]; f.object {
			if k < upto {
				cur[k] = next - 1
			}
			next = f.first
		}
	}
	var b []byte
	for k, f := range w.stack[:upto] {
		if len(b) > maxPathLen {
			break
		}
		if f.object {
			if len(b) > 0 {
				b = append(b, '.')
			}
			n := w.names[cur[k]]
			b = append(b, w.bytes(n)...)
		} else {
			b = append(b, '[')
			b = strconv.AppendInt(b, int64(f.index), 10)
			b = append(b, ']')
		}
	}
	return truncate(string(b))
}

// countMembers returns an upper bound of the members in d: its colons
// outside string literals.
func countMembers(d []byte) int {
	n := 0
	in := false
	for i := 0; i < len(d); i++ {
		switch c := d[i]; {
		case in && c == '\\':
			i++
		case c == '"':
			in = !in
		case !in && c == ':':
			n++
		}
	}
	return n
}

// bytes returns the unescaped bytes of n.
func (w *walker) bytes(n name) []byte {
	if n.end&inArena != 0 {
		return w.arena[n.start : n.end&^inArena]
	}
	return w.data[n.start:n.end]
}

func join(at, n string) string {
	if at == "" {
		return n
	}
	return at + "." + n
}

func truncate(s string) string {
	if len(s) <= maxPathLen {
		return s
	}
	return s[:maxPathLen] + "..."
}

// str scans the string literal at i and returns the offset after its
// closing quote and whether its content needs unescape (escapes or
// non-ASCII bytes).
func (w *walker) str(i int) (int, bool, error) {
	d := w.data
	esc := false
	for j := i + 1; j < len(d); j++ {
		switch c := d[j]; {
		case c == '"':
			return j + 1, esc, nil
		case c == '\\':
			esc = true
			j++
		case c >= utf8.RuneSelf:
			esc = true // compared as encoding/json decodes it
		case c < 0x20:
			return 0, false, w.syntax(j)
		}
	}
	return 0, false, w.syntax(len(d))
}

// unescape appends the string literal's content s (no quotes), unescaped
// as encoding/json does (invalid UTF-8 and lone surrogates as U+FFFD), to
// dst.
func unescape(dst, s []byte) []byte {
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s):
			e := s[i+1]
			i += 2
			switch e {
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r := hex4(s, i)
				i += 4
				if utf16.IsSurrogate(r) {
					r2 := rune(-1)
					if i+1 < len(s) && s[i] == '\\' && s[i+1] == 'u' {
						r2 = hex4(s, i+2)
					}
					if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
						r = dec
						i += 6
					} else {
						r = utf8.RuneError
					}
				}
				dst = utf8.AppendRune(dst, r)
			default: // '"', '\\', '/'
				dst = append(dst, e)
			}
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
		default:
			r, n := utf8.DecodeRune(s[i:])
			dst = utf8.AppendRune(dst, r)
			i += n
		}
	}
	return dst
}

func hex4(s []byte, i int) rune {
	if i+4 > len(s) {
		return utf8.RuneError
	}
	v, err := strconv.ParseUint(string(s[i:i+4]), 16, 16)
	if err != nil {
		return utf8.RuneError
	}
	return rune(v)
}

// ArrayLen returns the number of elements of data, a valid JSON array
// (white space around it allowed), without decoding them and without
// allocating: to refuse an array too long before json.Unmarshal makes a
// slice of it. It returns -1 when data is not an array.
func ArrayLen(data []byte) int {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '[' {
		return -1
	}
	if j := skipSpace(data, i+1); j < len(data) && data[j] == ']' {
		return 0
	}
	n, depth, in := 1, 0, false
	for ; i < len(data); i++ {
		switch c := data[i]; {
		case in && c == '\\':
			i++
		case c == '"':
			in = !in
		case in:
		case c == '[' || c == '{':
			depth++
		case c == ']' || c == '}':
			depth--
		case c == ',' && depth == 1:
			n++
		}
	}
	return n
}
