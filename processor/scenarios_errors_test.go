package processor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Scenario tests for failing records: docs/scenarios.md S05, S07, S08, S09, S10,
// S11 and the retry-topic path.

// S05: 1 partition, records 1..5, record 3 fails permanently while 4 and 5
// succeed first (unordered mode). The commit point must not pass record 3
// before it is in the DLQ: checked both on the recorded history (no commit
// passes an offset not completed, and record 3 completes only by its DLQ
// write) and against the broker (at every commit that passes offset 2, the
// DLQ already holds the record). Transient failures take the same path after
// MaxAttempts.
func TestS05_FailureNotSkippedByLaterSuccess(t *testing.T) {
	for _, permanent := range []bool{true, false} {
		t.Run(fmt.Sprintf("permanent=%v", permanent), func(t *testing.T) {
			addrs := testCluster(t, map[string]int32{"in": 1, "g.dlq": 1})
			var recs []*kgo.Record
			for i := 1; i <= 5; i++ {
				recs = append(recs, &kgo.Record{Topic: "in", Key: []byte("k" + strconv.Itoa(i)), Value: val(i)})
			}
			produce(t, addrs, recs...)
			h := newRecorder()
			admCl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
			if err != nil {
				t.Fatal(err)
			}
			defer admCl.Close()
			adm := kadm.NewClient(admCl)
			var mu sync.Mutex
			var violations []string
			oracle := func(offs map[string]map[int32]kgo.EpochOffset) {
				o, ok := offs["in"][0]
				if !ok || o.Offset <= 2 {
					return
				}
				ends, err := adm.ListEndOffsets(context.Background(), "g.dlq")
				end, _ := ends.Lookup("g.dlq", 0)
				if err != nil || end.Offset < 1 {
					mu.Lock()
					violations = append(violations, fmt.Sprintf("commit %d passes offset 2 before its DLQ write (dlq end %d, err %v)", o.Offset, end.Offset, err))
					mu.Unlock()
				}
			}
			laterDone := func() bool {
				return h.count(func(e event) bool { return e.Kind == evCompleted && e.Offset >= 3 }) == 2
			}
			hk := h.hooks("A")
			opts := []Opt{Brokers(addrs...), Group("g"), Topics("in"), WithOrdering(OrderUnordered), Concurrency(4),
				MaxAttempts(3), Backoff(time.Millisecond, 5*time.Millisecond), CommitInterval(10 * time.Millisecond),
				WithHandler(func(ctx context.Context, r *kgo.Record) error {
					if string(r.Value) != string(val(3)) {
						return nil
					}
					// Fail only once records 4 and 5 have succeeded: a
					// later success must not carry the commit past 3.
					for !laterDone() {
						select {
						case <-ctx.Done():
							return ctx.Err()
						case <-time.After(time.Millisecond):
						}
					}
					if permanent {
						return Permanent(errors.New("cannot ever work"))
					}
					return errors.New("still broken")
				})}
			p, err := New(append(opts, hk)...)
			if err != nil {
				t.Fatal(err)
			}
			p.cfg.hooks.beforeCommit = oracle
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- p.Run(ctx) }()
			waitFor(t, 20*time.Second, "all committed", func() bool { return committed(t, addrs, "g", "in")[0] == 5 })
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			ev := h.snapshot()
			checkHistory(t, ev, logOffsetsOf(t, addrs, "in"), true)
			// Record 3 (offset 2) completed only by its DLQ write, after 4
			// and 5 had completed.
			var seq3, seqLater int64 = -1, -1
			for _, e := range ev {
				if e.Kind != evCompleted {
					continue
				}
				switch {
				case e.Offset == 2:
					if e.Target != "g.dlq" {
						t.Fatalf("record 3 completed with target %q, want g.dlq", e.Target)
					}
					seq3 = e.Seq
				case e.Offset > 2:
					seqLater = max(seqLater, e.Seq)
				}
			}
			if seq3 < 0 || seqLater < 0 || seqLater > seq3 {
				t.Fatalf("records 4 and 5 must succeed before record 3 is dead-lettered (seq %d vs %d)", seqLater, seq3)
			}
			dlq := readAll(t, addrs, "g.dlq", 1, 10*time.Second)
			if len(dlq) != 1 || string(dlq[0].Value) != string(val(3)) {
				t.Fatalf("DLQ: %d records", len(dlq))
			}
			hdr := headerMap(dlq[0])
			wantAttempts, wantClass := "3", "transient"
			if permanent {
				wantAttempts, wantClass = "1", "permanent"
			}
			if hdr[HeaderOriginalOffset] != "2" || hdr[HeaderAttempts] != wantAttempts || hdr[HeaderErrorClass] != wantClass {
				t.Fatalf("DLQ headers: %v", hdr)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(violations) > 0 {
				t.Fatal(violations)
			}
		})
	}
}

