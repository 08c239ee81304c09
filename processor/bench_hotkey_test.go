package processor

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
)

// BenchmarkHotKey measures what one hot key does to key order: a backlog in
// which one key ("hot") carries a share of the records and the others are
// spread over 10,000 keys, 6 partitions, partitioned by key hash (franz-go's
// default partitioner, murmur2 as Kafka's), drained by a handler that sleeps
// 1 ms, in OrderKey with Concurrency(1000) and the default MaxInFlight. Key
// order runs a key's records one at a time, so the hot key's records take at
// least share x records x handler time in sequence, and no drain can go
// faster than 1 / (share x handler time) records/s whatever the
// concurrency: the cap. Each sub-benchmark (share=0 is the baseline without
// a hot key) reports the drain's rate (rec/s, first handler call to the
// last), the mean handler time of every record (handler-ms) and of the hot
// key's (hot-handler-ms: a 1 ms sleep takes longer on a loaded machine), the
// cap from the hot key's measured share and handler time (cap-rec/s), the
// ratio of the rate to the cap, the hot key's cycle (hot-cycle-ms: the time
// to the last hot record over the hot records, the handler plus the
// runtime's hand-over to the key's next record), and when the last record of
// another key and the last hot record were handled (cold-done-s,
// hot-done-s, from the first handler call): the gap is how long the hot
// key's partition keeps its lag after the other keys are done.
// Always on the in-process kfake (ORDERCAST_TEST_BROKERS is ignored): the
// handler's sleep, not the broker, is what is measured. The backlog of each
// share is sized for about 1.5 s at the cap.
//
//	go test -run '^$' -bench HotKey -benchtime 3x ./processor/
func BenchmarkHotKey(b *testing.B) {
	const handlerTime = time.Millisecond
	shares := []struct {
		name    string
		every   int // one record in every is hot; 0: none
		records int
	}{
		{"share=0", 0, 60_000},
		{"share=0.02", 50, 75_000},
		{"share=0.05", 20, 30_000},
		{"share=0.1", 10, 15_000},
		{"share=0.2", 5, 7_500},
		{"share=0.5", 2, 3_000},
	}
	topics := map[string]int32{}
	for _, s := range shares {
		topics["hot-"+s.name] = 6
	}
	_, addrs := testkafka.Fake(b, topics)
	for _, s := range shares {
		topic := "hot-" + s.name
		seedHotKey(b, addrs, topic, s.records, s.every)
		b.Run(s.name, func(b *testing.B) {
			var rates, caps, ratios, hts, hotHts, cycles, coldDone, hotDone []float64
			for range b.N {
				var handled, hotCount, busyNs, hotNs atomic.Int64
				var first, lastCold, lastHot atomic.Int64
				h := func(ctx context.Context, r *kgo.Record) error {
					start := time.Now()
					first.CompareAndSwap(0, start.UnixNano())
					time.Sleep(handlerTime)
					end := time.Now()
					busyNs.Add(int64(end.Sub(start)))
					if string(r.Key) == "hot" {
						hotNs.Add(int64(end.Sub(start)))
						hotCount.Add(1)
						lastHot.Store(end.UnixNano())
					} else {
						lastCold.Store(end.UnixNano())
					}
					handled.Add(1)
					return nil
				}
				d := processorPass(b, addrs, topic, h, func() bool { return handled.Load() >= int64(s.records) },
					WithOrdering(OrderKey), Concurrency(1000))
				n := handled.Load()
				ht := time.Duration(busyNs.Load() / n)
				rate := float64(n) / d.Seconds()
				rates, hts = append(rates, rate), append(hts, float64(ht)/float64(time.Millisecond))
				coldDone = append(coldDone, float64(lastCold.Load()-first.Load())/1e9)
				if s.every > 0 {
					hn := hotCount.Load()
					hht := time.Duration(hotNs.Load() / hn)
					share := float64(hn) / float64(n)
					capRate := 1 / (share * hht.Seconds())
					caps, ratios = append(caps, capRate), append(ratios, rate/capRate)
					hotHts = append(hotHts, float64(hht)/float64(time.Millisecond))
					hd := float64(lastHot.Load()-first.Load()) / 1e9
					hotDone, cycles = append(hotDone, hd), append(cycles, hd/float64(hn)*1e3)
				}
				b.Logf("%s: %d records in %v, %.0f rec/s, handler %v", s.name, n, d.Round(time.Millisecond), rate, ht)
			}
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(median(rates), "rec/s")
			b.ReportMetric(median(hts), "handler-ms")
			b.ReportMetric(median(coldDone), "cold-done-s")
			if s.every > 0 {
				b.ReportMetric(median(caps), "cap-rec/s")
				b.ReportMetric(median(ratios), "ratio")
				b.ReportMetric(median(hotDone), "hot-done-s")
				b.ReportMetric(median(hotHts), "hot-handler-ms")
				b.ReportMetric(median(cycles), "hot-cycle-ms")
			}
		})
	}
}

// seedHotKey writes n records of 100 bytes to topic with franz-go's default
// partitioner: record i has key "hot" when every > 0 and i%every == 0, else
// key "k<i mod 10,000>".
func seedHotKey(b *testing.B, addrs []string, topic string, n, every int) {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	val := make([]byte, 100)
	for i := range val {
		val[i] = 'a' + byte(i%26)
	}
	recs := make([]*kgo.Record, 0, 5000)
	flush := func() {
		if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
		recs = recs[:0]
	}
	for i := range n {
		key := "k" + strconv.Itoa(i%10_000)
		if every > 0 && i%every == 0 {
			key = "hot"
		}
		recs = append(recs, &kgo.Record{Key: []byte(key), Value: val})
		if len(recs) == cap(recs) {
			flush()
		}
	}
	if len(recs) > 0 {
		flush()
	}
}
