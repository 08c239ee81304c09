package processor

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The exactly-once mode's records in memory: each polled record enters its
// partition's offset tracker and its lane (the partition in OrderPartition,
// its key within the partition in OrderKey); Concurrency workers take
// ready lanes in turn and run the first record of each, so a lane's records
// run one at a time in offset order; a failed attempt puts its lane aside
// until its backoff ends (holding no worker); completed
// results wait for the next transaction (txn_session.go), which produces
// them and commits each partition's commit point with its completed-offsets
// map (offsetmap.go).

// commitPoint is a partition's committed offset and metadata (the
// completed-offsets map and the group's start time, offsetmap.go).
type commitPoint struct {
	offset int64
	meta   string
}

// txnWork is a session's records in memory. Its fields are guarded by mu;
// gen counts the drops (drop): a lane goroutine of an older generation
// discards what it completes.
type txnWork struct {
	t    *TxnProcessor
	base context.Context // Run's context: a shutdown cancels the handlers

	mu     sync.Mutex
	gen    uint64
	ctx    context.Context // the generation's: cancelled by drop
	cancel context.CancelFunc
	parts  map[tp]*txnPart
	recs   int   // records held: running, waiting or completed, not yet committed (MaxInFlight)
	cutN   int   // of recs, those cut into a transaction that has not committed yet
	bytes  int64 // their key+value bytes
	done   int   // completed records not yet in a transaction
	// pendingN counts the partitions' pending records (polled, not
	// admitted yet).
	pendingN int
	// sent is, per partition this member holds, what it last committed (a
	// confirmed transaction) or, after reading the broker's offsets, what
	// the group holds: the reference for the read-back of late commits.
	sent map[tp]commitPoint
	// origin is where a partition without a committed offset started in
	// this session (the first offset polled): where it resumes after a
	// drop until one of its offsets is committed.
	origin   map[tp]int64
	topicIDs map[string][16]byte // from the fetches, for the TxnOffsetCommit (KIP-1319)

	// ready are the lanes whose first record is to run next, in turn;
	// Concurrency workers take them (cond signals one). A lane is in
	// ready, with a worker, or waiting out a backoff: never two of them.
	ready   fifo[*txnLane]
	cond    *sync.Cond
	stopped bool
	workers sync.WaitGroup
	wake    chan struct{} // a record completed (capacity 1)

	// clock gives attempts their start (HandlerTimeout) without a system
	// clock read per record, as in New (clock.go); it sleeps while idle
	// (no record held) and stops when clockDone is closed (stop).
	clock     *coarseClock
	idle      atomic.Bool
	clockDone chan struct{}
}

// txnPart is a held partition's records.
type txnPart struct {
	tp      tp
	gen     uint64
	tracker *offsetTracker
	m       *partMetrics // nil without Metrics
	// The partition's lanes: in OrderPartition lane alone (kept while the
	// partition is held, so its queue's array is reused); in OrderKey
	// lanes by key, and null for the records without a key.
	lane  *txnLane
	lanes map[string]*txnLane
	null  *txnLane
	// pending are polled records not admitted yet: admitting them could
	// take the completed-offsets map past its budget (backpressure, as
	// New's admission does).
	pending []*kgo.Record
	// completed are the records completed since the last transaction, in
	// completion order (each lane's in offset order).
	completed []*txnRec
}

type txnLane struct {
	part *txnPart
	gen  uint64
	key  *string // OrderKey: the lane's key (nil for the null key's lane); nil in OrderPartition
	// queue are the lane's records waiting or running (the first), in
	// offset order.
	queue   fifo[*txnRec]
	running bool
}

// laneFor returns the lane of r in ps, created if it has none (w.t's
// ordering). w.mu held.
func (ps *txnPart) laneFor(r *kgo.Record, ordering Ordering) *txnLane {
	switch {
	case ordering != OrderKey:
		if ps.lane == nil {
			ps.lane = &txnLane{part: ps, gen: ps.gen}
		}
		return ps.lane
	case r.Key == nil:
		if ps.null == nil {
			ps.null = &txnLane{part: ps, gen: ps.gen}
		}
		return ps.null
	}
	if l := ps.lanes[string(r.Key)]; l != nil { // no allocation for the lookup
		return l
	}
	k := string(r.Key)
	l := &txnLane{part: ps, gen: ps.gen, key: &k}
	ps.lanes[k] = l
	return l
}

