package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/ordersystem/ops"
	"github.com/ordercast/ordercast/processor"
)

// ordercast runs the CLI in process and returns its output and error.
func ordercast(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRoot()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, err := ordercast(t, args...)
	if err != nil {
		t.Fatalf("ordercast %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// TestOperatorCommands drives topics, groups and dlq as an operator would,
// against an embedded broker (or the real cluster of ORDERCAST_TEST_BROKERS),
// in table and JSON output.
func TestOperatorCommands(t *testing.T) {
	addrs := testkafka.Cluster(t, nil)
	brokers := "--brokers=" + strings.Join(addrs, ",")
	// What `topics create --system` picks: RF min(3, brokers), min ISR RF-1.
	rf := testkafka.ReplicationFactor(t)
	minISR := max(1, int(rf)-1)

	// topics create --system, twice: created, then exists.
	out := mustRun(t, "topics", "create", "--system", "--partitions", "2", brokers)
	if !strings.Contains(out, "orders.dlq") || !strings.Contains(out, "created") {
		t.Fatalf("topics create --system:\n%s", out)
	}
	var created []ops.CreateResult
	if err := json.Unmarshal([]byte(mustRun(t, "topics", "create", "--system", brokers, "-o", "json")), &created); err != nil {
		t.Fatal(err)
	}
	for _, r := range created {
		if r.Status != "exists" || r.ReplicationFactor != rf || r.MinInsyncReplicas != minISR {
			t.Errorf("second create: %+v", r)
		}
	}
	if rf == 1 {
		if _, err := ordercast(t, "topics", "create", "x", "--replication-factor", "3", brokers); err == nil || !strings.Contains(err.Error(), "has 1 brokers") {
			t.Errorf("RF 3 on one broker: %v", err)
		}
	}
	var topics []ops.TopicInfo
	if err := json.Unmarshal([]byte(mustRun(t, "topics", "list", brokers, "-o", "json")), &topics); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ti := range topics {
		found = found || (ti.Topic == "payments.dlq" && ti.Partitions == 2 && ti.MinInsyncReplicas == strconv.Itoa(minISR))
	}
	if !found {
		t.Errorf("topics list lacks payments.dlq with 2 partitions and min ISR %d: %+v", minISR, topics)
	}
	if out := mustRun(t, "topics", "list", brokers); !strings.Contains(out, "MIN.ISR") || !strings.Contains(out, "OFFSETS") || !strings.Contains(out, "orderCreated") {
		t.Errorf("topics list table:\n%s", out)
	}

	// Two DLQ records as the runtime writes them.
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	hdr := func(class string, off string) []kgo.RecordHeader {
		return []kgo.RecordHeader{
			{Key: processor.HeaderOriginalTopic, Value: []byte("orderCreated")},
			{Key: processor.HeaderOriginalPartition, Value: []byte("1")},
			{Key: processor.HeaderOriginalOffset, Value: []byte(off)},
			{Key: processor.HeaderConsumerGroup, Value: []byte("orders")},
			{Key: processor.HeaderErrorClass, Value: []byte(class)},
			{Key: processor.HeaderErrorMessage, Value: []byte("schema: orderCreated: " + class)},
			{Key: processor.HeaderAttempts, Value: []byte("1")},
			{Key: processor.HeaderOriginalTimestamp, Value: []byte("1700000000123")},
		}
	}
	if err := cl.ProduceSync(context.Background(),
		&kgo.Record{Topic: "orders.dlq", Partition: 0, Key: []byte("17850"), Value: []byte{0xde, 0xad}, Headers: hdr("undecodable", "7")},
		&kgo.Record{Topic: "orders.dlq", Partition: 0, Key: []byte("17851"), Value: []byte(`{"eventId":"e"}`), Headers: hdr("invalid", "8")},
	).FirstErr(); err != nil {
		t.Fatal(err)
	}

	out = mustRun(t, "dlq", "list", "--group", "orders", brokers)
	for _, want := range []string{"2 records pending", "undecodable", "invalid", "orders.dlq/0/0", "orderCreated/1/7"} {
		if !strings.Contains(out, want) {
			t.Errorf("dlq list lacks %q:\n%s", want, out)
		}
	}
	var l ops.Listing
	if err := json.Unmarshal([]byte(mustRun(t, "dlq", "list", "--group", "orders", "--class", "invalid", brokers, "-o", "json")), &l); err != nil {
		t.Fatal(err)
	}
	if l.Selected != 1 || l.Records[0].Key != "17851" {
		t.Errorf("dlq list --class invalid: %+v", l)
	}
	out = mustRun(t, "dlq", "show", "orders.dlq/0/1", "--registry", "", brokers)
	for _, want := range []string{"ordercast-error-class: invalid", "payload (json", `"eventId": "e"`, "original time", "2023-11-14T22:13:20.123Z"} {
		if !strings.Contains(out, want) {
			t.Errorf("dlq show lacks %q:\n%s", want, out)
		}
	}
	out = mustRun(t, "dlq", "show", "orders.dlq/0/0", "--registry", "", brokers)
	if !strings.Contains(out, "de ad") {
		t.Errorf("dlq show of bytes lacks a hex dump:\n%s", out)
	}

	out = mustRun(t, "dlq", "replay", "--group", "orders", "--class", "undecodable", brokers)
	if !strings.Contains(out, "replayed 1 of 1") || !strings.Contains(out, "orders.dlq/0/0") {
		t.Errorf("dlq replay:\n%s", out)
	}
	out, err = ordercast(t, "dlq", "replay", "--group", "orders", "--class", "undecodable", brokers)
	if err == nil || !strings.Contains(err.Error(), "already replayed") || !strings.Contains(err.Error(), "--force") || !strings.Contains(out, "refused") {
		t.Errorf("second dlq replay: %v\n%s", err, out)
	}
	out = mustRun(t, "dlq", "purge", "--group", "orders", "--all", brokers)
	if !strings.Contains(out, "purged orders.dlq") {
		t.Errorf("dlq purge:\n%s", out)
	}
	if out := mustRun(t, "dlq", "list", "--group", "orders", brokers); !strings.Contains(out, "0 records pending") {
		t.Errorf("dlq list after purge:\n%s", out)
	}
	// Moving the position back un-purges: said so, with positive counts.
	out = mustRun(t, "dlq", "purge", "--group", "orders", "--partition", "0", "--to-offset", "0", "--force", brokers)
	if !strings.Contains(out, "un-purged") || strings.Contains(out, "-1") {
		t.Errorf("dlq purge back to offset 0:\n%s", out)
	}
	if out := mustRun(t, "dlq", "list", "--group", "orders", brokers); !strings.Contains(out, "1 records pending") {
		t.Errorf("dlq list after un-purging offset 1:\n%s", out)
	}

	// groups: no group yet is fine; a named missing group is an error.
	if out := mustRun(t, "groups", brokers); !strings.Contains(out, "no consumer groups") {
		t.Errorf("groups:\n%s", out)
	}
	if _, err := ordercast(t, "groups", "nobody", brokers); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("groups nobody: %v", err)
	}

	// Errors say what is wrong and how to fix it.
	checkFlagErrors(t, []flagCase{
		{[]string{"dlq", "list", brokers}, []string{"--group is required", "orders"}},
		{[]string{"dlq", "list", "--group", "nosuch", brokers}, []string{"nosuch.dlq", "does not exist"}},
		{[]string{"dlq", "purge", "--group", "orders", brokers}, []string{"--all", "--to-offset"}},
		{[]string{"dlq", "purge", "--group", "orders", "--partition", "0", "--to-offset", "-1", brokers}, []string{"--to-offset -1", "offset >= 0"}},
		{[]string{"dlq", "replay", "--group", "orders", "--to", "elsewhere", brokers}, []string{"--to", "source", "retry"}},
		{[]string{"groups", "-o", "yaml", brokers}, []string{"--output", "table or json"}},
		{[]string{"groups", "--brokers", "127.0.0.1:1", "--timeout", "3s"}, []string{"127.0.0.1:1", "--brokers", "KAFKA_BROKERS"}},
	})
}