// S07: 1 partition, record 3 always fails (an error, or a panic), 2 retries
// (MaxAttempts 3). Record 3 is tried exactly 3 times, lands in the DLQ, the
// records after it are handled, and a restarted consumer does not go back to
// record 3: there is no crash loop.
func TestS07_NoRetryCrashLoop(t *testing.T) {
	for _, mode := range []string{"error", "panic"} {
		t.Run(mode, func(t *testing.T) {
			addrs := testCluster(t, map[string]int32{"in": 1, "g.dlq": 1})
			const n = 10
			var recs []*kgo.Record
			for i := 1; i <= n; i++ {
				recs = append(recs, &kgo.Record{Topic: "in", Key: []byte("k"), Value: val(i)})
			}
			produce(t, addrs, recs...)
			h := newRecorder()
			var attempts3 atomic.Int32
			handler := func(ctx context.Context, r *kgo.Record) error {
				if string(r.Value) == string(val(3)) {
					attempts3.Add(1)
					if mode == "panic" {
						panic("record 3 is poison")
					}
					return errors.New("record 3 is poison")
				}
				return nil
			}
			opts := func(name string) []Opt {
				return []Opt{Brokers(addrs...), Group("g"), Topics("in"), MaxAttempts(3), Backoff(time.Millisecond, 4*time.Millisecond),
					CommitInterval(10 * time.Millisecond), WithHandler(handler), h.hooks(name)}
			}
			a := startMember(t, opts("A")...)
			waitFor(t, 20*time.Second, "records after 3 committed", func() bool { return committed(t, addrs, "g", "in")[0] == n })
			a.stop()
			if got := attempts3.Load(); got != 3 {
				t.Fatalf("record 3 tried %d times, want 3", got)
			}
			// Restart: the next consumer starts after record 3 and handles
			// new input.
			produce(t, addrs, &kgo.Record{Topic: "in", Key: []byte("k"), Value: val(n + 1)})
			b := startMember(t, opts("B")...)
			waitFor(t, 20*time.Second, "new record committed", func() bool { return committed(t, addrs, "g", "in")[0] == n+1 })
			b.stop()
			if got := attempts3.Load(); got != 3 {
				t.Fatalf("record 3 tried %d times after a restart, want still 3", got)
			}
			rep := checkHistory(t, h.snapshot(), logOffsetsOf(t, addrs, "in"), true)
			if len(rep.duplicates) > 0 {
				t.Fatalf("duplicates without any crash or rebalance: %v", rep.duplicates)
			}
			dlq := readAll(t, addrs, "g.dlq", 1, 10*time.Second)
			if len(dlq) != 1 {
				t.Fatalf("DLQ holds %d records, want 1", len(dlq))
			}
			hdr := headerMap(dlq[0])
			if hdr[HeaderAttempts] != "3" || hdr[HeaderOriginalOffset] != "2" || hdr[HeaderErrorMessage] == "" {
				t.Fatalf("DLQ headers %v", hdr)
			}
		})
	}
}

// undecodableError is a decode failure with a class of its own, as a
// serde's errors have (the order system's schema package gives
// "undecodable"): the runtime puts Class() in the DLQ record's
// ordercast-error-class header.
type undecodableError struct{ reason string }

