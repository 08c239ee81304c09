package testkafka

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A topic that exists when createTopic runs (created by a client an earlier
// test left running after the reset listed the topics, or by an attempt of
// ours whose answer was lost) is not taken as the new one: createTopic
// answers TOPIC_ALREADY_EXISTS by deleting it and creating the topic again,
// so the test gets an empty topic of the shape it asked for, with a new ID,
// ready (waitReady) within the deadline. On the embedded broker and a real
// cluster alike.
func TestCreateTopicReplacesExisting(t *testing.T) {
	var brokers []string
	if Real() {
		brokers = Cluster(t, nil)
	} else {
		_, brokers = Fake(t, nil)
	}
	cl, adm := admin(t, brokers)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rf := ReplicationFactor(t)
	for _, name := range []string{"tk.foreign", "tk.same-shape"} {
		partitions := int32(2)
		if name == "tk.foreign" {
			partitions = 1 // another shape, and records
		}
		r, err := adm.CreateTopic(ctx, partitions, rf, nil, name)
		if err == nil {
			err = r.Err
		}
		if err != nil {
			t.Fatalf("create %s beforehand: %v", name, err)
		}
		if name == "tk.foreign" {
			WaitFor(t, 30*time.Second, name+" to take a record", func() bool {
				return cl.ProduceSync(ctx, &kgo.Record{Topic: name, Value: []byte("old")}).FirstErr() == nil
			})
		}
		id, err := createTopic(ctx, adm, name, 2, rf, map[kadm.TopicID]bool{})
		if err != nil {
			t.Fatalf("createTopic %s over an existing one: %v", name, err)
		}
		if id == r.ID {
			t.Errorf("%s: createTopic returned the existing topic's ID %s", name, id)
		}
		md, err := adm.BrokerMetadata(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var nodes []int32
		for _, b := range md.Brokers {
			nodes = append(nodes, b.NodeID)
		}
		if err := waitReady(ctx, cl, nodes, map[string]int32{name: 2}, map[string]kadm.TopicID{name: id}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// A fresh client: cl's cached metadata (MetadataMinAge, 5s) still
		// knows the old topic it produced to.
		fresh, fadm := admin(t, brokers)
		ends, err := fadm.ListEndOffsets(ctx, name)
		fresh.Close()
		if err != nil {
			t.Fatal(err)
		}
		if n := len(ends[name]); n != 2 {
			t.Errorf("%s has %d partitions, want 2", name, n)
		}
		for p, o := range ends[name] {
			if o.Err != nil || o.Offset != 0 {
				t.Errorf("%s/%d: end offset %d, error %v; want an empty new topic", name, p, o.Offset, o.Err)
			}
		}
	}
}
