package chaos

import (
	"context"
	"encoding/binary"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/audit"
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
	all, err := audit.ReadAll(ctx, cl, topic, committed)
	if err != nil {
		return nil, err
	}
	v := &topicView{}
	for _, r := range all {
		switch {
		case !r.Attrs.IsControl():
			v.records = append(v.records, r)
		case len(r.Key) >= 4 && binary.BigEndian.Uint16(r.Key[2:4]) == 0:
			v.aborts++
		default:
			v.commits++
		}
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
	raw, err := audit.ReadAll(ctx, cl, topic, false)
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
