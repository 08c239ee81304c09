package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/processor"
	"github.com/ordercast/ordercast/processor/processortest"
)

// A KafkaJS consumer (cmd/ordercast/testdata/kafkajs/consumer.js, KafkaJS's
// default RoundRobinAssigner) and an Ordercast member offering
// Assignors(cooperative-sticky, RoundRobinAssigner) share one group during
// a migration: the group runs KafkaJS's assignor with both members holding
// partitions, no record is lost across the handovers (the KafkaJS consumer
// joins, then leaves), and a second Ordercast member offering
// cooperative-sticky alone moves the group to cooperative-sticky.
func TestKafkaJSSharesAGroupDuringMigration(t *testing.T) {
	t.Parallel()
	node := nodeTool(t)
	kc, err := processortest.Start(map[string]int32{"transfers": 4})
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	next := 0
	produce := func(n int) {
		t.Helper()
		var recs []*kgo.Record
		for range n {
			v, _ := json.Marshal(map[string]string{"eventId": fmt.Sprintf("e%05d", next)})
			recs = append(recs, &kgo.Record{Topic: "transfers", Partition: int32(next % 4), Key: []byte(fmt.Sprint(next)), Value: v})
			next++
		}
		if err := kc.Produce(ctx, recs...); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	handled := map[string][]string{} // eventId -> members that handled it
	note := func(who, id string) {
		mu.Lock()
		handled[id] = append(handled[id], who)
		mu.Unlock()
	}
	member := func(name string, opts ...processor.Opt) (*processor.Processor, func()) {
		p, err := processor.New(append([]processor.Opt{processor.Brokers(kc.Brokers()...), processor.Group("ledger"),
			processor.Topics("transfers"), processor.CommitInterval(20 * time.Millisecond), processor.CreateTopics(true),
			processor.SessionTimeout(6 * time.Second), processor.RebalanceTimeout(10 * time.Second),
			processor.WithHandler(func(_ context.Context, r *kgo.Record) error {
				var ev struct{ EventID string }
				if err := json.Unmarshal(r.Value, &ev); err != nil {
					return processor.Permanent(err)
				}
				note(name, ev.EventID)
				return nil
			})}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		mctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- p.Run(mctx) }()
		return p, func() {
			stop()
			if err := <-done; err != nil {
				t.Errorf("%s: Run: %v", name, err)
			}
		}
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); !cond(); {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	adm := kadm.NewClient(mustClient(t, kc.Brokers()))
	described := func() kadm.DescribedGroup {
		d, err := adm.DescribeGroups(ctx, "ledger")
		if err != nil {
			t.Fatal(err)
		}
		return d["ledger"]
	}

	produce(100)
	a, stopA := member("A", processor.Assignors(processor.AssignorCooperativeSticky, processor.AssignorKafkaJSRoundRobin))
	wait("A holds every partition", func() bool { return len(a.Health().Partitions) == 4 })

	// The KafkaJS consumer runs for 20 s, then leaves the group.
	cmd := exec.CommandContext(ctx, node, "consumer.js")
	cmd.Dir = nodeDir
	cmd.Env = append(os.Environ(), "KAFKA_BROKERS="+strings.Join(kc.Brokers(), ","), "TOPIC=transfers", "GROUP=ledger", "RUN_MS=20000")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	nodeDone := make(chan error, 1)
	go func() { nodeDone <- cmd.Wait() }()
	wait("the group shared by A and the KafkaJS consumer", func() bool {
		d := described()
		return len(d.Members) == 2 && d.State == "Stable" && len(a.Health().Partitions) > 0 && len(a.Health().Partitions) < 4
	})
	if d := described(); d.Protocol != processor.AssignorKafkaJSRoundRobin {
		t.Fatalf("the shared group runs %q, want %q", d.Protocol, processor.AssignorKafkaJSRoundRobin)
	}
	produce(100) // handled by both
	if err := <-nodeDone; err != nil {
		t.Fatalf("node consumer.js: %v\nstderr:\n%s", err, stderr.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		var m struct{ EventID string }
		if line != "" {
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("consumer.js printed %q: %v", line, err)
			}
			note("kafkajs", m.EventID)
		}
	}
	wait("A holds every partition again", func() bool { return len(a.Health().Partitions) == 4 })
	produce(100)

	b, stopB := member("B") // cooperative-sticky alone: the second rolling step
	wait("B holds partitions", func() bool { return len(b.Health().Partitions) > 0 })
	if d := described(); d.Protocol != processor.AssignorCooperativeSticky {
		t.Fatalf("with only Ordercast members the group runs %q, want %q", d.Protocol, processor.AssignorCooperativeSticky)
	}
	produce(100)
	wait("every record handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == next
	})
	stopA()
	stopB()

	mu.Lock()
	defer mu.Unlock()
	by, twice := map[string]int{}, 0
	for _, who := range handled {
		for _, w := range who {
			by[w]++
		}
		if len(who) > 1 {
			twice++
		}
	}
	if by["kafkajs"] == 0 || by["A"] == 0 || by["B"] == 0 {
		t.Fatalf("records handled per member %v: every member should have handled some", by)
	}
	// KafkaJS commits what it resolved on its rebalances and when it
	// leaves, and Ordercast commits on revoke: records handled twice are
	// at most those KafkaJS handled after its last commit (an inbox
	// absorbs them).
	t.Logf("%d records: handled per member %v, %d handled twice", next, by, twice)
}

func mustClient(t *testing.T, brokers []string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}
