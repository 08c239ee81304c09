package processor

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The completed-offsets map: records completed above the commit point travel
// with the commit, in the OffsetCommit's metadata string, so the next owner of
// the partition skips them instead of handling them again (docs/scenarios.md S17: in
// OrderKey a slow key holds the commit point back while later records of
// other keys complete; without the map a handover redoes those and a key's
// state goes backwards).
//
// # Format
//
//	"oc1:" base64url-nopad( uvarint(C) uvarint(n1) uvarint(d1) uvarint(n2) uvarint(d2) ... )
//
// C is the committed offset the map is relative to (a map whose C is not the
// offset it was committed with is ignored). From C on, the offsets are
// covered by alternating runs: n1 offsets not completed (the first run is
// never empty: offset C itself is the first record not done), then d1
// offsets completed, then n2 not completed, and so on; the map ends with a
// completed run, and every offset after it is not completed. Offsets that
// hold no record (compaction, transaction markers) fall into whichever run
// they are in: a consumer never sees them. Varints are encoding/binary's
// unsigned LEB128, as in Protocol Buffers.
//
// This is the run-length encoding of Confluent's Parallel Consumer offset map
// (which also offers a bitmap and compression, and stalls or replays when the
// encoded map exceeds the broker's limit). Ours is bounded by construction:
// the processor keeps an upper bound of the encoded size as records are
// admitted (offsetTracker.mapBound) and stops admitting a partition's records
// before the map could exceed the budget (CommitMetadataMaxBytes, the broker's
// offset.metadata.max.bytes, 4096 by default): backpressure, never a failed
// or truncated commit. The base64 keeps the metadata valid UTF-8 (Kafka's
// metadata is a STRING; a Java broker would mangle raw bytes).
//
// Metadata that is not in this format (another client's, an empty string, an
// older format) yields no map: the partition is handled from the committed
// offset, as without the map.
//
// # The group's start time
//
// With StartOffset(Latest) the metadata ends with an optional suffix:
//
//	"oc1:" [map] ";t=" decimal(T)
//
// T is the group's first start in Unix milliseconds (see StartOffset): a
// partition without a commit that a member finds later (one added to the
// topic) is resolved as AtTime(T). The base64url alphabet has no ';', so
// the suffix is found by its first ';'. A suffix with no map before it
// ("oc1:;t=1764590000000") is no map. decodeOffsetMap ignores everything
// from the ';' on; decodeGroupStart reads T.

// offsetMapPrefix starts every metadata string this runtime writes.
const offsetMapPrefix = "oc1:"

// DefaultCommitMetadataMaxBytes is the default budget for the completed-offsets
// map in a commit's metadata: Kafka's offset.metadata.max.bytes default.
const DefaultCommitMetadataMaxBytes = 4096

// mapRawBudget is the number of raw (pre-base64) bytes a map may take within
// a metadata string of at most maxBytes.
func mapRawBudget(maxBytes int) int {
	if maxBytes <= len(offsetMapPrefix) {
		return 0
	}
	return (maxBytes - len(offsetMapPrefix)) * 3 / 4
}

// uvarintLen is the length of v as a uvarint.
func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// offsetRange is a run of completed offsets, [lo, hi] inclusive.
type offsetRange struct{ lo, hi int64 }

// encodeOffsetMap encodes the completed offsets above the commit point base:
// the completed entries of t, and after the last entry t holds, the offsets
// an earlier owner completed (t.earlier) that t has not admitted yet. Those
// must travel on too: this member skips them once it admits them, but until
// then only its commit can tell the next owner about them, and a commit of
// the admitted entries alone would lose them on a second handover (the next
// owner would handle them again, after newer records of their keys). The
// entries' part fits the budget by admission (mapBound); earlier ranges
// that would take the metadata past maxBytes (> 0) are left out, from the
// last one back (those records are handled again: at-least-once). It
// returns "" when nothing above base is completed. p.mu held by the caller.
func (t *offsetTracker) encodeOffsetMap(base int64, maxBytes int) string {
	if base < 0 {
		return ""
	}
	var ranges []offsetRange
	add := func(lo, hi int64) {
		if n := len(ranges); n > 0 && ranges[n-1].hi+1 >= lo {
			ranges[n-1].hi = max(ranges[n-1].hi, hi)
			return
		}
		ranges = append(ranges, offsetRange{lo, hi})
	}
	prev := base - 1
	for _, e := range t.entries[t.head:] {
		if e.done {
			add(prev+1, e.offset)
		}
		prev = e.offset
	}
	own := len(ranges)
	for _, r := range t.earlier {
		// Offsets up to prev are the entries' (done or not, as this
		// member has them); a range at base would leave the first run
		// empty (base is the first offset not done): left out.
		if lo := max(r.lo, prev+1); r.hi >= lo && lo > base {
			add(lo, r.hi)
		}
	}
	if len(ranges) == 0 {
		return ""
	}
	encode := func(rs []offsetRange) string {
		buf := make([]byte, 0, 16+4*len(rs))
		buf = binary.AppendUvarint(buf, uint64(base))
		at := base
		for _, r := range rs {
			buf = binary.AppendUvarint(buf, uint64(r.lo-at))
			buf = binary.AppendUvarint(buf, uint64(r.hi-r.lo+1))
			at = r.hi + 1
		}
		return offsetMapPrefix + base64.RawURLEncoding.EncodeToString(buf)
	}
	meta := encode(ranges)
	if maxBytes <= 0 || len(meta) <= maxBytes || len(ranges) <= own {
		return meta
	}
	// Too long with every earlier range: keep as many as fit (the
	// length only grows with the ranges kept).
	lo, hi := own, len(ranges) // ranges[:lo] fit; ranges[:hi] do not
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if len(encode(ranges[:mid])) <= maxBytes {
			lo = mid
		} else {
			hi = mid
		}
	}
	if lo == 0 {
		return ""
	}
	return encode(ranges[:lo])
}

