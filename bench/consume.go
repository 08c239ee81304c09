package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// runSpec is what one consumer process is asked to do: read topic from its
// start in a fresh group, handle each record (sleeping handlerMS), commit
// after handling, and stop at target records or window after the first
// record, whichever comes first.
type runSpec struct {
	Client    string        `json:"client"`
	Brokers   []string      `json:"brokers"`
	Topic     string        `json:"topic"`
	Group     string        `json:"group"`
	Target    int           `json:"target"`
	Handler   time.Duration `json:"handler"`
	Window    time.Duration `json:"window"`
	Partitons int           `json:"partitions"`
	// InFlight, when > 0, is the processor's MaxInFlight records (and, in
	// key and unordered order, its Concurrency); 0 keeps the defaults.
	InFlight int `json:"in_flight,omitempty"`
	// CPUProfile, when set, is a file the consume process writes a CPU
	// profile of its measured span to (go tool pprof).
	CPUProfile string `json:"cpu_profile,omitempty"`
	// MemProfile, when set, is a file the consume process writes a heap
	// profile to at the end of its measured span (in-use bytes then).
	MemProfile string `json:"mem_profile,omitempty"`
}

// runResult is what a consumer process writes on its stdout as one JSON
// line: records handled in the measured span (first record to stop), the
// span in seconds, and the process's CPU time (user+system) in that span.
type runResult struct {
	Records    int64   `json:"records"`
	Seconds    float64 `json:"seconds"`
	CPUSeconds float64 `json:"cpu_seconds"`
	// Requests written to the brokers in the measured span, counted by a
	// kgo.HookBrokerWrite on the consumer's clients (Go franz-go clients
	// only: raw and processor-*): OffsetCommit requests and their bytes,
	// Fetch requests.
	CommitRequests int64 `json:"commit_requests,omitempty"`
	CommitBytes    int64 `json:"commit_bytes,omitempty"`
	FetchRequests  int64 `json:"fetch_requests,omitempty"`
	// PeakRSS is the process's peak resident set (VmHWM), bytes.
	PeakRSS int64 `json:"peak_rss_bytes,omitempty"`
	// Stored is what the record batches the consumer read were stored as,
	// from a kgo.HookFetchBatchRead over the whole run (Go franz-go
	// clients only): batches by codec and their bytes.
	Stored *storedBatches `json:"stored,omitempty"`
}

// storedBatches counts the record batches a client read by the codec they
// were stored with (kgo.FetchBatchMetrics.CompressionType), and their
// compressed and uncompressed bytes: the stored ratio is
// Uncompressed / Compressed.
type storedBatches struct {
	Codecs       map[string]int64 `json:"batches_by_codec"`
	Compressed   int64            `json:"compressed_bytes"`
	Uncompressed int64            `json:"uncompressed_bytes"`
}

// Ratio is the uncompressed bytes over the stored bytes (0: nothing read).
func (s *storedBatches) Ratio() float64 {
	if s == nil || s.Compressed == 0 {
		return 0
	}
	return float64(s.Uncompressed) / float64(s.Compressed)
}

// codecNames are franz-go's CompressionType values (the batch attributes'
// low three bits).
var codecNames = [...]string{"none", "gzip", "snappy", "lz4", "zstd"}

func codecName(t uint8) string {
	if int(t) < len(codecNames) {
		return codecNames[t]
	}
	return "codec-" + strconv.Itoa(int(t))
}

// batchCounter is a kgo.HookFetchBatchRead filling a storedBatches.
type batchCounter struct {
	mu sync.Mutex
	s  storedBatches
}

func (c *batchCounter) OnFetchBatchRead(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.FetchBatchMetrics) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.s.Codecs == nil {
		c.s.Codecs = make(map[string]int64)
	}
	c.s.Codecs[codecName(m.CompressionType)]++
	c.s.Compressed += int64(m.CompressedBytes)
	c.s.Uncompressed += int64(m.UncompressedBytes)
}

func (c *batchCounter) snapshot() *storedBatches {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.s.Codecs == nil {
		return nil
	}
	s := c.s
	s.Codecs = make(map[string]int64, len(c.s.Codecs))
	for k, v := range c.s.Codecs {
		s.Codecs[k] = v
	}
	return &s
}

// reqCounter is a kgo.HookBrokerWrite counting the OffsetCommit (key 8) and
// Fetch (key 1) requests a client writes, and the OffsetCommit bytes.
type reqCounter struct{ commits, commitBytes, fetches atomic.Int64 }

func (c *reqCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, n int, _, _ time.Duration, err error) {
	if err != nil {
		return
	}
	switch key {
	case 8:
		c.commits.Add(1)
		c.commitBytes.Add(int64(n))
	case 1:
		c.fetches.Add(1)
	}
}