// idleLane lets go of l, which has no record left: a key's lane leaves its
// partition (keys come and go), the partition's lane stays for its next
// records. w.mu held.
func (ps *txnPart) idleLane(l *txnLane) {
	l.running = false
	switch {
	case l == ps.lane:
	case l == ps.null:
		ps.null = nil
	case l.key != nil:
		delete(ps.lanes, *l.key)
	}
}

// txnRec is a record held by the session and, once completed, its result.
//
// The records of one partition's fetch are allocated together (admit), so
// one allocation serves a fetch's records rather than one per record, and
// the first attempt's context is part of the record (a retry gets a new
// one: the handler may still hold the first).
type txnRec struct {
	// rec is the record; nil once it completed without outputs (nothing
	// of it is needed until its transaction commits its offset), and
	// after that commit.
	rec   *kgo.Record
	entry offsetEntry
	size  int64
	outs  []*kgo.Record // the handler's outputs, or the DLQ record
	dead  error         // the reason it was dead-lettered, if it was
	it    *item         // its failed attempts (the DLQ record's headers)
	actx  attemptCtx    // the first attempt's context (HandlerTimeout)
	solo  bool          // its batch failed: it runs alone (txn_batch.go)
}

// keep reports whether the transaction that commits r's offset needs more of
// r than its offset: outputs or a DLQ record to produce, or a record to
// forget a refusal of (forgetRefusals).
func (r *txnRec) keep() bool { return r.rec != nil || r.outs != nil || r.dead != nil }

func newTxnWork(t *TxnProcessor, base context.Context) *txnWork {
	w := &txnWork{t: t, base: base, parts: map[tp]*txnPart{}, sent: map[tp]commitPoint{},
		origin: map[tp]int64{}, topicIDs: map[string][16]byte{}, wake: make(chan struct{}, 1),
		clock: newCoarseClock(), clockDone: make(chan struct{})}
	w.cond = sync.NewCond(&w.mu)
	w.idle.Store(true)
	go w.clock.run(w.clockDone, w.idle.Load)
	w.ctx, w.cancel = context.WithCancel(base)
	for range t.cfg.concurrency {
		w.workers.Add(1)
		go w.worker()
	}
	return w
}

// poke wakes the session loop.
func (w *txnWork) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// room is how many more records may be polled (MaxInFlight): 0 when full.
func (w *txnWork) room() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fullLocked() {
		return 0
	}
	return w.t.cfg.maxRecords - w.recs - w.pendingN
}

// fullLocked reports whether the member polls no more: MaxInFlight's
// records or bytes are held, or an eighth of its records wait for
// admission, which the completed-offsets map's budget holds back until a
// commit moves the commit point (polling more would only hold more records
// and the fetches they pin in memory). w.mu held.
func (w *txnWork) fullLocked() bool {
	maxRecs := w.t.cfg.maxRecords
	return w.recs+w.pendingN >= maxRecs || w.bytes >= w.t.cfg.maxBytes || w.pendingN >= max(1, maxRecs/8)
}

// cutDue reports whether the completed results cut a transaction before
// its time: half of MaxInFlight; when the member is full (fullLocked:
// records running, backing off or waiting for admission hold the rest), an
// eighth of it; and half of the records admitted and not cut yet when
// records wait for admission. Those wait for the completed-offsets map's
// budget (OrderKey: records completed above a commit point held by an
// earlier one), which only a commit that moves the commit point frees:
// without the last rule they would wait for the CommitInterval, though
// fewer than an eighth of MaxInFlight may be admitted at all.
func (w *txnWork) cutDue() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cutDueLocked()
}

func (w *txnWork) cutDueLocked() bool {
	maxRecs := w.t.cfg.maxRecords
	if w.done >= max(1, maxRecs/2) {
		return true
	}
	if w.done == 0 {
		return false
	}
	half := 2*w.done >= w.recs-w.cutN
	if w.pendingN > 0 && half {
		return true // records wait for the map's budget: only a commit admits them
	}
	return w.fullLocked() && (w.done >= max(1, maxRecs/8) || half)
}

