// Package storetest opens throw-away databases for tests, migrated to the
// order system's schema (or empty: EachEmpty): a SQLite file in t.TempDir(),
// and, when the ORDERCAST_TEST_POSTGRES environment variable holds a
// PostgreSQL DSN, a fresh schema in that database that is dropped when the
// test ends. It is the runtime's internal/testkit/dbtest with [store.Migrate].
//
// Typical use runs a test on every available dialect:
//
//	storetest.Each(t, func(t *testing.T, db *store.DB) { ... })
package storetest

import (
	"context"
	"testing"

	"github.com/ordercast/ordercast/internal/testkit/dbtest"
	"github.com/ordercast/ordercast/ordersystem/store"
)

// PostgresEnv is the environment variable holding the PostgreSQL DSN that
// Postgres and Each use, e.g. "postgres://postgres@127.0.0.1:5432/postgres".
// When it is empty, PostgreSQL tests are skipped.
const PostgresEnv = dbtest.PostgresEnv

func migrate(ctx context.Context, db *store.DB) error { return store.Migrate(ctx, db) }

// SQLite returns a migrated SQLite database in a new file under t.TempDir(),
// closed when the test ends. It fails the test on error.
func SQLite(t testing.TB) *store.DB {
	t.Helper()
	return dbtest.SQLite(t, migrate)
}

// SQLitePath opens (and migrates) the SQLite database at path, which may
// already exist, closed when the test ends; for tests that open one file
// twice. It fails the test on error.
func SQLitePath(t testing.TB, path string) *store.DB {
	t.Helper()
	return dbtest.SQLitePath(t, path, migrate)
}

// Another returns a second, fresh migrated database of db's dialect
// (SQLite, or PostgreSQL as Postgres gives it), closed at the test's end:
// for tests that apply the same events two ways and compare the rows.
func Another(t testing.TB, db *store.DB) *store.DB {
	t.Helper()
	return dbtest.Another(t, db, migrate)
}

// Postgres returns a migrated PostgreSQL database: a new schema, named
// ordercast_test_<random>, in the database ORDERCAST_TEST_POSTGRES names,
// made the connection's search_path; the schema is dropped and the DB closed
// when the test ends. It skips the test, saying why, when the variable is
// unset, and fails it on any other error.
func Postgres(t testing.TB) *store.DB {
	t.Helper()
	return dbtest.Postgres(t, migrate)
}

// Each runs fn as the subtests "sqlite" and "postgres", each with its own
// fresh database from SQLite and Postgres; the postgres one is skipped when
// ORDERCAST_TEST_POSTGRES is unset.
func Each(t *testing.T, fn func(t *testing.T, db *store.DB)) {
	t.Helper()
	dbtest.Each(t, migrate, fn)
}

// EachEmpty is Each with databases in which no table exists yet (store.Migrate
// has not run), for tests of schemas other than the order system's, such as
// inbox.Migrate's and outbox.Migrate's.
func EachEmpty(t *testing.T, fn func(t *testing.T, db *store.DB)) {
	t.Helper()
	dbtest.Each(t, nil, fn)
}
