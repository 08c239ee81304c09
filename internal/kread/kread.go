// Package kread reads Kafka topics as a read_committed reader between given
// offsets: the partitions of a topic with their log start and last stable
// offsets (PartitionBounds), and the records of offset ranges (ReadRange).
// The runtime's DLQ tools (processor/dlq) and the operator's record search
// share it. It imports franz-go and the standard library only.
package kread

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ErrNoTopic: the topic does not exist.
var ErrNoTopic = errors.New("topic does not exist")

// Bounds are the readable offsets of one partition: [Start, End), where End
// is the last stable offset (the end a read_committed reader can reach).
type Bounds struct{ Start, End int64 }

// PartitionBounds lists topic's partitions with their log start and last
// stable offsets. It returns an error wrapping ErrNoTopic when the topic does
// not exist.
//
// It asks a broker for the topic's metadata directly first: kadm answers
// from the client's metadata cache (up to MetadataMinAge, 5s, old), which
// may still say that a topic created a moment ago does not exist; the direct
// request also refreshes that cache for the offset lookups that follow.
func PartitionBounds(ctx context.Context, cl *kgo.Client, topic string) (map[int32]Bounds, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	var parts []int32
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); errors.Is(err, kerr.UnknownTopicOrPartition) {
			return nil, fmt.Errorf("%s: %w", topic, ErrNoTopic)
		} else if err != nil {
			return nil, fmt.Errorf("metadata of %s: %w", topic, err)
		}
		for _, p := range t.Partitions {
			parts = append(parts, p.Partition)
		}
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("%s: %w", topic, ErrNoTopic)
	}
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("start offsets of %s: %w", topic, err)
	}
	ends, err := adm.ListCommittedOffsets(ctx, topic) // last stable offsets
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	out := make(map[int32]Bounds, len(parts))
	for _, p := range parts {
		s, sok := starts.Lookup(topic, p)
		e, eok := ends.Lookup(topic, p)
		switch {
		case !sok || !eok:
			return nil, fmt.Errorf("offsets of %s partition %d: missing from the broker's answer", topic, p)
		case s.Err != nil:
			return nil, fmt.Errorf("start offset of %s partition %d: %w", topic, p, s.Err)
		case e.Err != nil:
			return nil, fmt.Errorf("end offset of %s partition %d: %w", topic, p, e.Err)
		}
		out[p] = Bounds{Start: s.Offset, End: e.Offset}
	}
	return out, nil
}

// ReadRange reads topic's records as a read_committed reader, for each
// partition p in want from want[p].Start (inclusive) to want[p].End
// (exclusive), and calls fn for each data record, in offset order within a
// partition. Records of aborted transactions and transaction markers are not
// passed to fn. It returns fn's first error, or ctx's error if the ranges
// could not be read to their ends in time. opts are the base client options
// (seed brokers, TLS, SASL).
func ReadRange(ctx context.Context, opts []kgo.Opt, topic string, want map[int32]Bounds, fn func(*kgo.Record) error) error {
	offsets := map[int32]kgo.Offset{}
	left := map[int32]int64{}
	for p, b := range want {
		if b.End > b.Start {
			offsets[p] = kgo.NewOffset().At(b.Start)
			left[p] = b.End
		}
	}
	if len(left) == 0 {
		return nil
	}
	// Transaction markers are kept so that the last offset of a range is
	// seen even when it is a marker; they are skipped below.
	rd, err := kgo.NewClient(append(append([]kgo.Opt{}, opts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	)...)
	if err != nil {
		return err
	}
	defer rd.Close()
	for len(left) > 0 {
		f := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("reading %s: %d partitions not read to their end: %w", topic, len(left), err)
		}
		var ferr error
		f.EachError(func(_ string, p int32, err error) {
			if !kerr.IsRetriable(err) && ferr == nil {
				ferr = fmt.Errorf("reading %s partition %d: %w", topic, p, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		var fnErr error
		f.EachPartition(func(fp kgo.FetchTopicPartition) {
			end, ok := left[fp.Partition]
			if !ok {
				return
			}
			for _, r := range fp.Records {
				if r.Offset >= end {
					break
				}
				if !r.Attrs.IsControl() && fnErr == nil {
					fnErr = fn(r)
				}
			}
			if n := len(fp.Records); n > 0 && fp.Records[n-1].Offset+1 >= end {
				delete(left, fp.Partition)
			}
		})
		if fnErr != nil {
			return fnErr
		}
	}
	return nil
}

// Display renders key or header bytes as text: the bytes themselves when
// they are valid UTF-8, else "0x" and their hex.
func Display(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return "0x" + hex.EncodeToString(b)
}
