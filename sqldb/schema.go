package sqldb

import (
	"context"
	"database/sql"
	"fmt"
)

// SchemaLockKey is the PostgreSQL advisory lock [DB.InSchemaTx] holds
// ("ordercas" in ASCII, the key the order system's migrations have always
// taken, so that they and the runtime's table creation serialise).
const SchemaLockKey = 0x6f72646572636173

// InSchemaTx runs fn like [DB.InTx] (same retries, rollback and error rules),
// for schema changes: on PostgreSQL the transaction first takes the
// transaction-scoped advisory lock SchemaLockKey (pg_advisory_xact_lock), so
// that schema changes made through InSchemaTx from several processes at once
// run one after the other instead of racing (concurrent CREATE TABLE IF NOT
// EXISTS of one table can fail on PostgreSQL with a unique violation in its
// catalog); on SQLite the write lock every InTx transaction takes at BEGIN
// does the same. DDL is transactional in both dialects: when fn fails,
// nothing it created is kept. It blocks while another process holds the lock;
// ctx bounds the wait. An error taking the lock is returned wrapped with
// "sqldb: schema lock".
func (db *DB) InSchemaTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return db.InTx(ctx, func(tx *sql.Tx) error {
		if db.Dialect == Postgres {
			if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(SchemaLockKey)); err != nil {
				return fmt.Errorf("sqldb: schema lock: %w", err)
			}
		}
		return fn(tx)
	})
}
