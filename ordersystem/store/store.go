// Package store is the order system's database: the generic SQL layer of
// package sqldb (transactions with retries, Rebind, dialects) and the DSN
// opener of sqldb/drivers, which it re-exports under its own names so that
// the services need one import, plus the order system's schema and its
// versioned migrations ([Migrate]).
//
// Every service writes its effects through [DB.InTx], in one transaction with
// its inbox row (package inbox) and, where it publishes, its outbox row
// (package outbox). The inbox and outbox tables are part of this schema
// (migrations 1 and 4); a database without the order system gets them from
// inbox.Migrate and outbox.Migrate instead.
//
// Portability rules the schema follows: money is BIGINT thousandths of GBP
// (order.Money), times are BIGINT unix milliseconds, binary columns are BLOB
// on SQLite and BYTEA on PostgreSQL, and upserts use `INSERT ... ON CONFLICT
// ... DO NOTHING/UPDATE`, which both dialects accept (SQLite 3.24 and later).
package store

import (
	"context"

	"github.com/ordercast/ordercast/sqldb"
	"github.com/ordercast/ordercast/sqldb/drivers"
)

// DB is [sqldb.DB]: an open database, its dialect and the transaction helpers.
type DB = sqldb.DB

// Dialect is [sqldb.Dialect].
type Dialect = sqldb.Dialect

// The dialects of package sqldb and the connection settings of
// sqldb/drivers.
const (
	SQLite               = sqldb.SQLite
	Postgres             = sqldb.Postgres
	SQLiteBusyTimeout    = drivers.SQLiteBusyTimeout
	SQLiteMaxOpenConns   = drivers.SQLiteMaxOpenConns
	PostgresMaxOpenConns = drivers.PostgresMaxOpenConns
	DefaultMaxTxAttempts = sqldb.DefaultMaxTxAttempts
)

// Open is sqldb/drivers.Open: it opens and pings the database dsn names with
// the bundled drivers and creates no tables; call [Migrate] for the order
// system's schema.
func Open(ctx context.Context, dsn string) (*DB, error) { return drivers.Open(ctx, dsn) }
