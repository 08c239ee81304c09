package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/ordercast/ordercast/inbox"
	"github.com/ordercast/ordercast/internal/testkit/dbtest"
	"github.com/ordercast/ordercast/sqldb"
)

// Prune deletes exactly the rows processed before the cutoff, of every
// group, over several batches (more rows than PruneBatch), and keeps the
// newer ones; a pruned event is no longer known, so it applies again.
func TestPrune(t *testing.T) {
	dbtest.Each(t, dbtest.Runtime, func(t *testing.T, db *sqldb.DB) {
		ctx := ctxT(t)
		now := time.Now()
		cutoff := now.Add(-24 * time.Hour)
		old := inbox.PruneBatch*2 + 500
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			ins := db.Rebind(`INSERT INTO inbox (consumer_group, event_id, topic, "partition", "offset", processed_at) VALUES (?, ?, 't', 0, ?, ?)`)
			for i := range old {
				group := []string{"billing", "shipping"}[i%2]
				if _, err := tx.ExecContext(ctx, ins, group, fmt.Sprint("old-", i), i, cutoff.Add(-time.Duration(i+1)*time.Millisecond).UnixMilli()); err != nil {
					return err
				}
			}
			// At the cutoff itself and after it: kept.
			for i, at := range []time.Time{cutoff, now} {
				if _, err := tx.ExecContext(ctx, ins, "billing", fmt.Sprint("new-", i), i, at.UnixMilli()); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		in, err := inbox.New(db, "")
		if err != nil {
			t.Fatal(err)
		}
		n, err := in.Prune(ctx, cutoff)
		if err != nil || n != int64(old) {
			t.Fatalf("Prune: %d, %v; want %d", n, err, old)
		}
		var left int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM inbox`).Scan(&left); err != nil || left != 2 {
			t.Fatalf("%d rows left (%v), want the 2 at or after the cutoff", left, err)
		}
		if !seen(t, db, "billing", "new-0") || !seen(t, db, "billing", "new-1") || seen(t, db, "billing", "old-0") {
			t.Fatal("Prune deleted the wrong rows")
		}
		if n, err := inbox.Prune(ctx, db, cutoff); err != nil || n != 0 {
			t.Fatalf("a second Prune: %d, %v; want 0", n, err)
		}
		applied, err := in.Process(ctx, "billing", "old-0", meta, func(ctx context.Context, tx *sql.Tx) error { return nil })
		if err != nil || !applied {
			t.Fatalf("a pruned event re-delivered: applied %v, %v; want applied again", applied, err)
		}
	})
}
