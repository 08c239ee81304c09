package sqldb

import (
	"context"
	"fmt"
	"time"
)

// CheckpointInBackground starts a goroutine that runs
// `PRAGMA wal_checkpoint(PASSIVE)` on a pool connection every interval
// (positive; a duration such as 100 ms) while this DB has committed write
// transactions since the last one, and stops it at [DB.Close]. It is for a
// SQLite database in WAL mode whose connections were opened with
// `wal_autocheckpoint=0` (sqldb/drivers.Open does both): SQLite's automatic
// checkpoint runs inside the COMMIT of whichever write transaction pushes the
// WAL past 1,000 pages, copying the WAL's pages into the database file and,
// with synchronous=NORMAL, fsyncing both, all while that transaction still
// holds the one write lock every other writer of the process queues on
// (see [DB.InTx]). A PASSIVE checkpoint takes no write lock
// (https://sqlite.org/c3ref/wal_checkpoint_v2.html): it copies what no reader
// still needs while writers go on appending, so the copying and the fsyncs
// move off the writers' path onto a goroutine of their own. Durability is
// that of the WAL and synchronous setting, unchanged: a transaction is
// durable once its COMMIT has written the WAL, whether or not it has been
// checkpointed. The WAL grows while checkpoints lag and is rewritten from its
// start by the first writer after a checkpoint that copied all of it. When
// the last connection closes, SQLite checkpoints what remains.
//
// A failed checkpoint is retried at the next interval; onErr, if not nil, is
// called with its error (SQLITE_BUSY while another process checkpoints is
// normal and not reported). CheckpointInBackground returns an error, and
// starts nothing, on PostgreSQL, for a non-positive interval, or when one
// was already started. Call it before the DB is shared between goroutines.
func (db *DB) CheckpointInBackground(interval time.Duration, onErr func(error)) error {
	switch {
	case db.Dialect != SQLite:
		return fmt.Errorf("sqldb: background checkpoints: %v has no WAL", db.Dialect)
	case interval <= 0:
		return fmt.Errorf("sqldb: background checkpoints: interval %v, want > 0", interval)
	case db.ckptStop != nil:
		return fmt.Errorf("sqldb: background checkpoints already started")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	db.ckptStop = func() { cancel(); <-done }
	db.wrote = make(chan struct{}, 1)
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			select {
			case <-db.wrote:
			default:
				continue // nothing committed since the last checkpoint
			}
			if _, err := db.ExecContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`); err != nil && ctx.Err() == nil && !IsRetryable(err) && onErr != nil {
				onErr(fmt.Errorf("sqldb: wal_checkpoint(PASSIVE): %w", err))
			}
		}
	}()
	return nil
}

// noteWrite tells the background checkpointer, if one runs, that a write
// transaction committed. It never blocks.
func (db *DB) noteWrite() {
	if db.wrote == nil {
		return
	}
	select {
	case db.wrote <- struct{}{}:
	default:
	}
}
