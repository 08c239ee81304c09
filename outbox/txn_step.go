package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/txncheck"
	"github.com/ordercast/ordercast/sqldb"
)

// sessionConns are the connections an exactly-once relay session holds on
// PostgreSQL for its steps, taken from the pool once per session: one to
// read the unsent rows, one to mark them sent (the marking overlaps the next
// step's read). The relay is the one serial stage between the payments and
// fulfillment; on the pool its statements queued behind every consumer
// batch and checkout transaction waiting for a connection (the load runs:
// most of a step's time was its SELECT's wait for a connection). On SQLite
// both are nil: its writes must go through the pool's writer queue (InTx).
type sessionConns struct {
	load, mark *sql.Conn
}

// sessionConns takes the session's connections (none on SQLite).
func (r *Relay) sessionConns(ctx context.Context) (sessionConns, error) {
	var sc sessionConns
	if r.db.Dialect != sqldb.Postgres {
		return sc, nil
	}
	var err error
	if sc.load, err = r.db.Conn(ctx); err != nil {
		return sc, fmt.Errorf("outbox: relay connection: %w", err)
	}
	if sc.mark, err = r.db.Conn(ctx); err != nil {
		sc.close()
		return sessionConns{}, fmt.Errorf("outbox: relay connection: %w", err)
	}
	return sc, nil
}

// close returns the connections to the pool.
func (sc sessionConns) close() {
	for _, c := range []*sql.Conn{sc.load, sc.mark} {
		if c != nil {
			_ = c.Close()
		}
	}
}

// marking is the UPDATE that marks a committed transaction's rows sent,
// running on its own goroutine while the next step reads, produces and
// commits the rows after them. done is closed when it has ended; err is its
// error (read after done).
type marking struct {
	ids  []int64
	sums []rowSum
	done chan struct{}
	err  error
}

// startMarking marks ids sent on a goroutine of its own; the UPDATE runs
// even if ctx ends (bounded to 10 s): the rows are in Kafka.
func (r *Relay) startMarking(ctx context.Context, conn *sql.Conn, ids []int64, sums []rowSum) *marking {
	m := &marking{ids: ids, sums: sums, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		start := time.Now()
		defer func() { r.stats.markNs.Add(int64(time.Since(start))) }()
		if r.beforeMark != nil {
			if m.err = r.beforeMark(ids); m.err != nil {
				return
			}
		}
		mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if m.err = r.markSent(mctx, conn, ids); m.err == nil {
			r.stats.published.Add(int64(len(ids)))
			add(r.mc.published, int64(len(ids)))
		}
	}()
	return m
}

