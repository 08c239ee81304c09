package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/ordercast/ordercast/sqldb"
)

// schemaDDL creates the outbox table (records to publish, relayed in id
// order) and its index of unsent rows (see the package doc for the layout);
// {{TABLE}} is the table's name, {{ID}} and {{BLOB}} the dialect's identity
// and binary column types. (This repository's order system creates the same
// columns and index in its own migrations; a test of package store compares
// them.)
var schemaDDL = []string{
	`CREATE TABLE IF NOT EXISTS {{TABLE}} (
    id         {{ID}},
    topic      TEXT NOT NULL,
    record_key {{BLOB}},
    value      {{BLOB}},
    headers    TEXT,
    created_at BIGINT NOT NULL,
    sent_at    BIGINT,
    trace_context TEXT
)`,
	`CREATE INDEX IF NOT EXISTS {{TABLE}}_unsent ON {{TABLE}} (id) WHERE sent_at IS NULL`,
}

// Schema returns the SQL that creates the outbox table named table
// (DefaultTable when empty) and its index <table>_unsent in dialect d, two
// statements each ending with a semicolon, for a migration tool of your own
// (golang-migrate, goose, Atlas, a plain .sql file): the statements [Migrate]
// runs. They are idempotent (CREATE ... IF NOT EXISTS). The dialects differ
// in the id column ([sqldb.Dialect.IdentityType]) and the binary columns
// ([sqldb.Dialect.BlobType]). It returns an error if table is not a plain
// lower-case identifier (see sqldb.CheckTableName) or d is unknown.
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
		return nil, fmt.Errorf("outbox: schema: unknown %v", d)
	}
	if table == "" {
		table = DefaultTable
	}
	if err := sqldb.CheckTableName(table); err != nil {
		return nil, fmt.Errorf("outbox: schema: %w", err)
	}
	r := strings.NewReplacer("{{TABLE}}", table, "{{ID}}", d.IdentityType(), "{{BLOB}}", d.BlobType())
	out := make([]string, len(schemaDDL))
	for i, s := range schemaDDL {
		out[i] = r.Replace(s)
	}
	return out, nil
}

// Migrate is [Outbox.Migrate] for the table named DefaultTable of db.
func Migrate(ctx context.Context, db *sqldb.DB) error {
	return newOutbox(db, DefaultTable).Migrate(ctx)
}

// Migrate creates the outbox's table and index in its database if they do
// not exist (the statements of [Schema]), and nothing else: no other table,
// no record of a schema version. The transactional relay's progress lives in
// Kafka, not in a table, so it needs nothing more.
//
// It is idempotent and safe to call from several processes at once: it runs
// in one sqldb.DB.ExecSchema transaction, under PostgreSQL's schema advisory
// lock or SQLite's write lock, so concurrent calls serialise and a failure
// creates nothing.
//
// It returns an error wrapped with "outbox: migrate" when a statement fails
// or when a table of that name already exists without a column the relay
// needs (Migrate does not alter an existing table: a table from before
// trace_context gets it with `ALTER TABLE outbox ADD COLUMN trace_context TEXT`).
func (o *Outbox) Migrate(ctx context.Context) error {
	stmts, err := schema(o.db.Dialect, o.table)
	if err != nil {
		return fmt.Errorf("outbox: migrate: %w", err)
	}
	return o.db.ExecSchema(ctx, "outbox: migrate table "+o.table, stmts, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `SELECT id, topic, record_key, value, headers, created_at, sent_at, trace_context FROM `+o.table+` WHERE 1 = 0`); err != nil {
			return fmt.Errorf("the existing table lacks a column the relay needs (trace_context is added by ALTER TABLE %s ADD COLUMN trace_context TEXT): %w", o.table, err)
		}
		return nil
	})
}
