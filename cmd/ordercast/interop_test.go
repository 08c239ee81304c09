package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/service/checkout"
)

// nodeDir is the Node.js interop service (cmd/ordercast/testdata/kafkajs).
const nodeDir = "testdata/kafkajs"

// running is an `ordercast up` process without --replay.
type running struct {
	base     string   // checkout's host:port
	brokers  []string // the brokers it uses (embedded or --brokers)
	registry string   // the schema registry URL
}

// startUp starts `ordercast up` with upArgs and extra flags and returns once
// checkout listens; the process is stopped with SIGTERM (and must exit 0)
// when the test ends.
func startUp(t *testing.T, bin, dataDir string, extra ...string) running {
	t.Helper()
	p := launchUp(t, bin, upArgs(dataDir, extra...)...)
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		if code := p.wait(t); code != 0 {
			t.Errorf("ordercast up after SIGTERM: exit %d, want 0\n%s", code, p.log())
		}
	})
	return running{base: p.base, brokers: p.brokers, registry: p.registry}
}

// placeOrder posts an order to checkout and returns its 202 answer.
func placeOrder(t *testing.T, base, key, body string) order.PlaceOrderResponse {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+base+"/orders", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST /orders: %v", err)
	}
	defer resp.Body.Close()
	var ok order.PlaceOrderResponse
	if err := json.NewDecoder(resp.Body).Decode(&ok); err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /orders %s: %d, %+v, %v", body, resp.StatusCode, ok, err)
	}
	return ok
}

// orderView reads GET /orders/{id}; ok is false on 404.
func orderView(t *testing.T, base, id string) (v checkout.OrderView, ok bool) {
	t.Helper()
	resp, err := http.Get("http://" + base + "/orders/" + id)
	if err != nil {
		t.Fatalf("GET /orders/%s: %v", id, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return v, false
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /orders/%s: %d %v", id, resp.StatusCode, err)
	}
	return v, true
}

// settled waits until every order reached its last stage (shipment
// requested, or payment refused) and was notified, and returns the views.
func settled(t *testing.T, base string, ids []string, within time.Duration) map[string]checkout.OrderView {
	t.Helper()
	deadline := time.Now().Add(within)
	out := map[string]checkout.OrderView{}
	for _, id := range ids {
		for {
			v, ok := orderView(t, base, id)
			if ok && v.Notified && (v.Status == checkout.StageShipmentRequested || v.Status == checkout.StagePaymentRefused) {
				out[id] = v
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("order %s not through every service after %v: found %v, %+v", id, within, ok, v)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return out
}

// nodeTool returns the node binary, or skips saying how to get it and the
// interop service's dependencies.
func nodeTool(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not found: the Node.js interop test needs Node.js 18+ (.ci/run installs the rest with npm ci)")
	}
	if _, err := os.Stat(filepath.Join(nodeDir, "node_modules", "kafkajs")); err != nil {
		t.Skipf("cmd/ordercast/testdata/kafkajs/node_modules missing: run (cd cmd/ordercast/testdata/kafkajs && npm ci)")
	}
	return node
}

// runNode runs a script of cmd/ordercast/testdata/kafkajs with env added and returns its
// stdout lines, each a JSON object.
func runNode(t *testing.T, node, script string, env ...string) []map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Dir = nodeDir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node %s: %v\nstdout:\n%s\nstderr:\n%s", script, err, stdout.String(), stderr.String())
	}
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("node %s printed %q: %v", script, line, err)
		}
		out = append(out, m)
	}
	if stderr.Len() > 0 {
		t.Logf("node %s stderr:\n%s", script, stderr.String())
	}
	return out
}

