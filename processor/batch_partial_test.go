package processor

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// applyLog records what a batch handler applied: how many times each value,
// and, per key, that values are applied in offset order.
type applyLog struct {
	mu        sync.Mutex
	applied   map[string]int
	last      map[string]int64
	calls     map[string]int // value -> batches it was in
	violation []string
}

func newApplyLog() *applyLog {
	return &applyLog{applied: map[string]int{}, last: map[string]int64{}, calls: map[string]int{}}
}

func (a *applyLog) seen(recs []*kgo.Record) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range recs {
		a.calls[string(r.Value)]++
	}
}

func (a *applyLog) apply(r *kgo.Record) {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := string(r.Key)
	if last, ok := a.last[k]; ok && r.Offset <= last {
		a.violation = append(a.violation, fmt.Sprintf("key %s: offset %d applied after %d", k, r.Offset, last))
	}
	a.last[k] = r.Offset
	a.applied[string(r.Value)]++
}

func (a *applyLog) count(v string) (applied, calls int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.applied[v], a.calls[v]
}

func (a *applyLog) distinct() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.applied)
}

// partialWorkload produces n records over 2 partitions and 20 keys, with
// poison records (permanent) and flaky ones (their first attempt fails
// transiently), and returns them.
func partialWorkload(t *testing.T, addrs []string, n int) (poison, flaky map[string]bool) {
	t.Helper()
	poison, flaky = map[string]bool{}, map[string]bool{}
	var recs []*kgo.Record
	for i := range n {
		k := strconv.Itoa(i % 20)
		recs = append(recs, &kgo.Record{Topic: "in", Partition: int32(i % 20 % 2), Key: []byte(k), Value: val(i)})
		switch {
		case i%97 == 13:
			poison[string(val(i))] = true
		case i%89 == 5:
			flaky[string(val(i))] = true
		}
	}
	produce(t, addrs, recs...)
	return poison, flaky
}

// A BatchHandler reports the records that failed (FailRecords) and the
// others are done: each poison record reaches the DLQ once, each flaky one
// is retried and applied, every other record is applied exactly once and
// handled in one batch only (not redone one at a time), per-key order holds,
// and no batch falls back to one-record handling.
func TestBatchPartialFailure(t *testing.T) {
	for _, mode := range []struct {
		name string
		stop bool // StopAt at the first failure instead of FailRecords
	}{{"FailRecords", false}, {"StopAt", true}} {
		t.Run(mode.name, func(t *testing.T) {
			addrs := testCluster(t, map[string]int32{"in": 2, "g.dlq": 1})
			const n = 1000
			poison, flaky := partialWorkload(t, addrs, n)
			log := newApplyLog()
			var triedMu sync.Mutex
			tried := map[string]bool{}
			reg := prometheus.NewRegistry()
			var partials, batches int
			var statMu sync.Mutex
			stop := runProcessor(t, Brokers(addrs...), Group("g"), Topics("in"), WithOrdering(OrderKey), Concurrency(2),
				CommitInterval(20*time.Millisecond), Backoff(time.Millisecond, 2*time.Millisecond), WithMetrics(mustMetrics(t, reg)),
				MaxBatch(64),
				WithBatchHandler(func(ctx context.Context, recs []*kgo.Record) error {
					log.seen(recs)
					failed := map[int]error{}
					stopped := map[string]bool{} // keys with a failure in this batch: their later records are not applied
					for i, r := range recs {
						v, k := string(r.Value), string(r.Key)
						if stopped[k] {
							continue
						}
						var err error
						if poison[v] {
							err = Permanentf("poison %s", v)
						} else if flaky[v] {
							triedMu.Lock()
							if !tried[v] {
								tried[v] = true
								err = fmt.Errorf("flaky %s: first attempt", v)
							}
							triedMu.Unlock()
						}
						if err != nil {
							if mode.stop {
								statMu.Lock()
								batches++
								if len(recs) > 1 {
									partials++
								}
								statMu.Unlock()
								return StopAt(i, err)
							}
							failed[i] = err
							stopped[k] = true
							continue
						}
						log.apply(r)
					}
					statMu.Lock()
					batches++
					if len(failed) > 0 && len(recs) > 1 {
						partials++
					}
					statMu.Unlock()
					if len(failed) > 0 {
						return fmt.Errorf("ledger: %w", FailRecords(failed)) // wrapped: still a partial outcome
					}
					return nil
				}))
			dlq := readAll(t, addrs, "g.dlq", len(poison), 30*time.Second)
			waitFor(t, 30*time.Second, "every other record applied", func() bool { return log.distinct() == n-len(poison) })
			waitFor(t, 10*time.Second, "all committed", func() bool { return sumCommitted(t, addrs, "g", "in") == n })
			stop()
			statMu.Lock()
			if partials == 0 {
				t.Fatalf("no failure happened in a batch of several records (%d batches): the scenario did not happen", batches)
			}
			statMu.Unlock()
			got := map[string]int{}
			for _, r := range dlq {
				got[string(r.Value)]++
			}
			for v := range poison {
				if got[v] != 1 {
					t.Errorf("poison %s in the DLQ %d times, want 1", v, got[v])
				}
			}
			if extra := testkafkaReadAllNow(t, addrs, "g.dlq"); extra != len(poison) {
				t.Errorf("DLQ holds %d records, want %d", extra, len(poison))
			}
			redone := 0
			for i := range n {
				v := string(val(i))
				applied, calls := log.count(v)
				want := 1
				if poison[v] {
					want = 0
				}
				if applied != want {
					t.Errorf("record %s applied %d times, want %d", v, applied, want)
				}
				if calls > 1 && !flaky[v] && !poison[v] {
					redone++
				}
			}
			// Only the records behind a failure (its key's later records in
			// FailRecords, the batch's later records in StopAt) are handled
			// again; with 1,000 records and 21 failures, a fallback to
			// one-at-a-time handling would redo about 64 records per failure.
			limit := 64 * (len(poison) + len(flaky)) / 4 // FailRecords: a failed record's later records of its key
			if mode.stop {
				limit = 63 * (len(poison) + len(flaky)) // StopAt: the rest of the batch, never the records before the failure
			}
			if redone > limit {
				t.Errorf("%d records were handled in more than one batch, want <= %d", redone, limit)
			}
			if fb := counterValue(t, reg, "ordercast_consumer_batch_fallbacks_total"); fb != 0 {
				t.Errorf("batch_fallbacks_total %v, want 0 (partial outcomes are not fallbacks)", fb)
			}
			if len(log.violation) > 0 {
				t.Fatalf("per-key order violations: %v", log.violation)
			}
		})
	}
}

