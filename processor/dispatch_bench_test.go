package processor

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkDispatch: the dispatch path alone, without a broker: fetches of
// 6 partitions × 1,000 records of 1 KiB over 10,000 keys are handed straight
// to enqueue, as the poll loop would (waiting for room the same way), and a
// no-op handler runs in each mode. Reports the process's CPU time per record
// (cpu-ns/op, the harness's own record building included) and allocations;
// ns/op is wall time on a shared machine. See docs/benchmarks.md.
func BenchmarkDispatch(b *testing.B) {
	for _, c := range []struct {
		name string
		o    Ordering
		conc int
	}{{"partition", OrderPartition, 16}, {"key16", OrderKey, 16}, {"key1000", OrderKey, 1000}} {
		b.Run(c.name, func(b *testing.B) { benchDispatch(b, c.o, c.conc) })
	}
}

func benchDispatch(b *testing.B, o Ordering, conc int) {
	const parts, batch, keys = 6, 1000, 10_000
	var handled atomic.Int64
	p, err := New(Brokers("127.0.0.1:1"), Group("g"), Topics("t"), WithOrdering(o), Concurrency(conc),
		WithHandler(func(context.Context, *kgo.Record) error { handled.Add(1); return nil }))
	if err != nil {
		b.Fatal(err)
	}
	defer p.cl.Close()
	p.mu.Lock()
	for i := range int32(parts) {
		k := tp{"t", i}
		ctx, cancel := context.WithCancel(p.baseCtx)
		p.parts[k] = &partState{tp: k, tracker: newOffsetTracker(), committed: -1, ctx: ctx, cancel: cancel}
		p.activeParts++
	}
	var wg sync.WaitGroup
	p.startWorkersLocked(&wg)
	p.mu.Unlock()
	clockDone := make(chan struct{}) // the attempts' clock, as Run starts it
	defer close(clockDone)
	go p.clock.run(clockDone, p.idle.Load)
	keyB := make([][]byte, keys)
	for i := range keyB {
		keyB[i] = []byte(fmt.Sprintf("k%d", i))
	}
	value := make([]byte, 1024)
	next := make([]int64, parts)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	c0 := cpuTime(b)
	sent := 0
	for sent < b.N {
		p.mu.Lock()
		for {
			if !p.paused {
				p.unholdSharesLocked()
			}
			if !p.paused && p.pendingRecs > p.heldRecs {
				p.moveLocked()
				continue
			}
			if !p.paused && !p.pendingFull {
				break
			}
			p.waitWithContext(ctx)
		}
		p.mu.Unlock()
		var f kgo.Fetch
		t := kgo.FetchTopic{Topic: "t"}
		for i := range int32(parts) {
			if sent >= b.N {
				break
			}
			n := min(batch, b.N-sent)
			recs := make([]*kgo.Record, n)
			rs := make([]kgo.Record, n)
			for j := range rs {
				off := next[i]
				next[i]++
				rs[j] = kgo.Record{Topic: "t", Partition: i, Offset: off, Key: keyB[(int(off)*parts+int(i))%keys], Value: value}
				recs[j] = &rs[j]
			}
			sent += n
			t.Partitions = append(t.Partitions, kgo.FetchPartition{Partition: i, Records: recs, HighWatermark: next[i]})
		}
		f.Topics = []kgo.FetchTopic{t}
		p.enqueue(kgo.Fetches{f})
	}
	for handled.Load() < int64(b.N) {
		p.mu.Lock()
		if !p.paused {
			p.unholdSharesLocked()
		}
		if !p.paused && p.pendingRecs > p.heldRecs {
			p.moveLocked()
		}
		p.mu.Unlock()
		time.Sleep(50 * time.Microsecond)
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime(b)-c0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	p.mu.Lock()
	b.ReportMetric(float64(p.workers), "workers")
	p.stopping = true
	p.workCond.Broadcast()
	p.mu.Unlock()
	wg.Wait()
}
