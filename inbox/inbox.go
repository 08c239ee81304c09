// Package inbox applies a consumed event's database effect at most once per
// consumer group, which, with Kafka's at-least-once delivery (offsets
// committed only after processing), makes the effect happen exactly once.
//
// It works on a database of your own, SQLite or PostgreSQL, opened with the
// database/sql driver you choose and wrapped with sqldb.New. Create the inbox
// table with [Migrate] or [Inbox.Migrate], or put the statement [Schema]
// returns into your own migrations; nothing else is created. Then, for each
// record, call [Inbox.Process] (or [Process], for the table named
// DefaultTable) with the consumer group, the event's stable id (an id the
// event carries, the same on every re-delivery and every re-publication; not
// the offset) and a function that writes the effect through the given
// transaction:
//
//	in, err := inbox.New(db, "billing_inbox")
//	...
//	applied, err := in.Process(ctx, "billing", ev.ID,
//		inbox.Meta{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset},
//		func(ctx context.Context, tx *sql.Tx) error {
//			_, err := tx.ExecContext(ctx, db.Rebind(`INSERT INTO invoices ...`), ...)
//			return err
//		})
//
// The inbox row and the effect commit or roll back together, so a crash at
// any point leaves either both (the event is done, a re-delivery is skipped)
// or neither (the re-delivery applies it). Effects outside this database are
// not covered; publish follow-up events through package outbox in the same
// transaction instead.
//
// # Table
//
// One row per (consumer group, event id) applied, in the table DefaultTable
// ("inbox") unless [New] is given another name; the same columns in both
// dialects:
//
//	consumer_group TEXT NOT NULL     the group given to Process
//	event_id       TEXT NOT NULL     the event id given to Process
//	topic          TEXT NOT NULL     Meta.Topic: where the event was consumed from
//	"partition"    INTEGER NOT NULL  Meta.Partition
//	"offset"       BIGINT NOT NULL   Meta.Offset
//	processed_at   BIGINT NOT NULL   when it was applied, unix milliseconds
//	digest         TEXT              Meta.Digest; NULL when empty
//	PRIMARY KEY (consumer_group, event_id)
//
// Several groups may share one table. The table grows by one row per event
// applied until [Inbox.Prune] deletes rows processed before a cutoff; nothing
// deletes rows automatically. Deleting a row makes a later re-delivery of its
// event apply again, so prune only rows older than any record that can still
// be re-delivered or re-published (the topic's retention, plus the longest
// time a record can wait in a retry topic or DLQ before a replay).
package inbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ordercast/ordercast/sqldb"
)

// Meta is where the event was consumed from, recorded in the inbox row for
// tracing (which record applied an event), and the digest of its content.
type Meta struct {
	Topic     string // the record's topic
	Partition int32  // the record's partition
	Offset    int64  // the record's offset in that partition
	// Digest, if not empty, identifies the event's content (see [Digest]).
	// It is recorded with the inbox row; a later event with the same id
	// and another digest is refused with a *ConflictError instead of being
	// skipped as a redelivery. Empty: no check (and a row recorded without
	// a digest, by an older build, matches every digest).
	Digest string
}

// Digest returns the hex SHA-256 of an event payload, for Meta.Digest. A
// JSON payload (one whose first non-space byte is '{') is canonicalised
// first (members sorted, insignificant space dropped, numbers kept as
// written), so a producer re-sending the same JSON event with other spacing
// or member order gets the same digest; any other payload (Avro in the
// Confluent wire format) is hashed as is: a redelivery or re-publication
// carries the same bytes. A JSON payload that does not parse is hashed as
// is. Safe for concurrent use.
func Digest(payload []byte) string {
	if t := bytes.TrimLeft(payload, " \t\r\n"); len(t) > 0 && t[0] == '{' {
		d := json.NewDecoder(bytes.NewReader(t))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err == nil {
			if c, err := json.Marshal(v); err == nil {
				payload = c
			}
		}
	}
	sum := sha256.Sum256(payload)
	return hex.EncodeToString(sum[:])
}

// ConflictError is returned by [Process] when the group already applied an
// event with this id but other content (another Meta.Digest): a producer
// reused an event id, or an event was altered and re-sent. Its effect is not
// applied again, and it is not a redelivery to skip silently: it is
// permanent (Permanent reports true, so the consumer runtime dead-letters
// the record at once, where an operator can compare it with the first).
type ConflictError struct {
	Group, EventID string
	// First is where the applied event was consumed from.
	First Meta
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("inbox: event id %s was already applied by group %s (from %s/%d/%d) with other content: an event id must not be reused for another event",
		e.EventID, e.Group, e.First.Topic, e.First.Partition, e.First.Offset)
}

// Permanent reports true: no retry makes the content match.
func (e *ConflictError) Permanent() bool { return true }

