package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/ordercast/ordercast/inbox"
	"github.com/ordercast/ordercast/internal/testkit/dbtest"
	"github.com/ordercast/ordercast/sqldb"
)

// Several events in one transaction, each with its inbox row: a duplicate
// (committed before, or earlier in the same transaction) is skipped without
// failing the others; a rolled-back transaction keeps neither the inbox rows
// nor the effects; a reused event id with other content is a
// *ConflictError.
func TestProcessTxBatch(t *testing.T) {
	dbtest.Each(t, dbtest.Runtime, func(t *testing.T, db *sqldb.DB) {
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

// ClaimTx claims several events in one statement: an event applied before,
// or claimed earlier in the same call, is not claimed again; the caller's
// effects of the claimed ones commit with the rows; a reused event id with
// other content is a *ConflictError; more events than one INSERT takes are
// all claimed.
func TestClaimTx(t *testing.T) {
	dbtest.Each(t, dbtest.Runtime, func(t *testing.T, db *sqldb.DB) {
		ctx := ctxT(t)
		c := newCounter(t, db)
		dig := inbox.Digest([]byte(`{"same":1}`))
		if applied, err := inbox.Process(ctx, db, "orders", "ev-0", inbox.Meta{Topic: "t", Digest: dig}, func(ctx context.Context, tx *sql.Tx) error { return c.apply(ctx, tx, "ev-0") }); err != nil || !applied {
			t.Fatalf("first Process: %v %v", applied, err)
		}
		ids := []string{"ev-1", "ev-0", "ev-2", "ev-1"}
		for i := range 1200 {
			ids = append(ids, fmt.Sprintf("many-%d", i))
		}
		var claimed []bool
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			claims := make([]inbox.Claim, len(ids))
			for i, id := range ids {
				claims[i] = inbox.Claim{EventID: id, Meta: inbox.Meta{Topic: "t", Partition: 1, Offset: int64(i), Digest: dig}}
			}
			var err error
			if claimed, err = inbox.ClaimTx(ctx, tx, db, "orders", claims); err != nil {
				return err
			}
			for i, ok := range claimed {
				if ok {
					if err := c.apply(ctx, tx, ids[i]); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if want := []bool{true, false, true, false}; claimed[0] != want[0] || claimed[1] != want[1] || claimed[2] != want[2] || claimed[3] != want[3] {
			t.Fatalf("claimed %v, want %v (ev-0 applied before, ev-1 twice)", claimed[:4], want)
		}
		for i, id := range ids[4:] {
			if !claimed[4+i] || c.get(t, id) != 1 {
				t.Fatalf("%s: claimed %v, effect %d; want claimed once", id, claimed[4+i], c.get(t, id))
			}
		}
		for _, k := range []string{"ev-0", "ev-1", "ev-2"} {
			if n := c.get(t, k); n != 1 {
				t.Fatalf("effect %s applied %d times, want 1", k, n)
			}
		}
		err = db.InTx(ctx, func(tx *sql.Tx) error {
			_, err := inbox.ClaimTx(ctx, tx, db, "orders", []inbox.Claim{
				{EventID: "ev-new", Meta: inbox.Meta{Topic: "t"}},
				{EventID: "ev-2", Meta: inbox.Meta{Topic: "t", Digest: inbox.Digest([]byte(`{"other":1}`))}},
			})
			return err
		})
		var ce *inbox.ConflictError
		if !errors.As(err, &ce) || ce.EventID != "ev-2" || ce.First.Offset != 2 {
			t.Fatalf("reused id: %v, want a *ConflictError for ev-2 first at offset 2", err)
		}
		if seen(t, db, "orders", "ev-new") {
			t.Fatal("the rolled-back claim of ev-new was kept")
		}
		// A claim without a digest stores none (NULL, not ''): a later claim of
		// that id with a digest is a duplicate, not a conflict. Of two claims
		// of one id in one call the first's row is kept.
		err = db.InTx(ctx, func(tx *sql.Tx) error {
			got, err := inbox.ClaimTx(ctx, tx, db, "orders", []inbox.Claim{
				{EventID: "ev-nodig", Meta: inbox.Meta{Topic: "t", Partition: 3, Offset: 30}},
				{EventID: "ev-twice", Meta: inbox.Meta{Topic: "t", Partition: 4, Offset: 40, Digest: dig}},
				{EventID: "ev-twice", Meta: inbox.Meta{Topic: "t", Partition: 5, Offset: 50, Digest: dig}},
			})
			if err == nil && (!got[0] || !got[1] || got[2]) {
				err = fmt.Errorf("claimed %v, want [true true false]", got)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		err = db.InTx(ctx, func(tx *sql.Tx) error {
			got, err := inbox.ClaimTx(ctx, tx, db, "orders", []inbox.Claim{{EventID: "ev-nodig", Meta: inbox.Meta{Topic: "t", Digest: dig}}})
			if err == nil && got[0] {
				err = errors.New("ev-nodig claimed twice")
			}
			return err
		})
		if err != nil {
			t.Fatalf("a digest after none: %v, want a duplicate", err)
		}
		err = db.InTx(ctx, func(tx *sql.Tx) error {
			_, err := inbox.ClaimTx(ctx, tx, db, "orders", []inbox.Claim{{EventID: "ev-twice", Meta: inbox.Meta{Topic: "t", Digest: inbox.Digest([]byte(`{"other":1}`))}}})
			return err
		})
		if !errors.As(err, &ce) || ce.First.Partition != 4 || ce.First.Offset != 40 || ce.First.Digest != dig {
			t.Fatalf("ev-twice with other content: %v (first %+v), want a *ConflictError naming partition 4 offset 40", err, ce)
		}
		err = db.InTx(ctx, func(tx *sql.Tx) error {
			_, err := inbox.ClaimTx(ctx, tx, db, "orders", []inbox.Claim{{EventID: ""}})
			return err
		})
		if err == nil {
			t.Fatal("an empty event id was accepted")
		}
	})
}