// held reports the records held (Health.InFlight).
func (w *txnWork) held() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.recs
}

// drop discards every record and result held (a transaction aborted, a
// rebalance, a settle): the lanes of the old generation stop, and what
// their handlers still return is discarded. The partitions get their state
// again from the broker's offsets (initParts).
func (w *txnWork) drop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gen++
	w.cancel()
	w.ctx, w.cancel = context.WithCancel(w.base)
	w.parts = map[tp]*txnPart{}
	w.ready.reset()
	w.recs, w.cutN, w.bytes, w.done, w.pendingN = 0, 0, 0, 0, 0
	w.idle.Store(true)
}

// stop cancels the handlers and waits up to d for the workers.
func (w *txnWork) stop(d time.Duration) {
	w.mu.Lock()
	w.gen++
	w.stopped = true
	w.cancel()
	w.cond.Broadcast()
	if w.clockDone != nil {
		close(w.clockDone)
		w.clockDone = nil
	}
	w.mu.Unlock()
	done := make(chan struct{})
	go func() { w.workers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
}

// needInit returns the partitions of fetches, held by the member, that have
// no state yet.
func (w *txnWork) needInit(fetches kgo.Fetches) []tp {
	var out []tp
	w.mu.Lock()
	defer w.mu.Unlock()
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		k := tp{fp.Topic, fp.Partition}
		if len(fp.Records) > 0 && w.parts[k] == nil && !slices.Contains(out, k) && w.t.holds(k) {
			out = append(out, k)
		}
	})
	return out
}

// initParts gives the partitions ks their state from held, the broker's
// committed offsets and metadata (read with RequireStable): the commit
// point, and the offsets completed above it (the map) that are skipped.
// A partition absent from held has no committed offset yet.
func (w *txnWork) initParts(ks []tp, held map[tp]commitPoint) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, k := range ks {
		if old := w.parts[k]; old != nil {
			w.pendingN -= len(old.pending)
		}
		ps := &txnPart{tp: k, gen: w.gen, tracker: newOffsetTracker(), lanes: map[string]*txnLane{},
			m: w.t.cfg.metrics.partition(w.t.cfg.group, k.topic)}
		if cp, ok := held[k]; ok {
			ps.tracker.mark = cp.offset
			w.sent[k] = cp
			if cp.meta != "" {
				ranges, err := decodeOffsetMap(cp.meta, cp.offset)
				switch {
				case err == nil:
					ps.tracker.earlier = ranges
				case !errors.Is(err, errNotOffsetMap):
					w.t.cfg.logger.Warn("ignoring the completed-offsets map of a commit", "topic", k.topic, "partition", k.partition, "offset", cp.offset, "error", err)
				}
			}
		} else {
			delete(w.sent, k)
		}
		w.parts[k] = ps
	}
}

// admit takes a poll's records into their partitions' lanes. Records of a
// partition the member does not hold, or that has no state, are dropped.
func (w *txnWork) admit(fetches kgo.Fetches) {
	w.clock.poke(time.Now(), fetches.NumRecords())
	w.mu.Lock()
	defer w.mu.Unlock()
	fetches.EachTopic(func(ft kgo.FetchTopic) {
		if ft.TopicID != ([16]byte{}) {
			w.topicIDs[ft.Topic] = ft.TopicID
		}
	})
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		if len(fp.Records) == 0 {
			return
		}
		k := tp{fp.Topic, fp.Partition}
		ps := w.parts[k]
		if ps == nil || !w.t.holds(k) {
			w.t.cfg.metrics.dropped(w.t.cfg.group, fp.Topic, len(fp.Records))
			return
		}
		if _, ok := w.sent[k]; !ok {
			if _, ok := w.origin[k]; !ok {
				w.origin[k] = fp.Records[0].Offset
			}
		}
		ps.pending = append(ps.pending, fp.Records...)
		w.pendingN += len(fp.Records)
		w.admitPendingLocked(ps)
		if w.recs > 0 {
			w.idle.Store(false)
		}
	})
}

