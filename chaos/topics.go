package chaos

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/order"
	"github.com/ordercast/ordercast/processor"
	"github.com/ordercast/ordercast/schema"
)

// topicView is a topic read to its end by one isolation level.
type topicView struct {
	records []*kgo.Record // data records, in partition then offset order per partition
	aborts  int           // ABORT control records (one per partition an aborted transaction wrote to)
	commits int           // COMMIT control records
}

// readTopic reads topic from its start offsets to its end: the last stable
// offset for read_committed (aborted transactions' records are filtered out),
// the high watermark for read_uncommitted. Control records are counted.
func readTopic(ctx context.Context, cl *kgo.Client, topic string, committed bool) (*topicView, error) {
	adm := kadm.NewClient(cl)
	list, iso := adm.ListEndOffsets, kgo.ReadUncommitted()
	if committed {
		list, iso = adm.ListCommittedOffsets, kgo.ReadCommitted()
	}
	ends, err := list(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("start offsets of %s: %w", topic, err)
	}
	v := &topicView{}
	want := map[int32]int64{}
	offsets := map[string]map[int32]kgo.Offset{topic: {}}
	var lerr error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			lerr = o.Err
			return
		}
		s, _ := starts.Lookup(topic, o.Partition)
		if o.Offset > s.Offset {
			want[o.Partition] = o.Offset
			offsets[topic][o.Partition] = kgo.NewOffset().At(s.Offset)
		}
	})
	if lerr != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, lerr)
	}
	if len(want) == 0 {
		return v, nil
	}
	rd, err := kgo.NewClient(append(cl.Opts(), kgo.ConsumePartitions(offsets), kgo.FetchIsolationLevel(iso),
		kgo.KeepControlRecords(), kgo.FetchMaxWait(200*time.Millisecond))...)
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for len(want) > 0 {
		f := rd.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("reading %s: %d partitions not read to their end: %w", topic, len(want), ctx.Err())
		}
		f.EachPartition(func(p kgo.FetchTopicPartition) {
			end, ok := want[p.Partition]
			if !ok {
				return
			}
			for _, r := range p.Records {
				if r.Offset >= end {
					break
				}
				if r.Attrs.IsControl() {
					if len(r.Key) >= 4 && binary.BigEndian.Uint16(r.Key[2:4]) == 0 {
						v.aborts++
					} else {
						v.commits++
					}
					continue
				}
				v.records = append(v.records, r)
			}
			if n := len(p.Records); n > 0 && p.Records[n-1].Offset+1 >= end {
				delete(want, p.Partition)
			}
		})
	}
	return v, nil
}

// readDecided reads topic to its high watermark as a read_uncommitted reader
// and decides each transactional record by its producer's next control
// record: committed records are returned, aborted ones dropped, and those of
// transactions still open (no marker yet) counted as undecided. Unlike a
// read_committed read it sees committed records beyond a transaction left
// open by a crashed producer, which holds the last stable offset back until
// its timeout (transaction.timeout.ms): those records exist, a consumer
// just cannot read them yet. Non-transactional records count as committed.
func readDecided(ctx context.Context, cl *kgo.Client, topic string) (committed []*kgo.Record, undecided int, err error) {
	raw, err := readAll(ctx, cl, topic)
	if err != nil {
		return nil, 0, err
	}
	type key struct {
		partition int32
		producer  int64
	}
	pending := map[key][]*kgo.Record{}
	for _, r := range raw {
		k := key{r.Partition, r.ProducerID}
		switch {
		case r.Attrs.IsControl():
			if len(r.Key) >= 4 && binary.BigEndian.Uint16(r.Key[2:4]) == 1 { // COMMIT
				committed = append(committed, pending[k]...)
			}
			delete(pending, k)
		case r.Attrs.IsTransactional():
			pending[k] = append(pending[k], r)
		default:
			committed = append(committed, r)
		}
	}
	for _, rs := range pending {
		undecided += len(rs)
	}
	return committed, undecided, nil
}

// readAll reads every record of topic, control records included, as a
// read_uncommitted reader up to the high watermarks, in offset order per
// partition.
func readAll(ctx context.Context, cl *kgo.Client, topic string) ([]*kgo.Record, error) {
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("start offsets of %s: %w", topic, err)
	}
	want := map[int32]int64{}
	offsets := map[string]map[int32]kgo.Offset{topic: {}}
	var lerr error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			lerr = o.Err
			return
		}
		s, _ := starts.Lookup(topic, o.Partition)
		if o.Offset > s.Offset {
			want[o.Partition] = o.Offset
			offsets[topic][o.Partition] = kgo.NewOffset().At(s.Offset)
		}
	})
	if lerr != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, lerr)
	}
	if len(want) == 0 {
		return nil, nil
	}
	rd, err := kgo.NewClient(append(cl.Opts(), kgo.ConsumePartitions(offsets), kgo.FetchIsolationLevel(kgo.ReadUncommitted()),
		kgo.KeepControlRecords(), kgo.FetchMaxWait(200*time.Millisecond))...)
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(want) > 0 {
		f := rd.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("reading %s: %d partitions not read to their end: %w", topic, len(want), ctx.Err())
		}
		f.EachPartition(func(p kgo.FetchTopicPartition) {
			end, ok := want[p.Partition]
			if !ok {
				return
			}
			for _, r := range p.Records {
				if r.Offset < end {
					out = append(out, r)
				}
			}
			if n := len(p.Records); n > 0 && p.Records[n-1].Offset+1 >= end {
				delete(want, p.Partition)
			}
		})
	}
	return out, nil
}

// eventInfo is what the checks need of an event record.
type eventInfo struct {
	topic   string // the event's topic (the original one for retry and DLQ records)
	eventID string
	orderID string
	status  string // paymentProcessed only
	total   int64  // orderCreated only, thousandths
}

// decodeEvent decodes an event record of any of the three topics, or a
// retry or DLQ copy of one (by its original-topic header).
func decodeEvent(ctx context.Context, serde *schema.Serde, r *kgo.Record) (eventInfo, bool) {
	topic := r.Topic
	for _, h := range r.Headers {
		if h.Key == processor.HeaderOriginalTopic {
			topic = string(h.Value)
		}
	}
	info := eventInfo{topic: topic}
	switch topic {
	case order.TopicOrderCreated:
		var ev order.OrderCreated
		if _, err := serde.DecodeContext(ctx, topic, r.Value, &ev); err != nil {
			return info, false
		}
		info.eventID, info.orderID, info.total = ev.EventID, ev.OrderID, int64(ev.Total)
	case order.TopicPaymentProcessed:
		var ev order.PaymentProcessed
		if _, err := serde.DecodeContext(ctx, topic, r.Value, &ev); err != nil {
			return info, false
		}
		info.eventID, info.orderID, info.status = ev.EventID, ev.OrderID, ev.Status
	case order.TopicShipmentRequested:
		var ev order.ShipmentRequested
		if _, err := serde.DecodeContext(ctx, topic, r.Value, &ev); err != nil {
			return info, false
		}
		info.eventID, info.orderID = ev.EventID, ev.OrderID
	default:
		return info, false
	}
	return info, true
}
