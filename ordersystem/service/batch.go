package service

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/inbox"
	"github.com/ordercast/ordercast/ordersystem/store"
	"github.com/ordercast/ordercast/processor/middleware"
)

// Event is one record of a batch, decoded and ready to apply: the event's
// stable id, the record it came in, and its effect: Apply, through the
// inbox, or ApplyOnce, without it.
//
// ApplyOnce is for an effect that deduplicates itself: one row inserted
// with INSERT ... ON CONFLICT DO NOTHING on a natural key that names the
// effect (an order's status milestone (order_id, kind), the notification of
// an (order, kind)), so that it is applied at most once whatever the event
// id, and a redelivery finds its row. No inbox row is claimed for such an
// event: one row and one unique-index check per event instead of two.
// ApplyOnce reports whether its row was new (false: a duplicate, counted as
// the inbox's are). Such an event is not compared by digest: an event id
// re-sent with other content applies the other content's effect if that
// effect is new, and is a duplicate if it is not. Exactly one of Apply and
// ApplyOnce is set.
type Event struct {
	ID        string
	Record    *kgo.Record
	Apply     func(ctx context.Context, tx *sql.Tx) error
	ApplyOnce func(ctx context.Context, tx *sql.Tx) (applied bool, err error)
}

// ProcessBatch applies events in one database transaction (db.InTx): first
// the inbox rows of those applied through the inbox (Event.Apply;
// inbox.ClaimTx, multi-row INSERTs, with the digest of each record's
// value), then the effects of the claimed ones and of the
// self-deduplicating ones (Event.ApplyOnce), all written by
// applyAll(ctx, tx, claimed) in a few multi-row statements: claimed[i]
// reports whether events[i] is to be applied; it is true for every
// self-deduplicating event, and applyAll sets it to false for each of those
// whose row was there already (InsertReturning, Inserted.Take). A duplicate (an event the group already
// applied, or one earlier in the batch) is not applied, and is counted in m
// and logged at debug level as Process does. It returns how many were
// applied, and commits only if every effect returned nil: any error (an
// effect's, a *inbox.ConflictError, a database error) rolls the whole batch
// back and is returned, so nothing of the batch is kept and the runtime
// handles its records again one at a time (processor.WithBatchHandler),
// where the failing one alone is retried or dead-lettered. A retryable
// database error re-runs the whole transaction (InTx), so the effects must
// do database work only. Safe for concurrent use.
func ProcessBatch(ctx context.Context, db *store.DB, m *Metrics, log *slog.Logger, group string, events []Event,
	applyAll func(ctx context.Context, tx *sql.Tx, claimed []bool) error) (applied int, err error) {
	var claims []inbox.Claim
	var viaInbox []int // events[viaInbox[k]] is claims[k]'s
	for i, ev := range events {
		if ev.ApplyOnce != nil {
			continue
		}
		meta := Meta(ev.Record)
		meta.Digest = inbox.Digest(ev.Record.Value)
		claims = append(claims, inbox.Claim{EventID: ev.ID, Meta: meta})
		viaInbox = append(viaInbox, i)
	}
	var claimed []bool
	err = db.InTx(ctx, func(tx *sql.Tx) error {
		claimed = make([]bool, len(events))
		for i, ev := range events {
			claimed[i] = ev.ApplyOnce != nil
		}
		if len(claims) > 0 {
			got, err := inbox.ClaimTx(ctx, tx, db, group, claims)
			if err != nil {
				return err
			}
			for k, i := range viaInbox {
				claimed[i] = got[k]
			}
		}
		return applyAll(ctx, tx, claimed)
	})
	if err != nil {
		return 0, err
	}
	for i, ok := range claimed {
		if ok {
			applied++
			continue
		}
		duplicate(ctx, m, log, group, events[i].ID, events[i].Record)
	}
	return applied, nil
}

// duplicate counts in m (if not nil) and logs on log at debug level (if not
// nil) the event eventID of r, which group had applied already.
func duplicate(ctx context.Context, m *Metrics, log *slog.Logger, group, eventID string, r *kgo.Record) {
	if m != nil {
		m.duplicates.WithLabelValues(group).Inc()
	}
	if log != nil {
		log.DebugContext(ctx, "duplicate event skipped", "group", group, "event_id", eventID,
			"topic", r.Topic, "partition", r.Partition, "offset", r.Offset)
	}
}

