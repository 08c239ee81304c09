package processor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
)

// outWatch reads a topic with read_committed from the start, in the
// background, and keeps when each value was first seen, how often, and the
// values of each key in the order they were read.
type outWatch struct {
	mu    sync.Mutex
	first map[string]time.Time
	count map[string]int
	byKey map[string][]string
}

func watchCommitted(t *testing.T, addrs []string, topic string) *outWatch {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	w := &outWatch{first: map[string]time.Time{}, count: map[string]int{}, byKey: map[string][]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			w.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				v := string(r.Value)
				if w.count[v] == 0 {
					w.first[v] = now
				}
				w.count[v]++
				w.byKey[string(r.Key)] = append(w.byKey[string(r.Key)], v)
			})
			w.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	return w
}

// seenAt returns when v was first read (zero: not yet).
func (w *outWatch) seenAt(v string) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.first[v]
}

func (w *outWatch) seen(vs ...string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, v := range vs {
		if w.count[v] == 0 {
			return false
		}
	}
	return true
}

// exactlyOnce fails t unless every value of want was read exactly once and
// nothing else was read.
func (w *outWatch) exactlyOnce(t *testing.T, want []string) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, v := range want {
		if w.count[v] != 1 {
			t.Errorf("output %s read %d times (read_committed), want 1", v, w.count[v])
		}
	}
	if len(w.count) != len(want) {
		t.Errorf("%d distinct outputs read, want %d", len(w.count), len(want))
	}
}

// keyVal is the value of the i-th record of key k: "k/0007".
func keyVal(k string, i int) string { return fmt.Sprintf("%s/%04d", k, i) }

// echo is a TxnHandler writing the record's key and value to "out".
func echo(_ context.Context, r *kgo.Record) ([]*kgo.Record, error) {
	return []*kgo.Record{{Topic: "out", Key: r.Key, Value: r.Value}}, nil
}