func (e *undecodableError) Error() string { return "undecodable: " + e.reason }
func (e *undecodableError) Class() string { return "undecodable" }

// decodeEvent decodes a wire-format value: the magic byte 0, then a JSON
// object with an eventId; anything else is an *undecodableError.
func decodeEvent(b []byte) (string, error) {
	if len(b) == 0 || b[0] != 0 {
		return "", &undecodableError{"bad magic byte"}
	}
	var ev struct {
		EventID string `json:"eventId"`
	}
	if err := json.Unmarshal(b[1:], &ev); err != nil || ev.EventID == "" {
		return "", &undecodableError{fmt.Sprintf("malformed body: %v", err)}
	}
	return ev.EventID, nil
}

// S08: a valid event, then random bytes, then a valid event, on one
// partition, decoded by the handler with a serde whose decode errors carry
// the class "undecodable" (ordersystem/schema checks that its serde's errors
// do). The bytes go to the DLQ with their raw value, their original headers
// and the class "undecodable"; the third event is handled; the partition is
// committed to its end (no stall).
func TestS08_UndecodableBytes(t *testing.T) {
	const topic = "orders.created"
	addrs := testCluster(t, map[string]int32{topic: 1, "g.dlq": 1})
	event := func(id string) []byte { return append([]byte{0}, fmt.Sprintf(`{"eventId":"evt_%s"}`, id)...) }
	garbage := []byte{0xc3, 0xde, 0xad, 0xbe, 0xef, 0x13, 0x37, 0xff, 0x00, 0x7f}
	hdrs := []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")}, {Key: "x-source", Value: []byte("fuzz")}}
	produce(t, addrs,
		&kgo.Record{Topic: topic, Key: []byte("17850"), Value: event("1")},
		&kgo.Record{Topic: topic, Key: []byte("17850"), Value: garbage, Headers: hdrs},
		&kgo.Record{Topic: topic, Key: []byte("17850"), Value: event("3")},
	)
	var mu sync.Mutex
	var handled []string
	m := startMember(t, Brokers(addrs...), Group("g"), Topics(topic), CommitInterval(10*time.Millisecond),
		Backoff(time.Millisecond, 2*time.Millisecond),
		WithHandler(func(ctx context.Context, r *kgo.Record) error {
			id, err := decodeEvent(r.Value)
			if err != nil {
				var u *undecodableError
				if errors.As(err, &u) {
					return Permanent(err)
				}
				return err
			}
			mu.Lock()
			handled = append(handled, id)
			mu.Unlock()
			return nil
		}))
	waitFor(t, 20*time.Second, "partition committed to its end", func() bool {
		return committed(t, addrs, "g", topic)[0] == 3
	})
	m.stop()
	mu.Lock()
	if fmt.Sprint(handled) != "[evt_1 evt_3]" {
		t.Fatalf("handled %v, want [evt_1 evt_3]", handled)
	}
	mu.Unlock()
	dlq := readAll(t, addrs, "g.dlq", 1, 10*time.Second)
	if len(dlq) != 1 {
		t.Fatalf("DLQ holds %d records", len(dlq))
	}
	d := dlq[0]
	if !bytes.Equal(d.Value, garbage) || string(d.Key) != "17850" {
		t.Fatalf("DLQ record key %q value %x, want the raw bytes %x", d.Key, d.Value, garbage)
	}
	hdr := headerMap(d)
	if hdr["traceparent"] != string(hdrs[0].Value) || hdr["x-source"] != "fuzz" {
		t.Fatalf("original headers not kept: %v", hdr)
	}
	if hdr[HeaderErrorClass] != "undecodable" || hdr[HeaderOriginalOffset] != "1" || hdr[HeaderAttempts] != "1" {
		t.Fatalf("DLQ headers %v", hdr)
	}
}

