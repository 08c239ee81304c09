package store

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// SchemaVersion is the highest migration version [Migrate] applies: the
// version of the schema this build of Ordercast expects.
const SchemaVersion = 6

// migration is one versioned schema change. Its statements are written once
// for both dialects with two placeholders: {{ID}} for an auto-increment
// BIGINT primary key column type and {{BLOB}} for a binary column type.
// What one dialect cannot say like the other goes in dialectStmts, run after
// stmts on that dialect only.
//
// expandOnly marks a change that builds knowing only earlier versions keep
// working with: it adds tables, nullable columns, columns with defaults or
// indexes, and drops, renames or tightens nothing those builds read or
// write. Migrate records it in schema_migrations.expand_only, so that an
// older build can tell whether it may run against the newer schema (see
// [Migrate]). A change that is not expand-only (a contract step: a
// dropped column, a new NOT NULL without default, ...) makes older builds
// refuse to start, so roll it out only once no older build runs.
type migration struct {
	version    int
	name       string
	expandOnly bool
	stmts      []string
	// dialectStmts are statements of one dialect, run after stmts.
	dialectStmts map[Dialect][]string
}

// expandOnlyColumnVersion is the migration that adds
// schema_migrations.expand_only; versions before it are recorded without.
const expandOnlyColumnVersion = 3

