package sqldb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/ordercast/ordercast/internal/ctxtime"
)

// InTx runs fn in one read-write transaction and commits it, retrying the
// whole transaction (a new BEGIN, fn again, COMMIT) when it fails with a
// retryable error (see [IsRetryable]): SQLite busy/locked, PostgreSQL
// serialization_failure (40001) or deadlock_detected (40P01); and when the
// PostgreSQL session was lost before COMMIT (see [IsConnectionLost]:
// pg_terminate_backend, a server restart), since nothing of the transaction
// was kept, or when BEGIN failed (a refused or closed connection), for up to
// 20 attempts (about 7 s of backoff: a server restart); not when it was lost
// in COMMIT (outcome unknown). For lost races it makes at most
// DB.MaxTxAttempts attempts (DefaultMaxTxAttempts when zero), sleeping a short
// jittered backoff (5 ms doubling, at most 500 ms) between them, and stops
// early when ctx is done.
//
// fn must do all its database work through tx, must not start another
// transaction on db (on SQLite that would wait for the lock this one holds),
// and must be safe to run more than once: do only database work in it, and
// leave side effects outside the database (producing to Kafka, HTTP calls)
// until InTx has returned nil. If fn returns an error or panics, the
// transaction is rolled back and nothing it did is kept; fn's error is
// returned as it is (errors.Is works on it), or retried first if it is
// retryable (wrap driver errors with %w so that they are recognised). A panic
// is re-raised after the rollback. Errors of BEGIN and COMMIT are wrapped
// with "sqldb: begin"/"sqldb: commit". When every attempt failed with a
// retryable error, the last one is returned wrapped with the attempt count.
//
// Isolation. SQLite: read-write transactions run one after the other (the
// database has a single write lock): serializable by construction. Inside
// one process InTx queues its transactions on the DB's one-slot semaphore
// before BEGIN, so they hand the lock over in FIFO order without SQLite's
// sleep-and-poll busy handler, and run on one pool connection taken at the
// first write and kept until [DB.Close] (so that its page cache stays valid
// between them; none is kept while the pool allows a single connection);
// other processes on the same file are kept out
// by the lock itself and busy_timeout (with BEGIN IMMEDIATE, "_txlock=immediate"
// in a modernc.org/sqlite DSN, a transaction takes the lock at BEGIN; see [New]).
// PostgreSQL: the server default, READ COMMITTED. That is enough for the
// inbox pattern: the inbox insert of (group, event id) is the first statement
// and its primary key serialises duplicates (a second transaction inserting
// the same key waits for the first, then inserts nothing if it committed, or
// proceeds if it rolled back), so two transactions never apply the same event.
// Effects that read-modify-write shared rows (a wallet balance) must still be
// written as atomic statements (UPDATE ... SET balance = balance - ? WHERE ...
// AND balance >= ?) or lock what they read (SELECT ... FOR UPDATE, which
// SQLite does not accept, so prefer the former); under READ COMMITTED a plain
// SELECT followed by an UPDATE can lose an update.
//
// InTx is safe for concurrent use. Calls on SQLite serialise; calls on
// PostgreSQL run in parallel up to the pool size.
func (db *DB) InTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return db.inTx(ctx, fn, false)
}

// InTxIdempotent is InTx for a transaction whose effect is the same when it
// is applied twice (an UPDATE ... WHERE status = 'pending', an INSERT ... ON
// CONFLICT DO NOTHING): it is also run again when the connection was lost in
// COMMIT, whose outcome is unknown (the first COMMIT may have been applied;
// the second attempt then finds its work done). Use it only for such
// transactions: fn must read what it needs, not assume the first attempt
// failed.
func (db *DB) InTxIdempotent(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return db.inTx(ctx, fn, true)
}

