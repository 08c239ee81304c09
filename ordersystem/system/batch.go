package system

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/processor"
)

// batchOpts returns the processor options that make group apply up to max
// records per database transaction with h (Config.Consumers.MaxBatch: 0 the default,
// negative none), wrapped with the after-effect crash point: it fires after
// the batch's transaction committed, before the runtime marks its records
// done.
func (f *faults) batchOpts(group string, h processor.BatchHandler, max int) []processor.Opt {
	if h == nil || max < 0 {
		return nil
	}
	if max == 0 {
		max = processor.DefaultMaxBatch
	}
	if f.armed(FaultAfterEffect) {
		inner := h
		h = func(ctx context.Context, recs []*kgo.Record) error {
			err := inner(ctx, recs)
			if err == nil {
				r := recs[len(recs)-1]
				f.maybeCrash(FaultAfterEffect, fmt.Sprintf("group=%s batch=%d last: topic=%s partition=%d offset=%d", group, len(recs), r.Topic, r.Partition, r.Offset))
			}
			return err
		}
	}
	return []processor.Opt{processor.WithBatchHandler(h), processor.MaxBatch(max)}
}

// registerDBStats exposes the database pool's statistics (prometheus'
// DBStatsCollector: go_sql_open_connections, go_sql_in_use_connections,
// go_sql_wait_count_total, go_sql_wait_duration_seconds_total... with
// db_name name: "ordercast" for the services' pool, "checkout" for
// checkout's own on PostgreSQL): the time checkout and the consumers wait
// for a pooled connection shows whether the pool, not the database, bounds
// them.
func registerDBStats(reg prometheus.Registerer, db *sql.DB, name string) {
	reg.MustRegister(collectors.NewDBStatsCollector(db, name))
}
