package ops

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/time/rate"

	"github.com/ordercast/ordercast/internal/txncheck"
	"github.com/ordercast/ordercast/ordersystem/schema"
	"github.com/ordercast/ordercast/processor"
)

// runtimeHeaderPrefix is the prefix of the headers the runtime sets on retry
// and DLQ records (processor.HeaderOriginalTopic and the others). A replay
// drops them and keeps the record's own ("user") headers.
const runtimeHeaderPrefix = "ordercast-"

// Coord names one record: topic, partition and offset, written
// "<topic>/<partition>/<offset>" (Kafka topic names cannot contain '/').
type Coord struct {
	Topic     string // topic name
	Partition int32  // partition number, from 0
	Offset    int64  // offset in the partition
}

// String returns "<topic>/<partition>/<offset>".
func (c Coord) String() string {
	return c.Topic + "/" + strconv.Itoa(int(c.Partition)) + "/" + strconv.FormatInt(c.Offset, 10)
}

// ParseCoord parses "<topic>/<partition>/<offset>", the form String writes
// and processor.HeaderReplayed carries.
func ParseCoord(s string) (Coord, error) {
	i := strings.LastIndexByte(s, '/')
	j := -1
	if i > 0 {
		j = strings.LastIndexByte(s[:i], '/')
	}
	if j <= 0 {
		return Coord{}, fmt.Errorf("record coordinates %q: want <topic>/<partition>/<offset>, such as orders.dlq/2/17", s)
	}
	p, perr := strconv.ParseInt(s[j+1:i], 10, 32)
	o, oerr := strconv.ParseInt(s[i+1:], 10, 64)
	if perr != nil || oerr != nil || p < 0 || o < 0 {
		return Coord{}, fmt.Errorf("record coordinates %q: partition and offset must be non-negative whole numbers", s)
	}
	return Coord{Topic: s[:j], Partition: int32(p), Offset: o}, nil
}

// Header is one record header, its value shown as text (or "0x" and hex
// when it is not valid UTF-8).
type Header struct {
	Key   string `json:"key"`   // header key
	Value string `json:"value"` // header value as text
}

// DLQRecord is one dead-lettered record with the runtime's headers parsed.
type DLQRecord struct {
	// ID is the record's coordinates in the DLQ, "<dlq topic>/<p>/<offset>":
	// what Show, processor.HeaderReplayed and the state topic use.
	ID        string    `json:"id"`
	Partition int32     `json:"partition"` // DLQ partition
	Offset    int64     `json:"offset"`    // offset in the DLQ partition
	Timestamp time.Time `json:"timestamp"` // when it was dead-lettered (record timestamp, UTC)
	// Key is the record key as text ("0x"+hex when not UTF-8; "" when null).
	Key        string   `json:"key"`
	ValueBytes int      `json:"valueBytes"`        // length of the value
	Headers    []Header `json:"headers,omitempty"` // every header, in record order

	// From the runtime's headers (processor.Header*); zero when absent:
	// where the record was first consumed, by which group, why it failed
	// (class and message), after how many attempts and when.
	OriginalTopic     string    `json:"originalTopic"`
	OriginalPartition int32     `json:"originalPartition"`
	OriginalOffset    int64     `json:"originalOffset"`
	ConsumerGroup     string    `json:"consumerGroup,omitempty"`
	ErrorClass        string    `json:"errorClass"`
	ErrorMessage      string    `json:"errorMessage,omitempty"`
	Attempts          int       `json:"attempts,omitempty"`
	FirstFailure      time.Time `json:"firstFailure,omitzero"`
	LastFailure       time.Time `json:"lastFailure,omitzero"`
	// ReplayedFrom is set when this record is itself a replay that failed
	// again: the ID of the DLQ record it was replayed from.
	ReplayedFrom string `json:"replayedFrom,omitempty"`

	// Replay is set when this record has been replayed.
	Replay *ReplayMark `json:"replay,omitempty"`
	// Purged is true when the record lies below its partition's purge
	// position (listed only with Selection.IncludePurged).
	Purged bool `json:"purged,omitempty"`
	// Payload is the decoded value; set by the caller (see DecodePayload).
	Payload *Payload `json:"payload,omitempty"`

	// Value is the raw record value (nil for a null value). List drops it.
	Value []byte `json:"-"`

	raw *kgo.Record
}

// display renders key or header bytes as text.
func display(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return "0x" + hex.EncodeToString(b)
}