// TestTxnKeyOrderConcurrent: OrderKey with Concurrency(16) on 3 partitions
// and 60 keys. Handlers of different keys run at once (more than one call
// in flight is seen), every input's output is read exactly once with
// read_committed, and each key's outputs are in the key's input order.
func TestTxnKeyOrderConcurrent(t *testing.T) {
	parallel(t)
	addrs := testCluster(t, map[string]int32{"in": 3, "out": 3})
	const keys, per = 60, 10
	var recs []*kgo.Record
	var want []string
	for i := range per {
		for k := range keys {
			key := fmt.Sprintf("k%02d", k)
			recs = append(recs, &kgo.Record{Topic: "in", Partition: int32(k % 3), Key: []byte(key), Value: []byte(keyVal(key, i))})
			want = append(want, keyVal(key, i))
		}
	}
	produce(t, addrs, recs...)
	var running, peak atomic.Int32
	var failed sync.Map
	h := func(ctx context.Context, r *kgo.Record) ([]*kgo.Record, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(time.Millisecond) // work, so that calls overlap
		if r.Offset%7 == 3 {
			if _, again := failed.LoadOrStore(string(r.Value), true); !again {
				return nil, errors.New("transient")
			}
		}
		return echo(ctx, r)
	}
	out := watchCommitted(t, addrs, "out")
	tx, err := NewTransactional("txn-keys", h, Brokers(addrs...), Group("g"), Topics("in"),
		WithOrdering(OrderKey), Concurrency(16), CommitInterval(50*time.Millisecond),
		Backoff(5*time.Millisecond, 20*time.Millisecond), MaxInFlight(200, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	stop := testkafka.Run(t, tx)
	waitFor(t, 60*time.Second, "every output read_committed", func() bool { return out.seen(want...) })
	stop()
	out.exactlyOnce(t, want)
	out.mu.Lock()
	for key, vs := range out.byKey {
		for i, v := range vs {
			if v != keyVal(key, i) {
				t.Fatalf("key %s: outputs out of order: %v", key, vs)
			}
		}
	}
	out.mu.Unlock()
	if p := peak.Load(); p < 2 {
		t.Fatalf("at most %d handler call at once, want concurrent calls", p)
	}
}

// TestTxnBackoffStaysInLane: one record fails once with Backoff(2s, 2s)
// (a retry in 1 to 2 s). While it waits, the other partitions, and in
// OrderKey the other keys of its partition, keep committing: their outputs
// are read (read_committed) before the failing record's second attempt,
// while the failing record and the later records of its lane (its
// partition in OrderPartition, its key in OrderKey) stay behind it and
// follow it in order.
func TestTxnBackoffStaysInLane(t *testing.T) {
	parallel(t)
	for _, o := range []Ordering{OrderPartition, OrderKey} {
		t.Run(o.String(), func(t *testing.T) {
			addrs := testCluster(t, map[string]int32{"in": 3, "out": 3})
			// Partition 0: bad/0 (fails once), bad/1, then good/0..4.
			recs := []*kgo.Record{
				{Topic: "in", Partition: 0, Key: []byte("bad"), Value: []byte(keyVal("bad", 0))},
				{Topic: "in", Partition: 0, Key: []byte("bad"), Value: []byte(keyVal("bad", 1))},
			}
			var early []string // what must be read before bad/0's retry
			for i := range 5 {
				recs = append(recs, &kgo.Record{Topic: "in", Partition: 0, Key: []byte("good"), Value: []byte(keyVal("good", i))})
				for p := int32(1); p < 3; p++ {
					k := fmt.Sprintf("p%d", p)
					recs = append(recs, &kgo.Record{Topic: "in", Partition: p, Key: []byte(k), Value: []byte(keyVal(k, i))})
					early = append(early, keyVal(k, i))
				}
			}
			lane := []string{keyVal("bad", 0), keyVal("bad", 1)}
			if o == OrderKey {
				for i := range 5 {
					early = append(early, keyVal("good", i))
				}
			} else {
				for i := range 5 {
					lane = append(lane, keyVal("good", i))
				}
			}
			var failedAt, retryAt atomic.Int64
			h := func(ctx context.Context, r *kgo.Record) ([]*kgo.Record, error) {
				if string(r.Value) == keyVal("bad", 0) {
					if failedAt.CompareAndSwap(0, time.Now().UnixNano()) {
						return nil, errors.New("transient")
					}
					retryAt.CompareAndSwap(0, time.Now().UnixNano())
				}
				return echo(ctx, r)
			}
			out := watchCommitted(t, addrs, "out")
			produce(t, addrs, recs...)
			tx, err := NewTransactional("txn-backoff-"+o.String(), h, Brokers(addrs...), Group("g"), Topics("in"),
				WithOrdering(o), CommitInterval(50*time.Millisecond), Backoff(2*time.Second, 2*time.Second), MaxAttempts(5))
			if err != nil {
				t.Fatal(err)
			}
			stop := testkafka.Run(t, tx)
			all := append(append([]string{}, early...), lane...)
			waitFor(t, 30*time.Second, "every output read_committed", func() bool { return out.seen(all...) })
			stop()
			retry := time.Unix(0, retryAt.Load())
			if retryAt.Load() == 0 {
				t.Fatal("bad/0 was not retried")
			}
			t.Logf("bad/0 failed, retried %v later", retry.Sub(time.Unix(0, failedAt.Load())))
			var latest time.Duration
			for _, v := range early {
				latest = max(latest, out.seenAt(v).Sub(time.Unix(0, failedAt.Load())))
			}
			t.Logf("the other lanes' outputs were all read %v after bad/0 failed", latest.Round(time.Millisecond))
			for _, v := range early {
				if at := out.seenAt(v); !at.Before(retry) {
					t.Errorf("%s read %v after bad/0's retry: held behind another lane's backoff", v, at.Sub(retry))
				}
			}
			prev := retry
			for _, v := range lane {
				at := out.seenAt(v)
				if at.Before(prev) {
					t.Errorf("%s read %v before %v: it passed the failing record of its lane", v, prev.Sub(at), prev)
				}
				prev = at
			}
			out.exactlyOnce(t, all)
		})
	}
}

// TestTxnHandoverSkipsMapped: member A (OrderKey) completes and commits
// records of other keys above a record whose handler never returns (the
// commit point stays at it; the completed records travel in the commit's
// map). A is stopped and a member with the same transactional ID takes over
// (fencing A): it does not handle the mapped records again, handles the
// stuck record and its key's later records, and every input has exactly one
// output (read_committed).
func TestTxnHandoverSkipsMapped(t *testing.T) {
	parallel(t)
	addrs := testCluster(t, map[string]int32{"in": 1, "out": 1})
	recs := []*kgo.Record{{Topic: "in", Key: []byte("stuck"), Value: []byte(keyVal("stuck", 0))}}
	var mapped, want []string
	want = append(want, keyVal("stuck", 0))
	for i := range 20 {
		k := fmt.Sprintf("k%d", i%4)
		recs = append(recs, &kgo.Record{Topic: "in", Key: []byte(k), Value: []byte(keyVal(k, i))})
		mapped = append(mapped, keyVal(k, i))
		want = append(want, keyVal(k, i))
	}
	recs = append(recs, &kgo.Record{Topic: "in", Key: []byte("stuck"), Value: []byte(keyVal("stuck", 1))})
	want = append(want, keyVal("stuck", 1))
	produce(t, addrs, recs...)
	out := watchCommitted(t, addrs, "out")

	hA := func(ctx context.Context, r *kgo.Record) ([]*kgo.Record, error) {
		if string(r.Key) == "stuck" {
			<-ctx.Done() // never completes on A
			return nil, ctx.Err()
		}
		return echo(ctx, r)
	}
	opts := []TxnOpt{Brokers(addrs...), Group("g"), Topics("in"), WithOrdering(OrderKey), CommitInterval(50 * time.Millisecond)}
	a, err := NewTransactional("txn-handover", hA, opts...)
	if err != nil {
		t.Fatal(err)
	}
	stopA := testkafka.Run(t, a)
	waitFor(t, 30*time.Second, "A's outputs of the other keys read_committed", func() bool { return out.seen(mapped...) })
	if c := committed(t, addrs, "g", "in"); c[0] != 0 {
		t.Fatalf("committed offset %d, want 0 (the stuck record)", c[0])
	}
	stopA()

	var mu sync.Mutex
	handled := map[string]int{}
	hB := func(ctx context.Context, r *kgo.Record) ([]*kgo.Record, error) {
		mu.Lock()
		handled[string(r.Value)]++
		mu.Unlock()
		return echo(ctx, r)
	}
	b, err := NewTransactional("txn-handover", hB, opts...)
	if err != nil {
		t.Fatal(err)
	}
	stopB := testkafka.Run(t, b)
	waitFor(t, 30*time.Second, "every output read_committed", func() bool { return out.seen(want...) })
	waitFor(t, 30*time.Second, "the group's offset at the end", func() bool { return committed(t, addrs, "g", "in")[0] == int64(len(recs)) })
	stopB()
	mu.Lock()
	for _, v := range mapped {
		if handled[v] != 0 {
			t.Errorf("%s handled again by the new owner: the map was not used", v)
		}
	}
	for _, v := range []string{keyVal("stuck", 0), keyVal("stuck", 1)} {
		if handled[v] != 1 {
			t.Errorf("%s handled %d times by the new owner, want 1", v, handled[v])
		}
	}
	mu.Unlock()
	out.exactlyOnce(t, want)
}

// TestTxnAbortDropsCarriedOver: a record backs off across transactions (its
// result carried over) while others commit; then one transaction's Produce
// is refused (kfake control: a non-retriable error on "out"), the
// transaction aborts, the member drops its in-memory work and resumes from
// the broker's offsets and maps. Nothing is lost or duplicated: every input
// has exactly one output (read_committed), the record that was backing
// off through the abort is done after it, and the records committed before
// it are not handled again.
func TestTxnAbortDropsCarriedOver(t *testing.T) {
	parallel(t)
	c, addrs := testClusterC(t, map[string]int32{"in": 2, "out": 2})
	var mu sync.Mutex
	calls := map[string]int{}
	var tx *TxnProcessor
	h := func(ctx context.Context, r *kgo.Record) ([]*kgo.Record, error) {
		mu.Lock()
		calls[string(r.Value)]++
		mu.Unlock()
		if _, aborted := tx.Stats(); string(r.Value) == keyVal("slow", 0) && aborted == 0 {
			return nil, errors.New("transient") // backing off until the abort
		}
		return echo(ctx, r)
	}
	var want []string
	var recs []*kgo.Record
	recs = append(recs, &kgo.Record{Topic: "in", Partition: 0, Key: []byte("slow"), Value: []byte(keyVal("slow", 0))})
	want = append(want, keyVal("slow", 0))
	for i := range 30 {
		k := fmt.Sprintf("k%d", i%5)
		recs = append(recs, &kgo.Record{Topic: "in", Partition: int32(i % 2), Key: []byte(k), Value: []byte(keyVal(k, i))})
		want = append(want, keyVal(k, i))
	}
	out := watchCommitted(t, addrs, "out")
	var err error
	tx, err = NewTransactional("txn-abort", h, Brokers(addrs...), Group("g"), Topics("in"),
		WithOrdering(OrderKey), CommitInterval(30*time.Millisecond), Backoff(100*time.Millisecond, 100*time.Millisecond), MaxAttempts(100))
	if err != nil {
		t.Fatal(err)
	}
	stop := testkafka.Run(t, tx)
	produce(t, addrs, recs[:16]...)
	waitFor(t, 30*time.Second, "the first outputs read_committed", func() bool { return out.seen(want[1:16]...) })
	// Refuse the next transactional Produce to "out".
	var refused atomic.Bool
	var refusals atomic.Int32
	defer func() { t.Logf("%d Produce requests refused", refusals.Load()) }()
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		pr := req.(*kmsg.ProduceRequest)
		if pr.TransactionID == nil || !strings.HasPrefix(*pr.TransactionID, "txn-abort") {
			c.KeepControl()
			return nil, nil, false
		}
		c.DropControl()
		refused.Store(true)
		refusals.Add(1)
		resp := pr.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range pr.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.InvalidRecord.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	produce(t, addrs, recs[16:]...)
	waitFor(t, 30*time.Second, "a transaction aborted", func() bool { _, ab := tx.Stats(); return ab > 0 })
	if !refused.Load() {
		t.Fatal("no Produce was refused")
	}
	waitFor(t, 30*time.Second, "every output read_committed", func() bool { return out.seen(want...) })
	stop()
	out.exactlyOnce(t, want)
	mu.Lock()
	defer mu.Unlock()
	redone := 0
	for _, v := range want[1:16] {
		redone += calls[v] - 1
	}
	t.Logf("slow/0 handled %d times; %d records committed before the abort handled again", calls[keyVal("slow", 0)], redone)
	if redone != 0 {
		t.Errorf("%d records committed before the abort were handled again", redone)
	}
}

// TestFIFO: the lanes' queue keeps first-in first-out order through pushes
// and pops that wrap its array, filter keeps the kept in order, reset
// empties it.
func TestFIFO(t *testing.T) {
	var q fifo[int]
	next, want := 0, 0
	for round := range 200 {
		for range round%7 + 1 {
			q.push(next)
			next++
		}
		for range round%5 + 1 {
			if q.len() == 0 {
				break
			}
			if got := q.first(); got != want {
				t.Fatalf("round %d: first %d, want %d", round, got, want)
			}
			if got := q.pop(); got != want {
				t.Fatalf("round %d: popped %d, want %d", round, got, want)
			}
			want++
		}
		if q.len() != next-want {
			t.Fatalf("round %d: len %d, want %d", round, q.len(), next-want)
		}
	}
	if cap(q.buf) > 4*(next-want)+16 {
		t.Fatalf("array of %d for %d queued: the taken front is not reused", cap(q.buf), next-want)
	}
	// filter keeps the queued elements it keeps, in order, from a queue
	// whose front was taken.
	var kept []int
	q.filter(func(x int) bool { return x%3 != 0 })
	for q.len() > 0 {
		kept = append(kept, q.pop())
	}
	var wantKept []int
	for x := want; x < next; x++ {
		if x%3 != 0 {
			wantKept = append(wantKept, x)
		}
	}
	if !slices.Equal(kept, wantKept) {
		t.Fatalf("after filter: %v, want %v", kept, wantKept)
	}
	q.push(1)
	q.reset()
	if q.len() != 0 {
		t.Fatalf("len %d after reset", q.len())
	}
}

// TestTxnMapBudgetCutsEarly: in OrderKey the completed-offsets map's budget
// (CommitMetadataMaxBytes 64, the least allowed) lets only a few records
// above a partition's commit point be admitted (about 33 here): far fewer
// than the eighth of MaxInFlight that cuts a transaction early when the
// member is full, so the records polled wait for admission. A transaction
// is then cut as soon as half of the admitted records are done, and its
// commit moves the commit point and admits the next ones: all but the last
// of those rounds are read well before the 15 s CommitInterval, where a
// member that waited for the interval would stall for it at every round.
// The first record fails once and backs off, holding the commit point
// meanwhile.
func TestTxnMapBudgetCutsEarly(t *testing.T) {
	parallel(t)
	addrs := testCluster(t, map[string]int32{"in": 1, "out": 1})
	recs := []*kgo.Record{{Topic: "in", Key: []byte("stuck"), Value: []byte(keyVal("stuck", 0))}}
	want := []string{keyVal("stuck", 0)}
	for i := range 2000 {
		k := fmt.Sprintf("k%04d", i)
		recs = append(recs, &kgo.Record{Topic: "in", Key: []byte(k), Value: []byte(keyVal(k, 0))})
		want = append(want, keyVal(k, 0))
	}
	var failed atomic.Bool
	h := func(ctx context.Context, r *kgo.Record) ([]*kgo.Record, error) {
		if string(r.Key) == "stuck" && failed.CompareAndSwap(false, true) {
			return nil, errors.New("transient")
		}
		return echo(ctx, r)
	}
	out := watchCommitted(t, addrs, "out")
	produce(t, addrs, recs...)
	const interval = 15 * time.Second
	const maxInFlight = 1000
	tx, err := NewTransactional("txn-map-budget", h, Brokers(addrs...), Group("g"), Topics("in"), WithOrdering(OrderKey),
		CommitInterval(interval), CommitMetadataMaxBytes(64), MaxInFlight(maxInFlight, 64<<20),
		Backoff(300*time.Millisecond, 300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	stop := testkafka.Run(t, tx)
	early := len(want) - maxInFlight/8 // the last round waits for the interval, as any stream's tail does
	waitFor(t, interval/2, fmt.Sprintf("%d of %d outputs read_committed before the commit interval", early, len(want)), func() bool {
		out.mu.Lock()
		defer out.mu.Unlock()
		return len(out.count) >= early
	})
	t.Logf("%d outputs read %v after the start", early, time.Since(start).Round(time.Millisecond))
	waitFor(t, 2*interval, "every output read_committed", func() bool { return out.seen(want...) })
	stop()
	out.exactlyOnce(t, want)
}
