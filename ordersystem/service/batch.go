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
// stable id, the record it came in, and its effect.
type Event struct {
	ID     string
	Record *kgo.Record
	Apply  func(ctx context.Context, tx *sql.Tx) error
}

// ProcessBatch applies events in one database transaction (db.InTx), each
// through the inbox with its own row: first the inbox rows of all of them
// (inbox.ClaimTx, multi-row INSERTs, with the digest of each record's
// value), then the effects of the claimed ones: applyAll(ctx, tx, claimed)
// when applyAll is not nil (claimed[i] reports whether events[i] is to be
// applied: a service writes the effects of several events in a few
// multi-row statements), else each claimed event's Apply, in slice order. A
// duplicate (an event the group already applied, or one earlier in the
// batch) is not applied, and is counted in m and logged at debug level as
// Process does. It returns how many were applied, and commits only if every
// effect returned nil: any error (an effect's, a *inbox.ConflictError, a
// database error) rolls the whole batch back and is returned, so nothing of
// the batch is kept and the runtime handles its records again one at a time
// (processor.WithBatchHandler), where the failing one alone is retried or
// dead-lettered. A retryable database error re-runs the whole transaction
// (InTx), so the effects must do database work only. Safe for concurrent
// use.
func ProcessBatch(ctx context.Context, db *store.DB, m *Metrics, log *slog.Logger, group string, events []Event,
	applyAll func(ctx context.Context, tx *sql.Tx, claimed []bool) error) (applied int, err error) {
	claims := make([]inbox.Claim, len(events))
	for i, ev := range events {
		meta := Meta(ev.Record)
		meta.Digest = inbox.Digest(ev.Record.Value)
		claims[i] = inbox.Claim{EventID: ev.ID, Meta: meta}
	}
	var claimed []bool
	err = db.InTx(ctx, func(tx *sql.Tx) error {
		var err error
		if claimed, err = inbox.ClaimTx(ctx, tx, db, group, claims); err != nil {
			return err
		}
		if applyAll != nil {
			return applyAll(ctx, tx, claimed)
		}
		for i, ev := range events {
			if claimed[i] {
				if err := ev.Apply(ctx, tx); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for i, ok := range claimed {
		if ok {
			applied++
			continue
		}
		if m != nil {
			m.duplicates.WithLabelValues(group).Inc()
		}
		if log != nil {
			r := events[i].Record
			log.DebugContext(ctx, "inbox: duplicate event skipped", "group", group, "event_id", events[i].ID,
				"topic", r.Topic, "partition", r.Partition, "offset", r.Offset)
		}
	}
	return applied, nil
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
// (Process). A decode error is returned as is (a processor.Permanent error
// for a contract violation, so the runtime dead-letters the record); so is
// Process's. Safe for concurrent use if decode is.
func Handle(ctx context.Context, db *store.DB, m *Metrics, log *slog.Logger, group string, r *kgo.Record,
	decode func(ctx context.Context, r *kgo.Record) (Event, error)) error {
	ev, err := decode(ctx, r)
	if err != nil {
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
