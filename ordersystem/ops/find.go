// This file holds FindRecords: the records of topics that carry a given
// text in their value, such as an order id in the events of one order.

package ops

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/kread"
)

// FoundRecord is one record FindRecords found.
type FoundRecord struct {
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	Offset    int64     `json:"offset"`
	Timestamp time.Time `json:"timestamp"` // record timestamp, UTC
	Key       string    `json:"key"`       // as text ("0x"+hex when not UTF-8)
	Headers   []Header  `json:"headers,omitempty"`
	Value     []byte    `json:"-"` // the raw value, for DecodePayload
}

// FindResult is what FindRecords read and found.
type FindResult struct {
	Records []FoundRecord `json:"records"` // by topic (in the order asked), partition, offset
	// Scanned counts the records read; Truncated is true when a partition
	// held more than the window read (older records were not searched).
	Scanned   int  `json:"scanned"`
	Truncated bool `json:"truncated"`
}

// FindRecords reads the last window offsets of every partition of each topic
// (read_committed; 0 means the whole partition) and returns the records
// whose value contains needle byte for byte. An Avro or JSON string field
// is stored as its UTF-8 bytes, so an order id finds the events that carry
// it whatever their schema. A topic that does not exist is skipped. It
// reads each topic with a client of its own, bounded by ctx; opts are the
// base client options (seed brokers, TLS, SASL). Errors: an empty needle,
// a failed metadata or fetch.
func FindRecords(ctx context.Context, opts []kgo.Opt, topics []string, needle []byte, window int64) (*FindResult, error) {
	if len(needle) == 0 {
		return nil, errors.New("find records: the text to look for is empty")
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	res := &FindResult{Records: []FoundRecord{}}
	for _, t := range topics {
		b, err := kread.PartitionBounds(ctx, cl, t)
		if errors.Is(err, ErrNoTopic) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for p, pb := range b {
			if window > 0 && pb.End-pb.Start > window {
				pb.Start = pb.End - window
				res.Truncated = true
			}
			b[p] = pb
		}
		var found []FoundRecord
		err = kread.ReadRange(ctx, opts, t, b, func(r *kgo.Record) error {
			res.Scanned++
			if !bytes.Contains(r.Value, needle) {
				return nil
			}
			fr := FoundRecord{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp.UTC(), Key: kread.Display(r.Key), Value: r.Value}
			for _, h := range r.Headers {
				fr.Headers = append(fr.Headers, Header{Key: h.Key, Value: kread.Display(h.Value)})
			}
			found = append(found, fr)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("search %s: %w", t, err)
		}
		sortFound(found)
		res.Records = append(res.Records, found...)
	}
	return res, nil
}

func sortFound(rs []FoundRecord) {
	slices.SortFunc(rs, func(a, b FoundRecord) int {
		return cmp.Or(cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Offset, b.Offset))
	})
}
