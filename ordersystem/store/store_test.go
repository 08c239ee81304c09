package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ordercast/ordercast/ordersystem/store"
	"github.com/ordercast/ordercast/ordersystem/store/storetest"
)

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestRebind(t *testing.T) {
	pg := &store.DB{Dialect: store.Postgres}
	lite := &store.DB{Dialect: store.SQLite}
	for _, tc := range []struct{ in, pg string }{
		{`SELECT 1`, `SELECT 1`},
		{`INSERT INTO t (a, b) VALUES (?, ?)`, `INSERT INTO t (a, b) VALUES ($1, $2)`},
		{`SELECT '?', "a?b", ? FROM t WHERE x = ? AND y = 'it''s?'`, `SELECT '?', "a?b", $1 FROM t WHERE x = $2 AND y = 'it''s?'`},
		{`UPDATE t SET a=? WHERE id IN (?,?,?,?,?,?,?,?,?,?)`, `UPDATE t SET a=$1 WHERE id IN ($2,$3,$4,$5,$6,$7,$8,$9,$10,$11)`},
	} {
		if got := pg.Rebind(tc.in); got != tc.pg {
			t.Errorf("Postgres Rebind(%q) = %q, want %q", tc.in, got, tc.pg)
		}
		if got := lite.Rebind(tc.in); got != tc.in {
			t.Errorf("SQLite Rebind(%q) = %q, want it unchanged", tc.in, got)
		}
	}
}

