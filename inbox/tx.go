package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/ordercast/ordercast/sqldb"
)

// ProcessTx is [Process] inside a transaction the caller owns, so that
// several events (a batch of records) are applied in one transaction, each
// with its own inbox row: it inserts the inbox row (group, eventID, meta,
// now) through tx with ON CONFLICT DO NOTHING and, if a row was inserted,
// calls fn with tx and returns (true, fn's error unchanged). If no row was
// inserted the group already applied the event (committed before, or
// earlier in this very transaction): fn is not called and ProcessTx returns
// (false, nil), or (false, *ConflictError) when both that row and meta have
// a digest and the two differ. A duplicate does not disturb the transaction:
// the caller goes on with the next event. db is used for its placeholder
// dialect only (db.Rebind); nothing runs outside tx. It works on the
// default table; [Inbox.ProcessTx] on a table of one's own.
//
// The caller commits tx when every event of the batch returned a nil error,
// and rolls it back otherwise: after an error the transaction may be
// unusable (PostgreSQL aborts it at a failed statement) and the inbox rows
// inserted so far must not be kept without their effects. Commit is what
// makes the inbox rows and the effects durable together, with the same
// guarantee as Process (per (group, eventID) fn's effects are committed at
// most once; see Process for why it holds at each isolation level). Unlike
// Process, ProcessTx does not retry: retry the whole transaction
// (sqldb.DB.InTx does on retryable errors). Two transactions inserting
// inbox rows of the same events in other orders can deadlock on PostgreSQL
// (40P01, retryable); events of one batch are distinct deliveries, so this
// needs a redelivery racing its first delivery. An empty group or eventID is
// an error. Safe for concurrent use on distinct transactions.
func ProcessTx(ctx context.Context, tx *sql.Tx, db *sqldb.DB, group, eventID string, meta Meta, fn func(ctx context.Context, tx *sql.Tx) error) (applied bool, err error) {
	return newInbox(db, DefaultTable).ProcessTx(ctx, tx, group, eventID, meta, fn)
}

// ProcessTx is the package's [ProcessTx] on this inbox's table.
func (in *Inbox) ProcessTx(ctx context.Context, tx *sql.Tx, group, eventID string, meta Meta, fn func(ctx context.Context, tx *sql.Tx) error) (applied bool, err error) {
	if group == "" || eventID == "" {
		return false, fmt.Errorf("inbox: group %q and event id %q must not be empty", group, eventID)
	}
	claimed, err := in.claim(ctx, tx, group, eventID, meta)
	if err != nil || !claimed {
		return false, err
	}
	return true, fn(ctx, tx)
}

// Claim is one event of [ClaimTx]: its stable id and where it was consumed
// from (with its digest, as for [Process]).
type Claim struct {
	EventID string
	Meta    Meta
}

// claimsPerInsert is the most inbox rows one INSERT of ClaimTx writes: 7
// parameters each, well below SQLite's 32,766 and PostgreSQL's 65,535.
const claimsPerInsert = 500

// ClaimTx inserts the inbox rows of several events through tx, in
// multi-row INSERTs (one round trip per 500 events, where [ProcessTx] takes
// one per event), and reports which were claimed: claimed[i] is true when
// the group had not applied claims[i].EventID before (neither committed nor
// earlier in this transaction, nor earlier in claims: of two claims of one
// event id only the first is claimed). The caller then applies the effects
// of exactly the claimed events through tx, and commits or rolls back
// everything together, as for ProcessTx (no retry here; sqldb.DB.InTx
// retries the whole transaction). A claim not claimed whose event was
// applied with other content (both digests set and different) makes ClaimTx
// return a *ConflictError for the first such claim; the caller must roll
// back. An empty group or event id is an error. db is used for its
// placeholder dialect only; the default table ([Inbox.ClaimTx] on one's own). Safe for concurrent use on distinct
// transactions. Needs INSERT ... RETURNING (SQLite 3.35+, PostgreSQL).
func ClaimTx(ctx context.Context, tx *sql.Tx, db *sqldb.DB, group string, claims []Claim) (claimed []bool, err error) {
	return newInbox(db, DefaultTable).ClaimTx(ctx, tx, group, claims)
}

// ClaimTx is the package's [ClaimTx] on this inbox's table.
func (in *Inbox) ClaimTx(ctx context.Context, tx *sql.Tx, group string, claims []Claim) (claimed []bool, err error) {
	if group == "" {
		return nil, fmt.Errorf("inbox: group %q must not be empty", group)
	}
	for _, c := range claims {
		if c.EventID == "" {
			return nil, fmt.Errorf("inbox: group %q: an event id must not be empty", group)
		}
	}
	now := time.Now().UnixMilli()
	inserted := make(map[string]bool, len(claims))
	for from := 0; from < len(claims); from += claimsPerInsert {
		chunk := claims[from:min(from+claimsPerInsert, len(claims))]
		var q strings.Builder
		q.WriteString(`INSERT INTO ` + in.table + ` (consumer_group, event_id, topic, "partition", "offset", processed_at, digest) VALUES `)
		args := make([]any, 0, 7*len(chunk))
		for i, c := range chunk {
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString("(?, ?, ?, ?, ?, ?, ?)")
			args = append(args, group, c.EventID, c.Meta.Topic, c.Meta.Partition, c.Meta.Offset, now,
				sql.NullString{String: c.Meta.Digest, Valid: c.Meta.Digest != ""})
		}
		q.WriteString(` ON CONFLICT (consumer_group, event_id) DO NOTHING RETURNING event_id`)
		rows, err := tx.QueryContext(ctx, in.db.Rebind(q.String()), args...)
		if err != nil {
			return nil, fmt.Errorf("inbox: insert %d rows of %s: %w", len(chunk), group, err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, fmt.Errorf("inbox: insert rows of %s: %w", group, err)
			}
			inserted[id] = true
		}
		if err := rows.Close(); err != nil {
			return nil, fmt.Errorf("inbox: insert rows of %s: %w", group, err)
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("inbox: insert rows of %s: %w", group, err)
		}
	}
	claimed = make([]bool, len(claims))
	for i, c := range claims {
		if inserted[c.EventID] {
			claimed[i] = true
			delete(inserted, c.EventID) // a later claim of the same id is a duplicate
			continue
		}
		if c.Meta.Digest == "" {
			continue
		}
		var first Meta
		var firstDigest sql.NullString
		if err := tx.QueryRowContext(ctx, in.firstSQL, group, c.EventID).Scan(&first.Topic, &first.Partition, &first.Offset, &firstDigest); err != nil {
			return nil, fmt.Errorf("inbox: read %s/%s: %w", group, c.EventID, err)
		}
		if firstDigest.Valid && firstDigest.String != c.Meta.Digest {
			first.Digest = firstDigest.String
			return nil, &ConflictError{Group: group, EventID: c.EventID, First: first}
		}
	}
	return claimed, nil
}
