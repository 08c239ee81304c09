package checkout_test

import (
	"database/sql/driver"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ordercast/ordercast/ordersystem/store"
	"github.com/ordercast/ordercast/ordersystem/store/storetest"
)

// batchOf posts the requests of bodies and keys (pairs; key "" for none) at
// once, with the claim runners held until all of them are queued, so that
// their claims are written in one batch; it returns the answers in order.
func (e *testEnv) batchOf(t *testing.T, reqs [][2]string) []response {
	t.Helper()
	release := e.svc.HoldClaims()
	answers := make([]response, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Go(func() {
			if r[1] == "" {
				answers[i] = e.post(r[0])
			} else {
				answers[i] = e.post(r[0], "Idempotency-Key", r[1])
			}
		})
	}
	eventually(t, fmt.Sprintf("%d claims queued", len(reqs)), func() bool { return e.svc.QueuedClaims() == len(reqs) })
	release()
	wg.Wait()
	if got := e.svc.LargestClaimBatch(); got < len(reqs) {
		t.Fatalf("largest claim batch %d, want the %d queued claims in one", got, len(reqs))
	}
	return answers
}

// rowCount is the number of checkout_requests rows of key (0 or 1).
func (e *testEnv) rowCount(key string) int {
	e.t.Helper()
	var n int
	if err := e.db.QueryRowContext(testCtx(e.t), e.db.Rebind(`SELECT COUNT(*) FROM checkout_requests WHERE idempotency_key = ?`), key).Scan(&n); err != nil {
		e.t.Fatalf("count checkout requests %q: %v", key, err)
	}
	return n
}

const unknownCodeBody = `{"lines":[{"stockCode":"NOPE","quantity":1}]}`

// One batch of claims with new keys, a keyless request, a reused key (with
// another request: 422), an unissued "order:" key (400) and a new key whose
// request cannot be priced (422): the refusals are each claim's own and
// write nothing, the others are new orders, each its own, each published
// once; a retry replays each.
func TestClaimBatchMixedOutcomes(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) { testClaimBatchMixedOutcomes(t, db) })
}

func testClaimBatchMixedOutcomes(t *testing.T, db *store.DB) {
	e := newEnvOn(t, db)
	used := e.post(keyedBody, "Idempotency-Key", "used").accepted(t)
	const fresh = 6
	var reqs [][2]string
	for i := range fresh {
		reqs = append(reqs, [2]string{keyedBody, fmt.Sprintf("b%d", i)})
	}
	reqs = append(reqs,
		[2]string{`{"lines":[{"stockCode":"71053","quantity":1}]}`, "used"}, // 422 idempotency_key_reused
		[2]string{keyedBody, "order:ord_never_issued"},                      // 400 bad_idempotency_key
		[2]string{unknownCodeBody, "badcode"},                               // 422 unknown_stock_code
		[2]string{keyedBody, ""},                                            // keyless: a new order
	)
	answers := e.batchOf(t, reqs)

	ids := map[string]bool{used.OrderID: true}
	for i := range fresh {
		got := answers[i].accepted(t)
		if answers[i].header.Get("Idempotent-Replayed") != "" || ids[got.OrderID] {
			t.Fatalf("b%d: %+v (replayed %q): want a new order of its own", i, got, answers[i].header.Get("Idempotent-Replayed"))
		}
		ids[got.OrderID] = true
		if st, id := e.requestRow(fmt.Sprintf("b%d", i)); st != "published" || id != got.OrderID {
			t.Errorf("b%d row %s %s, want published %s", i, st, id, got.OrderID)
		}
	}
	for i, want := range []struct {
		status int
		code   string
	}{{422, "idempotency_key_reused"}, {400, "bad_idempotency_key"}, {422, "unknown_stock_code"}} {
		a := answers[fresh+i]
		if a.status != want.status || a.errorCode(t) != want.code {
			t.Errorf("request %d (key %q): %d %s, want %d %s", fresh+i, reqs[fresh+i][1], a.status, a.body, want.status, want.code)
		}
	}
	keyless := answers[fresh+3].accepted(t)
	if ids[keyless.OrderID] {
		t.Fatalf("keyless order %s is another request's", keyless.OrderID)
	}
	if n := e.rowCount("badcode") + e.rowCount("order:ord_never_issued"); n != 0 {
		t.Errorf("%d rows for refused requests, want none", n)
	}
	if st, id := e.requestRow("used"); st != "published" || id != used.OrderID {
		t.Errorf("row of the reused key %s %s, want its first order %s, published", st, id, used.OrderID)
	}
	if c := e.topicCount(); c != 1+fresh+1 {
		t.Errorf("%d records on the topic, want %d (one per order)", c, 1+fresh+1)
	}
	if n := e.accepted(); n != 1+fresh+1 {
		t.Errorf("Accepted = %d, want %d", n, 1+fresh+1)
	}
	// Retries: each key replays its own order, also in one batch.
	var retries [][2]string
	for i := range fresh {
		retries = append(retries, [2]string{keyedBody, fmt.Sprintf("b%d", i)})
	}
	retries = append(retries, [2]string{keyedBody, "order:" + keyless.OrderID})
	again := e.batchOf(t, retries)
	for i, a := range again {
		want := keyless.OrderID
		if i < fresh {
			want = answers[i].accepted(t).OrderID
		}
		if got := a.accepted(t); got.OrderID != want || a.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("retry %d: %+v replayed %q, want a replay of %s", i, got, a.header.Get("Idempotent-Replayed"), want)
		}
	}
	if c := e.topicCount(); c != 1+fresh+1 {
		t.Errorf("%d records on the topic after the retries, want still %d", c, 1+fresh+1)
	}
}