// pragmas reads the settings Open promises from one pooled connection.
func pragmas(ctx context.Context, t *testing.T, c *sql.Conn) string {
	t.Helper()
	var journal string
	var sync, busy, fk int
	for q, dst := range map[string]any{
		"PRAGMA journal_mode": &journal, "PRAGMA synchronous": &sync,
		"PRAGMA busy_timeout": &busy, "PRAGMA foreign_keys": &fk,
	} {
		if err := c.QueryRowContext(ctx, q).Scan(dst); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return fmt.Sprintf("journal_mode=%s synchronous=%d busy_timeout=%d foreign_keys=%d", journal, sync, busy, fk)
}

func TestOpenSQLiteDSNForms(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	for _, dsn := range []string{
		"sqlite:" + filepath.Join(dir, "a.db"),
		"sqlite://" + filepath.Join(dir, "b.db"),
		filepath.Join(dir, "c.db"),
		"file:" + filepath.Join(dir, "d.db") + "?cache=private",
	} {
		t.Run(dsn, func(t *testing.T) {
			db, err := store.Open(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if db.Dialect != store.SQLite || db.Dialect.String() != "sqlite" {
				t.Fatalf("dialect %v", db.Dialect)
			}
			// Every connection of the pool, not only the first, has the settings.
			var conns []*sql.Conn
			for range store.SQLiteMaxOpenConns {
				c, err := db.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				conns = append(conns, c)
			}
			want := "journal_mode=wal synchronous=1 busy_timeout=10000 foreign_keys=1"
			for i, c := range conns {
				if got := pragmas(ctx, t, c); got != want {
					t.Errorf("connection %d: %s, want %s", i, got, want)
				}
			}
			for _, c := range conns {
				c.Close()
			}
			if got := db.Stats().MaxOpenConnections; got != store.SQLiteMaxOpenConns {
				t.Errorf("MaxOpenConnections = %d, want %d", got, store.SQLiteMaxOpenConns)
			}
		})
	}
}

func TestOpenSQLiteOverridesAndMemory(t *testing.T) {
	ctx := ctxT(t)
	db, err := store.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "o.db")+"?_pragma=busy_timeout(250)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var busy int
	if err := db.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy); err != nil || busy != 250 {
		t.Fatalf("busy_timeout = %d, %v; want the DSN's 250", busy, err)
	}

	mem, err := store.Open(ctx, "sqlite::memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	if got := mem.Stats().MaxOpenConnections; got != 1 {
		t.Fatalf("in-memory pool size %d, want 1", got)
	}
	if err := store.Migrate(ctx, mem); err != nil {
		t.Fatal(err)
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := ctxT(t)
	for _, dsn := range []string{
		"",
		"sqlite:",
		"sqlite:" + filepath.Join(t.TempDir(), "no", "such", "dir", "x.db"),
		"postgres://nobody@127.0.0.1:1/none?connect_timeout=1",
	} {
		if db, err := store.Open(ctx, dsn); err == nil {
			db.Close()
			t.Errorf("Open(%q) succeeded, want an error", dsn)
		} else if !strings.HasPrefix(err.Error(), "sqldb: open") {
			t.Errorf("Open(%q) error %q lacks the sqldb: open prefix", dsn, err)
		}
	}
}

var tables = []string{
	"schema_migrations", "catalog", "checkout_requests", "orders", "order_lines", "order_status",
	"wallets", "payments", "wallet_ledger", "notifications", "inbox", "outbox",
}

func TestMigrateIdempotent(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := ctxT(t)
		// storetest already migrated once; twice more must change nothing.
		for range 2 {
			if err := store.Migrate(ctx, db); err != nil {
				t.Fatal(err)
			}
		}
		var n, v int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*), MAX(version) FROM schema_migrations`).Scan(&n, &v); err != nil {
			t.Fatal(err)
		}
		if n != store.SchemaVersion || v != store.SchemaVersion {
			t.Fatalf("schema_migrations has %d rows, max version %d; want one row per version up to %d", n, v, store.SchemaVersion)
		}
		for _, tbl := range tables {
			if _, err := db.ExecContext(ctx, `SELECT COUNT(*) FROM `+tbl); err != nil {
				t.Errorf("table %s: %v", tbl, err)
			}
		}
		// The portable types round-trip, including the reserved column names,
		// the identity columns and binary data.
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			stmts := []struct {
				q    string
				args []any
			}{
				{`INSERT INTO inbox (consumer_group, event_id, topic, "partition", "offset", processed_at) VALUES (?, ?, ?, ?, ?, ?)`,
					[]any{"g", "e", "t", int32(2), int64(1) << 40, int64(1)}},
				{`INSERT INTO outbox (topic, record_key, value, headers, created_at) VALUES (?, ?, ?, ?, ?)`,
					[]any{"t", []byte{0, 1, 2}, []byte{0xff, 0}, nil, int64(1)}},
				{`INSERT INTO wallet_ledger (customer_id, order_id, amount_milli, created_at) VALUES (?, ?, ?, ?)`,
					[]any{"c", "o", int64(-15300), int64(1)}},
				{`INSERT INTO wallet_ledger (customer_id, order_id, amount_milli, created_at) VALUES (?, ?, ?, ?)`,
					[]any{"c", "o", int64(-15300), int64(1)}}, // not unique on order_id, on purpose
				{`INSERT INTO orders (order_id, customer_id, country, total_milli, line_count, reference, created_at, stored_at) VALUES (?, NULL, ?, ?, ?, ?, ?, ?)`,
					[]any{"o", "United Kingdom", int64(15300), 1, "536365", int64(1), int64(2)}},
				{`INSERT INTO order_lines (order_id, line_no, stock_code, description, quantity, unit_price_milli, line_total_milli) VALUES (?, ?, ?, ?, ?, ?, ?)`,
					[]any{"o", 1, "85123A", "WHITE HANGING HEART T-LIGHT HOLDER", int64(6), int64(2550), int64(15300)}},
			}
			for _, s := range stmts {
				if _, err := tx.ExecContext(ctx, db.Rebind(s.q), s.args...); err != nil {
					return fmt.Errorf("%s: %w", s.q, err)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		var off int64
		var part int32
		if err := db.QueryRowContext(ctx, `SELECT "partition", "offset" FROM inbox`).Scan(&part, &off); err != nil || part != 2 || off != 1<<40 {
			t.Fatalf("inbox row: %d %d %v", part, off, err)
		}
		var id int64
		var key, value []byte
		if err := db.QueryRowContext(ctx, `SELECT id, record_key, value FROM outbox`).Scan(&id, &key, &value); err != nil {
			t.Fatal(err)
		}
		if id != 1 || string(key) != "\x00\x01\x02" || string(value) != "\xff\x00" {
			t.Fatalf("outbox row: id %d key %x value %x", id, key, value)
		}
		var ledger int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM wallet_ledger WHERE order_id = 'o'`).Scan(&ledger); err != nil || ledger != 2 {
			t.Fatalf("wallet_ledger rows %d, %v", ledger, err)
		}
		// A line without its order violates the (deferred) foreign key at commit.
		err = db.InTx(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, db.Rebind(`INSERT INTO order_lines (order_id, line_no, stock_code, quantity, unit_price_milli, line_total_milli) VALUES (?, 1, 'X', 1, 1, 1)`), "missing")
			return err
		})
		if err == nil {
			t.Fatal("order line without an order was accepted")
		}
	})
}

// TestMigrateConcurrentProcesses opens and migrates one new SQLite file from
// several pools at once, as instances started together do. Opening races on
// the switch to WAL (SQLite answers SQLITE_BUSY without waiting there), so it
// runs several rounds, each on a new file.
func TestMigrateConcurrentProcesses(t *testing.T) {
	for round := range 10 {
		migrateConcurrently(t, filepath.Join(t.TempDir(), fmt.Sprintf("m%d.db", round)))
	}
}

