package sqldb_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ordercast/ordercast/internal/testkit/dbtest"
	"github.com/ordercast/ordercast/sqldb"
)

// ExecSchema runs its statements in order and then the check, all in one
// transaction: a failing statement or check keeps nothing, and the error
// names the step and which statement failed.
func TestExecSchema(t *testing.T) {
	dbtest.Each(t, nil, func(t *testing.T, db *sqldb.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		exists := func(table string) bool {
			_, err := db.ExecContext(ctx, `SELECT 1 FROM `+table+` WHERE 1 = 0`)
			return err == nil
		}
		create := `CREATE TABLE IF NOT EXISTS schema_a (id INTEGER PRIMARY KEY)`
		err := db.ExecSchema(ctx, "test: migrate", []string{create, `CREATE TABLE schema_b (`}, nil)
		if err == nil || !strings.HasPrefix(err.Error(), "test: migrate: statement 2 of 2: ") || exists("schema_a") {
			t.Fatalf("a failing second statement: %v, schema_a kept %v; want the step and statement 2 of 2 named, nothing kept", err, exists("schema_a"))
		}
		errOld := errors.New("the existing table lacks a column")
		err = db.ExecSchema(ctx, "test: migrate", []string{create}, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `SELECT id FROM schema_a WHERE 1 = 0`); err != nil {
				t.Errorf("the check does not see the statements' table in its transaction: %v", err)
			}
			return errOld
		})
		if !errors.Is(err, errOld) || err.Error() != "test: migrate: the existing table lacks a column" || exists("schema_a") {
			t.Fatalf("a failing check: %v, schema_a kept %v; want its error wrapped with the step, nothing kept", err, exists("schema_a"))
		}
		checked := false
		if err := db.ExecSchema(ctx, "test: migrate", []string{create, `CREATE INDEX IF NOT EXISTS schema_a_id ON schema_a (id)`},
			func(*sql.Tx) error { checked = true; return nil }); err != nil || !checked || !exists("schema_a") {
			t.Fatalf("ExecSchema: %v, checked %v, schema_a created %v", err, checked, exists("schema_a"))
		}
	})
}
