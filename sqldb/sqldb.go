// Package sqldb is the SQL layer the runtime's inbox and outbox write
// through: a *sql.DB the caller opened, with its dialect (SQLite or
// PostgreSQL) and transactions with bounded retries. It links no driver and
// holds no schema: bring a database/sql driver of your own (modernc.org/sqlite,
// github.com/jackc/pgx/v5/stdlib, ...), open the database with it and wrap it
// with [New]. Package sqldb/drivers opens one by DSN with bundled drivers and
// tuned settings, for programs that want those.
//
//	sqlDB, err := sql.Open("sqlite", "billing.db?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
//	...
//	db, err := sqldb.New(sqlDB, sqldb.SQLite)
//
// Effects are written through [DB.InTx], in one transaction with their inbox
// row (package inbox) and, where they publish, their outbox row (package
// outbox). Queries are written once with `?` placeholders and passed through
// [DB.Rebind], which turns them into `$1, $2, ...` for PostgreSQL.
//
// Portability rules that schemas written for both dialects follow: times are
// BIGINT unix milliseconds, binary columns are [Dialect.BlobType] (BLOB on
// SQLite, BYTEA on PostgreSQL), auto-increment keys are [Dialect.IdentityType],
// and upserts use `INSERT ... ON CONFLICT ... DO NOTHING/UPDATE`, which both
// dialects accept (SQLite 3.24 and later). Schema changes run in
// [DB.InSchemaTx].
package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Dialect is the SQL dialect of a [DB].
type Dialect int

const (
	// SQLite is SQLite 3.24 or later, through any database/sql driver
	// (modernc.org/sqlite, github.com/mattn/go-sqlite3).
	SQLite Dialect = iota + 1
	// Postgres is PostgreSQL through any database/sql driver (pgx's
	// github.com/jackc/pgx/v5/stdlib, lib/pq).
	Postgres
)

// DefaultMaxTxAttempts is the number of times [DB.InTx] runs a transaction
// that keeps failing with a retryable error (see [IsRetryable]) before it
// gives up, when DB.MaxTxAttempts is zero.
const DefaultMaxTxAttempts = 5

// String returns "sqlite" or "postgres".
func (d Dialect) String() string {
	switch d {
	case SQLite:
		return "sqlite"
	case Postgres:
		return "postgres"
	default:
		return "dialect(" + strconv.Itoa(int(d)) + ")"
	}
}

// Rebind returns query with its `?` placeholders numbered `$1, $2, ...` for
// Postgres, and query unchanged for SQLite. Question marks inside
// single-quoted literals and double-quoted identifiers are left alone; do not
// put one in an SQL comment. It is cheap and safe for concurrent use.
func (d Dialect) Rebind(query string) string {
	if d != Postgres {
		return query
	}
	return rebindDollar(query)
}

// BlobType is the column type for binary data in this dialect: "BLOB" on
// SQLite, "BYTEA" on PostgreSQL.
func (d Dialect) BlobType() string {
	if d == Postgres {
		return "BYTEA"
	}
	return "BLOB"
}

// IdentityType is the column type of an auto-increment BIGINT primary key in
// this dialect: "INTEGER PRIMARY KEY AUTOINCREMENT" on SQLite (ids never
// reused, even after the highest row is deleted), "BIGINT GENERATED ALWAYS
// AS IDENTITY PRIMARY KEY" on PostgreSQL.
func (d Dialect) IdentityType() string {
	if d == Postgres {
		return "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"
	}
	return "INTEGER PRIMARY KEY AUTOINCREMENT"
}

