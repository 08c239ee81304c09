// Package inbox applies a consumed event's database effect at most once per
// consumer group, which, with Kafka's at-least-once delivery (offsets
// committed only after processing), makes the effect happen exactly once.
//
// A consumer calls [Process] with the group, the event's stable id (the
// eventId field of the event, the same on every re-delivery and every
// re-publication) and a function that writes the effect through the given
// transaction:
//
//	applied, err := inbox.Process(ctx, db, order.GroupOrders, ev.EventID,
//		inbox.Meta{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset},
//		func(ctx context.Context, tx *sql.Tx) error {
//			_, err := tx.ExecContext(ctx, db.Rebind(`INSERT INTO orders ...`), ...)
//			return err
//		})
//
// The inbox row and the effect commit or roll back together, so a crash at
// any point leaves either both (the event is done, a re-delivery is skipped)
// or neither (the re-delivery applies it). Effects outside this database are
// not covered; publish follow-up events through package outbox in the same
// transaction instead.
//
// The package needs only package sqldb and one table, inbox, which [Migrate]
// creates on a database of your own; the order system's schema (package
// store) includes it.
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

// insertSQL claims (group, event id); it inserts nothing if the pair exists.
// ON CONFLICT ... DO NOTHING is accepted by SQLite (3.24+) and PostgreSQL.
const insertSQL = `INSERT INTO inbox (consumer_group, event_id, topic, "partition", "offset", processed_at, digest)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (consumer_group, event_id) DO NOTHING`

// firstSQL reads the row that claimed (group, event id) first.
const firstSQL = `SELECT topic, "partition", "offset", digest FROM inbox WHERE consumer_group = ? AND event_id = ?`

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
// lock taken at BEGIN, so the second transaction sees the first one's
// committed row and inserts nothing. On PostgreSQL under READ COMMITTED, a
// concurrent insert of the same key waits on the first transaction's
// uncommitted index entry: if that commits, ON CONFLICT DO NOTHING inserts
// nothing; if it rolls back, the waiting insert succeeds and that transaction
// applies the effect instead. Either way exactly one transaction holding the
// row commits an effect.
//
// Process is safe for concurrent use.
func Process(ctx context.Context, db *sqldb.DB, group, eventID string, meta Meta, fn func(ctx context.Context, tx *sql.Tx) error) (applied bool, err error) {
	if group == "" || eventID == "" {
		return false, fmt.Errorf("inbox: group %q and event id %q must not be empty", group, eventID)
	}
	query := db.Rebind(insertSQL)
	digest := sql.NullString{String: meta.Digest, Valid: meta.Digest != ""}
	var conflict *ConflictError
	err = db.InTx(ctx, func(tx *sql.Tx) error {
		conflict = nil
		res, err := tx.ExecContext(ctx, query, group, eventID, meta.Topic, meta.Partition, meta.Offset, time.Now().UnixMilli(), digest)
		if err != nil {
			return fmt.Errorf("inbox: insert %s/%s: %w", group, eventID, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("inbox: insert %s/%s: rows affected: %w", group, eventID, err)
		}
		if n > 0 {
			return fn(ctx, tx)
		}
		if digest.Valid {
			var first Meta
			var firstDigest sql.NullString
			if err := tx.QueryRowContext(ctx, db.Rebind(firstSQL), group, eventID).Scan(&first.Topic, &first.Partition, &first.Offset, &firstDigest); err != nil {
				return fmt.Errorf("inbox: read %s/%s: %w", group, eventID, err)
			}
			if firstDigest.Valid && firstDigest.String != digest.String {
				first.Digest = firstDigest.String
				conflict = &ConflictError{Group: group, EventID: eventID, First: first}
			}
		}
		return errDuplicate
	})
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, errDuplicate) && conflict != nil:
		return false, conflict
	case errors.Is(err, errDuplicate):
		return false, nil
	default:
		return false, err
	}
}

// Seen reports whether group has already processed eventID (its inbox row is
// committed). It is a plain read, for diagnostics and tests: deciding whether
// to apply an effect must go through Process, since the answer can change
// right after Seen returns. It returns an error only if the query fails.
// Safe for concurrent use.
func Seen(ctx context.Context, db *sqldb.DB, group, eventID string) (bool, error) {
	var one int
	err := db.QueryRowContext(ctx, db.Rebind(`SELECT 1 FROM inbox WHERE consumer_group = ? AND event_id = ?`), group, eventID).Scan(&one)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	default:
		return false, fmt.Errorf("inbox: seen %s/%s: %w", group, eventID, err)
	}
}
