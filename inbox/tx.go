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
// multi-row INSERTs (where [ProcessTx] takes one round trip per event; on
// SQLite one INSERT ... VALUES per 500 events; on PostgreSQL one INSERT
// ... SELECT FROM unnest of arrays for all of them, a statement of fixed
// text prepared and planned once per connection), and reports which were claimed: claimed[i] is true when
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
	var inserted map[string]bool
	if in.db.Dialect == sqldb.Postgres {
		inserted, err = in.insertClaimsArrays(ctx, tx, group, claims, now)
	} else {
		inserted, err = in.insertClaimsValues(ctx, tx, group, claims, now)
	}
	if err != nil {
		return nil, err
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

// insertClaimsValues inserts the inbox rows of claims in multi-row INSERT
// ... VALUES statements of up to claimsPerInsert rows (SQLite: a statement's
// text, and so its prepared form, varies with the number of rows) and
// returns the event ids it inserted.
func (in *Inbox) insertClaimsValues(ctx context.Context, tx *sql.Tx, group string, claims []Claim, now int64) (map[string]bool, error) {
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
	return inserted, nil
}

// claimArraysSQL is the inbox claim on PostgreSQL: one statement of fixed
// text whatever the number of rows (the event ids, topics, partitions,
// offsets and digests as five arrays, unnest'ed in array order), so the
// driver prepares it once per connection and PostgreSQL plans it once,
// where a multi-row VALUES list is a new statement for each batch size. An
// empty digest is stored as NULL, as insertClaimsValues stores it. Rows of
// one event id that occur twice in the arrays insert once (ON CONFLICT DO
// NOTHING also skips a row inserted earlier in the same statement).
const claimArraysSQL = ` (consumer_group, event_id, topic, "partition", "offset", processed_at, digest)
	SELECT $1, u.event_id, u.topic, u.part, u.off, $2, NULLIF(u.digest, '')
	FROM unnest($3::text[], $4::text[], $5::integer[], $6::bigint[], $7::text[]) WITH ORDINALITY AS u(event_id, topic, part, off, digest, n)
	ORDER BY u.n
	ON CONFLICT (consumer_group, event_id) DO NOTHING RETURNING event_id`

// insertClaimsArrays inserts the inbox rows of claims in one statement
// (claimArraysSQL) and returns the event ids it inserted. PostgreSQL only.
func (in *Inbox) insertClaimsArrays(ctx context.Context, tx *sql.Tx, group string, claims []Claim, now int64) (map[string]bool, error) {
	ids := make([]string, len(claims))
	topics := make([]string, len(claims))
	parts := make([]int32, len(claims))
	offs := make([]int64, len(claims))
	digests := make([]string, len(claims))
	for i, c := range claims {
		ids[i], topics[i], parts[i], offs[i], digests[i] = c.EventID, c.Meta.Topic, c.Meta.Partition, c.Meta.Offset, c.Meta.Digest
	}
	rows, err := tx.QueryContext(ctx, `INSERT INTO `+in.table+claimArraysSQL, group, now, ids, topics, parts, offs, digests)
	if err != nil {
		return nil, fmt.Errorf("inbox: insert %d rows of %s: %w", len(claims), group, err)
	}
	defer rows.Close()
	inserted := make(map[string]bool, len(claims))
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("inbox: insert rows of %s: %w", group, err)
		}
		inserted[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("inbox: insert rows of %s: %w", group, err)
	}
	return inserted, nil
}
