package processor

import (
	"context"
	"fmt"
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
	if h := heldPeak.Load(); h > conc*sessions {
		t.Fatalf("%d records held, want at most ShareSessions x Concurrency = %d", h, conc*sessions)
	}
}

// storeMax sets m to v if v is larger.
func storeMax(m *atomic.Int64, v int64) {
	for p := m.Load(); v > p && !m.CompareAndSwap(p, v); p = m.Load() {
	}
}
