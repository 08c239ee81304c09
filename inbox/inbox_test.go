package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordercast/ordercast/inbox"
	"github.com/ordercast/ordercast/internal/testkit/dbtest"
	"github.com/ordercast/ordercast/sqldb"
)

func ctxT(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// counter is a test effect: a table counting how often each key's effect ran.
type counter struct{ db *sqldb.DB }

func newCounter(t testing.TB, db *sqldb.DB) counter {
	t.Helper()
	if _, err := db.ExecContext(ctxT(t), `CREATE TABLE effects (k TEXT PRIMARY KEY, n BIGINT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return counter{db}
}

// apply increments k's count inside tx (an upsert, portable to both dialects).
func (c counter) apply(ctx context.Context, tx *sql.Tx, k string) error {
	_, err := tx.ExecContext(ctx, c.db.Rebind(`INSERT INTO effects (k, n) VALUES (?, 1)
		ON CONFLICT (k) DO UPDATE SET n = effects.n + 1`), k)
	return err
}

func (c counter) get(t testing.TB, k string) int {
	t.Helper()
	var n int
	err := c.db.QueryRowContext(ctxT(t), c.db.Rebind(`SELECT n FROM effects WHERE k = ?`), k).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func seen(t testing.TB, db *sqldb.DB, group, id string) bool {
	t.Helper()
	ok, err := inbox.Seen(ctxT(t), db, group, id)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

var meta = inbox.Meta{Topic: "orderCreated", Partition: 2, Offset: 41}

func TestProcessAppliesOnce(t *testing.T) {
	dbtest.Each(t, dbtest.Runtime, func(t *testing.T, db *sqldb.DB) {
		ctx := ctxT(t)
		c := newCounter(t, db)
		if seen(t, db, "orders", "ev-1") {
			t.Fatal("Seen before processing")
		}
		calls := 0
		fn := func(ctx context.Context, tx *sql.Tx) error {
			calls++
			return c.apply(ctx, tx, "ev-1")
		}
		applied, err := inbox.Process(ctx, db, "orders", "ev-1", meta, fn)
		if err != nil || !applied || calls != 1 {
			t.Fatalf("first Process: applied %v, err %v, calls %d", applied, err, calls)
		}
		for range 3 { // re-deliveries
			applied, err = inbox.Process(ctx, db, "orders", "ev-1", inbox.Meta{Topic: "orderCreated", Partition: 2, Offset: 99}, fn)
			if err != nil || applied {
				t.Fatalf("duplicate Process: applied %v, err %v", applied, err)
			}
		}
		if calls != 1 || c.get(t, "ev-1") != 1 {
			t.Fatalf("fn called %d times, effect count %d; want 1 and 1", calls, c.get(t, "ev-1"))
		}
		if !seen(t, db, "orders", "ev-1") {
			t.Fatal("not Seen after processing")
		}
		// The row records where the event was first consumed.
		var topic string
		var part int32
		var off int64
		if err := db.QueryRowContext(ctx, `SELECT topic, "partition", "offset" FROM inbox`).Scan(&topic, &part, &off); err != nil {
			t.Fatal(err)
		}
		if topic != meta.Topic || part != meta.Partition || off != meta.Offset {
			t.Fatalf("inbox row %s/%d/%d, want %+v", topic, part, off, meta)
		}
		// Another group has its own inbox.
		applied, err = inbox.Process(ctx, db, "payments", "ev-1", meta, fn)
		if err != nil || !applied || calls != 2 {
			t.Fatalf("other group: applied %v, err %v, calls %d", applied, err, calls)
		}
	})
}

func TestProcessErrorRollsBack(t *testing.T) {
	dbtest.Each(t, dbtest.Runtime, func(t *testing.T, db *sqldb.DB) {
		ctx := ctxT(t)
		c := newCounter(t, db)
		boom := errors.New("payment gateway said no")
		applied, err := inbox.Process(ctx, db, "payments", "ev-2", meta, func(ctx context.Context, tx *sql.Tx) error {
			if err := c.apply(ctx, tx, "ev-2"); err != nil {
				return err
			}
			return fmt.Errorf("charge: %w", boom)
		})
		if applied || !errors.Is(err, boom) {
			t.Fatalf("applied %v, err %v; want false and fn's error", applied, err)
		}
		if seen(t, db, "payments", "ev-2") || c.get(t, "ev-2") != 0 {
			t.Fatal("a failed fn left an inbox row or an effect")
		}
		// A panic rolls back too, and propagates.
		func() {
			defer func() {
				if recover() == nil {
					t.Fatal("panic swallowed")
				}
			}()
			_, _ = inbox.Process(ctx, db, "payments", "ev-2", meta, func(ctx context.Context, tx *sql.Tx) error {
				_ = c.apply(ctx, tx, "ev-2")
				panic("handler bug")
			})
		}()
		if seen(t, db, "payments", "ev-2") || c.get(t, "ev-2") != 0 {
			t.Fatal("a panicking fn left an inbox row or an effect")
		}
		// The re-delivery applies it.
		applied, err = inbox.Process(ctx, db, "payments", "ev-2", meta, func(ctx context.Context, tx *sql.Tx) error {
			return c.apply(ctx, tx, "ev-2")
		})
		if err != nil || !applied || c.get(t, "ev-2") != 1 {
			t.Fatalf("re-delivery: applied %v, err %v, count %d", applied, err, c.get(t, "ev-2"))
		}
	})
}

func TestProcessRejectsEmptyIDs(t *testing.T) {
	db := dbtest.SQLite(t, dbtest.Runtime)
	for _, ids := range [][2]string{{"", "e"}, {"g", ""}} {
		applied, err := inbox.Process(ctxT(t), db, ids[0], ids[1], meta, func(context.Context, *sql.Tx) error {
			t.Fatal("fn called")
			return nil
		})
		if err == nil || applied {
			t.Fatalf("Process(%q, %q): applied %v, err %v", ids[0], ids[1], applied, err)
		}
	}
}

// TestProcessConcurrentSameEvent races 8 deliveries of one event (as several
// instances would after a rebalance): exactly one applies it.
func TestProcessConcurrentSameEvent(t *testing.T) {
	dbtest.Each(t, dbtest.Runtime, func(t *testing.T, db *sqldb.DB) {
		ctx := ctxT(t)
		c := newCounter(t, db)
		const rounds, racers = 5, 8
		for r := range rounds {
			id := fmt.Sprint("ev-race-", r)
			var wg sync.WaitGroup
			var applied, calls atomic.Int32
			start := make(chan struct{})
			for range racers {
				wg.Go(func() {
					<-start
					ok, err := inbox.Process(ctx, db, "orders", id, meta, func(ctx context.Context, tx *sql.Tx) error {
						calls.Add(1)
						return c.apply(ctx, tx, id)
					})
					if err != nil {
						t.Errorf("Process: %v", err)
					}
					if ok {
						applied.Add(1)
					}
				})
			}
			close(start)
			wg.Wait()
			if applied.Load() != 1 || c.get(t, id) != 1 {
				t.Fatalf("%s: applied by %d, effect count %d (fn calls %d); want exactly 1", id, applied.Load(), c.get(t, id), calls.Load())
			}
		}
	})
}

// TestProcessConcurrentRollbackHandsOver: on PostgreSQL the second insert of a
// key waits for the first transaction; if that one rolls back, the waiter must
// apply the event (not skip it). On SQLite the same holds by serialisation.
func TestProcessConcurrentRollbackHandsOver(t *testing.T) {
	dbtest.Each(t, dbtest.Runtime, func(t *testing.T, db *sqldb.DB) {
		ctx := ctxT(t)
		c := newCounter(t, db)
		inFirst := make(chan struct{})
		release := make(chan struct{})
		failed := errors.New("first delivery fails")
		firstDone := make(chan error, 1)
		go func() {
			_, err := inbox.Process(ctx, db, "orders", "ev-h", meta, func(ctx context.Context, tx *sql.Tx) error {
				close(inFirst)
				<-release
				return failed
			})
			firstDone <- err
		}()
		<-inFirst
		secondDone := make(chan bool, 1)
		go func() {
			ok, err := inbox.Process(ctx, db, "orders", "ev-h", meta, func(ctx context.Context, tx *sql.Tx) error {
				return c.apply(ctx, tx, "ev-h")
			})
			if err != nil {
				t.Errorf("second Process: %v", err)
			}
			secondDone <- ok
		}()
		if db.Dialect == sqldb.Postgres {
			// Release the first only once the second waits on its row lock.
			deadline := time.Now().Add(10 * time.Second)
			for {
				var waiting int
				if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM pg_stat_activity
					WHERE wait_event_type = 'Lock' AND datname = current_database() AND query LIKE 'INSERT INTO inbox%'`).Scan(&waiting); err != nil {
					t.Fatal(err)
				}
				if waiting > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the second delivery never waited for the first one's inbox row")
				}
				time.Sleep(5 * time.Millisecond) // polling with a deadline, not synchronising by sleep
			}
		}
		close(release)
		if err := <-firstDone; !errors.Is(err, failed) {
			t.Fatalf("first Process: %v", err)
		}
		if ok := <-secondDone; !ok || c.get(t, "ev-h") != 1 {
			t.Fatalf("second Process applied %v, count %d; want it to apply once", ok, c.get(t, "ev-h"))
		}
	})
}

