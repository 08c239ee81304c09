package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Start is where a group begins reading a partition for which it has no
// committed offset: Earliest, Latest or AtTime(t). It is Kafka's
// auto.offset.reset for a new group (and ListOffsets by timestamp, KIP-79,
// for AtTime). See StartOffset.
type Start struct {
	kind startKind
	at   time.Time
}

type startKind int

const (
	startEarliest startKind = iota
	startLatest
	startTime
)

var (
	// Earliest starts at the log start offset: every record still in the
	// partition is handled. The default, auto.offset.reset=earliest.
	Earliest = Start{kind: startEarliest}
	// Latest starts at the end of the partition (its last stable offset,
	// as a read_committed reader sees it): only records written after the
	// partition was first assigned are handled. auto.offset.reset=latest.
	Latest = Start{kind: startLatest}
)

// AtTime starts at the first record whose timestamp is at or after t
// (milliseconds, as Kafka stores them), or at the end of the partition when
// there is none: Kafka's ListOffsets by timestamp (KIP-79), franz-go's
// kgo.NewOffset().AfterMilli. A record's timestamp is its producer's
// CreateTime unless the topic uses LogAppendTime.
func AtTime(t time.Time) Start { return Start{kind: startTime, at: t} }

// String returns "earliest", "latest" or the time in RFC 3339 (UTC, with
// milliseconds): the forms ParseStart reads.
func (s Start) String() string {
	switch s.kind {
	case startEarliest:
		return "earliest"
	case startLatest:
		return "latest"
	}
	return s.at.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// ParseStart parses "earliest", "latest" or an RFC 3339 time
// ("2026-05-01T12:00:00Z", fractional seconds allowed).
func ParseStart(s string) (Start, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "earliest":
		return Earliest, nil
	case "latest":
		return Latest, nil
	}
	t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(s))
	if err != nil {
		return Start{}, fmt.Errorf("start offset %q: want earliest, latest or an RFC 3339 time such as 2026-05-01T12:00:00Z", s)
	}
	st := AtTime(t)
	if err := st.validate(); err != nil {
		return Start{}, err
	}
	return st, nil
}

func (s Start) validate() error {
	if s.kind == startTime && s.at.UnixMilli() < 0 {
		return fmt.Errorf("start offset %s: a time before 1970-01-01 cannot be looked up (Kafka timestamps are Unix milliseconds)", s)
	}
	return nil
}

// StartOffset sets where the group begins reading an input partition for
// which it has no committed offset. Default Earliest. Kafka setting:
// auto.offset.reset (for a group without offsets; franz-go's
// ConsumeStartOffset).
//
// It applies to input partitions only, and only once per partition: when a
// member is first assigned a partition without a committed offset, it
// resolves Latest or AtTime to an offset (ListOffsets, read_committed) and
// commits that offset for the group before it fetches anything. A partition
// that then receives no record while the group is down is read from that
// committed offset on the next start, not resolved again: so with Latest no
// record written after the group first started is skipped, whichever
// partitions were quiet. A member that cannot resolve or commit the start
// offset (a broker error, a rebalance) leaves its group session and rejoins,
// so the partition is never read from an unresolved position. Earliest needs
// no commit (the log start only moves forward by deleting records) and costs
// nothing.
//
// It does not apply to a committed offset that is out of range (below the log
// start after retention deleted records, or past the end after the broker
// lost data). Kafka's consumer applies auto.offset.reset then too, so
// "latest" would skip every record still in the log; this runtime resumes at
// the log start instead, whatever StartOffset says: at-least-once, at the cost
// of handling again the records kept past a broker's data loss.
//
// It does not apply to the group's retry topics: they are always read from
// their start. Every record in "<group>.retry.<n>" was written by the group
// itself after it had completed (and committed) the input record, so skipping
// one would lose it; and in a new group's retry topics nothing older than the
// group can be found, unless the group name is reused after its offsets
// expired (offsets.retention.minutes) while the retry topics kept records: then
// those are handled again. Delete and recreate the retry topics before reusing a
// group name.
//
// NewTransactional: the same, the start offset being committed with an
// OffsetCommit (outside any transaction) before the partition is fetched.
func StartOffset(s Start) Opt { return opt(func(c *cfg) { c.start = s }) }

// starter resolves and commits the start offsets of partitions without a
// committed offset (see StartOffset), as franz-go's AdjustFetchOffsetsFn:
// franz-go calls it after fetching the group's committed offsets for newly
// assigned partitions and before fetching records from them.
type starter struct {
	start  Start
	group  string
	retry  map[string]bool // the group's retry topics: always read from their start
	logger *slog.Logger
	// ready is closed once cl is set: the group may be joined before the
	// constructor that created the client has returned.
	cl    *kgo.Client
	ready chan struct{}
}

func newStarter(c *cfg, retryTopics []string) *starter {
	s := &starter{start: c.start, group: c.group, retry: make(map[string]bool), logger: c.logger, ready: make(chan struct{})}
	for _, t := range retryTopics {
		s.retry[t] = true
	}
	return s
}

// setClient gives the starter its client; call it once, right after the
// client is created.
func (s *starter) setClient(cl *kgo.Client) {
	s.cl = cl
	close(s.ready)
}

