package sqldb

import (
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
)

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

// IsConnectionLost reports whether err (or an error it wraps) means the
// PostgreSQL session was ended under the transaction: admin_shutdown (57P01:
// pg_terminate_backend, a fast shutdown), crash_shutdown (57P02: another
// backend crashed, or an immediate shutdown), cannot_connect_now (57P03: the
// server is starting), any connection_exception (class 08), or an error pgx
// marks safe to retry (nothing was sent: a SafeToRetry() method, as pgconn's errors have). Codes from the
// PostgreSQL manual, Appendix A. Also a network error of the session's
// socket (a reset, EOF: the server crashed under it) and database/sql's
// driver.ErrBadConn, and what RegisterConnectionLost added (sqldb/drivers: pgconn.ErrConnClosed). InTx runs such a transaction again unless
// the connection was lost in COMMIT, whose outcome is then unknown.
func IsConnectionLost(err error) bool {
	if err == nil {
		return false
	}
	var st sqlStater
	if errors.As(err, &st) {
		c := st.SQLState()
		return c == "57P01" || c == "57P02" || c == "57P03" || strings.HasPrefix(c, "08")
	}
	var safe interface{ SafeToRetry() bool } // pgconn's errors: nothing was sent
	if errors.As(err, &safe) && safe.SafeToRetry() {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, driver.ErrBadConn) {
		return true
	}
	connLostMu.RLock()
	defer connLostMu.RUnlock()
	for _, f := range connLost {
		if f(err) {
			return true
		}
	}
	return false
}

var (
	connLostMu sync.RWMutex
	connLost   []func(error) bool
)

// RegisterConnectionLost adds a test IsConnectionLost also applies: for a
// driver's own "connection closed" sentinel that is not a net.Error nor
// driver.ErrBadConn (pgx's pgconn.ErrConnClosed, which package sqldb/drivers
// registers). Safe for concurrent use; meant to be called from init.
func RegisterConnectionLost(f func(error) bool) {
	connLostMu.Lock()
	defer connLostMu.Unlock()
	connLost = append(connLost, f)
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
