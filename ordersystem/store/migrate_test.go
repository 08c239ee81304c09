package store_test

import (
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ordercast/ordercast/ordersystem/store"
	"github.com/ordercast/ordercast/ordersystem/store/storetest"
)

// insertOrderV2 is the orders insert of a build before migration 3: it
// names its columns, so it works against the expanded table (channel NULL).
const insertOrderV2 = `INSERT INTO orders (order_id, customer_id, country, total_milli, line_count, reference, created_at, stored_at)
	VALUES (?, NULL, 'France', 100, 0, NULL, 1, 2)`

// A database of the previous release (migrations 1 and 2) upgrades to 3
// keeping its rows: their channel is NULL.
func TestMigrateUpgradesV2Database(t *testing.T) {
	ctx := ctxT(t)
	db, err := store.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "v2.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := store.MigrateAs(ctx, db, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `SELECT channel FROM orders`); err == nil {
		t.Fatal("a v2 database already has orders.channel")
	}
	if _, err := db.ExecContext(ctx, db.Rebind(insertOrderV2), "ord_old"); err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	var ch sql.NullString
	if err := db.QueryRowContext(ctx, `SELECT channel FROM orders WHERE order_id = 'ord_old'`).Scan(&ch); err != nil || ch.Valid {
		t.Fatalf("channel of a row stored before v3: %v %v, want NULL", ch, err)
	}
	var expand int
	if err := db.QueryRowContext(ctx, `SELECT expand_only FROM schema_migrations WHERE version = 3`).Scan(&expand); err != nil || expand != 1 {
		t.Fatalf("version 3 expand_only = %d, %v; want 1", expand, err)
	}
}

// Rolling upgrade: a build keeps running against a database a newer build
// migrated past its SchemaVersion when the newer versions are expand-only,
// and refuses, changing nothing, when one is not. The previous release
// (SchemaVersion 2) runs against version 3: its inserts leave channel NULL.
func TestMigrateNewerDatabase(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := ctxT(t)
		// The previous release, started after this one migrated to 3.
		if err := store.MigrateAs(ctx, db, 2); err != nil {
			t.Fatalf("build 2 against version 3: %v", err)
		}
		if _, err := db.ExecContext(ctx, db.Rebind(insertOrderV2), "ord_v2"); err != nil {
			t.Fatalf("build 2's insert against version 3: %v", err)
		}

		// A newer build adds an expand-only version: this build runs on.
		next := store.SchemaVersion + 1
		expand := store.TestMigration{Version: next, Name: "test: orders.promo", ExpandOnly: true,
			Stmts: []string{`ALTER TABLE orders ADD COLUMN promo TEXT`}}
		if err := store.MigrateAs(ctx, db, store.SchemaVersion, expand); err != nil {
			t.Fatal(err)
		}
		if err := store.Migrate(ctx, db); err != nil {
			t.Fatalf("build %d against expand-only version %d: %v", store.SchemaVersion, next, err)
		}
		if _, err := db.ExecContext(ctx, db.Rebind(`INSERT INTO orders (order_id, customer_id, country, total_milli, line_count, reference, created_at, stored_at, channel)
			VALUES (?, NULL, NULL, 1, 0, NULL, 1, 2, 'web')`), "ord_v3"); err != nil {
			t.Fatalf("this build's insert against version %d: %v", next, err)
		}

		// Then one that is not expand-only (it drops a column): refused.
		contract := store.TestMigration{Version: next + 1, Name: "test: drop orders.reference", Stmts: []string{`ALTER TABLE orders DROP COLUMN reference`}}
		if err := store.MigrateAs(ctx, db, store.SchemaVersion, expand, contract); err != nil {
			t.Fatal(err)
		}
		err := store.Migrate(ctx, db)
		if !errors.Is(err, store.ErrSchemaTooNew) || !strings.Contains(err.Error(), fmt.Sprintf("version(s) %d are not expand-only", next+1)) ||
			!strings.Contains(err.Error(), fmt.Sprintf("schema version %d, this build knows up to %d", next+1, store.SchemaVersion)) {
			t.Fatalf("build %d against version %d: %v, want ErrSchemaTooNew naming version %d", store.SchemaVersion, next+1, err, next+1)
		}
		// The previous release never checked: it starts (and breaks later).
		if err := store.MigrateAs(ctx, db, 2); err != nil {
			t.Fatalf("build 2: %v", err)
		}
	})
}

// insertPaymentV4 is the payments insert of a build before migration 5: it
// names its columns and not seq.
const insertPaymentV4 = `INSERT INTO payments (order_id, customer_id, status, method, amount_milli, reason, processed_at)
	VALUES (?, NULL, 'PAID', 'CARD', 100, '', 1)`

// Migration 5 numbers a version-4 database's payments in their stored order
// and every later insert above them, an older build's (which does not name
// seq) included, in both dialects.
func TestMigratePaymentsSeq(t *testing.T) {
	storetest.EachEmpty(t, func(t *testing.T, db *store.DB) {
		ctx := ctxT(t)
		if err := store.MigrateAs(ctx, db, 4); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"ord_1", "ord_2"} {
			if _, err := db.ExecContext(ctx, db.Rebind(insertPaymentV4), id); err != nil {
				t.Fatal(err)
			}
		}
		if err := store.Migrate(ctx, db); err != nil {
			t.Fatal(err)
		}
		// this build's inserts and an older build's, still running
		for _, id := range []string{"ord_3", "ord_4"} {
			if _, err := db.ExecContext(ctx, db.Rebind(insertPaymentV4), id); err != nil {
				t.Fatalf("insert of payment %s after migration 5: %v", id, err)
			}
		}
		if err := store.MigrateAs(ctx, db, 4); err != nil {
			t.Fatalf("build 4 against version 5: %v", err)
		}
		if _, err := db.ExecContext(ctx, db.Rebind(insertPaymentV4), "ord_5"); err != nil {
			t.Fatal(err)
		}
		ids, err := db.QueryStrings(ctx, `SELECT order_id FROM payments ORDER BY seq`)
		if err != nil {
			t.Fatal(err)
		}
		var nulls, distinct int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) - COUNT(seq), COUNT(DISTINCT seq) FROM payments`).Scan(&nulls, &distinct); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(ids, ","); got != "ord_1,ord_2,ord_3,ord_4,ord_5" || nulls != 0 || distinct != 5 {
			t.Fatalf("payments by seq %s, %d without seq, %d distinct; want ord_1..ord_5 in insert order, each its own seq", got, nulls, distinct)
		}
	})
}