func parseDLQRecord(r *kgo.Record) DLQRecord {
	d := DLQRecord{
		ID:         Coord{r.Topic, r.Partition, r.Offset}.String(),
		Partition:  r.Partition,
		Offset:     r.Offset,
		Timestamp:  r.Timestamp.UTC(),
		Key:        display(r.Key),
		ValueBytes: len(r.Value),
		Value:      r.Value,
		raw:        r,
	}
	ms := func(v string) time.Time {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return time.Time{}
		}
		return time.UnixMilli(n).UTC()
	}
	for _, h := range r.Headers {
		v := display(h.Value)
		d.Headers = append(d.Headers, Header{Key: h.Key, Value: v})
		switch h.Key {
		case processor.HeaderOriginalTopic:
			d.OriginalTopic = v
		case processor.HeaderOriginalPartition:
			n, _ := strconv.ParseInt(v, 10, 32)
			d.OriginalPartition = int32(n)
		case processor.HeaderOriginalOffset:
			d.OriginalOffset, _ = strconv.ParseInt(v, 10, 64)
		case processor.HeaderConsumerGroup:
			d.ConsumerGroup = v
		case processor.HeaderErrorClass:
			d.ErrorClass = v
		case processor.HeaderErrorMessage:
			d.ErrorMessage = v
		case processor.HeaderAttempts:
			d.Attempts, _ = strconv.Atoi(v)
		case processor.HeaderFirstFailure:
			d.FirstFailure = ms(v)
		case processor.HeaderLastFailure:
			d.LastFailure = ms(v)
		case processor.HeaderReplayed:
			d.ReplayedFrom = v
		}
	}
	return d
}

// DLQ is the operator's handle on one consumer group's dead-letter topic
// "<group>.dlq" (processor.DLQTopic) and its state in StateTopic.
//
// List and Show only read. Replay and Purge write the state topic inside a
// Kafka transaction with the transactional id "ordercast-dlq-<group>": a
// second Replay or Purge of the same group started elsewhere fences the first
// (whose transaction then aborts), and each reads the state only after
// fencing, so two concurrent replays cannot both replay one record. Nothing
// here needs more than Kafka 2.5 (KIP-447 is not used) or differs on the
// embedded broker.
//
// A DLQ's methods may be called concurrently; Close it when done.
type DLQ struct {
	group string
	topic string
	opts  []kgo.Opt
	cl    *kgo.Client
	adm   *kadm.Client
}

// NewDLQ returns the DLQ tools for group. opts are the franz-go options to
// reach the cluster (kgo.SeedBrokers and any TLS or SASL options); the
// clients it creates add their own consume or transactional options. It
// fails only on invalid options: nothing is dialled until a method is called.
func NewDLQ(group string, opts ...kgo.Opt) (*DLQ, error) {
	if group == "" {
		return nil, errors.New("dlq: a consumer group is required (its DLQ is <group>.dlq)")
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	return &DLQ{group: group, topic: processor.DLQTopic(group), opts: slices.Clone(opts), cl: cl, adm: kadm.NewClient(cl)}, nil
}

// Close closes the DLQ's admin client.
func (d *DLQ) Close() { d.cl.Close() }

// Topic returns the DLQ topic, "<group>.dlq".
func (d *DLQ) Topic() string { return d.topic }

// ErrorClasses are the values of the ordercast-error-class header that the
// order system's consumers write (processor.ErrorClass): the schema
// package's classes of a record that cannot be decoded or breaks its
// contract, then "timeout" (a handler timeout), "permanent" (another
// permanent handler error) and "transient" (any other error, after the
// retries). A DLQ written by other handlers may hold other classes: those of
// errors with a Class() string method.
var ErrorClasses = []string{
	schema.ClassUndecodable, schema.ClassUnknownSchemaID, schema.ClassWrongSubject, schema.ClassIncompatibleSchema,
	schema.ClassInvalid, schema.ClassUnknownTopic, schema.ClassUnsupportedType,
	processor.ClassTimeout, processor.ClassPermanent, processor.ClassTransient,
}

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
}