// admitPending admits what every partition's map budget allows again (after
// a transaction moved commit points).
func (w *txnWork) admitPending() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ps := range w.parts {
		w.admitPendingLocked(ps)
	}
}

// admitPendingLocked admits ps's pending records, in offset order, until one
// could take its completed-offsets map past the budget. w.mu held.
func (w *txnWork) admitPendingLocked(ps *txnPart) {
	n := 0
	var slab []txnRec
	for _, r := range ps.pending {
		if w.mapFullLocked(ps, r) {
			break
		}
		if len(slab) == 0 {
			slab = make([]txnRec, min(len(ps.pending)-n, txnSlabMax))
		}
		w.admitLocked(ps, r, &slab[0])
		slab = slab[1:]
		n++
	}
	if n > 0 {
		w.pendingN -= n
		clear(ps.pending[:n])
		ps.pending = ps.pending[n:]
		if len(ps.pending) == 0 {
			ps.pending = nil
		}
	}
}

// mapFullLocked is windowBlocksLocked (admit.go) for a transactional
// partition: OrderPartition completes in offset order and never builds a
// map of its own; the first record above the commit point is always
// admitted.
func (w *txnWork) mapFullLocked(ps *txnPart, r *kgo.Record) bool {
	c := &w.t.cfg
	if c.metaMaxBytes == 0 || c.ordering == OrderPartition || ps.tracker.pending() == 0 {
		return false
	}
	return binary.MaxVarintLen64+ps.tracker.mapBound+ps.tracker.mapCost(r.Offset) > mapRawBudget(c.mapMaxBytes())
}

// txnSlabMax bounds the records allocated together (admitPendingLocked): a
// slab stays in memory while any of its records is held.
const txnSlabMax = 256

// admitLocked puts r into its lane, as rec (zero), and queues the lane for
// a worker, or completes it at once: a transaction marker, or a record an
// earlier owner committed above its commit point (the map). w.mu held.
func (w *txnWork) admitLocked(ps *txnPart, r *kgo.Record, rec *txnRec) {
	c := &w.t.cfg
	// The record is set once it is to be handled: an entry done at once
	// stays in the tracker until the commit point passes it, and must not
	// keep the record's fetch alive meanwhile.
	rec.size = int64(len(r.Key) + len(r.Value))
	rec.entry.offset = r.Offset
	if !ps.tracker.add(&rec.entry) {
		c.metrics.dropped(c.group, r.Topic, 1) // below the commit point, or a re-delivery
		return
	}
	m := ps.m
	if r.Attrs.IsControl() {
		ps.tracker.complete(&rec.entry) // nothing to transform; its offset is committed
		return
	}
	if ps.tracker.doneEarlier(r.Offset) {
		// Committed, with its output, by a transaction whose commit
		// point was below it (its map): not handled again.
		ps.tracker.complete(&rec.entry)
		m.skippedEarlier()
		return
	}
	rec.rec = r
	m.consumed(rec.size)
	w.recs++
	w.bytes += rec.size
	l := ps.laneFor(r, c.ordering)
	l.queue.push(rec)
	if !l.running {
		l.running = true
		w.readyLocked(l)
	}
}

// readyLocked queues l for a worker. w.mu held.
func (w *txnWork) readyLocked(l *txnLane) {
	w.ready.push(l)
	w.cond.Signal()
}

