package system_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/ordersystem/audit"
	"github.com/ordercast/ordercast/ordersystem/ops"
	"github.com/ordercast/ordercast/ordersystem/system"
	"github.com/ordercast/ordercast/processor"
)

// TestPaymentsKeepCustomerOrderThroughRetries: with a transient fault in
// payments (system.FaultPaymentsTransient: a fifth of the orderCreated
// records fail their first hop, half of those their second too, so they go
// through both retry topics), the system in key order with key blocking on
// (the default) still keeps every invariant, and each customer's wallet is
// debited in the order of that customer's orders. Without key blocking a
// customer's later order is charged while an earlier one waits in a retry
// topic (--block-keys off reorders the ledger).
func TestPaymentsKeepCustomerOrderThroughRetries(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: the whole system")
	}
	t.Setenv(system.EnvFault, system.FaultPaymentsTransient+":0.2") // no t.Parallel: the fault is read from the environment
	brokers := testkafka.Cluster(t, nil)
	reg := srfake.New()
	t.Cleanup(reg.Close)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	mreg := prometheus.NewRegistry()
	sys, err := system.Start(ctx, system.Config{
		SeedFile:      "../../data/online-retail/online_retail_2010-12-01.csv",
		OpeningCredit: system.DefaultOpeningCredit,
		Metrics:       mreg,
		Kafka: system.KafkaConfig{Brokers: brokers, Layout: ops.Layout{Partitions: 3, ReplicationFactor: testkafka.ReplicationFactor(t),
			RetryDelays: []time.Duration{50 * time.Millisecond, 100 * time.Millisecond}}},
		Schema:    system.SchemaConfig{RegistryURL: reg.URL()},
		DB:        system.DBConfig{DSN: "sqlite:" + filepath.Join(t.TempDir(), "ordercast.db")},
		HTTP:      system.HTTPConfig{Addr: "127.0.0.1:0"},
		Consumers: system.ConsumerConfig{Ordering: processor.OrderKey, MaxAttempts: 1, MemberID: "keyorder"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sys.Stop(context.Background()); err != nil {
			t.Errorf("stop: %v", err)
		}
	})

	// Orders of five customers with wallets, one after the other, so each
	// customer's orderCreated records are in the order placed.
	customers := []string{"17850", "17968", "17920", "12433", "14729"}
	placedBy := map[string][]string{}
	const orders = 60
	for i := range orders {
		c := customers[i%len(customers)]
		id := post(t, ctx, sys.HTTPAddr(), map[string]any{"customerId": c, "lines": []map[string]any{{"stockCode": "85123A", "quantity": 1}}})
		placedBy[c] = append(placedBy[c], id)
	}
	poll(t, ctx, "every order through every service", func() (bool, string) {
		p, err := audit.ReadProgress(ctx, sys.DB)
		if err != nil {
			return false, err.Error()
		}
		return p.Done() && p.Accepted == orders, p.Missing()
	})
	if n := counter(t, mreg, "ordercast_consumer_records_retry_topic_total", "group", "payments"); n == 0 {
		t.Fatal("no payments record went through a retry topic: the fault did not fire")
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	res, err := audit.Check(ctx, sys.DB, cl, sys.Serde)
	if err != nil {
		t.Fatal(err)
	}
	for name, inv := range res.Invariants {
		if !inv.OK {
			t.Errorf("invariant %s: %s", name, inv.Detail)
		}
	}

	// Each wallet's debits, in the order they were written, follow the
	// order the customer's orders were placed in.
	rows, err := sys.DB.QueryContext(ctx, `SELECT customer_id, order_id FROM wallet_ledger ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	debited := map[string][]string{}
	for rows.Next() {
		var c, o string
		if err := rows.Scan(&c, &o); err != nil {
			t.Fatal(err)
		}
		debited[c] = append(debited[c], o)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, c := range customers {
		var want []string
		for _, id := range placedBy[c] {
			if slices.Contains(debited[c], id) {
				want = append(want, id)
			}
		}
		if len(debited[c]) == 0 || !slices.Equal(debited[c], want) {
			t.Errorf("customer %s: wallet debited for %v, want the order placed: %v", c, debited[c], want)
		}
	}
}