// opts returns the franz-go options for the start position: a partition
// without a committed offset starts at the log start (Earliest, and the
// retry topics), and an out-of-range offset resumes at the log start (see
// StartOffset). For Latest and AtTime, AdjustFetchOffsetsFn replaces the
// start of input partitions without a committed offset by the resolved and
// committed one.
func (s *starter) opts() []kgo.Opt {
	o := []kgo.Opt{
		kgo.ConsumeStartOffset(kgo.NewOffset().AtStart()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}
	if s.start.kind != startEarliest {
		o = append(o, kgo.AdjustFetchOffsetsFn(s.adjust))
	}
	return o
}

// adjust resolves the start offset of every input partition in offsets that
// has no committed offset, commits the resolved offsets for the group, and
// returns offsets with those partitions set to them. A partition without a
// committed offset is one whose offset is franz-go's start offset, AtStart (a
// negative offset; committed offsets are >= 0). An error ends the group
// session (franz-go rejoins), so no partition is read from a start position
// that is not committed.
func (s *starter) adjust(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	need := make(map[string][]int32)
	for topic, parts := range offsets {
		if s.retry[topic] {
			continue
		}
		for p, o := range parts {
			if o.EpochOffset().Offset < 0 {
				need[topic] = append(need[topic], p)
			}
		}
	}
	if len(need) == 0 {
		return offsets, nil
	}
	select {
	case <-s.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	resolved, err := s.resolve(ctx, need)
	if err != nil {
		s.logger.Warn("start offset: cannot resolve; rejoining", "start", s.start.String(), "error", err)
		return nil, fmt.Errorf("processor: resolving start offset %s: %w", s.start, err)
	}
	if err := s.commit(ctx, resolved); err != nil {
		s.logger.Warn("start offset: cannot commit; rejoining", "start", s.start.String(), "error", err)
		return nil, fmt.Errorf("processor: committing start offset %s: %w", s.start, err)
	}
	for topic, parts := range resolved {
		for p, off := range parts {
			offsets[topic][p] = kgo.NewOffset().At(off).WithEpoch(-1)
		}
	}
	s.logger.Info("start offsets committed", "start", s.start.String(), "offsets", resolved)
	return offsets, nil
}

// resolve lists the start offset of each partition of need: the last stable
// offset for Latest; for AtTime the first offset at or after the time, or the
// last stable offset where there is none.
func (s *starter) resolve(ctx context.Context, need map[string][]int32) (map[string]map[int32]int64, error) {
	ts := int64(-1) // ListOffsets: -1 is the latest offset
	if s.start.kind == startTime {
		ts = s.start.at.UnixMilli()
	}
	out, err := listOffsets(ctx, s.cl, need, ts)
	if err != nil || ts == -1 {
		return out, err
	}
	none := make(map[string][]int32) // no record at or after the time
	for topic, parts := range out {
		for p, off := range parts {
			if off < 0 {
				none[topic] = append(none[topic], p)
			}
		}
	}
	if len(none) == 0 {
		return out, nil
	}
	ends, err := listOffsets(ctx, s.cl, none, -1)
	if err != nil {
		return nil, err
	}
	for topic, parts := range ends {
		for p, off := range parts {
			out[topic][p] = off
		}
	}
	return out, nil
}

// listOffsets sends ListOffsets (read_committed) for the partitions of need
// at timestamp ts (-1: latest) and returns the offset of each (-1: no record
// at or after ts). franz-go sends each partition to its leader.
func listOffsets(ctx context.Context, cl *kgo.Client, need map[string][]int32, ts int64) (map[string]map[int32]int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	req.IsolationLevel = 1
	for topic, parts := range need {
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = topic
		for _, p := range parts {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition = p
			rp.CurrentLeaderEpoch = -1
			rp.Timestamp = ts
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	out := make(map[string]map[int32]int64)
	var errs []error
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				errs = append(errs, fmt.Errorf("%s[%d]: %w", t.Topic, p.Partition, err))
				continue
			}
			if out[t.Topic] == nil {
				out[t.Topic] = make(map[int32]int64)
			}
			out[t.Topic][p.Partition] = p.Offset
		}
	}
	for topic, parts := range need {
		for _, p := range parts {
			if _, ok := out[topic][p]; !ok && len(errs) == 0 {
				errs = append(errs, fmt.Errorf("%s[%d]: not in the ListOffsets response", topic, p))
			}
		}
	}
	return out, errors.Join(errs...)
}

// commit commits offsets for the group as this member (its generation), and
// fails if any partition is refused.
func (s *starter) commit(ctx context.Context, offsets map[string]map[int32]int64) error {
	req := make(map[string]map[int32]kgo.EpochOffset)
	for topic, parts := range offsets {
		req[topic] = make(map[int32]kgo.EpochOffset)
		for p, off := range parts {
			req[topic][p] = kgo.EpochOffset{Epoch: -1, Offset: off}
		}
	}
	var errs []error
	s.cl.CommitOffsetsSync(ctx, req, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			errs = append(errs, err)
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					errs = append(errs, fmt.Errorf("%s[%d]: %w", t.Topic, p.Partition, err))
				}
			}
		}
	})
	return errors.Join(errs...)
}
