package processor

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BatchHandler processes several records together, typically in one
// database transaction: it returns nil when every record of the batch is
// done, a *BatchError (FailRecords, StopAt; wrapped or not) when some records
// failed and the others are done, and any other error when the batch as a
// whole failed (nothing of it may be kept: roll the transaction back).
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
	if len(items) < maxN && p.ready.len() > 0 {
		p.ready.filter(func(o *lane) bool {
			if len(items) < maxN && !o.running && !o.waiting && o.part.state == partActive &&
				len(o.queue) > 0 && p.batchable(o, o.queue[0]) {
				take(o)
				return false
			}
			return true
		})
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
	partial := partialOutcome(err, len(recs))
	p.cfg.metrics.batchDone(p.cfg.group, len(recs), d, err != nil && partial == nil)
	if h := p.cfg.hooks.afterHandle; h != nil {
		for i, it := range items {
			h(it.rec, it.view, partial.errAt(i, err))
		}
	}
	switch {
	case partial != nil:
		p.cfg.logger.Warn("batch handler reported failed records; the others are done", "records", len(recs),
			"failed", len(partial.failed), "not_handled_from", partial.notFrom, "error", err)
	case err != nil:
		p.cfg.logger.Warn("batch handler failed; handling its records one at a time", "records", len(recs), "error", err)
	}
	at := 0 // the index in recs of the lane's first record
	for _, bl := range lanes {
		l, ps := bl.l, bl.ps
		l.running = false
		l.batchN = 0
		ps.running -= bl.n
		first := at
		at += bl.n
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
		case partial != nil:
			more = p.settlePartialLocked(l, first, bl.n, partial)
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
	return callBatchHandler(ctx, &p.cfg, recs, func(ctx context.Context) error { return p.cfg.batch.handler(ctx, recs) }, nil)
}

// callBatchHandler runs call, one batch handler call for recs, as both
// modes do: with HandlerTimeout for the whole batch, the tracer's Batch span
// around it, a panic turned into an error, and an error returned once the
// batch's context ended noted with that context's error. after, when set,
// runs with the span's context and the result before the span ends.
func callBatchHandler(ctx context.Context, c *cfg, recs []*kgo.Record, call func(ctx context.Context) error, after func(ctx context.Context, err error)) (err error) {
	if c.handlerTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.handlerTimeout)
		defer cancel()
	}
	var traced func(error)
	if t := c.tracer; t != nil {
		ctx, traced = t.Batch(ctx, c.group, recs)
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("batch %w", &PanicError{Value: r, Stack: debug.Stack()})
		}
		if after != nil {
			after(ctx, err)
		}
		if traced != nil {
			traced(err)
		}
	}()
	if err := call(ctx); err != nil {
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

// batchDone records one BatchHandler call of n records; fellBack reports a
// failure of the whole batch (its records are handled again one at a time).
func (m *Metrics) batchDone(group string, n int, d time.Duration, fellBack bool) {
	if m == nil || m.batch == nil {
		return
	}
	m.batch.size.WithLabelValues(group).Observe(float64(n))
	m.batch.dur.WithLabelValues(group).Observe(d.Seconds())
	if fellBack {
		m.batch.fallbacks.WithLabelValues(group).Inc()
	}
}

// processedOne counts one record done by a batch (records_processed_total).
func (pm *partMetrics) processedOne() {
	if pm != nil {
		pm.processed.Inc()
	}
}

// failedOne counts one record of a batch that the BatchHandler reported
// failed (records_failed_total).
func (pm *partMetrics) failedOne(err error) {
	if pm != nil {
		pm.m.failed.WithLabelValues(pm.group, pm.topic, ErrorClass(err)).Inc()
	}
}

// BatchError is a BatchHandler's partial outcome, as Spring Kafka's
// BatchListenerFailedException: some records of the batch failed, the
// others are done. Build one with FailRecords or StopAt and return it (or
// an error wrapping it) from the BatchHandler; any other error fails the
// whole batch (its records are then handled again one at a time).
//
// What the runtime does with each record of the batch, lane by lane (a lane
// is a key in OrderKey, a partition in OrderPartition), in slice order:
//   - a record before its lane's first failed record, and not at or after
//     StopAt's index, is done (completed: its offset may be committed);
//   - the lane's first failed record goes the way a Handler's error would:
//     retried in place after the backoff (its attempt counted), then retry
//     topics or the DLQ as configured, at once when the error is permanent
//     (IsPermanent);
//   - every later record of that lane, failed or not, is not done: it is
//     handled again after the failed one, so the lane's order holds. A
//     handler that keeps per-key order must therefore not keep the effects
//     of a failed record's later records of the same key (stopping at the
//     first failure of a key, as StopAt does for the whole batch, is the
//     simplest way);
//   - a record at or after StopAt's not-handled index is not done and
//     handled again later, without an attempt counted.
//
// A BatchError naming an index outside the batch, or one that reports
// nothing (FailRecords with an empty map), is treated as a failure of the
// whole batch. It is immutable once built; safe for concurrent use.
type BatchError struct {
	failed  map[int]error // index in the batch -> its record's error
	notFrom int           // records from this index on were not handled; -1: none
}

// FailRecords reports that the records of the batch at failed's indexes (0
// for the slice's first record) failed with their errors, and that every
// other record is done (but see BatchError for the records after a failed
// one of the same key or partition). A nil error in failed counts as
// Permanentf("record failed in its batch").
func FailRecords(failed map[int]error) *BatchError {
	m := make(map[int]error, len(failed))
	for i, err := range failed {
		if err == nil {
			err = Permanentf("record failed in its batch")
		}
		m[i] = err
	}
	return &BatchError{failed: m, notFrom: -1}
}

// StopAt reports that recs[:i] are done, recs[i] failed with err, and
// recs[i+1:] were not handled: the shape of a handler that applies records
// in slice order and stops at the first failure. With a nil err, recs[i]
// is not handled either (recs[i:] are handled again later, for example
// because the handler ran out of its time budget); StopAt(0, nil) reports
// nothing done and is treated as a failure of the whole batch.
func StopAt(i int, err error) *BatchError {
	if err == nil {
		return &BatchError{notFrom: i}
	}
	return &BatchError{failed: map[int]error{i: err}, notFrom: i + 1}
}

// Error lists the failed records' indexes and errors.
func (e *BatchError) Error() string {
	idx := make([]int, 0, len(e.failed))
	for i := range e.failed {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	var b strings.Builder
	fmt.Fprintf(&b, "batch: %d record(s) failed", len(idx))
	for _, i := range idx {
		fmt.Fprintf(&b, "; [%d]: %v", i, e.failed[i])
	}
	if e.notFrom >= 0 {
		fmt.Fprintf(&b, "; records from [%d] on not handled", e.notFrom)
	}
	return b.String()
}

// Unwrap returns the failed records' errors (for errors.Is and errors.As).
func (e *BatchError) Unwrap() []error {
	out := make([]error, 0, len(e.failed))
	for _, err := range e.failed {
		out = append(out, err)
	}
	return out
}

// Failed returns the error of the record at index i of the batch, or nil
// when it did not fail.
func (e *BatchError) Failed(i int) error { return e.failed[i] }

// partialOutcome returns err's *BatchError when it is a valid partial
// outcome of a batch of n records, and nil otherwise (no error, another
// error, or a BatchError that is out of range or reports nothing: the whole
// batch failed).
func partialOutcome(err error, n int) *BatchError {
	var be *BatchError
	if err == nil || !errors.As(err, &be) || be == nil {
		return nil
	}
	if be.notFrom > n || be.notFrom == 0 || (be.notFrom < 0 && len(be.failed) == 0) {
		return nil
	}
	for i := range be.failed {
		if i < 0 || i >= n {
			return nil
		}
	}
	return be
}

// errAt is what record i of the batch ended with, for the test hooks: its
// failure, errNotHandled, or nil (done). With e nil it is the batch's err.
func (e *BatchError) errAt(i int, err error) error {
	if e == nil {
		return err
	}
	if f := e.failed[i]; f != nil {
		return f
	}
	if e.notFrom >= 0 && i >= e.notFrom {
		return errNotHandled
	}
	return nil
}

// errNotHandled marks, for the test hooks, a record of a batch that its
// handler reported not handled.
var errNotHandled = errors.New("not handled in its batch")

// settlePartialLocked applies a partial outcome to lane l's n records of
// the batch, the first of which is at index first of the batch: the
// lane's records before its first failed one (and before the not-handled
// index) complete, the first failed one is settled as a Handler's failure,
// and the rest stay queued. It reports whether the calling worker should
// go on with l. p.mu held.
func (p *Processor) settlePartialLocked(l *lane, first, n int, e *BatchError) (more bool) {
	ps := l.part
	for j := range n {
		i := first + j
		if e.notFrom >= 0 && i >= e.notFrom {
			return ps.state == partActive && len(l.queue) > 0
		}
		it := l.queue[0]
		if ferr := e.failed[i]; ferr != nil {
			ps.m.failedOne(ferr)
			return p.settle(l, it, ferr)
		}
		ps.m.processedOne()
		more = p.settle(l, it, nil) // as the success path: every done record completes, draining too
	}
	return more
}
