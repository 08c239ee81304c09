package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/inbox"
	"github.com/ordercast/ordercast/outbox"
	"github.com/ordercast/ordercast/processor"
	"github.com/ordercast/ordercast/processor/processortest"
	"github.com/ordercast/ordercast/sqldb"
)

// A batch handler applies a batch of events in one database transaction:
// ClaimTx writes the inbox row of each (and reports which the group has not
// applied yet), the effects of those are written, and EnqueueAll puts their
// follow-up records in the outbox, all committed together. A duplicate, in
// the batch or from an earlier one, is claimed by no one and applies
// nothing; a failed batch rolls back whole, and the runtime handles its
// records again one at a time.
func ExampleInbox_ClaimTx() {
	dir, err := os.MkdirTemp("", "inbox-batch-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
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
	if _, err := db.ExecContext(ctx, `CREATE TABLE invoices (invoice_id TEXT PRIMARY KEY, amount_cents BIGINT NOT NULL)`); err != nil {
		panic(err)
	}
	in, err := inbox.New(db, "")
	if err != nil {
		panic(err)
	}
	ob, err := outbox.New(db, "")
	if err != nil {
		panic(err)
	}
	if err := in.Migrate(ctx); err != nil {
		panic(err)
	}
	if err := ob.Migrate(ctx); err != nil {
		panic(err)
	}

	// Each value is "<invoice id> <cents>"; the invoice id is the event id.
	// inv-2 comes twice, as a producer's retry would send it.
	kc, err := processortest.Start(map[string]int32{"invoiceIssued": 1, "billing.dlq": 1})
	if err != nil {
		panic(err)
	}
	defer kc.Close()
	for _, v := range []string{"inv-1 500", "inv-2 700", "inv-2 700", "inv-3 900"} {
		if err := kc.Produce(ctx, &kgo.Record{Topic: "invoiceIssued", Value: []byte(v)}); err != nil {
			panic(err)
		}
	}

	handleBatch := func(ctx context.Context, recs []*kgo.Record) error {
		claims := make([]inbox.Claim, len(recs))
		fields := make([][]string, len(recs))
		for i, r := range recs {
			fields[i] = strings.Fields(string(r.Value))
			claims[i] = inbox.Claim{EventID: fields[i][0],
				Meta: inbox.Meta{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Digest: inbox.Digest(r.Value)}}
		}
		return db.InTx(ctx, func(tx *sql.Tx) error {
			claimed, err := in.ClaimTx(ctx, tx, "billing", claims)
			if err != nil {
				return err
			}
			var msgs []outbox.Message
			for i, ok := range claimed {
				if !ok {
					continue // applied already
				}
				if _, err := tx.ExecContext(ctx, db.Rebind(`INSERT INTO invoices (invoice_id, amount_cents) VALUES (?, ?)`),
					fields[i][0], fields[i][1]); err != nil {
					return err
				}
				msgs = append(msgs, outbox.Message{Topic: "invoiceBilled", Key: []byte(fields[i][0]), Value: recs[i].Value})
			}
			return ob.EnqueueAll(ctx, tx, msgs)
		})
	}
	p, err := processor.New(processor.Brokers(kc.Brokers()...), processor.Group("billing"), processor.Topics("invoiceIssued"),
		processor.WithBatchHandler(handleBatch), processor.MaxBatch(100), processor.CommitInterval(10*time.Millisecond))
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()
	if err := kc.WaitCommitted(ctx, "billing", "invoiceIssued", 4); err != nil {
		panic(err)
	}
	stop()
	if err := <-done; err != nil {
		panic(err)
	}

	var invoices, inboxRows int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM invoices`).Scan(&invoices); err != nil {
		panic(err)
	}
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM inbox`).Scan(&inboxRows); err != nil {
		panic(err)
	}
	pending, err := ob.Pending(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Printf("invoices %d, inbox rows %d, outbox rows to publish %d\n", invoices, inboxRows, pending)
	// Output:
	// invoices 3, inbox rows 3, outbox rows to publish 3
}
