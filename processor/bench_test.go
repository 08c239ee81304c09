package processor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Benchmarks of the runtime (see docs/benchmarks.md for the commands and the
// results). The broker runs in a child process (brokerChild), seeded before
// the measurement, so the benchmark process holds only the consumer: the
// memory figure is the consumer's, and the consumer does not share its
// garbage collector with the broker. The machine's cores are shared all the
// same.
//
// Each benchmark reports its own metrics; ns/op is not meaningful and b.N
// only sets how many measured rounds run (each a full pass over the data).

// benchGroup returns a fresh consumer group name, and remembers it so that
// benchBroker can delete the benchmark's groups from a real cluster.
var (
	benchGroupSeq   atomic.Int64
	benchGroupsMu   sync.Mutex
	benchGroupNames []string
)

func benchGroup(prefix string) string {
	g := fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), benchGroupSeq.Add(1))
	benchGroupsMu.Lock()
	benchGroupNames = append(benchGroupNames, g)
	benchGroupsMu.Unlock()
	return g
}

// benchGroups returns the groups benchGroup created so far, oldest first.
func benchGroups() []string {
	benchGroupsMu.Lock()
	defer benchGroupsMu.Unlock()
	return slices.Clone(benchGroupNames)
}

// rawClient returns a plain franz-go consumer of topic from the start with
// franz-go's defaults (fetch sizes and waits included), committing the way
// the processor does: auto-commit of marks every interval, each record
// marked after it was handled.
func rawClient(b *testing.B, addrs []string, topic string, interval time.Duration) *kgo.Client {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup(benchGroup("raw")), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.AutoCommitMarks(), kgo.AutoCommitInterval(interval), kgo.BlockRebalanceOnPoll(),
		kgo.Balancers(kgo.CooperativeStickyBalancer()))
	if err != nil {
		b.Fatal(err)
	}
	return cl
}

// rawLoop consumes topic with a single poll loop (rawClient) and a no-op
// handler, and returns the time from the first record to the n-th.
func rawLoop(b *testing.B, addrs []string, topic string, n int, interval time.Duration) time.Duration {
	b.Helper()
	cl := rawClient(b, addrs, topic, interval)
	defer cl.Close()
	var first time.Time
	got := 0
	for got < n {
		fs := cl.PollRecords(context.Background(), 1000)
		fs.EachError(func(t string, p int32, err error) { b.Fatalf("fetch %s[%d]: %v", t, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if first.IsZero() {
				first = time.Now()
			}
			got++
			cl.MarkCommitRecords(r) // handled (a no-op handler): mark for the next commit
		})
		cl.AllowRebalance()
	}
	d := time.Since(first)
	if err := cl.CommitMarkedOffsets(context.Background()); err != nil {
		b.Fatal(err)
	}
	return d
}

// rawPerPartition consumes topic with a poll loop that hands each
// partition's records to a goroutine of its own (franz-go's
// goroutine-per-partition example: a channel of 5 fetches per partition,
// which blocks the poll loop when full), where handler runs one record at a
// time and marks it. It returns the time from the first handled record to
// the n-th.
func rawPerPartition(b *testing.B, addrs []string, topic string, n int, handler func(*kgo.Record)) time.Duration {
	b.Helper()
	cl := rawClient(b, addrs, topic, 100*time.Millisecond)
	defer cl.Close()
	var first atomic.Int64
	var handled atomic.Int64
	done := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	workers := map[int32]chan []*kgo.Record{}
	stop := make(chan struct{})
	defer func() { close(stop); wg.Wait() }()
	for {
		select {
		case <-done:
			d := time.Since(time.Unix(0, first.Load()))
			return d
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				b.Fatalf("fetch %s[%d]: %v", t, p, err)
			}
		})
		fs.EachPartition(func(fp kgo.FetchTopicPartition) {
			ch := workers[fp.Partition]
			if ch == nil {
				ch = make(chan []*kgo.Record, 5)
				workers[fp.Partition] = ch
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						case recs := <-ch:
							for _, r := range recs {
								select {
								case <-stop: // the pass is over: not the rest of a fetch of hundreds of records
									return
								default:
								}
								first.CompareAndSwap(0, time.Now().UnixNano())
								handler(r)
								cl.MarkCommitRecords(r)
								if handled.Add(1) == int64(n) {
									once.Do(func() { close(done) })
								}
							}
						}
					}
				}()
			}
			select {
			case ch <- fp.Records:
			case <-done:
			}
		})
		cl.AllowRebalance()
	}
}

