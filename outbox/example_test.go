package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	_ "modernc.org/sqlite" // the application's SQLite driver: registers "sqlite"

	"github.com/ordercast/ordercast/outbox"
	"github.com/ordercast/ordercast/sqldb"
)

// A billing service records an invoice and its invoiceIssued record in one
// transaction on a SQLite database of its own, in an outbox table of its own
// naming; the relay publishes the record to Kafka (here the in-process kfake
// broker).
func ExampleRelay() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dir, err := os.MkdirTemp("", "outbox-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
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
	// The service's own migration: its invoices table and the outbox table.
	if _, err := db.ExecContext(ctx, `CREATE TABLE invoices (
		invoice_id TEXT PRIMARY KEY, customer TEXT NOT NULL, amount_cents BIGINT NOT NULL)`); err != nil {
		panic(err)
	}
	ob, err := outbox.New(db, "billing_outbox")
	if err != nil {
		panic(err)
	}
	if err := ob.Migrate(ctx); err != nil {
		panic(err)
	}

	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "invoiceIssued"))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()
	client, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		panic(err)
	}
	defer client.Close()

	relay, err := outbox.NewRelay(db, client, outbox.Table("billing_outbox"))
	if err != nil {
		panic(err)
	}
	relayCtx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(relayCtx) }()

	err = db.InTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, db.Rebind(`INSERT INTO invoices (invoice_id, customer, amount_cents) VALUES (?, ?, ?)`),
			"inv-1", "acme", 4200); err != nil {
			return err
		}
		return ob.Enqueue(ctx, tx, outbox.Message{
			Topic:   "invoiceIssued",
			Key:     []byte("acme"),
			Value:   []byte(`{"eventId":"evt-7","invoiceId":"inv-1","amountCents":4200}`),
			Headers: []outbox.Header{{Key: "content-type", Value: []byte("application/json")}},
		})
	})
	if err != nil {
		panic(err)
	}
	relay.Notify() // publish now rather than at the next poll

	consumer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...),
		kgo.ConsumeTopics("invoiceIssued"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		panic(err)
	}
	defer consumer.Close()
	for got := false; !got; {
		fetches := consumer.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			panic(err)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			fmt.Printf("%s key=%s %s\n", r.Topic, r.Key, r.Value)
			got = true
		})
	}
	// The relay marks the row sent once Kafka acknowledged it.
	for n, err := ob.Pending(ctx); n != 0; n, err = ob.Pending(ctx) {
		if err != nil || ctx.Err() != nil {
			panic(fmt.Sprint(err, ctx.Err()))
		}
		time.Sleep(5 * time.Millisecond) // polling, bounded by ctx
	}
	stopRelay()
	fmt.Println("relay stopped:", <-relayDone)
	// Output:
	// invoiceIssued key=acme {"eventId":"evt-7","invoiceId":"inv-1","amountCents":4200}
	// relay stopped: <nil>
}

// The outbox table's statements for a migration tool of one's own, here for
// PostgreSQL (SQLite's differ in the id and binary column types). Migrate
// runs exactly these.
func ExampleSchema() {
	ddl, err := outbox.Schema(sqldb.Postgres, "billing_outbox")
	if err != nil {
		panic(err)
	}
	fmt.Print(ddl)
	// Output:
	// CREATE TABLE IF NOT EXISTS billing_outbox (
	//     id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	//     topic      TEXT NOT NULL,
	//     record_key BYTEA,
	//     value      BYTEA,
	//     headers    TEXT,
	//     created_at BIGINT NOT NULL,
	//     sent_at    BIGINT,
	//     trace_context TEXT
	// );
	//
	// CREATE INDEX IF NOT EXISTS billing_outbox_unsent ON billing_outbox (id) WHERE sent_at IS NULL;
}
