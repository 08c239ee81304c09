package service

import (
	"context"
	"database/sql"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/inbox"
	"github.com/ordercast/ordercast/ordersystem/store"
)

// Metrics counts the redeliveries the consumer services absorbed. A nil
// *Metrics counts nothing. Safe for concurrent use.
type Metrics struct {
	duplicates *prometheus.CounterVec
}

// NewMetrics creates the services' metrics and registers them with reg
// (prometheus.DefaultRegisterer when nil); it panics if they are registered
// there already.
//
//	ordercast_inbox_duplicates_total{group}  events delivered again after
//	                                         their effect was applied and
//	                                         skipped by the inbox or by the
//	                                         effect's natural key
//	                                         (Event.ApplyOnce)
func NewMetrics(reg prometheus.Registerer) *Metrics {
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	m := &Metrics{duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ordercast_inbox_duplicates_total",
		Help: "Events a consumer group received again after their effect was applied, skipped by the inbox or by the effect's natural key (each is a redelivery: a crash, a rebalance or a re-publication).",
	}, []string{"group"})}
	reg.MustRegister(m.duplicates)
	return m
}

// Process is inbox.Process for the event eventID of record r, with the
// digest of r's value (inbox.Digest), counting a skipped duplicate in m (if
// not nil) and logging it at debug level on log (if not nil). An event id
// the group already applied with other content returns the inbox's
// *ConflictError, which is permanent: the record is dead-lettered.
func Process(ctx context.Context, db *store.DB, m *Metrics, log *slog.Logger, group, eventID string, r *kgo.Record, fn func(ctx context.Context, tx *sql.Tx) error) (applied bool, err error) {
	meta := Meta(r)
	meta.Digest = inbox.Digest(r.Value)
	applied, err = inbox.Process(ctx, db, group, eventID, meta, fn)
	if err == nil && !applied {
		duplicate(ctx, m, log, group, eventID, r)
	}
	return applied, err
}

// ProcessOnce applies the self-deduplicating effect fn of the event eventID
// of record r (Event.ApplyOnce) in one database transaction (db.InTx),
// without an inbox row, counting it in m (if not nil) and logging it at
// debug level on log (if not nil) when fn reports its row was there already.
// It returns fn's report and its error, or the transaction's. Safe for
// concurrent use if fn is.
func ProcessOnce(ctx context.Context, db *store.DB, m *Metrics, log *slog.Logger, group, eventID string, r *kgo.Record, fn func(ctx context.Context, tx *sql.Tx) (bool, error)) (applied bool, err error) {
	err = db.InTx(ctx, func(tx *sql.Tx) error {
		var err error
		applied, err = fn(ctx, tx)
		return err
	})
	if err == nil && !applied {
		duplicate(ctx, m, log, group, eventID, r)
	}
	return applied, err
}