// TestInterop runs Ordercast next to other clients on one broker (the
// embedded one, or the real cluster of ORDERCAST_TEST_BROKERS):
//
//   - node-producer: a Node.js service (cmd/ordercast/testdata/kafkajs, KafkaJS) publishes
//     orderCreated as plain JSON; Ordercast's orders, payments and
//     notifications services store, charge and notify those orders, and
//     fulfillment requests their shipments.
//   - node-consumer: a Node.js consumer in its own group reads orderCreated
//     and decodes checkout's records as Avro through the schema registry
//     (@kafkajs/confluent-schema-registry) and the Node orders as JSON.
//   - kcat: librdkafka's kcat reads shipmentRequested with
//     isolation.level=read_committed and sees exactly one record per paid
//     order.
func TestInterop(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	freshCluster(t)
	bin := buildBinary(t)
	// --auth none: this test is of the Kafka clients side by side, not of
	// checkout's tokens (TestDevAuthEndToEnd is).
	up := startUp(t, bin, filepath.Join(t.TempDir(), "data"), "--auth", "none")

	// Orders through Ordercast's own checkout: known customers pay from
	// their wallets, the guest by card.
	type placed struct {
		id, customer string
		total        order.Money
	}
	var ours []placed
	for i, c := range []string{"17850", "13047", "", "12583"} {
		cust := "null" // a guest
		if c != "" {
			cust = fmt.Sprintf("%q", c)
		}
		body := fmt.Sprintf(`{"customerId":%s,"lines":[{"stockCode":"85123A","quantity":%d},{"stockCode":"71053","quantity":2}]}`, cust, i+1)
		ok := placeOrder(t, up.base, fmt.Sprintf("interop-%d", i), body)
		total, err := order.ParseMoney(ok.Total)
		if err != nil {
			t.Fatalf("total %q: %v", ok.Total, err)
		}
		ours = append(ours, placed{ok.OrderID, c, total})
	}
	all := []string{}
	for _, p := range ours {
		all = append(all, p.id)
	}

	var nodeOrders []map[string]any
	t.Run("node-producer", func(t *testing.T) {
		node := nodeTool(t)
		var b [4]byte
		_, _ = rand.Read(b[:])
		nodeOrders = runNode(t, node, "producer.js", "KAFKA_BROKERS="+strings.Join(up.brokers, ","), "ORDERS=6",
			"ID_PREFIX=node-"+hex.EncodeToString(b[:]))
		if len(nodeOrders) != 6 {
			t.Fatalf("the producer acknowledged %d orders, want 6", len(nodeOrders))
		}
		var ids []string
		for _, o := range nodeOrders {
			ids = append(ids, o["orderId"].(string))
		}
		views := settled(t, up.base, ids, 90*time.Second)
		for _, o := range nodeOrders {
			v := views[o["orderId"].(string)]
			if v.TotalMilli == nil || float64(*v.TotalMilli) != o["totalMilli"].(float64) {
				t.Errorf("order %s stored with total %v, the Node producer sent %v", v.OrderID, v.TotalMilli, o["totalMilli"])
			}
			if v.CustomerID != "" && v.CustomerID != o["key"] {
				t.Errorf("order %s stored for customer %q, sent keyed %v", v.OrderID, v.CustomerID, o["key"])
			}
			paid := false
			for _, h := range v.History {
				paid = paid || h.Kind == checkout.StagePaid
			}
			if !paid || v.Status != checkout.StageShipmentRequested {
				t.Errorf("order %s from Node: status %s, history %+v; want paid and shipment requested", v.OrderID, v.Status, v.History)
			}
		}
		all = append(all, ids...)
	})

	t.Run("node-consumer", func(t *testing.T) {
		node := nodeTool(t)
		want := len(ours) + len(nodeOrders)
		recs := runNode(t, node, "consumer.js", "KAFKA_BROKERS="+strings.Join(up.brokers, ","),
			"SCHEMA_REGISTRY_URL="+up.registry, "GROUP=node-interop", fmt.Sprint("WANT=", want), "TIMEOUT_MS=60000")
		got := map[string]map[string]any{}
		for _, r := range recs {
			if id, ok := r["orderId"].(string); ok {
				got[id] = r
			}
		}
		for _, p := range ours {
			r, ok := got[p.id]
			switch {
			case !ok:
				t.Errorf("the Node consumer did not read checkout's order %s: %v", p.id, recs)
			case r["format"] != "avro" || r["totalMilli"] != float64(p.total) || (p.customer != "" && r["customerId"] != p.customer):
				t.Errorf("checkout's order %s read by Node as %v, want Avro with total %d customer %q", p.id, r, p.total, p.customer)
			}
		}
		for _, o := range nodeOrders {
			if r := got[o["orderId"].(string)]; r == nil || r["format"] != "json" {
				t.Errorf("the Node order %v read back as %v, want JSON", o["orderId"], r)
			}
		}
	})

	t.Run("kcat", func(t *testing.T) {
		kcat, err := exec.LookPath("kcat")
		if err != nil {
			t.Skip("kcat not found (apt-get install kcat)")
		}
		views := settled(t, up.base, all, 90*time.Second)
		paid := 0
		for _, v := range views {
			if v.Status == checkout.StageShipmentRequested {
				paid++
			}
		}
		count := func(isolation string) int {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, kcat, "-C", "-b", strings.Join(up.brokers, ","), "-t", order.TopicShipmentRequested,
				"-X", "isolation.level="+isolation, "-o", "beginning", "-e", "-q", "-f", `%k\n`)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("kcat (%s): %v\n%s", isolation, err, stderr.String())
			}
			return strings.Count(string(out), "\n")
		}
		if n := count("read_committed"); n != paid {
			t.Errorf("kcat read_committed: %d shipmentRequested records, want one per paid order: %d", n, paid)
		}
		t.Logf("%d paid orders; kcat read_uncommitted sees %d records (aborted transactions included)", paid, count("read_uncommitted"))
	})
}
