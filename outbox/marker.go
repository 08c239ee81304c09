package outbox

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// marker is the progress marker's value: the exact ids of the rows its
// transaction published, as inclusive ranges, and their checksum; in
// version 2 also those of the previous transaction (Prev, PrevSum), whose
// rows were still being marked sent when this one was built.
type marker struct {
	V       int        `json:"v"`
	IDs     [][2]int64 `json:"ids"`
	Sum     string     `json:"sum"`
	Prev    [][2]int64 `json:"prev,omitempty"`
	PrevSum string     `json:"prevSum,omitempty"`
	At      int64      `json:"at"` // unix ms, informational
}

// toRanges compresses ascending ids into inclusive ranges.
func toRanges(ids []int64) [][2]int64 {
	var out [][2]int64
	for _, id := range ids {
		if n := len(out); n > 0 && out[n-1][1]+1 == id {
			out[n-1][1] = id
			continue
		}
		out = append(out, [2]int64{id, id})
	}
	return out
}

// rowSum is what the checksum covers of a row.
type rowSum struct {
	id         int64
	topic      string
	key, value []byte
}

// checksum is FNV-1a 64 over each row's id, topic, key and value (length
// prefixed, nil distinct from empty), in id order, as 16 hex digits.
func checksum(rows []rowSum) string {
	h := fnv.New64a()
	var b [8]byte
	put := func(p []byte, isNil bool) {
		n := int64(len(p))
		if isNil {
			n = -1
		}
		binary.BigEndian.PutUint64(b[:], uint64(n))
		h.Write(b[:])
		h.Write(p)
	}
	for _, rw := range rows {
		binary.BigEndian.PutUint64(b[:], uint64(rw.id))
		h.Write(b[:])
		put([]byte(rw.topic), false)
		put(rw.key, rw.key == nil)
		put(rw.value, rw.value == nil)
	}
	return fmt.Sprintf("%016x", h.Sum64())
}

// readMarker returns the last committed marker of this relay, or nil if
// there is none. It reads backwards from the last stable offset in growing
// windows.
func (r *Relay) readMarker(ctx context.Context, cl *kgo.Client) (*marker, error) {
	topic := r.txn.markerTopic
	adm := kadm.NewClient(cl)
	ends, err := adm.ListCommittedOffsets(ctx, topic) // last stable offset
	if err != nil {
		return nil, fmt.Errorf("outbox: marker topic %s end offset: %w", topic, err)
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("outbox: marker topic %s start offset: %w", topic, err)
	}
	end, ok1 := ends.Lookup(topic, 0)
	start, ok2 := starts.Lookup(topic, 0)
	if !ok1 || !ok2 || end.Err != nil || start.Err != nil {
		return nil, fmt.Errorf("outbox: marker topic %s partition 0 offsets unavailable: %v %v", topic, end.Err, start.Err)
	}
	if end.Offset <= start.Offset {
		return nil, nil
	}
	for window := int64(16); ; window *= 8 {
		from := max(start.Offset, end.Offset-window)
		m, err := r.scanMarkers(ctx, from, end.Offset)
		if err != nil || m != nil || from == start.Offset {
			return m, err
		}
	}
}

// scanMarkers reads [from, end) of the marker partition as a
// read_committed reader and returns the last marker with this relay's key.
func (r *Relay) scanMarkers(ctx context.Context, from, end int64) (*marker, error) {
	topic := r.txn.markerTopic
	rd, err := kgo.NewClient(append(r.txn.clientOptsFor(ClientMarkers),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(from)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), // the last offset below the LSO is usually a commit marker
	)...)
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var last *kgo.Record
	for done := false; !done; {
		fs := rd.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("outbox: reading marker topic %s from %d to %d: %w", topic, from, end, ctx.Err())
		}
		fs.EachRecord(func(rec *kgo.Record) {
			if rec.Offset >= end {
				done = true
				return
			}
			if !rec.Attrs.IsControl() && string(rec.Key) == r.txn.name {
				last = rec
			}
			if rec.Offset >= end-1 {
				done = true
			}
		})
	}
	if last == nil {
		return nil, nil
	}
	var m marker
	if err := json.Unmarshal(last.Value, &m); err != nil || (m.V != markerVersion && m.V != markerVersionPrev) {
		return nil, &fatalError{fmt.Errorf("outbox: marker at %s/0@%d is not a version %d or %d marker (%v): is another program writing to this topic?", topic, last.Offset, markerVersion, markerVersionPrev, err)}
	}
	return &m, nil
}
