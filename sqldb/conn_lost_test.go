package sqldb_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/ordercast/ordercast/store/storetest"
)

// TestInTxRetriesWhenBackendTerminated (found by ordercast chaos on
// PostgreSQL: pg_terminate_backend under load left checkout's 'published'
// mark undone, a 202 with a pending request row): a transaction whose
// session is terminated before COMMIT is run again on a new connection and
// succeeds; its first attempt's writes are not kept.
func TestInTxRetriesWhenBackendTerminated(t *testing.T) {
	db := storetest.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, `CREATE TABLE conn_lost (id INT PRIMARY KEY, attempt INT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	attempts := 0
	err := db.InTx(ctx, func(tx *sql.Tx) error {
		attempts++
		if _, err := tx.ExecContext(ctx, `INSERT INTO conn_lost (id, attempt) VALUES (1, $1)`, attempts); err != nil {
			return err
		}
		if attempts == 1 {
			var pid int
			if err := tx.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
				return err
			}
			var ok bool
			if err := db.QueryRowContext(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&ok); err != nil || !ok {
				t.Fatalf("pg_terminate_backend(%d): %v %v", pid, ok, err)
			}
			// The next statement of this session finds it terminated (57P01).
			_, err := tx.ExecContext(ctx, `SELECT 1`)
			if err == nil {
				t.Fatal("a statement on a terminated session succeeded")
			}
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatalf("InTx after pg_terminate_backend: %v (after %d attempts)", err, attempts)
	}
	var got int
	if err := db.QueryRowContext(ctx, `SELECT attempt FROM conn_lost WHERE id = 1`).Scan(&got); err != nil || got != 2 || attempts != 2 {
		t.Fatalf("row from attempt %d (%v), %d attempts: want the second attempt's row only", got, err, attempts)
	}
}