func migrateConcurrently(t *testing.T, path string) {
	t.Helper()
	ctx := ctxT(t)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			db, err := store.Open(ctx, "sqlite:"+path)
			if err != nil {
				errs <- err
				return
			}
			defer db.Close()
			errs <- store.Migrate(ctx, db)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestInTxRollsBackOnErrorAndPanic(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := ctxT(t)
		insert := func(tx *sql.Tx, code string) error {
			_, err := tx.ExecContext(ctx, db.Rebind(`INSERT INTO catalog (stock_code, description, unit_price_milli) VALUES (?, ?, ?)`), code, "d", 1)
			return err
		}
		boom := errors.New("boom")
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			if err := insert(tx, "A"); err != nil {
				return err
			}
			return fmt.Errorf("wrapped: %w", boom)
		})
		if !errors.Is(err, boom) {
			t.Fatalf("InTx error %v, want boom", err)
		}
		func() {
			defer func() {
				if r := recover(); r != "panic in fn" {
					t.Fatalf("recovered %v, want the panic of fn", r)
				}
			}()
			_ = db.InTx(ctx, func(tx *sql.Tx) error {
				if err := insert(tx, "B"); err != nil {
					return err
				}
				panic("panic in fn")
			})
		}()
		if err := db.InTx(ctx, func(tx *sql.Tx) error { return insert(tx, "C") }); err != nil {
			t.Fatal(err)
		}
		var codes []string
		rows, err := db.QueryContext(ctx, `SELECT stock_code FROM catalog ORDER BY stock_code`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var c string
			if err := rows.Scan(&c); err != nil {
				t.Fatal(err)
			}
			codes = append(codes, c)
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
		if strings.Join(codes, ",") != "C" {
			t.Fatalf("catalog has %v, want only C (A and B rolled back)", codes)
		}
		// The pool is still usable: no connection was left inside a transaction.
		for range 10 {
			if err := db.InTx(ctx, func(tx *sql.Tx) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}

		// A duplicate key is recognised as such, and is not retryable.
		err = db.InTx(ctx, func(tx *sql.Tx) error { return insert(tx, "C") })
		if !store.IsUniqueViolation(err) || store.IsRetryable(err) {
			t.Fatalf("duplicate insert: %v (unique %v, retryable %v)", err, store.IsUniqueViolation(err), store.IsRetryable(err))
		}
	})
}

func TestInTxRetriesRetryableErrors(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := ctxT(t)
		var retries atomic.Int32
		db.OnTxRetry = func(int, error) { retries.Add(1) }
		serialization := &pgconn.PgError{Code: "40001", Message: "could not serialize access"}
		calls := 0
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			calls++
			if _, err := tx.ExecContext(ctx, db.Rebind(`INSERT INTO catalog (stock_code, description, unit_price_milli) VALUES (?, 'd', 1)`), fmt.Sprint("R", calls)); err != nil {
				return err
			}
			if calls < 3 {
				return fmt.Errorf("attempt %d: %w", calls, serialization)
			}
			return nil
		})
		if err != nil || calls != 3 || retries.Load() != 2 {
			t.Fatalf("err %v, calls %d, retries %d; want nil, 3, 2", err, calls, retries.Load())
		}
		var n int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM catalog`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("catalog rows %d (%v); only the last attempt may commit", n, err)
		}

		// Bounded: a transaction that always loses gives up after MaxTxAttempts.
		db.MaxTxAttempts = 3
		calls = 0
		err = db.InTx(ctx, func(tx *sql.Tx) error {
			calls++
			return &pgconn.PgError{Code: "40P01"}
		})
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "40P01" || calls != 3 {
			t.Fatalf("err %v after %d calls; want the deadlock error after 3", err, calls)
		}
	})
}

// TestInTxRetriesOnBusy makes another connection (as another process would)
// hold SQLite's write lock past busy_timeout, so that BEGIN IMMEDIATE fails
// with SQLITE_BUSY; InTx must retry and succeed once the lock is released.
func TestInTxRetriesOnBusy(t *testing.T) {
	ctx := ctxT(t)
	path := filepath.Join(t.TempDir(), "busy.db")
	db, err := store.Open(ctx, "sqlite:"+path+"?_pragma=busy_timeout(20)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := store.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	other, err := store.Open(ctx, "sqlite:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	lockHeld := make(chan struct{})
	release := make(chan struct{})
	holderDone := make(chan error, 1)
	go func() {
		holderDone <- other.InTx(ctx, func(tx *sql.Tx) error {
			close(lockHeld)
			<-release
			return nil
		})
	}()
	<-lockHeld

	retried := make(chan error, 16)
	db.MaxTxAttempts = 1000 // enough to outlast the holder; the test releases it after the first retry
	db.OnTxRetry = func(_ int, err error) { retried <- err }
	done := make(chan error, 1)
	go func() {
		done <- db.InTx(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO catalog (stock_code, description, unit_price_milli) VALUES ('BUSY', 'd', 1)`)
			return err
		})
	}()
	select {
	case err := <-retried:
		if !store.IsRetryable(err) {
			t.Fatalf("retried on %v, which IsRetryable rejects", err)
		}
	case err := <-done:
		t.Fatalf("InTx finished (%v) while another connection held the write lock", err)
	case <-ctx.Done():
		t.Fatal("no retry while the write lock was held")
	}
	close(release)
	if err := <-holderDone; err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("InTx after the lock was released: %v", err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM catalog WHERE stock_code = 'BUSY'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("row count %d, %v", n, err)
	}
}

