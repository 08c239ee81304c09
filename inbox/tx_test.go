package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/ordercast/ordercast/inbox"
	"github.com/ordercast/ordercast/store"
	"github.com/ordercast/ordercast/store/storetest"
)

// Several events in one transaction, each with its inbox row: a duplicate
// (committed before, or earlier in the same transaction) is skipped without
// failing the others; a rolled-back transaction keeps neither the inbox rows
// nor the effects; a reused event id with other content is a
// *ConflictError.
func TestProcessTxBatch(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := ctxT(t)
		c := newCounter(t, db)
		if applied, err := inbox.Process(ctx, db, "orders", "ev-0", meta, func(ctx context.Context, tx *sql.Tx) error { return c.apply(ctx, tx, "ev-0") }); err != nil || !applied {
			t.Fatalf("first Process: %v %v", applied, err)
		}
		with := func(off int64) inbox.Meta {
			return inbox.Meta{Topic: "orderCreated", Partition: 1, Offset: off, Digest: inbox.Digest([]byte(`{"same":1}`))}
		}
		var got []bool
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			got = got[:0]
			for i, id := range []string{"ev-1", "ev-0", "ev-2", "ev-1"} {
				applied, err := inbox.ProcessTx(ctx, tx, db, "orders", id, with(int64(i)), func(ctx context.Context, tx *sql.Tx) error { return c.apply(ctx, tx, id) })
				if err != nil {
					return err
				}
				got = append(got, applied)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if want := []bool{true, false, true, false}; len(got) != 4 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] || got[3] != want[3] {
			t.Fatalf("applied %v, want %v (ev-0 committed before, ev-1 twice in the batch)", got, want)
		}
		for _, k := range []string{"ev-0", "ev-1", "ev-2"} {
			if n := c.get(t, k); n != 1 {
				t.Fatalf("effect %s applied %d times, want 1", k, n)
			}
		}
		// A failing event rolls the whole transaction back.
		boom := errors.New("boom")
		err = db.InTx(ctx, func(tx *sql.Tx) error {
			if _, err := inbox.ProcessTx(ctx, tx, db, "orders", "ev-3", with(5), func(ctx context.Context, tx *sql.Tx) error { return c.apply(ctx, tx, "ev-3") }); err != nil {
				return err
			}
			_, err := inbox.ProcessTx(ctx, tx, db, "orders", "ev-4", with(6), func(context.Context, *sql.Tx) error { return boom })
			return err
		})
		if !errors.Is(err, boom) {
			t.Fatalf("InTx: %v, want boom", err)
		}
		if seen(t, db, "orders", "ev-3") || c.get(t, "ev-3") != 0 {
			t.Fatal("a rolled-back batch kept an inbox row or an effect")
		}
		// Other content under an applied event id: a permanent conflict.
		err = db.InTx(ctx, func(tx *sql.Tx) error {
			_, err := inbox.ProcessTx(ctx, tx, db, "orders", "ev-1", inbox.Meta{Topic: "orderCreated", Digest: inbox.Digest([]byte(`{"other":1}`))},
				func(context.Context, *sql.Tx) error { t.Error("fn called for a conflicting event"); return nil })
			return err
		})
		var ce *inbox.ConflictError
		if !errors.As(err, &ce) || !ce.Permanent() || ce.First.Offset != 0 {
			t.Fatalf("reused id: %v, want a *ConflictError naming offset 0", err)
		}
		err = db.InTx(ctx, func(tx *sql.Tx) error {
			_, err := inbox.ProcessTx(ctx, tx, db, "orders", "", meta, func(context.Context, *sql.Tx) error { return nil })
			return err
		})
		if err == nil {
			t.Fatal("an empty event id was accepted")
		}
	})
}
