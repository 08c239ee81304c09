package processor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// reqTimes is a kgo hook that counts the requests of a client by key and
// sums their round trips (write to response read), for the benchmark's log:
// where a transaction's time goes.
type reqTimes struct {
	mu sync.Mutex
	n  map[int16]int
	d  map[int16]time.Duration
}

func (h *reqTimes) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if e2e.Err() != nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n, h.d = map[int16]int{}, map[int16]time.Duration{}
	}
	h.n[key]++
	h.d[key] += e2e.DurationE2E()
}

// count returns how many requests of key completed.
func (h *reqTimes) count(key kmsg.Key) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[int16(key)]
}

// String gives each of keys as "Name n×mean".
func (h *reqTimes) String(keys ...kmsg.Key) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var s []string
	for _, k := range keys {
		if n := h.n[int16(k)]; n > 0 {
			s = append(s, fmt.Sprintf("%s %d×%v", k.Name(), n, (h.d[int16(k)]/time.Duration(n)).Round(10*time.Microsecond)))
		}
	}
	return strings.Join(s, ", ")
}

// txnPass runs a TxnProcessor with opts and handler h over topic from the
// start until done reports true, and returns the time from the first
// handler call to done, the transactions it committed until then, and a
// summary for the log: those and the aborted ones, and the transaction
// requests with their mean round trip.
func txnPass(b *testing.B, addrs []string, topic string, h TxnHandler, done func() bool, opts ...TxnOpt) (time.Duration, int, string) {
	b.Helper()
	var first atomic.Int64
	wrapped := func(ctx context.Context, r *kgo.Record) ([]*kgo.Record, error) {
		if first.Load() == 0 {
			first.CompareAndSwap(0, time.Now().UnixNano())
		}
		return h(ctx, r)
	}
	g := benchGroup("txn")
	reqs := &reqTimes{}
	tp, err := NewTransactional(g, wrapped, append([]TxnOpt{Brokers(addrs...), Group(g), Topics(topic),
		DeadLetterTopic("bench.dlq"), CreateTopics(true), StartOffset(Earliest), ClientOpts(kgo.WithHooks(reqs))}, opts...)...)
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
	committed, aborted := tp.Stats()
	cancel()
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	return d, committed, fmt.Sprintf("%d transactions (%d aborted; %s)", committed, aborted,
		reqs.String(kmsg.AddOffsetsToTxn, kmsg.TxnOffsetCommit, kmsg.Heartbeat, kmsg.EndTxn))
}

