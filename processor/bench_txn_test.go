package processor

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// txnPass runs a TxnProcessor with opts and handler h over topic from the
// start until done reports true, and returns the time from the first
// handler call to done.
func txnPass(b *testing.B, addrs []string, topic string, h TxnHandler, done func() bool, opts ...TxnOpt) time.Duration {
	b.Helper()
	var first atomic.Int64
	wrapped := func(ctx context.Context, r *kgo.Record) ([]*kgo.Record, error) {
		if first.Load() == 0 {
			first.CompareAndSwap(0, time.Now().UnixNano())
		}
		return h(ctx, r)
	}
	g := benchGroup("txn")
	tp, err := NewTransactional(g, wrapped, append([]TxnOpt{Brokers(addrs...), Group(g), Topics(topic),
		DeadLetterTopic("bench.dlq"), CreateTopics(true), StartOffset(Earliest)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- tp.Run(ctx) }()
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
	committed, aborted := tp.Stats()
	b.Logf("exactly-once pass: %v, %d transactions committed, %d aborted", d.Round(time.Millisecond), committed, aborted)
	return d
}

// failFirst returns a predicate that is true on the first attempt of about
// 2 % of the records (by offset and partition), false on their retries and
// on every other record.
func failFirst() func(r *kgo.Record) bool {
	var failed sync.Map
	return func(r *kgo.Record) bool {
		if (r.Offset*31+int64(r.Partition))%50 != 7 {
			return false
		}
		_, again := failed.LoadOrStore(tp{r.Topic, r.Partition}.String()+":"+strconv.FormatInt(r.Offset, 10), true)
		return !again
	}
}

// BenchmarkTxnVsPlain: the exactly-once mode against the at-least-once
// mode on a backlog of 100,000 records of 100 bytes on 6 partitions over
// 10,000 keys, CommitInterval 100ms, other options default. Four sides per
// round, each with a new group: a no-op handler in partition order, plain
// (New) and exactly-once (NewTransactional; no output records, so each
// transaction commits offsets only), then a handler that fails the first
// attempt of 2 % of the records with a transient error (retried after the
// default backoff, 50-100 ms) in key order, plain and exactly-once. It
// reports the rates (records/s from the first handler call to the last
// record done) and the exactly-once/plain ratios, median over the rounds.
func BenchmarkTxnVsPlain(b *testing.B) {
	const records = 100_000
	addrs, topic := benchBroker(b, "txn1", 6, benchSeed{records: records, size: 100, keys: 10_000})
	sides := []string{"plain", "eos", "plain-fail", "eos-fail"}
	rates := map[string][]float64{}
	b.ResetTimer()
	for range b.N {
		for _, side := range sides {
			runtime.GC()
			var done atomic.Int64
			fail := failFirst()
			var d time.Duration
			switch side {
			case "plain", "plain-fail":
				order, f := OrderPartition, func(*kgo.Record) bool { return false }
				if side == "plain-fail" {
					order, f = OrderKey, fail
				}
				d = processorPass(b, addrs, topic, func(_ context.Context, r *kgo.Record) error {
					if f(r) {
						return errors.New("transient")
					}
					done.Add(1)
					return nil
				}, func() bool { return done.Load() >= records }, CommitInterval(100*time.Millisecond), WithOrdering(order))
			default:
				order, f := OrderPartition, func(*kgo.Record) bool { return false }
				if side == "eos-fail" {
					order, f = OrderKey, fail
				}
				d = txnPass(b, addrs, topic, func(_ context.Context, r *kgo.Record) ([]*kgo.Record, error) {
					if f(r) {
						return nil, errors.New("transient")
					}
					done.Add(1)
					return nil, nil
				}, func() bool { return done.Load() >= records }, CommitInterval(100*time.Millisecond), WithOrdering(order))
			}
			rates[side] = append(rates[side], float64(records)/d.Seconds())
		}
		i := len(rates["plain"]) - 1
		b.Logf("round %d: plain %.0f rec/s, exactly-once %.0f rec/s (ratio %.2f); 2%% transient failures, key order: plain %.0f rec/s, exactly-once %.0f rec/s (ratio %.2f)",
			i+1, rates["plain"][i], rates["eos"][i], rates["eos"][i]/rates["plain"][i],
			rates["plain-fail"][i], rates["eos-fail"][i], rates["eos-fail"][i]/rates["plain-fail"][i])
	}
	ratio := func(a, c string) float64 { return median(rates[a]) / median(rates[c]) }
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(median(rates["plain"]), "plain-rec/s")
	b.ReportMetric(median(rates["eos"]), "eos-rec/s")
	b.ReportMetric(ratio("eos", "plain"), "eos-ratio")
	b.ReportMetric(median(rates["plain-fail"]), "plain-fail-rec/s")
	b.ReportMetric(median(rates["eos-fail"]), "eos-fail-rec/s")
	b.ReportMetric(ratio("eos-fail", "plain-fail"), "eos-fail-ratio")
}
