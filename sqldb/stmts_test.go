package sqldb_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/sqldb"
	"github.com/ordercast/ordercast/sqldb/drivers"
)

// InsertRows writes every row of a batch of any size, in order and with its
// values, through a few statement shapes kept prepared across transactions
// (chunks of MaxRowsPerInsert and the powers of two below it: no new text
// for a new batch size); a failed statement rolls back with its transaction
// and the kept statements keep working in the next one.
func TestInsertRowsFixedShapes(t *testing.T) {
	db, _ := openSQLiteFile(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, `CREATE TABLE r (batch INTEGER NOT NULL, n INTEGER NOT NULL, v TEXT, PRIMARY KEY (batch, n))`); err != nil {
		t.Fatal(err)
	}
	const head = `INSERT INTO r (batch, n, v) VALUES`
	sizes := []int{0, 1, 2, 3, 7, 255, 256, 257, 511, 600, 1000}
	for _, size := range sizes {
		args := make([]any, 0, 3*size)
		for n := range size {
			args = append(args, size, n, fmt.Sprintf("v%d-%d", size, n))
		}
		if err := db.InTx(ctx, func(tx *sql.Tx) error { return db.InsertRows(ctx, tx, head, "", 3, args) }); err != nil {
			t.Fatalf("batch of %d: %v", size, err)
		}
	}
	for _, size := range sizes {
		var count, bad int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*), COUNT(*) FILTER (WHERE v IS NOT 'v' || batch || '-' || n) FROM r WHERE batch = ?`, size).Scan(&count, &bad); err != nil {
			t.Fatal(err)
		}
		if count != size || bad != 0 {
			t.Errorf("batch of %d: %d rows stored, %d with another value", size, count, bad)
		}
	}
	// 256, 128, ..., 1: nine shapes for every size (kept in the background)
	testkafka.WaitFor(t, 10*time.Second, "9 statements kept", func() bool { return sqldb.CachedStmts(db) >= 9 })
	if got := sqldb.CachedStmts(db); got != 9 {
		t.Errorf("%d statements kept after %d batch sizes; want 9 (256 and each power of two below)", got, len(sizes))
	}
	// a conflicting row fails its statement and the transaction rolls back
	err := db.InTx(ctx, func(tx *sql.Tx) error {
		return db.InsertRows(ctx, tx, head, "", 3, []any{9, 0, "new", 1, 0, "dup"})
	})
	if err == nil {
		t.Fatal("a row with a taken primary key was inserted")
	}
	var n9 int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM r WHERE batch = 9`).Scan(&n9); err != nil || n9 != 0 {
		t.Fatalf("rows of the failed transaction: %d (%v); want 0", n9, err)
	}
	// the tail: the duplicate skipped, the new row written, with the kept statements
	if err := db.InTx(ctx, func(tx *sql.Tx) error {
		return db.InsertRows(ctx, tx, head, " ON CONFLICT (batch, n) DO NOTHING", 3, []any{9, 0, "new", 1, 0, "dup"})
	}); err != nil {
		t.Fatal(err)
	}
	var v string
	if err := db.QueryRowContext(ctx, `SELECT group_concat(v) FROM r WHERE (batch = 9 AND n = 0) OR (batch = 1 AND n = 0)`).Scan(&v); err != nil || (v != "new,v1-0" && v != "v1-0,new") {
		t.Fatalf("after ON CONFLICT DO NOTHING: %q (%v); want the new row and the old one unchanged", v, err)
	}
	if err := db.InTx(ctx, func(tx *sql.Tx) error { return db.InsertRows(ctx, tx, head, "", 3, []any{1, 2}) }); err == nil {
		t.Error("2 values for rows of 3 columns were accepted")
	}
}

