package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/kread"
)

// StateTopic is the compacted, single-partition topic where the DLQ tools
// keep their state, for every group's DLQ:
//
//	key "position/<dlq topic>/<partition>"           value {"offset":N,"at":"<RFC 3339>"}
//	key "replayed/<dlq topic>/<partition>/<offset>"  value {"at":"...","to":"<topic>/<partition>/<offset>","target":"source|retry","forced":bool}
//
// A position is the purge point of a DLQ partition: records below it are
// purged (not listed, not replayed), but never deleted by the tools; a
// "replayed" entry marks one DLQ record as replayed, so that a second replay
// is refused. Entries are written in the same Kafka transaction as the
// replayed records (transactional id "ordercast-dlq-<group>"), and read
// back read_committed, so a replay is recorded if and only if its records
// were written.
//
// Why a compacted topic and not committed offsets of a member-less consumer
// group: the broker expires the committed offsets of an empty group after
// offsets.retention.minutes (7 days by default, KIP-211), which would
// silently un-purge a DLQ. A compacted topic keeps the latest value of each
// key for ever, works on any Kafka 2.5+ cluster (and on the embedded
// broker), and needs no database.
const StateTopic = "ordercast.dlq.state"

// dlqState is what the state topic says about one DLQ topic.
type dlqState struct {
	positions map[int32]int64
	replayed  map[int32]map[int64]ReplayMark
}

// ReplayMark records one replay of a DLQ record.
type ReplayMark struct {
	// At is when the replay transaction was written.
	At time.Time `json:"at"`
	// To is the coordinates of the record written back,
	// "<topic>/<partition>/<offset>".
	To string `json:"to"`
	// Target is "source" (the original topic) or "retry" (the group's first
	// retry topic).
	Target string `json:"target"`
	// Forced is true when the record had been replayed before and Force was
	// set.
	Forced bool `json:"forced,omitempty"`
}

type positionValue struct {
	Offset int64     `json:"offset"`
	At     time.Time `json:"at"`
}

func positionKey(topic string, p int32) string {
	return "position/" + topic + "/" + strconv.Itoa(int(p))
}

func replayedKey(c Coord) string { return "replayed/" + c.String() }

func (s *dlqState) position(p int32) int64 { return s.positions[p] }

func (s *dlqState) mark(c Coord) (ReplayMark, bool) {
	m, ok := s.replayed[c.Partition][c.Offset]
	return m, ok
}

// readState reads the state topic (read_committed) and returns the entries of
// dlqTopic. A missing state topic is an empty state.
func readState(ctx context.Context, opts []kgo.Opt, cl *kgo.Client, dlqTopic string) (*dlqState, error) {
	st := &dlqState{positions: map[int32]int64{}, replayed: map[int32]map[int64]ReplayMark{}}
	b, err := kread.PartitionBounds(ctx, cl, StateTopic)
	if errors.Is(err, ErrNoTopic) {
		return st, nil
	}
	if err != nil {
		return nil, fmt.Errorf("state topic %s: %w", StateTopic, err)
	}
	posPrefix := "position/" + dlqTopic + "/"
	repPrefix := "replayed/" + dlqTopic + "/"
	err = kread.ReadRange(ctx, opts, StateTopic, b, func(r *kgo.Record) error {
		k := string(r.Key)
		switch {
		case strings.HasPrefix(k, posPrefix):
			p, err := strconv.ParseInt(k[len(posPrefix):], 10, 32)
			if err != nil {
				return nil // not ours
			}
			if r.Value == nil {
				delete(st.positions, int32(p))
				return nil
			}
			var v positionValue
			if err := json.Unmarshal(r.Value, &v); err != nil {
				return fmt.Errorf("state topic %s offset %d: key %q: %w", StateTopic, r.Offset, k, err)
			}
			st.positions[int32(p)] = v.Offset
		case strings.HasPrefix(k, repPrefix):
			c, err := ParseCoord(k[len("replayed/"):])
			if err != nil {
				return nil
			}
			if r.Value == nil {
				delete(st.replayed[c.Partition], c.Offset)
				return nil
			}
			var m ReplayMark
			if err := json.Unmarshal(r.Value, &m); err != nil {
				return fmt.Errorf("state topic %s offset %d: key %q: %w", StateTopic, r.Offset, k, err)
			}
			if st.replayed[c.Partition] == nil {
				st.replayed[c.Partition] = map[int64]ReplayMark{}
			}
			st.replayed[c.Partition][c.Offset] = m
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}

// ensureStateTopic creates the state topic when it does not exist: one
// partition, cleanup.policy=compact, replication factor min(3, brokers) and
// min.insync.replicas RF-1 (at least 1): RF 3 and min ISR 2 on a real
// cluster (one broker may fail without stopping acks=all writes), 1 and 1
// on a single broker such as the embedded one.
func ensureStateTopic(ctx context.Context, cl *kgo.Client) error {
	_, err := kread.PartitionBounds(ctx, cl, StateTopic)
	if !errors.Is(err, ErrNoTopic) {
		return err
	}
	adm := kadm.NewClient(cl)
	meta, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return err
	}
	rf := int16(min(3, max(len(meta.Brokers), 1)))
	minISR := max(int(rf)-1, 1)
	isr := strconv.Itoa(minISR)
	compact := "compact"
	resp, err := adm.CreateTopic(ctx, 1, rf, map[string]*string{"cleanup.policy": &compact, "min.insync.replicas": &isr}, StateTopic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create the DLQ state topic %s (replication factor %d): %w", StateTopic, rf, err)
	}
	return nil
}

func stateRecord(key string, v any) *kgo.Record {
	b, _ := json.Marshal(v) // plain structs: never fails
	return &kgo.Record{Topic: StateTopic, Key: []byte(key), Value: b}
}
