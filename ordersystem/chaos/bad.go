package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/ctxtime"
	"github.com/ordercast/ordercast/ordersystem/order"
)

// produceBad makes n records bad: undecodable values (no schema registry
// framing) keyed badKeyPrefix+N, produced alternately to orderCreated and
// paymentProcessed, spread over spread, until ctx ends. It returns where
// each landed (the DLQ check's expectation); a produce that failed is
// retried, and one never acknowledged is not counted (nor expected).
func produceBad(ctx context.Context, cl *kgo.Client, seed int64, n int, spread time.Duration, hist *history) []badRecord {
	var out []badRecord
	if n <= 0 {
		return out
	}
	every := spread / time.Duration(n)
	for i := 0; i < n; i++ {
		if !ctxtime.Sleep(ctx, every) {
			break
		}
		topic := order.TopicOrderCreated
		if i%2 == 1 {
			topic = order.TopicPaymentProcessed
		}
		r := &kgo.Record{Topic: topic, Key: []byte(fmt.Sprintf("%s%d-%d", badKeyPrefix, seed, i)),
			Value: []byte(fmt.Sprintf("made bad by ordercast chaos (seed %d, record %d): not an Avro record with a schema id", seed, i))}
		for attempt := 0; attempt < 5; attempt++ {
			pctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			res := cl.ProduceSync(pctx, r)
			cancel()
			if err := res.FirstErr(); err == nil {
				b := badRecord{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}
				out = append(out, b)
				hist.add(event{Ev: "bad_record", Key: string(r.Key), Detail: fmt.Sprintf("%s/%d@%d", b.Topic, b.Partition, b.Offset)})
				break
			}
			if !ctxtime.Sleep(ctx, time.Second) {
				break
			}
		}
	}
	return out
}
