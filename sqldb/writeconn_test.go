package sqldb_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/sqldb"
	"github.com/ordercast/ordercast/sqldb/drivers"
)

// openSQLiteFile opens a SQLite file database in a test directory through
// drivers.Open (WAL, the background checkpointer) and closes it at cleanup.
func openSQLiteFile(t *testing.T) (*sqldb.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "t.db")
	db, err := drivers.Open(context.Background(), "sqlite:"+path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db, path
}

// Every SQLite write transaction of a DB runs on the same connection (so its
// page cache stays valid between them), even when the pool hands the
// connection the last one used to someone else in between: a TEMP table is
// visible only on the connection that created it.
func TestSQLiteWritesKeepOneConnection(t *testing.T) {
	db, _ := openSQLiteFile(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.InTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TEMP TABLE writer_mark (x INT)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// Without a kept writer connection the pool would hand the connection
	// the transaction just returned to this caller, and the next InTx would
	// run on another one.
	held, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	var n int
	if err := held.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_temp_master WHERE name = 'writer_mark'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatal("the pool handed out the connection write transactions run on")
	}
	for i := range 3 {
		if err := db.InTx(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO writer_mark VALUES (?)`, i)
			return err
		}); err != nil {
			t.Fatalf("write %d on another connection than the first: %v", i, err)
		}
	}
}

// A pool of a single connection keeps none for the writers: reads outside a
// transaction still get the connection between writes.
func TestSQLiteSingleConnectionPoolKeepsNothing(t *testing.T) {
	db, _ := openSQLiteFile(t)
	db.SetMaxOpenConns(1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.InTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE t (x INT)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil {
		t.Fatalf("read after a write on a one-connection pool: %v", err)
	}
}

// drivers.Open turns SQLite's automatic checkpoint (inside a writer's
// COMMIT) off and checkpoints in the background: committed pages reach the
// database file without any checkpoint of the caller's, and Close stops the
// checkpointer.
func TestSQLiteCheckpointsInBackground(t *testing.T) {
	db, path := openSQLiteFile(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var auto int
	if err := db.QueryRowContext(ctx, `PRAGMA wal_autocheckpoint`).Scan(&auto); err != nil || auto != 0 {
		t.Fatalf("wal_autocheckpoint = %d, %v; want 0", auto, err)
	}
	size := func() int64 {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	before := size()
	if err := db.InTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `CREATE TABLE blobs (b BLOB)`); err != nil {
			return err
		}
		for range 64 {
			if _, err := tx.ExecContext(ctx, `INSERT INTO blobs VALUES (randomblob(16384))`); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	testkafka.WaitFor(t, 10*time.Second, "the WAL's 1 MiB checkpointed into the database file", func() bool {
		return size() >= before+64*16384
	})
	if err := db.CheckpointInBackground(time.Second, nil); err == nil {
		t.Error("a second background checkpointer was started")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// CheckpointInBackground refuses what it cannot do.
func TestCheckpointInBackgroundRefusesBadInput(t *testing.T) {
	raw := sql.OpenDB(nil)
	defer raw.Close()
	pg, _ := sqldb.New(raw, sqldb.Postgres)
	if err := pg.CheckpointInBackground(time.Second, nil); err == nil {
		t.Error("started on PostgreSQL")
	}
	lite, _ := sqldb.New(raw, sqldb.SQLite)
	if err := lite.CheckpointInBackground(0, nil); err == nil {
		t.Error("started with interval 0")
	}
}

// A write transaction whose context ends half-way leaves the kept connection
// usable: the next write transaction commits (it is not left inside the
// abandoned one, nor waiting for its lock).
func TestSQLiteKeptConnectionAfterCancelledWrite(t *testing.T) {
	db, _ := openSQLiteFile(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.InTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE t (x INT)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithCancel(ctx)
	err := db.InTx(cctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(cctx, `INSERT INTO t VALUES (1)`); err != nil {
			return err
		}
		ccancel()
		_, err := tx.ExecContext(cctx, `INSERT INTO t VALUES (2)`)
		return err
	})
	if err == nil {
		t.Fatal("a transaction whose context ended committed")
	}
	if err := db.InTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO t VALUES (3)`)
		return err
	}); err != nil {
		t.Fatalf("write after a cancelled one: %v", err)
	}
	var got []int
	rows, err := db.QueryContext(ctx, `SELECT x FROM t ORDER BY x`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var x int
		if err := rows.Scan(&x); err != nil {
			t.Fatal(err)
		}
		got = append(got, x)
	}
	if len(got) != 1 || got[0] != 3 {
		t.Errorf("rows %v, want [3] (nothing of the cancelled transaction)", got)
	}
}
