package processor

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// New does not join the group: a Processor that is built but never Run
// holds no partition, so a running member of the same group gets them all
// and commits every record. Without it (ConsumeTopics given to the client
// in New) the idle member took a partition at New and held it for the
// life of the process.
func TestNewDoesNotJoin(t *testing.T) {
	addrs := testCluster(t, map[string]int32{"in": 2})
	idle, err := New(Brokers(addrs...), Group("g"), Topics("in"), WithHandler(func(context.Context, *kgo.Record) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = idle.Run(ctx) // a cancelled Run releases an unrun Processor
	})
	m := startMember(t, Brokers(addrs...), Group("g"), Topics("in"), CommitInterval(10*time.Millisecond),
		WithHandler(func(context.Context, *kgo.Record) error { return nil }))
	var recs []*kgo.Record
	for i := range 20 {
		recs = append(recs, &kgo.Record{Topic: "in", Partition: int32(i % 2), Value: []byte{byte(i)}})
	}
	produce(t, addrs, recs...)
	waitFor(t, 30*time.Second, "the running member to hold both partitions and commit all 20 records", func() bool {
		c := committed(t, addrs, "g", "in")
		return len(m.p.Health().Partitions) == 2 && c[0]+c[1] == 20
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	groups, err := kadm.NewClient(cl).DescribeGroups(context.Background(), "g")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(groups["g"].Members); n != 1 {
		t.Fatalf("group g has %d members, want 1 (the Processor never Run must not join)", n)
	}
}
