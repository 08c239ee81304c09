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

// Metrics counts what the consumer services' inboxes absorbed. A nil
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
//	                                         skipped by the inbox
func NewMetrics(reg prometheus.Registerer) *Metrics {
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	m := &Metrics{duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ordercast_inbox_duplicates_total",
		Help: "Events a consumer group received again after their effect was applied; the inbox skipped them (each is a redelivery: a crash, a rebalance or a re-publication).",
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
		if m != nil {
			m.duplicates.WithLabelValues(group).Inc()
		}
		if log != nil {
			log.DebugContext(ctx, "inbox: duplicate event skipped", "group", group, "event_id", eventID,
				"topic", r.Topic, "partition", r.Partition, "offset", r.Offset)
		}
	}
	return applied, err
}
