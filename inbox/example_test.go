package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/inbox"
	"github.com/ordercast/ordercast/processor"
	"github.com/ordercast/ordercast/sqldb"
)

// A group member applies each event's database effect through the inbox:
// the same event delivered twice (a re-delivery after a crash before the
// offset commit, or a producer's retry) is handled twice and applied once.
func ExampleProcess() {
	dir, err := os.MkdirTemp("", "inbox-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := sqldb.Open(ctx, "sqlite:"+filepath.Join(dir, "example.db"))
	if err != nil {
		panic(err)
	}
	defer db.Close()
	// The inbox table, and nothing else: no other schema is needed.
	if err := inbox.Migrate(ctx, db); err != nil {
		panic(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE balances (account TEXT PRIMARY KEY, amount INTEGER NOT NULL)`); err != nil {
		panic(err)
	}

	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "credits", "ledger.dlq"))
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
	// One event (id evt-1: credit account A with 10), written twice.
	for range 2 {
		r := &kgo.Record{Topic: "credits", Key: []byte("evt-1"), Value: []byte("A:10")}
		if err := producer.ProduceSync(ctx, r).FirstErr(); err != nil {
			panic(err)
		}
	}

	runCtx, stop := context.WithCancel(ctx)
	handled := 0
	p, err := processor.New(
		processor.Brokers(brokers...), processor.Group("ledger"), processor.Topics("credits"),
		processor.WithHandler(func(ctx context.Context, r *kgo.Record) error {
			var account string
			var amount int
			if _, err := fmt.Sscanf(string(r.Value), "%1s:%d", &account, &amount); err != nil {
				return processor.Permanent(err)
			}
			applied, err := inbox.Process(ctx, db, "ledger", string(r.Key),
				inbox.Meta{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset},
				func(ctx context.Context, tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, db.Rebind(`INSERT INTO balances (account, amount) VALUES (?, ?)
						ON CONFLICT (account) DO UPDATE SET amount = balances.amount + excluded.amount`), account, amount)
					return err
				})
			if err != nil {
				return err // transient: retried, the inbox row rolled back with the effect
			}
			fmt.Printf("offset %d: event %s applied: %v\n", r.Offset, r.Key, applied)
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
	var amount int
	if err := db.QueryRowContext(ctx, `SELECT amount FROM balances WHERE account = 'A'`).Scan(&amount); err != nil {
		panic(err)
	}
	fmt.Println("balance of A:", amount)
	// Output:
	// offset 0: event evt-1 applied: true
	// offset 1: event evt-1 applied: false
	// balance of A: 10
}
