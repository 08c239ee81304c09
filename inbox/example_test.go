package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ordercast/ordercast/inbox"
	"github.com/ordercast/ordercast/store"
)

// The same orderCreated event delivered twice (a re-delivery after a crash
// before the offset commit) stores the order status once.
func ExampleProcess() {
	dir, _ := os.MkdirTemp("", "inbox-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := store.Open(ctx, "sqlite:"+filepath.Join(dir, "ordercast.db"))
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if err := db.Migrate(ctx); err != nil {
		panic(err)
	}

	for _, offset := range []int64{7, 7} {
		applied, err := inbox.Process(ctx, db, "orders", "evt_1",
			inbox.Meta{Topic: "orderCreated", Partition: 0, Offset: offset},
			func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx,
					db.Rebind(`INSERT INTO order_status (order_id, kind, detail, at) VALUES (?, ?, ?, ?)`),
					"ord_1", "created", "", 1700000000000)
				return err
			})
		fmt.Println("applied:", applied, "err:", err)
	}
	seen, _ := inbox.Seen(ctx, db, "orders", "evt_1")
	fmt.Println("seen:", seen)
	// Output:
	// applied: true err: <nil>
	// applied: false err: <nil>
	// seen: true
}