// TestSQLiteConcurrentWriters checks the pool and lock choice: many
// goroutines, and two DBs on one file (as two processes), write at once
// without a single SQLITE_BUSY reaching the caller.
func TestSQLiteConcurrentWriters(t *testing.T) {
	ctx := ctxT(t)
	path := filepath.Join(t.TempDir(), "w.db")
	a := storetest.SQLitePath(t, path)
	b := storetest.SQLitePath(t, path)
	var wg sync.WaitGroup
	var failures atomic.Int32
	const writers, each = 8, 40
	for w := range writers {
		db := a
		if w%2 == 1 {
			db = b
		}
		wg.Go(func() {
			for i := range each {
				err := db.InTx(ctx, func(tx *sql.Tx) error {
					// Read then write: the pattern that deadlocks deferred transactions.
					var n int
					if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM catalog`).Scan(&n); err != nil {
						return err
					}
					_, err := tx.ExecContext(ctx, `INSERT INTO catalog (stock_code, description, unit_price_milli) VALUES (?, 'd', ?)`,
						fmt.Sprintf("W%d-%d", w, i), n)
					return err
				})
				if err != nil {
					failures.Add(1)
					t.Errorf("writer %d: %v", w, err)
					return
				}
				// Concurrent reads outside transactions.
				var n int
				if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM catalog`).Scan(&n); err != nil {
					t.Errorf("reader %d: %v", w, err)
				}
			}
		})
	}
	wg.Wait()
	var n int
	if err := a.QueryRowContext(ctx, `SELECT COUNT(*) FROM catalog`).Scan(&n); err != nil || n != writers*each {
		t.Fatalf("rows %d (%v), want %d", n, err, writers*each)
	}
}

// TestInTxRetriesPostgresDeadlock provokes a real deadlock (two transactions
// updating two rows in opposite orders); PostgreSQL aborts one with 40P01 and
// InTx must run it again, so both updates land exactly once.
func TestInTxRetriesPostgresDeadlock(t *testing.T) {
	db := storetest.Postgres(t)
	ctx := ctxT(t)
	if _, err := db.ExecContext(ctx, `INSERT INTO wallets (customer_id, opening_milli, balance_milli) VALUES ('a', 100, 100), ('b', 100, 100)`); err != nil {
		t.Fatal(err)
	}
	var retries atomic.Int32
	var deadlocks atomic.Int32
	db.OnTxRetry = func(_ int, err error) {
		retries.Add(1)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "40P01" {
			deadlocks.Add(1)
		}
	}
	var arrived sync.WaitGroup
	arrived.Add(2)
	both := make(chan struct{})
	go func() { arrived.Wait(); close(both) }()
	move := func(from, to string) error {
		first := true
		return db.InTx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `UPDATE wallets SET balance_milli = balance_milli - 10 WHERE customer_id = $1`, from); err != nil {
				return err
			}
			if first { // only the first attempt waits for the other: the retry must get through
				first = false
				arrived.Done()
				<-both
			}
			_, err := tx.ExecContext(ctx, `UPDATE wallets SET balance_milli = balance_milli + 10 WHERE customer_id = $1`, to)
			return err
		})
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Go(func() { errs <- move("a", "b") })
	wg.Go(func() { errs <- move("b", "a") })
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if deadlocks.Load() != 1 || retries.Load() != 1 {
		t.Fatalf("retries %d (deadlocks %d), want exactly one deadlock retry", retries.Load(), deadlocks.Load())
	}
	var a, b int64
	if err := db.QueryRowContext(ctx, `SELECT
		(SELECT balance_milli FROM wallets WHERE customer_id = 'a'),
		(SELECT balance_milli FROM wallets WHERE customer_id = 'b')`).Scan(&a, &b); err != nil {
		t.Fatal(err)
	}
	if a != 100 || b != 100 {
		t.Fatalf("balances a=%d b=%d, want 100 and 100 (each move applied once)", a, b)
	}
}
