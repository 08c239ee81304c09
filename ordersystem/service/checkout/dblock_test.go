package checkout_test

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ordercast/ordercast/ordersystem/service/checkout"
	"github.com/ordercast/ordercast/ordersystem/store/storetest"
)

// Another process holds the SQLite database's write lock:
// POST /orders answers 503 database_unavailable after DBTimeout instead of
// waiting for the lock, nothing is recorded nor published, Ready says why,
// and once the lock is released both recover.
func TestDatabaseLockedIsBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locked.db")
	e := newEnvOn(t, storetest.SQLitePath(t, path), withDBTimeout(300*time.Millisecond))
	other := storetest.SQLitePath(t, path) // "another process": its own pool
	ctx := testCtx(t)
	if err := e.svc.Ready(ctx); err != nil {
		t.Fatalf("Ready before the lock: %v", err)
	}
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	locked := true
	unlock := func() {
		if locked {
			locked = false
			if _, err := conn.ExecContext(ctx, `ROLLBACK`); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer unlock()

	start := time.Now()
	r := e.post(`{"lines":[{"stockCode":"85123A","quantity":1}]}`)
	took := time.Since(start)
	if r.status != http.StatusServiceUnavailable || r.errorCode(t) != checkout.CodeDatabaseUnavailable {
		t.Fatalf("POST with the database locked: %d %s, want 503 database_unavailable", r.status, r.body)
	}
	if took > 3*time.Second {
		t.Errorf("503 after %v, want about the 300ms DBTimeout", took)
	}
	if r.header.Get("Retry-After") == "" {
		t.Errorf("503 without Retry-After")
	}
	err = e.svc.Ready(ctx)
	if err == nil || !strings.Contains(err.Error(), "database") {
		t.Fatalf("Ready with the database locked: %v, want an error naming the database", err)
	}
	unlock()
	var n int
	if err := e.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM checkout_requests`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("checkout_requests rows after the 503: %d (%v), want 0", n, err)
	}
	if n := e.topicCount(); n != 0 {
		t.Errorf("%d records on the topic after a 503 database_unavailable, want 0", n)
	}
	// Ready checks the database again by itself (no request needed).
	eventually(t, "Ready to recover once the lock is released", func() bool { return e.svc.Ready(ctx) == nil })
	e.post(`{"lines":[{"stockCode":"85123A","quantity":1}]}`).accepted(t)
}
