package processor

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BatchHandler processes several records together, typically in one
// database transaction: it returns nil when every record of the batch is
// done, and an error when the batch as a whole failed (nothing of it may be
// kept: roll the transaction back).
//
// recs holds at most the records of the given ordering that could have been
// handled at the same moment by a Handler, so handling them in slice order
// keeps the ordering's guarantee: per partition (OrderPartition) or per key
// (OrderKey) a batch holds consecutive records, in offset order, and never a
// record whose predecessor of that partition or key is still in flight. A
// batch may hold records of several partitions and topics. For a record that
// came back from a retry topic, the coordinates are the original's (as for
// Handler); retry-topic records are never batched, though: they are handled
// one at a time.
//
// ctx carries the batch's deadline (HandlerTimeout, for the whole batch) and
// is cancelled when the processor shuts down or loses any partition of the
// batch. The slice and its records must not be modified or retained after
// the call returns. Batches are handled concurrently (up to Concurrency at
// once), never two holding records of one key (OrderKey) or partition
// (OrderPartition).
type BatchHandler func(ctx context.Context, recs []*kgo.Record) error

// DefaultMaxBatch is the default MaxBatch: the most records of one
// BatchHandler call.
const DefaultMaxBatch = 100

// batchCfg is the WithBatchHandler configuration.
type batchCfg struct {
	handler BatchHandler
	max     int
	maxSet  bool // MaxBatch was given
}

// adoptBatch completes the batch configuration before validation: without a
// Handler, records handled one at a time go to the BatchHandler as
// one-record batches. It returns the configuration's errors.
func (c *cfg) adoptBatch() error {
	b := c.batch
	if b == nil {
		return nil
	}
	if b.max < 1 {
		return fmt.Errorf("MaxBatch: %d, want >= 1", b.max)
	}
	if b.handler == nil {
		c.batch = nil // MaxBatch alone: no batching
		return nil
	}
	if c.handler == nil {
		h := b.handler
		c.handler = func(ctx context.Context, r *kgo.Record) error { return h(ctx, []*kgo.Record{r}) }
	}
	return nil
}

// batchable reports whether it, the head (or a later record) of lane l, may
// go into a batch. p.mu held.
func (p *Processor) batchable(l *lane, it *item) bool {
	return it.stage == stageHandle && !it.solo && it.due().IsZero() && !it.tried() &&
		!l.failing && !l.part.retry && (p.kb == nil || p.blockerLocked(it) == nil) // a blocker's release is written alone (workers.go)
}

// batchLane is one lane's share of a batch: its first n queued records.
type batchLane struct {
	l  *lane
	n  int
	ps *partState // l.part when taken: complete may recycle an emptied l (freeLaneLocked), clearing l.part
}

// runBatchLocked handles a batch whose first lane is l (taken from the
// ready queue by the calling worker, its head batchable): it takes l's
// batchable records and those of the other ready lanes, up to MaxBatch,
// runs the BatchHandler without p.mu, and settles the outcome. p.mu held on
// entry and on return.
func (p *Processor) runBatchLocked(l *lane) {
	maxN := p.cfg.batch.max
	var lanes []batchLane
	var items []*item
	take := func(l *lane) {
		n := 0
		for n < len(l.queue) && len(items) < maxN && p.batchable(l, l.queue[n]) {
			items = append(items, l.queue[n])
			n++
		}
		l.running = true
		l.batchN = n
		l.part.running += n
		lanes = append(lanes, batchLane{l, n, l.part})
	}
	take(l)
	if len(items) < maxN && len(p.ready) > 0 {
		kept := p.ready[:0]
		for _, o := range p.ready {
			if len(items) < maxN && !o.running && !o.waiting && o.part.state == partActive &&
				len(o.queue) > 0 && p.batchable(o, o.queue[0]) {
				take(o)
				continue
			}
			kept = append(kept, o)
		}
		clear(p.ready[len(kept):])
		p.ready = kept
	}
	recs := make([]*kgo.Record, len(items))
	for i, it := range items {
		recs[i] = it.view
		if h := p.cfg.hooks.handleStart; h != nil {
			h(it.rec, it.view)
		}
	}
	p.mu.Unlock()
	start := time.Now()
	err := p.callBatch(lanes, recs)
	d := time.Since(start)
	p.mu.Lock()
	p.cfg.metrics.batchDone(p.cfg.group, len(recs), d, err)
	for _, it := range items {
		if h := p.cfg.hooks.afterHandle; h != nil {
			h(it.rec, it.view, err)
		}
	}
	if err != nil {
		p.cfg.logger.Warn("batch handler failed; handling its records one at a time", "records", len(recs), "error", err)
	}
	for _, bl := range lanes {
		l, ps := bl.l, bl.ps
		l.running = false
		l.batchN = 0
		ps.running -= bl.n
		var more bool
		switch {
		case ps.state != partActive && ps.state != partDraining:
			// Released: the completions are discarded, the next owner
			// redoes the records (as for one record).
		case err == nil:
			for i := 0; i < bl.n; i++ {
				it := l.queue[0]
				ps.m.processedOne()
				more = p.settle(l, it, nil)
			}
		default:
			for _, it := range l.queue[:bl.n] {
				it.solo = true
			}
			more = ps.state == partActive
		}
		if more {
			p.pushReady(l)
		}
	}
	for i, bl := range lanes {
		ps := bl.ps
		if seenPart(lanes[:i], ps) {
			continue
		}
		if ps.held == holdShare && ps.state == partActive {
			p.unholdLocked(ps)
		}
		if ps.state == partDraining && ps.running == 0 {
			p.cond.Broadcast() // a release is waiting for this
		}
		if ps.state == partActive {
			p.syncPausesLocked(p.cl, ps)
			p.checkBackpressureLocked()
		}
	}
}