// poison makes every INSERT of checkout_requests key "poison" fail with an
// SQL error (a trigger), as a constraint or a broken row would.
func poison(t *testing.T, db *store.DB) {
	t.Helper()
	ctx := testCtx(t)
	stmts := []string{`CREATE TRIGGER poison BEFORE INSERT ON checkout_requests
		WHEN NEW.idempotency_key = 'poison' BEGIN SELECT RAISE(ABORT, 'poisoned key'); END`}
	if db.Dialect == store.Postgres {
		stmts = []string{`CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN IF NEW.idempotency_key = 'poison' THEN RAISE EXCEPTION 'poisoned key'; END IF; RETURN NEW; END $$`,
			`CREATE TRIGGER poison BEFORE INSERT ON checkout_requests FOR EACH ROW EXECUTE FUNCTION poison()`}
	}
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// An SQL error in a batch (one claim's INSERT fails) fails only that claim:
// the batch is rolled back and each claim written alone, so the others are
// accepted and the failing one is 503 database_unavailable with nothing
// recorded, as it was before batching.
func TestClaimBatchSQLErrorFailsOnlyItsClaim(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) { testClaimBatchSQLErrorFailsOnlyItsClaim(t, db) })
}

func testClaimBatchSQLErrorFailsOnlyItsClaim(t *testing.T, db *store.DB) {
	e := newEnvOn(t, db)
	poison(t, db)
	reqs := [][2]string{{keyedBody, "p0"}, {keyedBody, "p1"}, {keyedBody, "poison"}, {keyedBody, "p2"}, {keyedBody, "p3"}}
	answers := e.batchOf(t, reqs)
	for i, a := range answers {
		key := reqs[i][1]
		if key == "poison" {
			if a.status != http.StatusServiceUnavailable || a.errorCode(t) != "database_unavailable" {
				t.Errorf("poisoned claim: %d %s, want 503 database_unavailable", a.status, a.body)
			}
			continue
		}
		got := a.accepted(t)
		if st, id := e.requestRow(key); st != "published" || id != got.OrderID {
			t.Errorf("%s row %s %s, want published %s", key, st, id, got.OrderID)
		}
	}
	if n := e.rowCount("poison"); n != 0 {
		t.Errorf("poisoned key has %d rows, want none (nothing recorded)", n)
	}
	if c := e.topicCount(); c != 4 {
		t.Errorf("%d records on the topic, want 4", c)
	}
}

// A connection lost after a batch's writes applied (in COMMIT, or in an
// autocommit statement's) leaves their outcome unknown: the batch is
// written again, each claim finds the row its first attempt inserted, with
// its own new ids, and is still the new order (202, not a replay, one
// record each); a mark lost the same way is written again and the rows are
// published.
func TestBatchLostInCommitIsWrittenAgain(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) { testBatchLostInCommitIsWrittenAgain(t, db) })
}

