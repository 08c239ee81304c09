package processor

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A completed record is not kept alive while an earlier offset of its
// partition is still outstanding: neither the record nor the buffer its
// value aliases (the fetch response, for an uncompressed batch) stays
// reachable through the item that waits for the commit point. With 600
// partitions each holding a few records in flight, items that kept their
// records pinned whole fetch responses: peak RSS 2 GB for a 64 MiB
// MaxInFlight.
func TestDoneRecordsReleaseTheirFetch(t *testing.T) {
	addrs := testCluster(t, map[string]int32{"in": 1})
	// Uncompressed batches: a record's value is a slice of the fetch
	// response itself.
	pcl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	produceNow := func(recs ...*kgo.Record) {
		t.Helper()
		if err := pcl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	const n = 200
	var (
		started  = make(chan struct{})
		release  = make(chan struct{})
		handled  atomic.Int64
		recsGone atomic.Int64 // the *kgo.Record values collected
		valsGone atomic.Int64 // the buffers their values alias collected
	)
	produceNow(&kgo.Record{Topic: "in", Key: []byte("slow"), Value: []byte("first")})
	m := startMember(t, Brokers(addrs...), Group("g"), Topics("in"), WithOrdering(OrderKey), Concurrency(8),
		CommitInterval(20*time.Millisecond),
		WithHandler(func(ctx context.Context, r *kgo.Record) error {
			if string(r.Key) == "slow" {
				close(started)
				select {
				case <-release:
				case <-ctx.Done():
				}
				return nil
			}
			// Neither cleanup refers to r: it may be collected once
			// the runtime drops it.
			runtime.AddCleanup(r, func(int) { recsGone.Add(1) }, 0)
			runtime.AddCleanup(&r.Value[0], func(int) { valsGone.Add(1) }, 0)
			handled.Add(1)
			return nil
		}))
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the first record was not handled")
	}
	// Fetched after the first record, in a response of their own.
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: "in", Key: fmt.Appendf(nil, "k%d", i), Value: val(i)}
	}
	produceNow(recs...)
	recs = nil
	waitFor(t, 20*time.Second, "the later records handled", func() bool { return handled.Load() == n })

	deadline := time.Now().Add(10 * time.Second)
	for recsGone.Load() < n || valsGone.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("with offset 0 outstanding, %d of %d completed records and %d of their value buffers are still reachable",
				n-recsGone.Load(), n, n-valsGone.Load())
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond) // cleanups run on a goroutine of their own
	}
	if c := committed(t, addrs, "g", "in"); c[0] > 0 {
		t.Fatalf("committed %d while offset 0 is outstanding", c[0])
	}

	close(release)
	waitFor(t, 20*time.Second, "the commit past every record", func() bool { return committed(t, addrs, "g", "in")[0] == n+1 })
	m.stop()
}
