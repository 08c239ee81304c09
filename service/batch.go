package service

import (
	"context"
	"database/sql"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/inbox"
	"github.com/ordercast/ordercast/store"
)

// Event is one record of a batch, decoded and ready to apply: the event's
// stable id, the record it came in, and its effect.
type Event struct {
	ID     string
	Record *kgo.Record
	Apply  func(ctx context.Context, tx *sql.Tx) error
}

// ProcessBatch applies events in one database transaction (db.InTx), in
// slice order, each through the inbox with its own row (inbox.ProcessTx,
// with the digest of the record's value): a duplicate (an event the group
// already applied, or one earlier in the batch) is skipped, counted in m
// and logged at debug level as Process does, and the others are applied.
// It returns how many were applied, and commits only if every event's
// effect returned nil: any error (an effect's, a *inbox.ConflictError, a
// database error) rolls the whole batch back and is returned, so nothing
// of the batch is kept and the runtime handles its records again one at a
// time (processor.WithBatchHandler), where the failing one alone is retried
// or dead-lettered. A retryable database error re-runs the whole
// transaction (InTx), so the effects must do database work only. Safe for
// concurrent use.
func ProcessBatch(ctx context.Context, db *store.DB, m *Metrics, log *slog.Logger, group string, events []Event) (applied int, err error) {
	var dups []int
	err = db.InTx(ctx, func(tx *sql.Tx) error {
		applied, dups = 0, dups[:0]
		for i, ev := range events {
			meta := Meta(ev.Record)
			meta.Digest = inbox.Digest(ev.Record.Value)
			ok, err := inbox.ProcessTx(ctx, tx, db, group, ev.ID, meta, ev.Apply)
			if err != nil {
				return err
			}
			if ok {
				applied++
			} else {
				dups = append(dups, i)
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for _, i := range dups {
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
