// Package txncheck confirms that a write-only Kafka transaction, one that
// produced records and committed no consumer offsets, is visible to
// read_committed readers after kgo's EndTransaction(ctx, kgo.TryCommit)
// returned nil.
//
// # Why a nil from EndTransaction is not enough
//
// franz-go v1.22.3 decides client-side whether a transaction has anything to
// commit: EndTransaction looks for a partition marked added to the
// transaction in the client's table of produce topics, and when it finds none
// and no consumer offsets were added, under KIP-890 part 2 it logs "no
// produce succeeded in this transaction but produces were attempted; issuing
// an abort ...", sends EndTxn(abort) instead of the commit the caller asked
// for, and returns nil. On a topic's first metadata load the client places the
// records that waited for it, and they can be sent and acknowledged, before it
// stores the topic's partitions in that table: an EndTransaction in that
// window aborts a transaction whose records were all acknowledged, and
// nothing in its return value says so. It takes a client's first produce to
// a topic (the first transaction of a fresh client) and an End close behind
// the acknowledgement; it happens on kfake and on Kafka 4.4
// (docs/upstream/franz-go-write-only-txn-abort.md, reproduced by
// TestFranzGoAbortsAnAcknowledgedWriteOnlyTxn). A transaction that commits
// consumer offsets has something added and is not affected.
//
// # What is checked
//
// The data itself: a read_committed reader of the partition of the last
// record the transaction produced reads up to the partition's last stable
// offset, which passes that record once the transaction's marker is written
// (Kafka writes the markers just after answering EndTxn). If the reader
// reads the record, the transaction committed; if it reads past the
// record's offset without it (the abort marker, kept with
// kgo.KeepControlRecords, or any later record), the transaction was
// aborted. A transaction commits or aborts on all its partitions at once
// (one EndTxn), so one record of it decides for all.
//
// The check assumes nothing removed the record in between: a compacted
// topic only cleans segments that are no longer active (segment.ms,
// segment.bytes), so a record read back right after its commit is there;
// retention (retention.ms) and DeleteRecords below the offset would make a
// committed record look aborted.
package txncheck

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrAborted is what callers wrap when Committed reports false: the
// transaction was reported committed by EndTransaction but read_committed
// readers do not see it. Its records were not written for them; write them
// again in a new transaction.
var ErrAborted = errors.New("the transaction was reported committed but was aborted (read_committed readers do not see its records)")

// fetchMaxWait is the reader's fetch.max.wait.ms: how long the broker may
// hold a fetch that has nothing to return. Brokers answer as soon as the
// last stable offset moves (the marker append completes waiting fetches),
// so it bounds only the case where they do not.
const fetchMaxWait = 250 * time.Millisecond

// metadataMinAge is the reader's metadata.max.age lower bound for
// refreshes it triggers itself (kgo.MetadataMinAge, default 5 s there).
const metadataMinAge = 100 * time.Millisecond

// Tail reads one partition as a read_committed reader, from a start offset
// on, and tells for offsets at or above it whether the record there is
// visible. It keeps one Kafka client (and its fetch session) for its life,
// so a relay that commits many transactions to one partition confirms each
// for the price of the fetch it would wait for anyway.
//
// A Tail is not safe for concurrent use; Close it when done.
type Tail struct {
	cl        *kgo.Client
	topic     string
	partition int32
	from      int64
	asked     int64         // the highest offset asked so far (-1: none)
	buf       []*kgo.Record // records read at or above asked, in offset order
}

// NewTail starts a read_committed reader of topic/partition at offset from
// (>= 0). opts configure its client (kgo.SeedBrokers, TLS, SASL); do not
// pass consume or isolation options. It does not block: reading starts in
// the background. The error is kgo.NewClient's.
func NewTail(opts []kgo.Opt, topic string, partition int32, from int64) (*Tail, error) {
	if from < 0 {
		return nil, fmt.Errorf("txncheck: start offset %d: want >= 0", from)
	}
	cl, err := kgo.NewClient(append(slices.Clone(opts),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().At(from)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), // an abort marker is what shows that an aborted record was passed
		kgo.FetchMaxWait(fetchMaxWait),
		// A topic created just before (the outbox's marker topic, the
		// DLQ state topic) may lack a leader in the first metadata;
		// the default 5 s minimum age would hold the read that long.
		kgo.MetadataMinAge(metadataMinAge),
	)...)
	if err != nil {
		return nil, fmt.Errorf("txncheck: reader of %s/%d: %w", topic, partition, err)
	}
	return &Tail{cl: cl, topic: topic, partition: partition, from: from, asked: -1}, nil
}

// Close stops the reader.
func (t *Tail) Close() { t.cl.Close() }

// Committed blocks until the reader has read up to offset and reports
// whether the data record at offset is visible to read_committed readers:
// true when its transaction committed, false when it was aborted. Offsets
// asked must not decrease and must be at or above the Tail's start (an
// error otherwise), so that a relay asks for each transaction's last record
// in turn.
//
// It waits as long as ctx allows: while the transaction is undecided (no
// marker yet), the last stable offset stays below offset and nothing is
// read. Errors: ctx's error when it ends first, a non-retriable fetch error
// (the topic was deleted, authorization), or a control record (a
// transaction marker) at offset, which is not a record a producer wrote.
func (t *Tail) Committed(ctx context.Context, offset int64) (bool, error) {
	if offset < t.from || offset < t.asked {
		return false, fmt.Errorf("txncheck: offset %d of %s/%d: below what the reader was asked before (%d) or its start (%d)", offset, t.topic, t.partition, t.asked, t.from)
	}
	t.asked = offset
	for {
		i := 0
		for i < len(t.buf) && t.buf[i].Offset < offset {
			i++
		}
		t.buf = t.buf[i:]
		if len(t.buf) > 0 {
			r := t.buf[0]
			if r.Offset > offset {
				return false, nil // read past offset without its record: aborted
			}
			if r.Attrs.IsControl() {
				return false, fmt.Errorf("txncheck: %s/%d offset %d is a transaction marker, not a produced record", t.topic, t.partition, offset)
			}
			return true, nil
		}
		fs := t.cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return false, fmt.Errorf("txncheck: %s/%d not read up to offset %d: %w", t.topic, t.partition, offset, err)
		}
		if fs.IsClientClosed() {
			return false, fmt.Errorf("txncheck: %s/%d: %w", t.topic, t.partition, kgo.ErrClientClosed)
		}
		var ferr error
		fs.EachError(func(topic string, p int32, err error) {
			if ferr == nil && !kerr.IsRetriable(err) && !errors.Is(err, context.Canceled) {
				ferr = fmt.Errorf("txncheck: reading %s/%d: %w", topic, p, err)
			}
		})
		if ferr != nil {
			return false, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Topic == t.topic && r.Partition == t.partition {
				t.buf = append(t.buf, r)
			}
		})
	}
}

// Committed is a Tail used once: whether the record at topic/partition/
// offset, the last one a transaction produced there, is visible to
// read_committed readers. It blocks as Tail.Committed does; give ctx a
// deadline.
func Committed(ctx context.Context, opts []kgo.Opt, topic string, partition int32, offset int64) (bool, error) {
	t, err := NewTail(opts, topic, partition, offset)
	if err != nil {
		return false, err
	}
	defer t.Close()
	return t.Committed(ctx, offset)
}
