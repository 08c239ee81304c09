// Package outbox publishes Kafka records that a database transaction decided
// to publish, reliably and in order: the transactional outbox pattern.
//
// A service writes its effect and the records announcing it in one database
// transaction ([Outbox.Enqueue] inside sqldb.DB.InTx, usually inside
// inbox.Process), so a record exists if and only if its effect committed. A
// [Relay] then reads unsent rows in id order, produces them with a Kafka
// client, and marks them sent.
//
// Two delivery modes:
//
//   - Exactly once ([NewTransactionalRelay]):
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
// # Database and table
//
// It works on a database of your own, SQLite or PostgreSQL, opened with the
// database/sql driver you choose and wrapped with sqldb.New. Create the
// outbox table with [Migrate] or [Outbox.Migrate], or put the statements
// [Schema] returns into your own migrations; nothing else is created (the
// exactly-once relay keeps its progress in Kafka). The table is DefaultTable
// ("outbox") unless [New] and the relay ([Table]) are given another
// name; its columns:
//
//	id          auto-increment BIGINT primary key (sqldb.Dialect.IdentityType): the relay order
//	topic       TEXT NOT NULL   Message.Topic
//	record_key  BLOB / BYTEA    Message.Key; NULL for none
//	value       BLOB / BYTEA    Message.Value; NULL for a tombstone
//	headers     TEXT            Message.Headers as JSON [{"k":key,"v":base64 value}]; NULL for none
//	created_at  BIGINT NOT NULL when it was enqueued, unix milliseconds
//	sent_at     BIGINT          when the relay marked it sent, unix milliseconds; NULL until then
//
// and the partial index <table>_unsent on id WHERE sent_at IS NULL, which
// the relay reads. Sent rows are kept until [Prune] deletes them.
//
// # Defaults
//
// Every default in one place (each option's doc has the details):
//
//   - Table: DefaultTable, "outbox" (New, Table).
//   - Batches of DefaultMaxBatch (500) rows; an idle relay looks for rows
//     every DefaultPollInterval (200ms) unless Notify wakes it; after a
//     failed step it waits from DefaultMinBackoff (100ms) doubling to
//     DefaultMaxBackoff (5s), and retries one row before whole batches.
//   - Logger: one that discards everything (slog.DiscardHandler), as the
//     processor's; pass Logger to see the relay's lines. No error callback
//     (OnError).
//   - Exactly once: transactional id "ordercast-outbox-<name>"
//     (DefaultTransactionalID; the option TransactionalID), progress marker topic
//     "ordercast.outbox.<name>" (DefaultMarkerTopic; the option MarkerTopic) created
//     with one partition, cleanup.policy=compact and the broker's
//     replication factor and min.insync.replicas (MarkerTopicReplication);
//     transaction.timeout.ms DefaultTransactionTimeout (30s), acks=all; a
//     fenced relay takes over after DefaultTakeoverAfter (5s) without
//     progress.
//   - At least once: the caller's client, as configured (NewRelay).
package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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
	// TraceContext is the W3C traceparent (https://www.w3.org/TR/trace-context/)
	// of the span the message was enqueued in, "" for none; stored in the
	// trace_context column. The relay gives it to the record as its
	// traceparent header (HeaderTraceParent) unless Headers have one, so that
	// tracing continues the enqueuing trace (package processor/proctrace's
	// TraceParent gives it from a context).
	TraceContext string
}

// HeaderTraceParent is the header the relay writes a message's
// TraceContext to.
const HeaderTraceParent = "traceparent"

// DefaultTable is the outbox table's name when none is chosen: the table
// [Enqueue], [Pending], [Prune], [Migrate] and the relays use by default, and
// [New] with an empty name.
const DefaultTable = "outbox"

// Outbox is the outbox table of one database. Make it with [New]; it is safe
// for concurrent use and cheap to keep (it holds the queries, built once).
type Outbox struct {
	db    *sqldb.DB
	table string
	// The statements, with the table name and the dialect's placeholders.
	insertSQL, pendingSQL, pruneSQL string
}

// New returns the outbox kept in table of db: DefaultTable when table is
// empty. It creates nothing (see [Outbox.Migrate]) and does not touch the
// database. A relay publishing it needs the same name: [Table]. It
// returns an error if db is nil or table is not a plain lower-case
// identifier (sqldb.CheckTableName says why).
func New(db *sqldb.DB, table string) (*Outbox, error) {
	if db == nil {
		return nil, errors.New("outbox: nil *sqldb.DB")
	}
	if table == "" {
		table = DefaultTable
	}
	if err := sqldb.CheckTableName(table); err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	return newOutbox(db, table), nil
}

// newOutbox is New without the checks.
func newOutbox(db *sqldb.DB, table string) *Outbox {
	return &Outbox{
		db:         db,
		table:      table,
		insertSQL:  db.Rebind(`INSERT INTO ` + table + ` (topic, record_key, value, headers, created_at, trace_context) VALUES (?, ?, ?, ?, ?, ?)`),
		pendingSQL: `SELECT COUNT(*) FROM ` + table + ` WHERE sent_at IS NULL`,
		pruneSQL:   db.Rebind(`DELETE FROM ` + table + ` WHERE sent_at IS NOT NULL AND sent_at < ?`),
	}
}

