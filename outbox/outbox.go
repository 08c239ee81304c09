// Package outbox publishes Kafka records that a database transaction decided
// to publish, reliably and in order: the transactional outbox pattern.
//
// A service writes its effect and the records announcing it in one database
// transaction ([Enqueue] inside sqldb.DB.InTx, usually inside
// inbox.Process), so a record exists if and only if its effect committed. A
// [Relay] then reads unsent rows in id order, produces them with a Kafka
// client, and marks them sent.
//
// Two delivery modes:
//
//   - Exactly once ([NewTransactionalRelay], what the order system runs):
//     each batch is produced in a Kafka transaction together with a progress
//     marker record naming the batch's ids, on a compacted topic of the
//     relay's own; the rows are marked sent after the commit, and a restarted
//     relay first fences its predecessors (same transactional id) and marks
//     the rows of the last committed marker. A read_committed consumer sees
//     each row once whatever crashes; see NewTransactionalRelay for the
//     argument and for what it does not cover.
//   - At least once ([NewRelay] with any idempotent client): a crash (or a
//     failed UPDATE) after Kafka acknowledged a batch but before the rows were
//     marked sent publishes those records again on the next run; consumers
//     absorb the duplicates with their inbox (package inbox), keyed by the
//     event id inside the record.
//
// In both, a record is never skipped: a record that cannot be produced is
// retried, with backoff, until it can, and the rows after it wait (watch
// [Relay.Pending]).
//
// Order: rows are produced in id order and a row is marked sent only when it
// and every row before it in its batch were acknowledged, so for records of
// one key (hence one partition) Kafka's order is the order of their outbox
// ids. On SQLite the ids are the order in which the transactions committed.
// On PostgreSQL an id is taken at insert time, so two transactions running at
// the same time may commit in the opposite order of their ids and the later id
// may be relayed first; transactions that follow each other (as the handling
// of one key's events in one partition does) keep their order.
//
// At least once, run one relay per database (per outbox table): two relays
// on one table would each publish every row, doubling the duplicates and
// interleaving their order. Exactly once, several relays per database are
// safe (one is active, the others are fenced and stand by).
//
// The package needs only package sqldb and one table, outbox, which [Migrate]
// creates on a database of your own; the order system's schema (package
// store) includes it.
package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ordercast/ordercast/sqldb"
)

// Header is one Kafka record header.
type Header struct {
	Key   string `json:"k"` // header key
	Value []byte `json:"v"` // header value (stored base64 in the headers JSON column)
}

// Message is a Kafka record to publish. Key and Value may be nil (a nil key
// leaves the partition to the producer's partitioner; a nil value is a
// tombstone). Headers are kept in order.
type Message struct {
	Topic   string   // required
	Key     []byte   // record key; nil for none
	Value   []byte   // record value; nil for a tombstone
	Headers []Header // record headers, in order; stored as JSON
}

// Enqueue writes m to the outbox inside the caller's transaction tx on db
// (db gives the dialect; it is not used for the write). The row becomes
// visible to the relay only when tx commits, and vanishes if it rolls back.
// Call [Relay.Notify] after the commit to publish it without waiting for the
// next poll. It returns an error if m.Topic is empty, the headers cannot be
// encoded, or the insert fails (wrapped; a retryable database error stays
// recognisable to sqldb.DB.InTx). Safe for concurrent use on different
// transactions.
func Enqueue(ctx context.Context, tx *sql.Tx, db *sqldb.DB, m Message) error {
	if m.Topic == "" {
		return errors.New("outbox: enqueue: empty topic")
	}
	var headers any // NULL when there are none
	if len(m.Headers) > 0 {
		b, err := json.Marshal(m.Headers)
		if err != nil {
			return fmt.Errorf("outbox: enqueue: encode headers: %w", err)
		}
		headers = string(b)
	}
	_, err := tx.ExecContext(ctx,
		db.Rebind(`INSERT INTO outbox (topic, record_key, value, headers, created_at) VALUES (?, ?, ?, ?, ?)`),
		m.Topic, m.Key, m.Value, headers, time.Now().UnixMilli())
	if err != nil {
		return fmt.Errorf("outbox: enqueue to %s: %w", m.Topic, err)
	}
	return nil
}

// Pending returns the number of outbox rows not yet marked sent: records
// waiting for the relay (or failing to be produced). For health checks,
// metrics and tests. Safe for concurrent use.
func Pending(ctx context.Context, db *sqldb.DB) (int, error) {
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM outbox WHERE sent_at IS NULL`).Scan(&n); err != nil {
		return 0, fmt.Errorf("outbox: pending: %w", err)
	}
	return n, nil
}

// Prune deletes the rows marked sent before the given time and returns how
// many it deleted. Sent rows are kept for inspection until pruned; nothing
// prunes them automatically. Safe for concurrent use, also while a relay
// runs (it never touches unsent rows).
func Prune(ctx context.Context, db *sqldb.DB, sentBefore time.Time) (int64, error) {
	var n int64
	err := db.InTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, db.Rebind(`DELETE FROM outbox WHERE sent_at IS NOT NULL AND sent_at < ?`), sentBefore.UnixMilli())
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("outbox: prune: %w", err)
	}
	return n, nil
}
