package sqldb

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// IsRetryable reports whether err (or an error it wraps) means the
// transaction lost a race and may succeed if run again from the start:
// SQLite SQLITE_BUSY or SQLITE_LOCKED (any extended code), PostgreSQL
// serialization_failure (40001) or deadlock_detected (40P01).
func IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return true
		}
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "40001" || pe.Code == "40P01"
	}
	return false
}

// IsUniqueViolation reports whether err (or an error it wraps) is a primary
// key or unique constraint violation: SQLite SQLITE_CONSTRAINT_PRIMARYKEY or
// SQLITE_CONSTRAINT_UNIQUE, PostgreSQL unique_violation (23505).
func IsUniqueViolation(err error) bool {
	if err == nil {
		return false
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		c := se.Code()
		return c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY || c == sqlite3.SQLITE_CONSTRAINT_UNIQUE
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "23505"
	}
	return false
}