// Table returns the name of the outbox's table.
func (o *Outbox) Table() string { return o.table }

// Enqueue is [Outbox.Enqueue] on the table named DefaultTable of db (db gives
// the dialect; it is not used for the write).
func Enqueue(ctx context.Context, tx *sql.Tx, db *sqldb.DB, m Message) error {
	return newOutbox(db, DefaultTable).Enqueue(ctx, tx, m)
}

// Enqueue writes m to the outbox inside the caller's transaction tx, which
// must be a transaction on the outbox's database. The row becomes
// visible to the relay only when tx commits, and vanishes if it rolls back.
// Call [Relay.Notify] after the commit to publish it without waiting for the
// next poll. It returns an error if m.Topic is empty, the headers cannot be
// encoded, or the insert fails (wrapped; a retryable database error stays
// recognisable to sqldb.DB.InTx). Safe for concurrent use on different
// transactions.
func (o *Outbox) Enqueue(ctx context.Context, tx *sql.Tx, m Message) error {
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
	_, err := tx.ExecContext(ctx, o.insertSQL,
		m.Topic, m.Key, m.Value, headers, time.Now().UnixMilli(), nullString(m.TraceContext))
	if err != nil {
		return fmt.Errorf("outbox: enqueue to %s: %w", m.Topic, err)
	}
	return nil
}

// EnqueueAll is [Outbox.EnqueueAll] on the table named DefaultTable of db
// (db gives the dialect; it is not used for the write).
func EnqueueAll(ctx context.Context, tx *sql.Tx, db *sqldb.DB, msgs []Message) error {
	return newOutbox(db, DefaultTable).EnqueueAll(ctx, tx, msgs)
}

// rowsPerEnqueue bounds the rows of one EnqueueAll statement (6 parameters
// each), below SQLite's 32,766 and PostgreSQL's 65,535 parameters.
const rowsPerEnqueue = 5000

// nullString is s, or NULL when empty.
func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// EnqueueAll writes msgs to the outbox inside the caller's transaction tx,
// as [Outbox.Enqueue] does for each of them, in multi-row INSERTs (one
// statement per up to 6,000 messages instead of one per message). The rows'
// ids, hence the relay's order, follow the slice order. Nothing is written
// for an empty slice. It returns an error, before writing anything, if a
// message has an empty topic or headers that cannot be encoded (naming its
// index), and the wrapped error of a failed insert (a retryable database
// error stays recognisable to sqldb.DB.InTx). Safe for concurrent use on
// different transactions.
func (o *Outbox) EnqueueAll(ctx context.Context, tx *sql.Tx, msgs []Message) error {
	now := time.Now().UnixMilli()
	args := make([]any, 0, 6*min(len(msgs), rowsPerEnqueue))
	for from := 0; from < len(msgs); from += rowsPerEnqueue {
		chunk := msgs[from:min(from+rowsPerEnqueue, len(msgs))]
		args = args[:0]
		for i, m := range chunk {
			if m.Topic == "" {
				return fmt.Errorf("outbox: enqueue message %d: empty topic", from+i)
			}
			var headers any // NULL when there are none
			if len(m.Headers) > 0 {
				b, err := json.Marshal(m.Headers)
				if err != nil {
					return fmt.Errorf("outbox: enqueue message %d: encode headers: %w", from+i, err)
				}
				headers = string(b)
			}
			args = append(args, m.Topic, m.Key, m.Value, headers, now, nullString(m.TraceContext))
		}
		q := `INSERT INTO ` + o.table + ` (topic, record_key, value, headers, created_at, trace_context) VALUES (?, ?, ?, ?, ?, ?)` +
			strings.Repeat(`, (?, ?, ?, ?, ?, ?)`, len(chunk)-1)
		if _, err := tx.ExecContext(ctx, o.db.Rebind(q), args...); err != nil {
			return fmt.Errorf("outbox: enqueue %d messages (the first to %s): %w", len(chunk), chunk[0].Topic, err)
		}
	}
	return nil
}

// Pending is [Outbox.Pending] on the table named DefaultTable of db.
func Pending(ctx context.Context, db *sqldb.DB) (int, error) {
	return newOutbox(db, DefaultTable).Pending(ctx)
}

// Pending returns the number of outbox rows not yet marked sent: records
// waiting for the relay (or failing to be produced). For health checks,
// metrics and tests. Safe for concurrent use.
func (o *Outbox) Pending(ctx context.Context) (int, error) {
	var n int
	if err := o.db.QueryRowContext(ctx, o.pendingSQL).Scan(&n); err != nil {
		return 0, fmt.Errorf("outbox: pending: %w", err)
	}
	return n, nil
}

// Prune is [Outbox.Prune] on the table named DefaultTable of db.
func Prune(ctx context.Context, db *sqldb.DB, sentBefore time.Time) (int64, error) {
	return newOutbox(db, DefaultTable).Prune(ctx, sentBefore)
}

// Prune deletes the rows marked sent before the given time and returns how
// many it deleted. Sent rows are kept for inspection until pruned; nothing
// prunes them automatically. Safe for concurrent use, also while a relay
// runs (it never touches unsent rows).
func (o *Outbox) Prune(ctx context.Context, sentBefore time.Time) (int64, error) {
	var n int64
	err := o.db.InTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, o.pruneSQL, sentBefore.UnixMilli())
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
