package system_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
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
	"github.com/ordercast/ordercast/ordersystem/service/checkout"
	"github.com/ordercast/ordercast/ordersystem/system"
)

// evoPartitions is the partition count of every topic in the test: two
// members per group get two partitions each.
const evoPartitions = 4

// inputTopic is the topic whose partitions each group shares out.
var inputTopic = map[string]string{
	order.GroupOrders:        order.TopicOrderCreated,
	order.GroupPayments:      order.TopicOrderCreated,
	order.GroupNotifications: order.TopicOrderCreated,
	order.GroupFulfillment:   order.TopicPaymentProcessed,
}

// placed is an order the test placed.
type placed struct {
	id, via, channel string // via: "old" or "new"; channel as sent ("" = none)
}

// TestRollingUpgradeSideBySide runs the upgrade that adds orderCreated's
// optional channel field with the previous build still running: two systems
// on one broker, one schema registry and one database, "old" pinned to
// orderCreated v1 (schema.WithVersion, as a build that only knew v1) and
// "new" on v2, each running checkout and one member of each consumer group.
// Orders go through both checkouts, the new ones with a channel. Then every
// order is stored, charged, notified and shipped once (the audit
// invariants), no record reached a DLQ, orderCreated holds both schema ids,
// every member of both systems processed records without a failure, the
// orders the new orders member consumed from v2 records have their channel
// and all others NULL, so the old member read v2 records as v1 did.
//
// It runs on the embedded broker and, with ORDERCAST_TEST_BROKERS, on a real
// cluster.
func TestRollingUpgradeSideBySide(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: two systems")
	}
	brokers := testkafka.Cluster(t, nil)
	reg := srfake.New()
	t.Cleanup(reg.Close)
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "ordercast.db")
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()

	start := func(name string, versions map[string]int) (*system.System, *prometheus.Registry) {
		t.Helper()
		mreg := prometheus.NewRegistry()
		sys, err := system.Start(ctx, system.Config{
			SeedFile:      "../../data/online-retail/online_retail_2010-12-01.csv",
			OpeningCredit: system.DefaultOpeningCredit,
			Metrics:       mreg,
			Kafka:         system.KafkaConfig{Brokers: brokers, Layout: ops.Layout{Partitions: evoPartitions, ReplicationFactor: testkafka.ReplicationFactor(t)}},
			Schema:        system.SchemaConfig{RegistryURL: reg.URL(), Versions: versions},
			DB:            system.DBConfig{DSN: dsn},
			HTTP:          system.HTTPConfig{Addr: "127.0.0.1:0"},
			Consumers:     system.ConsumerConfig{MemberID: name},
		})
		if err != nil {
			t.Fatalf("start %s: %v", name, err)
		}
		t.Cleanup(func() {
			if err := sys.Stop(context.Background()); err != nil {
				t.Errorf("stop %s: %v", name, err)
			}
		})
		return sys, mreg
	}
	// The old build runs first; the new one joins its groups.
	old, oldReg := start("old", map[string]int{order.TopicOrderCreated: 1})
	cur, curReg := start("new", nil)
	systems := map[string]*system.System{"old": old, "new": cur}
	oldID, _ := old.Serde.SchemaID(order.TopicOrderCreated)
	curID, _ := cur.Serde.SchemaID(order.TopicOrderCreated)
	if oldID == curID || old.Serde.SchemaVersion(order.TopicOrderCreated) != 1 || cur.Serde.SchemaVersion(order.TopicOrderCreated) != 2 {
		t.Fatalf("orderCreated: old writes id %d (v%d), new id %d (v%d); want v1 and v2 under distinct ids",
			oldID, old.Serde.SchemaVersion(order.TopicOrderCreated), curID, cur.Serde.SchemaVersion(order.TopicOrderCreated))
	}

	// Wait until every group's input partitions are shared out between the
	// two systems, so that both consume and the owner of each partition is
	// known.
	var owners map[string]map[int32]string // group -> partition -> system
	poll(t, ctx, "both systems to share every group's partitions", func() (bool, string) {
		owners = assignment(systems)
		for g, topic := range inputTopic {
			by := map[string]int{}
			for p := range int32(evoPartitions) {
				by[owners[g][p]]++
			}
			if len(owners[g]) != evoPartitions || by["old"] == 0 || by["new"] == 0 || by["?"] > 0 {
				return false, fmt.Sprintf("group %s, %s: %v", g, topic, owners[g])
			}
		}
		return true, ""
	})

	// Orders through both checkouts: known customers (wallet) and guests
	// (card, keyed by their random order id, so spread over partitions).
	customers := []string{"17850", "17968", "17920", "12433", "14729"}
	channels := []string{"web", "api", "replay"}
	var orders []placed
	const perCheckout = 24
	for i := range 2 * perCheckout {
		via, sys := "new", cur
		if i%2 == 1 {
			via, sys = "old", old
		}
		req := map[string]any{"lines": []map[string]any{{"stockCode": "85123A", "quantity": 1 + i%3}}}
		if i%4 < 2 {
			req["customerId"] = customers[i%len(customers)]
		}
		ch := ""
		if via == "new" { // the old checkout refuses it (below)
			ch = channels[i%len(channels)]
			req["channel"] = ch
		}
		orders = append(orders, placed{id: post(t, ctx, sys.HTTPAddr(), req), via: via, channel: ch})
	}

	// An unknown path gets checkout's JSON error, not a plain-text 404.
	if code, body := get(t, "http://"+cur.HTTPAddr()+"/nope"); code != http.StatusNotFound || !strings.Contains(body, `"not_found"`) {
		t.Errorf("GET /nope: %d %s, want 404 with code not_found", code, body)
	}

	// The old checkout refuses channel as the v1 build did (unknown member),
	// rather than accept and drop it.
	{
		b := `{"channel":"web","lines":[{"stockCode":"85123A","quantity":1}]}`
		resp, err := http.Post("http://"+old.HTTPAddr()+"/orders", "application/json", strings.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		var e order.ErrorResponse
		_ = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || e.Code != order.ReasonUnknownField || !strings.Contains(e.Error, "channel") {
			t.Errorf("old checkout, POST with channel: %d %+v; want 400 unknown_field naming channel", resp.StatusCode, e)
		}
	}

	// Every order through every service.
	db := cur.DB
	poll(t, ctx, "every order through every service", func() (bool, string) {
		// A dead-lettered record is never going to be processed: fail now.
		for name, mreg := range map[string]*prometheus.Registry{"old": oldReg, "new": curReg} {
			if n := counter(t, mreg, "ordercast_consumer_records_dead_lettered_total"); n != 0 {
				t.Fatalf("%s system dead-lettered %v records; handler failures by group, topic and class: %v",
					name, n, failures(t, mreg))
			}
		}
		p, err := audit.ReadProgress(ctx, db)
		if err != nil {
			return false, err.Error()
		}
		return p.Done() && p.Accepted == len(orders), p.Missing()
	})
	if now := assignment(systems); !equalOwners(now, owners) {
		t.Fatalf("the groups rebalanced during the test (%v, then %v): which member consumed what is unknown", owners, now)
	}

	// Stored, charged, notified and shipped once; nothing dead-lettered.
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	res, err := audit.Check(ctx, db, cl, cur.Serde)
	if err != nil {
		t.Fatal(err)
	}
	for name, inv := range res.Invariants {
		if !inv.OK {
			t.Errorf("invariant %s: %s", name, inv.Detail)
		}
	}
	for g, n := range res.DLQRecords {
		if n != 0 {
			t.Errorf("%d records in %s", n, g+".dlq")
		}
	}

	// orderCreated holds v1 records from the old checkout and v2 records
	// from the new one.
	recs, err := audit.ReadTopic(ctx, cl, order.TopicOrderCreated)
	if err != nil {
		t.Fatal(err)
	}
	via := map[string]string{}
	for _, o := range orders {
		via[o.id] = o.via
	}
	ids := map[int]int{}
	for _, r := range recs {
		if len(r.Value) < 5 || r.Value[0] != 0 {
			t.Fatalf("orderCreated %d/%d is not wire-format Avro", r.Partition, r.Offset)
		}
		id := int(binary.BigEndian.Uint32(r.Value[1:5]))
		ids[id]++
		var ev order.OrderCreated
		if _, err := cur.Serde.Decode(order.TopicOrderCreated, r.Value, &ev); err != nil {
			t.Fatalf("orderCreated %d/%d: %v", r.Partition, r.Offset, err)
		}
		if want := map[string]int{"old": oldID, "new": curID}[via[ev.OrderID]]; id != want {
			t.Errorf("order %s placed through the %s checkout has schema id %d, want %d", ev.OrderID, via[ev.OrderID], id, want)
		}
	}
	if len(ids) != 2 || ids[oldID] != perCheckout || ids[curID] != perCheckout {
		t.Errorf("orderCreated records by schema id %v, want %d each of v1 (%d) and v2 (%d)", ids, perCheckout, oldID, curID)
	}

	// The channel the orders service stored, by who wrote and who read.
	rows, err := db.QueryContext(ctx, `SELECT o.order_id, o.channel, i."partition"
		FROM orders o JOIN checkout_requests c ON c.order_id = o.order_id
		JOIN inbox i ON i.consumer_group = 'orders' AND i.topic = 'orderCreated' AND i.event_id = c.event_id`)
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]struct {
		channel   *string
		partition int32
	}{}
	for rows.Next() {
		var id string
		var ch *string
		var p int32
		if err := rows.Scan(&id, &ch, &p); err != nil {
			t.Fatal(err)
		}
		stored[id] = struct {
			channel   *string
			partition int32
		}{ch, p}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	cases := map[string]int{} // "v2 read by new", ...
	for _, o := range orders {
		s, ok := stored[o.id]
		if !ok {
			t.Errorf("order %s: no orders row with its inbox row", o.id)
			continue
		}
		reader := owners[order.GroupOrders][s.partition]
		version := map[string]string{"old": "v1", "new": "v2"}[o.via]
		cases[version+" read by "+reader]++
		want := ""
		if o.via == "new" && reader == "new" {
			want = o.channel
		}
		got := ""
		if s.channel != nil {
			got = *s.channel
			if got == "" {
				t.Errorf("order %s: channel stored as '' instead of NULL", o.id)
			}
		}
		if got != want {
			t.Errorf("order %s (%s, read by the %s orders member, sent channel %q): stored channel %q, want %q",
				o.id, version, reader, o.channel, got, want)
		}
	}
	for _, c := range []string{"v2 read by new", "v2 read by old", "v1 read by new", "v1 read by old"} {
		if cases[c] == 0 {
			t.Errorf("no order was %s: the test did not cover it (%v)", c, cases)
		}
	}

	// Each system's own members processed records, and none failed.
	for name, mreg := range map[string]*prometheus.Registry{"old": oldReg, "new": curReg} {
		for g, topic := range inputTopic {
			if g == order.GroupFulfillment {
				// The exactly-once members count transactions, not records.
				if n := counter(t, mreg, "ordercast_txn_transactions_total", "group", g, "result", "committed"); n == 0 {
					t.Errorf("%s system: group %s committed no transaction", name, g)
				}
				continue
			}
			if n := counter(t, mreg, "ordercast_consumer_records_processed_total", "group", g, "topic", topic); n == 0 {
				t.Errorf("%s system: group %s processed no %s record", name, g, topic)
			}
		}
		if n := counter(t, mreg, "ordercast_consumer_records_failed_total"); n != 0 {
			t.Errorf("%s system: %v handler failures: %v", name, n, failures(t, mreg))
		}
		if n := counter(t, mreg, "ordercast_consumer_records_dead_lettered_total"); n != 0 {
			t.Errorf("%s system: %v records dead-lettered", name, n)
		}
	}

	// GET shows the channel the new member stored.
	for _, o := range orders {
		if s := stored[o.id]; s.channel != nil {
			v := getOrder(t, ctx, cur.HTTPAddr(), o.id)
			if v.Channel != *s.channel {
				t.Errorf("GET %s: channel %q, want %q", o.id, v.Channel, *s.channel)
			}
			break
		}
	}
	t.Logf("orders %d; orderCreated records by schema id %v; channel cases %v", len(orders), ids, cases)
}

