package checkout

import (
	"context"
	"database/sql"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ordercast/ordercast/sqldb"
)

// Group commit. Concurrent requests' claims (claim) are written together,
// and so are their published marks (markPublished): a request hands its
// work to a batcher and waits; a runner takes every job waiting, up to
// Config.MaxBatch, and writes them with one statement per step for the
// whole batch (one SELECT of every key, one multi-row INSERT, one UPDATE;
// on PostgreSQL the SELECT and the INSERT are one statement,
// readAndInsert), so that N orders cost the round trips and the WAL flush
// of one. A runner
// starts when work arrives and fewer than the batcher's parallel runners
// are busy, so a request that finds a runner free is written at once, alone
// (no lingering: a batch is what queued while the previous one was being
// written); under load the queue fills while the runners are busy and the
// batches grow.

// DefaultMaxBatch is the default Config.MaxBatch: the most claims (or
// published marks) written in one batch.
const DefaultMaxBatch = 64

// MaxMaxBatch is the largest Config.MaxBatch: a claim batch is one statement
// of up to 8 parameters a claim, under PostgreSQL's 65,535, with room to
// spare.
const MaxMaxBatch = 4096

// Runners writing batches at once: SQLite has one writer (more runners
// would only queue on its write lock, taking smaller batches); on
// PostgreSQL two per kind keep a batch being written while the next one
// fills, within the connections of checkout's pool.
const (
	sqliteRunners   = 1
	postgresRunners = 2
)

// batcher runs jobs of type J in batches of at most max, with at most
// parallel batches at once (see Group commit). run writes one batch and
// completes each of its jobs; it is called on a runner goroutine. Safe for
// concurrent use.
type batcher[J any] struct {
	max, parallel int
	run           func(jobs []J)

	mu      sync.Mutex
	queue   []J
	running int
	// gate, when set (tests only), is waited for by a runner before it
	// takes a batch, so that a test can queue several jobs first.
	gate chan struct{}
	// largest is the size of the largest batch taken (for tests).
	largest atomic.Int64
}

// submit queues j and starts a runner if one is free. It does not wait for
// j to complete: the job's own completion signal does.
func (b *batcher[J]) submit(j J) {
	b.mu.Lock()
	b.queue = append(b.queue, j)
	start := b.running < b.parallel
	if start {
		b.running++
	}
	b.mu.Unlock()
	if start {
		go b.loop()
	}
}

// queued is the number of jobs waiting for a runner.
func (b *batcher[J]) queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

func (b *batcher[J]) loop() {
	for {
		b.mu.Lock()
		gate := b.gate
		b.mu.Unlock()
		if gate != nil {
			<-gate
		}
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.running--
			b.mu.Unlock()
			return
		}
		n := min(len(b.queue), b.max)
		jobs := slices.Clone(b.queue[:n])
		b.queue = slices.Delete(b.queue, 0, n)
		b.mu.Unlock()
		if int64(n) > b.largest.Load() {
			b.largest.Store(int64(n))
		}
		b.run(jobs)
	}
}

// execer is what *sql.DB and *sql.Tx share for writing.
type execer interface {
	querier
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// maxLostAttempts bounds write's attempts after a lost connection (with
// sqldb's backoff of 5 ms doubling to 500 ms: a few seconds, a PostgreSQL
// restart's worth).
const maxLostAttempts = 20

// write runs fn, whose statements must be idempotent (each one's effect the
// same when applied twice, and fn reading what it needs rather than
// assuming an earlier attempt failed: a claim re-reads its key, a mark
// updates only pending rows), and retries it on a lost connection wherever
// it was lost, since its outcome does not matter.
//
// SQLite: fn runs in one transaction (sqldb.DB.InTx: this process's writers
// queue on its write lock, a busy database is retried). PostgreSQL: fn runs
// on the pool, each statement its own transaction (autocommit), saving the
// BEGIN and COMMIT round trips: checkout's claim needs no more isolation
// than one statement's (under READ COMMITTED a transaction would not make
// its SELECT and INSERT atomic either; the key's unique index and ON
// CONFLICT DO NOTHING decide a race), and a mark is one statement. A
// serialization failure or deadlock (40001, 40P01) is retried too.
func (s *Service) write(ctx context.Context, fn func(q execer) error) error {
	for attempt := 1; ; attempt++ {
		var err error
		if s.db.Dialect == sqldb.Postgres {
			err = fn(s.db)
		} else {
			err = s.db.InTx(ctx, func(tx *sql.Tx) error { return fn(tx) })
		}
		if err == nil && s.afterWrite != nil {
			err = s.afterWrite()
		}
		if err == nil {
			return nil
		}
		retry := sqldb.IsConnectionLost(err) || (s.db.Dialect == sqldb.Postgres && sqldb.IsRetryable(err))
		if !retry || attempt >= maxLostAttempts || ctx.Err() != nil {
			return err
		}
		d := 5 * time.Millisecond << min(attempt-1, 7)
		d = min(d, 500*time.Millisecond)
		t := time.NewTimer(d/2 + rand.N(d/2+1))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
	}
}

// runBatch writes jobs with fn (write's rules) in one batch bounded by
// timeout, and, when that fails with an error that is not one job's own,
// writes each job again alone (concurrently, within the same timeout), so
// that one job's SQL error fails only that job, as it did before batching; a
// batch of one is not written twice. fn must set its jobs' results only
// once its writes succeeded (write may run it again); fail records err as a
// job's result.
func runBatch[J any](s *Service, jobs []J, timeout time.Duration, fn func(ctx context.Context, q execer, jobs []J) error, fail func(J, error)) {
	// One deadline for the batch and its jobs' second attempts alone.
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	try := func(jobs []J) error {
		return s.write(ctx, func(q execer) error { return fn(ctx, q, jobs) })
	}
	err := try(jobs)
	if err == nil {
		return
	}
	if len(jobs) == 1 {
		fail(jobs[0], err)
		return
	}
	s.log.Warn("checkout: a batch of database writes failed; writing each request alone", "requests", len(jobs), "error", err)
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Go(func() {
			if err := try([]J{j}); err != nil {
				fail(j, err)
			}
		})
	}
	wg.Wait()
}
