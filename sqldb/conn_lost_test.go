package sqldb_test

import (
	"bytes"
	"context"
	"database/sql"
	"io"
	"net"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordercast/ordercast/internal/testkit/dbtest"
	"github.com/ordercast/ordercast/sqldb"
	"github.com/ordercast/ordercast/sqldb/drivers"
)

// TestInTxRetriesWhenBackendTerminated (found by ordercast chaos on
// PostgreSQL: pg_terminate_backend under load left checkout's 'published'
// mark undone, a 202 with a pending request row): a transaction whose
// session is terminated before COMMIT is run again on a new connection and
// succeeds; its first attempt's writes are not kept.
func TestInTxRetriesWhenBackendTerminated(t *testing.T) {
	db := dbtest.Postgres(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, `CREATE TABLE conn_lost (id INT PRIMARY KEY, attempt INT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	attempts, got, err := cutFirstAttempt(t, ctx, db, "conn_lost", func(tx *sql.Tx) error {
		var pid int
		if err := tx.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			return err
		}
		var ok bool
		if err := db.QueryRowContext(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&ok); err != nil || !ok {
			t.Fatalf("pg_terminate_backend(%d): %v %v", pid, ok, err)
		}
		return nil // the next statement of this session finds it terminated (57P01)
	})
	if err != nil {
		t.Fatalf("InTx after pg_terminate_backend: %v (after %d attempts)", err, attempts)
	}
	if got != 2 || attempts != 2 {
		t.Fatalf("row from attempt %d, %d attempts: want the second attempt's row only", got, attempts)
	}
}

// TestInTxRetriesWhileServerRestarts (found by ordercast chaos: a PostgreSQL
// restart failed checkout's 'published' mark with "sqldb: begin: connection
// refused" and "conn closed"): while the server is away (its connections
// closed, new ones refused) a transaction is tried again until it is back,
// within the context. The "server" is a forwarder to the real one, stopped
// and started again.
func TestInTxRetriesWhileServerRestarts(t *testing.T) {
	ctx, db, fw, addr := throughForwarder(t, "", "")
	var one int
	if err := db.QueryRowContext(ctx, `SELECT 1`).Scan(&one); err != nil {
		t.Fatal(err)
	}
	fw.stop() // the pooled connection is closed, new ones are refused
	for deadline := time.Now().Add(5 * time.Second); db.PingContext(ctx) == nil; {
		if time.Now().After(deadline) {
			t.Fatal("the database still answers through a stopped forwarder")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.AfterFunc(800*time.Millisecond, func() { fw.start(t, addr) })
	err := db.InTx(ctx, func(tx *sql.Tx) error { return tx.QueryRowContext(ctx, `SELECT 2`).Scan(&one) })
	if err != nil || one != 2 {
		t.Fatalf("InTx while the server comes back: %v", err)
	}
}

// TestInTxRetriesWhenConnectionResetMidTransaction (found by the cluster
// soak, seed 22: a PostgreSQL crash reset checkout's connection in the middle
// of its 'published' mark, "read: connection reset by peer", and the 202
// kept a pending row): a transaction whose socket dies between two
// statements, before COMMIT, is run again on a new connection; the first
// attempt's write is not kept.
func TestInTxRetriesWhenConnectionResetMidTransaction(t *testing.T) {
	ctx, db, fw, addr := throughForwarder(t, "conn_reset", "id INT PRIMARY KEY, attempt INT NOT NULL")
	attempts, got, err := cutFirstAttempt(t, ctx, db, "conn_reset", func(*sql.Tx) error {
		fw.stop() // the socket dies under the open transaction
		time.AfterFunc(300*time.Millisecond, func() { fw.start(t, addr) })
		return nil
	})
	if err != nil {
		t.Fatalf("InTx after a reset mid-transaction: %v (after %d attempts)", err, attempts)
	}
	if got != attempts || attempts < 2 {
		t.Fatalf("row from attempt %d after %d attempts: want a later attempt's row only", got, attempts)
	}
}

// TestInTxIdempotentRetriesWhenLostInCommit (found by the cluster soak, seed
// 31: pg_terminate_backend during checkout's COMMIT of its 'published' mark,
// 57P01 in COMMIT, left a 202 with a pending row): the connection is cut
// when the client sends COMMIT. InTx returns the error (outcome unknown, its
// transaction is not run again); InTxIdempotent runs it again and succeeds.
func TestInTxIdempotentRetriesWhenLostInCommit(t *testing.T) {
	ctx, db, fw, _ := throughForwarder(t, "lost_commit", "id INT PRIMARY KEY, status TEXT NOT NULL")
	if _, err := db.ExecContext(ctx, `INSERT INTO lost_commit VALUES (1, 'pending'), (2, 'pending')`); err != nil {
		t.Fatal(err)
	}
	mark := func(id int) func(tx *sql.Tx) error {
		return func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `UPDATE lost_commit SET status = 'published' WHERE id = $1 AND status = 'pending'`, id)
			return err
		}
	}
	fw.cutOnCommit.Store(true)
	if err := db.InTx(ctx, mark(1)); err == nil {
		t.Fatal("InTx with the connection cut at COMMIT: want an error (outcome unknown, not run again)")
	}
	fw.cutOnCommit.Store(true)
	if err := db.InTxIdempotent(ctx, mark(2)); err != nil {
		t.Fatalf("InTxIdempotent with the connection cut at COMMIT: %v", err)
	}
	var st string
	if err := db.QueryRowContext(ctx, `SELECT status FROM lost_commit WHERE id = 2`).Scan(&st); err != nil || st != "published" {
		t.Fatalf("row 2 %q (%v): want published", st, err)
	}
}

// throughForwarder opens the PostgreSQL of ORDERCAST_TEST_POSTGRES through a
// started forwarder (skipping the test when the variable is unset) and,
// when table is not empty, creates table (columns) afresh, dropped at the
// end. It returns a context of 30 s, the database, the forwarder and its
// address (to start it again on); all are closed when the test ends.
func throughForwarder(t *testing.T, table, columns string) (context.Context, *sqldb.DB, *forwarder, string) {
	t.Helper()
	base := os.Getenv(dbtest.PostgresEnv)
	if base == "" {
		t.Skipf("PostgreSQL tests skipped: set %s", dbtest.PostgresEnv)
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	fw := &forwarder{upstream: u.Host}
	addr := fw.start(t, "127.0.0.1:0")
	u.Host = addr
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	db, err := drivers.Open(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if table != "" {
		if _, err := db.ExecContext(ctx, `DROP TABLE IF EXISTS `+table+`; CREATE TABLE `+table+` (`+columns+`)`); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), `DROP TABLE `+table) })
	}
	return ctx, db, fw, addr
}

// cutFirstAttempt runs with db.InTx a transaction that inserts (1, its
// attempt number) into table(id, attempt) and, in its first attempt only,
// calls cut to lose the connection, then runs one more statement, which
// must fail (the test fails if it does not), and returns its error. It
// returns InTx's attempts, the attempt number of the row kept (0 if none)
// and InTx's error (or the error reading the row).
func cutFirstAttempt(t *testing.T, ctx context.Context, db *sqldb.DB, table string, cut func(tx *sql.Tx) error) (attempts, kept int, err error) {
	t.Helper()
	err = db.InTx(ctx, func(tx *sql.Tx) error {
		attempts++
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+table+` (id, attempt) VALUES (1, $1)`, attempts); err != nil {
			return err
		}
		if attempts > 1 {
			return nil
		}
		if err := cut(tx); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `SELECT 1`)
		if err == nil {
			t.Fatal("a statement on a connection just cut succeeded")
		}
		return err
	})
	if err != nil {
		return attempts, 0, err
	}
	err = db.QueryRowContext(ctx, `SELECT attempt FROM `+table+` WHERE id = 1`).Scan(&kept)
	return attempts, kept, err
}

// forwarder forwards TCP connections to upstream while started.
type forwarder struct {
	upstream    string
	cutOnCommit atomic.Bool // close the next connection that sends COMMIT, before forwarding it
	mu          sync.Mutex
	ln          net.Listener
	conns       []net.Conn
}

func (f *forwarder) start(t *testing.T, addr string) string {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Errorf("listen %s: %v", addr, err)
		return ""
	}
	f.mu.Lock()
	f.ln = ln
	f.mu.Unlock()
	t.Cleanup(f.stop)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", f.upstream)
			if err != nil {
				c.Close()
				continue
			}
			f.mu.Lock()
			f.conns = append(f.conns, c, u)
			f.mu.Unlock()
			go func() { f.pump(u, c); u.Close(); c.Close() }()
			go func() { _, _ = io.Copy(c, u); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

// pump copies client bytes to the server; with cutOnCommit set it drops the
// connection instead of forwarding a chunk holding a simple-query COMMIT
// (pgx's stdlib sends "commit").
func (f *forwarder) pump(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if f.cutOnCommit.Load() && bytes.Contains(bytes.ToLower(buf[:n]), []byte("commit\x00")) && f.cutOnCommit.CompareAndSwap(true, false) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (f *forwarder) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ln != nil {
		f.ln.Close()
	}
	for _, c := range f.conns {
		c.Close()
	}
	f.conns = nil
}
