package ops_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

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

// A topic another client creates after this one listed it is described as
// it is, not reported missing: CreateTopics' "exists" answer is followed by
// a read from the broker, not from the client's metadata cache, which keeps
// the earlier "unknown topic" answer for MetadataMinAge (here an hour, so
// that a cached read could only fail).
func TestCreateTopicsExistingCreatedByAnotherClient(t *testing.T) {
	addrs, other := testCluster(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.MetadataMinAge(time.Hour), kgo.MetadataMaxAge(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	rf := testkafka.ReplicationFactor(t)
	spec := ops.TopicSpec{Name: "raced", Partitions: 4, ReplicationFactor: rf}

	// This client sees the topic missing and caches that answer...
	if td, err := adm.ListTopics(ctx, spec.Name); err != nil || td[spec.Name].Err == nil {
		t.Fatalf("before the other client's create: %+v, %v; want the topic unknown", td, err)
	}
	// ... then another client creates it.
	if res, err := ops.CreateTopics(ctx, other, []ops.TopicSpec{spec}, nil); err != nil || res[0].Status != "created" {
		t.Fatalf("the other client's create: %+v, %v", res, err)
	}
	res, err := ops.CreateTopics(ctx, adm, []ops.TopicSpec{spec}, nil)
	if err != nil || len(res) != 1 {
		t.Fatalf("create: %+v, %v", res, err)
	}
	if got := res[0]; got.Status != "exists" || got.Partitions != 4 || got.ReplicationFactor != rf || got.Note != "" {
		t.Errorf("topic created by another client reported as %+v, want exists with 4 partitions, RF %d, no note", got, rf)
	}
}

// EnsureTopics reports the existing topics whose partition count differs
// from the spec, or that have fewer replicas than asked, and leaves them
// as they are.
func TestEnsureTopicsReportsExistingThatDiffer(t *testing.T) {
	_, adm := testCluster(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rf := testkafka.ReplicationFactor(t)
	created, differ, err := ops.EnsureTopics(ctx, adm, []ops.TopicSpec{{Name: "ens", Partitions: 3, ReplicationFactor: rf}})
	if err != nil || len(created) != 1 || len(differ) != 0 {
		t.Fatalf("first: created %v, differ %+v, %v", created, differ, err)
	}
	created, differ, err = ops.EnsureTopics(ctx, adm, []ops.TopicSpec{{Name: "ens", Partitions: 5, ReplicationFactor: rf + 1}})
	if err != nil || len(created) != 0 || len(differ) != 1 {
		t.Fatalf("other values: created %v, differ %+v, %v", created, differ, err)
	}
	d := differ[0]
	if d.Topic != "ens" || d.Status != "exists" || d.Partitions != 3 || d.ReplicationFactor != rf {
		t.Errorf("differ %+v: want ens, exists, 3 partitions, RF %d (what it has)", d, rf)
	}
	for _, want := range []string{"3 partitions, not 5", fmt.Sprintf("replication factor %d, not %d", rf, rf+1), "left unchanged"} {
		if !strings.Contains(d.Note, want) {
			t.Errorf("note %q lacks %q", d.Note, want)
		}
	}
	// What it has, or fewer replicas than it has, or none asked: no report.
	for _, s := range []ops.TopicSpec{{Name: "ens", Partitions: 3, ReplicationFactor: rf}, {Name: "ens", Partitions: 3}, {Name: "ens", Partitions: 3, ReplicationFactor: rf - 1}} {
		if _, differ, err := ops.EnsureTopics(ctx, adm, []ops.TopicSpec{s}); err != nil || len(differ) != 0 {
			t.Errorf("%+v: differ %+v, %v", s, differ, err)
		}
	}
}