// migrations are applied in order; a released one is never edited, only
// followed by a new one.
var migrations = []migration{
	{version: 1, name: "initial schema", stmts: []string{
		// checkout's product catalog; prices in thousandths of GBP.
		`CREATE TABLE IF NOT EXISTS catalog (
			stock_code       TEXT PRIMARY KEY,
			description      TEXT NOT NULL,
			unit_price_milli BIGINT NOT NULL
		)`,
		// checkout's Idempotency-Key records: one per key; payload is the
		// encoded event to re-send while status is 'pending'.
		`CREATE TABLE IF NOT EXISTS checkout_requests (
			idempotency_key TEXT PRIMARY KEY,
			request_hash    TEXT NOT NULL,
			order_id        TEXT NOT NULL,
			event_id        TEXT NOT NULL,
			status          TEXT NOT NULL CHECK (status IN ('pending', 'published')),
			payload         {{BLOB}},
			response_status INTEGER,
			response_body   TEXT,
			created_at      BIGINT NOT NULL,
			published_at    BIGINT
		)`,
		`CREATE INDEX IF NOT EXISTS checkout_requests_pending
			ON checkout_requests (created_at) WHERE status = 'pending'`,
		// the orders service's copy of each order.
		`CREATE TABLE IF NOT EXISTS orders (
			order_id    TEXT PRIMARY KEY,
			customer_id TEXT,
			country     TEXT,
			total_milli BIGINT NOT NULL,
			line_count  INTEGER NOT NULL,
			reference   TEXT,
			created_at  BIGINT NOT NULL,
			stored_at   BIGINT NOT NULL
		)`,
		`CREATE INDEX IF NOT EXISTS orders_customer ON orders (customer_id)`,
		`CREATE TABLE IF NOT EXISTS order_lines (
			order_id         TEXT NOT NULL REFERENCES orders (order_id) DEFERRABLE INITIALLY DEFERRED,
			line_no          INTEGER NOT NULL,
			stock_code       TEXT NOT NULL,
			description      TEXT,
			quantity         BIGINT NOT NULL,
			unit_price_milli BIGINT NOT NULL,
			line_total_milli BIGINT NOT NULL,
			PRIMARY KEY (order_id, line_no)
		)`,
		// status milestones of an order, written by whichever service sees
		// them, in any order (no foreign key to orders on purpose).
		`CREATE TABLE IF NOT EXISTS order_status (
			order_id TEXT NOT NULL,
			kind     TEXT NOT NULL,
			detail   TEXT,
			at       BIGINT NOT NULL,
			PRIMARY KEY (order_id, kind)
		)`,
		`CREATE TABLE IF NOT EXISTS wallets (
			customer_id   TEXT PRIMARY KEY,
			opening_milli BIGINT NOT NULL,
			balance_milli BIGINT NOT NULL
		)`,
		`CREATE TABLE IF NOT EXISTS payments (
			order_id     TEXT PRIMARY KEY,
			customer_id  TEXT,
			status       TEXT NOT NULL,
			method       TEXT NOT NULL,
			amount_milli BIGINT NOT NULL,
			reason       TEXT,
			processed_at BIGINT NOT NULL
		)`,
		// one row per wallet debit. Deliberately not unique on order_id: an
		// invariant check counts rows per order to detect a double charge.
		`CREATE TABLE IF NOT EXISTS wallet_ledger (
			id           {{ID}},
			customer_id  TEXT NOT NULL,
			order_id     TEXT NOT NULL,
			amount_milli BIGINT NOT NULL,
			created_at   BIGINT NOT NULL
		)`,
		`CREATE INDEX IF NOT EXISTS wallet_ledger_order ON wallet_ledger (order_id)`,
		`CREATE INDEX IF NOT EXISTS wallet_ledger_customer ON wallet_ledger (customer_id)`,
		// the notification sink; notification_id is stable per (order, kind).
		`CREATE TABLE IF NOT EXISTS notifications (
			notification_id TEXT PRIMARY KEY,
			order_id        TEXT NOT NULL,
			kind            TEXT NOT NULL,
			customer_id     TEXT,
			body            TEXT,
			created_at      BIGINT NOT NULL
		)`,
		`CREATE INDEX IF NOT EXISTS notifications_order ON notifications (order_id)`,
		// package inbox: one row per (consumer group, event id) applied.
		// The inbox and outbox tables are written out here rather than
		// taken from inbox.Schema and outbox.Schema: a released migration
		// never changes, and those describe the runtime's current layout
		// (the inbox's digest column came later, as migration 4).
		// TestRuntimeMigrateMatchesOrderSchema keeps the two equal.
		`CREATE TABLE IF NOT EXISTS inbox (
			consumer_group TEXT NOT NULL,
			event_id       TEXT NOT NULL,
			topic          TEXT NOT NULL,
			"partition"    INTEGER NOT NULL,
			"offset"       BIGINT NOT NULL,
			processed_at   BIGINT NOT NULL,
			PRIMARY KEY (consumer_group, event_id)
		)`,
		// package outbox: records to publish, relayed in id order.
		`CREATE TABLE IF NOT EXISTS outbox (
			id         {{ID}},
			topic      TEXT NOT NULL,
			record_key {{BLOB}},
			value      {{BLOB}},
			headers    TEXT,
			created_at BIGINT NOT NULL,
			sent_at    BIGINT
		)`,
		`CREATE INDEX IF NOT EXISTS outbox_unsent ON outbox (id) WHERE sent_at IS NULL`,
	}},
	{version: 2, name: "index checkout requests by order id", expandOnly: true, stmts: []string{
		`CREATE INDEX IF NOT EXISTS checkout_requests_order ON checkout_requests (order_id)`,
	}},
	// orderCreated v2's channel, stored by the orders service; NULL for
	// orders stored before, for v1 events and for an older build's inserts.
	// expand_only records, from here on, which versions older builds may
	// run against.
	{version: 3, name: "orders.channel; schema_migrations.expand_only", expandOnly: true, stmts: []string{
		`ALTER TABLE orders ADD COLUMN channel TEXT`,
		`ALTER TABLE schema_migrations ADD COLUMN expand_only INTEGER NOT NULL DEFAULT 0`,
	}},
	// The digest of the event that claimed an inbox row (package inbox), so
	// that an event id re-sent with other content is refused rather than
	// skipped as a redelivery; NULL for rows written before and by older
	// builds, which are not compared.
	{version: 4, name: "inbox.digest", expandOnly: true, stmts: []string{
		`ALTER TABLE inbox ADD COLUMN digest TEXT`,
	}},
	// payments.seq: a number per payment row, increasing in the order the
	// rows are inserted, so in the order a batch transaction applied its
	// payments (they share one commit timestamp on PostgreSQL). The crash
	// harness's wallet replay orders by (commit order, seq). Existing rows
	// are numbered in their stored order; an older build's inserts, which
	// do not name the column, are numbered too (PostgreSQL: the identity's
	// default; SQLite, which cannot add a column with a non-constant
	// default: a trigger taking the highest seq + 1, safe under SQLite's one
	// writer at a time, and unlike the rowid kept by VACUUM).
	{version: 5, name: "payments.seq", expandOnly: true, dialectStmts: map[Dialect][]string{
		Postgres: {
			`ALTER TABLE payments ADD COLUMN seq BIGINT GENERATED ALWAYS AS IDENTITY`,
			`CREATE INDEX IF NOT EXISTS payments_seq ON payments (seq)`,
		},
		SQLite: {
			`ALTER TABLE payments ADD COLUMN seq INTEGER`,
			`UPDATE payments SET seq = rowid`,
			`CREATE INDEX IF NOT EXISTS payments_seq ON payments (seq)`,
			`CREATE TRIGGER IF NOT EXISTS payments_seq AFTER INSERT ON payments FOR EACH ROW WHEN NEW.seq IS NULL
			BEGIN
				UPDATE payments SET seq = (SELECT COALESCE(MAX(seq), 0) + 1 FROM payments) WHERE rowid = NEW.rowid;
			END`,
		},
	}},
	// The W3C trace context of the span an outbox row was enqueued in
	// (package outbox, Message.TraceContext), which the relay's record
	// carries so that its trace continues; NULL for rows written before,
	// without tracing and by older builds.
	{version: 6, name: "outbox.trace_context", expandOnly: true, stmts: []string{
		`ALTER TABLE outbox ADD COLUMN trace_context TEXT`,
	}},
}

// schemaSQL returns stmt with the dialect placeholders filled in.
func schemaSQL(db *DB, stmt string) string {
	return strings.NewReplacer("{{ID}}", db.IdentityType(), "{{BLOB}}", db.BlobType()).Replace(stmt)
}