// errNotOffsetMap is returned by decodeOffsetMap for metadata this runtime did
// not write.
var errNotOffsetMap = errors.New("processor: not an ordercast offset map")

// decodeOffsetMap returns the completed ranges of a map committed with offset
// committed, ascending. Metadata in another format returns errNotOffsetMap; a
// map relative to another offset, or a malformed one, returns an error
// describing it. The ranges it returns are all at or above committed. A
// suffix after the map (";t=...", the group's start time) is ignored;
// metadata with a suffix and no map before it returns no ranges and no
// error.
func decodeOffsetMap(meta string, committed int64) ([]offsetRange, error) {
	if !strings.HasPrefix(meta, offsetMapPrefix) {
		return nil, errNotOffsetMap
	}
	body := meta[len(offsetMapPrefix):]
	if i := strings.IndexByte(body, ';'); i >= 0 {
		// A suffix (the group's start time): not part of the map.
		if body = body[:i]; body == "" {
			return nil, nil
		}
	}
	raw, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil {
		return nil, fmt.Errorf("offset map: %w", err)
	}
	next := func() (int64, error) {
		v, n := binary.Uvarint(raw)
		if n <= 0 || v > 1<<62 {
			return 0, errors.New("offset map: bad varint")
		}
		raw = raw[n:]
		return int64(v), nil
	}
	base, err := next()
	if err != nil {
		return nil, err
	}
	if base != committed {
		return nil, fmt.Errorf("offset map relative to offset %d, committed offset is %d", base, committed)
	}
	var out []offsetRange
	at := base
	for i := 0; len(raw) > 0; i++ {
		n, err := next()
		if err != nil {
			return nil, err
		}
		if n == 0 || at > 1<<62-n {
			return nil, fmt.Errorf("offset map: run %d of length %d", i, n)
		}
		if i%2 == 1 {
			out = append(out, offsetRange{at, at + n - 1})
		}
		at += n
	}
	if len(out) == 0 {
		return nil, errors.New("offset map: no completed run")
	}
	return out, nil
}

// groupStartSep introduces the group's start time in the metadata.
const groupStartSep = ";t="

// groupStartSuffixMaxLen is the longest suffix withGroupStart appends
// (";t=" and the 19 digits of the largest int64): the room a commit keeps
// for it out of CommitMetadataMaxBytes.
const groupStartSuffixMaxLen = len(groupStartSep) + 19

// withGroupStart returns meta (a map from encodeOffsetMap, or "" for none)
// with the group's start time t (Unix ms) appended: "oc1:;t=<t>" when meta
// is "". t <= 0 (not known) returns meta unchanged.
func withGroupStart(meta string, t int64) string {
	if t <= 0 {
		return meta
	}
	if meta == "" {
		meta = offsetMapPrefix
	}
	return meta + groupStartSep + strconv.FormatInt(t, 10)
}

// decodeGroupStart returns the group's start time (Unix ms, > 0) that meta
// carries, and false when it carries none: metadata in another format, no
// suffix, or a suffix that is not ";t=" and 1 to 19 decimal digits.
func decodeGroupStart(meta string) (int64, bool) {
	if !strings.HasPrefix(meta, offsetMapPrefix) {
		return 0, false
	}
	i := strings.IndexByte(meta, ';')
	if i < 0 || !strings.HasPrefix(meta[i:], groupStartSep) {
		return 0, false
	}
	digits := meta[i+len(groupStartSep):]
	if len(digits) == 0 || len(digits) > 19 || strings.Trim(digits, "0123456789") != "" {
		return 0, false
	}
	t, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || t <= 0 {
		return 0, false
	}
	return t, true
}