// plainPass is processorPass that also returns the offset commits the
// member made (its shutdown's included) and a summary for the log.
func plainPass(b *testing.B, addrs []string, topic string, h Handler, done func() bool, opts ...Opt) (time.Duration, int, string) {
	b.Helper()
	reqs := &reqTimes{}
	d := processorPass(b, addrs, topic, h, done, append(opts, ClientOpts(kgo.WithHooks(reqs)))...)
	n := reqs.count(kmsg.OffsetCommit)
	return d, n, fmt.Sprintf("%d commits", n)
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
// mode on a backlog of 5,000,000 records of 100 bytes on 6 partitions over
// 10,000 keys, CommitInterval 100ms, other options default. Four sides per
// round, each with a new group: a no-op handler in partition order, plain
// (New) and exactly-once (NewTransactional; no output records, so each
// transaction commits offsets only), then a handler that fails the first
// attempt of 2 % of the records with a transient error (retried after the
// default backoff, 50-100 ms) in key order, plain and exactly-once. The
// sides run in the order plain, eos, eos-fail, plain-fail in odd rounds and
// the reverse in even ones (A B B A across rounds), so that a drift of the
// machine's load weighs on both sides of a ratio alike. Each pass lasts
// seconds and commits tens of times (at least 20 at 100ms), so start-up
// costs do not decide the ratio. It reports the rates (records/s from the
// first handler call to the last record done), the exactly-once/plain
// ratios of each round and their median and range; the log gives each
// pass's commits (offset commits of the plain side, transactions of the
// exactly-once side) and the exactly-once side's transaction requests with
// their mean round trip, and each round the CPU time this process spent per
// record on each side (the broker's is not counted) and the peak heap of
// each pass, one line per round (a benchmark's log is cut after 10 lines).
// ORDERCAST_BENCH_TXN_SIDES runs some of the sides (comma-separated, such as
// "plain,eos" to profile the no-op pair); ORDERCAST_BENCH_TXN_INFLIGHT sets
// the exactly-once sides' MaxInFlight records.
func BenchmarkTxnVsPlain(b *testing.B) {
	const records = 5_000_000
	addrs, topic := benchBroker(b, "txn1", 6, benchSeed{records: records, size: 100, keys: 10_000})
	sides := []string{"plain", "eos", "eos-fail", "plain-fail"}
	if v := os.Getenv("ORDERCAST_BENCH_TXN_SIDES"); v != "" {
		sides = strings.Split(v, ",") // some of the sides (profiling): a ratio needs both of its sides
	}
	rates := map[string][]float64{}
	commits := map[string][]float64{}
	cpus := map[string][]float64{} // CPU µs of this process per record, the pass's start and shutdown included
	ratios := map[string][]float64{}
	b.ResetTimer()
	for i := range b.N {
		passes := map[string]string{} // the round's summary of each side
		order := slices.Clone(sides)
		if i%2 == 1 {
			slices.Reverse(order)
		}
		for _, side := range order {
			runtime.GC()
			var done atomic.Int64
			fail := failFirst()
			var d time.Duration
			var n int
			var sum string
			c0 := cpuTime(b)
			heap := sampleHeap()
			switch side {
			case "plain", "plain-fail":
				ord, f := OrderPartition, func(*kgo.Record) bool { return false }
				if side == "plain-fail" {
					ord, f = OrderKey, fail
				}
				d, n, sum = plainPass(b, addrs, topic, func(_ context.Context, r *kgo.Record) error {
					if f(r) {
						return errors.New("transient")
					}
					done.Add(1)
					return nil
				}, func() bool { return done.Load() >= records }, CommitInterval(100*time.Millisecond), WithOrdering(ord))
			default:
				ord, f := OrderPartition, func(*kgo.Record) bool { return false }
				if side == "eos-fail" {
					ord, f = OrderKey, fail
				}
				d, n, sum = txnPass(b, addrs, topic, func(_ context.Context, r *kgo.Record) ([]*kgo.Record, error) {
					if f(r) {
						return nil, errors.New("transient")
					}
					done.Add(1)
					return nil, nil
				}, func() bool { return done.Load() >= records }, append(txnBenchOpts(b), CommitInterval(100*time.Millisecond), WithOrdering(ord))...)
			}
			passes[side] = fmt.Sprintf("%s %v %s, peak heap %.0f MiB", side, d.Round(time.Millisecond), sum, float64(heap())/(1<<20))
			cpus[side] = append(cpus[side], float64((cpuTime(b)-c0).Microseconds())/records)
			rates[side] = append(rates[side], float64(records)/d.Seconds())
			commits[side] = append(commits[side], float64(n))
		}
		var line []string
		for _, pair := range [][2]string{{"plain", "eos"}, {"plain-fail", "eos-fail"}} {
			if len(rates[pair[0]]) <= i || len(rates[pair[1]]) <= i {
				continue
			}
			r := rates[pair[1]][i] / rates[pair[0]][i]
			ratios[pair[1]] = append(ratios[pair[1]], r)
			line = append(line, fmt.Sprintf("%s %.0f rec/s (%.2f µs CPU/rec), %s %.0f rec/s (%.2f µs): ratio %.2f",
				pair[0], rates[pair[0]][i], cpus[pair[0]][i], pair[1], rates[pair[1]][i], cpus[pair[1]][i], r))
		}
		for _, side := range order {
			line = append(line, passes[side])
		}
		b.Logf("round %d (%s): %s", i+1, strings.Join(order, " "), strings.Join(line, "; "))
	}
	var sum []string
	for _, side := range []string{"eos", "eos-fail"} {
		if len(ratios[side]) > 0 {
			sum = append(sum, fmt.Sprintf("%s/%s %s", side, "plain"+strings.TrimPrefix(side, "eos"), minMax(ratios[side], "%.2f")))
		}
	}
	for _, side := range sides {
		sum = append(sum, fmt.Sprintf("%s commits %s", side, minMax(commits[side], "%.0f")))
	}
	b.Logf("ratios per round, median (range): %s", strings.Join(sum, "; "))
	b.ReportMetric(0, "ns/op")
	for _, side := range sides {
		b.ReportMetric(median(rates[side]), side+"-rec/s")
		b.ReportMetric(median(cpus[side]), side+"-cpu-µs/rec")
	}
	if r := ratios["eos"]; len(r) > 0 {
		b.ReportMetric(median(r), "eos-ratio")
	}
	if r := ratios["eos-fail"]; len(r) > 0 {
		b.ReportMetric(median(r), "eos-fail-ratio")
	}
}

// txnBenchOpts are the exactly-once side's options from the environment
// (ORDERCAST_BENCH_TXN_INFLIGHT: MaxInFlight records), to measure other
// settings than the defaults.
func txnBenchOpts(b *testing.B) []TxnOpt {
	v := os.Getenv("ORDERCAST_BENCH_TXN_INFLIGHT")
	if v == "" {
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		b.Fatalf("ORDERCAST_BENCH_TXN_INFLIGHT: %v", err)
	}
	return []TxnOpt{MaxInFlight(n, 64<<20)}
}

// sampleHeap samples the bytes of the heap's objects (live and not yet
// swept) every 10ms until the returned function is called, which returns
// the largest sample.
func sampleHeap() func() uint64 {
	var peak atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	return func() uint64 { close(stop); <-done; return peak.Load() }
}
