package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	_ "modernc.org/sqlite" // the application's SQLite driver: registers "sqlite"

	"github.com/ordercast/ordercast/inbox"
	"github.com/ordercast/ordercast/processor"
	"github.com/ordercast/ordercast/sqldb"
)

// A billing service keeps its invoices in a SQLite database of its own,
// opened with the driver it chose, and applies each invoiceIssued event
// through an inbox table of its own naming: the same event delivered twice (a
// re-delivery after a crash before the offset commit, or a producer's retry)
// is handled twice and applied once.
func ExampleInbox_Process() {
	dir, err := os.MkdirTemp("", "inbox-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	sqlDB, err := sql.Open("sqlite", filepath.Join(dir, "billing.db")+
		"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		panic(err)
	}
	db, err := sqldb.New(sqlDB, sqldb.SQLite)
	if err != nil {
		panic(err)
	}
	defer db.Close()
	// The service's own migration: its invoices table and the inbox table.
	if _, err := db.ExecContext(ctx, `CREATE TABLE invoices (
		invoice_id TEXT PRIMARY KEY, customer TEXT NOT NULL, amount_cents BIGINT NOT NULL)`); err != nil {
		panic(err)
	}
	in, err := inbox.New(db, "billing_inbox")
	if err != nil {
		panic(err)
	}
	if err := in.Migrate(ctx); err != nil {
		panic(err)
	}

	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "invoiceIssued", "billing.dlq"))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		panic(err)
	}
	defer producer.Close()
	// One event (id evt-7: invoice inv-1 to acme for 42.00), written twice.
	for range 2 {
		r := &kgo.Record{Topic: "invoiceIssued", Key: []byte("acme"), Value: []byte("evt-7 inv-1 acme 4200")}
		if err := producer.ProduceSync(ctx, r).FirstErr(); err != nil {
			panic(err)
		}
	}

	runCtx, stop := context.WithCancel(ctx)
	handled := 0
	p, err := processor.New(
		processor.Brokers(brokers...), processor.Group("billing"), processor.Topics("invoiceIssued"),
		processor.WithHandler(func(ctx context.Context, r *kgo.Record) error {
			var eventID, invoice, customer string
			var cents int64
			if _, err := fmt.Sscan(string(r.Value), &eventID, &invoice, &customer, &cents); err != nil {
				return processor.Permanent(err) // dead-lettered, never applied
			}
			applied, err := in.Process(ctx, "billing", eventID,
				inbox.Meta{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Digest: inbox.Digest(r.Value)},
				func(ctx context.Context, tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, db.Rebind(`INSERT INTO invoices (invoice_id, customer, amount_cents) VALUES (?, ?, ?)`),
						invoice, customer, cents)
					return err
				})
			if err != nil {
				return err // transient: retried; the inbox row rolled back with the effect
			}
			fmt.Printf("offset %d: event %s applied: %v\n", r.Offset, eventID, applied)
			if handled++; handled == 2 {
				stop()
			}
			return nil
		}),
	)
	if err != nil {
		panic(err)
	}
	if err := p.Run(runCtx); err != nil {
		panic(err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM invoices`).Scan(&n); err != nil {
		panic(err)
	}
	seen, err := in.Seen(ctx, "billing", "evt-7")
	if err != nil {
		panic(err)
	}
	fmt.Println("invoices:", n, "evt-7 seen:", seen)
	// Output:
	// offset 0: event evt-7 applied: true
	// offset 1: event evt-7 applied: false
	// invoices: 1 evt-7 seen: true
}

// The inbox table's statement, for a migration tool of one's own (here
// PostgreSQL; SQLite's is the same). Migrate runs exactly this.
func ExampleSchema() {
	ddl, err := inbox.Schema(sqldb.Postgres, "billing_inbox")
	if err != nil {
		panic(err)
	}
	fmt.Print(ddl)
	_, err = inbox.Schema(sqldb.Postgres, "Billing Inbox")
	fmt.Println(strings.Contains(err.Error(), "lower-case"))
	// Output:
	// CREATE TABLE IF NOT EXISTS billing_inbox (
	//     consumer_group TEXT NOT NULL,
	//     event_id       TEXT NOT NULL,
	//     topic          TEXT NOT NULL,
	//     "partition"    INTEGER NOT NULL,
	//     "offset"       BIGINT NOT NULL,
	//     processed_at   BIGINT NOT NULL,
	//     digest         TEXT,
	//     PRIMARY KEY (consumer_group, event_id)
	// );
	// true
}