// The runtime, not the handler, keeps a lane's order: a handler that
// applies every record but the failed one still has the failed record's
// later records of the same key handled again after it (the BatchError
// doc's warning), and the records before it are not.
func TestBatchPartialFailureRedoesTheKeysLaterRecords(t *testing.T) {
	addrs := testCluster(t, map[string]int32{"in": 1, "g.dlq": 1})
	var recs []*kgo.Record
	for i := range 5 {
		recs = append(recs, &kgo.Record{Topic: "in", Key: []byte("k"), Value: val(i)})
	}
	produce(t, addrs, recs...) // before the member starts: its first batch holds all of them
	var mu sync.Mutex
	var batches [][]string
	stop := runProcessor(t, Brokers(addrs...), Group("g"), Topics("in"), WithOrdering(OrderKey),
		CommitInterval(20*time.Millisecond), Backoff(time.Millisecond, 2*time.Millisecond), MaxBatch(10),
		WithBatchHandler(func(ctx context.Context, rs []*kgo.Record) error {
			mu.Lock()
			defer mu.Unlock()
			var vs []string
			for _, r := range rs {
				vs = append(vs, string(r.Value))
			}
			batches = append(batches, vs)
			for i, r := range rs {
				if string(r.Value) == string(val(2)) {
					return FailRecords(map[int]error{i: Permanentf("bad")})
				}
			}
			return nil
		}))
	defer stop()
	readAll(t, addrs, "g.dlq", 1, 20*time.Second)
	waitFor(t, 10*time.Second, "all committed", func() bool { return sumCommitted(t, addrs, "g", "in") == 5 })
	mu.Lock()
	defer mu.Unlock()
	handled := map[string]int{}
	checked := false
	for bi, b := range batches {
		for _, v := range b {
			handled[v]++
		}
		at := slices.Index(b, string(val(2)))
		if at < 0 || at == len(b)-1 {
			continue
		}
		checked = true
		for _, v := range b[at+1:] {
			if !slices.ContainsFunc(batches[bi+1:], func(later []string) bool { return slices.Contains(later, v) }) {
				t.Errorf("%s was behind the failed record of its key in batch %v and was never handled again (batches %v)", v, b, batches)
			}
		}
	}
	if !checked {
		t.Fatalf("the failed record never had a later record of its key in its batch (batches %v): the scenario did not happen", batches)
	}
	for _, i := range []int{0, 1} {
		if handled[string(val(i))] != 1 {
			t.Errorf("%s, before the failed record, handled %d times, want 1 (batches %v)", val(i), handled[string(val(i))], batches)
		}
	}
}

// A BatchError that names an index outside its batch, or reports nothing,
// is a failure of the whole batch: its records fall back to one at a time.
func TestBatchErrorOutOfRangeFallsBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  func(n int) error
	}{
		{"index past the batch", func(n int) error { return FailRecords(map[int]error{n: Permanentf("x")}) }},
		{"negative index", func(int) error { return FailRecords(map[int]error{-1: Permanentf("x")}) }},
		{"nothing reported", func(int) error { return FailRecords(nil) }},
		{"StopAt(0, nil)", func(int) error { return StopAt(0, nil) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if be := partialOutcome(tc.err(3), 3); be != nil {
				t.Fatalf("partialOutcome accepted %v", tc.err(3))
			}
		})
	}
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"FailRecords", FailRecords(map[int]error{0: Permanentf("x"), 2: nil})},
		{"StopAt", StopAt(2, nil)},
		{"StopAt last", StopAt(2, Permanentf("x"))},
		{"wrapped", fmt.Errorf("w: %w", StopAt(1, Permanentf("x")))},
	} {
		if partialOutcome(tc.err, 3) == nil {
			t.Errorf("%s: partialOutcome refused %v", tc.name, tc.err)
		}
	}
	if err := FailRecords(map[int]error{1: nil}).Failed(1); !IsPermanent(err) {
		t.Errorf("a nil error in FailRecords is %v, want a permanent error", err)
	}
}