// Migrate brings the schema up to SchemaVersion: it creates the
// schema_migrations(version, applied_at, expand_only) table if missing and
// applies, in order, each migration whose version is not recorded there,
// recording it. Running it again, or from several processes at once, is
// safe: it all happens in one transaction ([sqldb.DB.InSchemaTx]: on
// PostgreSQL under the advisory lock sqldb.SchemaLockKey, on SQLite under the
// write lock), so a failure leaves the schema as it
// was and a concurrent Migrate waits and then finds nothing to do. It returns
// the first failing statement's error, wrapped with its migration version.
//
// A database a newer build has migrated past SchemaVersion (an instance of
// the previous release started during a rolling upgrade) is accepted when
// every version above SchemaVersion is recorded as expand-only: the older
// build keeps reading and writing the columns it knows, and the new ones
// stay NULL or at their defaults in its rows. Otherwise Migrate changes
// nothing and returns an error wrapping ErrSchemaTooNew that names the
// versions that are not expand-only. (Builds before SchemaVersion 3 did not
// check: they ignored newer versions.)
//
// It creates the inbox and outbox tables too (the same columns and index
// inbox.Migrate and outbox.Migrate create), so a database it manages needs
// neither of those. Do not run it on a database whose inbox table
// inbox.Migrate created: migration 4 would fail adding inbox.digest again.
func Migrate(ctx context.Context, db *DB) error {
	return migrate(ctx, db, migrations)
}

// migrate is Migrate with the migrations a build knows, ms (sorted by
// version); tests run it with a prefix of migrations to act as an older build.
func migrate(ctx context.Context, db *DB, ms []migration) error {
	known := 0
	if len(ms) > 0 {
		known = ms[len(ms)-1].version
	}
	return db.InSchemaTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version    BIGINT PRIMARY KEY,
			applied_at BIGINT NOT NULL
		)`); err != nil {
			return fmt.Errorf("store: migrate: create schema_migrations: %w", err)
		}
		applied, err := appliedVersions(ctx, tx)
		if err != nil {
			return err
		}
		for _, m := range ms {
			if applied[m.version] {
				continue
			}
			for i, stmt := range append(m.stmts[:len(m.stmts):len(m.stmts)], m.dialectStmts[db.Dialect]...) {
				if _, err := tx.ExecContext(ctx, schemaSQL(db, stmt)); err != nil {
					return fmt.Errorf("store: migrate: version %d (%s) statement %d: %w", m.version, m.name, i+1, err)
				}
			}
			q, args := `INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`, []any{m.version, time.Now().UnixMilli()}
			if m.version >= expandOnlyColumnVersion {
				q, args = `INSERT INTO schema_migrations (version, applied_at, expand_only) VALUES (?, ?, ?)`, append(args, boolInt(m.expandOnly))
			}
			if _, err := tx.ExecContext(ctx, db.Rebind(q), args...); err != nil {
				return fmt.Errorf("store: migrate: record version %d: %w", m.version, err)
			}
		}
		return checkNewer(ctx, db, tx, known)
	})
}

// appliedVersions reads the versions recorded in schema_migrations.
func appliedVersions(ctx context.Context, tx *sql.Tx) (map[int]bool, error) {
	applied := map[int]bool{}
	rows, err := tx.QueryContext(ctx, `SELECT version FROM schema_migrations`)
	if err != nil {
		return nil, fmt.Errorf("store: migrate: read versions: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, fmt.Errorf("store: migrate: read versions: %w", err)
		}
		applied[v] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: migrate: read versions: %w", err)
	}
	return applied, nil
}

// checkNewer returns an error wrapping ErrSchemaTooNew when a version above
// known is recorded without expand_only. A build that knows fewer versions
// than expandOnlyColumnVersion checks nothing, as those builds did (it may
// not even have the column).
func checkNewer(ctx context.Context, db *DB, tx *sql.Tx, known int) error {
	if known < expandOnlyColumnVersion {
		return nil
	}
	rows, err := tx.QueryContext(ctx, db.Rebind(`SELECT version, expand_only FROM schema_migrations WHERE version > ? ORDER BY version`), known)
	if err != nil {
		return fmt.Errorf("store: migrate: read newer versions: %w", err)
	}
	defer rows.Close()
	var newest int
	var contract []string
	for rows.Next() {
		var v, expand int
		if err := rows.Scan(&v, &expand); err != nil {
			return fmt.Errorf("store: migrate: read newer versions: %w", err)
		}
		newest = v
		if expand == 0 {
			contract = append(contract, strconv.Itoa(v))
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("store: migrate: read newer versions: %w", err)
	}
	if len(contract) > 0 {
		return fmt.Errorf("store: migrate: %w: the database is at schema version %d, this build knows up to %d, and version(s) %s are not expand-only; run a build with SchemaVersion >= %d",
			ErrSchemaTooNew, newest, known, strings.Join(contract, ", "), newest)
	}
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