// S09: a keyed event, an event with a null key, a tombstone (a key with a
// null value) and an empty (not null) value, in key order mode. None crashes
// the consumer; the handler sees nil where the record had null; the ones the
// handler refuses land in the DLQ with a clear reason, and the tombstone's
// DLQ copy is still a real null (not an empty value).
func TestS09_NullKeyNullValueTombstone(t *testing.T) {
	addrs := testCluster(t, map[string]int32{"in": 1, "g.dlq": 1})
	produce(t, addrs,
		&kgo.Record{Topic: "in", Key: []byte("k1"), Value: []byte("v1")},
		&kgo.Record{Topic: "in", Key: nil, Value: []byte("no key")},
		&kgo.Record{Topic: "in", Key: []byte("k2"), Value: nil},
		&kgo.Record{Topic: "in", Key: []byte("k3"), Value: []byte{}},
		&kgo.Record{Topic: "in", Key: []byte("k4"), Value: []byte("v4")},
	)
	type seen struct{ nilKey, nilValue bool }
	var mu sync.Mutex
	got := map[int64]seen{}
	m := startMember(t, Brokers(addrs...), Group("g"), Topics("in"), WithOrdering(OrderKey), CommitInterval(10*time.Millisecond),
		WithHandler(func(ctx context.Context, r *kgo.Record) error {
			mu.Lock()
			got[r.Offset] = seen{r.Key == nil, r.Value == nil}
			mu.Unlock()
			switch {
			case r.Key == nil:
				return Permanentf("null key: this consumer needs a customer id key")
			case r.Value == nil:
				return Permanentf("tombstone for key %q: deletes are not supported", r.Key)
			}
			return nil
		}))
	waitFor(t, 20*time.Second, "partition committed to its end", func() bool { return committed(t, addrs, "g", "in")[0] == 5 })
	m.stop()
	mu.Lock()
	want := map[int64]seen{0: {}, 1: {nilKey: true}, 2: {nilValue: true}, 3: {}, 4: {}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("handler saw %v, want %v (null must stay nil, empty must stay non-nil)", got, want)
	}
	mu.Unlock()
	dlq := readAll(t, addrs, "g.dlq", 2, 10*time.Second)
	if len(dlq) != 2 {
		t.Fatalf("DLQ holds %d records, want 2", len(dlq))
	}
	byOffset := map[string]*kgo.Record{}
	for _, r := range dlq {
		byOffset[headerMap(r)[HeaderOriginalOffset]] = r
	}
	nk, ts := byOffset["1"], byOffset["2"]
	if nk == nil || ts == nil {
		t.Fatalf("DLQ records for offsets %v, want 1 and 2", byOffset)
	}
	if nk.Key != nil || string(nk.Value) != "no key" || !strings.Contains(headerMap(nk)[HeaderErrorMessage], "null key") {
		t.Fatalf("null-key DLQ record: key %v value %q headers %v", nk.Key, nk.Value, headerMap(nk))
	}
	if ts.Value != nil || string(ts.Key) != "k2" || !strings.Contains(headerMap(ts)[HeaderErrorMessage], "tombstone") {
		t.Fatalf("tombstone DLQ record: key %q value %v (nil: %v) headers %v", ts.Key, ts.Value, ts.Value == nil, headerMap(ts))
	}
}

