package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/inbox"
	"github.com/ordercast/ordercast/internal/testkit/dbtest"
	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/processor"
	"github.com/ordercast/ordercast/processor/processortest"
)

// A KafkaJS consumer (cmd/ordercast/testdata/kafkajs/consumer.js, KafkaJS's
// default RoundRobinAssigner) and an Ordercast member offering
// Assignors(cooperative-sticky, RoundRobinAssigner) share one group during
// a migration: the group runs KafkaJS's assignor with both members holding
// partitions, and a second Ordercast member offering cooperative-sticky
// alone moves the group to cooperative-sticky. Every member applies each
// record through one inbox (package inbox, on SQLite; the KafkaJS
// consumer's records once it has left, which is the same for an inbox keyed
// by event id): every event is applied exactly once, nothing lost across
// the handovers and nothing applied twice.
//
// The deliveries the inbox absorbs are bounded by the commit schedules.
// Ordercast commits what it handled on revoke, before the partition moves,
// so no record an Ordercast member handled is delivered again. KafkaJS (its
// defaults: autoCommit, no autoCommitInterval or autoCommitThreshold)
// commits after each fetched batch, when its heartbeat learns of a
// rebalance and when it disconnects; so a record is delivered twice only if
// KafkaJS handled it after its last commit that landed before the partition
// moved: on each partition, the records handled twice are the last ones
// KafkaJS handled there, each handled once by KafkaJS and once by an
// Ordercast member.
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
	db := dbtest.SQLite(t, dbtest.Runtime)
	if _, err := db.ExecContext(ctx, `CREATE TABLE applied (event_id TEXT NOT NULL, member TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	// apply is the service's effect, through the inbox: a row of applied
	// per event, and no unique key on it, so an event applied twice shows.
	apply := func(who, id string, partition int32, offset int64) error {
		_, err := inbox.Process(ctx, db, "ledger", id, inbox.Meta{Topic: "transfers", Partition: partition, Offset: offset},
			func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, db.Rebind(`INSERT INTO applied (event_id, member) VALUES (?, ?)`), id, who)
				return err
			})
		return err
	}
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
	type delivery struct {
		who       string
		partition int32
		offset    int64
	}
	var mu sync.Mutex
	handled := map[string][]delivery{} // eventId -> its deliveries
	note := func(who, id string, partition int32, offset int64) {
		mu.Lock()
		handled[id] = append(handled[id], delivery{who, partition, offset})
		mu.Unlock()
	}
	member := func(name string, opts ...processor.Opt) (*processor.Processor, func()) {
		p, err := processor.New(append([]processor.Opt{processor.Brokers(kc.Brokers()...), processor.Group("ledger"),
			processor.Topics("transfers"), processor.CommitInterval(20 * time.Millisecond), processor.CreateTopics(true),
			processor.SessionTimeout(6 * time.Second), processor.RebalanceTimeout(10 * time.Second),
			processor.WithHandler(func(ctx context.Context, r *kgo.Record) error {
				var ev struct{ EventID string }
				if err := json.Unmarshal(r.Value, &ev); err != nil {
					return processor.Permanent(err)
				}
				if err := apply(name, ev.EventID, r.Partition, r.Offset); err != nil {
					return err
				}
				note(name, ev.EventID, r.Partition, r.Offset)
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
		testkafka.WaitFor(t, 60*time.Second, what, cond)
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
		var m struct {
			EventID   string
			Partition int32
			Offset    string
		}
		if line == "" {
			continue
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("consumer.js printed %q: %v", line, err)
		}
		off, err := strconv.ParseInt(m.Offset, 10, 64)
		if err != nil || m.EventID == "" {
			t.Fatalf("consumer.js printed %q: no event id or offset", line)
		}
		if err := apply("kafkajs", m.EventID, m.Partition, off); err != nil {
			t.Fatal(err)
		}
		note("kafkajs", m.EventID, m.Partition, off)
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

	// Every event applied exactly once.
	var rows, events int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*), COUNT(DISTINCT event_id) FROM applied`).Scan(&rows, &events); err != nil {
		t.Fatal(err)
	}
	if rows != next || events != next {
		t.Fatalf("%d effects of %d events applied, want each of the %d events applied once", rows, events, next)
	}

	mu.Lock()
	defer mu.Unlock()
	by, twice := map[string]int{}, 0
	kjs := map[int32][]int64{}   // partition -> offsets KafkaJS handled
	again := map[int32][]int64{} // partition -> offsets handled twice
	for id, ds := range handled {
		for _, d := range ds {
			by[d.who]++
			if d.who == "kafkajs" {
				kjs[d.partition] = append(kjs[d.partition], d.offset)
			}
		}
		if len(ds) == 1 {
			continue
		}
		twice++
		if len(ds) != 2 || (ds[0].who == "kafkajs") == (ds[1].who == "kafkajs") {
			t.Errorf("event %s delivered %v: a record is delivered again only after KafkaJS handled it without its commit landing, and then once", id, ds)
			continue
		}
		again[ds[0].partition] = append(again[ds[0].partition], ds[0].offset)
	}
	if by["kafkajs"] == 0 || by["A"] == 0 || by["B"] == 0 {
		t.Fatalf("records handled per member %v: every member should have handled some", by)
	}
	for p, offs := range again {
		slices.Sort(offs)
		k := slices.Sorted(slices.Values(kjs[p]))
		if tail := k[len(k)-len(offs):]; !slices.Equal(tail, offs) {
			t.Errorf("partition %d: offsets %v handled twice, not the last ones KafkaJS handled there (%v): KafkaJS committed past a record that was delivered again, or an Ordercast member's record was", p, offs, k)
		}
	}
	t.Logf("%d records: handled per member %v, %d delivered twice and applied once", next, by, twice)
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