// inFlight is how many of l's queued records a worker is processing (a
// revoke keeps them): the head, or a running batch's records.
func (l *lane) inFlight() int {
	if !l.running || len(l.queue) == 0 {
		return 0
	}
	return min(len(l.queue), max(1, l.batchN))
}

// seenPart reports whether a lane of ps is among lanes.
func seenPart(lanes []batchLane, ps *partState) bool {
	for _, bl := range lanes {
		if bl.ps == ps {
			return true
		}
	}
	return false
}

// callBatch runs the BatchHandler once with the per-batch deadline and a
// context cancelled when any partition of the batch is released, turning a
// panic into an error.
func (p *Processor) callBatch(lanes []batchLane, recs []*kgo.Record) (err error) {
	ctx := lanes[0].l.part.ctx
	multi := false
	for _, bl := range lanes[1:] {
		if bl.l.part != lanes[0].l.part {
			multi = true
			break
		}
	}
	if multi {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(p.baseCtx)
		defer cancel()
		for i, bl := range lanes {
			if !seenPart(lanes[:i], bl.l.part) {
				stop := context.AfterFunc(bl.l.part.ctx, cancel)
				defer stop()
			}
		}
	}
	if p.cfg.handlerTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.cfg.handlerTimeout)
		defer cancel()
	}
	var traced func(error)
	if t := p.cfg.tracer; t != nil {
		ctx, traced = t.Batch(ctx, p.cfg.group, recs)
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("batch handler panic: %v\n%s", r, debug.Stack())
		}
		if traced != nil {
			traced(err)
		}
	}()
	if err := p.cfg.batch.handler(ctx, recs); err != nil {
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			return fmt.Errorf("%w (batch context: %w)", err, ctx.Err())
		}
		return err
	}
	return nil
}

// batchMetrics are the series of batch handling:
//
//	ordercast_consumer_batch_records{group}           histogram: records per BatchHandler call
//	ordercast_consumer_batch_duration_seconds{group}  histogram: duration of one BatchHandler call
//	ordercast_consumer_batch_fallbacks_total{group}   BatchHandler calls that failed, whose records
//	                                                  were then handled one at a time
type batchMetrics struct {
	size      *prometheus.HistogramVec
	dur       *prometheus.HistogramVec
	fallbacks *prometheus.CounterVec
}

func newBatchMetrics(ns string) *batchMetrics {
	return &batchMetrics{
		size: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "batch_records",
			Help: "Records per BatchHandler call.", Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}}, []string{"group"}),
		dur: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "batch_duration_seconds",
			Help: "Duration of one BatchHandler call.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"group"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "batch_fallbacks_total",
			Help: "BatchHandler calls that failed; their records were handled again one at a time (retries and DLQ as for single records)."}, []string{"group"}),
	}
}

// batchDone records one BatchHandler call of n records.
func (m *Metrics) batchDone(group string, n int, d time.Duration, err error) {
	if m == nil || m.batch == nil {
		return
	}
	m.batch.size.WithLabelValues(group).Observe(float64(n))
	m.batch.dur.WithLabelValues(group).Observe(d.Seconds())
	if err != nil {
		m.batch.fallbacks.WithLabelValues(group).Inc()
	}
}

// processedOne counts one record done by a batch (records_processed_total).
func (pm *partMetrics) processedOne() {
	if pm != nil {
		pm.processed.Inc()
	}
}
