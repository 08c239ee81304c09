// This file holds a dead-lettered record as the package shows it: its
// coordinates (Coord), its headers, and the runtime's DLQ headers parsed into
// Record.

package dlq

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/kread"
	"github.com/ordercast/ordercast/processor"
)

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

// Record is one dead-lettered record with the runtime's headers parsed.
type Record struct {
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
	// OriginalTimestamp is the failed record's own timestamp (when it was
	// produced, or appended with LogAppendTime), whole milliseconds, UTC:
	// how old the event was when it failed. For a replay that failed again
	// (ReplayedFrom) it is the replayed copy's.
	OriginalTopic     string    `json:"originalTopic"`
	OriginalPartition int32     `json:"originalPartition"`
	OriginalOffset    int64     `json:"originalOffset"`
	OriginalTimestamp time.Time `json:"originalTimestamp,omitzero"`
	ConsumerGroup     string    `json:"consumerGroup,omitempty"`
	ErrorClass        string    `json:"errorClass"`
	ErrorMessage      string    `json:"errorMessage,omitempty"`
	Attempts          int       `json:"attempts,omitempty"`
	FirstFailure      time.Time `json:"firstFailure,omitzero"`
	LastFailure       time.Time `json:"lastFailure,omitzero"`
	// ReplayedFrom is set when this record is itself a replay that failed
	// again: the ID of the DLQ record it was replayed from.
	ReplayedFrom string `json:"replayedFrom,omitempty"`

	// BlocksKey is set (by List) when the group's later records of Key are
	// held behind this record (processor.BlockKeys with
	// KeyBlockDeadLetters) until a replayed copy of it is handled or it is
	// purged.
	BlocksKey bool `json:"blocksKey,omitempty"`

	// Replay is set when this record has been replayed.
	Replay *ReplayMark `json:"replay,omitempty"`
	// Purged is true when the record lies below its partition's purge
	// position (listed only with Selection.IncludePurged).
	Purged bool `json:"purged,omitempty"`
	// Payload is the decoded value: nil until Record.Decode sets it.
	Payload *Payload `json:"payload,omitempty"`

	// Value is the raw record value (nil for a null value). List drops it.
	Value []byte `json:"-"`

	raw *kgo.Record
}

func parseRecord(r *kgo.Record) Record {
	d := Record{
		ID:         Coord{r.Topic, r.Partition, r.Offset}.String(),
		Partition:  r.Partition,
		Offset:     r.Offset,
		Timestamp:  r.Timestamp.UTC(),
		Key:        kread.Display(r.Key),
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
		v := kread.Display(h.Value)
		d.Headers = append(d.Headers, Header{Key: h.Key, Value: v})
		switch h.Key {
		case processor.HeaderOriginalTopic:
			d.OriginalTopic = v
		case processor.HeaderOriginalPartition:
			n, _ := strconv.ParseInt(v, 10, 32)
			d.OriginalPartition = int32(n)
		case processor.HeaderOriginalOffset:
			d.OriginalOffset, _ = strconv.ParseInt(v, 10, 64)
		case processor.HeaderOriginalTimestamp:
			d.OriginalTimestamp = ms(v)
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