func (db *DB) inTx(ctx context.Context, fn func(tx *sql.Tx) error, idempotent bool) error {
	attempts := db.MaxTxAttempts
	if attempts <= 0 {
		attempts = DefaultMaxTxAttempts
	}
	raced, lost := 0, 0
	for attempt := 1; ; attempt++ {
		err := db.runTx(ctx, fn)
		if err == nil {
			return nil
		}
		var ce *commitError
		var be *beginError
		var pause time.Duration
		switch {
		case IsRetryable(err):
			raced++
			if raced >= attempts {
				if attempt == 1 {
					return err
				}
				return fmt.Errorf("sqldb: transaction failed %d times: %w", attempt, err)
			}
			pause = txBackoff(raced)
		case ctx.Err() == nil && ((errors.As(err, &be) && !dbClosed(err)) || (IsConnectionLost(err) && (idempotent || !errors.As(err, &ce)))):
			// The session is gone (a server restart takes a second or
			// two): try again for a while, on a new connection.
			lost++
			if lost >= maxConnLostAttempts {
				return fmt.Errorf("sqldb: transaction failed %d times: %w", attempt, err)
			}
			pause = txBackoff(lost)
		default:
			return err
		}
		if ctx.Err() != nil {
			return err
		}
		if db.OnTxRetry != nil {
			db.OnTxRetry(attempt, err)
		}
		if !ctxtime.Sleep(ctx, pause) {
			return err
		}
	}
}

// maxConnLostAttempts bounds the attempts of a transaction whose connection
// was lost before COMMIT or could not begin: with txBackoff's pauses (at most
// 500 ms) about 7 s, a PostgreSQL restart's worth.
const maxConnLostAttempts = 20

// runTx is one attempt of InTx.
func (db *DB) runTx(ctx context.Context, fn func(tx *sql.Tx) error) (err error) {
	if db.writeSem != nil {
		select {
		case db.writeSem <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		defer func() { <-db.writeSem }()
	}
	tx, err := db.beginWrite(ctx)
	if err != nil {
		return &beginError{err: err}
	}
	done := false
	defer func() {
		if !done {
			// Also runs while a panic in fn unwinds; the panic goes on.
			_ = tx.Rollback()
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	done = true // Commit ends the transaction whether or not it succeeds.
	if err := tx.Commit(); err != nil {
		return &commitError{err: err}
	}
	db.noteWrite()
	return nil
}

// beginWrite begins a read-write transaction: on PostgreSQL on any pool
// connection; on SQLite (called holding writeSem) on the kept writeConn,
// taken from the pool at the first write, so that the connection that
// writes is always the same and its page cache stays valid from one write
// transaction to the next (SQLite resets a connection's cache when the
// database changed under it; with writes spread over the pool every write
// began cold). A connection the driver reports bad is dropped and the next
// call takes another. While the pool allows a single connection, nothing is
// kept (readers would have none left).
func (db *DB) beginWrite(ctx context.Context) (*sql.Tx, error) {
	if db.writeSem == nil || db.DB.Stats().MaxOpenConnections == 1 {
		if db.writeConn != nil {
			_ = db.writeConn.Close()
			db.writeConn = nil
		}
		return db.BeginTx(ctx, nil)
	}
	if db.writeConn == nil {
		c, err := db.DB.Conn(ctx)
		if err != nil {
			return nil, err
		}
		db.writeConn = c
	}
	tx, err := db.writeConn.BeginTx(ctx, nil)
	if err != nil && (errors.Is(err, sql.ErrConnDone) || errors.Is(err, driver.ErrBadConn)) {
		_ = db.writeConn.Close()
		db.writeConn = nil
	}
	return tx, err
}

// dbClosed reports database/sql's error for a DB used after Close (not
// exported by database/sql), which no retry mends.
func dbClosed(err error) bool { return strings.Contains(err.Error(), "sql: database is closed") }

// beginError is a failed BEGIN: no transaction ran, so InTx may run it
// again (a refused or closed connection during a server restart).
type beginError struct{ err error }

func (e *beginError) Error() string { return "sqldb: begin: " + e.err.Error() }
func (e *beginError) Unwrap() error { return e.err }

// commitError is a failed COMMIT: a connection lost there leaves the
// transaction's outcome unknown, so InTx does not run it again (a lost race,
// IsRetryable, is still retried: the server rolled it back).
type commitError struct{ err error }

func (e *commitError) Error() string { return "sqldb: commit: " + e.err.Error() }
func (e *commitError) Unwrap() error { return e.err }

// txBackoff is the pause before attempt+1: 5 ms doubling per attempt, capped
// at 500 ms, with up to 50% random jitter so that colliding transactions do
// not collide again.
func txBackoff(attempt int) time.Duration {
	d := 5 * time.Millisecond << min(attempt-1, 7)
	d = min(d, 500*time.Millisecond)
	return d/2 + rand.N(d/2+1)
}
