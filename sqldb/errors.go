package sqldb

import (
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

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

// IsConnectionLost reports whether err (or an error it wraps) means the
// PostgreSQL session was ended under the transaction: admin_shutdown (57P01:
// pg_terminate_backend, a fast shutdown), crash_shutdown (57P02: another
// backend crashed, or an immediate shutdown), cannot_connect_now (57P03: the
// server is starting), any connection_exception (class 08), or an error pgx
// marks safe to retry (nothing was sent: pgconn.SafeToRetry). Codes from the
// PostgreSQL manual, Appendix A. Also a network error of the session's
// socket (a reset, EOF: the server crashed under it) and database/sql's
// driver.ErrBadConn, pgconn.ErrConnClosed. InTx runs such a transaction again unless
// the connection was lost in COMMIT, whose outcome is then unknown.
func IsConnectionLost(err error) bool {
	if err == nil {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03" || strings.HasPrefix(pe.Code, "08")
	}
	var ne net.Error
	return pgconn.SafeToRetry(err) || errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, pgconn.ErrConnClosed)
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
