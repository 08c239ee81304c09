package processor

import (
	"context"
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

// Benchmarks of the runtime (see BENCHMARKS.md for the commands and the
// results). The broker runs in a child process (brokerChild), seeded before
// the measurement, so the benchmark process holds only the consumer: the
// memory figure is the consumer's, and the consumer does not share its
// garbage collector with the broker. The machine's cores are shared all the
// same.
//
// Each benchmark reports its own metrics; ns/op is not meaningful and b.N
// only sets how many measured rounds run (each a full pass over the data).

// benchGroup returns a fresh consumer group name.
var benchGroupSeq atomic.Int64

func benchGroup(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), benchGroupSeq.Add(1))
}

// rawLoop consumes topic from the start with a plain franz-go poll loop that
// commits the way the processor does: auto-commit off, each record marked
// after it was handled, the marks committed every interval (and at the end).
// It returns the time from the first record to the n-th.
func rawLoop(b *testing.B, addrs []string, topic string, n int, interval time.Duration, opts ...kgo.Opt) time.Duration {
	b.Helper()
	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(addrs...), kgo.ConsumerGroup(benchGroup("raw")), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.AutoCommitMarks(), kgo.AutoCommitInterval(interval), kgo.BlockRebalanceOnPoll(),
		kgo.FetchMaxWait(500*time.Millisecond), kgo.Balancers(kgo.CooperativeStickyBalancer()))...)
	if err != nil {
		b.Fatal(err)
	}
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

// processorPass runs a processor with opts and handler h over topic from
// the start until done reports true, and returns the time from the first
// handler call to done.
func processorPass(b *testing.B, addrs []string, topic string, h Handler, done func() bool, opts ...Opt) time.Duration {
	b.Helper()
	var first atomic.Int64
	wrapped := func(ctx context.Context, r *kgo.Record) error {
		if first.Load() == 0 {
			first.CompareAndSwap(0, time.Now().UnixNano())
		}
		return h(ctx, r)
	}
	p, err := New(append([]Opt{Brokers(addrs...), Group(benchGroup("proc")), Topics(topic), WithHandler(wrapped)}, opts...)...)
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

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// BenchmarkThroughputVsRawLoop: a no-op handler, at-least-once, partition
// order, 1 KiB records (random letters) on 6 partitions. Each round consumes
// the same backlog four times, each time with a new group: twice with a raw
// franz-go poll loop that marks each record after "handling" it and commits
// the marks every 100ms, twice with the processor (CommitInterval 100ms,
// other options default). The raw loop fetches with the sizes the processor
// derives from its default MaxInFlight (16 MiB per fetch, 256 KiB per
// partition), so that both sides ask the client for the same work. It reports both rates (records/s from the first record to the
// last) and their ratio, median over the rounds, and the CPU time this
// process spent per record on each side (the broker's is not counted).
func BenchmarkThroughputVsRawLoop(b *testing.B) {
	const records, size = 500_000, 1024
	addrs := brokerProcess(b, "t1:6", fmt.Sprintf("t1:%d:%d:0", records, size))
	var raws, procs, ratios, rawCPU, procCPU []float64
	b.ResetTimer()
	for i := range b.N {
		// ABBA: raw, processor, processor, raw, so that neither side
		// always runs first; a GC between passes so that neither inherits
		// the other's garbage.
		var raw, proc, rawC, procC time.Duration
		for _, side := range []string{"raw", "proc", "proc", "raw"} {
			runtime.GC()
			c0 := cpuTime(b)
			if side == "raw" {
				// The fetch sizes the processor derives from its default
				// MaxInFlight (64 MiB): the same client work on both sides.
				raw += rawLoop(b, addrs, "t1", records, 100*time.Millisecond,
					kgo.FetchMaxBytes(16<<20), kgo.FetchMaxPartitionBytes(256<<10))
				rawC += cpuTime(b) - c0
				continue
			}
			var handled atomic.Int64
			proc += processorPass(b, addrs, "t1", func(context.Context, *kgo.Record) error {
				handled.Add(1)
				return nil
			}, func() bool { return handled.Load() >= records }, CommitInterval(100*time.Millisecond))
			procC += cpuTime(b) - c0
		}
		rr, pr := 2*records/raw.Seconds(), 2*records/proc.Seconds()
		raws, procs, ratios = append(raws, rr), append(procs, pr), append(ratios, pr/rr)
		rawCPU = append(rawCPU, float64(rawC.Microseconds())/(2*records))
		procCPU = append(procCPU, float64(procC.Microseconds())/(2*records))
		b.Logf("round %d: raw %.0f rec/s (%.2f µs CPU/rec), processor %.0f rec/s (%.2f µs CPU/rec), ratio %.2f",
			i+1, rr, rawCPU[i], pr, procCPU[i], pr/rr)
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(median(raws), "raw-rec/s")
	b.ReportMetric(median(procs), "proc-rec/s")
	b.ReportMetric(median(ratios), "ratio")
	b.ReportMetric(median(rawCPU), "raw-cpu-µs/rec")
	b.ReportMetric(median(procCPU), "proc-cpu-µs/rec")
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
	addrs := brokerProcess(b, "t2:6", fmt.Sprintf("t2:%d:0:%d", records, keys))
	var parts, keyed, ratios []float64
	b.ResetTimer()
	for i := range b.N {
		pc := newKeyOrderChecker()
		pd := processorPass(b, addrs, "t2", pc.handler(20*time.Millisecond), func() bool { return pc.handled.Load() >= partitionRecords },
			WithOrdering(OrderPartition), Concurrency(16))
		kc := newKeyOrderChecker()
		kd := processorPass(b, addrs, "t2", kc.handler(20*time.Millisecond), func() bool { return kc.handled.Load() >= records },
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
// of random letters (about as compressible as real payloads), and values
// that are mostly a run of one byte, which the producer's snappy compresses
// about tenfold: fetch sizes count compressed bytes, so that is the harder
// case for memory.
func BenchmarkMemoryBacklog(b *testing.B) {
	for _, fill := range []string{"random", "compressible"} {
		b.Run("values="+fill, func(b *testing.B) { benchMemoryBacklog(b, fill) })
	}
}

func benchMemoryBacklog(b *testing.B, fill string) {
	const records = 1_000_000
	addrs := brokerProcess(b, "t3:6", fmt.Sprintf("t3:%d:256:10000:%s", records, fill))
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
		processorPass(b, addrs, "t3", func(ctx context.Context, r *kgo.Record) error {
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
