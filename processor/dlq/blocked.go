package dlq

import (
	"context"
	"fmt"
	"time"

	"github.com/ordercast/ordercast/internal/kread"
	"github.com/ordercast/ordercast/processor"
)

// BlockedKey is a key of the group held behind one of its records in a
// retry topic or the DLQ (processor.BlockKeys): the group's later records
// of Key wait for the record RecordID (its original "topic/partition/offset"),
// which waits in At since Since.
type BlockedKey struct {
	Key      string    `json:"key"` // as text, as Record.Key
	RecordID string    `json:"recordId"`
	At       string    `json:"at"`
	Since    time.Time `json:"since"`
	key      []byte
}

// BlockedKeys reads the group's blocked-keys table
// (processor.BlockedKeysTopicName, with processor.ReadBlockedKeys): none
// when the group does not block keys. It only reads, bounded by ctx; the
// error wraps the read's.
func (d *DLQ) BlockedKeys(ctx context.Context) ([]BlockedKey, error) {
	bks, err := processor.ReadBlockedKeys(ctx, processor.BlockedKeysTopicName(d.group), d.opts...)
	if err != nil {
		return nil, fmt.Errorf("dlq: the blocked keys of %s: %w", d.group, err)
	}
	out := make([]BlockedKey, 0, len(bks))
	for _, b := range bks {
		out = append(out, BlockedKey{Key: kread.Display(b.Key), RecordID: b.ID, At: b.At, Since: b.Since.UTC(), key: b.Key})
	}
	return out, nil
}

// blocking returns the entry of bks that record r holds: r's key is held at
// this DLQ by r (the entry names r's original coordinates) and r is not
// replayed yet.
func (d *DLQ) blocking(bks []BlockedKey, r *Record) *BlockedKey {
	if r.Replay != nil || r.Purged {
		return nil
	}
	id := Coord{Topic: r.OriginalTopic, Partition: r.OriginalPartition, Offset: r.OriginalOffset}.String()
	for i := range bks {
		if bks[i].At == d.topic && bks[i].Key == r.Key && bks[i].RecordID == id {
			return &bks[i]
		}
	}
	return nil
}

// releaseKeys releases the keys the purged records held.
func (d *DLQ) releaseKeys(ctx context.Context, held []BlockedKey) error {
	for _, b := range held {
		if err := processor.ReleaseBlockedKey(ctx, d.cl, processor.BlockedKeysTopicName(d.group), b.key, b.RecordID); err != nil {
			return fmt.Errorf("dlq: releasing key %s after the purge: %w", b.Key, err)
		}
	}
	return nil
}
