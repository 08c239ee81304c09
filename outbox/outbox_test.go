package outbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/inbox"
	"github.com/ordercast/ordercast/internal/testkit/dbtest"
	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/outbox"
	"github.com/ordercast/ordercast/sqldb"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// cluster returns a broker with topic "t" (3 partitions): an in-process
// one, or the real cluster of ORDERCAST_TEST_BROKERS (internal/testkafka).
func cluster(t *testing.T) []string {
	t.Helper()
	return testkafka.Cluster(t, map[string]int32{"t": 3})
}

// producer is the relay's client: idempotent (the default) with acks=all.
func producer(t *testing.T, addrs []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...), kgo.RequiredAcks(kgo.AllISRAcks())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// event is the payload the tests publish.
type event struct {
	EventID string `json:"eventId"`
	Seq     int    `json:"seq"`
}

// enqueue commits one transaction that enqueues the given sequence numbers
// on topic, keys cycling over nKeys keys.
func enqueue(t *testing.T, db *sqldb.DB, topic string, nKeys int, seqs ...int) {
	t.Helper()
	ctx := ctxT(t)
	err := db.InTx(ctx, func(tx *sql.Tx) error {
		for _, s := range seqs {
			v, _ := json.Marshal(event{EventID: fmt.Sprint("ev-", s), Seq: s})
			m := outbox.Message{
				Topic:   topic,
				Key:     []byte(fmt.Sprint("k", s%nKeys)),
				Value:   v,
				Headers: []outbox.Header{{Key: "seq", Value: []byte(fmt.Sprint(s))}, {Key: "bin", Value: []byte{0, 0xff}}},
			}
			if err := outbox.Enqueue(ctx, tx, db, m); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// consume reads topic from the start until it has n records, and checks
// that the topic holds exactly n.
func consume(t *testing.T, addrs []string, topic string, n int) []*kgo.Record {
	t.Helper()
	ctx := ctxT(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records from %s before the deadline", len(out), n, topic)
		}
		fs.EachError(func(tp string, p int32, err error) { t.Logf("fetch %s/%d: %v", tp, p, err) })
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	if total != int64(n) {
		t.Fatalf("topic %s holds %d records, want %d", topic, total, n)
	}
	return out
}

func seqOf(t *testing.T, r *kgo.Record) int {
	t.Helper()
	var e event
	if err := json.Unmarshal(r.Value, &e); err != nil {
		t.Fatal(err)
	}
	return e.Seq
}

// byPartition returns each partition's sequence numbers in offset order.
func byPartition(t *testing.T, recs []*kgo.Record) map[int32][]int {
	t.Helper()
	sort.Slice(recs, func(i, j int) bool {
		if recs[i].Partition != recs[j].Partition {
			return recs[i].Partition < recs[j].Partition
		}
		return recs[i].Offset < recs[j].Offset
	})
	out := map[int32][]int{}
	for _, r := range recs {
		out[r.Partition] = append(out[r.Partition], seqOf(t, r))
	}
	return out
}

// waitFor polls cond every few milliseconds until it holds or a minute
// passes. The deadline only bounds a test that would otherwise hang: under
// the race detector on two loaded cores, three relays that fence each other
// (TestTxnRelaysConcurrently) took over 15 s to send 200 rows.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func pending(t *testing.T, db *sqldb.DB) int {
	t.Helper()
	n, err := outbox.Pending(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// run starts r.Run and returns a function that stops it and returns its error.
// offlineClient is a client of no broker (nothing dials it until it is
// used), for relays that are made and not run.
func offlineClient(t testing.TB) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// newRelay is outbox.NewRelay, failing t on error.
func newRelay(t testing.TB, db *sqldb.DB, cl *kgo.Client, opts ...outbox.Opt) *outbox.Relay {
	t.Helper()
	r, err := outbox.NewRelay(db, cl, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func run(t *testing.T, r *outbox.Relay) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(15 * time.Second):
				err = errors.New("Run did not return after its context was cancelled")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func TestEnqueueIsTransactional(t *testing.T) {
	dbtest.Each(t, dbtest.Runtime, func(t *testing.T, db *sqldb.DB) {
		ctx := ctxT(t)
		rollback := errors.New("rollback")
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			if err := outbox.Enqueue(ctx, tx, db, outbox.Message{Topic: "t", Value: []byte("x")}); err != nil {
				return err
			}
			return rollback
		})
		if !errors.Is(err, rollback) || pending(t, db) != 0 {
			t.Fatalf("err %v, pending %d; a rolled-back enqueue must leave no row", err, pending(t, db))
		}
		err = db.InTx(ctx, func(tx *sql.Tx) error { return outbox.Enqueue(ctx, tx, db, outbox.Message{}) })
		if err == nil {
			t.Fatal("enqueue without a topic accepted")
		}
		err = db.InTx(ctx, func(tx *sql.Tx) error {
			// nil key and nil value (a tombstone) are kept as NULL.
			return outbox.Enqueue(ctx, tx, db, outbox.Message{Topic: "t"})
		})
		if err != nil || pending(t, db) != 1 {
			t.Fatalf("err %v, pending %d", err, pending(t, db))
		}
		var nulls int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM outbox WHERE record_key IS NULL AND value IS NULL AND headers IS NULL`).Scan(&nulls); err != nil || nulls != 1 {
			t.Fatalf("NULL key/value/headers rows %d, %v", nulls, err)
		}
	})
}

func TestRelayPublishesInIDOrderAndMarksSent(t *testing.T) {
	dbtest.Each(t, dbtest.Runtime, func(t *testing.T, db *sqldb.DB) {
		addrs := cluster(t)
		const n = 40
		var all []int
		for s := 1; s <= n; s++ {
			all = append(all, s)
		}
		enqueue(t, db, "t", 3, all[:15]...)
		enqueue(t, db, "t", 3, all[15:]...)

		relay := newRelay(t, db, producer(t, addrs), outbox.MaxBatch(7), outbox.Logger(quiet))
		stop := run(t, relay)
		waitFor(t, "all rows marked sent", func() bool { return pending(t, db) == 0 })
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}

		recs := consume(t, addrs, "t", n)
		for _, r := range recs {
			s := seqOf(t, r)
			if string(r.Key) != fmt.Sprint("k", s%3) {
				t.Fatalf("seq %d has key %q", s, r.Key)
			}
			if len(r.Headers) != 2 || r.Headers[0].Key != "seq" || string(r.Headers[0].Value) != fmt.Sprint(s) ||
				r.Headers[1].Key != "bin" || string(r.Headers[1].Value) != "\x00\xff" {
				t.Fatalf("seq %d headers %+v", s, r.Headers)
			}
		}
		for p, seqs := range byPartition(t, recs) {
			if !sort.IntsAreSorted(seqs) {
				t.Fatalf("partition %d out of id order: %v", p, seqs)
			}
		}
		var unsent, stamped int
		if err := db.QueryRowContext(ctxT(t), `SELECT
			SUM(CASE WHEN sent_at IS NULL THEN 1 ELSE 0 END),
			SUM(CASE WHEN sent_at >= created_at THEN 1 ELSE 0 END) FROM outbox`).Scan(&unsent, &stamped); err != nil {
			t.Fatal(err)
		}
		if unsent != 0 || stamped != n {
			t.Fatalf("unsent %d, stamped %d; want 0 and %d", unsent, stamped, n)
		}

		// Sent rows can be pruned; unsent ones never are.
		enqueue(t, db, "t", 3, n+1)
		deleted, err := outbox.Prune(ctxT(t), db, time.Now().Add(time.Minute))
		if err != nil || deleted != n || pending(t, db) != 1 {
			t.Fatalf("Prune deleted %d (%v), pending %d; want %d and 1", deleted, err, pending(t, db), n)
		}
	})
}

func TestRelayNotifyWakesIt(t *testing.T) {
	db := dbtest.SQLite(t, dbtest.Runtime)
	addrs := cluster(t)
	// An hour-long poll: only Notify can make the relay see a new row in time.
	relay := newRelay(t, db, producer(t, addrs), outbox.PollInterval(time.Hour), outbox.Logger(quiet))
	enqueue(t, db, "t", 1, 1)
	run(t, relay)
	waitFor(t, "the first row (read when Run starts)", func() bool { return pending(t, db) == 0 })

	enqueue(t, db, "t", 1, 2)
	// Without Notify the row stays: the relay is asleep for an hour.
	for end := time.Now().Add(150 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if pending(t, db) != 1 {
			t.Fatal("the relay published without Notify or poll")
		}
	}
	relay.Notify()
	relay.Notify() // coalesced, never blocks
	waitFor(t, "the row published after Notify", func() bool { return pending(t, db) == 0 })
	consume(t, addrs, "t", 2)

	if err := relay.Run(context.Background()); !errors.Is(err, outbox.ErrRunning) {
		t.Fatalf("second Run: %v, want ErrRunning", err)
	}
}

// TestRelayCrashBetweenProduceAndMark: a relay dies after Kafka acknowledged
// a batch but before marking it; the next relay publishes it again, and a
// consumer's inbox applies each event once.
func TestRelayCrashBetweenProduceAndMark(t *testing.T) {
	dbtest.Each(t, dbtest.Runtime, func(t *testing.T, db *sqldb.DB) {
		addrs := cluster(t)
		enqueue(t, db, "t", 2, 1, 2, 3, 4, 5)

		crash := errors.New("simulated crash before marking")
		var producedIDs []int64
		first := newRelay(t, db, producer(t, addrs), outbox.Logger(quiet))
		first.SetAfterProduce(func(ids []int64) error {
			producedIDs = ids
			return crash
		})
		ctx := ctxT(t)
		if err := first.Run(ctx); !errors.Is(err, crash) {
			t.Fatalf("Run: %v, want the simulated crash", err)
		}
		if len(producedIDs) != 5 || pending(t, db) != 5 {
			t.Fatalf("produced ids %v, pending %d; want 5 produced and all 5 unmarked", producedIDs, pending(t, db))
		}
		consume(t, addrs, "t", 5)

		second := newRelay(t, db, producer(t, addrs), outbox.Logger(quiet))
		run(t, second)
		waitFor(t, "the re-publication", func() bool { return pending(t, db) == 0 })
		recs := consume(t, addrs, "t", 10) // every event twice: at least once

		for p, seqs := range byPartition(t, recs) {
			half := len(seqs) / 2
			if !sort.IntsAreSorted(seqs[:half]) || !sort.IntsAreSorted(seqs[half:]) || fmt.Sprint(seqs[:half]) != fmt.Sprint(seqs[half:]) {
				t.Fatalf("partition %d: %v, want the same id-ordered run twice", p, seqs)
			}
		}

		// The consumer's inbox absorbs the duplicates.
		if _, err := db.ExecContext(ctx, `CREATE TABLE applied (event_id TEXT NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			var e event
			if err := json.Unmarshal(r.Value, &e); err != nil {
				t.Fatal(err)
			}
			_, err := inbox.Process(ctx, db, "consumer", e.EventID,
				inbox.Meta{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset},
				func(ctx context.Context, tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, db.Rebind(`INSERT INTO applied (event_id) VALUES (?)`), e.EventID)
					return err
				})
			if err != nil {
				t.Fatal(err)
			}
		}
		var applied, distinct int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*), COUNT(DISTINCT event_id) FROM applied`).Scan(&applied, &distinct); err != nil {
			t.Fatal(err)
		}
		if applied != 5 || distinct != 5 {
			t.Fatalf("applied %d effects for %d events; want 5 and 5", applied, distinct)
		}
	})
}

// TestRelayRetriesWithoutSkipping: the first row cannot be produced (its
// topic does not exist yet); the relay keeps retrying it with backoff and
// never marks the row after it first; once the topic exists, both go out.
func TestRelayRetriesWithoutSkipping(t *testing.T) {
	db := dbtest.SQLite(t, dbtest.Runtime)
	addrs := cluster(t)
	enqueue(t, db, "late", 1, 1)
	enqueue(t, db, "t", 1, 2)

	var mu sync.Mutex
	var failures []int // Pending seen at each failure
	cl := producer(t, addrs, kgo.UnknownTopicRetries(1))
	relay := newRelay(t, db, cl,
		outbox.Backoff(5*time.Millisecond, 20*time.Millisecond),
		outbox.Logger(quiet),
		outbox.OnError(func(err error) {
			n, _ := outbox.Pending(context.Background(), db)
			mu.Lock()
			failures = append(failures, n)
			mu.Unlock()
		}))
	run(t, relay)
	waitFor(t, "two failed attempts", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(failures) >= 2
	})
	if _, err := kadm.NewClient(cl).CreateTopic(ctxT(t), 1, 1, nil, "late"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both rows sent once the topic exists", func() bool { return pending(t, db) == 0 })
	mu.Lock()
	for i, n := range failures {
		if n != 2 {
			t.Fatalf("failure %d saw %d pending rows; the row after the failing one was marked first", i, n)
		}
	}
	mu.Unlock()
	if r := consume(t, addrs, "late", 1); seqOf(t, r[0]) != 1 {
		t.Fatalf("late got seq %d", seqOf(t, r[0]))
	}
}

// EnqueueAll writes the rows Enqueue writes, one per message, in slice order
// (ids increasing), with NULL for no key, value or headers; a message
// without a topic fails the call before anything is written.
func TestEnqueueAll(t *testing.T) {
	dbtest.Each(t, dbtest.Runtime, func(t *testing.T, db *sqldb.DB) {
		ctx := ctxT(t)
		hdr := []outbox.Header{{Key: "h", Value: []byte{1, 2}}}
		msgs := []outbox.Message{
			{Topic: "t", Key: []byte("k1"), Value: []byte("v1"), Headers: hdr},
			{Topic: "u"},
			{Topic: "t", Key: []byte("k3"), Value: []byte("v3")},
		}
		if err := db.InTx(ctx, func(tx *sql.Tx) error { return outbox.EnqueueAll(ctx, tx, db, msgs) }); err != nil {
			t.Fatal(err)
		}
		one := func(m outbox.Message) error {
			return db.InTx(ctx, func(tx *sql.Tx) error { return outbox.Enqueue(ctx, tx, db, m) })
		}
		for _, m := range msgs { // the same rows one at a time, to compare
			if err := one(m); err != nil {
				t.Fatal(err)
			}
		}
		rows, err := db.QueryContext(ctx, `SELECT topic, COALESCE(record_key, 'NULL'), COALESCE(value, 'NULL'), COALESCE(headers, 'NULL') FROM outbox ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for rows.Next() {
			var topic, key, value, headers string
			if err := rows.Scan(&topic, &key, &value, &headers); err != nil {
				t.Fatal(err)
			}
			got = append(got, topic+"|"+key+"|"+value+"|"+headers)
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
		if len(got) != 6 {
			t.Fatalf("%d rows, want 6: %q", len(got), got)
		}
		for i := range 3 {
			if got[i] != got[i+3] {
				t.Errorf("row %d: EnqueueAll wrote %q, Enqueue %q", i, got[i], got[i+3])
			}
		}
		if got[0] == got[2] || got[1] != "u|NULL|NULL|NULL" {
			t.Errorf("rows not in slice order: %q", got)
		}
		bad := []outbox.Message{{Topic: "t", Value: []byte("x")}, {Value: []byte("no topic")}}
		err = db.InTx(ctx, func(tx *sql.Tx) error { return outbox.EnqueueAll(ctx, tx, db, bad) })
		if err == nil || pending(t, db) != 6 {
			t.Fatalf("err %v, pending %d: a message without a topic must fail the call and write nothing", err, pending(t, db))
		}
		if err := db.InTx(ctx, func(tx *sql.Tx) error { return outbox.EnqueueAll(ctx, tx, db, nil) }); err != nil || pending(t, db) != 6 {
			t.Fatalf("no messages: err %v, pending %d", err, pending(t, db))
		}
	})
}

// TestRelayCarriesTraceContext: a message's TraceContext is stored in the
// trace_context column and becomes its record's traceparent header; a
// message whose headers have a traceparent keeps that one, and one without
// TraceContext gets none (its column NULL).
func TestRelayCarriesTraceContext(t *testing.T) {
	dbtest.Each(t, dbtest.Runtime, func(t *testing.T, db *sqldb.DB) {
		addrs := cluster(t)
		const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		const own = "00-11111111111111111111111111111111-2222222222222222-01"
		msgs := []outbox.Message{
			{Topic: "t", Key: []byte("traced"), TraceContext: tp},
			{Topic: "t", Key: []byte("own"), TraceContext: tp, Headers: []outbox.Header{{Key: outbox.HeaderTraceParent, Value: []byte(own)}}},
			{Topic: "t", Key: []byte("none")},
		}
		if err := db.InTx(ctxT(t), func(tx *sql.Tx) error { return outbox.EnqueueAll(ctxT(t), tx, db, msgs) }); err != nil {
			t.Fatal(err)
		}
		var nulls int
		if err := db.QueryRowContext(ctxT(t), `SELECT COUNT(*) FROM outbox WHERE trace_context IS NULL`).Scan(&nulls); err != nil || nulls != 1 {
			t.Fatalf("rows without trace_context: %d, %v; want 1", nulls, err)
		}
		stop := run(t, newRelay(t, db, producer(t, addrs), outbox.Logger(quiet)))
		waitFor(t, "all rows sent", func() bool { return pending(t, db) == 0 })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"traced": tp, "own": own, "none": ""}
		for _, r := range consume(t, addrs, "t", 3) {
			var got []string
			for _, h := range r.Headers {
				if h.Key == outbox.HeaderTraceParent {
					got = append(got, string(h.Value))
				}
			}
			if w := want[string(r.Key)]; (w == "" && len(got) != 0) || (w != "" && (len(got) != 1 || got[0] != w)) {
				t.Errorf("record %s: traceparent headers %q; want %q", r.Key, got, w)
			}
		}
	})
}
