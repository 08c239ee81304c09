package ops_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/ordersystem/ops"
)

// Creating a topic that exists already with other values reports what the
// topic has (partitions, replication factor, min.insync.replicas), not
// what was asked, and a note naming each difference; the topic is left as
// it is and the call is no error. With the values it has, there is no note.
func TestCreateTopicsExistingReportsActual(t *testing.T) {
	_, adm := testCluster(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rf := testkafka.ReplicationFactor(t)

	first := ops.TopicSpec{Name: "audit", Partitions: 12, ReplicationFactor: rf, MinInsyncReplicas: 1}
	res, err := ops.CreateTopics(ctx, adm, []ops.TopicSpec{first}, map[string]string{"retention.ms": "604800000"})
	if err != nil || len(res) != 1 || res[0].Status != "created" || res[0].Note != "" {
		t.Fatalf("first create: %+v, %v", res, err)
	}

	// Again with other values, and a new topic in the same call.
	asked := ops.TopicSpec{Name: "audit", Partitions: 3, ReplicationFactor: rf + 1, MinInsyncReplicas: 2}
	fresh := ops.TopicSpec{Name: "audit.fresh", Partitions: 3, ReplicationFactor: rf, MinInsyncReplicas: 1}
	res, err = ops.CreateTopics(ctx, adm, []ops.TopicSpec{asked, fresh}, map[string]string{"retention.ms": "1000"})
	if err != nil || len(res) != 2 {
		t.Fatalf("second create: %+v, %v", res, err)
	}
	got := res[0]
	if got.Topic != "audit" || got.Status != "exists" || got.Partitions != 12 || got.ReplicationFactor != rf || got.MinInsyncReplicas != 1 {
		t.Errorf("existing topic reported as %+v, want exists with 12 partitions, RF %d, min ISR 1 (what it has)", got, rf)
	}
	for _, want := range []string{
		"12 partitions, not 3",
		fmt.Sprintf("replication factor %d, not %d", rf, rf+1),
		"min.insync.replicas=1, not 2",
		"retention.ms=604800000, not 1000",
		"left unchanged",
	} {
		if !strings.Contains(got.Note, want) {
			t.Errorf("note %q lacks %q", got.Note, want)
		}
	}
	if f := res[1]; f.Topic != "audit.fresh" || f.Status != "created" || f.Partitions != 3 || f.Note != "" {
		t.Errorf("new topic: %+v", f)
	}

	// Nothing was changed.
	topics, err := ops.ListTopics(ctx, adm, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range topics {
		if ti.Topic == "audit" && (ti.Partitions != 12 || ti.MinInsyncReplicas != "1") {
			t.Errorf("audit changed: %+v", ti)
		}
	}

	// With the values it has: exists, no note.
	res, err = ops.CreateTopics(ctx, adm, []ops.TopicSpec{first}, map[string]string{"retention.ms": "604800000"})
	if err != nil || len(res) != 1 || res[0].Status != "exists" || res[0].Note != "" || res[0].Partitions != 12 {
		t.Errorf("create with the values it has: %+v, %v", res, err)
	}
	// A spec without min ISR or RF (broker defaults) is not compared on them.
	res, err = ops.CreateTopics(ctx, adm, []ops.TopicSpec{{Name: "audit", Partitions: 12}}, nil)
	if err != nil || len(res) != 1 || res[0].Status != "exists" || res[0].Note != "" || res[0].MinInsyncReplicas != 1 {
		t.Errorf("create without RF and min ISR: %+v, %v", res, err)
	}
}
