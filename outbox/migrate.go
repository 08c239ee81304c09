package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/ordercast/ordercast/sqldb"
)

// schemaDDL creates the outbox table (records to publish, relayed in id
// order) and its index of unsent rows; {{ID}} and {{BLOB}} are the dialect's
// identity and binary column types. The columns and index are those of the
// order system's schema (package store, migration 1); a test compares them.
var schemaDDL = []string{
	`CREATE TABLE IF NOT EXISTS outbox (
			id         {{ID}},
			topic      TEXT NOT NULL,
			record_key {{BLOB}},
			value      {{BLOB}},
			headers    TEXT,
			created_at BIGINT NOT NULL,
			sent_at    BIGINT
		)`,
	`CREATE INDEX IF NOT EXISTS outbox_unsent ON outbox (id) WHERE sent_at IS NULL`,
}

// Migrate creates what [Enqueue], [Pending], [Prune] and the relays use, in db
// if it does not exist, and nothing else (no other table, no
// schema_migrations record): the table outbox(id, topic, record_key, value,
// headers, created_at, sent_at), whose id is an auto-increment BIGINT key
// ([sqldb.DB.IdentityType]) and record_key and value binary
// ([sqldb.DB.BlobType]), and the partial index outbox_unsent on the unsent
// rows' ids. It is for a database of your own; a database the order system's
// migrations manage (store.Migrate) already has both and Migrate leaves them
// alone there. The transactional relay's progress lives in Kafka, not in a
// table, so it needs nothing more.
//
// It is idempotent (CREATE TABLE/INDEX IF NOT EXISTS) and safe to call from
// several processes at once: it runs in one [sqldb.DB.InSchemaTx]
// transaction, under PostgreSQL's schema advisory lock or SQLite's write
// lock, so concurrent calls serialise and a failure creates nothing. SQLite
// and PostgreSQL are supported.
//
// It returns an error wrapped with "outbox: migrate" when a statement fails or
// when an existing outbox table lacks a column the relay needs (Migrate does
// not alter an existing table).
func Migrate(ctx context.Context, db *sqldb.DB) error {
	types := strings.NewReplacer("{{ID}}", db.IdentityType(), "{{BLOB}}", db.BlobType())
	return db.InSchemaTx(ctx, func(tx *sql.Tx) error {
		for i, stmt := range schemaDDL {
			if _, err := tx.ExecContext(ctx, types.Replace(stmt)); err != nil {
				return fmt.Errorf("outbox: migrate: statement %d: %w", i+1, err)
			}
		}
		if _, err := tx.ExecContext(ctx, `SELECT id, topic, record_key, value, headers, created_at, sent_at FROM outbox WHERE 1 = 0`); err != nil {
			return fmt.Errorf("outbox: migrate: the existing outbox table lacks a column the relay needs: %w", err)
		}
		return nil
	})
}