// processorPass runs a processor with opts and handler h over topic from
// the start until done reports true, and returns the time from the first
// handler call to done.
func processorPass(b *testing.B, addrs []string, topic string, h Handler, done func() bool, opts ...Opt) time.Duration {
	b.Helper()
	// done is checked after each record handled, and the pass waits on a
	// channel closed then, as rawPerPartition does: polling it in a loop
	// would wake this process thousands of times a second and charge that
	// CPU to the processor's side (a slow handler's pass lasts seconds).
	var first, last atomic.Int64
	finished := make(chan struct{})
	var once sync.Once
	wrapped := func(ctx context.Context, r *kgo.Record) error {
		if first.Load() == 0 {
			first.CompareAndSwap(0, time.Now().UnixNano())
		}
		err := h(ctx, r)
		if done() {
			once.Do(func() {
				last.Store(time.Now().UnixNano())
				close(finished)
			})
		}
		return err
	}
	// No DLQ: the benchmark handlers do not fail, and the benchmark topics
	// have no DLQ topic beside them.
	p, err := New(append([]Opt{Brokers(addrs...), Group(benchGroup("proc")), Topics(topic), WithHandler(wrapped), DeadLetter(false)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- p.Run(ctx) }()
	select {
	case err := <-errc:
		b.Fatalf("Run returned early: %v", err)
	case <-finished:
	}
	d := time.Duration(last.Load() - first.Load())
	cancel()
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	return d
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// minMax formats the median of xs with its range, as "m (lo-hi)".
func minMax(xs []float64, format string) string {
	return fmt.Sprintf(format+" ("+format+"-"+format+")", median(xs), slices.Min(xs), slices.Max(xs))
}

// BenchmarkThroughputVsRawLoop: a no-op handler, at-least-once, on 6
// partitions over 10,000 keys, in two shapes: 300,000 records of 1 KiB and
// 1,000,000 of 100 bytes (random letters), written by franz-go's default
// producer (batches of up to 1 MB). Each round consumes the backlog six
// times, each time with a new group, interleaved raw, partition, key, key,
// partition, raw: a raw franz-go poll loop with franz-go's defaults that
// marks each record after "handling" it and commits the marks every
// 100ms (rawLoop), the processor in partition order and in key order
// (CommitInterval 100ms, other options default). It reports the rates
// (records/s from the first record to the last), the ratios to raw, median
// over the rounds, and the CPU time this process spent per record on each
// side (the broker's is not counted; it runs in a child process or is the
// real cluster).
func BenchmarkThroughputVsRawLoop(b *testing.B) {
	for _, shape := range []struct {
		name          string
		records, size int
	}{{"1KiB", 300_000, 1024}, {"100B", 1_000_000, 100}} {
		b.Run("values="+shape.name, func(b *testing.B) { benchThroughput(b, shape.records, shape.size) })
	}
}

func benchThroughput(b *testing.B, records, size int) {
	addrs, topic := benchBroker(b, "t1", 6, benchSeed{records: records, size: size, keys: 10_000})
	sides := []string{"raw", "partition", "key"}
	rates := map[string][]float64{}
	cpus := map[string][]float64{}
	ratios := map[string][]float64{}
	b.ResetTimer()
	for i := range b.N {
		// Interleaved, so that no side always runs first; a GC between
		// passes so that none inherits another's garbage.
		d := map[string]time.Duration{}
		c := map[string]time.Duration{}
		for _, side := range []string{"raw", "partition", "key", "key", "partition", "raw"} {
			runtime.GC()
			c0 := cpuTime(b)
			if side == "raw" {
				d[side] += rawLoop(b, addrs, topic, records, 100*time.Millisecond)
			} else {
				order := OrderPartition
				if side == "key" {
					order = OrderKey
				}
				var handled atomic.Int64
				d[side] += processorPass(b, addrs, topic, func(context.Context, *kgo.Record) error {
					handled.Add(1)
					return nil
				}, func() bool { return handled.Load() >= int64(records) }, CommitInterval(100*time.Millisecond), WithOrdering(order))
			}
			c[side] += cpuTime(b) - c0
		}
		for _, side := range sides {
			rates[side] = append(rates[side], 2*float64(records)/d[side].Seconds())
			cpus[side] = append(cpus[side], float64(c[side].Microseconds())/(2*float64(records)))
		}
		for _, side := range sides[1:] {
			ratios[side] = append(ratios[side], rates[side][i]/rates["raw"][i])
		}
		b.Logf("round %d: raw %.0f rec/s (%.2f µs CPU/rec), partition order %.0f rec/s (%.2f µs CPU/rec, ratio %.2f), key order %.0f rec/s (%.2f µs CPU/rec, ratio %.2f)",
			i+1, rates["raw"][i], cpus["raw"][i], rates["partition"][i], cpus["partition"][i], ratios["partition"][i],
			rates["key"][i], cpus["key"][i], ratios["key"][i])
	}
	b.Logf("medians (min-max) over %d rounds: raw %s rec/s, %s µs CPU/rec; partition order %s rec/s, ratio %s, %s µs CPU/rec; key order %s rec/s, ratio %s, %s µs CPU/rec",
		b.N, minMax(rates["raw"], "%.0f"), minMax(cpus["raw"], "%.2f"),
		minMax(rates["partition"], "%.0f"), minMax(ratios["partition"], "%.2f"), minMax(cpus["partition"], "%.2f"),
		minMax(rates["key"], "%.0f"), minMax(ratios["key"], "%.2f"), minMax(cpus["key"], "%.2f"))
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(median(rates["raw"]), "raw-rec/s")
	b.ReportMetric(median(rates["partition"]), "part-rec/s")
	b.ReportMetric(median(ratios["partition"]), "part-ratio")
	b.ReportMetric(median(rates["key"]), "key-rec/s")
	b.ReportMetric(median(ratios["key"]), "key-ratio")
	b.ReportMetric(median(cpus["raw"]), "raw-cpu-µs/rec")
	b.ReportMetric(median(cpus["partition"]), "part-cpu-µs/rec")
	b.ReportMetric(median(cpus["key"]), "key-cpu-µs/rec")
}

// BenchmarkSlowHandlerVsRawLoop: a 20 ms handler (a service doing I/O) on
// a backlog of 30,000 records of 1 KiB on 6 partitions over 10,000 keys,
// written by franz-go's default producer. Partition order with the
// processor's defaults against the raw loop a team would write for it, a
// poll loop with a goroutine per partition (rawPerPartition), both handling
// 1,200 records per pass (at most 300 rec/s: about 4 s), interleaved raw,
// processor, processor, raw, with a GC before each pass. Reports the rates,
// their ratio, and each side's CPU time of this process per record (µs) in
// the steady state: from the 200th record handled in a pass to the last,
// so that neither side's start (client, group join, the first fetches of
// the backlog) is counted; median over the rounds.
func BenchmarkSlowHandlerVsRawLoop(b *testing.B) {
	const records, handled, size, warm = 30_000, 1200, 1024, 200
	addrs, topic := benchBroker(b, "t4", 6, benchSeed{records: records, size: size, keys: 10_000})
	var raws, procs, ratios, rawCPU, procCPU, cpuRatios []float64
	b.ResetTimer()
	for i := range b.N {
		var raw, proc, rawC, procC time.Duration
		for _, side := range []string{"raw", "proc", "proc", "raw"} {
			runtime.GC()
			// steady counts a handled record and takes the process's CPU
			// time at the warm-th and the last one.
			var n, c0, c1 atomic.Int64
			steady := func() {
				time.Sleep(20 * time.Millisecond)
				switch n.Add(1) {
				case warm:
					c0.Store(int64(processCPU()))
				case handled:
					c1.Store(int64(processCPU()))
				}
			}
			if side == "raw" {
				raw += rawPerPartition(b, addrs, topic, handled, func(*kgo.Record) { steady() })
				rawC += time.Duration(c1.Load() - c0.Load())
				continue
			}
			proc += processorPass(b, addrs, topic, func(context.Context, *kgo.Record) error {
				steady()
				return nil
			}, func() bool { return n.Load() >= handled })
			procC += time.Duration(c1.Load() - c0.Load())
		}
		rr, pr := 2*handled/raw.Seconds(), 2*handled/proc.Seconds()
		rc, pc := float64(rawC.Microseconds())/(2*(handled-warm)), float64(procC.Microseconds())/(2*(handled-warm))
		raws, procs, ratios = append(raws, rr), append(procs, pr), append(ratios, pr/rr)
		rawCPU, procCPU, cpuRatios = append(rawCPU, rc), append(procCPU, pc), append(cpuRatios, pc/rc)
		b.Logf("round %d: raw goroutine per partition %.0f rec/s (%.1f µs CPU/rec), processor partition order %.0f rec/s (%.1f µs CPU/rec), ratio %.2f, CPU %.2f×",
			i+1, rr, rc, pr, pc, pr/rr, pc/rc)
	}
	b.Logf("medians (min-max) over %d rounds: raw %s rec/s, %s µs CPU/rec; processor %s rec/s, %s µs CPU/rec; ratio %s, CPU %s×",
		b.N, minMax(raws, "%.0f"), minMax(rawCPU, "%.1f"), minMax(procs, "%.0f"), minMax(procCPU, "%.1f"), minMax(ratios, "%.2f"), minMax(cpuRatios, "%.2f"))
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(median(raws), "raw-rec/s")
	b.ReportMetric(median(procs), "proc-rec/s")
	b.ReportMetric(median(ratios), "ratio")
	b.ReportMetric(median(rawCPU), "raw-cpu-µs/rec")
	b.ReportMetric(median(procCPU), "proc-cpu-µs/rec")
	b.ReportMetric(median(cpuRatios), "cpu-ratio")
}

// processCPU returns the CPU time (user and system) this process used so
// far, 0 if getrusage fails; safe on any goroutine.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuTime returns the CPU time (user and system) this process used so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// keyOrderChecker verifies per-key order during a run: records of a key
// must reach the handler one at a time and in sequence (the values are
// "<key>:<seq>", seq counting from 0 per key in production order).
type keyOrderChecker struct {
	shards     [64]keyShard
	violations atomic.Int64
	handled    atomic.Int64
}

type keyShard struct {
	mu   sync.Mutex
	last map[string]int
	busy map[string]bool
}

func newKeyOrderChecker() *keyOrderChecker {
	c := &keyOrderChecker{}
	for i := range c.shards {
		c.shards[i].last = map[string]int{}
		c.shards[i].busy = map[string]bool{}
	}
	return c
}

func (c *keyOrderChecker) handler(d time.Duration) Handler {
	return func(ctx context.Context, r *kgo.Record) error {
		key, seqs, _ := strings.Cut(string(r.Value), ":")
		seq, _ := strconv.Atoi(strings.Fields(seqs)[0])
		h := 0
		for i := range len(key) {
			h = h*31 + int(key[i])
		}
		sh := &c.shards[(h%len(c.shards)+len(c.shards))%len(c.shards)]
		sh.mu.Lock()
		last, seen := sh.last[key]
		if sh.busy[key] || (seen && seq != last+1) || (!seen && seq != 0) {
			c.violations.Add(1)
		}
		sh.busy[key] = true
		sh.mu.Unlock()
		time.Sleep(d)
		sh.mu.Lock()
		sh.busy[key] = false
		sh.last[key] = seq
		sh.mu.Unlock()
		c.handled.Add(1)
		return nil
	}
}

// BenchmarkKeyModeVsPartitionMode: a 20 ms handler, 6 partitions, 10,000
// keys. Key order with 1,000 records in flight (and Concurrency 1,000)
// against partition order (one record per partition at a time). Per-key
// order is verified during both runs. Rates are measured from the first
// handled record to the last; partition order handles 900 records (about 3
// s), key order 100,000.
func BenchmarkKeyModeVsPartitionMode(b *testing.B) {
	const records, keys = 100_000, 10_000
	const partitionRecords = 900
	addrs, topic := benchBroker(b, "t2", 6, benchSeed{records: records, keys: keys})
	var parts, keyed, ratios []float64
	b.ResetTimer()
	for i := range b.N {
		pc := newKeyOrderChecker()
		pd := processorPass(b, addrs, topic, pc.handler(20*time.Millisecond), func() bool { return pc.handled.Load() >= partitionRecords },
			WithOrdering(OrderPartition), Concurrency(16))
		kc := newKeyOrderChecker()
		kd := processorPass(b, addrs, topic, kc.handler(20*time.Millisecond), func() bool { return kc.handled.Load() >= records },
			WithOrdering(OrderKey), Concurrency(1000), MaxInFlight(1000, 64<<20))
		if v := pc.violations.Load() + kc.violations.Load(); v > 0 {
			b.Fatalf("%d per-key order violations", v)
		}
		pr, kr := float64(pc.handled.Load())/pd.Seconds(), float64(kc.handled.Load())/kd.Seconds()
		parts, keyed, ratios = append(parts, pr), append(keyed, kr), append(ratios, kr/pr)
		b.Logf("round %d: partition order %.0f rec/s, key order %.0f rec/s, ratio %.0f", i+1, pr, kr, kr/pr)
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(median(parts), "partition-rec/s")
	b.ReportMetric(median(keyed), "key-rec/s")
	b.ReportMetric(median(ratios), "ratio")
}

// procStatusKB returns a field of /proc/self/status in KiB.
func procStatusKB(b *testing.B, field string) int64 {
	b.Helper()
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(rest)
			n, _ := strconv.ParseInt(f[0], 10, 64)
			return n
		}
	}
	b.Fatalf("no %s in /proc/self/status", field)
	return 0
}

// BenchmarkMemoryBacklog drains a backlog of 1,000,000 records (256-byte
// values, 6 partitions, 10,000 keys) with a slow handler (2 ms, key order,
// Concurrency 256, the default MaxInFlight of 1,000 records / 64 MiB) and
// reports the consumer process's peak resident set (VmHWM, reset through
// /proc/self/clear_refs before each drain, so it covers the drain only) and
// its RSS at the end. The broker runs in another process. Two backlogs: values
// of random letters, which the producer's snappy cannot shrink (its batches
// are stored uncompressed), and values that are mostly a run of one byte,
// which it compresses about tenfold: fetch sizes count compressed bytes, so
// that is the harder case for memory.
func BenchmarkMemoryBacklog(b *testing.B) {
	for _, fill := range []string{"random", "compressible"} {
		b.Run("values="+fill, func(b *testing.B) { benchMemoryBacklog(b, fill) })
	}
}

func benchMemoryBacklog(b *testing.B, fill string) {
	const records = 1_000_000
	addrs, topic := benchBroker(b, "t3", 6, benchSeed{records: records, size: 256, keys: 10_000, compressible: fill == "compressible"})
	var peaks []float64
	b.ResetTimer()
	for range b.N {
		if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
			b.Fatalf("resetting VmHWM: %v", err)
		}
		var handled atomic.Int64
		start := time.Now()
		var maxRSS atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				if rss := procStatusKB(b, "VmRSS"); rss > maxRSS.Load() {
					maxRSS.Store(rss)
				}
			}
		}()
		processorPass(b, addrs, topic, func(ctx context.Context, r *kgo.Record) error {
			time.Sleep(2 * time.Millisecond)
			handled.Add(1)
			return nil
		}, func() bool { return handled.Load() >= records }, WithOrdering(OrderKey), Concurrency(256))
		close(stop)
		wg.Wait()
		took := time.Since(start)
		hwm := procStatusKB(b, "VmHWM")
		rss := procStatusKB(b, "VmRSS")
		peaks = append(peaks, float64(hwm)/1024)
		b.Logf("drained %d records in %v (%.0f rec/s): VmHWM %d MiB, VmRSS sampled max %d MiB, at the end %d MiB",
			records, took.Round(time.Millisecond), records/took.Seconds(), hwm/1024, maxRSS.Load()/1024, rss/1024)
		if hwm > 200*1024 {
			b.Errorf("peak RSS %d MiB, want under 200 MiB", hwm/1024)
		}
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(slices.Max(peaks), "peak-RSS-MiB")
}
