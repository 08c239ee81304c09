package sqldb

import "errors"

// SQLite result codes (https://sqlite.org/rescode.html), as the driver
// reports them (modernc.org/sqlite's *sqlite.Error.Code returns the extended
// code; its low byte is the primary code).
const (
	sqliteBusy                 = 5    // SQLITE_BUSY
	sqliteLocked               = 6    // SQLITE_LOCKED
	sqliteConstraintPrimaryKey = 1555 // SQLITE_CONSTRAINT_PRIMARYKEY
	sqliteConstraintUnique     = 2067 // SQLITE_CONSTRAINT_UNIQUE
)

// sqliteCoder is a SQLite driver error carrying its (extended) result code:
// modernc.org/sqlite's *sqlite.Error.
type sqliteCoder interface{ Code() int }

// sqlStater is a PostgreSQL driver error carrying its SQLSTATE: pgx's
// *pgconn.PgError and lib/pq's *pq.Error.
type sqlStater interface{ SQLState() string }

// IsRetryable reports whether err (or an error it wraps) means the
// transaction lost a race and may succeed if run again from the start:
// SQLite SQLITE_BUSY or SQLITE_LOCKED (any extended code), PostgreSQL
// serialization_failure (40001) or deadlock_detected (40P01).
//
// The package links no driver: it recognises an error by its methods, a
// `Code() int` SQLite result code (modernc.org/sqlite) or a
// `SQLState() string` (pgx, lib/pq). A driver whose errors have neither
// (github.com/mattn/go-sqlite3) gets no retries from [DB.InTx]; its
// busy_timeout still makes a writer wait for the lock.
func IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	var pe sqlStater
	if errors.As(err, &pe) {
		code := pe.SQLState()
		return code == "40001" || code == "40P01"
	}
	var se sqliteCoder
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqliteBusy, sqliteLocked:
			return true
		}
	}
	return false
}

// IsUniqueViolation reports whether err (or an error it wraps) is a primary
// key or unique constraint violation: SQLite SQLITE_CONSTRAINT_PRIMARYKEY or
// SQLITE_CONSTRAINT_UNIQUE, PostgreSQL unique_violation (23505). Errors are
// recognised as by [IsRetryable].
func IsUniqueViolation(err error) bool {
	if err == nil {
		return false
	}
	var pe sqlStater
	if errors.As(err, &pe) {
		return pe.SQLState() == "23505"
	}
	var se sqliteCoder
	if errors.As(err, &se) {
		c := se.Code()
		return c == sqliteConstraintPrimaryKey || c == sqliteConstraintUnique
	}
	return false
}
