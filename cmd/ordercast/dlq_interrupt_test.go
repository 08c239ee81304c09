package main

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/processor"
)

// TestDLQReplayInterrupted: SIGINT during a rate-limited `dlq replay` ends
// it cleanly: the open transaction is aborted at once, so read_committed
// consumers of the source topic are not held back (its last stable offset
// reaches the end offset), and the command reports how far it got and
// fails. Without the signal handling the process died with its
// transaction open, stalling every group reading orderCreated until the
// transaction timed out.
func TestDLQReplayInterrupted(t *testing.T) {
	addrs := testkafka.Cluster(t, map[string]int32{"orderCreated": 1, "orders.dlq": 1})
	brokers := "--brokers=" + strings.Join(addrs, ",")
	var recs []*kgo.Record
	for i := range 20 {
		recs = append(recs, &kgo.Record{Topic: "orders.dlq", Key: []byte("17850"), Value: []byte(`{"eventId":"e` + strconv.Itoa(i) + `"}`),
			Headers: []kgo.RecordHeader{
				{Key: processor.HeaderOriginalTopic, Value: []byte("orderCreated")},
				{Key: processor.HeaderOriginalPartition, Value: []byte("0")},
				{Key: processor.HeaderOriginalOffset, Value: []byte(strconv.Itoa(i))},
				{Key: processor.HeaderConsumerGroup, Value: []byte("orders")},
				{Key: processor.HeaderErrorClass, Value: []byte("invalid")},
				{Key: processor.HeaderErrorMessage, Value: []byte("schema: orderCreated: invalid")},
				{Key: processor.HeaderAttempts, Value: []byte("1")},
			}})
	}
	testkafka.Produce(t, addrs, recs...)

	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	offsets := func(list func(context.Context, ...string) (kadm.ListedOffsets, error)) int64 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		l, err := list(ctx, "orderCreated")
		if err != nil {
			t.Fatal(err)
		}
		o, _ := l.Lookup("orderCreated", 0)
		return o.Offset
	}

	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := ordercast(t, "dlq", "replay", "--group", "orders", "--rate", "4", brokers)
		done <- result{out, err}
	}()
	// The replay has written into its open transaction: the end offset
	// moved, the last stable offset did not.
	testkafka.WaitFor(t, 30*time.Second, "replay writing in an open transaction", func() bool {
		return offsets(adm.ListEndOffsets) > 0
	})
	if lso := offsets(adm.ListCommittedOffsets); lso != 0 {
		t.Fatalf("last stable offset %d before the first commit, want 0 (the replay's transaction open)", lso)
	}
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("dlq replay still running 20s after SIGINT")
	}
	if r.err == nil || !strings.Contains(r.err.Error(), "replay interrupted") {
		t.Fatalf("interrupted dlq replay returned %v, want 'replay interrupted'\n%s", r.err, r.out)
	}
	// Aborted at once, not left to time out: read_committed readers move on.
	testkafka.WaitFor(t, 5*time.Second, "last stable offset = end offset (transaction aborted)", func() bool {
		return offsets(adm.ListCommittedOffsets) == offsets(adm.ListEndOffsets)
	})
	// Nothing was marked: the whole selection can be replayed again.
	out := mustRun(t, "dlq", "replay", "--group", "orders", "--dry-run", brokers)
	if !strings.Contains(out, "20") {
		t.Errorf("after the interrupted replay, a dry run does not select the 20 records again:\n%s", out)
	}
}