// worker runs ready lanes' first records, one attempt at a time, until
// stop.
func (w *txnWork) worker() {
	defer w.workers.Done()
	w.mu.Lock()
	defer w.mu.Unlock()
	var l *txnLane // kept while it has records and no other lane waits
	for {
		if l == nil {
			for w.ready.len() == 0 && !w.stopped {
				w.cond.Wait()
			}
			if w.stopped {
				return
			}
			l = w.ready.pop()
		}
		if l.gen != w.gen || w.stopped {
			l = nil
			continue // dropped
		}
		rec, ctx := l.queue.first(), w.ctx
		if w.batchableLocked(rec) && w.runBatchLocked(l) {
			l = nil
			continue
		}
		w.mu.Unlock()
		outs, err := w.t.attempt(ctx, rec, l.part.m, w.clock.Now())
		w.mu.Lock()
		if l.gen != w.gen || ctx.Err() != nil {
			l = nil
			continue // dropped, or shutting down: the result is discarded
		}
		if err != nil {
			var wait time.Duration
			if outs, wait = w.t.failed(rec, err); outs == nil {
				w.asideLocked(l, wait)
				l = nil
				continue
			}
			rec.dead = err
		}
		w.completeLocked(l, outs)
		switch {
		case l.queue.len() == 0:
			l.part.idleLane(l)
			l = nil
		case w.ready.len() > 0:
			// Take turns with the lanes waiting; no other worker needs
			// waking (this one takes the next lane itself).
			w.ready.push(l)
			l = nil
		}
		if w.cutDueLocked() {
			// Only then: the session loop waits for a cut (or polls), and
			// a completion frees no room before its transaction commits.
			w.poke()
			w.t.cancelPoll()
		}
	}
}

// txnCut is what one transaction takes from the work: the completed
// records whose outputs it produces, and the commit point and map of every
// partition whose commit changes.
type txnCut struct {
	// recs are the records of the cut that have outputs or a DLQ record to
	// produce, or a refusal to forget (txnRec.keep), by partition in offset
	// order; n counts all the cut's records, bytes their key+value bytes.
	recs    []*txnRec
	n       int
	commits map[tp]commitPoint
	bytes   int64
}

// cut takes the records completed since the last transaction, passes them
// in their partitions' trackers and returns them (by partition, in offset
// order) with the commits that follow. The trackers are not rolled back if
// the transaction does not commit: the work is dropped then.
func (w *txnWork) cut() *txnCut {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := &w.t.cfg
	x := &txnCut{commits: map[tp]commitPoint{}}
	start := w.t.groupStart.get()
	for k, ps := range w.parts {
		from := len(x.recs)
		for _, r := range ps.completed {
			ps.tracker.complete(&r.entry)
			x.bytes += r.size
			if r.keep() {
				x.recs = append(x.recs, r)
			}
		}
		x.n += len(ps.completed)
		// The array is reused for the next transaction's completions.
		clear(ps.completed)
		ps.completed = ps.completed[:0]
		if kept := x.recs[from:]; !slices.IsSortedFunc(kept, byOffset) {
			slices.SortFunc(kept, byOffset) // OrderKey: lanes complete in turn
		}
		base := ps.tracker.base()
		if base < 0 {
			continue
		}
		var meta string
		if c.metaMaxBytes > 0 {
			meta = ps.tracker.encodeOffsetMap(base, c.mapMaxBytes())
		}
		cp := commitPoint{base, withGroupStart(meta, start)}
		if sent, ok := w.sent[k]; !ok || sent != cp {
			x.commits[k] = cp
		}
	}
	w.done = 0
	w.cutN += x.n
	return x
}

func byOffset(a, b *txnRec) int { return cmp.Compare(a.entry.offset, b.entry.offset) }

// committed records that x's transaction committed: its records leave the
// member, its commits are what the member last committed.
func (w *txnWork) committed(x *txnCut) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, cp := range x.commits {
		w.sent[k] = cp
		delete(w.origin, k)
	}
	w.recs -= x.n
	w.cutN -= x.n
	w.bytes -= x.bytes
	if w.recs == 0 {
		w.idle.Store(true)
	}
	for _, r := range x.recs {
		r.outs, r.rec, r.it = nil, nil, nil
	}
}

// sentCommits returns a copy of what the member last committed (sent).
func (w *txnWork) sentCommits() map[tp]commitPoint {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[tp]commitPoint, len(w.sent))
	for k, cp := range w.sent {
		out[k] = cp
	}
	return out
}

// forget drops what the member knows of partitions it no longer holds.
func (w *txnWork) forget(gone map[string][]int32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for topic, ps := range gone {
		for _, p := range ps {
			delete(w.sent, tp{topic, p})
			delete(w.origin, tp{topic, p})
		}
	}
}

