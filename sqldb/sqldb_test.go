package sqldb_test

import (
	"database/sql"
	"fmt"
	"testing"

	"github.com/ordercast/ordercast/sqldb"
)

// stateErr is a PostgreSQL driver's error as lib/pq or pgx report it: a
// SQLSTATE behind a SQLState method.
type stateErr string

func (e stateErr) Error() string    { return "pq: " + string(e) }
func (e stateErr) SQLState() string { return string(e) }

// codeErr is a SQLite driver's error as modernc.org/sqlite reports it: an
// extended result code behind a Code method.
type codeErr int

func (e codeErr) Error() string { return fmt.Sprint("sqlite: code ", int(e)) }
func (e codeErr) Code() int     { return int(e) }

// Errors are recognised by their methods, whatever driver made them, also
// when wrapped; other errors are neither retryable nor unique violations.
func TestErrorClassesWithoutDriver(t *testing.T) {
	for _, c := range []struct {
		err               error
		retryable, unique bool
	}{
		{stateErr("40001"), true, false},
		{stateErr("40P01"), true, false},
		{stateErr("23505"), false, true},
		{stateErr("23503"), false, false}, // foreign_key_violation
		{codeErr(5), true, false},         // SQLITE_BUSY
		{codeErr(517), true, false},       // SQLITE_BUSY_SNAPSHOT
		{codeErr(6), true, false},         // SQLITE_LOCKED
		{codeErr(1555), false, true},      // SQLITE_CONSTRAINT_PRIMARYKEY
		{codeErr(2067), false, true},      // SQLITE_CONSTRAINT_UNIQUE
		{codeErr(787), false, false},      // SQLITE_CONSTRAINT_FOREIGNKEY
		{fmt.Errorf("x"), false, false},   // not a driver error
		{sql.ErrNoRows, false, false},     //
		{nil, false, false},               //
	} {
		for _, err := range []error{c.err, fmt.Errorf("insert: %w", c.err)} {
			if c.err == nil && err != nil {
				continue
			}
			if got := sqldb.IsRetryable(err); got != c.retryable {
				t.Errorf("IsRetryable(%v) = %v, want %v", err, got, c.retryable)
			}
			if got := sqldb.IsUniqueViolation(err); got != c.unique {
				t.Errorf("IsUniqueViolation(%v) = %v, want %v", err, got, c.unique)
			}
		}
	}
}

func TestNewRefusesBadInput(t *testing.T) {
	if _, err := sqldb.New(nil, sqldb.SQLite); err == nil {
		t.Error("New(nil) accepted")
	}
	// sql.Open of an unregistered driver fails, so use a DB whose driver is
	// never reached: New does not touch the database.
	db := sql.OpenDB(nil)
	defer db.Close()
	if _, err := sqldb.New(db, sqldb.Dialect(7)); err == nil {
		t.Error("New with an unknown dialect accepted")
	}
	for _, d := range []sqldb.Dialect{sqldb.SQLite, sqldb.Postgres} {
		got, err := sqldb.New(db, d)
		if err != nil || got.Dialect != d || got.DB != db {
			t.Errorf("New(db, %v) = %+v, %v", d, got, err)
		}
	}
}

func TestRebind(t *testing.T) {
	q := `SELECT '?', "a?" FROM t WHERE a = ? AND b = ?`
	if got := sqldb.Postgres.Rebind(q); got != `SELECT '?', "a?" FROM t WHERE a = $1 AND b = $2` {
		t.Errorf("Postgres.Rebind = %s", got)
	}
	if got := sqldb.SQLite.Rebind(q); got != q {
		t.Errorf("SQLite.Rebind = %s", got)
	}
}
