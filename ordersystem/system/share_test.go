package system_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/ordercast/ordercast/internal/testkit/promtest"
	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/ordersystem/audit"
	"github.com/ordercast/ordercast/ordersystem/ops"
	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/system"
	"github.com/ordercast/ordercast/processor"
)

// TestNotificationsShareMode: the whole system with notifications in its
// share group (NotificationsShare) and more members than partitions keeps
// every invariant (every accepted order received and paid-or-refused
// notified exactly once); every orderCreated record then published a second
// time (a redelivery the share group hands out again) is skipped as a
// duplicate (its notification id), so no notification is sent twice. The share group is the one the
// brokers list, with its members, its backlog is exported as
// ordercast_group_lag_total and /readyz's view lists each queue member.
func TestNotificationsShareMode(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: the whole system")
	}
	brokers := testkafka.Cluster(t, nil)
	reg := srfake.New()
	t.Cleanup(reg.Close)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	mreg := prometheus.NewRegistry()
	const members = 5 // > the 3 partitions: in group mode two would idle
	sys, err := system.Start(ctx, system.Config{
		SeedFile:      "../../data/online-retail/online_retail_2010-12-01.csv",
		OpeningCredit: system.DefaultOpeningCredit,
		Metrics:       mreg,
		Instances:     map[string]int{system.ServiceNotifications: members},
		Kafka: system.KafkaConfig{Brokers: brokers, Layout: ops.Layout{Partitions: 3, ReplicationFactor: testkafka.ReplicationFactor(t),
			RetryDelays: []time.Duration{50 * time.Millisecond}}},
		Schema:    system.SchemaConfig{RegistryURL: reg.URL()},
		DB:        system.DBConfig{DSN: "sqlite:" + filepath.Join(t.TempDir(), "ordercast.db")},
		HTTP:      system.HTTPConfig{Addr: "127.0.0.1:0"},
		Consumers: system.ConsumerConfig{Ordering: processor.OrderKey, MemberID: "share", NotificationsMode: system.NotificationsShare, Concurrency: 4},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sys.Stop(context.Background()); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	customers := []string{"17850", "17968", "17920", "12433", "14729"}
	const orders = 60
	for i := range orders {
		post(t, ctx, sys.HTTPAddr(), map[string]any{"customerId": customers[i%len(customers)], "lines": []map[string]any{{"stockCode": "85123A", "quantity": 1}}})
	}
	poll(t, ctx, "every order through every service", func() (bool, string) {
		p, err := audit.ReadProgress(ctx, sys.DB)
		if err != nil {
			return false, err.Error()
		}
		return p.Done() && p.Accepted == orders, p.Missing()
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	checkInvariants := func(when string) {
		t.Helper()
		res, err := audit.Check(ctx, sys.DB, cl, sys.Serde)
		if err != nil {
			t.Fatal(err)
		}
		for name, inv := range res.Invariants {
			if !inv.OK {
				t.Errorf("%s: invariant %s: %s", when, name, inv.Detail)
			}
		}
	}
	checkInvariants("after the orders")
	notified := countNotifications(t, ctx, sys)
	if notified != 2*orders { // order_received and payment_confirmed|failed each
		t.Fatalf("%d notifications for %d orders, want %d", notified, orders, 2*orders)
	}

	// The share group as the brokers see it: type share, every member.
	gs, err := ops.DescribeGroups(ctx, sys.Admin, system.NotificationsShareGroup)
	if err != nil || gs[0].Error != "" {
		t.Fatalf("describe %s: %v %+v", system.NotificationsShareGroup, err, gs)
	}
	// Each processor is processor.DefaultShareSessions members of the group.
	if g := gs[0]; g.Type != "share" || len(g.Members) != members*processor.DefaultShareSessions {
		t.Errorf("share group %s: type %q, %d members, want share and %d (%d processors of %d sessions)", g.Group, g.Type, len(g.Members), members*processor.DefaultShareSessions, members, processor.DefaultShareSessions)
	}
	// The readiness view lists each queue member, and all handled
	// together at least one record per notification.
	h := sys.Health(ctx)
	handled := int64(0)
	for _, q := range h.QueueMembers {
		if q.Group != system.NotificationsShareGroup || !strings.HasPrefix(q.ClientID, system.NotificationsShareGroup+"-") {
			t.Errorf("queue member %+v: want group and client id of %s", q, system.NotificationsShareGroup)
		}
		handled += q.Handled
	}
	if len(h.QueueMembers) != members || handled < 2*orders {
		t.Errorf("readiness: %d queue members handled %d records, want %d members and >= %d", len(h.QueueMembers), handled, members, 2*orders)
	}
	for _, m := range h.Members {
		if m.Group == system.ServiceNotifications {
			t.Errorf("a consumer group member of %s runs in share mode: %s", m.Group, m.ClientID)
		}
	}

	// Every orderCreated record again: the share group delivers each copy,
	// its notification is there, no notification is added.
	created, err := audit.ReadTopic(ctx, cl, order.TopicOrderCreated)
	if err != nil || len(created) != orders {
		t.Fatalf("orderCreated: %d records (%v), want %d", len(created), err, orders)
	}
	dups0 := promtest.Sum(t, mreg, "ordercast_inbox_duplicates_total", "group", order.GroupNotifications)
	var again []*kgo.Record
	for _, r := range created {
		again = append(again, &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: r.Headers})
	}
	testkafka.Produce(t, brokers, again...)
	poll(t, ctx, "every copy skipped as a duplicate", func() (bool, string) {
		d := promtest.Sum(t, mreg, "ordercast_inbox_duplicates_total", "group", order.GroupNotifications) - dups0
		return d >= orders, ""
	})
	if n := countNotifications(t, ctx, sys); n != notified {
		t.Errorf("%d notifications after the copies, want %d: a redelivered event notified again", n, notified)
	}
	checkInvariants("after the copies")
	// The backlog drains to 0 and is exported for the autoscaler.
	poll(t, ctx, "ordercast_group_lag_total of the share group at 0", func() (bool, string) {
		v, found := promtest.Lookup(t, mreg, "ordercast_group_lag_total", "group", system.NotificationsShareGroup)
		return found && v == 0, ""
	})
}

func countNotifications(t *testing.T, ctx context.Context, sys *system.System) int {
	t.Helper()
	var n int
	if err := sys.DB.QueryRowContext(ctx, `SELECT COUNT(*) FROM notifications`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Start refuses a notifications mode other than group and share, naming
// the flag, before it contacts anything.
func TestNotificationsModeRefused(t *testing.T) {
	_, err := startOn(t, []string{"127.0.0.1:1"}, system.Config{Consumers: system.ConsumerConfig{NotificationsMode: "queue"}})
	if err == nil || !strings.Contains(err.Error(), "--notifications-mode") || !strings.Contains(err.Error(), `"queue"`) {
		t.Fatalf("Start with notifications mode queue: %v, want refused naming --notifications-mode", err)
	}
}