// completeLocked completes the first record of l with outs (its outputs,
// or its DLQ record when rec.dead is set): it waits for the next
// transaction. w.mu held.
func (w *txnWork) completeLocked(l *txnLane, outs []*kgo.Record) {
	rec := l.queue.pop()
	rec.outs = outs
	if len(outs) == 0 && rec.dead == nil && w.t.refusedN.Load() == 0 {
		// Nothing to produce, no refusal to forget at its commit: the
		// record (and the fetch buffer it pins) is not needed any more,
		// though its offset waits for the transaction.
		rec.rec, rec.it = nil, nil
	}
	l.part.completed = append(l.part.completed, rec)
	w.done++
}

// asideLocked sets l aside until wait has passed (a failed attempt's
// backoff): it holds no worker meanwhile, then it is ready again unless
// its generation was dropped. w.mu held.
func (w *txnWork) asideLocked(l *txnLane, wait time.Duration) {
	time.AfterFunc(wait, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if l.gen == w.gen && !w.stopped {
			w.readyLocked(l)
		}
	})
}

// attempt runs the handler once for rec (HandlerTimeout from now, tracing,
// metrics: m, its partition's).
func (t *TxnProcessor) attempt(ctx context.Context, rec *txnRec, m *partMetrics, now time.Time) ([]*kgo.Record, error) {
	r := rec.rec
	hctx := ctx
	if t.cfg.handlerTimeout > 0 {
		// The plain mode's attempt context (attempt.go): no timer unless
		// the handler asks for Done. The first attempt's is the record's.
		actx := &rec.actx
		if rec.it != nil {
			actx = new(attemptCtx)
		}
		actx.init(ctx, now, t.cfg.handlerTimeout)
		defer actx.release()
		hctx = actx
	}
	var start time.Time
	if m != nil {
		start = time.Now()
	}
	var traced func(error)
	if tr := t.cfg.tracer; tr != nil {
		attempt := 1
		if rec.it != nil && rec.it.fail != nil {
			attempt = rec.it.fail.attempts + 1
		}
		hctx, traced = tr.Attempt(hctx, t.cfg.group, r, attempt)
	}
	var outs []*kgo.Record
	var err error
	if cause := t.unproducible(r); cause != nil {
		err = cause // its outputs aborted a transaction: dead-lettered, not produced again
	} else if outs, err = safeTransform(hctx, t.handler, r); err == nil {
		err = t.checkOutputs(outs)
	}
	if traced != nil {
		if err == nil {
			t.cfg.tracer.Outputs(hctx, outs)
		}
		traced(err)
	}
	if m != nil {
		m.handled(time.Since(start), err)
	}
	return outs, err
}

// failed records rec's failed attempt. After MaxAttempts, or on a
// permanent error, it returns the DLQ record to produce instead of the
// output (the handler's error is the reason); otherwise no record and the
// backoff before the next attempt (Backoff).
func (t *TxnProcessor) failed(rec *txnRec, err error) ([]*kgo.Record, time.Duration) {
	r := rec.rec
	if rec.it == nil {
		rec.it = &item{rec: r, view: r}
	}
	now := time.Now()
	f := rec.it.failState()
	f.attempts++
	f.lastErr = err
	if f.first.IsZero() {
		f.first = now
	}
	f.last = now
	if IsPermanent(err) || f.attempts >= t.cfg.maxAttempts {
		t.cfg.logger.Warn("record dead-lettered inside the transaction", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "error", err)
		t.cfg.metrics.forwarded(t.cfg.group, t.cfg.dlqTopic, true)
		return []*kgo.Record{{Topic: t.cfg.dlqTopic, Key: r.Key, Value: r.Value, Headers: forwardHeaders(&t.cfg, nil, rec.it)}}, 0
	}
	t.cfg.metrics.retried(t.cfg.group, r.Topic)
	return nil, backoff(f.attempts, t.cfg.backoffMin, t.cfg.backoffMax)
}

// holds reports whether the session holds k (its rebalance callbacks).
func (t *TxnProcessor) holds(k tp) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.owned[k.topic][k.partition]
}

// generation returns the count of drops so far: a change tells that the
// work was dropped in between.
func (w *txnWork) generation() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gen
}