// InsertOnce runs query, an INSERT of one row ending in ON CONFLICT DO
// NOTHING, through tx, and reports whether the row was inserted (false: its
// key was there already). It is the one-record form of an ApplyOnce effect.
// The statement's error is returned as it is.
func InsertOnce(ctx context.Context, tx *sql.Tx, query string, args ...any) (inserted bool, err error) {
	res, err := tx.ExecContext(ctx, query, args...)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// Inserted is the set of natural keys an INSERT ... ON CONFLICT DO NOTHING
// RETURNING wrote (InsertReturning): what a batch of self-deduplicating
// events (Event.ApplyOnce) applied.
type Inserted map[string]bool

// keySep joins the columns of a natural key in Inserted (it occurs in no
// id, kind or text the services key on).
const keySep = "\x1f"

// Take reports whether the row of the natural key parts was inserted, and
// forgets it, so that a later event of the same key in the batch counts as
// a duplicate.
func (in Inserted) Take(parts ...string) bool {
	k := strings.Join(parts, keySep)
	ok := in[k]
	delete(in, k)
	return ok
}

// InsertReturning writes args as rows of cols values through tx in
// multi-row statements (sqldb.DB.InsertRowsReturning), tail being
// ` ON CONFLICT (...) DO NOTHING RETURNING k1, ..., kN` with keyCols text
// key columns, and returns the keys of the rows inserted (Inserted.Take).
// The first failing statement's error is returned.
func InsertReturning(ctx context.Context, tx *sql.Tx, db *store.DB, head, tail string, cols int, args []any, keyCols int) (Inserted, error) {
	in := Inserted{}
	parts := make([]string, keyCols)
	ptrs := make([]any, keyCols)
	for i := range parts {
		ptrs[i] = &parts[i]
	}
	err := db.InsertRowsReturning(ctx, tx, head, tail, cols, args, func(rows *sql.Rows) error {
		if err := rows.Scan(ptrs...); err != nil {
			return err
		}
		in[strings.Join(parts, keySep)] = true
		return nil
	})
	return in, err
}

// paramsPerInsert bounds the parameters of one InsertRows statement, below
// SQLite's 32,766 and PostgreSQL's 65,535.
const paramsPerInsert = 30000

// InsertRows writes rows through tx in multi-row statements: head is the
// statement up to VALUES ("INSERT INTO t (a, b) VALUES"), tail what follows
// the rows (" ON CONFLICT (a) DO NOTHING", or ""), every row has the same
// number of values. One round trip per chunk of rows (up to 30,000
// parameters) instead of one per row. Nothing is written for no rows. The
// error of a failed statement is returned wrapped with head.
func InsertRows(ctx context.Context, tx *sql.Tx, db *store.DB, head, tail string, rows [][]any) error {
	if len(rows) == 0 {
		return nil
	}
	cols := len(rows[0])
	per := max(1, paramsPerInsert/max(1, cols))
	row := "(?" + strings.Repeat(", ?", cols-1) + ")"
	for from := 0; from < len(rows); from += per {
		chunk := rows[from:min(from+per, len(rows))]
		var q strings.Builder
		q.WriteString(head)
		q.WriteByte(' ')
		args := make([]any, 0, cols*len(chunk))
		for i, r := range chunk {
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString(row)
			args = append(args, r...)
		}
		q.WriteString(tail)
		if _, err := tx.ExecContext(ctx, db.Rebind(q.String()), args...); err != nil {
			return fmt.Errorf("%s (%d rows): %w", head, len(chunk), err)
		}
	}
	return nil
}

// Handle is the one-record handler of a service whose records decode to an
// Event: it decodes r with decode and applies the event through the inbox
// (Process), or, if it deduplicates itself, without (ProcessOnce). A
// decode error is returned as is (a processor.Permanent error for a
// contract violation, so the runtime dead-letters the record); so is
// Process's. Safe for concurrent use if decode is.
func Handle(ctx context.Context, db *store.DB, m *Metrics, log *slog.Logger, group string, r *kgo.Record,
	decode func(ctx context.Context, r *kgo.Record) (Event, error)) error {
	ev, err := decode(ctx, r)
	if err != nil {
		return err
	}
	if ev.ApplyOnce != nil {
		_, err = ProcessOnce(ctx, db, m, log, group, ev.ID, r, ev.ApplyOnce)
		return err
	}
	_, err = Process(ctx, db, m, log, group, ev.ID, r, ev.Apply)
	return err
}

// HandleBatch is the batch handler of a service whose records decode to an
// Event and an effect E of it: it decodes every record of recs with decode
// (middleware.DecodeBatch: the first error fails the whole batch, as a
// permanent error naming the record, so the runtime handles the records
// again one at a time, where the one-record handler classifies it), then
// applies them in one transaction through ProcessBatch, writing the effects
// of the claimed ones with applyAll(ctx, tx, effects, claimed) (effects[i]
// and claimed[i] belong to recs[i]). It returns ProcessBatch's error. Safe
// for concurrent use if decode and applyAll are. The group needs its
// one-record handler (Handle, processor.WithHandler) besides: without one the
// runtime would retry a record alone through HandleBatch, where every
// decode error is permanent, a registry outage included.
func HandleBatch[E any](ctx context.Context, db *store.DB, m *Metrics, log *slog.Logger, group string, recs []*kgo.Record,
	decode func(ctx context.Context, r *kgo.Record) (Event, E, error),
	applyAll func(ctx context.Context, tx *sql.Tx, effects []E, claimed []bool) error) error {
	type decoded struct {
		ev  Event
		eff E
	}
	h := middleware.DecodeBatch(func(ctx context.Context, r *kgo.Record) (decoded, error) {
		ev, eff, err := decode(ctx, r)
		return decoded{ev, eff}, err
	}, func(ctx context.Context, _ []*kgo.Record, vs []decoded) error {
		events := make([]Event, len(vs))
		effects := make([]E, len(vs))
		for i, v := range vs {
			events[i], effects[i] = v.ev, v.eff
		}
		_, err := ProcessBatch(ctx, db, m, log, group, events,
			func(ctx context.Context, tx *sql.Tx, claimed []bool) error {
				return applyAll(ctx, tx, effects, claimed)
			})
		return err
	})
	return h(ctx, recs)
}
