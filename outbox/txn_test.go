package outbox_test

import (
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/dbtest"
	"github.com/ordercast/ordercast/outbox"
	"github.com/ordercast/ordercast/sqldb"
)

// txnRelay makes an exactly-once relay named name on db against addrs.
func txnRelay(t *testing.T, db *sqldb.DB, addrs []string, name string, opts ...outbox.Opt) *outbox.Relay {
	t.Helper()
	opts = append([]outbox.Opt{outbox.Logger(quiet), outbox.PollInterval(20 * time.Millisecond),
		outbox.Backoff(10*time.Millisecond, 100*time.Millisecond)}, opts...)
	r, err := outbox.NewTransactionalRelay(db, name, []kgo.Opt{kgo.SeedBrokers(addrs...)}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// readTopic reads every data record of topic up to its end: the last stable
// offset as a read_committed reader (committed), or the high watermark as a
// read_uncommitted one (aborted transactions' records included).
//
// A committed read first waits until no transaction is in flight on the
// topic (last stable offset = high watermark): on Apache Kafka the
// coordinator writes the commit and abort markers after EndTxn has answered,
// so the last transaction becomes visible to read_committed readers a moment
// after the relay committed it (kfake writes them before answering).
func readTopic(t *testing.T, addrs []string, topic string, committed bool) []*kgo.Record {
	t.Helper()
	ctx := ctxT(t)
	adm, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	list := kadm.NewClient(adm).ListEndOffsets
	iso := kgo.ReadUncommitted()
	if committed {
		list, iso = kadm.NewClient(adm).ListCommittedOffsets, kgo.ReadCommitted()
		waitFor(t, topic+": last stable offsets at the high watermarks", func() bool {
			lso, err1 := kadm.NewClient(adm).ListCommittedOffsets(ctx, topic)
			hwm, err2 := kadm.NewClient(adm).ListEndOffsets(ctx, topic)
			if err1 != nil || err2 != nil {
				return false
			}
			same := true
			hwm.Each(func(o kadm.ListedOffset) {
				l, ok := lso.Lookup(topic, o.Partition)
				same = same && ok && l.Err == nil && o.Err == nil && l.Offset == o.Offset
			})
			return same
		})
	}
	ends, err := list(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	if len(want) == 0 {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(iso),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.KeepControlRecords(), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s: %d partitions not read to their end", topic, len(want))
		}
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			end, ok := want[p.Partition]
			for _, r := range p.Records {
				if ok && r.Offset < end && !r.Attrs.IsControl() {
					out = append(out, r)
				}
				if ok && r.Offset+1 >= end {
					delete(want, p.Partition)
				}
			}
		})
	}
	return out
}

// seqs returns the sorted sequence numbers of recs.
func seqs(t *testing.T, recs []*kgo.Record) []int {
	t.Helper()
	out := make([]int, 0, len(recs))
	for _, r := range recs {
		out = append(out, seqOf(t, r))
	}
	sort.Ints(out)
	return out
}

func upTo(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i + 1
	}
	return out
}

