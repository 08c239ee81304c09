package testkafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkafka"
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
