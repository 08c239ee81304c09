// This file holds ResetOffsets: moving a member-less consumer group's
// committed offsets to the earliest or latest offset, a time or a given
// offset, with a dry run that says how far each partition moves.

package ops

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// Reset positions for ResetOptions.To.
const (
	ResetEarliest = "earliest" // each partition's log start offset
	ResetLatest   = "latest"   // each partition's high watermark: skip everything there now
	ResetTime     = "time"     // the first offset stamped at or after ResetOptions.Time
	ResetOffset   = "offset"   // ResetOptions.Offset, clamped to the partition's [start, end]
)

// ResetOptions selects the partitions of ResetOffsets and where they go.
type ResetOptions struct {
	// Topic whose partitions move; "" means every topic the group has a
	// committed offset on.
	Topic string
	// Partitions of Topic; empty means all of its partitions (Topic set)
	// or all with a committed offset (Topic empty).
	Partitions []int32
	// To is ResetEarliest, ResetLatest, ResetTime or ResetOffset.
	To string
	// Time is the time of ResetTime: the new offset is the first record's
	// with a timestamp at or after it (ListOffsets by timestamp, KIP-79),
	// or the end when none is.
	Time time.Time
	// Offset is the offset of ResetOffset, clamped into [log start, high
	// watermark].
	Offset int64
	// DryRun computes the result and commits nothing.
	DryRun bool
}

// ResetPartition is what ResetOffsets does to one partition.
type ResetPartition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Committed is the offset committed before (-1: none), New the offset
	// committed now (or in a dry run, that would be).
	Committed int64 `json:"committed"`
	New       int64 `json:"new"`
	// Skipped counts the offsets from Committed up to New that the group
	// will not read (New above Committed); Again those from New up to
	// Committed it will read a second time (New below Committed). Offsets,
	// not records: transaction markers count too. For a partition without
	// a commit, Committed is taken as the log start offset.
	Skipped int64 `json:"skipped"`
	Again   int64 `json:"again"`
}

// ResetResult is what ResetOffsets did.
type ResetResult struct {
	Group      string           `json:"group"`
	To         string           `json:"to"`
	DryRun     bool             `json:"dryRun,omitempty"`
	Partitions []ResetPartition `json:"partitions"` // sorted by topic and partition
	Skipped    int64            `json:"skipped"`    // sum over Partitions
	Again      int64            `json:"again"`      // sum over Partitions
}