// errDuplicate rolls back the transaction of an event already processed.
var errDuplicate = errors.New("inbox: event already processed")

// DefaultTable is the inbox table's name when none is chosen: the table
// [Process], [Seen] and [Migrate] use, and [New] with an empty name.
const DefaultTable = "inbox"

// Inbox is the inbox table of one database. Make it with [New]; it is safe
// for concurrent use and cheap to keep (it holds the queries, built once).
type Inbox struct {
	db    *sqldb.DB
	table string
	// The statements, with the table name and the dialect's placeholders.
	insertSQL, firstSQL, seenSQL, pruneSQL string
}

// New returns the inbox kept in table of db: DefaultTable when table is
// empty. It creates nothing (see [Inbox.Migrate]) and does not touch the
// database. It returns an error if db is nil or table is not a plain
// lower-case identifier (sqldb.CheckTableName says why).
func New(db *sqldb.DB, table string) (*Inbox, error) {
	if db == nil {
		return nil, errors.New("inbox: nil *sqldb.DB")
	}
	if table == "" {
		table = DefaultTable
	}
	if err := sqldb.CheckTableName(table); err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	return newInbox(db, table), nil
}

// PruneBatch is how many rows one transaction of [Inbox.Prune] deletes at
// most.
const PruneBatch = 1000

// Prune is [Inbox.Prune] on the table named DefaultTable of db.
func Prune(ctx context.Context, db *sqldb.DB, processedBefore time.Time) (int64, error) {
	return newInbox(db, DefaultTable).Prune(ctx, processedBefore)
}

// Prune deletes the rows of every group processed before processedBefore
// (processed_at, compared in Unix milliseconds) and returns how many it
// deleted. It deletes in transactions of at most PruneBatch rows each (so a
// large backlog neither holds a write lock for long nor builds one huge
// transaction), one after the other until a batch finds fewer rows, checking
// ctx between them; on an error or when ctx ends it returns the rows deleted
// so far with the error, and the rows left stay valid. Each batch reads the
// table by processed_at, which the inbox table has no index on: on a large
// table, create one (CREATE INDEX inbox_processed_at ON inbox (processed_at)).
//
// A pruned event is no longer known to its group: a re-delivery of it
// applies its effect again. Choose processedBefore older than any record that
// can still be delivered (see the package doc). Safe for concurrent use, also
// while Process runs: a batch is one statement, atomic by itself.
func (in *Inbox) Prune(ctx context.Context, processedBefore time.Time) (int64, error) {
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("inbox: prune: %w", err)
		}
		var n int64
		err := in.db.InTx(ctx, func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, in.pruneSQL, processedBefore.UnixMilli(), PruneBatch)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		if err != nil {
			return total, fmt.Errorf("inbox: prune: %w", err)
		}
		total += n
		if n < PruneBatch {
			return total, nil
		}
	}
}

// newInbox is New without the checks.
func newInbox(db *sqldb.DB, table string) *Inbox {
	return &Inbox{
		db:    db,
		table: table,
		// ON CONFLICT ... DO NOTHING is accepted by SQLite (3.24+) and
		// PostgreSQL; it claims (group, event id) or inserts nothing.
		insertSQL: db.Rebind(`INSERT INTO ` + table + ` (consumer_group, event_id, topic, "partition", "offset", processed_at, digest)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (consumer_group, event_id) DO NOTHING`),
		firstSQL: db.Rebind(`SELECT topic, "partition", "offset", digest FROM ` + table + ` WHERE consumer_group = ? AND event_id = ?`),
		seenSQL:  db.Rebind(`SELECT 1 FROM ` + table + ` WHERE consumer_group = ? AND event_id = ?`),
		// A row-value IN: SQLite (3.15+) and PostgreSQL; DELETE ... LIMIT is
		// SQLite's alone.
		pruneSQL: db.Rebind(`DELETE FROM ` + table + ` WHERE (consumer_group, event_id) IN
(SELECT consumer_group, event_id FROM ` + table + ` WHERE processed_at < ? LIMIT ?)`),
	}
}

// Table returns the name of the inbox's table.
func (in *Inbox) Table() string { return in.table }

// Process is [Inbox.Process] on the table named DefaultTable of db.
func Process(ctx context.Context, db *sqldb.DB, group, eventID string, meta Meta, fn func(ctx context.Context, tx *sql.Tx) error) (applied bool, err error) {
	return newInbox(db, DefaultTable).Process(ctx, group, eventID, meta, fn)
}

