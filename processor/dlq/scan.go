// This file holds the read path every DLQ operation shares: a Selection of
// records, each partition's offsets (PartitionState) and the scan that reads
// the selected records in partition and offset order.

package dlq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/kread"
)

// Selection chooses DLQ records. The zero Selection is every record at or
// above its partition's purge position.
type Selection struct {
	// Partitions of the DLQ topic; empty means all.
	Partitions []int32
	// From is the first offset selected (inclusive) and Until the offset to
	// stop before (exclusive); 0 means no bound. They apply to each selected
	// partition (offsets are per partition).
	From, Until int64
	// Classes selects records whose ordercast-error-class header is one of
	// these ("undecodable", "invalid", "permanent", "transient", ...); empty
	// means any.
	Classes []string
	// Keys selects records whose key (as text) is one of these; empty means
	// any.
	Keys []string
	// IncludePurged also selects records below the purge position: List
	// marks them Purged, Replay refuses them (ErrPurged).
	IncludePurged bool
	// OriginalTopics selects records whose ordercast-original-topic header
	// (processor.HeaderOriginalTopic) is one of these; empty means any.
	OriginalTopics []string
	// IDs selects records whose ID ("<dlq topic>/<partition>/<offset>") is
	// one of these; empty means any. The other fields still apply.
	IDs []string
}

func (s *Selection) matches(r *Record) bool {
	if len(s.Classes) > 0 && !slices.Contains(s.Classes, r.ErrorClass) {
		return false
	}
	if len(s.Keys) > 0 && !slices.Contains(s.Keys, r.Key) {
		return false
	}
	if len(s.OriginalTopics) > 0 && !slices.Contains(s.OriginalTopics, r.OriginalTopic) {
		return false
	}
	if len(s.IDs) > 0 && !slices.Contains(s.IDs, r.ID) {
		return false
	}
	return true
}

// PartitionState is one DLQ partition's offsets.
type PartitionState struct {
	Partition int32 `json:"partition"`
	// Start is the log start offset (records below were deleted by the
	// topic's retention, never by these tools).
	Start int64 `json:"start"`
	// Position is the purge position: records below it are purged.
	Position int64 `json:"position"`
	// End is the last stable offset (one past the last readable record).
	End int64 `json:"end"`
	// Pending counts the records at or above Position: data records when
	// the whole partition was read, else End-Position (offsets, which may
	// include transaction markers).
	Pending int `json:"pending"`
}

// partitions returns the offsets of the given DLQ partitions (all when
// empty), sorted, checking that they exist.
func (d *DLQ) partitions(ctx context.Context, parts []int32, st *dlqState) ([]PartitionState, map[int32]kread.Bounds, error) {
	b, err := kread.PartitionBounds(ctx, d.cl, d.topic)
	if errors.Is(err, ErrNoTopic) {
		return nil, nil, fmt.Errorf("DLQ topic %s of group %s: %w (is the group right? `ordercast topics list` shows the topics; the DLQ is created with the system's topics)", d.topic, d.group, err)
	}
	if err != nil {
		return nil, nil, err
	}
	parts = slices.Clone(parts)
	if len(parts) == 0 {
		for p := range b {
			parts = append(parts, p)
		}
	}
	slices.Sort(parts)
	parts = slices.Compact(parts)
	states := make([]PartitionState, 0, len(parts))
	for _, p := range parts {
		pb, ok := b[p]
		if !ok {
			return nil, nil, fmt.Errorf("partition %d of %s does not exist (it has %d partitions, 0 to %d)", p, d.topic, len(b), len(b)-1)
		}
		states = append(states, PartitionState{Partition: p, Start: pb.Start, Position: max(st.position(p), pb.Start), End: pb.End})
	}
	return states, b, nil
}

// scan reads the selected records and calls fn for each in partition and
// offset order. It returns the selected partitions' offsets.
func (d *DLQ) scan(ctx context.Context, sel Selection, st *dlqState, fn func(*Record)) ([]PartitionState, error) {
	if sel.Until > 0 && sel.From >= sel.Until {
		return nil, fmt.Errorf("offset range [%d, %d) is empty: the first offset must be at most the last", sel.From, sel.Until-1)
	}
	states, _, err := d.partitions(ctx, sel.Partitions, st)
	if err != nil {
		return nil, err
	}
	parts := make([]int32, len(states))
	want := map[int32]kread.Bounds{}
	for i, s := range states {
		parts[i] = s.Partition
		from := max(s.Start, sel.From)
		if !sel.IncludePurged {
			from = max(from, s.Position)
		}
		until := s.End
		if sel.Until > 0 {
			until = min(until, sel.Until)
		}
		want[s.Partition] = kread.Bounds{Start: from, End: until}
	}
	var recs []*Record
	err = kread.ReadRange(ctx, d.opts, d.topic, want, func(r *kgo.Record) error {
		rec := parseRecord(r)
		rec.Purged = r.Offset < st.position(r.Partition)
		if m, ok := st.mark(Coord{r.Topic, r.Partition, r.Offset}); ok {
			rec.Replay = &m
		}
		i, _ := slices.BinarySearch(parts, r.Partition)
		if !rec.Purged {
			states[i].Pending++
		}
		if sel.matches(&rec) {
			recs = append(recs, &rec)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Pending counts every record of the partition above the position; when
	// the read started later or stopped earlier, count by offsets instead.
	for i := range states {
		if w := want[states[i].Partition]; w.Start > states[i].Position || w.End < states[i].End {
			states[i].Pending = int(states[i].End - states[i].Position)
		}
	}
	slices.SortFunc(recs, func(a, b *Record) int {
		if c := cmp.Compare(a.Partition, b.Partition); c != 0 {
			return c
		}
		return cmp.Compare(a.Offset, b.Offset)
	})
	for _, r := range recs {
		fn(r)
	}
	return states, nil
}
