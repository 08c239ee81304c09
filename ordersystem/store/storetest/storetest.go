// Package storetest opens throw-away databases for tests, migrated to the
// order system's schema (or empty: EachEmpty): a SQLite
// file in t.TempDir(), and, when the ORDERCAST_TEST_POSTGRES environment
// variable holds a PostgreSQL DSN, a fresh schema in that database that is
// dropped when the test ends.
//
// Typical use runs a test on every available dialect:
//
//	storetest.Each(t, func(t *testing.T, db *store.DB) { ... })
package storetest

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

	"github.com/ordercast/ordercast/ordersystem/store"
)

// PostgresEnv is the environment variable holding the PostgreSQL DSN that
// Postgres and Each use, e.g. "postgres://postgres@127.0.0.1:5432/postgres".
// When it is empty, PostgreSQL tests are skipped.
const PostgresEnv = "ORDERCAST_TEST_POSTGRES"

// SQLite returns a migrated SQLite database in a new file under t.TempDir(),
// closed when the test ends. It fails the test on error.
func SQLite(t testing.TB) *store.DB {
	t.Helper()
	return open(t, "sqlite:"+filepath.Join(t.TempDir(), "ordercast.db"))
}

// SQLitePath opens (and migrates) the SQLite database at path, which may
// already exist, closed when the test ends; for tests that open one file
// twice. It fails the test on error.
func SQLitePath(t testing.TB, path string) *store.DB {
	t.Helper()
	return open(t, "sqlite:"+path)
}

// Another returns a second, fresh migrated database of db's dialect
// (SQLite, or PostgreSQL as Postgres gives it), closed at the test's end:
// for tests that apply the same events two ways and compare the rows.
func Another(t testing.TB, db *store.DB) *store.DB {
	t.Helper()
	if db.Dialect == store.Postgres {
		return Postgres(t)
	}
	return SQLite(t)
}

// Postgres returns a migrated PostgreSQL database: a new schema, named
// ordercast_test_<random>, in the database ORDERCAST_TEST_POSTGRES names,
// made the connection's search_path; the schema is dropped and the DB closed
// when the test ends. It skips the test, saying why, when the variable is
// unset, and fails it on any other error.
func Postgres(t testing.TB) *store.DB {
	t.Helper()
	return postgres(t, false)
}

func postgres(t testing.TB, empty bool) *store.DB {
	t.Helper()
	base := os.Getenv(PostgresEnv)
	if base == "" {
		t.Skipf("PostgreSQL tests skipped: set %s to a PostgreSQL DSN (postgres://user@host:port/db) to run them", PostgresEnv)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := store.Open(ctx, base)
	if err != nil {
		t.Fatalf("storetest: open %s: %v", PostgresEnv, err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "ordercast_test_" + hex.EncodeToString(b[:])
	if _, err := admin.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
		_ = admin.Close()
		t.Fatalf("storetest: create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, `DROP SCHEMA `+schema+` CASCADE`); err != nil {
			t.Errorf("storetest: drop schema %s: %v", schema, err)
		}
		_ = admin.Close()
	})
	dsn := withSearchPath(t, base, schema)
	if empty {
		return openEmpty(t, dsn)
	}
	return open(t, dsn)
}

// withSearchPath adds search_path=schema to a postgres:// URL DSN; pgx passes
// unknown parameters to the server as run-time parameters.
func withSearchPath(t testing.TB, dsn, schema string) string {
	u, err := url.Parse(dsn)
	if err != nil || !strings.HasPrefix(u.Scheme, "postgres") {
		t.Fatalf("storetest: %s must be a postgres:// URL: %v", PostgresEnv, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func open(t testing.TB, dsn string) *store.DB {
	t.Helper()
	db := openEmpty(t, dsn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := store.Migrate(ctx, db); err != nil {
		t.Fatalf("storetest: migrate: %v", err)
	}
	return db
}

// openEmpty opens dsn without creating any table, closed when the test ends.
func openEmpty(t testing.TB, dsn string) *store.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("storetest: open: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// Each runs fn as the subtests "sqlite" and "postgres", each with its own
// fresh database from SQLite and Postgres; the postgres one is skipped when
// ORDERCAST_TEST_POSTGRES is unset.
func Each(t *testing.T, fn func(t *testing.T, db *store.DB)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) { fn(t, SQLite(t)) })
	t.Run("postgres", func(t *testing.T) { fn(t, Postgres(t)) })
}

// EachEmpty is Each with databases in which no table exists yet (store.Migrate
// has not run), for tests of schemas other than the order system's, such as
// inbox.Migrate's and outbox.Migrate's.
func EachEmpty(t *testing.T, fn func(t *testing.T, db *store.DB)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) { fn(t, openEmpty(t, "sqlite:"+filepath.Join(t.TempDir(), "empty.db"))) })
	t.Run("postgres", func(t *testing.T) { fn(t, postgres(t, true)) })
}