// InsertRowsReturning hands scan each row the INSERT returns, over every
// statement of a batch larger than one statement takes: with ON CONFLICT DO
// NOTHING RETURNING, exactly the new rows' keys (a key earlier in the batch
// or already stored returns nothing); an error of scan is returned as it is
// and rolls the transaction back.
func TestInsertRowsReturning(t *testing.T) {
	db, _ := openSQLiteFile(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, `CREATE TABLE r (k INTEGER PRIMARY KEY, v TEXT)`); err != nil {
		t.Fatal(err)
	}
	const head, tail = `INSERT INTO r (k, v) VALUES`, ` ON CONFLICT (k) DO NOTHING RETURNING k`
	if _, err := db.ExecContext(ctx, `INSERT INTO r (k, v) VALUES (5, 'old'), (299, 'old')`); err != nil {
		t.Fatal(err)
	}
	var args []any
	for k := range 300 { // 256 + 32 + 8 + 4: four statements
		args = append(args, k, "new")
	}
	args = append(args, 7, "again") // a key earlier in the batch
	got := map[int]int{}
	err := db.InTx(ctx, func(tx *sql.Tx) error {
		return db.InsertRowsReturning(ctx, tx, head, tail, 2, args, func(rows *sql.Rows) error {
			var k int
			if err := rows.Scan(&k); err != nil {
				return err
			}
			got[k]++
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 298 || got[5] != 0 || got[299] != 0 || got[7] != 1 || got[0] != 1 || got[298] != 1 {
		t.Fatalf("returned %d keys (5: %d, 299: %d, 7: %d, 0: %d, 298: %d); want the 298 new ones, each once",
			len(got), got[5], got[299], got[7], got[0], got[298])
	}
	stop := errors.New("stop")
	err = db.InTx(ctx, func(tx *sql.Tx) error {
		return db.InsertRowsReturning(ctx, tx, head, tail, 2, []any{1000, "x", 1001, "y"}, func(*sql.Rows) error { return stop })
	})
	if !errors.Is(err, stop) {
		t.Fatalf("a failing scan: %v, want its error", err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM r WHERE k >= 1000`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("rows of the failed transaction: %d (%v); want 0", n, err)
	}
	if err := db.InTx(ctx, func(tx *sql.Tx) error { return db.InsertRowsReturning(ctx, tx, head, tail, 2, args, nil) }); err == nil {
		t.Error("a nil scan was accepted")
	}
}

// TxStmt never waits for a second pool connection inside a transaction: on
// a pool of one connection (an in-memory SQLite database), where the
// transaction holds the only one, InsertRows completes, and the statements
// are kept once the transaction has ended and reused by the next ones.
func TestTxStmtSingleConnectionPool(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	db, err := drivers.Open(ctx, "sqlite::memory:")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if got := db.Stats().MaxOpenConnections; got != 1 {
		t.Fatalf("in-memory pool of %d connections; the test needs 1", got)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE r (n INTEGER PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	const head = `INSERT INTO r (n) VALUES`
	insert := func(from, n int) error {
		args := make([]any, n)
		for i := range args {
			args[i] = from + i
		}
		txCtx, txCancel := context.WithTimeout(ctx, 5*time.Second)
		defer txCancel()
		return db.InTx(txCtx, func(tx *sql.Tx) error { return db.InsertRows(txCtx, tx, head, "", 1, args) })
	}
	if err := insert(0, 3); err != nil { // shapes 2 and 1, prepared for the transaction
		t.Fatalf("insert on a one-connection pool: %v", err)
	}
	testkafka.WaitFor(t, 10*time.Second, "2 statements kept", func() bool { return sqldb.CachedStmts(db) == 2 })
	if err := insert(3, 3); err != nil { // the kept ones
		t.Fatalf("insert with kept statements: %v", err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM r`).Scan(&n); err != nil || n != 6 {
		t.Fatalf("%d rows (%v), want 6", n, err)
	}
}

// TxStmt keeps at most 256 query texts prepared per DB, as its doc says;
// past them a text is prepared for its transaction only, and works there.
func TestTxStmtKeepsAtMost256Texts(t *testing.T) {
	db, _ := openSQLiteFile(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const texts = 300
	for i := range texts {
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			st, err := db.TxStmt(ctx, tx, fmt.Sprintf("SELECT ? + %d", i))
			if err != nil {
				return err
			}
			var got int
			if err := st.QueryRowContext(ctx, 1).Scan(&got); err != nil {
				return err
			}
			if got != i+1 {
				return fmt.Errorf("got %d, want %d", got, i+1)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("text %d: %v", i, err)
		}
	}
	testkafka.WaitFor(t, 10*time.Second, "256 statements kept", func() bool { return sqldb.CachedStmts(db) >= 256 })
	if got := sqldb.CachedStmts(db); got != 256 {
		t.Fatalf("%d statements kept after %d texts; want 256", got, texts)
	}
}
