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

	"github.com/ordercast/ordercast/outbox"
	"github.com/ordercast/ordercast/sqldb"
)

// A payment and its paymentProcessed record commit in one transaction; the
// relay publishes the record to Kafka (here the in-process kfake broker).
func ExampleRelay() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dir, _ := os.MkdirTemp("", "outbox-example")
	defer os.RemoveAll(dir)
	db, err := sqldb.Open(ctx, "sqlite:"+filepath.Join(dir, "example.db"))
	if err != nil {
		panic(err)
	}
	defer db.Close()
	// The outbox table and its index, and nothing else; the payments table
	// is this example's own.
	if err := outbox.Migrate(ctx, db); err != nil {
		panic(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE payments (order_id TEXT PRIMARY KEY, status TEXT NOT NULL, amount_milli BIGINT NOT NULL)`); err != nil {
		panic(err)
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "paymentProcessed"))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()
	client, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		panic(err)
	}
	defer client.Close()

	relay := outbox.NewRelay(db, client)
	relayCtx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(relayCtx) }()

	err = db.InTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, db.Rebind(`INSERT INTO payments (order_id, status, amount_milli) VALUES (?, ?, ?)`),
			"ord_1", "PAID", 15300); err != nil {
			return err
		}
		return outbox.Enqueue(ctx, tx, db, outbox.Message{
			Topic:   "paymentProcessed",
			Key:     []byte("17850"),
			Value:   []byte(`{"eventId":"evt_pay_1","orderId":"ord_1","status":"PAID"}`),
			Headers: []outbox.Header{{Key: "content-type", Value: []byte("application/json")}},
		})
	})
	if err != nil {
		panic(err)
	}
	relay.Notify() // publish now rather than at the next poll

	consumer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...),
		kgo.ConsumeTopics("paymentProcessed"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		panic(err)
	}
	defer consumer.Close()
	for got := false; !got; {
		consumer.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			fmt.Printf("%s key=%s %s\n", r.Topic, r.Key, r.Value)
			got = true
		})
	}
	for n, _ := relay.Pending(ctx); n != 0; n, _ = relay.Pending(ctx) {
		time.Sleep(5 * time.Millisecond)
	}
	stopRelay()
	fmt.Println("relay stopped:", <-relayDone)
	// Output:
	// paymentProcessed key=17850 {"eventId":"evt_pay_1","orderId":"ord_1","status":"PAID"}
	// relay stopped: <nil>
}
