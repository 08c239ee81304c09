package processor

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Sibling cases of docs/scenarios.md S15-S19 that the
// scenario tests do not cover.

// TestS17_MapSurvivesSecondHandover: key order, 1 partition, 10 keys
// interleaved (offset i has key k<i%10>, version i/10+1). On A the first
// record of k0 blocks, so A completes every k1..k9 record and commits offset
// 0 with a map of 900 completed offsets. A leaves; B takes the partition.
// B's k0 v1 blocks too, and B has MaxInFlight 5: it admits offsets 0, 10,
// 20, 30, 40 (k0's, queued behind v1) and the records A completed between
// them (skipped), then stops admitting: the rest of A's map is in B's pending
// queue, not in its tracker. B leaves; C takes the partition. C must handle
// none of the records A completed: B's commits must carry forward what A
// completed, not only the part of A's map B admitted.
// It runs in OrderKey and OrderUnordered (where every k0 record blocks on A
// and B), under the classic group protocol and KIP-848's.
func TestS17_MapSurvivesSecondHandover(t *testing.T) {
	parallel(t)
	for _, ordering := range []Ordering{OrderKey, OrderUnordered} {
		for _, protocol := range []string{"classic", "consumer"} {
			t.Run(fmt.Sprintf("%v/%s", ordering, protocol), func(t *testing.T) {
				testMapSurvivesSecondHandover(t, ordering, protocol)
			})
		}
	}
}

func testMapSurvivesSecondHandover(t *testing.T, ordering Ordering, protocol string) {
	addrs := testCluster(t, map[string]int32{"in": 1})
	const keys, versions = 10, 100
	var recs []*kgo.Record
	for i := range keys * versions {
		recs = append(recs, &kgo.Record{Topic: "in", Key: []byte(fmt.Sprintf("k%d", i%keys)), Value: []byte(strconv.Itoa(i/keys + 1))})
	}
	produce(t, addrs, recs...)
	kv := newKeyVersions()
	var mu sync.Mutex
	doneAB := map[string]bool{} // key/version completed by A or B
	var again []string          // key/version started by C after A or B completed it
	var startedA, startedB sync.Once
	slowA, slowB := make(chan struct{}), make(chan struct{})
	handler := func(member string) Handler {
		return func(ctx context.Context, r *kgo.Record) error {
			key := string(r.Key)
			version, _ := strconv.Atoi(string(r.Value))
			kv.start(member, key, version)
			kv2 := fmt.Sprintf("%s/v%d", key, version)
			mu.Lock()
			if member == "C" && doneAB[kv2] {
				again = append(again, kv2)
			}
			mu.Unlock()
			if member != "C" && key == "k0" {
				if member == "A" {
					startedA.Do(func() { close(slowA) })
				} else {
					startedB.Do(func() { close(slowB) })
				}
				<-ctx.Done()
				return ctx.Err()
			}
			kv.finish(member, key, version)
			if member != "C" {
				mu.Lock()
				doneAB[kv2] = true
				mu.Unlock()
			}
			return nil
		}
	}
	opts := func(member string, reg *prometheus.Registry, inFlight int) []Opt {
		return rebalanceOpts(addrs, WithOrdering(ordering), GroupProtocol(protocol), Concurrency(200), MaxInFlight(inFlight, 64<<20),
			DrainTimeout(200*time.Millisecond), WithHandler(handler(member)), WithMetrics(mustMetrics(t, reg)))
	}
	a := startMember(t, opts("A", prometheus.NewRegistry(), 20000)...)
	<-slowA
	waitFor(t, 30*time.Second, "A completed every record but k0's", func() bool { return kv.completed() == keys*versions-versions })
	b := startMember(t, opts("B", prometheus.NewRegistry(), 5)...)
	waitFor(t, 10*time.Second, "B joined", func() bool { return b.p.Health().Joined })
	a.stop()
	<-slowB
	waitFor(t, 10*time.Second, "B holds 5 records", func() bool { return b.p.Health().InFlight == 5 })
	c := startMember(t, opts("C", prometheus.NewRegistry(), 20000)...)
	waitFor(t, 10*time.Second, "C joined", func() bool { return c.p.Health().Joined })
	b.stop()
	waitFor(t, 30*time.Second, "C completed k0", func() bool {
		kv.mu.Lock()
		defer kv.mu.Unlock()
		return kv.done["k0"] == versions
	})
	waitFor(t, 30*time.Second, "everything committed", func() bool {
		return committedEquals(t, addrs, "g", endOffsets(t, addrs, "in"))
	})
	c.stop()

	mu.Lock()
	defer mu.Unlock()
	if len(again) > 0 {
		t.Errorf("C handled %d records A had completed, first: %v", len(again), again[:min(5, len(again))])
	}
	kv.mu.Lock()
	defer kv.mu.Unlock()
	if ordering == OrderKey && len(kv.regressed) > 0 {
		t.Fatalf("key order went backwards %d times, first: %v", len(kv.regressed), kv.regressed[:min(5, len(kv.regressed))])
	}
}

// TestEncodeOffsetMapCarriesEarlier: the map a member commits holds
// the offsets an earlier owner completed beyond what the member admitted,
// and stays within the budget when they do not all fit (the last ones are
// left out, never the member's own).
func TestEncodeOffsetMapCarriesEarlier(t *testing.T) {
	// Admitted so far: 0 (running), 1..9 (skipped as done earlier; one
	// done entry at 9 stands for them), 10 (queued); 11..39 not admitted.
	earlier := []offsetRange{{1, 9}, {11, 19}, {21, 29}, {31, 39}}
	tr2 := newOffsetTracker()
	tr2.earlier = append([]offsetRange{}, earlier...)
	for _, off := range []int64{0, 9, 10} {
		e := &offsetEntry{offset: off}
		tr2.add(e)
		if off == 9 {
			tr2.complete(e)
		}
	}
	got, err := decodeOffsetMap(tr2.encodeOffsetMap(0, 0), 0)
	if err != nil {
		t.Fatal(err)
	}
	want := earlier
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("map = %v, want %v", got, want)
	}
	// A budget that holds the member's own range and one more.
	full := tr2.encodeOffsetMap(0, 0)
	meta := tr2.encodeOffsetMap(0, len(full)-1)
	if len(meta) > len(full)-1 {
		t.Fatalf("map of %d bytes over its budget of %d", len(meta), len(full)-1)
	}
	got, err = decodeOffsetMap(meta, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 || got[0] != (offsetRange{1, 9}) || len(got) >= len(want) {
		t.Fatalf("trimmed map = %v: want the member's own range first and fewer earlier ones", got)
	}
}
