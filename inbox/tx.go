package inbox

import (
	"context"
	"database/sql"
	"fmt"
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
// dialect only (db.Rebind); nothing runs outside tx.
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
	if group == "" || eventID == "" {
		return false, fmt.Errorf("inbox: group %q and event id %q must not be empty", group, eventID)
	}
	digest := sql.NullString{String: meta.Digest, Valid: meta.Digest != ""}
	res, err := tx.ExecContext(ctx, db.Rebind(insertSQL), group, eventID, meta.Topic, meta.Partition, meta.Offset, time.Now().UnixMilli(), digest)
	if err != nil {
		return false, fmt.Errorf("inbox: insert %s/%s: %w", group, eventID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("inbox: insert %s/%s: rows affected: %w", group, eventID, err)
	}
	if n > 0 {
		return true, fn(ctx, tx)
	}
	if digest.Valid {
		var first Meta
		var firstDigest sql.NullString
		if err := tx.QueryRowContext(ctx, db.Rebind(firstSQL), group, eventID).Scan(&first.Topic, &first.Partition, &first.Offset, &firstDigest); err != nil {
			return false, fmt.Errorf("inbox: read %s/%s: %w", group, eventID, err)
		}
		if firstDigest.Valid && firstDigest.String != digest.String {
			first.Digest = firstDigest.String
			return false, &ConflictError{Group: group, EventID: eventID, First: first}
		}
	}
	return false, nil
}