// S10: key order mode, 3 partitions, 10,000 events over 5 keys, every event
// of one key always fails, Concurrency 12, MaxInFlight 1,000 records. The
// bad key's second attempt is held until the good keys are done: the 8,000
// good events must all succeed meanwhile, which they can only if the bad
// key's records, waiting for a retry or parked behind its failing head, do
// not use up the in-flight room (with them counted, fetching pauses for every
// partition once MaxInFlight of them are held, and the good keys wait for the
// bad one). Then every bad event goes to the DLQ after exactly MaxAttempts.
//
// The bad key is alone on its partition: a good key sharing it is fetched
// along until the parked records fill their own room (MaxInFlight again),
// then waits with it, because memory is bounded.
func TestS10_OneBadKeyDoesNotStallOthers(t *testing.T) {
	parallel(t)
	addrs := testCluster(t, map[string]int32{"in": 3, "g.dlq": 3})
	const n, keys = 10000, 5
	keyPart := map[string]int32{"bad": 0, "g1": 1, "g2": 1, "g3": 2, "g4": 2}
	names := []string{"bad", "g1", "g2", "g3", "g4"}
	var recs []*kgo.Record
	for i := range n {
		k := names[i%keys]
		recs = append(recs, &kgo.Record{Topic: "in", Partition: keyPart[k], Key: []byte(k), Value: val(i)})
	}
	produce(t, addrs, recs...)
	var good, badAttempts, running, maxRunning atomic.Int64
	goodDone := make(chan struct{})
	var badOnce sync.Once
	stalled := make(chan struct{})
	var parkedSeen atomic.Int64
	var mp atomic.Pointer[Processor]
	m := startMember(t, Brokers(addrs...), Group("g"), Topics("in"), WithOrdering(OrderKey), Concurrency(12), MaxInFlight(1000, 1<<20),
		MaxAttempts(2), Backoff(time.Millisecond, 2*time.Millisecond), CommitInterval(20*time.Millisecond),
		WithHandler(func(ctx context.Context, r *kgo.Record) error {
			if c := running.Add(1); c > maxRunning.Load() {
				maxRunning.Store(c)
			}
			defer running.Add(-1)
			if string(r.Key) != "bad" {
				if good.Add(1) == n/keys*(keys-1) {
					parkedSeen.Store(int64(mp.Load().Health().Parked))
					close(goodDone)
				}
				return nil
			}
			if badAttempts.Add(1) == 2 {
				badOnce.Do(func() { close(stalled) })
				select {
				case <-goodDone:
				case <-time.After(30 * time.Second):
					return errors.New("good keys never finished")
				}
			}
			return errors.New("bad key")
		}))
	mp.Store(m.p)
	<-stalled
	select {
	case <-goodDone:
	case <-time.After(30 * time.Second):
		t.Fatalf("good keys stalled behind the bad key: %d of %d handled, health %+v", good.Load(), n/keys*(keys-1), m.p.Health())
	}
	if parkedSeen.Load() == 0 {
		t.Fatalf("the bad key's records were not parked while it was failing")
	}
	ends := endOffsets(t, addrs, "in")
	waitFor(t, 60*time.Second, "everything committed", func() bool { return committedEquals(t, addrs, "g", ends) })
	m.stop()
	if got := badAttempts.Load(); got != 2*n/keys {
		t.Fatalf("bad key: %d attempts for %d records, want exactly MaxAttempts (2) each", got, n/keys)
	}
	if good.Load() != n/keys*(keys-1) {
		t.Fatalf("good records handled %d times, want %d", good.Load(), n/keys*(keys-1))
	}
	if maxRunning.Load() > 12 {
		t.Fatalf("%d handlers ran at once, Concurrency is 12", maxRunning.Load())
	}
	dlq := endOffsets(t, addrs, "g.dlq")
	total := int64(0)
	for _, o := range dlq {
		total += o
	}
	if total != n/keys {
		t.Fatalf("DLQ holds %d records, want %d", total, n/keys)
	}
}

