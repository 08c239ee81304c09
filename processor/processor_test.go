package processor

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestAllRecordsHandledAndCommitted(t *testing.T) {
	for _, mode := range []Ordering{OrderPartition, OrderKey, OrderUnordered} {
		t.Run(mode.String(), func(t *testing.T) {
			addrs := testCluster(t, map[string]int32{"in": 6})
			const n = 600
			var recs []*kgo.Record
			for i := range n {
				recs = append(recs, &kgo.Record{Topic: "in", Partition: int32(i % 6), Key: []byte(strconv.Itoa(i % 37)), Value: val(i)})
			}
			produce(t, addrs, recs...)
			h := newHistory()
			var mu sync.Mutex
			lastPerKey := map[string]int{}
			orderViolations := 0
			stop := runProcessor(t, Brokers(addrs...), Group("g"), Topics("in"), WithOrdering(mode), Concurrency(8),
				CommitInterval(50*time.Millisecond),
				WithHandler(func(ctx context.Context, r *kgo.Record) error {
					i, _ := strconv.Atoi(string(r.Value[1:]))
					if mode != OrderUnordered {
						mu.Lock()
						k := string(r.Key) + "/" + strconv.Itoa(int(r.Partition))
						if prev, ok := lastPerKey[k]; ok && prev > i {
							orderViolations++
						}
						lastPerKey[k] = i
						mu.Unlock()
					}
					h.add(string(r.Value))
					return nil
				}))
			waitFor(t, 20*time.Second, "all records handled", func() bool { return h.distinct() == n })
			waitFor(t, 10*time.Second, "commits at the end", func() bool {
				c := committed(t, addrs, "g", "in")
				total := int64(0)
				for _, o := range c {
					total += o
				}
				return total == n
			})
			stop()
			if orderViolations > 0 {
				t.Fatalf("%d per-key order violations", orderViolations)
			}
			for i := range n {
				if c := h.count(string(val(i))); c != 1 {
					t.Fatalf("record %d handled %d times", i, c)
				}
			}
		})
	}
}

