package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
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
	// Latest handles the records written after the group's first start:
	// at that start every partition begins at its end (its last stable
	// offset, as a read_committed reader sees it), as
	// auto.offset.reset=latest; a partition added to an input topic later
	// begins at the first record stamped at or after the group's first
	// start, as AtTime would (see StartOffset).
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

// groupStart is the group's first start as this member knows it (see
// StartOffset): the time, in Unix milliseconds, from which Latest reads a
// partition that has no commit. It belongs to the member, not to a client
// or a session, and is only used with StartOffset(Latest) (nil otherwise:
// its methods then do nothing). Safe for concurrent use.
type groupStart struct {
	ms   atomic.Int64 // 0: not known yet
	read atomic.Bool  // the group's committed offsets were read once
}

// get returns the group's start time (Unix ms), 0 when not known.
func (g *groupStart) get() int64 {
	if g == nil {
		return 0
	}
	return g.ms.Load()
}

// learn keeps t (Unix ms, > 0) if no time is known yet, and returns the
// time known.
func (g *groupStart) learn(t int64) int64 {
	g.ms.CompareAndSwap(0, t)
	return g.ms.Load()
}

// starter resolves and commits the start offsets of partitions without a
// committed offset (see StartOffset), as franz-go's AdjustFetchOffsetsFn:
// franz-go calls it after fetching the group's committed offsets for newly
// assigned partitions and before fetching records from them.
type starter struct {
	start  Start
	group  string
	retry  map[string]bool // the group's retry topics: always read from their start
	logger *slog.Logger
	gs     *groupStart // the member's; nil unless start is Latest
	now    func() time.Time
	// ready is closed once cl is set: the group may be joined before the
	// constructor that created the client has returned.
	cl    *kgo.Client
	ready chan struct{}
}

// newStarter returns the starter of a client of the member whose start time
// is gs (nil unless c.start is Latest).
func newStarter(c *cfg, retryTopics []string, gs *groupStart) *starter {
	s := &starter{start: c.start, group: c.group, retry: make(map[string]bool), logger: c.logger, gs: gs, now: time.Now, ready: make(chan struct{})}
	for _, t := range retryTopics {
		s.retry[t] = true
	}
	return s
}

// newGroupStart returns the member's groupStart: nil unless c.start is
// Latest.
func newGroupStart(c *cfg) *groupStart {
	if c.start.kind != startLatest {
		return nil
	}
	return &groupStart{}
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
//
// With Latest it first learns the group's start time (see StartOffset), if
// the member does not know it yet: from the group's committed offsets, read
// the first time the member is assigned partitions, and again while it is
// not known and some partition needs resolving. If no commit carries it and
// some partition needs resolving, this is the group's first start: the time
// is now, and the partitions are resolved to their end. Once the time is
// known, a partition without a commit is resolved as AtTime(time).
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
	if len(need) == 0 && (s.gs == nil || s.gs.get() > 0 || s.gs.read.Load()) {
		return offsets, nil
	}
	select {
	case <-s.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	at := int64(-1) // ListOffsets: -1 is the latest offset
	switch s.start.kind {
	case startTime:
		at = s.start.at.UnixMilli()
	case startLatest:
		t, err := s.groupStart(ctx, len(need) > 0)
		if err != nil {
			s.logger.Warn("start offset: cannot read the group's start time; rejoining", "start", s.start.String(), "error", err)
			return nil, fmt.Errorf("processor: reading the group's start time: %w", err)
		}
		if len(need) == 0 {
			return offsets, nil
		}
		at = t
	}
	resolved, err := s.resolve(ctx, need, at)
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

// groupStart returns where Latest resolves a partition without a commit:
// -1 (its end) at the group's first start, else the group's start time
// (Unix ms). Unless the member knows the time, it reads the group's
// committed offsets and takes the smallest time their metadata carries for
// an input partition; if none does and first (a partition needs
// resolving), the group is starting for the first time: the time is now.
func (s *starter) groupStart(ctx context.Context, first bool) (int64, error) {
	if t := s.gs.get(); t > 0 {
		return t, nil
	}
	resps, err := kadm.NewClient(s.cl).FetchOffsets(ctx, s.group)
	if err != nil {
		return 0, err
	}
	if err := resps.Error(); err != nil {
		return 0, err
	}
	s.gs.read.Store(true)
	var found int64
	resps.Each(func(r kadm.OffsetResponse) {
		if s.retry[r.Topic] {
			return
		}
		if t, ok := decodeGroupStart(r.Metadata); ok && (found == 0 || t < found) {
			found = t
		}
	})
	if found > 0 {
		t := s.gs.learn(found)
		s.logger.Info("group start time read from the group's commits", "start_time_ms", t)
		return t, nil
	}
	if !first {
		return -1, nil // nothing to resolve; no commit carries the time
	}
	t := s.gs.learn(s.now().UnixMilli())
	s.logger.Info("group's first start: partitions without a commit start at their end", "start_time_ms", t)
	return -1, nil
}

// resolve lists the start offset of each partition of need: with at < 0 the
// last stable offset; else the first offset at or after the time at (Unix
// ms), or the last stable offset where there is none.
func (s *starter) resolve(ctx context.Context, need map[string][]int32, at int64) (map[string]map[int32]int64, error) {
	out, err := listOffsets(ctx, s.cl, need, at)
	if err != nil || at < 0 {
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
// fails if any partition is refused. With Latest the commits carry the
// group's start time in their metadata (offsetmap.go), so that every member
// and every restart finds it.
func (s *starter) commit(ctx context.Context, offsets map[string]map[int32]int64) error {
	req := make(map[string]map[int32]kgo.EpochOffset)
	for topic, parts := range offsets {
		req[topic] = make(map[int32]kgo.EpochOffset)
		for p, off := range parts {
			req[topic][p] = kgo.EpochOffset{Epoch: -1, Offset: off}
		}
	}
	if meta := withGroupStart("", s.gs.get()); meta != "" {
		ctx = kgo.PreCommitFnContext(ctx, func(r *kmsg.OffsetCommitRequest) error {
			for i := range r.Topics {
				for j := range r.Topics[i].Partitions {
					r.Topics[i].Partitions[j].Metadata = &meta
				}
			}
			return nil
		})
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
