package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// SchemaLockKey is the PostgreSQL advisory lock [DB.InSchemaTx] holds
// ("ordercas" in ASCII). A migration tool of one's own that takes the same
// transaction-scoped lock (pg_advisory_xact_lock) serialises with the inbox
// and outbox Migrate.
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

// ExecSchema runs the schema statements stmts (DDL, each without its
// semicolon), in order, in one [DB.InSchemaTx] transaction, and then check,
// if not nil, in the same transaction: for a package that creates its own
// tables (inbox.Migrate, outbox.Migrate), check verifies that a table that
// already existed has the columns the package needs (CREATE TABLE IF NOT
// EXISTS leaves an older shape as it is). It has InSchemaTx's retries,
// locking and blocking; when any statement or check fails nothing is kept.
//
// Every error is wrapped with what (the caller's name for the step, e.g.
// "inbox: migrate table inbox"): a failing statement's as "<what>: statement
// i of n: <err>", check's and the schema lock's as "<what>: <err>".
func (db *DB) ExecSchema(ctx context.Context, what string, stmts []string, check func(tx *sql.Tx) error) error {
	err := db.InSchemaTx(ctx, func(tx *sql.Tx) error {
		for i, stmt := range stmts {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("statement %d of %d: %w", i+1, len(stmts), err)
			}
		}
		if check != nil {
			return check(tx)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// MaxTableNameLen is the longest table name [CheckTableName] accepts: 48
// bytes, leaving room within PostgreSQL's 63-byte identifiers (NAMEDATALEN
// - 1) for the names of indexes derived from it.
const MaxTableNameLen = 48

// CheckTableName returns an error, saying what is wrong, unless name is a
// plain SQL identifier that needs no quoting in either dialect: an ASCII
// letter or underscore, then letters, digits or underscores, at most
// MaxTableNameLen bytes, and lower case (PostgreSQL folds unquoted names to
// lower case, so "Inbox" would name the table inbox there and Inbox on
// SQLite). A schema-qualified name is refused: put the tables in a schema by
// the connection's search_path instead. The inbox and outbox check the table
// names they are given with it.
func CheckTableName(name string) error {
	if name == "" {
		return errors.New("sqldb: empty table name")
	}
	if len(name) > MaxTableNameLen {
		return fmt.Errorf("sqldb: table name %q is %d bytes, at most %d", name, len(name), MaxTableNameLen)
	}
	for i, c := range name {
		switch {
		case c == '_', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return fmt.Errorf("sqldb: table name %q: want lower-case letters, digits and '_', not starting with a digit (a plain identifier that needs no quoting)", name)
		}
	}
	return nil
}