func TestTxnRelayPublishesOnceInOrder(t *testing.T) {
	dbtest.Each(t, dbtest.Runtime, func(t *testing.T, db *sqldb.DB) {
		addrs := cluster(t)
		enqueue(t, db, "t", 3, upTo(15)...)
		enqueue(t, db, "t", 3, upTo(40)[15:]...)
		relay := txnRelay(t, db, addrs, "orders", outbox.MaxBatch(7))
		stop := run(t, relay)
		waitFor(t, "all rows marked sent", func() bool { return pending(t, db) == 0 })
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		committed := readTopic(t, addrs, "t", true)
		if got := seqs(t, committed); fmt.Sprint(got) != fmt.Sprint(upTo(40)) {
			t.Fatalf("read_committed got %v", got)
		}
		if n := len(readTopic(t, addrs, "t", false)); n != 40 {
			t.Fatalf("read_uncommitted sees %d records, want 40 (nothing aborted)", n)
		}
		for p, s := range byPartition(t, committed) {
			if !sort.IntsAreSorted(s) {
				t.Fatalf("partition %d out of id order: %v", p, s)
			}
		}
		markers := readTopic(t, addrs, outbox.DefaultMarkerTopic("orders"), true)
		if len(markers) != 6 { // ceil(40/7)
			t.Fatalf("%d markers, want one per transaction (6)", len(markers))
		}
		if st := relay.Stats(); st.Published != 40 || st.Transactions != 6 || st.Recovered != 0 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// TestTxnRelayCrashBetweenCommitAndMark: the relay dies after Kafka
// committed a batch and before the rows were marked; the next relay marks
// them from the progress marker and publishes nothing twice, not even for
// read_uncommitted readers.
func TestTxnRelayCrashBetweenCommitAndMark(t *testing.T) {
	dbtest.Each(t, dbtest.Runtime, func(t *testing.T, db *sqldb.DB) {
		addrs := cluster(t)
		enqueue(t, db, "t", 2, 1, 2, 3, 4, 5)
		crash := errors.New("simulated crash between commit and mark")
		first := txnRelay(t, db, addrs, "pay")
		var committedIDs []int64
		first.SetAfterCommit(func(ids []int64) error {
			committedIDs = ids
			return crash
		})
		if err := first.Run(ctxT(t)); !errors.Is(err, crash) {
			t.Fatalf("Run: %v, want the simulated crash", err)
		}
		if len(committedIDs) != 5 || pending(t, db) != 5 {
			t.Fatalf("committed ids %v, pending %d; want 5 committed and all 5 unmarked", committedIDs, pending(t, db))
		}
		enqueue(t, db, "t", 2, 6)

		second := txnRelay(t, db, addrs, "pay")
		stop := run(t, second)
		waitFor(t, "rows marked", func() bool { return pending(t, db) == 0 })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if got := seqs(t, readTopic(t, addrs, "t", true)); fmt.Sprint(got) != fmt.Sprint(upTo(6)) {
			t.Fatalf("read_committed got %v, want each of 1..6 once", got)
		}
		if got := seqs(t, readTopic(t, addrs, "t", false)); fmt.Sprint(got) != fmt.Sprint(upTo(6)) {
			t.Fatalf("read_uncommitted got %v, want each of 1..6 once (nothing re-published)", got)
		}
		if st := second.Stats(); st.Recovered != 5 || st.Published != 1 {
			t.Fatalf("second relay stats %+v, want 5 recovered and 1 published", st)
		}
	})
}

// TestTxnRelayCrashBetweenProduceAndCommit: the relay dies with its
// transaction open; the next relay's InitProducerID aborts it and the rows
// are published again: twice in the log, once for read_committed readers.
func TestTxnRelayCrashBetweenProduceAndCommit(t *testing.T) {
	dbtest.Each(t, dbtest.Runtime, func(t *testing.T, db *sqldb.DB) {
		addrs := cluster(t)
		enqueue(t, db, "t", 2, 1, 2, 3, 4, 5)
		crash := errors.New("simulated crash before commit")
		first := txnRelay(t, db, addrs, "pay")
		first.SetAfterProduce(func([]int64) error { return crash })
		if err := first.Run(ctxT(t)); !errors.Is(err, crash) {
			t.Fatalf("Run: %v", err)
		}
		second := txnRelay(t, db, addrs, "pay")
		stop := run(t, second)
		waitFor(t, "rows marked", func() bool { return pending(t, db) == 0 })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if got := seqs(t, readTopic(t, addrs, "t", true)); fmt.Sprint(got) != fmt.Sprint(upTo(5)) {
			t.Fatalf("read_committed got %v, want each of 1..5 once", got)
		}
		if n := len(readTopic(t, addrs, "t", false)); n != 10 {
			t.Fatalf("read_uncommitted sees %d records, want 10 (5 aborted, 5 committed)", n)
		}
	})
}

// TestTxnRelayZombieIsFenced: relay A stalls with a produced, uncommitted
// batch (a paused process); relay B starts, fences it and publishes
// everything; A's commit then fails, A stands by, and takes over once B is
// gone and rows are waiting.
func TestTxnRelayZombieIsFenced(t *testing.T) {
	db := dbtest.SQLite(t, dbtest.Runtime)
	addrs := cluster(t)
	enqueue(t, db, "t", 3, upTo(10)...)

	stalled, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	a := txnRelay(t, db, addrs, "pay", outbox.TakeoverAfter(200*time.Millisecond))
	a.SetAfterProduce(func([]int64) error {
		once.Do(func() {
			close(stalled)
			<-resume
		})
		return nil
	})
	run(t, a)
	<-stalled

	b := txnRelay(t, db, addrs, "pay")
	stopB := run(t, b)
	waitFor(t, "B publishes every row", func() bool { return pending(t, db) == 0 })
	close(resume) // A tries to commit with a fenced epoch
	waitFor(t, "A fenced", func() bool { return a.Stats().Fenced >= 1 })
	if st := a.Stats(); st.Transactions != 0 {
		t.Fatalf("the zombie committed: %+v", st)
	}
	if err := stopB(); err != nil {
		t.Fatal(err)
	}

	enqueue(t, db, "t", 3, 11, 12)
	// Published counts rows once their mark committed (the marking runs on
	// a goroutine of its own after the transaction): wait for it too, not
	// only for the rows to read as marked.
	waitFor(t, "A takes over and publishes", func() bool { return pending(t, db) == 0 && a.Stats().Published == 2 })
	if st := a.Stats(); st.Takeovers < 1 || st.Published != 2 {
		t.Fatalf("A stats %+v, want a takeover and 2 rows published", st)
	}
	if got := seqs(t, readTopic(t, addrs, "t", true)); fmt.Sprint(got) != fmt.Sprint(upTo(12)) {
		t.Fatalf("read_committed got %v, want each of 1..12 once", got)
	}
}

// TestTxnRelaysConcurrently: three relays on one outbox while rows keep
// coming; they fence each other, and read_committed readers see every row
// once, in id order per key.
func TestTxnRelaysConcurrently(t *testing.T) {
	db := dbtest.SQLite(t, dbtest.Runtime)
	addrs := cluster(t)
	var relays []*outbox.Relay
	for range 3 {
		r := txnRelay(t, db, addrs, "pay", outbox.MaxBatch(5), outbox.TakeoverAfter(100*time.Millisecond))
		relays = append(relays, r)
		run(t, r)
	}
	const n = 200
	for s := 1; s <= n; s += 10 {
		enqueue(t, db, "t", 4, upTo(s + 9)[s-1:]...)
		relays[s%3].Notify()
	}
	waitFor(t, "all rows sent", func() bool { return pending(t, db) == 0 })
	recs := readTopic(t, addrs, "t", true)
	if got := seqs(t, recs); fmt.Sprint(got) != fmt.Sprint(upTo(n)) {
		t.Fatalf("read_committed: %d records, want 1..%d once each", len(got), n)
	}
	for p, s := range byPartition(t, recs) {
		if !sort.IntsAreSorted(s) {
			t.Fatalf("partition %d out of id order: %v", p, s)
		}
	}
}

// TestTxnRelayMarkerOfAnotherDatabase: a marker committed for one database
// is not trusted by a relay on another one whose rows have the same ids.
func TestTxnRelayMarkerOfAnotherDatabase(t *testing.T) {
	addrs := cluster(t)
	db1, db2 := dbtest.SQLite(t, dbtest.Runtime), dbtest.SQLite(t, dbtest.Runtime)
	enqueue(t, db1, "t", 1, 1, 2, 3)
	first := txnRelay(t, db1, addrs, "pay")
	first.SetAfterCommit(func([]int64) error { return errors.New("crash") })
	_ = first.Run(ctxT(t))

	enqueue(t, db2, "t", 1, 101, 102, 103) // ids 1..3, other contents
	second := txnRelay(t, db2, addrs, "pay")
	run(t, second)
	waitFor(t, "db2's rows published", func() bool { return pending(t, db2) == 0 && second.Stats().Published == 3 })
	if st := second.Stats(); st.MarkerMismatches != 1 || st.Recovered != 0 || st.Published != 3 {
		t.Fatalf("stats %+v, want 1 mismatch, 0 recovered, 3 published", st)
	}
	if got := seqs(t, readTopic(t, addrs, "t", true)); fmt.Sprint(got) != "[1 2 3 101 102 103]" {
		t.Fatalf("got %v", got)
	}
}

func TestNewTransactionalRelayValidatesName(t *testing.T) {
	db := dbtest.SQLite(t, dbtest.Runtime)
	for _, name := range []string{"", "a b", "x/y"} {
		if _, err := outbox.NewTransactionalRelay(db, name, nil); err == nil {
			t.Errorf("name %q accepted", name)
		}
	}
}

// TestTxnRelayOwnNames: a relay given its own transactional id and marker
// topic uses them and nothing of the defaults: its transactions are under
// that id, its markers on that topic (the default topic is never created),
// and a relay restarted after a crash between commit and mark recovers from
// that topic. Without options the names are TransactionalID and
// MarkerTopic, which the order system's ACLs are derived from.
func TestTxnRelayOwnNames(t *testing.T) {
	db := dbtest.SQLite(t, dbtest.Runtime)
	if r := txnRelay(t, db, nil, "pay"); r.TransactionalID() != outbox.DefaultTransactionalID("pay") ||
		r.MarkerTopic() != outbox.DefaultMarkerTopic("pay") || r.TransactionalID() != "ordercast-outbox-pay" ||
		r.MarkerTopic() != "ordercast.outbox.pay" {
		t.Fatalf("default names %q, %q", r.TransactionalID(), r.MarkerTopic())
	}
	if r := newRelay(t, db, offlineClient(t), outbox.TransactionalID("x")); r.TransactionalID() != "" || r.MarkerTopic() != "" {
		t.Fatalf("an at-least-once relay reports names %q, %q", r.TransactionalID(), r.MarkerTopic())
	}

	addrs := cluster(t)
	const id, topic = "billing-relay", "billing_relay.progress"
	names := []outbox.Opt{outbox.TransactionalID(id), outbox.MarkerTopic(topic)}
	enqueue(t, db, "t", 2, 1, 2, 3)
	first := txnRelay(t, db, addrs, "ownnames", names...)
	if first.TransactionalID() != id || first.MarkerTopic() != topic {
		t.Fatalf("names %q, %q", first.TransactionalID(), first.MarkerTopic())
	}
	crash := errors.New("simulated crash between commit and mark")
	first.SetAfterCommit(func([]int64) error { return crash })
	if err := first.Run(ctxT(t)); !errors.Is(err, crash) {
		t.Fatalf("Run: %v, want the simulated crash", err)
	}

	second := txnRelay(t, db, addrs, "ownnames", names...)
	stop := run(t, second)
	waitFor(t, "rows marked", func() bool { return pending(t, db) == 0 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if st := second.Stats(); st.Recovered != 3 || st.Published != 0 {
		t.Fatalf("second relay stats %+v, want the 3 rows recovered from %s", st, topic)
	}
	if got := seqs(t, readTopic(t, addrs, "t", false)); fmt.Sprint(got) != "[1 2 3]" {
		t.Fatalf("read_uncommitted got %v, want each of 1..3 once", got)
	}
	if n := len(readTopic(t, addrs, topic, true)); n != 1 {
		t.Fatalf("%d markers on %s, want 1", n, topic)
	}
	cl := producer(t, addrs)
	adm := kadm.NewClient(cl)
	tds, err := adm.ListTopics(ctxT(t), outbox.DefaultMarkerTopic("ownnames"))
	if err != nil {
		t.Fatal(err)
	}
	if td, ok := tds[outbox.DefaultMarkerTopic("ownnames")]; ok && td.Err == nil {
		t.Fatalf("the default marker topic %s was created", outbox.DefaultMarkerTopic("ownnames"))
	}
	txns, err := adm.ListTransactions(ctxT(t), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A real cluster keeps the ids of earlier tests: look for these two.
	seen := map[string]bool{}
	for _, tx := range txns.Sorted() {
		seen[tx.TxnID] = true
	}
	if !seen[id] || seen[outbox.DefaultTransactionalID("ownnames")] {
		t.Fatalf("transactional ids at the broker %v: want %s and not %s", txns.TransactionalIDs(), id, outbox.DefaultTransactionalID("ownnames"))
	}
}

func TestNewTransactionalRelayValidatesNames(t *testing.T) {
	db := dbtest.SQLite(t, dbtest.Runtime)
	for _, o := range []outbox.Opt{
		outbox.TransactionalID(""),
		outbox.MarkerTopic(""),
		outbox.MarkerTopic(".."),
		outbox.MarkerTopic("a/b"),
		outbox.MarkerTopic(strings.Repeat("x", 250)),
	} {
		if _, err := outbox.NewTransactionalRelay(db, "pay", nil, o); err == nil {
			t.Errorf("option accepted")
		} else {
			t.Log(err)
		}
	}
	if _, err := outbox.NewTransactionalRelay(db, "pay", nil, outbox.MarkerTopic(strings.Repeat("x", 249))); err != nil {
		t.Errorf("a 249-character topic name refused: %v", err)
	}
}

// TestTxnRelayMarksWhileTheNextTransactionCommits: a transaction's rows are
// marked sent on a goroutine of their own while the next transaction reads,
// produces and commits (the marking of the first batch is held here until
// the second has committed, which a relay marking before its next step
// never reaches), and the second transaction's marker names the first's
// rows too: the relay then "crashes" with neither batch marked (the held
// UPDATE fails), and the next relay marks all ten rows from that one marker
// and publishes nothing twice, not even for read_uncommitted readers.
func TestTxnRelayMarksWhileTheNextTransactionCommits(t *testing.T) {
	dbtest.Each(t, dbtest.Runtime, func(t *testing.T, db *sqldb.DB) {
		addrs := cluster(t)
		enqueue(t, db, "t", 3, upTo(10)...)
		crash := errors.New("simulated crash")
		release := make(chan struct{})
		first := txnRelay(t, db, addrs, "pipe", outbox.MaxBatch(5))
		var mu sync.Mutex
		var marks, commits [][]int64
		first.SetBeforeMark(func(ids []int64) error {
			mu.Lock()
			marks = append(marks, ids)
			mu.Unlock()
			<-release
			return crash // the UPDATE never runs: as if the process died first
		})
		second := make(chan struct{})
		first.SetAfterCommit(func(ids []int64) error {
			mu.Lock()
			commits = append(commits, ids)
			n := len(commits)
			mu.Unlock()
			if n == 2 {
				close(second)
				return crash
			}
			return nil
		})
		ctx := ctxT(t)
		done := make(chan error, 1)
		go func() { done <- first.Run(ctx) }()
		select {
		case <-second:
			close(release)
		case <-ctx.Done():
			close(release)
			t.Fatal("the second transaction did not commit while the first's marking was held")
		}
		err := <-done
		if !errors.Is(err, crash) {
			t.Fatalf("Run: %v, want the simulated crash", err)
		}
		mu.Lock()
		if fmt.Sprint(commits) != "[[1 2 3 4 5] [6 7 8 9 10]]" || fmt.Sprint(marks) != "[[1 2 3 4 5]]" {
			t.Fatalf("commits %v, markings started %v; want the batches 1-5 and 6-10 committed and only the first being marked", commits, marks)
		}
		mu.Unlock()
		if n := pending(t, db); n != 10 {
			t.Fatalf("%d rows pending after the crash, want all 10 unmarked", n)
		}

		next := txnRelay(t, db, addrs, "pipe")
		stop := run(t, next)
		waitFor(t, "rows marked", func() bool { return pending(t, db) == 0 })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if st := next.Stats(); st.Recovered != 10 || st.Published != 0 || st.MarkerMismatches != 0 {
			t.Fatalf("second relay stats %+v, want all 10 rows recovered from the last marker", st)
		}
		if got := seqs(t, readTopic(t, addrs, "t", false)); fmt.Sprint(got) != fmt.Sprint(upTo(10)) {
			t.Fatalf("read_uncommitted got %v, want each of 1..10 once (nothing re-published)", got)
		}
	})
}

// TestTxnRelayHoldsItsConnections (PostgreSQL): the relay's session reads and
// marks rows on connections it holds, so it publishes while every other
// connection of the pool is taken (by consumer batches and checkout, in the
// system). Here the pool has 3 connections: once the relay holds its 2, the
// test holds the third in an open transaction, and rows enqueued just before
// are published and marked all the same. A relay on the pool would leave
// the test all 3 to hold, and wait for a connection until they were freed.
func TestTxnRelayHoldsItsConnections(t *testing.T) {
	db := dbtest.Postgres(t, dbtest.Runtime)
	db.SetMaxOpenConns(3)
	addrs := cluster(t)
	enqueue(t, db, "t", 2, 1)
	relay := txnRelay(t, db, addrs, "held", outbox.PollInterval(time.Hour))
	stop := run(t, relay)
	waitFor(t, "row 1 published and marked", func() bool { return relay.Stats().Published == 1 })
	enqueue(t, db, "t", 2, 2, 3, 4)
	ctx := ctxT(t)
	var held []*sql.Tx // every connection the relay does not hold
	defer func() {
		for _, tx := range held {
			_ = tx.Rollback()
		}
	}()
	for db.Stats().InUse < 3 {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, tx)
	}
	if len(held) != 1 {
		t.Fatalf("the test holds %d connections of 3, want 1 (the relay's session 2)", len(held))
	}
	relay.Notify()
	waitFor(t, "rows 2-4 published and marked with the pool exhausted", func() bool { return relay.Stats().Published == 4 })
	for _, tx := range held {
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
	}
	held = nil
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := pending(t, db); n != 0 {
		t.Fatalf("%d rows pending", n)
	}
	if got := seqs(t, readTopic(t, addrs, "t", true)); fmt.Sprint(got) != "[1 2 3 4]" {
		t.Fatalf("read_committed got %v", got)
	}
}

// roleCounter is a franz-go hook counting one relay client's requests by
// key, for TestTxnRelayClientOpts.
type roleCounter struct {
	mu     *sync.Mutex
	counts map[string]int // role + " " + request key name
	role   string
}

func (c roleCounter) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if e2e.WriteErr == nil {
		c.mu.Lock()
		c.counts[fmt.Sprintf("%s %d", c.role, key)]++
		c.mu.Unlock()
	}
}

// TestTxnRelayClientOpts: WithClientOpts's options reach each client the
// relay creates, per role: the session's transactional producer sends the
// transactions (Produce, EndTxn) and the read-back reader the fetches, each
// with its own hook instance.
func TestTxnRelayClientOpts(t *testing.T) {
	dbtest.Each(t, dbtest.Runtime, func(t *testing.T, db *sqldb.DB) {
		addrs := cluster(t)
		enqueue(t, db, "t", 2, upTo(5)...)
		var mu sync.Mutex
		counts := map[string]int{}
		relay := txnRelay(t, db, addrs, "roles", outbox.ClientOpts(func(role string) []kgo.Opt {
			return []kgo.Opt{kgo.ClientID("relay-" + role), kgo.WithHooks(roleCounter{mu: &mu, counts: counts, role: role})}
		}))
		stop := run(t, relay)
		waitFor(t, "all rows marked sent", func() bool { return pending(t, db) == 0 })
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, want := range []struct {
			role string
			key  int16
		}{{outbox.ClientProducer, 0 /* Produce */}, {outbox.ClientProducer, 26 /* EndTxn */}, {outbox.ClientConfirm, 1 /* Fetch */}} {
			if counts[fmt.Sprintf("%s %d", want.role, want.key)] == 0 {
				t.Errorf("no request of key %d from the %s client; counts %v", want.key, want.role, counts)
			}
		}
		if n := counts[fmt.Sprintf("%s %d", outbox.ClientConfirm, 26)]; n != 0 {
			t.Errorf("the confirm client sent %d EndTxn: options of one role reached another", n)
		}
	})
}

// TestTxnRelayRetryBackoff: the transactional relay's client retries after
// txnretry's backoff (20 ms first, not franz-go's 250 ms) and refreshes its
// metadata up to every 100 ms (not 5 s), so that a transaction's first
// produce refused with CONCURRENT_TRANSACTIONS while the previous one's
// markers are written waits neither a quarter of a second or more nor for
// the next metadata refresh; a RetryBackoffFn in the relay's client options
// replaces the backoff.
func TestTxnRelayRetryBackoff(t *testing.T) {
	db := dbtest.SQLite(t, dbtest.Runtime)
	for _, c := range []struct {
		name  string
		opts  []kgo.Opt
		first time.Duration
	}{
		{"default", nil, 20 * time.Millisecond},
		{"client options", []kgo.Opt{kgo.RetryBackoffFn(func(int) time.Duration { return 7 * time.Second })}, 7 * time.Second},
	} {
		r, err := outbox.NewTransactionalRelay(db, "backoff", append([]kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, c.opts...))
		if err != nil {
			t.Fatal(err)
		}
		cl, err := kgo.NewClient(r.TxnClientOpts()...)
		if err != nil {
			t.Fatal(err)
		}
		fn, _ := cl.OptValue(kgo.RetryBackoffFn).(func(int) time.Duration)
		minAge, _ := cl.OptValue(kgo.MetadataMinAge).(time.Duration)
		cl.Close()
		if minAge != 100*time.Millisecond {
			t.Errorf("%s: MetadataMinAge %v, want 100ms (a produce refused with CONCURRENT_TRANSACTIONS waits for the next metadata refresh)", c.name, minAge)
		}
		if fn == nil {
			t.Fatalf("%s: no RetryBackoffFn", c.name)
		}
		if d := fn(1); d > c.first || d < c.first*4/5 {
			t.Errorf("%s: first retry after %v, want %v less at most a fifth", c.name, d, c.first)
		}
	}
}
