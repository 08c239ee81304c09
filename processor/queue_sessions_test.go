package processor

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
)

// TestQueueSlowRecordOtherSession: with ShareSessions(2), a record whose
// handler does not return keeps only its own session from polling: the
// member goes on acquiring and handling the records written after it, with
// the slow record still in its handler. With one session the member would
// handle at most the Concurrency-1 records of the slow record's poll.
func TestQueueSlowRecordOtherSession(t *testing.T) {
	testkafka.Parallel(t)
	addrs := testCluster(t, map[string]int32{"in": 1})
	release := make(chan struct{})
	defer close(release)
	var slowIn atomic.Bool
	calls := newHistory()
	q, _ := startQueue(t, addrs, Concurrency(4), ShareSessions(2), HandlerTimeout(time.Minute),
		WithHandler(func(ctx context.Context, r *kgo.Record) error {
			if string(r.Value) == "slow" {
				slowIn.Store(true)
				select {
				case <-release:
				case <-ctx.Done():
				}
				return ctx.Err()
			}
			calls.add(string(r.Value))
			return nil
		}))
	produce(t, addrs, &kgo.Record{Topic: "in", Value: []byte("slow")})
	waitFor(t, 30*time.Second, "the slow record in its handler", slowIn.Load)
	const others = 40
	var recs []*kgo.Record
	for i := range others {
		recs = append(recs, &kgo.Record{Topic: "in", Value: val(i)})
	}
	produce(t, addrs, recs...)
	waitFor(t, 30*time.Second, fmt.Sprintf("the %d records after the slow one handled", others), func() bool {
		return calls.distinct() == others
	})
	if h := q.Health(); h.InFlight < 1 || h.Sessions != 2 {
		t.Fatalf("health %+v: want the slow record in flight, 2 sessions", h)
	}
}

// TestQueueConcurrencyBound: the sessions share the processor's
// Concurrency handler slots: with ShareSessions(3) and Concurrency(3), no
// more than 3 handler calls run at once (the sessions hold up to 9
// records), and the bound is reached.
func TestQueueConcurrencyBound(t *testing.T) {
	testkafka.Parallel(t)
	addrs := testCluster(t, map[string]int32{"in": 3})
	const conc, sessions, records = 3, 3, 300
	var running, peak, heldPeak atomic.Int64
	calls := newHistory()
	var q *QueueProcessor
	ready := make(chan struct{})
	q, _ = startQueue(t, addrs, Concurrency(conc), ShareSessions(sessions), WithHandler(func(ctx context.Context, r *kgo.Record) error {
		<-ready // q is set
		n := running.Add(1)
		defer running.Add(-1)
		storeMax(&peak, n)
		storeMax(&heldPeak, int64(q.Health().InFlight))
		calls.add(string(r.Value))
		select { // some work, so that handlers overlap
		case <-time.After(2 * time.Millisecond):
		case <-ctx.Done():
		}
		return nil
	}))
	close(ready)
	var recs []*kgo.Record
	for i := range records {
		recs = append(recs, &kgo.Record{Topic: "in", Partition: int32(i % 3), Value: val(i)})
	}
	produce(t, addrs, recs...)
	waitFor(t, 60*time.Second, "every record handled", func() bool { return calls.distinct() == records })
	if p := peak.Load(); p > conc {
		t.Fatalf("%d handler calls at once, want at most Concurrency %d", p, conc)
	} else if p < conc {
		t.Fatalf("at most %d handler calls at once over %d records, want %d: the slots are not used", p, records, conc)
	}
	if h, most := heldPeak.Load(), int64(conc*sessions*DefaultShareAcquireMultiple); h > most {
		t.Fatalf("%d records held, want at most ShareSessions x ShareAcquireMultiple x Concurrency = %d", h, most)
	}
}

// storeMax sets m to v if v is larger.
func storeMax(m *atomic.Int64, v int64) {
	for p := m.Load(); v > p && !m.CompareAndSwap(p, v); p = m.Load() {
	}
}

// TestQueueAcquireMultiple: with ShareAcquireMultiple(2), one session and
// Concurrency(2), a poll acquires the 4 records waiting (the processor
// holds 4, 2 of them waiting for a handler slot), no more than 2 handler
// calls run at once, and the records waiting for a slot keep their locks
// (1 s on kfake, renewed) while the first two take 2.5 s: each record is
// delivered once. ShareAcquireMultiple is NewQueue's alone, from 1 to
// MaxShareAcquireMultiple.
func TestQueueAcquireMultiple(t *testing.T) {
	testkafka.Parallel(t)
	h := func(context.Context, *kgo.Record) error { return nil }
	if _, err := New(Brokers("x:1"), Group("g"), Topics("in"), WithHandler(h), ShareAcquireMultiple(2)); err == nil || !strings.Contains(err.Error(), "ShareAcquireMultiple") {
		t.Fatalf("New took ShareAcquireMultiple: %v", err)
	}
	for _, k := range []int{0, -1, MaxShareAcquireMultiple + 1} {
		if _, err := NewQueue(Brokers("x:1"), Group("g"), Topics("in"), WithHandler(h), ShareAcquireMultiple(k)); err == nil || !strings.Contains(err.Error(), "ShareAcquireMultiple") {
			t.Fatalf("NewQueue took ShareAcquireMultiple(%d): %v", k, err)
		}
	}

	addrs := shareFake(t, 1, map[string]string{
		"group.share.record.lock.duration.ms": "1000",
		"share.record.lock.sweep.interval.ms": "50",
	})
	const conc, records = 2, 4
	var recs []*kgo.Record
	for i := range records {
		recs = append(recs, &kgo.Record{Topic: "in", Value: val(i)})
	}
	produce(t, addrs, recs...)
	var running, peak, heldPeak atomic.Int64
	calls := newHistory()
	var q *QueueProcessor
	ready := make(chan struct{})
	q, _ = startQueue(t, addrs, Concurrency(conc), ShareSessions(1), ShareAcquireMultiple(2), HandlerTimeout(10*time.Second),
		WithHandler(func(ctx context.Context, r *kgo.Record) error {
			<-ready // q is set
			n := running.Add(1)
			defer running.Add(-1)
			storeMax(&peak, n)
			storeMax(&heldPeak, int64(q.Health().InFlight))
			calls.add(string(r.Value))
			select {
			case <-time.After(2500 * time.Millisecond): // the work: longer than two locks
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}))
	close(ready)
	waitFor(t, 60*time.Second, "every record handled", func() bool { return calls.distinct() == records })
	for i := range records {
		if n := calls.count(string(val(i))); n != 1 {
			t.Errorf("%s delivered %d times, want 1: its lock expired while it waited for a slot", val(i), n)
		}
	}
	if p := peak.Load(); p > conc {
		t.Fatalf("%d handler calls at once, want at most Concurrency %d", p, conc)
	}
	if h := heldPeak.Load(); h != 2*conc {
		t.Fatalf("at most %d records held, want 2 x Concurrency = %d: one poll acquired them all", h, 2*conc)
	}
}
