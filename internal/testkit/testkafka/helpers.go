package testkafka

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Produce writes recs synchronously and returns them as written (with their
// partitions and offsets). A record goes to the partition set in it (manual
// partitioner: set Partition explicitly, 0 by default). It fails the test on
// any produce error.
func Produce(t testing.TB, addrs []string, recs ...*kgo.Record) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	res := cl.ProduceSync(context.Background(), recs...)
	if err := res.FirstErr(); err != nil {
		t.Fatal(err)
	}
	out := make([]*kgo.Record, len(res))
	for i, r := range res {
		out[i] = r.Record
	}
	return out
}

// ReadN reads topic from its start until n records are read or within
// passes, and returns what it read (possibly fewer than n: the caller
// decides whether that fails). With committed it reads as a read_committed
// reader (records of aborted and still open transactions are not returned),
// otherwise read_uncommitted.
func ReadN(t testing.TB, addrs []string, topic string, n int, within time.Duration, committed bool) []*kgo.Record {
	t.Helper()
	iso := kgo.ReadUncommitted()
	if committed {
		iso = kgo.ReadCommitted()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(iso))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

// Committed returns group's committed offsets for topic, by partition; empty
// when the group does not exist yet. It fails the test on other errors.
func Committed(t testing.TB, addrs []string, group, topic string) map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// On a fresh cluster the first group request creates
	// __consumer_offsets, and the coordinator answers
	// COORDINATOR_NOT_AVAILABLE (or LOAD_IN_PROGRESS) until it is loaded:
	// retriable errors are retried for up to 15s. So is a request that
	// timed out on the network (net.Error): the embedded broker sometimes
	// answers a read late while a test's control function holds another
	// request of the group (SleepControl), and the callers poll anyway.
	var offs kadm.OffsetResponses
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		offs, err = kadm.NewClient(cl).FetchOffsets(ctx, group)
		cancel()
		var nerr net.Error
		transient := kerr.IsRetriable(err) || errors.As(err, &nerr) || errors.Is(err, context.DeadlineExceeded)
		if err == nil || !transient || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // backoff between retries of a retriable broker error
	}
	if errors.Is(err, kerr.GroupIDNotFound) {
		return map[int32]int64{}
	}
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[int32]int64)
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic {
			out[o.Partition] = o.At
		}
	})
	return out
}

// WaitFor polls cond every 10ms until it holds, and fails the test naming
// what it waited for when d passes first.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