func testBatchLostInCommitIsWrittenAgain(t *testing.T, db *store.DB) {
	e := newEnvOn(t, db)
	var writes, lost atomic.Int64
	e.svc.SetAfterWrite(func() error {
		// The first write is the claims' batch, the third the first mark's
		// (the second is the claims' batch again).
		if n := writes.Add(1); n == 1 || n == 3 {
			lost.Add(1)
			return fmt.Errorf("read: %w", driver.ErrBadConn)
		}
		return nil
	})
	reqs := [][2]string{{keyedBody, "l0"}, {keyedBody, "l1"}, {keyedBody, ""}, {keyedBody, "l3"}}
	answers := e.batchOf(t, reqs)
	ids := map[string]bool{}
	for i, a := range answers {
		got := a.accepted(t)
		if a.header.Get("Idempotent-Replayed") != "" || ids[got.OrderID] {
			t.Fatalf("request %d: %+v replayed %q: want a new order of its own", i, got, a.header.Get("Idempotent-Replayed"))
		}
		ids[got.OrderID] = true
	}
	if lost.Load() != 2 {
		t.Fatalf("%d writes lost, want 2 (the claims' and a mark's)", lost.Load())
	}
	if n := e.accepted(); n != len(reqs) {
		t.Errorf("Accepted = %d, want %d (every row published)", n, len(reqs))
	}
	if c := e.topicCount(); c != int64(len(reqs)) {
		t.Errorf("%d records on the topic, want %d (each order published once)", c, len(reqs))
	}
	if got := e.metric("ordercast_checkout_republished_total"); got != 0 {
		t.Errorf("republished_total = %v, want 0 (the claims found their own rows)", got)
	}
}

// Two checkout instances: another instance inserts (and publishes) one of
// a batch's keys just before the batch's statement (on PostgreSQL one
// statement reads the keys and inserts the new ones). The batch replays the
// other instance's order for that key; the batch's other keys are new
// orders. PostgreSQL only: on SQLite a batch holds the write lock from its
// SELECT to its COMMIT (BEGIN IMMEDIATE), so no other writer can insert in
// between (and the instances of one process share its write queue).
func TestClaimBatchKeyInsertedByAnotherInstance(t *testing.T) {
	db := storetest.Postgres(t)
	e := newEnvOn(t, db)
	other := e.instance()
	var once sync.Once
	var theirs response
	e.svc.SetBeforeInsert(func() {
		once.Do(func() { theirs = other.post(keyedBody, "Idempotency-Key", "x2") })
	})
	answers := e.batchOf(t, [][2]string{{keyedBody, "x1"}, {keyedBody, "x2"}, {keyedBody, "x3"}})
	won := theirs.accepted(t)
	if got := answers[1].accepted(t); got != won || answers[1].header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("x2 in the batch: %+v replayed %q, want a replay of the other instance's %+v", got, answers[1].header.Get("Idempotent-Replayed"), won)
	}
	for _, i := range []int{0, 2} {
		if got := answers[i].accepted(t); got.OrderID == won.OrderID || answers[i].header.Get("Idempotent-Replayed") != "" {
			t.Errorf("answer %d: %+v, want a new order", i, got)
		}
	}
	if c := e.topicCount(); c != 3 {
		t.Errorf("%d records on the topic, want 3", c)
	}
}

// Another writer's transaction inserts one of a batch's keys and has not
// committed when the batch's statement reads the keys: the batch's insert of
// that key waits on the key's unique index entry, and once the other
// transaction commits it skips the key (ON CONFLICT DO NOTHING); the batch
// reads the key's row again and follows it (here a different request's row:
// 422), and its other keys are new orders. PostgreSQL only (SQLite has one
// writer).
func TestClaimBatchKeyCommittedDuringTheBatch(t *testing.T) {
	db := storetest.Postgres(t)
	e := newEnvOn(t, db)
	ctx := testCtx(t)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO checkout_requests (idempotency_key, request_hash, order_id, event_id, status, created_at)
		VALUES ('x2', 'another request', 'ord_theirs', 'evt_theirs', 'pending', 0)`); err != nil {
		t.Fatal(err)
	}
	done := make(chan []response, 1)
	go func() { done <- e.batchOf(t, [][2]string{{keyedBody, "x1"}, {keyedBody, "x2"}, {keyedBody, "x3"}}) }()
	eventually(t, "the batch's statement waiting for the other transaction's key", func() bool {
		var n int
		err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%INSERT INTO checkout_requests%'`).Scan(&n)
		return err == nil && n > 0
	})
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	answers := <-done
	if answers[1].status != http.StatusUnprocessableEntity {
		t.Errorf("x2: status %d %s, want 422 (the other transaction's row, another request)", answers[1].status, answers[1].body)
	}
	for _, i := range []int{0, 2} {
		if got := answers[i].accepted(t); got.OrderID == "" || answers[i].header.Get("Idempotent-Replayed") != "" {
			t.Errorf("answer %d: %+v, want a new order", i, got)
		}
	}
	if c := e.topicCount(); c != 2 {
		t.Errorf("%d records on the topic, want 2", c)
	}
}