// S11: source topic with 20 partitions, DLQ with 5. A poison record on
// partition 17 is dead-lettered into the partition its key hashes to. Then
// the DLQ write is made to fail: the source offset stays uncommitted, the
// partition is paused, health and metrics report it, the other partitions go
// on; once the DLQ accepts writes again the partition is released. A
// retriable error, which the client retries by itself for a while, shows in
// health as a write in progress.
func TestS11_DLQWithFewerPartitions(t *testing.T) {
	c, addrs := testClusterC(t, map[string]int32{"in": 20, "g.dlq": 5})
	produce(t, addrs, &kgo.Record{Topic: "in", Partition: 17, Key: []byte("poison-17"), Value: []byte("poison")},
		&kgo.Record{Topic: "in", Partition: 17, Key: []byte("k"), Value: []byte("ok")})
	reg := prometheus.NewRegistry()
	h := newRecorder()
	// A producer of our own (the Producer option) that refreshes metadata
	// quickly: franz-go waits for a metadata refresh (5s by default)
	// before it retries a NOT_ENOUGH_REPLICAS produce.
	prod, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.MetadataMinAge(10*time.Millisecond), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	m := startMember(t, Brokers(addrs...), Group("g"), Topics("in"), CommitInterval(10*time.Millisecond), MaxAttempts(1), Producer(prod),
		Backoff(5*time.Millisecond, 20*time.Millisecond), WithMetrics(mustMetrics(t, reg)), h.hooks("A"),
		WithHandler(func(ctx context.Context, r *kgo.Record) error {
			if string(r.Value) == "poison" {
				return Permanentf("poison record")
			}
			return nil
		}))
	waitFor(t, 20*time.Second, "partition 17 committed", func() bool { return committed(t, addrs, "g", "in")[17] == 2 })
	dlq := readAll(t, addrs, "g.dlq", 1, 10*time.Second)
	if len(dlq) != 1 {
		t.Fatalf("DLQ holds %d records", len(dlq))
	}
	want := kgo.StickyKeyPartitioner(nil).ForTopic("g.dlq").Partition(&kgo.Record{Key: []byte("poison-17")}, 5)
	if dlq[0].Partition != int32(want) || headerMap(dlq[0])[HeaderOriginalPartition] != "17" {
		t.Fatalf("DLQ record in partition %d (want %d, by key) headers %v", dlq[0].Partition, want, headerMap(dlq[0]))
	}

	// Now the DLQ refuses writes (INVALID_RECORD, not retriable; an
	// authorization error would stop the member instead: authz.go,
	// TestRightLostWhileRunning).
	fault := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "g.dlq", Err: kerr.InvalidRecord, Count: -1})
	produce(t, addrs, &kgo.Record{Topic: "in", Partition: 3, Key: []byte("poison-3"), Value: []byte("poison")},
		&kgo.Record{Topic: "in", Partition: 3, Key: []byte("k"), Value: []byte("after")},
		&kgo.Record{Topic: "in", Partition: 4, Key: []byte("k"), Value: []byte("other partition")})
	waitFor(t, 20*time.Second, "health reports partition 3 blocked", func() bool {
		hl := m.p.Health()
		return len(hl.Blocked) == 1 && strings.HasPrefix(hl.Blocked[0], "in[3]")
	})
	waitFor(t, 20*time.Second, "partition 4 committed meanwhile", func() bool { return committed(t, addrs, "g", "in")[4] == 1 })
	paused := m.p.Client().PauseFetchPartitions(nil)
	if !slices.Contains(paused["in"], 3) {
		t.Fatalf("partition 3 not paused while its DLQ write fails: paused %v", paused)
	}
	waitFor(t, 10*time.Second, "the DLQ write retried", func() bool { return fault.Hits() >= 3 })
	if got := committed(t, addrs, "g", "in")[3]; got > 0 {
		t.Fatalf("partition 3 committed to %d while its poison record's DLQ write fails", got)
	}
	if v := counterValue(t, reg, "ordercast_consumer_forward_failures_total"); v < 1 {
		t.Fatalf("forward_failures_total = %v", v)
	}
	fault.Remove()
	waitFor(t, 20*time.Second, "partition 3 released and committed", func() bool { return committed(t, addrs, "g", "in")[3] == 2 })
	if hl := m.p.Health(); len(hl.Blocked) != 0 {
		t.Fatalf("still blocked after the DLQ recovered: %v", hl.Blocked)
	}

	// A retriable broker error: the client retries the write by itself,
	// so no failure comes back for a while; health reports the write in
	// progress once it takes longer than the maximum backoff.
	fault = c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "g.dlq", Err: kerr.NotEnoughReplicas, Count: 10})
	produce(t, addrs, &kgo.Record{Topic: "in", Partition: 5, Key: []byte("poison-5"), Value: []byte("poison")})
	waitFor(t, 20*time.Second, "health reports partition 5's DLQ write in progress", func() bool {
		hl := m.p.Health()
		return len(hl.Blocked) == 1 && strings.HasPrefix(hl.Blocked[0], "in[5]: retry-topic/DLQ write in progress")
	})
	if got := committed(t, addrs, "g", "in")[5]; got > 0 {
		t.Fatalf("partition 5 committed to %d while its poison record's DLQ write is retried", got)
	}
	waitFor(t, 20*time.Second, "partition 5 committed once the write went through", func() bool { return committed(t, addrs, "g", "in")[5] == 1 })
	if fault.Hits() != 10 {
		t.Fatalf("the DLQ write failed %d times, want 10", fault.Hits())
	}
	m.stop()
	checkHistory(t, h.snapshot(), logOffsetsOf(t, addrs, "in"), true)
}

