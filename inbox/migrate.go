package inbox

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/ordercast/ordercast/sqldb"
)

// tableDDL creates the inbox table: one row per (consumer group, event id)
// applied. Its columns are those of the order system's schema (package store,
// migrations 1 and 4), in the same order; a test compares them.
const tableDDL = `CREATE TABLE IF NOT EXISTS inbox (
			consumer_group TEXT NOT NULL,
			event_id       TEXT NOT NULL,
			topic          TEXT NOT NULL,
			"partition"    INTEGER NOT NULL,
			"offset"       BIGINT NOT NULL,
			processed_at   BIGINT NOT NULL,
			digest         TEXT,
			PRIMARY KEY (consumer_group, event_id)
		)`

// Migrate creates the table [Process] and [Seen] use, inbox(consumer_group,
// event_id, topic, "partition", "offset", processed_at, digest) with primary
// key (consumer_group, event_id), in db if it does not exist, and nothing
// else: no other table, no schema_migrations record. It is for a database of
// your own; a database the order system's migrations manage (store.Migrate)
// already has the table and Migrate leaves it alone there.
//
// It is idempotent (CREATE TABLE IF NOT EXISTS) and safe to call from several
// processes at once: it runs in one [sqldb.DB.InSchemaTx] transaction, under
// PostgreSQL's schema advisory lock or SQLite's write lock, so concurrent
// calls serialise and a failure creates nothing. Both dialects, SQLite and
// PostgreSQL, get the same table.
//
// It returns an error wrapped with "inbox: migrate" when the statement fails
// or when an inbox table already exists without the digest column (one made
// by a release of the schema before digests; add it with
// `ALTER TABLE inbox ADD COLUMN digest TEXT`, which is what the order
// system's migration 4 does): Migrate does not alter an existing table.
func Migrate(ctx context.Context, db *sqldb.DB) error {
	return db.InSchemaTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, tableDDL); err != nil {
			return fmt.Errorf("inbox: migrate: create table inbox: %w", err)
		}
		// Every column Process and Seen read or write, so that a table of an
		// older shape fails here rather than at the first event.
		if _, err := tx.ExecContext(ctx, `SELECT consumer_group, event_id, topic, "partition", "offset", processed_at, digest FROM inbox WHERE 1 = 0`); err != nil {
			return fmt.Errorf("inbox: migrate: the existing inbox table lacks a column Process needs (digest is added by ALTER TABLE inbox ADD COLUMN digest TEXT): %w", err)
		}
		return nil
	})
}
