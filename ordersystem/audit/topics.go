package audit

import (
	"context"
	"encoding/binary"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/schema"
	"github.com/ordercast/ordercast/processor"
)

// View is a topic read to its end by one isolation level (ReadView).
type View struct {
	Records []*kgo.Record // data records, in partition then offset order per partition
	Aborts  int           // ABORT control records (one per partition an aborted transaction wrote to)
	Commits int           // COMMIT control records
}

// controlType is a control record's type from its key (version int16, type
// int16: 0 ABORT, 1 COMMIT; KIP-98), -1 if the key is too short.
func controlType(r *kgo.Record) int {
	if len(r.Key) < 4 {
		return -1
	}
	return int(binary.BigEndian.Uint16(r.Key[2:4]))
}

// ReadView reads topic from its log start offsets to its end (the last
// stable offset for read_committed, whose aborted records are filtered out;
// the high watermark for read_uncommitted) and counts the control records
// apart from the data records. It blocks until every partition is read to
// that end, or 60s, or ctx ends (then an error).
func ReadView(ctx context.Context, cl *kgo.Client, topic string, committed bool) (*View, error) {
	all, err := ReadAll(ctx, cl, topic, committed)
	if err != nil {
		return nil, err
	}
	v := &View{}
	for _, r := range all {
		switch {
		case !r.Attrs.IsControl():
			v.Records = append(v.Records, r)
		case controlType(r) == 0:
			v.Aborts++
		default:
			v.Commits++
		}
	}
	return v, nil
}

// ReadDecided reads topic to its high watermark as a read_uncommitted reader
// and decides each transactional record by its producer's next control
// record: committed records are returned, aborted ones dropped, and those of
// transactions still open (no marker yet) counted as undecided. Unlike a
// read_committed read it sees committed records beyond a transaction left
// open by a crashed producer, which holds the last stable offset back until
// its timeout (transaction.timeout.ms): those records exist, a consumer
// just cannot read them yet. Non-transactional records count as committed.
func ReadDecided(ctx context.Context, cl *kgo.Client, topic string) (committed []*kgo.Record, undecided int, err error) {
	raw, err := ReadAll(ctx, cl, topic, false)
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
			if controlType(r) == 1 { // COMMIT
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

// Event is what the checks need of an event record.
type Event struct {
	Topic   string // the event's topic (the original one for retry and DLQ records)
	EventID string
	OrderID string
	Status  string // paymentProcessed only
	Total   int64  // orderCreated only, thousandths
}

// DecodeEvent decodes an event record of orderCreated, paymentProcessed or
// shipmentRequested, or a retry or DLQ copy of one (by its
// processor.HeaderOriginalTopic header), with the registry's schemas; false
// when it is of none of them or does not decode.
func DecodeEvent(ctx context.Context, serde *schema.Serde, r *kgo.Record) (Event, bool) {
	topic := r.Topic
	for _, h := range r.Headers {
		if h.Key == processor.HeaderOriginalTopic {
			topic = string(h.Value)
		}
	}
	info := Event{Topic: topic}
	switch topic {
	case order.TopicOrderCreated:
		var ev order.OrderCreated
		if _, err := serde.DecodeContext(ctx, topic, r.Value, &ev); err != nil {
			return info, false
		}
		info.EventID, info.OrderID, info.Total = ev.EventID, ev.OrderID, int64(ev.Total)
	case order.TopicPaymentProcessed:
		var ev order.PaymentProcessed
		if _, err := serde.DecodeContext(ctx, topic, r.Value, &ev); err != nil {
			return info, false
		}
		info.EventID, info.OrderID, info.Status = ev.EventID, ev.OrderID, ev.Status
	case order.TopicShipmentRequested:
		var ev order.ShipmentRequested
		if _, err := serde.DecodeContext(ctx, topic, r.Value, &ev); err != nil {
			return info, false
		}
		info.EventID, info.OrderID = ev.EventID, ev.OrderID
	default:
		return info, false
	}
	return info, true
}
