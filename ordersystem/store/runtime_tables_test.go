package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/ordercast/ordercast/inbox"
	"github.com/ordercast/ordercast/ordersystem/store"
	"github.com/ordercast/ordercast/ordersystem/store/storetest"
	"github.com/ordercast/ordercast/outbox"
)

// runtimeMigrate creates the runtime's tables the standalone way.
func runtimeMigrate(ctx context.Context, db *store.DB) error {
	if err := inbox.Migrate(ctx, db); err != nil {
		return err
	}
	return outbox.Migrate(ctx, db)
}

// tableShape describes table's columns (name, type, nullability, default,
// key) and indexes in a form comparable between two databases of one dialect.
func tableShape(ctx context.Context, t *testing.T, db *store.DB, table string) []string {
	t.Helper()
	var q, iq string
	var schema string
	if db.Dialect == store.Postgres {
		if err := db.QueryRowContext(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
			t.Fatal(err)
		}
		q = `SELECT column_name || ' ' || data_type || ' null=' || is_nullable || ' default=' || COALESCE(column_default, '') || ' identity=' || is_identity || ' ' || COALESCE(identity_generation, '')
			FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position`
		iq = `SELECT indexname || ': ' || indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename = $1 ORDER BY indexname`
	} else {
		q = `SELECT name || ' ' || type || ' notnull=' || "notnull" || ' default=' || COALESCE(dflt_value, '') || ' pk=' || pk FROM pragma_table_info(?) ORDER BY cid`
		iq = `SELECT name || ': ' || COALESCE(sql, '') FROM sqlite_master WHERE type = 'index' AND tbl_name = ? ORDER BY name`
	}
	var out []string
	for _, query := range []string{q, iq} {
		rows, err := db.QueryContext(ctx, query, table)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			if schema != "" {
				s = strings.ReplaceAll(s, schema+".", "")
			}
			out = append(out, strings.Join(strings.Fields(s), " "))
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if len(out) == 0 {
		t.Fatalf("table %s does not exist", table)
	}
	return out
}

// tableNames lists the tables of db's schema.
func tableNames(ctx context.Context, t *testing.T, db *store.DB) []string {
	t.Helper()
	q := `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name`
	if db.Dialect == store.Postgres {
		q = `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY table_name`
	}
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	return names
}

// inbox.Migrate and outbox.Migrate create only the inbox and outbox tables,
// idempotently, with exactly the columns, types, defaults, keys and indexes
// the order system's migrations give them; on a database store.Migrate
// manages they change nothing and store.Migrate keeps working after them.
func TestRuntimeMigrateMatchesOrderSchema(t *testing.T) {
	storetest.EachEmpty(t, func(t *testing.T, alone *store.DB) {
		ctx := ctxT(t)
		for i := range 2 { // the second run must find nothing to do
			if err := runtimeMigrate(ctx, alone); err != nil {
				t.Fatalf("run %d: %v", i+1, err)
			}
		}
		if got, want := tableNames(ctx, t, alone), []string{"inbox", "outbox"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("tables after inbox.Migrate and outbox.Migrate: %v, want %v (no order schema, no schema_migrations)", got, want)
		}

		ordered := storetest.SQLite(t)
		if alone.Dialect == store.Postgres {
			ordered = storetest.Postgres(t)
		}
		for _, table := range []string{"inbox", "outbox"} {
			got, want := tableShape(ctx, t, alone, table), tableShape(ctx, t, ordered, table)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s created by %s.Migrate:\n  %s\nby store.Migrate:\n  %s", table, table, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
		}

		// On the order system's database: no change, no new version, and
		// store.Migrate still runs afterwards.
		var before, after int
		if err := ordered.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations`).Scan(&before); err != nil {
			t.Fatal(err)
		}
		if err := runtimeMigrate(ctx, ordered); err != nil {
			t.Fatalf("on a store.Migrate database: %v", err)
		}
		if err := store.Migrate(ctx, ordered); err != nil {
			t.Fatalf("store.Migrate after the runtime's: %v", err)
		}
		if err := ordered.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations`).Scan(&after); err != nil || after != before {
			t.Fatalf("schema_migrations rows %d -> %d (%v)", before, after, err)
		}

		// The tables work: an event applied once, a record enqueued.
		for i, want := range []bool{true, false} {
			applied, err := inbox.Process(ctx, alone, "g", "evt-1", inbox.Meta{Topic: "t", Partition: 0, Offset: int64(i)},
				func(context.Context, *sql.Tx) error { return nil })
			if err != nil || applied != want {
				t.Fatalf("Process #%d = %v, %v; want %v", i+1, applied, err, want)
			}
		}
		if err := alone.InTx(ctx, func(tx *sql.Tx) error {
			return outbox.Enqueue(ctx, tx, alone, outbox.Message{Topic: "t", Key: []byte("k"), Value: []byte("v")})
		}); err != nil {
			t.Fatal(err)
		}
		if n, err := outbox.Pending(ctx, alone); err != nil || n != 1 {
			t.Fatalf("Pending = %d, %v; want 1", n, err)
		}
	})
}

// inbox.Migrate refuses, changing nothing, an inbox table of the shape before
// digests (the order schema's migration 1 without 4), rather than leaving
// Process to fail at the first event; outbox.Migrate likewise refuses an
// outbox table without a column the relay uses.
func TestRuntimeMigrateRefusesOldTables(t *testing.T) {
	storetest.EachEmpty(t, func(t *testing.T, db *store.DB) {
		ctx := ctxT(t)
		if _, err := db.ExecContext(ctx, `CREATE TABLE inbox (consumer_group TEXT NOT NULL, event_id TEXT NOT NULL, topic TEXT NOT NULL,
			"partition" INTEGER NOT NULL, "offset" BIGINT NOT NULL, processed_at BIGINT NOT NULL, PRIMARY KEY (consumer_group, event_id))`); err != nil {
			t.Fatal(err)
		}
		if err := inbox.Migrate(ctx, db); err == nil || !strings.Contains(err.Error(), "inbox: migrate") || !strings.Contains(err.Error(), "digest") {
			t.Fatalf("inbox.Migrate on a table without digest: %v, want an error naming digest", err)
		}
		if _, err := db.ExecContext(ctx, fmt.Sprintf(`CREATE TABLE outbox (id %s, topic TEXT NOT NULL, value %s, created_at BIGINT NOT NULL)`,
			db.IdentityType(), db.BlobType())); err != nil {
			t.Fatal(err)
		}
		if err := outbox.Migrate(ctx, db); err == nil || !strings.Contains(err.Error(), "outbox: migrate") {
			t.Fatalf("outbox.Migrate on a table without record_key, headers, sent_at: %v, want an error", err)
		}
		// Nothing was created by the failed call (its index rolled back).
		var n int
		q := `SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = 'outbox_unsent'`
		if db.Dialect == store.Postgres {
			q = `SELECT COUNT(*) FROM pg_indexes WHERE schemaname = current_schema() AND indexname = 'outbox_unsent'`
		}
		if err := db.QueryRowContext(ctx, q).Scan(&n); err != nil || n != 0 {
			t.Fatalf("outbox_unsent after a failed outbox.Migrate: %d, %v; want none", n, err)
		}
	})
}
