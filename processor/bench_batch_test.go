package processor

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// batchPass runs a processor with the BatchHandler h over topic from the
// start until done reports true, and returns the time from the first
// BatchHandler call to done. Permanent failures go to the group's DLQ
// (created by the member).
func batchPass(b *testing.B, addrs []string, topic string, h BatchHandler, done func() bool, opts ...Opt) time.Duration {
	b.Helper()
	var first atomic.Int64
	wrapped := func(ctx context.Context, recs []*kgo.Record) error {
		if first.Load() == 0 {
			first.CompareAndSwap(0, time.Now().UnixNano())
		}
		return h(ctx, recs)
	}
	p, err := New(append([]Opt{Brokers(addrs...), Group(benchGroup("batch")), Topics(topic), WithBatchHandler(wrapped),
		CreateTopics(true)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- p.Run(ctx) }()
	for !done() {
		select {
		case err := <-errc:
			b.Fatalf("Run returned early: %v", err)
		case <-time.After(200 * time.Microsecond):
		}
	}
	d := time.Since(time.Unix(0, first.Load()))
	cancel()
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	return d
}

// BenchmarkBatchPartialFailure measures a BatchHandler shaped like a database
// transaction per batch (1 ms per call, as a commit with fsync, plus 20 µs
// per record) in key order, side by side in one run: every record clean;
// 0.4 % of the records failing permanently, reported with FailRecords (the
// others of the batch are done); and the same failures failing the whole
// batch (each of its records handled again one at a time). It reports each
// variant's records/s and the ratio of the partial and the whole-batch
// variants to the clean one.
func BenchmarkBatchPartialFailure(b *testing.B) {
	const records = 100_000
	addrs, topic := benchBroker(b, "tbatch", 6, benchSeed{records: records, size: 256, keys: 10_000})
	poisonous := func(r *kgo.Record) bool { return r.Offset%250 == 7 } // 0.4 %
	poison := 0
	// The seed spreads the records over the partitions evenly: count the
	// poison offsets from the end offsets.
	for _, end := range endOffsets(b, addrs, topic) {
		for o := int64(0); o < end; o++ {
			if o%250 == 7 {
				poison++
			}
		}
	}
	run := func(variant string) float64 {
		var applied atomic.Int64
		h := func(ctx context.Context, recs []*kgo.Record) error {
			time.Sleep(time.Millisecond + time.Duration(len(recs))*20*time.Microsecond)
			failed := map[int]error{}
			stopped := map[string]bool{}
			for i, r := range recs {
				if stopped[string(r.Key)] {
					continue
				}
				if poisonous(r) {
					failed[i] = Permanentf("poison at offset %d", r.Offset)
					stopped[string(r.Key)] = true
				}
			}
			switch {
			case len(failed) == 0:
				applied.Add(int64(len(recs)))
				return nil
			case variant == "whole":
				if len(recs) == 1 {
					return failed[0] // alone: it goes to the DLQ
				}
				return errors.New("a record of the batch failed")
			default:
				applied.Add(int64(len(recs) - len(failed) - notDone(recs, failed)))
				return FailRecords(failed)
			}
		}
		if variant == "clean" {
			h = func(ctx context.Context, recs []*kgo.Record) error {
				time.Sleep(time.Millisecond + time.Duration(len(recs))*20*time.Microsecond)
				applied.Add(int64(len(recs)))
				return nil
			}
		}
		want := int64(records - poison)
		if variant == "clean" {
			want = records
		}
		d := batchPass(b, addrs, topic, h, func() bool { return applied.Load() >= want },
			WithOrdering(OrderKey), Concurrency(16), MaxBatch(100), Backoff(time.Millisecond, 10*time.Millisecond))
		return float64(want) / d.Seconds()
	}
	var partialRatios, wholeRatios []float64
	b.ResetTimer()
	for i := range b.N {
		clean := (run("clean") + run("clean")) / 2
		partial := run("partial")
		whole := run("whole")
		partialRatios, wholeRatios = append(partialRatios, partial/clean), append(wholeRatios, whole/clean)
		b.Logf("round %d: clean %.0f rec/s, 0.4%% failed with FailRecords %.0f rec/s (%.2f of clean), failing the whole batch %.0f rec/s (%.2f)",
			i+1, clean, partial, partial/clean, whole, whole/clean)
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(median(partialRatios), "partial/clean")
	b.ReportMetric(median(wholeRatios), "whole/clean")
}

// notDone counts the records of recs that a FailRecords of failed leaves not
// done besides the failed ones: the later records of a failed record's key.
func notDone(recs []*kgo.Record, failed map[int]error) int {
	first := map[string]int{}
	for i := range failed {
		k := string(recs[i].Key)
		if f, ok := first[k]; !ok || i < f {
			first[k] = i
		}
	}
	n := 0
	for i, r := range recs {
		if f, ok := first[string(r.Key)]; ok && i > f {
			n++
		}
	}
	return n
}