// S05 and S07: a record that fails is never passed by a commit until it is in
// the DLQ, and later records keep flowing.
func TestFailedRecordGoesToDLQBeforeCommitPassesIt(t *testing.T) {
	for _, permanent := range []bool{true, false} {
		t.Run(fmt.Sprintf("permanent=%v", permanent), func(t *testing.T) {
			addrs := testCluster(t, map[string]int32{"in": 1, "g.dlq": 1})
			var recs []*kgo.Record
			for i := 1; i <= 5; i++ {
				recs = append(recs, &kgo.Record{Topic: "in", Key: []byte("k"), Value: val(i)})
			}
			produce(t, addrs, recs...)
			h := newHistory()
			var mu sync.Mutex
			var violations []string
			attempts := 0
			p, err := New(Brokers(addrs...), Group("g"), Topics("in"), MaxAttempts(3), Backoff(time.Millisecond, 5*time.Millisecond),
				CommitInterval(20*time.Millisecond),
				WithHandler(func(ctx context.Context, r *kgo.Record) error {
					if string(r.Value) == string(val(3)) {
						mu.Lock()
						attempts++
						mu.Unlock()
						if permanent {
							return Permanent(errors.New("cannot ever work"))
						}
						return errors.New("still broken")
					}
					h.add(string(r.Value))
					return nil
				}))
			if err != nil {
				t.Fatal(err)
			}
			admCl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
			if err != nil {
				t.Fatal(err)
			}
			defer admCl.Close()
			adm := kadm.NewClient(admCl)
			// The oracle: whenever a commit passes offset 2 (record 3), the
			// DLQ must already hold a record.
			p.cfg.hooks.beforeCommit = func(offs map[string]map[int32]kgo.EpochOffset) {
				o, ok := offs["in"][0]
				if !ok || o.Offset <= 2 {
					return
				}
				ends, err := adm.ListEndOffsets(context.Background(), "g.dlq")
				end, _ := ends.Lookup("g.dlq", 0)
				mu.Lock()
				defer mu.Unlock()
				if err != nil || end.Offset < 1 {
					violations = append(violations, fmt.Sprintf("commit %d passes offset 2 before its DLQ write (dlq end %d, err %v)", o.Offset, end.Offset, err))
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error)
			go func() { done <- p.Run(ctx) }()
			dlq := readAll(t, addrs, "g.dlq", 1, 20*time.Second)
			if len(dlq) != 1 || string(dlq[0].Value) != string(val(3)) {
				t.Fatalf("DLQ: got %d records", len(dlq))
			}
			waitFor(t, 10*time.Second, "records 4 and 5 handled and committed", func() bool {
				return h.count(string(val(5))) == 1 && committed(t, addrs, "g", "in")[0] == 5
			})
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			hdr := map[string]string{}
			for _, x := range dlq[0].Headers {
				hdr[x.Key] = string(x.Value)
			}
			wantAttempts := "3"
			wantClass := "transient"
			if permanent {
				wantAttempts, wantClass = "1", "permanent"
			}
			if hdr[HeaderOriginalTopic] != "in" || hdr[HeaderOriginalOffset] != "2" || hdr[HeaderConsumerGroup] != "g" ||
				hdr[HeaderAttempts] != wantAttempts || hdr[HeaderErrorClass] != wantClass || hdr[HeaderErrorMessage] == "" {
				t.Fatalf("DLQ headers: %v", hdr)
			}
			if string(dlq[0].Key) != "k" {
				t.Fatalf("DLQ key %q", dlq[0].Key)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(violations) > 0 {
				t.Fatal(violations)
			}
		})
	}
}

// TestOldestInFlightGauge: ordercast_consumer_oldest_in_flight_seconds shows
// the age of a record held by a slow handler while it runs, and 0 once
// nothing is held.
func TestOldestInFlightGauge(t *testing.T) {
	addrs := testCluster(t, map[string]int32{"in": 1})
	produce(t, addrs, &kgo.Record{Topic: "in", Value: []byte("slow")})
	reg := prometheus.NewRegistry()
	release := make(chan struct{})
	m := startMember(t, Brokers(addrs...), Group("g"), Topics("in"), WithMetrics(mustMetrics(t, reg)), CommitInterval(10*time.Millisecond),
		WithHandler(func(ctx context.Context, r *kgo.Record) error {
			<-release
			return nil
		}))
	waitFor(t, 20*time.Second, "the held record ages", func() bool {
		return counterValue(t, reg, "ordercast_consumer_oldest_in_flight_seconds") > 0.2
	})
	close(release)
	waitFor(t, 20*time.Second, "nothing held", func() bool {
		return counterValue(t, reg, "ordercast_consumer_oldest_in_flight_seconds") == 0 && committed(t, addrs, "g", "in")[0] == 1
	})
	m.stop()
}

// TestBackpressureAndFairAdmission: with MaxInFlight 50 and a slow handler,
// the member never holds more than 50 records admitted, polling pauses, and
// in partition order every partition is handled at the same time although
// one fetch carries far more than 50 records of one partition (admission is
// round-robin across the fetch's partitions).
//
// It runs with MaxInFlight 5 too: a bound so small that a resume point
// computed as a fraction of it rounds to the bound itself (polling resumed at
// once and the member held more than the bound).
func TestBackpressureAndFairAdmission(t *testing.T) {
	for _, limit := range []int{50, 5} {
		t.Run(strconv.Itoa(limit), func(t *testing.T) { testBackpressureAndFairAdmission(t, limit) })
	}
}

func testBackpressureAndFairAdmission(t *testing.T, limit int) {
	addrs := testCluster(t, map[string]int32{"in": 3})
	const perPart = 100
	var recs []*kgo.Record
	for i := range 3 * perPart {
		recs = append(recs, &kgo.Record{Topic: "in", Partition: int32(i / perPart), Value: val(i)})
	}
	produce(t, addrs, recs...) // partition by partition: a fetch holds 100 of each
	var running, maxRunning, handled atomic.Int64
	var mp atomic.Pointer[Processor]
	var maxHeld atomic.Int64
	var pausedSeen atomic.Bool
	m := startMember(t, Brokers(addrs...), Group("g"), Topics("in"), MaxInFlight(limit, 1<<20), CommitInterval(10*time.Millisecond),
		WithHandler(func(ctx context.Context, r *kgo.Record) error {
			if c := running.Add(1); c > maxRunning.Load() {
				maxRunning.Store(c)
			}
			if p := mp.Load(); p != nil {
				h := p.Health()
				if int64(h.InFlight) > maxHeld.Load() {
					maxHeld.Store(int64(h.InFlight))
				}
				if h.Paused {
					pausedSeen.Store(true)
				}
			}
			err := sleepOrCancel(ctx, 2*time.Millisecond)
			running.Add(-1)
			handled.Add(1)
			return err
		}))
	mp.Store(m.p)
	waitFor(t, 30*time.Second, "everything committed", func() bool {
		return committedEquals(t, addrs, "g", map[tp]int64{{"in", 0}: perPart, {"in", 1}: perPart, {"in", 2}: perPart})
	})
	m.stop()
	if maxHeld.Load() > int64(limit) {
		t.Fatalf("held %d records, MaxInFlight is %d", maxHeld.Load(), limit)
	}
	if !pausedSeen.Load() {
		t.Fatal("polling never paused for backpressure")
	}
	if maxRunning.Load() < 3 {
		t.Fatalf("at most %d partitions were handled at once, want all 3", maxRunning.Load())
	}
}