func (s *Selection) matches(r *DLQRecord) bool {
	if len(s.Classes) > 0 && !slices.Contains(s.Classes, r.ErrorClass) {
		return false
	}
	if len(s.Keys) > 0 && !slices.Contains(s.Keys, r.Key) {
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
func (d *DLQ) partitions(ctx context.Context, parts []int32, st *dlqState) ([]PartitionState, map[int32]bounds, error) {
	b, err := partitionBounds(ctx, d.cl, d.topic)
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
func (d *DLQ) scan(ctx context.Context, sel Selection, st *dlqState, fn func(*DLQRecord)) ([]PartitionState, error) {
	if sel.Until > 0 && sel.From >= sel.Until {
		return nil, fmt.Errorf("offset range [%d, %d) is empty: the first offset must be at most the last", sel.From, sel.Until-1)
	}
	states, _, err := d.partitions(ctx, sel.Partitions, st)
	if err != nil {
		return nil, err
	}
	parts := make([]int32, len(states))
	want := map[int32]bounds{}
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
		want[s.Partition] = bounds{Start: from, End: until}
	}
	var recs []*DLQRecord
	err = readRange(ctx, d.opts, d.topic, want, func(r *kgo.Record) error {
		rec := parseDLQRecord(r)
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
	slices.SortFunc(recs, func(a, b *DLQRecord) int {
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
	// Records are the first Limit selected records, without their values.
	Records []DLQRecord `json:"records"`
	// Truncated is true when more records were selected than returned.
	Truncated bool `json:"truncated"`
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
	l := &Listing{Group: d.group, Topic: d.topic, ByClass: map[string]int{}, ByOriginalTopic: map[string]int{}, Records: []DLQRecord{}}
	l.Partitions, err = d.scan(ctx, sel, st, func(r *DLQRecord) {
		l.Selected++
		l.ByClass[r.ErrorClass]++
		l.ByOriginalTopic[r.OriginalTopic]++
		if r.Replay != nil {
			l.Replayed++
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
// headers, and whether it was replayed or purged. It returns an error
// wrapping ErrNoRecord when there is no data record at that offset.
func (d *DLQ) Show(ctx context.Context, partition int32, offset int64) (*DLQRecord, error) {
	st, err := readState(ctx, d.opts, d.cl, d.topic)
	if err != nil {
		return nil, err
	}
	var found *DLQRecord
	states, err := d.scan(ctx, Selection{Partitions: []int32{partition}, From: offset, Until: offset + 1, IncludePurged: true}, st, func(r *DLQRecord) {
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

// Target is where Replay writes records.
type Target string

// Replay targets.
const (
	// TargetSource writes each record back to its original topic (header
	// ordercast-original-topic). Every group that consumes that topic gets
	// it again; the order system's services deduplicate by event id (inbox),
	// so only the group that failed it applies it.
	TargetSource Target = "source"
	// TargetRetry writes each record to the group's first retry topic
	// "<group>.retry.1", due at once, with its original coordinates: only
	// that group sees it. Needs the group to run with retry topics.
	TargetRetry Target = "retry"
)

// ReplayOptions selects and paces a replay.
type ReplayOptions struct {
	Selection
	// To is TargetSource (default) or TargetRetry.
	To Target
	// Rate limits the records written per second (token bucket, burst 1,
	// golang.org/x/time/rate). 0 means unlimited.
	Rate float64
	// Force replays records that were replayed before; without it they are
	// refused (ErrAlreadyReplayed).
	Force bool
	// DryRun selects and checks, writes nothing, and returns what would be
	// replayed (Replayed entries with an empty To).
	DryRun bool
	// Limit caps the number of records replayed; 0 means no cap.
	Limit int
}

// ReplayedRecord is one record written back by Replay.
type ReplayedRecord struct {
	// From is the DLQ record's ID.
	From string `json:"from"`
	// To is the written record's coordinates (empty in a dry run).
	To     string `json:"to"`
	Key    string `json:"key"`              // record key as text
	Class  string `json:"class"`            // its ordercast-error-class
	Forced bool   `json:"forced,omitempty"` // it had been replayed before
}

// Refusal is one selected record that Replay did not write.
type Refusal struct {
	ID     string `json:"id"`     // the DLQ record's ID
	Reason string `json:"reason"` // why, and how to override it
	// Err is ErrAlreadyReplayed, ErrPurged or ErrNotReplayable.
	Err error `json:"-"`
}

// ReplayResult is what Replay did.
type ReplayResult struct {
	Group    string           `json:"group"`            // consumer group
	Topic    string           `json:"topic"`            // its DLQ topic
	Target   Target           `json:"target"`           // where records were written
	DryRun   bool             `json:"dryRun,omitempty"` // nothing was written
	Selected int              `json:"selected"`         // records matching the selection
	Replayed []ReplayedRecord `json:"replayed"`         // written (and marked), in order
	Refused  []Refusal        `json:"refused"`          // selected but not written
}

// replayBatch bounds one replay transaction: records, and how long it stays
// open (well under the transaction timeout, whatever the rate). The timeout
// is short because an open replay transaction holds back every
// read_committed consumer of the topic written to: a replay killed
// mid-transaction (SIGKILL; SIGINT and SIGTERM abort it) stalls them at most
// this long (plus the broker's abort check interval,
// transaction.abort.timed.out.transaction.cleanup.interval.ms, 10s by
// default), or until the next replay or purge of the group fences it.
const (
	replayBatch      = 100
	replayBatchAge   = 5 * time.Second
	replayTxnTimeout = 15 * time.Second
)

// Replay writes the selected DLQ records back to their source topic or to
// the group's retry topic, at most Rate per second, and marks each one as
// replayed in StateTopic in the same Kafka transaction as the record, so the
// mark exists if and only if the record was written.
//
// A written record has the DLQ record's key, value (a null value stays
// null) and own headers (those not starting with "ordercast-"), plus
// processor.HeaderReplayed = the DLQ record's ID; for TargetRetry also the
// original coordinates and a due time of now.
//
// Records replayed before are refused unless Force; purged records (with
// IncludePurged) and records without an original topic are refused. When any
// were refused the others are still replayed and the error is a
// *RefusedError. On any other error (ctx done, write failed) the records of
// committed transactions are in the result and marked; the rest are neither
// written nor marked, so running the same replay again is safe. Each
// transaction is read back before the next: when Replay returns, a List
// shows the marks of what it replayed (a batch found aborted is written
// again, see errNotApplied).
func (d *DLQ) Replay(ctx context.Context, o ReplayOptions) (*ReplayResult, error) {
	if o.To == "" {
		o.To = TargetSource
	}
	if o.To != TargetSource && o.To != TargetRetry {
		return nil, fmt.Errorf("replay target %q: want %q or %q", o.To, TargetSource, TargetRetry)
	}
	if o.Rate < 0 {
		return nil, fmt.Errorf("replay rate %v: want >= 0 records per second (0: unlimited)", o.Rate)
	}
	res := &ReplayResult{Group: d.group, Topic: d.topic, Target: o.To, DryRun: o.DryRun, Replayed: []ReplayedRecord{}, Refused: []Refusal{}}
	var retryTopic string
	if o.To == TargetRetry {
		retryTopic = processor.RetryTopicNames(d.group, 1)[0]
		if _, err := partitionBounds(ctx, d.cl, retryTopic); err != nil {
			if errors.Is(err, ErrNoTopic) {
				return nil, fmt.Errorf("group %s has no retry topic %s (%w; it runs without retry topics, as fulfillment does): replay to the source topic instead (--to source)", d.group, retryTopic, err)
			}
			return nil, err
		}
	}
	var txn *kgo.Client
	if !o.DryRun {
		var err error
		if txn, err = d.fencedTxnClient(ctx); err != nil {
			return nil, err
		}
		defer txn.Close()
	}
	st, err := readState(ctx, d.opts, d.cl, d.topic)
	if err != nil {
		return nil, err
	}
	var queue []*DLQRecord
	if _, err := d.scan(ctx, o.Selection, st, func(r *DLQRecord) {
		res.Selected++
		switch {
		case r.Purged:
			res.Refused = append(res.Refused, Refusal{ID: r.ID, Err: ErrPurged,
				Reason: fmt.Sprintf("purged: below the purge position %d of partition %d", st.position(r.Partition), r.Partition)})
		case r.Replay != nil && !o.Force:
			res.Refused = append(res.Refused, Refusal{ID: r.ID, Err: ErrAlreadyReplayed,
				Reason: fmt.Sprintf("already replayed at %s to %s; --force replays it again", r.Replay.At.Format(time.RFC3339), r.Replay.To)})
		case r.OriginalTopic == "":
			res.Refused = append(res.Refused, Refusal{ID: r.ID, Err: ErrNotReplayable,
				Reason: "no " + processor.HeaderOriginalTopic + " header: not written by the runtime; nowhere to send it back"})
		case o.Limit > 0 && len(queue) >= o.Limit:
		default:
			queue = append(queue, r)
		}
	}); err != nil {
		return nil, err
	}
	queue = d.dropMissingSources(ctx, queue, o.To, res)
	if o.DryRun {
		for _, r := range queue {
			res.Replayed = append(res.Replayed, ReplayedRecord{From: r.ID, Key: r.Key, Class: r.ErrorClass, Forced: r.Replay != nil})
		}
		return res, refusedErr(res)
	}
	if err := d.writeReplays(ctx, txn, queue, o.To, retryTopic, o.Rate, res); err != nil {
		return res, d.fencedErr(err)
	}
	return res, refusedErr(res)
}

// fencedErr says what a fenced replay or purge means: another replay or
// purge of the group took over their shared transactional id
// (ordercast-dlq-<group>), and this one's open transaction was aborted;
// what it committed before stands. The cause stays matchable (errors.Is
// kerr.ProducerFenced / kerr.InvalidProducerEpoch).
func (d *DLQ) fencedErr(err error) error {
	if errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) {
		return fmt.Errorf("another dlq replay or purge of group %s is running; wait for it or retry (what this one committed before stands, the rest did not happen: %w)", d.group, err)
	}
	return err
}

// dropMissingSources refuses the records whose original topic does not exist
// (any more) when replaying to the source, rather than letting the producer
// wait for a topic that will not appear.
func (d *DLQ) dropMissingSources(ctx context.Context, queue []*DLQRecord, to Target, res *ReplayResult) []*DLQRecord {
	if to != TargetSource {
		return queue
	}
	missing := map[string]bool{}
	out := queue[:0]
	for _, r := range queue {
		gone, checked := missing[r.OriginalTopic]
		if !checked {
			_, err := partitionBounds(ctx, d.cl, r.OriginalTopic)
			gone = errors.Is(err, ErrNoTopic)
			missing[r.OriginalTopic] = gone
		}
		if gone {
			res.Refused = append(res.Refused, Refusal{ID: r.ID, Err: ErrNotReplayable,
				Reason: "its original topic " + r.OriginalTopic + " does not exist; --to retry sends it to the group's retry topic"})
			continue
		}
		out = append(out, r)
	}
	return out
}

func refusedErr(res *ReplayResult) error {
	if len(res.Refused) == 0 {
		return nil
	}
	return &RefusedError{Refused: res.Refused}
}

// fencedTxnClient returns the group's transactional client after its
// producer id is initialised: from then on, an older client with the same
// transactional id is fenced and its open transaction aborted, so the state
// read next is final.
func (d *DLQ) fencedTxnClient(ctx context.Context) (*kgo.Client, error) {
	if err := ensureStateTopic(ctx, d.cl); err != nil {
		return nil, err
	}
	txn, err := kgo.NewClient(append(slices.Clone(d.opts),
		kgo.TransactionalID("ordercast-dlq-"+d.group),
		kgo.TransactionTimeout(replayTxnTimeout),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
	)...)
	if err != nil {
		return nil, err
	}
	if _, _, err := txn.ProducerID(ctx); err != nil {
		txn.Close()
		return nil, fmt.Errorf("initialise transactional id ordercast-dlq-%s: %w", d.group, err)
	}
	return txn, nil
}

// writeReplays writes queue in transactions of at most replayBatch records
// or replayBatchAge, pacing with a token bucket. A transaction is committed
// before a wait of more than a second, so it never stays open long. Each
// commit is read back (awaitCommitted); a batch found aborted is written
// again with a new client of the transactional id, at most commitAttempts
// times in all (errNotApplied).
func (d *DLQ) writeReplays(ctx context.Context, txn *kgo.Client, queue []*DLQRecord, to Target, retryTopic string, perSec float64, res *ReplayResult) error {
	lim := rate.NewLimiter(rate.Inf, 1)
	if perSec > 0 {
		lim = rate.NewLimiter(rate.Limit(perSec), 1)
	}
	replaced := false // txn is a client of its own, closed here
	defer func() {
		if replaced {
			txn.Close()
		}
	}()
	var (
		pending   []ReplayedRecord
		batch     []*DLQRecord // the DLQ records of pending
		inTxn     bool
		opened    time.Time
		lastState int64
	)
	// write produces r's replay and its mark in the open transaction.
	write := func(r *DLQRecord) (ReplayedRecord, error) {
		out := replayRecord(r, to, retryTopic)
		pr := txn.ProduceSync(ctx, out)
		if err := pr.FirstErr(); err != nil {
			return ReplayedRecord{}, fmt.Errorf("write %s to %s: %w", r.ID, out.Topic, err)
		}
		w := pr[0].Record
		mark := ReplayMark{At: time.Now().UTC(), To: Coord{w.Topic, w.Partition, w.Offset}.String(), Target: string(to), Forced: r.Replay != nil}
		c, _ := ParseCoord(r.ID)
		sr := txn.ProduceSync(ctx, stateRecord(replayedKey(c), mark))
		if err := sr.FirstErr(); err != nil {
			return ReplayedRecord{}, fmt.Errorf("mark %s as replayed in %s: %w", r.ID, StateTopic, err)
		}
		lastState = sr[0].Record.Offset
		return ReplayedRecord{From: r.ID, To: mark.To, Key: r.Key, Class: r.ErrorClass, Forced: mark.Forced}, nil
	}
	commit := func() error {
		if !inTxn {
			return nil
		}
		for attempt := 1; ; attempt++ {
			inTxn = false
			if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
				return fmt.Errorf("commit the replay of %d records (%s .. %s): %w; they are not marked, run the replay again",
					len(pending), pending[0].From, pending[len(pending)-1].From, err)
			}
			applied, err := awaitCommitted(ctx, d.opts, lastState)
			if err != nil {
				return fmt.Errorf("replay of %d records (%s .. %s): %w", len(pending), pending[0].From, pending[len(pending)-1].From, err)
			}
			if applied {
				break
			}
			if attempt == commitAttempts {
				return fmt.Errorf("replay of %d records (%s .. %s): %w %d times; they are not marked, run the replay again",
					len(pending), pending[0].From, pending[len(pending)-1].From, errNotApplied, attempt)
			}
			// Nothing of the batch was written: write it again (the
			// aborted copies are invisible to read_committed readers),
			// with a new client: the one that aborted fails its next
			// produce with OUT_OF_ORDER_SEQUENCE_NUMBER.
			fresh, err := d.fencedTxnClient(ctx)
			if err != nil {
				return err
			}
			if replaced {
				txn.Close()
			}
			txn, replaced = fresh, true
			if err := txn.BeginTransaction(); err != nil {
				return fmt.Errorf("begin replay transaction: %w", err)
			}
			inTxn = true
			for i, r := range batch {
				rr, err := write(r)
				if err != nil {
					return err
				}
				pending[i] = rr
			}
		}
		res.Replayed = append(res.Replayed, pending...)
		pending, batch = nil, nil
		return nil
	}
	abort := func(err error) error {
		aborted := len(pending)
		if inTxn {
			inTxn = false
			actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if aerr := txn.AbortBufferedRecords(actx); aerr == nil {
				_ = txn.EndTransaction(actx, kgo.TryAbort)
			}
			pending = nil
		}
		if ctx.Err() != nil && !errors.Is(err, ErrInterrupted) {
			// Interrupted (a signal, --timeout) inside a write: say so,
			// not only which write saw the cancellation.
			return fmt.Errorf("%w after %d records replayed (%d in the open transaction aborted, not marked): %w",
				ErrInterrupted, len(res.Replayed), aborted, context.Cause(ctx))
		}
		return err
	}
	for _, r := range queue {
		rv := lim.Reserve()
		if delay := rv.Delay(); delay > 0 {
			if delay > time.Second {
				if err := commit(); err != nil {
					return abort(err)
				}
			}
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return abort(fmt.Errorf("%w after %d records replayed (%d in the open transaction aborted, not marked): %w",
					ErrInterrupted, len(res.Replayed), len(pending), context.Cause(ctx)))
			case <-t.C:
			}
		}
		if !inTxn {
			if err := txn.BeginTransaction(); err != nil {
				return fmt.Errorf("begin replay transaction: %w", err)
			}
			inTxn, opened = true, time.Now()
		}
		rr, err := write(r)
		if err != nil {
			return abort(err)
		}
		pending, batch = append(pending, rr), append(batch, r)
		if len(pending) >= replayBatch || time.Since(opened) > replayBatchAge {
			if err := commit(); err != nil {
				return abort(err)
			}
		}
	}
	if err := commit(); err != nil {
		return abort(err)
	}
	return nil
}

// replayRecord builds the record written back for r.
func replayRecord(r *DLQRecord, to Target, retryTopic string) *kgo.Record {
	src := r.raw
	out := &kgo.Record{Key: src.Key, Value: src.Value}
	keep := func(k string) bool { return !strings.HasPrefix(k, runtimeHeaderPrefix) }
	if to == TargetRetry {
		out.Topic = retryTopic
		original := []string{processor.HeaderOriginalTopic, processor.HeaderOriginalPartition, processor.HeaderOriginalOffset,
			processor.HeaderOriginalTimestamp, processor.HeaderConsumerGroup}
		keep = func(k string) bool { return !strings.HasPrefix(k, runtimeHeaderPrefix) || slices.Contains(original, k) }
	} else {
		out.Topic = r.OriginalTopic
	}
	for _, h := range src.Headers {
		if keep(h.Key) {
			out.Headers = append(out.Headers, h)
		}
	}
	out.Headers = append(out.Headers, kgo.RecordHeader{Key: processor.HeaderReplayed, Value: []byte(r.ID)})
	if to == TargetRetry {
		due := strconv.FormatInt(time.Now().UnixMilli(), 10)
		out.Headers = append(out.Headers, kgo.RecordHeader{Key: processor.HeaderRetryDue, Value: []byte(due)})
	}
	return out
}

// PurgeOptions selects what Purge advances.
type PurgeOptions struct {
	// Partitions of the DLQ; empty means all.
	Partitions []int32
	// Until is the new position: records below it are purged. 0 means each
	// partition's current end (purge everything in it now).
	Until int64
	// Force allows moving a position backwards (un-purging records, which
	// are still in the topic).
	Force bool
	// DryRun computes the result and writes nothing.
	DryRun bool
}

// PurgedPartition is what Purge did to one partition.
type PurgedPartition struct {
	Partition int32 `json:"partition"` // DLQ partition
	// From and To are the old and new positions.
	From int64 `json:"from"`
	To   int64 `json:"to"`
	// Records between the two positions, of which Replayed had been
	// replayed (negative counts when the position moved back).
	Records     int `json:"records"`
	Replayed    int `json:"replayed"`
	NotReplayed int `json:"notReplayed"`
}

// PurgeResult is what Purge did.
type PurgeResult struct {
	Group      string            `json:"group"`            // consumer group
	Topic      string            `json:"topic"`            // its DLQ topic
	DryRun     bool              `json:"dryRun,omitempty"` // nothing was written
	Partitions []PurgedPartition `json:"partitions"`       // the partitions whose position moved
}

// Purge advances the purge position of the selected DLQ partitions to
// o.Until (or their end), in one transaction on StateTopic. It never
// deletes records: they stay in the DLQ topic until its retention.ms, and
// Force can move a position back. List, Show and Replay start from the
// position. It returns once read_committed readers see the new positions
// (a List right after shows them): the commit is read back, and a
// transaction found aborted is run again with a new client, at most
// commitAttempts times (see errNotApplied). Errors: ErrBackwards without
// Force when a position would move back; an Until past a partition's end;
// a commit that did not become visible within 10 s, or was aborted every
// time.
func (d *DLQ) Purge(ctx context.Context, o PurgeOptions) (*PurgeResult, error) {
	if o.Until < 0 {
		return nil, fmt.Errorf("purge position %d: want >= 0", o.Until)
	}
	for attempt := 1; ; attempt++ {
		res, applied, err := d.purgeOnce(ctx, o)
		if err != nil || applied {
			return res, err
		}
		if attempt == commitAttempts {
			return nil, fmt.Errorf("purge of %s: %w %d times (nothing was purged; run it again)", d.topic, errNotApplied, attempt)
		}
	}
}

// purgeOnce is one attempt of Purge, with its own transactional client:
// the result, and whether the read-back found it applied (false: its
// transaction was aborted, see errNotApplied).
func (d *DLQ) purgeOnce(ctx context.Context, o PurgeOptions) (*PurgeResult, bool, error) {
	var txn *kgo.Client
	if !o.DryRun {
		var err error
		if txn, err = d.fencedTxnClient(ctx); err != nil {
			return nil, false, err
		}
		defer txn.Close()
	}
	st, err := readState(ctx, d.opts, d.cl, d.topic)
	if err != nil {
		return nil, false, err
	}
	states, _, err := d.partitions(ctx, o.Partitions, st)
	if err != nil {
		return nil, false, err
	}
	res := &PurgeResult{Group: d.group, Topic: d.topic, DryRun: o.DryRun, Partitions: []PurgedPartition{}}
	for _, s := range states {
		to := s.End
		if o.Until > 0 {
			to = o.Until
		}
		from := st.position(s.Partition)
		switch {
		case to > s.End:
			return nil, false, fmt.Errorf("purge %s partition %d up to offset %d: past its end (the last offset is %d)", d.topic, s.Partition, to-1, s.End-1)
		case to < from && !o.Force:
			return nil, false, fmt.Errorf("purge %s partition %d up to offset %d: the purge %w: it is at %d, records below it are purged (pass --force to un-purge; the records are still there)", d.topic, s.Partition, to-1, ErrBackwards, from)
		case to == from:
			continue
		}
		pp := PurgedPartition{Partition: s.Partition, From: from, To: to}
		sign := 1
		lo, hi := from, to
		if to < from {
			sign, lo, hi = -1, to, from
		}
		if _, err := d.scan(ctx, Selection{Partitions: []int32{s.Partition}, From: lo, Until: hi, IncludePurged: true}, st, func(r *DLQRecord) {
			pp.Records += sign
			if r.Replay != nil {
				pp.Replayed += sign
			} else {
				pp.NotReplayed += sign
			}
		}); err != nil {
			return nil, false, err
		}
		res.Partitions = append(res.Partitions, pp)
	}
	if o.DryRun || len(res.Partitions) == 0 {
		return res, true, nil
	}
	lastState, err := d.writePositions(ctx, txn, res.Partitions)
	if err != nil {
		return nil, false, err
	}
	applied, err := awaitCommitted(ctx, d.opts, lastState)
	if err != nil {
		return nil, false, fmt.Errorf("purge of %s: %w", d.topic, err)
	}
	return res, applied, nil
}

// commitAttempts is how many times a replay batch or a purge writes its
// transaction when the read-back finds it was not applied (errNotApplied).
const commitAttempts = 3

// errNotApplied: a transaction the client reported committed is not
// visible to read_committed readers once its outcome is decided, so it was
// aborted. franz-go v1.22.3 does that under KIP-890 part 2 (Produce v12,
// partitions added to the transaction implicitly): EndTransaction(TryCommit)
// sometimes finds no partition marked as added although the produce
// succeeded, logs "no produce succeeded in this transaction but produces
// were attempted", aborts and returns nil (seen about once in 100 runs of
// cmd/ordercast TestOperatorCommands under -race, issue 13 item 14): the
// transaction is a fresh client's first produce to StateTopic, and End can
// run before the client stored the topic's partitions (cause and
// reproduction: docs/upstream/franz-go-write-only-txn-abort.md).
var errNotApplied = txncheck.ErrAborted

// writePositions writes the purge positions of pps in one transaction on
// StateTopic and returns the offset of the last record written.
func (d *DLQ) writePositions(ctx context.Context, txn *kgo.Client, pps []PurgedPartition) (int64, error) {
	if err := txn.BeginTransaction(); err != nil {
		return 0, fmt.Errorf("begin purge transaction: %w", err)
	}
	now := time.Now().UTC()
	var lastState int64
	for _, pp := range pps {
		pr := txn.ProduceSync(ctx, stateRecord(positionKey(d.topic, pp.Partition), positionValue{Offset: pp.To, At: now}))
		if err := pr.FirstErr(); err != nil {
			actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = txn.AbortBufferedRecords(actx)
			_ = txn.EndTransaction(actx, kgo.TryAbort)
			cancel()
			return 0, d.fencedErr(fmt.Errorf("write the purge position of %s partition %d: %w", d.topic, pp.Partition, err))
		}
		lastState = pr[0].Record.Offset
	}
	if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return 0, d.fencedErr(fmt.Errorf("commit the purge of %s: %w (nothing was purged; run it again)", d.topic, err))
	}
	return lastState, nil
}

// stableTimeout bounds how long awaitCommitted waits for the last stable
// offset of StateTopic to pass a committed record.
var stableTimeout = 10 * time.Second

// awaitCommitted reads the record written at offset of StateTopic back as a
// read_committed reader (txncheck.Committed), waiting at most stableTimeout
// and no longer than ctx: true if it is there, false if its transaction was
// aborted although EndTransaction returned nil (errNotApplied). So
// read_committed readers, such as a List right after a Replay or Purge, see
// what was just committed (Kafka answers EndTxn once the commit is decided
// and writes the transaction markers that move the last stable offset just
// after). It returns an error when the last stable offset does not get past
// offset in time, or the read fails. A later Replay or Purge of the group
// does not depend on it: initialising the same transactional id waits for
// the previous transaction to complete.
func awaitCommitted(ctx context.Context, opts []kgo.Opt, offset int64) (bool, error) {
	wctx, cancel := context.WithTimeout(ctx, stableTimeout)
	defer cancel()
	ok, err := txncheck.Committed(wctx, opts, StateTopic, 0, offset)
	switch {
	case err == nil:
		return ok, nil
	case ctx.Err() != nil:
		return false, ctx.Err()
	case wctx.Err() != nil:
		return false, fmt.Errorf("committed, but the last stable offset of %s is not past the record written at %d after %v: readers do not see it yet (list again later; a transaction the broker has not completed holds it back)", StateTopic, offset, stableTimeout)
	default:
		return false, fmt.Errorf("read back what was committed to %s: %w", StateTopic, err)
	}
}
