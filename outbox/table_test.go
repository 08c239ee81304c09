package outbox_test

import (
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/dbtest"
	"github.com/ordercast/ordercast/outbox"
	"github.com/ordercast/ordercast/sqldb"
)

// tables lists the tables of db's schema, sorted.
func tables(t *testing.T, db *sqldb.DB) []string {
	t.Helper()
	q := `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name`
	if db.Dialect == sqldb.Postgres {
		q = `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY table_name`
	}
	names, err := db.QueryStrings(ctxT(t), q)
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// enqueueTo commits one transaction that enqueues seqs on topic "t" to ob.
func enqueueTo(t *testing.T, db *sqldb.DB, ob *outbox.Outbox, seqs ...int) {
	t.Helper()
	ctx := ctxT(t)
	err := db.InTx(ctx, func(tx *sql.Tx) error {
		for _, s := range seqs {
			v := fmt.Sprintf(`{"eventId":"ev-%d","seq":%d}`, s, s)
			if err := ob.Enqueue(ctx, tx, outbox.Message{Topic: "t", Key: []byte(fmt.Sprint("k", s%2)), Value: []byte(v)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// An outbox in a table of the user's naming: Migrate creates that table and
// nothing else, Schema's statements run by a migration tool make an
// equivalent one, each outbox sees only its rows, and a relay given the
// table (WithTable) publishes those rows and no others, in both modes.
func TestOwnTable(t *testing.T) {
	dbtest.Each(t, nil, func(t *testing.T, db *sqldb.DB) {
		ctx := ctxT(t)
		billing, err := outbox.New(db, "billing_outbox")
		if err != nil {
			t.Fatal(err)
		}
		if err := billing.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		if got := tables(t, db); !slices.Equal(got, []string{"billing_outbox"}) {
			t.Fatalf("tables after Migrate: %v, want only billing_outbox", got)
		}
		// Schema's text, run as one script as a migration tool would.
		ddl, err := outbox.Schema(db.Dialect, "audit_outbox")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, ddl); err != nil {
			t.Fatalf("running Schema's statements: %v\n%s", err, ddl)
		}
		audit, err := outbox.New(db, "audit_outbox")
		if err != nil {
			t.Fatal(err)
		}
		if err := audit.Migrate(ctx); err != nil { // a no-op on Schema's table
			t.Fatalf("Migrate after Schema: %v", err)
		}
		if got := tables(t, db); !slices.Equal(got, []string{"audit_outbox", "billing_outbox"}) {
			t.Fatalf("tables: %v", got)
		}
		enqueueTo(t, db, billing, 1, 2, 3)
		enqueueTo(t, db, audit, 100, 101)
		if n, err := billing.Pending(ctx); err != nil || n != 3 {
			t.Fatalf("billing Pending = %d, %v; want 3", n, err)
		}
		// The default table was not created: the package functions fail.
		if _, err := outbox.Pending(ctx, db); err == nil {
			t.Fatal("Pending on the default table, which does not exist, returned no error")
		}

		addrs := cluster(t)
		relay := newRelay(t, db, producer(t, addrs), outbox.Table("billing_outbox"), outbox.Logger(quiet))
		stop := run(t, relay)
		relay.Notify()
		waitFor(t, "the billing rows marked sent", func() bool { n, err := billing.Pending(ctx); return err == nil && n == 0 })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		recs := consume(t, addrs, "t", 3) // exactly 3: the audit rows were not relayed
		var got []int
		for _, r := range recs {
			got = append(got, seqOf(t, r))
		}
		slices.Sort(got)
		if !slices.Equal(got, []int{1, 2, 3}) {
			t.Fatalf("published %v, want the billing rows 1, 2, 3", got)
		}
		if n, err := audit.Pending(ctx); err != nil || n != 2 {
			t.Fatalf("audit Pending = %d, %v; want 2 (untouched)", n, err)
		}

		// The exactly-once relay on the other table.
		txr := txnRelay(t, db, addrs, "audit", outbox.Table("audit_outbox"))
		stop = run(t, txr)
		waitFor(t, "the audit rows marked sent", func() bool { n, err := audit.Pending(ctx); return err == nil && n == 0 })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if got := seqs(t, readTopic(t, addrs, "t", true)); !slices.Equal(got, []int{1, 2, 3, 100, 101}) {
			t.Fatalf("topic t holds %v, want 1, 2, 3 then 100, 101", got)
		}
	})
}

// A table name that is not a plain lower-case identifier is refused by New
// and Schema, by NewTransactionalRelay and by NewRelay, with an error naming
// it; nothing is created. NewRelay refuses a nil database or client too.
func TestBadTableName(t *testing.T) {
	db := dbtest.SQLite(t, dbtest.Runtime)
	offline := offlineClient(t)
	if _, err := outbox.NewRelay(db, nil); err == nil {
		t.Error("NewRelay with a nil client accepted")
	}
	if _, err := outbox.NewRelay(nil, offline); err == nil {
		t.Error("NewRelay with a nil database accepted")
	}
	long := strings.Repeat("t", sqldb.MaxTableNameLen+1)
	for _, name := range []string{"Outbox", "1outbox", "out-box", "app.outbox", "outbox; DROP TABLE orders", `"outbox"`, long} {
		if _, err := outbox.New(db, name); err == nil || !strings.Contains(err.Error(), "table name") {
			t.Errorf("New(%q): %v, want a table name error", name, err)
		}
		if _, err := outbox.Schema(sqldb.SQLite, name); err == nil {
			t.Errorf("Schema(%q) accepted it", name)
		}
		if _, err := outbox.NewTransactionalRelay(db, "x", []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, outbox.Table(name)); err == nil {
			t.Errorf("NewTransactionalRelay with WithTable(%q) accepted it", name)
		}
		if r, err := outbox.NewRelay(db, offline, outbox.Table(name)); r != nil || err == nil || !strings.Contains(err.Error(), "table name") {
			t.Errorf("NewRelay with Table(%q): %v, want a table name error", name, err)
		}
	}
	if _, err := outbox.New(nil, ""); err == nil {
		t.Error("New(nil) accepted")
	}
	if _, err := outbox.Schema(sqldb.Dialect(0), ""); err == nil {
		t.Error("Schema of an unknown dialect accepted")
	}
	if ob, err := outbox.New(db, ""); err != nil || ob.Table() != outbox.DefaultTable {
		t.Errorf("New(db, \"\") = %v, %v; want the table %s", ob, err, outbox.DefaultTable)
	}
}