// DB is an open database: the embedded *sql.DB (a pool, safe for concurrent
// use) plus its dialect and the transaction helpers. Make it with [New] (or
// sqldb/drivers.Open), once per database, and share it: on SQLite it holds
// the queue that serialises this process's write transactions (see
// [DB.InTx]), which only works if every writer goes through the same DB.
//
// The exported fields may be changed before the DB is shared between
// goroutines, not afterwards.
type DB struct {
	*sql.DB

	// Dialect is SQLite or Postgres; it never changes after New.
	Dialect Dialect

	// MaxTxAttempts bounds how many times [DB.InTx] runs one transaction
	// when it fails with a retryable error. Zero means DefaultMaxTxAttempts;
	// 1 disables retries.
	MaxTxAttempts int

	// OnTxRetry, when set, is called by [DB.InTx] before each retry with the
	// number of the attempt that failed (1 for the first) and its error. It
	// is for metrics and logs; it runs on the caller's goroutine and must not
	// block for long. Several goroutines may call it at once.
	OnTxRetry func(attempt int, err error)

	// writeSem serialises this process's write transactions on SQLite (a
	// one-slot semaphore); nil on PostgreSQL. See InTx.
	writeSem chan struct{}
	// writeConn is the pool connection SQLite write transactions run on,
	// taken at the first one and kept (guarded by writeSem): SQLite drops a
	// connection's whole page cache when another connection has written
	// since its last transaction, so writes spread over the pool each began
	// with a cold cache and read their B-tree pages back from the WAL and the
	// file. Nil on PostgreSQL, before the first write, and while the pool
	// allows a single connection (the readers would have none). See InTx.
	writeConn *sql.Conn
	// ckptStop stops the background checkpointer and waits for it; wrote
	// tells it a write committed. Both nil unless CheckpointInBackground ran.
	ckptStop func()
	wrote    chan struct{}
	// stmts are the statements TxStmt keeps prepared.
	stmts stmtCache
}

// New wraps db, a database the caller opened with a driver of its choice, as
// a DB of dialect d (SQLite or Postgres); it neither pings nor configures db,
// and creates no tables. Closing the returned DB closes db.
//
// For SQLite, open db so that every connection has a busy_timeout (how long
// a writer waits for another process's write lock before SQLITE_BUSY) and,
// for a file shared by several processes, journal_mode=WAL; with
// modernc.org/sqlite, "_txlock=immediate" in the DSN makes each read-write
// transaction take the write lock at BEGIN, so transactions of several
// processes that read before they write queue on busy_timeout instead of
// failing at once with SQLITE_BUSY. An in-memory database needs
// db.SetMaxOpenConns(1): every connection to ":memory:" is a database of its
// own. sqldb/drivers.Open does all of this.
//
// New returns an error, and wraps nothing, if db is nil or d is neither
// SQLite nor Postgres.
func New(db *sql.DB, d Dialect) (*DB, error) {
	if db == nil {
		return nil, errors.New("sqldb: new: nil *sql.DB")
	}
	out := &DB{DB: db, Dialect: d}
	switch d {
	case SQLite:
		out.writeSem = make(chan struct{}, 1)
	case Postgres:
	default:
		return nil, fmt.Errorf("sqldb: new: unknown %v: want sqldb.SQLite or sqldb.Postgres", d)
	}
	return out, nil
}

// Close stops the background checkpointer (see
// [DB.CheckpointInBackground]), closes the statements [DB.TxStmt] kept, releases the connection SQLite write
// transactions keep (see [DB.InTx]) and closes the pool ([sql.DB.Close]). It waits for a write
// transaction in progress to end first. Close the DB with this method, not
// the embedded *sql.DB's: that one would leave the kept connection open.
func (db *DB) Close() error {
	if db.ckptStop != nil {
		db.ckptStop()
	}
	if db.writeSem != nil {
		db.writeSem <- struct{}{}
		if db.writeConn != nil {
			_ = db.writeConn.Close()
			db.writeConn = nil
		}
		<-db.writeSem
	}
	db.closeStmts()
	return db.DB.Close()
}

// Rebind is [Dialect.Rebind] for the database's dialect.
func (db *DB) Rebind(query string) string { return db.Dialect.Rebind(query) }

// BlobType is [Dialect.BlobType] for the database's dialect.
func (db *DB) BlobType() string { return db.Dialect.BlobType() }

// IdentityType is [Dialect.IdentityType] for the database's dialect.
func (db *DB) IdentityType() string { return db.Dialect.IdentityType() }

func rebindDollar(query string) string {
	if !strings.Contains(query, "?") {
		return query
	}
	var b strings.Builder
	b.Grow(len(query) + 16)
	n := 0
	var quote byte // 0, '\'' or '"'
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '?':
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// QueryStrings runs q (with args, in the database's placeholder style: see
// Rebind) and returns the first column of every row as a string, a NULL as
// "". The error names the query. Safe for concurrent use.
func (db *DB) QueryStrings(ctx context.Context, q string, args ...any) ([]string, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqldb: %s: %w", q, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s sql.NullString
		if err := rows.Scan(&s); err != nil {
			return nil, fmt.Errorf("sqldb: %s: %w", q, err)
		}
		out = append(out, s.String)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqldb: %s: %w", q, err)
	}
	return out, nil
}
