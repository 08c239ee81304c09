package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/ordercast/ordercast/sqldb"
)

// tableDDL creates the inbox table (see the package doc for its layout);
// {{TABLE}} is its name. (This repository's order system creates the same
// columns in its own migrations; a test of package store compares them.)
const tableDDL = `CREATE TABLE IF NOT EXISTS {{TABLE}} (
    consumer_group TEXT NOT NULL,
    event_id       TEXT NOT NULL,
    topic          TEXT NOT NULL,
    "partition"    INTEGER NOT NULL,
    "offset"       BIGINT NOT NULL,
    processed_at   BIGINT NOT NULL,
    digest         TEXT,
    PRIMARY KEY (consumer_group, event_id)
)`

// Schema returns the SQL that creates the inbox table named table
// (DefaultTable when empty) in dialect d, one statement ending with a
// semicolon, for a migration tool of your own (golang-migrate, goose, Atlas,
// a plain .sql file): the statement [Migrate] runs. It is idempotent
// (CREATE TABLE IF NOT EXISTS), and the same in SQLite and PostgreSQL today;
// d is taken so that a later layout may differ. It returns an error if table
// is not a plain lower-case identifier (see sqldb.CheckTableName) or d is
// unknown.
func Schema(d sqldb.Dialect, table string) (string, error) {
	stmts, err := schema(d, table)
	if err != nil {
		return "", err
	}
	return strings.Join(stmts, ";\n\n") + ";\n", nil
}

// schema is Schema as statements without their semicolons.
func schema(d sqldb.Dialect, table string) ([]string, error) {
	if d != sqldb.SQLite && d != sqldb.Postgres {
		return nil, fmt.Errorf("inbox: schema: unknown %v", d)
	}
	if table == "" {
		table = DefaultTable
	}
	if err := sqldb.CheckTableName(table); err != nil {
		return nil, fmt.Errorf("inbox: schema: %w", err)
	}
	return []string{strings.ReplaceAll(tableDDL, "{{TABLE}}", table)}, nil
}

// Migrate is [Inbox.Migrate] for the table named DefaultTable of db.
func Migrate(ctx context.Context, db *sqldb.DB) error {
	return newInbox(db, DefaultTable).Migrate(ctx)
}

// Migrate creates the inbox's table in its database if it does not exist
// (the statement of [Schema]), and nothing else: no other table, no record of
// a schema version.
//
// It is idempotent and safe to call from several processes at once: it runs
// in one sqldb.DB.ExecSchema transaction, under PostgreSQL's schema advisory
// lock or SQLite's write lock, so concurrent calls serialise and a failure
// creates nothing.
//
// It returns an error wrapped with "inbox: migrate" when the statement fails
// or when a table of that name already exists without a column Process needs
// (an inbox table from before digests lacks digest: add it with
// `ALTER TABLE inbox ADD COLUMN digest TEXT`): Migrate does not alter an
// existing table.
func (in *Inbox) Migrate(ctx context.Context) error {
	stmts, err := schema(in.db.Dialect, in.table)
	if err != nil {
		return fmt.Errorf("inbox: migrate: %w", err)
	}
	return in.db.ExecSchema(ctx, "inbox: migrate table "+in.table, stmts, func(tx *sql.Tx) error {
		// Every column Process and Seen read or write, so that a table of an
		// older shape fails here rather than at the first event.
		if _, err := tx.ExecContext(ctx, `SELECT consumer_group, event_id, topic, "partition", "offset", processed_at, digest FROM `+in.table+` WHERE 1 = 0`); err != nil {
			return fmt.Errorf("the existing table lacks a column Process needs (digest is added by ALTER TABLE %s ADD COLUMN digest TEXT): %w", in.table, err)
		}
		return nil
	})
}
