// This file holds the read-only DLQ operations: List (count and list the
// selected records) and Show (one record with its value).

package dlq

import (
	"context"
	"fmt"
)

// Listing is the result of List.
type Listing struct {
	Group      string           `json:"group"`      // consumer group
	Topic      string           `json:"topic"`      // its DLQ topic
	Partitions []PartitionState `json:"partitions"` // the selected partitions' offsets
	// Selected counts the records that match the selection; ByClass and
	// ByOriginalTopic break it down, Replayed counts those already replayed.
	Selected        int            `json:"selected"`
	ByClass         map[string]int `json:"byClass"`
	ByOriginalTopic map[string]int `json:"byOriginalTopic"`
	Replayed        int            `json:"replayed"`
	// FailedReplays counts the selected records that are themselves
	// replays that failed again (Record.ReplayedFrom set).
	FailedReplays int `json:"failedReplays"`
	// Records are the first Limit selected records, without their values.
	Records []Record `json:"records"`
	// Truncated is true when more records were selected than returned.
	Truncated bool `json:"truncated"`
	// BlockedKeys are the group's keys held behind a record in a retry
	// topic or this DLQ (processor.BlockKeys); a record of Records that
	// holds one has BlocksKey set. Replaying that record (once its copy is
	// handled) or purging it releases the key.
	BlockedKeys []BlockedKey `json:"blockedKeys"`
}

// List reads the selected records of the DLQ (from the purge position to the
// last stable offset of each partition) and counts them by error class and
// original topic. It returns at most limit records (0: all) but counts all.
// It only reads; ctx bounds the whole call. Errors name the missing DLQ topic
// or partition.
func (d *DLQ) List(ctx context.Context, sel Selection, limit int) (*Listing, error) {
	st, err := readState(ctx, d.opts, d.cl, d.topic)
	if err != nil {
		return nil, err
	}
	bks, err := d.BlockedKeys(ctx)
	if err != nil {
		return nil, err
	}
	l := &Listing{Group: d.group, Topic: d.topic, ByClass: map[string]int{}, ByOriginalTopic: map[string]int{}, Records: []Record{}, BlockedKeys: bks}
	l.Partitions, err = d.scan(ctx, sel, st, func(r *Record) {
		r.BlocksKey = d.blocking(bks, r) != nil
		l.Selected++
		l.ByClass[r.ErrorClass]++
		l.ByOriginalTopic[r.OriginalTopic]++
		if r.Replay != nil {
			l.Replayed++
		}
		if r.ReplayedFrom != "" {
			l.FailedReplays++
		}
		if limit <= 0 || len(l.Records) < limit {
			rec := *r
			rec.Value, rec.raw = nil, nil
			l.Records = append(l.Records, rec)
		} else {
			l.Truncated = true
		}
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// Show returns the DLQ record at partition and offset with its value, all
// headers, and whether it was replayed or purged (a purged record is
// shown, with Purged set). Payload is nil: Record.Decode decodes the value.
// It only reads, bounded by ctx. Errors: ErrNoRecord when there is no data
// record at that offset (the message names the offsets the partition
// holds), ErrNoTopic when the DLQ topic does not exist, and a missing
// partition.
func (d *DLQ) Show(ctx context.Context, partition int32, offset int64) (*Record, error) {
	st, err := readState(ctx, d.opts, d.cl, d.topic)
	if err != nil {
		return nil, err
	}
	var found *Record
	states, err := d.scan(ctx, Selection{Partitions: []int32{partition}, From: offset, Until: offset + 1, IncludePurged: true}, st, func(r *Record) {
		found = r
	})
	if err != nil {
		return nil, err
	}
	if found == nil {
		s := states[0]
		if s.Start >= s.End {
			return nil, fmt.Errorf("%s: %w (partition %d holds no records now; its next offset is %d; `ordercast dlq list` shows the records)",
				Coord{d.topic, partition, offset}, ErrNoRecord, partition, s.End)
		}
		return nil, fmt.Errorf("%s: %w (partition %d holds offsets %d to %d; `ordercast dlq list` shows the records)",
			Coord{d.topic, partition, offset}, ErrNoRecord, partition, s.Start, s.End-1)
	}
	return found, nil
}