// ResetOffsets commits new offsets for the selected partitions of group,
// which must have no members: a group with members is refused with an error
// wrapping ErrGroupActive (its members would overwrite the commit, and the
// coordinator refuses commits from a non-member of an active generation).
// This is what kafka-consumer-groups.sh --reset-offsets does. It blocks
// for one DescribeGroups, the offset lookups and one OffsetCommit, bounded
// by ctx. Errors: an unknown To, a topic that does not exist, nothing to
// reset, or the broker's.
func ResetOffsets(ctx context.Context, adm *kadm.Client, group string, o ResetOptions) (*ResetResult, error) {
	switch o.To {
	case ResetEarliest, ResetLatest, ResetOffset:
	case ResetTime:
		if o.Time.IsZero() {
			return nil, errors.New("reset to a time: the time is required")
		}
	default:
		return nil, fmt.Errorf("reset to %q: want %s, %s, %s or %s", o.To, ResetEarliest, ResetLatest, ResetTime, ResetOffset)
	}
	if o.To == ResetOffset && o.Offset < 0 {
		return nil, fmt.Errorf("reset to offset %d: want >= 0", o.Offset)
	}
	gs, err := DescribeGroups(ctx, adm, group)
	if err != nil {
		return nil, err
	}
	g := gs[0]
	if g.Type == "share" {
		return nil, fmt.Errorf("group %s is a share group (KIP-932): it commits no offsets; move its share-partition start offsets with kafka-share-groups.sh --reset-offsets while it has no members", group)
	}
	if len(g.Members) > 0 {
		return nil, fmt.Errorf("reset the offsets of group %s: %w (%d, state %s): stop them first; offsets can be reset only while the group is empty",
			group, ErrGroupActive, len(g.Members), g.State)
	}
	if g.Error != "" && !g.notFound {
		return nil, fmt.Errorf("group %s: %s", group, g.Error)
	}
	committed := map[string]map[int32]int64{}
	for _, p := range g.Partitions {
		if committed[p.Topic] == nil {
			committed[p.Topic] = map[int32]int64{}
		}
		committed[p.Topic][p.Partition] = p.Committed
	}
	var topics []string
	if o.Topic != "" {
		topics = []string{o.Topic}
	} else {
		for t := range committed {
			topics = append(topics, t)
		}
		slices.Sort(topics)
	}
	if len(topics) == 0 {
		return nil, fmt.Errorf("group %s has no committed offsets: name the topic to reset", group)
	}
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("start offsets of %v: %w", topics, err)
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("end offsets of %v: %w", topics, err)
	}
	var at kadm.ListedOffsets
	if o.To == ResetTime {
		if at, err = adm.ListOffsetsAfterMilli(ctx, o.Time.UnixMilli(), topics...); err != nil {
			return nil, fmt.Errorf("offsets at %s of %v: %w", o.Time.Format(time.RFC3339), topics, err)
		}
	}
	res := &ResetResult{Group: group, To: o.To, DryRun: o.DryRun, Partitions: []ResetPartition{}}
	commit := kadm.Offsets{}
	for _, t := range topics {
		if _, ok := ends[t]; !ok {
			return nil, fmt.Errorf("%s: %w", t, ErrNoTopic)
		}
		for p, e := range ends[t] {
			if len(o.Partitions) > 0 && !slices.Contains(o.Partitions, p) {
				continue
			}
			if o.Topic == "" && len(o.Partitions) == 0 {
				if _, ok := committed[t][p]; !ok {
					continue
				}
			}
			if e.Err != nil {
				return nil, fmt.Errorf("end offset of %s partition %d: %w", t, p, e.Err)
			}
			s, ok := starts.Lookup(t, p)
			if !ok || s.Err != nil {
				return nil, fmt.Errorf("start offset of %s partition %d: missing or failed", t, p)
			}
			rp := ResetPartition{Topic: t, Partition: p, Committed: -1}
			if c, ok := committed[t][p]; ok {
				rp.Committed = c
			}
			switch o.To {
			case ResetEarliest:
				rp.New = s.Offset
			case ResetLatest:
				rp.New = e.Offset
			case ResetOffset:
				rp.New = min(max(o.Offset, s.Offset), e.Offset)
			case ResetTime:
				rp.New = e.Offset
				if a, ok := at.Lookup(t, p); ok && a.Err == nil && a.Offset >= 0 {
					rp.New = min(max(a.Offset, s.Offset), e.Offset)
				}
			}
			from := rp.Committed
			if from < 0 {
				from = s.Offset
			}
			if rp.New > from {
				rp.Skipped = rp.New - from
			} else {
				rp.Again = from - rp.New
			}
			res.Skipped += rp.Skipped
			res.Again += rp.Again
			res.Partitions = append(res.Partitions, rp)
			commit.Add(kadm.Offset{Topic: t, Partition: p, At: rp.New, LeaderEpoch: -1})
		}
	}
	if len(res.Partitions) == 0 {
		return nil, fmt.Errorf("group %s: no partition of %v matches %v", group, topics, o.Partitions)
	}
	slices.SortFunc(res.Partitions, func(a, b ResetPartition) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	if o.DryRun {
		return res, nil
	}
	resp, err := adm.CommitOffsets(ctx, group, commit)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("commit the reset offsets of group %s: %w", group, err)
	}
	return res, nil
}