// poll calls cond until it reports true, failing the test with cond's last
// message when ctx ends.
func poll(t *testing.T, ctx context.Context, what string, cond func() (bool, string)) {
	t.Helper()
	tick := time.NewTicker(25 * time.Millisecond) // poll interval, not synchronisation
	defer tick.Stop()
	for {
		ok, msg := cond()
		if ok {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s: %s", what, msg)
		}
	}
}

var partitionRe = regexp.MustCompile(`^(.+)\[([0-9]+)\]$`)

// assignment returns, per group, which system holds each partition of the
// group's input topic ("?" when both claim it).
func assignment(systems map[string]*system.System) map[string]map[int32]string {
	out := map[string]map[int32]string{}
	for g := range inputTopic {
		out[g] = map[int32]string{}
	}
	for name, sys := range systems {
		for _, m := range sys.Health(context.Background()).Members {
			for _, tp := range m.Partitions {
				mm := partitionRe.FindStringSubmatch(tp)
				if mm == nil || mm[1] != inputTopic[m.Group] {
					continue
				}
				p, _ := strconv.Atoi(mm[2])
				if prev, ok := out[m.Group][int32(p)]; ok && prev != name {
					out[m.Group][int32(p)] = "?"
				} else {
					out[m.Group][int32(p)] = name
				}
			}
		}
	}
	return out
}

