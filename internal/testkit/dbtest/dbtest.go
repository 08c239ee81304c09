// Package dbtest opens throw-away databases for the runtime's tests: a SQLite
// file in t.TempDir() (modernc.org/sqlite, through sqldb/drivers), and, when
// the ORDERCAST_TEST_POSTGRES environment variable holds a PostgreSQL DSN, a
// fresh schema in that database that is dropped when the test ends (pgx).
// Each database is created by a [Migrate] function given by the caller
// ([Runtime] for the inbox's and outbox's default tables, nil for none), so
// the kit knows no application schema; the order system's test kit
// (ordersystem/store/storetest) is this one with its own migrations.
//
// Typical use runs a test on every available dialect:
//
//	dbtest.Each(t, dbtest.Runtime, func(t *testing.T, db *sqldb.DB) { ... })
package dbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ordercast/ordercast/inbox"
	"github.com/ordercast/ordercast/outbox"
	"github.com/ordercast/ordercast/sqldb"
	"github.com/ordercast/ordercast/sqldb/drivers"
)

// PostgresEnv is the environment variable holding the PostgreSQL DSN that
// Postgres and Each use, e.g. "postgres://postgres@127.0.0.1:5432/postgres".
// When it is empty, PostgreSQL tests are skipped.
const PostgresEnv = "ORDERCAST_TEST_POSTGRES"

// Migrate creates the tables a test needs in a fresh, empty database. A nil
// Migrate creates none.
type Migrate func(ctx context.Context, db *sqldb.DB) error

// Runtime is a [Migrate] creating the runtime's default tables: the inbox's
// (inbox.Migrate) and the outbox's (outbox.Migrate).
func Runtime(ctx context.Context, db *sqldb.DB) error {
	if err := inbox.Migrate(ctx, db); err != nil {
		return err
	}
	return outbox.Migrate(ctx, db)
}

// SQLite returns a SQLite database in a new file under t.TempDir(), made by
// migrate (nil: no table), closed when the test ends. It fails the test on
// error.
func SQLite(t testing.TB, migrate Migrate) *sqldb.DB {
	t.Helper()
	return SQLitePath(t, filepath.Join(t.TempDir(), "ordercast.db"), migrate)
}

// SQLitePath opens the SQLite database at path, which may already exist, and
// runs migrate on it (nil: nothing), closed when the test ends; for tests
// that open one file twice. It fails the test on error.
func SQLitePath(t testing.TB, path string, migrate Migrate) *sqldb.DB {
	t.Helper()
	return Open(t, "sqlite:"+path, migrate)
}

// Postgres returns a PostgreSQL database: a new schema, named
// ordercast_test_<random>, in the database ORDERCAST_TEST_POSTGRES names,
// made the connection's search_path, with the tables of migrate (nil: none);
// the schema is dropped and the DB closed when the test ends. It skips the
// test, saying why, when the variable is unset, and fails it on any other
// error.
func Postgres(t testing.TB, migrate Migrate) *sqldb.DB {
	t.Helper()
	base := os.Getenv(PostgresEnv)
	if base == "" {
		t.Skipf("PostgreSQL tests skipped: set %s to a PostgreSQL DSN (postgres://user@host:port/db) to run them", PostgresEnv)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := drivers.Open(ctx, base)
	if err != nil {
		t.Fatalf("dbtest: open %s: %v", PostgresEnv, err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "ordercast_test_" + hex.EncodeToString(b[:])
	if _, err := admin.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
		_ = admin.Close()
		t.Fatalf("dbtest: create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, `DROP SCHEMA `+schema+` CASCADE`); err != nil {
			t.Errorf("dbtest: drop schema %s: %v", schema, err)
		}
		_ = admin.Close()
	})
	return Open(t, withSearchPath(t, base, schema), migrate)
}

// Another returns a second, fresh database of db's dialect (SQLite, or
// PostgreSQL as Postgres gives it) made by migrate, closed at the test's
// end: for tests that apply the same events two ways and compare the rows.
func Another(t testing.TB, db *sqldb.DB, migrate Migrate) *sqldb.DB {
	t.Helper()
	if db.Dialect == sqldb.Postgres {
		return Postgres(t, migrate)
	}
	return SQLite(t, migrate)
}

// Each runs fn as the subtests "sqlite" and "postgres", each with its own
// fresh database from SQLite and Postgres made by migrate; the postgres one
// is skipped when ORDERCAST_TEST_POSTGRES is unset.
func Each(t *testing.T, migrate Migrate, fn func(t *testing.T, db *sqldb.DB)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) { fn(t, SQLite(t, migrate)) })
	t.Run("postgres", func(t *testing.T) { fn(t, Postgres(t, migrate)) })
}

// Open opens dsn with sqldb/drivers and runs migrate on it (nil: nothing),
// closed when the test ends. It fails the test on error.
func Open(t testing.TB, dsn string, migrate Migrate) *sqldb.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := drivers.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("dbtest: open: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if migrate != nil {
		if err := migrate(ctx, db); err != nil {
			t.Fatalf("dbtest: migrate: %v", err)
		}
	}
	return db
}

// withSearchPath adds search_path=schema to a postgres:// URL DSN; pgx passes
// unknown parameters to the server as run-time parameters.
func withSearchPath(t testing.TB, dsn, schema string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil || !strings.HasPrefix(u.Scheme, "postgres") {
		t.Fatalf("dbtest: %s must be a postgres:// URL: %v", PostgresEnv, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