func (c *reqCounter) snapshot() [3]int64 {
	return [3]int64{c.commits.Load(), c.commitBytes.Load(), c.fetches.Load()}
}

// peakRSS reads VmHWM from /proc/self/status, bytes (0 where absent).
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// meter counts handled records and marks the measured span: it starts at the
// first record and ends when the target is reached or the window is over.
type meter struct {
	spec     runSpec
	n        atomic.Int64
	once     sync.Once
	start    time.Time
	cpuStart float64
	started  chan struct{}
	done     chan struct{}
	doneOnce sync.Once
	end      time.Time
	cpuEnd   float64
	endN     int64
	// reqs counts the requests of the consumer's clients; reqStart and
	// reqEnd are its counts at the span's start and end.
	reqs             reqCounter
	reqStart, reqEnd [3]int64
	// batches counts the record batches the consumer's clients read, by
	// their stored codec (Go franz-go clients).
	batches batchCounter
	profile *os.File
}

func newMeter(s runSpec) *meter {
	return &meter{spec: s, started: make(chan struct{}), done: make(chan struct{})}
}

func cpuNow() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

// begin is called when a record arrives, before its handler runs.
func (m *meter) begin() {
	m.once.Do(func() {
		m.reqStart = m.reqs.snapshot()
		if m.spec.CPUProfile != "" {
			if f, err := os.Create(m.spec.CPUProfile); err == nil && pprof.StartCPUProfile(f) == nil {
				m.profile = f
			}
		}
		m.start, m.cpuStart = time.Now(), cpuNow()
		close(m.started)
		go func() {
			select {
			case <-time.After(m.spec.Window):
				m.finish()
			case <-m.done:
			}
		}()
	})
}

// handled is called after a record's handler returned (before its commit is
// marked, which is cheap for every client here).
func (m *meter) handled() {
	if m.n.Add(1) == int64(m.spec.Target) {
		m.finish()
	}
}

// stopped reports whether the measured span is over.
func (m *meter) stopped() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

func (m *meter) finish() {
	m.doneOnce.Do(func() {
		m.end, m.cpuEnd, m.endN = time.Now(), cpuNow(), m.n.Load()
		m.reqEnd = m.reqs.snapshot()
		if m.spec.MemProfile != "" {
			if f, err := os.Create(m.spec.MemProfile); err == nil {
				pprof.WriteHeapProfile(f)
				f.Close()
			}
		}
		if m.profile != nil {
			pprof.StopCPUProfile()
			m.profile.Close()
		}
		close(m.done)
	})
}

func (m *meter) result() runResult {
	return runResult{Records: m.endN, Seconds: m.end.Sub(m.start).Seconds(), CPUSeconds: m.cpuEnd - m.cpuStart,
		CommitRequests: m.reqEnd[0] - m.reqStart[0], CommitBytes: m.reqEnd[1] - m.reqStart[1],
		FetchRequests: m.reqEnd[2] - m.reqStart[2], PeakRSS: peakRSS(), Stored: m.batches.snapshot()}
}

// handle is the workload: nothing, or a sleep of the handler duration (a
// service waiting on I/O).
func handle(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
	}
}

// consumers are the Go contenders, each run in its own process by the
// "consume" subcommand. Each returns once m.done is closed (having stopped
// its client, committing what it handled) or on an error.
var consumers = map[string]func(ctx context.Context, m *meter) error{
	"raw":                 consumeRaw,
	"processor-partition": consumeProcessor("partition"),
	"processor-key":       consumeProcessor("key"),
	"processor-unordered": consumeProcessor("unordered"),
	"watermill":           consumeWatermill,
	"kafka-go":            consumeKafkaGo,
	"confluent":           consumeConfluent,
}

// consumeMain is the "consume" subcommand: spec as JSON in argv, result as
// JSON on stdout.
func consumeMain(arg string) error {
	var s runSpec
	if err := json.Unmarshal([]byte(arg), &s); err != nil {
		return fmt.Errorf("consume: spec: %w", err)
	}
	f, ok := consumers[s.Client]
	if !ok {
		return fmt.Errorf("consume: unknown client %q", s.Client)
	}
	m := newMeter(s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// No first record within a minute: the consumer is broken, not slow.
	go func() {
		select {
		case <-m.started:
		case <-time.After(60 * time.Second):
			fmt.Fprintln(os.Stderr, "consume: no record in 60s")
			os.Exit(3)
		}
	}()
	if os.Getenv("BENCH_DEBUG") != "" {
		go func() {
			for range time.Tick(time.Second) {
				fmt.Fprintln(os.Stderr, "handled", m.n.Load())
			}
		}()
	}
	if err := f(ctx, m); err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(m.result())
}