// TestRetryTopicsEndToEnd: a record fails transiently 4 times with
// MaxAttempts 2 and RetryTopics(50ms, 100ms): 2 attempts in place, 2 from
// retry topic 1, success from retry topic 2. Every attempt shows the
// handler the original coordinates; a retry record is not handled before its
// due time; the retry topics' committed offsets pass a record only after it
// was handled (history check); each hop replaces the runtime headers.
func TestRetryTopicsEndToEnd(t *testing.T) {
	addrs := testCluster(t, map[string]int32{"in": 2, "g.retry.1": 1, "g.retry.2": 1, "g.dlq": 1})
	recs := []*kgo.Record{{Topic: "in", Partition: 0, Key: []byte("x"), Value: []byte("flaky"),
		Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte("t1")}}}}
	for i := 1; i < 20; i++ {
		recs = append(recs, &kgo.Record{Topic: "in", Partition: int32(i % 2), Key: []byte("x"), Value: val(i)})
	}
	produce(t, addrs, recs...)
	orig := readAll(t, addrs, "in", 1, 5*time.Second)[0]
	type call struct {
		topic string // as fetched
		view  kgo.Record
		at    time.Time
	}
	var mu sync.Mutex
	var calls []call
	h := newRecorder()
	hs := h.hookSet("A")
	start := hs.handleStart
	var fetchedTopics []string
	hs.handleStart = func(rec, view *kgo.Record) {
		if string(rec.Value) == "flaky" {
			mu.Lock()
			fetchedTopics = append(fetchedTopics, rec.Topic)
			mu.Unlock()
		}
		start(rec, view)
	}
	p, err := New(Brokers(addrs...), Group("g"), Topics("in"), MaxAttempts(2), RetryTopics(50*time.Millisecond, 100*time.Millisecond),
		Backoff(time.Millisecond, 2*time.Millisecond), CommitInterval(5*time.Millisecond), withHooks(hs),
		WithHandler(func(ctx context.Context, r *kgo.Record) error {
			if string(r.Value) != "flaky" {
				return nil
			}
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, call{view: *r, at: time.Now()})
			if len(calls) <= 4 {
				return fmt.Errorf("flaky failure %d", len(calls))
			}
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	waitFor(t, 20*time.Second, "everything committed", func() bool {
		return committedEquals(t, addrs, "g", map[tp]int64{{"in", 0}: 10, {"in", 1}: 10, {"g.retry.1", 0}: 1, {"g.retry.2", 0}: 1})
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 5 || fmt.Sprint(fetchedTopics) != "[in in g.retry.1 g.retry.1 g.retry.2]" {
		t.Fatalf("%d attempts from %v, want 5 from [in in g.retry.1 g.retry.1 g.retry.2]", len(calls), fetchedTopics)
	}
	for i, c := range calls {
		v := c.view
		if v.Topic != "in" || v.Partition != 0 || v.Offset != orig.Offset || !v.Timestamp.Equal(orig.Timestamp) ||
			string(v.Key) != "x" || len(v.Headers) != 1 || v.Headers[0].Key != "traceparent" {
			t.Fatalf("attempt %d: handler saw %s[%d]@%d ts %v key %q headers %v, want the original record", i+1, v.Topic, v.Partition, v.Offset, v.Timestamp, v.Key, v.Headers)
		}
	}
	r1 := readAll(t, addrs, "g.retry.1", 1, 5*time.Second)
	r2 := readAll(t, addrs, "g.retry.2", 1, 5*time.Second)
	if len(r1) != 1 || len(r2) != 1 {
		t.Fatalf("retry topics hold %d and %d records, want 1 and 1", len(r1), len(r2))
	}
	for i, rr := range []*kgo.Record{r1[0], r2[0]} {
		counts := map[string]int{}
		for _, hd := range rr.Headers {
			counts[hd.Key]++
		}
		for k, c := range counts {
			if c != 1 {
				t.Fatalf("retry topic %d record has header %s %d times (headers must be replaced, not appended)", i+1, k, c)
			}
		}
		hdr := headerMap(rr)
		if hdr[HeaderOriginalTopic] != "in" || hdr[HeaderOriginalOffset] != strconv.FormatInt(orig.Offset, 10) ||
			hdr[HeaderAttempts] != strconv.Itoa(2*(i+1)) || hdr["traceparent"] != "t1" {
			t.Fatalf("retry topic %d headers %v", i+1, hdr)
		}
		due, _ := strconv.ParseInt(hdr[HeaderRetryDue], 10, 64)
		if at := calls[2+2*i].at; at.Before(time.UnixMilli(due)) {
			t.Fatalf("retry topic %d record handled at %v, before its due time %v", i+1, at, time.UnixMilli(due))
		}
	}
	ev := h.snapshot()
	checkHistory(t, ev, logOffsetsOf(t, addrs, "in", "g.retry.1", "g.retry.2"), true)
	if dl := endOffsets(t, addrs, "g.dlq"); dl[tp{"g.dlq", 0}] != 0 {
		t.Fatalf("DLQ holds %d records, want none", dl[tp{"g.dlq", 0}])
	}
}

// TestRetryTopicWaitBlocksNothing: while a record waits in a retry topic for
// its due time (2s here), records produced meanwhile, on its own original
// partition and on another, are handled and committed long before it is due:
// the wait holds no worker, no partition of the source topic and no commit.
func TestRetryTopicWaitBlocksNothing(t *testing.T) {
	addrs := testCluster(t, map[string]int32{"in": 2, "g.retry.1": 1, "g.dlq": 1})
	produce(t, addrs, &kgo.Record{Topic: "in", Partition: 0, Key: []byte("x"), Value: []byte("flaky")})
	h := newRecorder()
	m := startMember(t, Brokers(addrs...), Group("g"), Topics("in"), MaxAttempts(1), RetryTopics(2*time.Second),
		CommitInterval(5*time.Millisecond), Concurrency(2), h.hooks("A"),
		WithHandler(func(ctx context.Context, r *kgo.Record) error {
			if string(r.Value) == "flaky" {
				return errors.New("flaky")
			}
			return nil
		}))
	waitFor(t, 20*time.Second, "the record forwarded to the retry topic", func() bool {
		return h.count(func(e event) bool { return e.Kind == evCompleted && e.Target == "g.retry.1" }) == 1
	})
	r1 := readAll(t, addrs, "g.retry.1", 1, 5*time.Second)
	due, _ := strconv.ParseInt(headerMap(r1[0])[HeaderRetryDue], 10, 64)
	var recs []*kgo.Record
	for i := range 10 {
		recs = append(recs, &kgo.Record{Topic: "in", Partition: int32(i % 2), Key: []byte("y"), Value: val(i)})
	}
	produce(t, addrs, recs...)
	waitFor(t, 20*time.Second, "the new records committed", func() bool {
		return committedEquals(t, addrs, "g", map[tp]int64{{"in", 0}: 6, {"in", 1}: 5})
	})
	if now := time.Now(); !now.Before(time.UnixMilli(due)) {
		t.Fatalf("the records produced during the retry wait were done only at %v, after the due time %v", now, time.UnixMilli(due))
	}
	if n := h.count(func(e event) bool { return e.Kind == evHandle && e.Topic == "g.retry.1" }); n != 0 {
		t.Fatalf("the retry record was handled %d times before its due time", n)
	}
	if c := committed(t, addrs, "g", "g.retry.1")[0]; c != 0 {
		t.Fatalf("the retry topic committed to %d before its record was handled", c)
	}
	m.stop()
}