// BenchmarkInboxProcess measures Process with a one-row effect on SQLite (a
// file in a temp dir, WAL, synchronous=NORMAL): each op is one new event id,
// so one transaction with the inbox insert and the effect insert.
func BenchmarkInboxProcess(b *testing.B) {
	db := dbtest.SQLite(b, dbtest.Runtime)
	c := newCounter(b, db)
	ctx := context.Background()
	fn := func(id string) func(context.Context, *sql.Tx) error {
		return func(ctx context.Context, tx *sql.Tx) error { return c.apply(ctx, tx, id) }
	}
	// Event ids are unique across runs (-count, ramp-up): a repeated id
	// would measure the duplicate path instead.
	var seq atomic.Int64
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			id := fmt.Sprint("s-", seq.Add(1))
			if _, err := inbox.Process(ctx, db, "bench", id, meta, fn(id)); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("parallel", func(b *testing.B) {
		b.SetParallelism(4) // 4 x GOMAXPROCS goroutines, as several partitions' workers
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				id := fmt.Sprint("p-", seq.Add(1))
				if _, err := inbox.Process(ctx, db, "bench", id, meta, fn(id)); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("duplicate", func(b *testing.B) {
		id := "dup"
		if _, err := inbox.Process(ctx, db, "bench", id, meta, fn(id)); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := inbox.Process(ctx, db, "bench", id, meta, fn(id)); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
}

// An event id re-sent with other content is not a redelivery: Process
// refuses it with a permanent *ConflictError naming where the first came
// from, and does not apply it. The same content (by digest) is skipped as a
// duplicate; a row without a digest (written by an older build) and a Meta
// without one are not compared.
func TestProcessRefusesReusedEventID(t *testing.T) {
	dbtest.Each(t, dbtest.Runtime, func(t *testing.T, db *sqldb.DB) {
		ctx := ctxT(t)
		c := newCounter(t, db)
		calls := 0
		fn := func(ctx context.Context, tx *sql.Tx) error { calls++; return c.apply(ctx, tx, "k") }
		with := func(off int64, payload string) inbox.Meta {
			return inbox.Meta{Topic: "orderCreated", Partition: 1, Offset: off, Digest: inbox.Digest([]byte(payload))}
		}
		if applied, err := inbox.Process(ctx, db, "orders", "ev-1", with(5, `{"a":1}`), fn); err != nil || !applied {
			t.Fatalf("first: applied %v, err %v", applied, err)
		}
		if applied, err := inbox.Process(ctx, db, "orders", "ev-1", with(6, ` { "a" : 1 } `), fn); err != nil || applied {
			t.Fatalf("same content: applied %v, err %v; want a skipped duplicate", applied, err)
		}
		applied, err := inbox.Process(ctx, db, "orders", "ev-1", with(7, `{"a":2}`), fn)
		var ce *inbox.ConflictError
		if applied || !errors.As(err, &ce) || !ce.Permanent() {
			t.Fatalf("other content: applied %v, err %v; want a permanent *inbox.ConflictError", applied, err)
		}
		if ce.Group != "orders" || ce.EventID != "ev-1" || ce.First.Offset != 5 || ce.First.Partition != 1 {
			t.Fatalf("conflict %+v, want group orders, event ev-1, first at orderCreated/1/5", ce)
		}
		if applied, err := inbox.Process(ctx, db, "orders", "ev-1", inbox.Meta{Topic: "orderCreated", Offset: 8}, fn); err != nil || applied {
			t.Fatalf("no digest: applied %v, err %v; want a skipped duplicate", applied, err)
		}
		// A row an older build wrote has no digest: every digest matches it.
		if applied, err := inbox.Process(ctx, db, "orders", "ev-old", inbox.Meta{Topic: "orderCreated"}, fn); err != nil || !applied {
			t.Fatalf("old row: applied %v, err %v", applied, err)
		}
		if applied, err := inbox.Process(ctx, db, "orders", "ev-old", with(9, `{"b":1}`), fn); err != nil || applied {
			t.Fatalf("against an old row: applied %v, err %v; want a skipped duplicate", applied, err)
		}
		if calls != 2 || c.get(t, "k") != 2 {
			t.Fatalf("fn called %d times, effect %d; want 2 and 2 (ev-1 and ev-old once each)", calls, c.get(t, "k"))
		}
	})
}

func TestDigest(t *testing.T) {
	same := [][]string{
		{`{"a":1,"b":[1,2]}`, ` {"b": [1, 2],  "a": 1}` + "\n"},
		{"\x00\x00\x00\x00\x01\x02abc", "\x00\x00\x00\x00\x01\x02abc"},
	}
	for _, p := range same {
		if inbox.Digest([]byte(p[0])) != inbox.Digest([]byte(p[1])) {
			t.Errorf("Digest(%q) != Digest(%q)", p[0], p[1])
		}
	}
	differ := [][]string{
		{`{"a":1}`, `{"a":1.0}`}, // numbers kept as written
		{`{"a":1}`, `{"a":"1"}`},
		{"\x00\x00\x00\x00\x01\x02abc", "\x00\x00\x00\x00\x02\x02abc"},
		{`{"a":`, `{"a": `}, // not JSON: hashed as is
	}
	for _, p := range differ {
		if inbox.Digest([]byte(p[0])) == inbox.Digest([]byte(p[1])) {
			t.Errorf("Digest(%q) == Digest(%q)", p[0], p[1])
		}
	}
	if d := inbox.Digest(nil); len(d) != 64 {
		t.Errorf("Digest(nil) = %q, want 64 hex digits", d)
	}
}