// Process applies an event's effect exactly once per (group, eventID).
//
// In one transaction (sqldb.DB.InTx) it first inserts the inbox row
// (group, eventID, meta, now) with ON CONFLICT DO NOTHING. If no row was
// inserted, the event was already processed by this group: the transaction is
// rolled back, fn is not called, and Process returns (false, nil), unless
// both that row and meta have a digest and the two differ: then it returns
// (false, *ConflictError). Otherwise it calls fn with the transaction and
// commits, returning (true, nil).
//
// If fn returns an error (or panics), everything rolls back, the inbox row
// included, so the event is not recorded and a later re-delivery will run fn
// again; Process returns (false, fn's error) unchanged, so errors.Is works on
// it. A retryable database error (see sqldb.IsRetryable) makes InTx run the
// whole transaction again, fn included, a bounded number of times, so fn must
// do only database work through tx (no Kafka produce, no HTTP) and must not
// keep state from a previous call. Other database errors are returned
// wrapped, with applied false. An empty group or eventID is an error.
//
// Guarantee: for each (group, eventID) fn's effects are committed at most
// once, whatever the concurrency (several instances, a rebalance handing the
// partition over mid-processing, a re-delivery after a crash); given
// at-least-once delivery and a commit of the Kafka offset only after Process
// returned nil, they are committed exactly once.
//
// Why it holds at each isolation level: the inbox primary key is
// (consumer_group, event_id) and the insert is the transaction's first
// statement. On SQLite, read-write transactions are serialised by the write
// lock, so the second transaction sees the first one's committed row and
// inserts nothing. On PostgreSQL under READ COMMITTED, a concurrent insert of
// the same key waits on the first transaction's uncommitted index entry: if
// that commits, ON CONFLICT DO NOTHING inserts nothing; if it rolls back, the
// waiting insert succeeds and that transaction applies the effect instead.
// Either way exactly one transaction holding the row commits an effect.
//
// Process is safe for concurrent use.
func (in *Inbox) Process(ctx context.Context, group, eventID string, meta Meta, fn func(ctx context.Context, tx *sql.Tx) error) (applied bool, err error) {
	if group == "" || eventID == "" {
		return false, fmt.Errorf("inbox: group %q and event id %q must not be empty", group, eventID)
	}
	err = in.db.InTx(ctx, func(tx *sql.Tx) error {
		claimed, err := in.claim(ctx, tx, group, eventID, meta)
		if err != nil {
			return err
		}
		if !claimed {
			return errDuplicate
		}
		return fn(ctx, tx)
	})
	var conflict *ConflictError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &conflict):
		return false, conflict
	case errors.Is(err, errDuplicate):
		return false, nil
	default:
		return false, err
	}
}

// claim inserts the inbox row of (group, eventID) inside tx, the first
// statement of the transaction that applies the event. It reports true when
// the row was inserted (the caller applies the effect in tx), false when the
// group already applied the event (nothing written; the caller skips it), or
// a *ConflictError when that earlier event had another digest, or the
// database error (wrapped, recognisable to sqldb.IsRetryable).
func (in *Inbox) claim(ctx context.Context, tx *sql.Tx, group, eventID string, meta Meta) (bool, error) {
	digest := sql.NullString{String: meta.Digest, Valid: meta.Digest != ""}
	res, err := tx.ExecContext(ctx, in.insertSQL, group, eventID, meta.Topic, meta.Partition, meta.Offset, time.Now().UnixMilli(), digest)
	if err != nil {
		return false, fmt.Errorf("inbox: insert %s/%s: %w", group, eventID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("inbox: insert %s/%s: rows affected: %w", group, eventID, err)
	}
	if n > 0 {
		return true, nil
	}
	if !digest.Valid {
		return false, nil
	}
	var first Meta
	var firstDigest sql.NullString
	if err := tx.QueryRowContext(ctx, in.firstSQL, group, eventID).Scan(&first.Topic, &first.Partition, &first.Offset, &firstDigest); err != nil {
		return false, fmt.Errorf("inbox: read %s/%s: %w", group, eventID, err)
	}
	if firstDigest.Valid && firstDigest.String != digest.String {
		first.Digest = firstDigest.String
		return false, &ConflictError{Group: group, EventID: eventID, First: first}
	}
	return false, nil
}

// Seen is [Inbox.Seen] on the table named DefaultTable of db.
func Seen(ctx context.Context, db *sqldb.DB, group, eventID string) (bool, error) {
	return newInbox(db, DefaultTable).Seen(ctx, group, eventID)
}

// Seen reports whether group has already processed eventID (its inbox row is
// committed). It is a plain read, for diagnostics and tests: deciding whether
// to apply an effect must go through Process, since the answer can change
// right after Seen returns. It returns an error only if the query fails.
// Safe for concurrent use.
func (in *Inbox) Seen(ctx context.Context, group, eventID string) (bool, error) {
	var one int
	err := in.db.QueryRowContext(ctx, in.seenSQL, group, eventID).Scan(&one)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	default:
		return false, fmt.Errorf("inbox: seen %s/%s: %w", group, eventID, err)
	}
}
