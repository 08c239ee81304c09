package testkafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
)

// A second Cluster in the same test sees none of the first one's topics and
// groups, and exactly the topics it asked for: trivially on kfake (a new
// broker), by deletion on a real cluster.
func TestClusterStartsEmpty(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	brokers := testkafka.Cluster(t, map[string]int32{"tk.a": 3})
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("tk.a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatalf("produce to a topic Cluster created: %v", err)
	}
	adm := kadm.NewClient(cl)
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "tk.a", Partition: 0, At: 1, LeaderEpoch: -1})
	if _, err := adm.CommitOffsets(ctx, "tk.g", offs); err != nil {
		t.Fatalf("commit: %v", err)
	}
	cl.Close()

	brokers = testkafka.Cluster(t, map[string]int32{"tk.b": 2, "tk.c": 1})
	cl, err = kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm = kadm.NewClient(cl)
	td, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for name, d := range td {
		got[name] = len(d.Partitions)
	}
	if len(got) != 2 || got["tk.b"] != 2 || got["tk.c"] != 1 {
		t.Errorf("topics %v, want exactly tk.b (2 partitions) and tk.c (1)", got)
	}
	for name, d := range td {
		for _, p := range d.Partitions {
			if want := int(testkafka.ReplicationFactor(t)); len(p.Replicas) != want {
				t.Errorf("%s/%d has %d replicas, want %d", name, p.Partition, len(p.Replicas), want)
			}
		}
	}
	groups, err := adm.ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 0 {
		t.Errorf("groups %v left from before", groups.Groups())
	}
}

func TestSkipIfReal(t *testing.T) {
	ran := false
	t.Run("fault", func(t *testing.T) {
		testkafka.SkipIfReal(t, "a kfake fault")
		ran = true
	})
	if ran == testkafka.Real() {
		t.Errorf("ran %v on a real cluster %v", ran, testkafka.Real())
	}
}

// A topic re-created under the name of one the reset just deleted is the new
// topic, ready when Cluster returns: at once, a fresh client's ListOffsets
// answers every partition without error (no UNKNOWN_TOPIC_OR_PARTITION
// from a leader that does not host it yet) and with end offset 0 (not the
// deleted topic's records, from a cache that has not applied the delete),
// and the topic's ID is not the deleted one's. Several rounds, since the
// broker's lag after a delete and a create is a matter of timing.
func TestClusterRecreatesSameName(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	topics := map[string]int32{"tk.same": 3, "tk.other": 2}
	var prev kadm.TopicID
	for round := range 5 {
		brokers := testkafka.Cluster(t, topics)
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		adm := kadm.NewClient(cl)
		ends, err := adm.ListEndOffsets(ctx, "tk.same", "tk.other")
		if err != nil {
			cl.Close()
			t.Fatalf("round %d: list end offsets right after Cluster: %v", round, err)
		}
		for name, want := range topics {
			if got := len(ends[name]); got != int(want) {
				t.Errorf("round %d: %d end offsets of %s, want %d", round, got, name, want)
			}
			for p, o := range ends[name] {
				if o.Err != nil || o.Offset != 0 {
					t.Errorf("round %d: %s/%d end offset %d, error %v; want 0 on a new topic", round, name, p, o.Offset, o.Err)
				}
			}
		}
		td, err := adm.ListTopics(ctx, "tk.same")
		if err != nil {
			cl.Close()
			t.Fatal(err)
		}
		switch d := td["tk.same"]; {
		case d.Err != nil:
			t.Errorf("round %d: metadata of tk.same right after Cluster: %v", round, d.Err)
		case d.ID == prev:
			t.Errorf("round %d: tk.same has the deleted topic's ID %s", round, d.ID)
		default:
			prev = d.ID
		}
		// Records on every partition, for the next round to not see.
		var recs []*kgo.Record
		for p := range topics["tk.same"] {
			recs = append(recs, &kgo.Record{Topic: "tk.same", Partition: p, Value: []byte("x")})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Errorf("round %d: produce right after Cluster: %v", round, err)
		}
		cl.Close()
	}
}
