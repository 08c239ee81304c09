package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// recover reads the last committed marker and marks its rows sent: those of
// the previous transaction it names (marker.Prev) first, then its own.
func (r *Relay) recover(ctx context.Context, cl *kgo.Client) error {
	m, err := r.readMarker(ctx, cl)
	if err != nil || m == nil {
		return err
	}
	if len(m.Prev) > 0 {
		if err := r.recoverRows(ctx, m.Prev, m.PrevSum); err != nil {
			return err
		}
	}
	return r.recoverRows(ctx, m.IDs, m.Sum)
}

// recoverRows marks sent the unsent rows of the id ranges of one
// transaction, if the rows found match the checksum sum. One UPDATE marked
// all of a transaction's rows, so they are all unsent or all sent (and then
// perhaps pruned); only unsent rows are checked.
func (r *Relay) recoverRows(ctx context.Context, ranges [][2]int64, sum string) error {
	var ids []int64
	for _, rg := range ranges {
		for id := rg[0]; id <= rg[1]; id++ {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	rows, unsent, err := r.loadForCheck(ctx, ranges)
	if err != nil {
		return err
	}
	if len(unsent) == 0 {
		return nil // marked already (the usual case)
	}
	if len(rows) != len(ids) || checksum(rows) != sum {
		r.stats.mismatches.Add(1)
		add(r.mc.mismatches, 1)
		r.logger.Error("outbox relay: the last progress marker does not match this database's rows; not trusting it, its rows are published again (was the database replaced while the broker was kept?)",
			"relay", r.txn.name, "marker_topic", r.txn.markerTopic, "first_id", ids[0], "rows", len(ids), "found", len(rows))
		return nil
	}
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	err = r.markSent(mctx, nil, unsent)
	cancel()
	if err != nil {
		return err
	}
	r.stats.recovered.Add(int64(len(unsent)))
	add(r.mc.recovered, int64(len(unsent)))
	r.logger.Info("outbox relay: marked rows sent that an earlier relay committed to Kafka before stopping",
		"relay", r.txn.name, "rows", len(unsent), "first_id", unsent[0])
	return nil
}

// loadForCheck reads the rows of the given id ranges: all of them for the
// checksum, and the ids of those not marked sent.
func (r *Relay) loadForCheck(ctx context.Context, ranges [][2]int64) (rows []rowSum, unsent []int64, err error) {
	q := r.db.Rebind(`SELECT id, topic, record_key, value, sent_at FROM ` + r.ob.table + ` WHERE id >= ? AND id <= ? ORDER BY id`)
	for _, rg := range ranges {
		rs, err := r.db.QueryContext(ctx, q, rg[0], rg[1])
		if err != nil {
			return nil, nil, fmt.Errorf("outbox: read marker rows: %w", err)
		}
		for rs.Next() {
			var (
				s    rowSum
				sent sql.NullInt64
			)
			if err := rs.Scan(&s.id, &s.topic, &s.key, &s.value, &sent); err != nil {
				rs.Close()
				return nil, nil, fmt.Errorf("outbox: read marker rows: %w", err)
			}
			rows = append(rows, s)
			if !sent.Valid {
				unsent = append(unsent, s.id)
			}
		}
		err = rs.Err()
		rs.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("outbox: read marker rows: %w", err)
		}
	}
	return rows, unsent, nil
}