func equalOwners(a, b map[string]map[int32]string) bool {
	if len(a) != len(b) {
		return false
	}
	for g := range a {
		if len(a[g]) != len(b[g]) {
			return false
		}
		for p, s := range a[g] {
			if b[g][p] != s {
				return false
			}
		}
	}
	return true
}

// post places an order through a checkout and returns its id.
func post(t *testing.T, ctx context.Context, addr string, body map[string]any) string {
	t.Helper()
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/orders", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ok order.PlaceOrderResponse
	if err := json.NewDecoder(resp.Body).Decode(&ok); err != nil || resp.StatusCode != http.StatusAccepted || ok.OrderID == "" {
		t.Fatalf("POST %s to %s: %d %+v %v", b, addr, resp.StatusCode, ok, err)
	}
	return ok.OrderID
}

func getOrder(t *testing.T, ctx context.Context, addr, id string) checkout.OrderView {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/orders/"+id, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v checkout.OrderView
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", id, resp.StatusCode, err)
	}
	return v
}

// failures lists a registry's handler failures as "group/topic/class: n".
func failures(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != "ordercast_consumer_records_failed_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			out = append(out, fmt.Sprintf("%s/%s/%s: %v", l["group"], l["topic"], l["class"], m.GetCounter().GetValue()))
		}
	}
	return out
}

// counter sums the samples of a counter family in reg whose labels match
// the given name/value pairs.
func counter(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	return promtest.Sum(t, reg, name, labels...)
}