// txnStep relays up to limit rows in one transaction and returns how many
// (all committed unless err is set). A commit is trusted only once its
// marker reads back read_committed (confirm): franz-go's EndTransaction can
// abort a write-only transaction and return nil.
//
// The marking of the rows runs on (*prev), overlapping the next step: that
// step reads the unsent rows without prev's, names prev's rows in its own
// marker as well (marker.Prev), so that whichever of the two markers is the
// last committed one names every row committed and perhaps not marked, and
// waits for prev's marking to end after its own commit was confirmed (an
// error of it ends the session, and the next session marks both from the
// marker). A step therefore never starts while more than one transaction's
// rows are unmarked, and the order of the rows in Kafka is that of the
// steps, as before.
func (r *Relay) txnStep(ctx context.Context, cl *kgo.Client, sc sessionConns, tail **txncheck.Tail, prev **marking, limit int) (int, error) {
	var carry *marking // prev, if its marking is still in flight
	if p := *prev; p != nil {
		select {
		case <-p.done:
			*prev = nil
			if p.err != nil {
				return 0, p.err // the next session marks them from the marker
			}
		default:
			carry = p
		}
	}
	var except []int64
	if carry != nil {
		except = carry.ids
	}
	start := time.Now()
	var q querier = r.db
	if sc.load != nil {
		q = sc.load
	}
	rows, err := r.load(ctx, q, limit, except)
	r.stats.loadNs.Add(int64(time.Since(start)))
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	ids := make([]int64, len(rows))
	recs := make([]*kgo.Record, 0, len(rows)+1)
	sums := make([]rowSum, len(rows))
	for i, rw := range rows {
		ids[i] = rw.id
		recs = append(recs, rw.rec)
		sums[i] = rowSum{id: rw.id, topic: rw.rec.Topic, key: rw.rec.Key, value: rw.rec.Value}
	}
	mk := marker{V: markerVersion, IDs: toRanges(ids), Sum: checksum(sums), At: time.Now().UnixMilli()}
	if carry != nil {
		mk.V, mk.Prev, mk.PrevSum = markerVersionPrev, toRanges(carry.ids), checksum(carry.sums)
	}
	mv, err := json.Marshal(mk)
	if err != nil {
		return 0, &fatalError{err}
	}
	mrec := &kgo.Record{Topic: r.txn.markerTopic, Key: []byte(r.txn.name), Value: mv}
	recs = append(recs, mrec)

	if err := cl.BeginTransaction(); err != nil {
		return 0, fmt.Errorf("outbox: begin transaction: %w", err)
	}
	start = time.Now()
	res := cl.ProduceSync(ctx, recs...)
	r.stats.produceNs.Add(int64(time.Since(start)))
	if res.FirstErr() != nil {
		err := res.FirstErr()
		if ae := r.produceAuthzError(err, res); ae != nil {
			err = ae
		}
		r.stats.aborted.Add(1)
		add(r.mc.aborted, 1)
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_ = cl.AbortBufferedRecords(actx)
		_ = cl.EndTransaction(actx, kgo.TryAbort)
		cancel()
		return 0, fmt.Errorf("outbox: produce %d rows from id %d (transaction aborted): %w", len(rows), ids[0], err)
	}
	if r.afterProduce != nil {
		if err := r.afterProduce(ids); err != nil {
			return 0, &fatalError{err}
		}
	}
	// Not cancelled by ctx: a cancelled EndTxn leaves the outcome unknown.
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	start = time.Now()
	err = cl.EndTransaction(ectx, kgo.TryCommit)
	r.stats.commitNs.Add(int64(time.Since(start)))
	cancel()
	if err != nil {
		r.stats.aborted.Add(1)
		add(r.mc.aborted, 1)
		return 0, fmt.Errorf("outbox: commit transaction of %d rows from id %d (outcome unknown until the next session reads the marker): %w", len(rows), ids[0], err)
	}
	start = time.Now()
	err = r.confirm(ctx, tail, mrec)
	r.stats.confirmNs.Add(int64(time.Since(start)))
	if err != nil {
		r.stats.aborted.Add(1)
		add(r.mc.aborted, 1)
		return 0, fmt.Errorf("outbox: commit transaction of %d rows from id %d: %w", len(rows), ids[0], err)
	}
	r.stats.transactions.Add(1)
	add(r.mc.transactions, 1)
	if r.afterCommit != nil {
		if err := r.afterCommit(ids); err != nil {
			return 0, &fatalError{err}
		}
	}
	if carry != nil {
		<-carry.done // bounded: markSent's own timeout
		*prev = nil
		if carry.err != nil {
			return 0, carry.err // this step's marker names its rows too: the next session marks both
		}
	}
	*prev = r.startMarking(ctx, sc.mark, ids, sums)
	return len(rows), nil
}

// confirmTimeout bounds the wait for a committed marker to become visible
// to read_committed readers (Kafka writes the markers just after answering
// EndTxn; the coordinator retries them while a partition leader is away).
const confirmTimeout = 30 * time.Second

// confirm reads the transaction's progress marker (the last record it
// produced, m) back as a read_committed reader, through *tail (started at
// m's offset when nil). nil: the transaction committed. An error wrapping
// txncheck.ErrAborted: it was aborted although EndTransaction returned nil
// (franz-go v1.22.3, see internal/txncheck); the rows are not marked, and
// the next session, whose marker read does not see the aborted marker,
// publishes them again. Any other error leaves the outcome to that marker
// read too.
func (r *Relay) confirm(ctx context.Context, tail **txncheck.Tail, m *kgo.Record) error {
	if *tail == nil {
		t, err := txncheck.NewTail(r.txn.clientOptsFor(ClientConfirm), m.Topic, m.Partition, m.Offset)
		if err != nil {
			return err
		}
		*tail = t
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), confirmTimeout)
	defer cancel()
	ok, err := (*tail).Committed(cctx, m.Offset)
	switch {
	case err != nil:
		return fmt.Errorf("read back progress marker %s/%d@%d (outcome decided by the next session's marker read): %w", m.Topic, m.Partition, m.Offset, err)
	case !ok:
		r.logger.Warn("outbox relay: a transaction reported committed was aborted; its rows are published again",
			"relay", r.txn.name, "marker_topic", m.Topic, "marker_offset", m.Offset)
		return fmt.Errorf("progress marker %s/%d@%d: %w", m.Topic, m.Partition, m.Offset, txncheck.ErrAborted)
	}
	return nil
}
