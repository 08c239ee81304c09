package inbox_test

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"testing"

	"github.com/ordercast/ordercast/inbox"
	"github.com/ordercast/ordercast/internal/testkit/dbtest"
	"github.com/ordercast/ordercast/sqldb"
)

// An inbox in a table of the user's naming: Migrate creates that table and
// nothing else, Schema's statement run by a migration tool makes an
// equivalent one, and two inboxes on one database keep apart: the same
// (group, event id) is applied once in each.
func TestOwnTable(t *testing.T) {
	dbtest.Each(t, nil, func(t *testing.T, db *sqldb.DB) {
		ctx := ctxT(t)
		billing, err := inbox.New(db, "billing_inbox")
		if err != nil {
			t.Fatal(err)
		}
		if err := billing.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		listTables := `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name`
		if db.Dialect == sqldb.Postgres {
			listTables = `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY table_name`
		}
		if got, err := db.QueryStrings(ctx, listTables); err != nil || !slices.Equal(got, []string{"billing_inbox"}) {
			t.Fatalf("tables after Migrate: %v, %v; want only billing_inbox", got, err)
		}
		ddl, err := inbox.Schema(db.Dialect, "audit_inbox")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, ddl); err != nil {
			t.Fatalf("running Schema's statement: %v\n%s", err, ddl)
		}
		audit, err := inbox.New(db, "audit_inbox")
		if err != nil {
			t.Fatal(err)
		}
		if err := audit.Migrate(ctx); err != nil {
			t.Fatalf("Migrate after Schema: %v", err)
		}
		if _, err := db.ExecContext(ctx, `CREATE TABLE effects (k TEXT PRIMARY KEY, n BIGINT NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		c := counter{db}
		for _, in := range []*inbox.Inbox{billing, audit, billing, audit} {
			if _, err := in.Process(ctx, "g", "ev-1", meta, func(ctx context.Context, tx *sql.Tx) error {
				return c.apply(ctx, tx, in.Table())
			}); err != nil {
				t.Fatalf("%s: %v", in.Table(), err)
			}
		}
		if c.get(t, "billing_inbox") != 1 || c.get(t, "audit_inbox") != 1 {
			t.Fatalf("effects: billing %d, audit %d; want 1 each", c.get(t, "billing_inbox"), c.get(t, "audit_inbox"))
		}
		for _, in := range []*inbox.Inbox{billing, audit} {
			if ok, err := in.Seen(ctx, "g", "ev-1"); err != nil || !ok {
				t.Fatalf("%s Seen = %v, %v", in.Table(), ok, err)
			}
		}
		// The default table was not created: the package functions fail and
		// apply nothing.
		if _, err := inbox.Process(ctx, db, "g", "ev-2", meta, func(ctx context.Context, tx *sql.Tx) error {
			return c.apply(ctx, tx, "default")
		}); err == nil || c.get(t, "default") != 0 {
			t.Fatalf("Process on the default table, which does not exist: %v", err)
		}
	})
}

// A table name that is not a plain lower-case identifier is refused by New
// and Schema with an error naming it.
func TestBadTableName(t *testing.T) {
	db := dbtest.SQLite(t, dbtest.Runtime)
	long := strings.Repeat("t", sqldb.MaxTableNameLen+1)
	for _, name := range []string{"Inbox", "1inbox", "in-box", "app.inbox", "inbox; DROP TABLE orders", `"inbox"`, long} {
		if _, err := inbox.New(db, name); err == nil || !strings.Contains(err.Error(), "table name") {
			t.Errorf("New(%q): %v, want a table name error", name, err)
		}
		if _, err := inbox.Schema(sqldb.Postgres, name); err == nil {
			t.Errorf("Schema(%q) accepted it", name)
		}
	}
	if _, err := inbox.New(nil, ""); err == nil {
		t.Error("New(nil) accepted")
	}
	if _, err := inbox.Schema(sqldb.Dialect(0), ""); err == nil {
		t.Error("Schema of an unknown dialect accepted")
	}
	if in, err := inbox.New(db, ""); err != nil || in.Table() != inbox.DefaultTable {
		t.Errorf("New(db, \"\") = %v, %v; want the table %s", in, err, inbox.DefaultTable)
	}
}
