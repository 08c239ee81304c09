// Package drivers opens a database by DSN with bundled database/sql
// drivers, SQLite (embedded, pure Go, modernc.org/sqlite) or PostgreSQL
// (pgx's github.com/jackc/pgx/v5/stdlib), with connection settings tuned for
// the inbox and outbox, and returns it as a [sqldb.DB]. Importing it links
// both drivers; a program that brings its own driver opens the database
// itself and wraps it with sqldb.New instead.
package drivers

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	_ "modernc.org/sqlite"             // registers the "sqlite" database/sql driver

	"github.com/ordercast/ordercast/sqldb"
)

// pgx's sentinel for an operation on a connection already closed (the server
// ended the session) is neither a net.Error nor driver.ErrBadConn.
func init() {
	sqldb.RegisterConnectionLost(func(err error) bool { return errors.Is(err, pgconn.ErrConnClosed) })
}

// SQLite connection settings applied by [Open] to every pooled connection
// (through the DSN, so a connection the pool opens later gets them too), unless
// the DSN sets the same pragma itself.
const (
	// SQLiteBusyTimeout is how long a statement waits for another
	// connection's (or process's) write lock before failing with SQLITE_BUSY;
	// [sqldb.DB.InTx] then retries the whole transaction.
	SQLiteBusyTimeout = 10 * time.Second
	// SQLiteMaxOpenConns is the pool size for a file database. WAL mode lets
	// these connections read concurrently with one writer; writers are
	// serialised (see sqldb.DB.InTx) and all run on one of them, kept for
	// them, so more connections would only add memory (each has its own page
	// cache).
	SQLiteMaxOpenConns = 4
	// PostgresMaxOpenConns is the default pool size for PostgreSQL. Change it
	// with SetMaxOpenConns on the returned DB after [Open] if a deployment needs more.
	PostgresMaxOpenConns = 16
)

// Open opens and pings the database named by dsn:
//
//   - "postgres://..." or "postgresql://...": PostgreSQL through pgx (see
//     github.com/jackc/pgx/v5/stdlib); the DSN is parsed by pgx unchanged (pgx
//     keywords and run-time parameters such as search_path are accepted). The pool is limited
//     to PostgresMaxOpenConns connections.
//   - "sqlite:PATH", "sqlite://PATH", "file:PATH?..." or a bare PATH: a SQLite
//     file, created if missing (its directory must exist). Query parameters of
//     modernc.org/sqlite (_pragma=..., _txlock=..., ...) are kept and win over
//     the defaults below. ":memory:" (or mode=memory) is accepted for
//     throw-away use; it gets a single connection, since each connection to
//     it would otherwise see its own empty database.
//
// Every SQLite connection gets: journal_mode=WAL (readers do not block the
// writer nor it them), synchronous=NORMAL (durable across a process crash; in
// WAL mode a power loss can lose only the last transactions, never corrupt
// the file), busy_timeout=10000 ms, foreign_keys=ON, wal_autocheckpoint=0
// for a file (checkpoints run in the background instead, every
// SQLiteCheckpointInterval while there are writes: see
// sqldb.DB.CheckpointInBackground; a DSN that sets wal_autocheckpoint keeps
// SQLite's own and gets none), and _txlock=immediate so
// that every read-write transaction takes the write lock at BEGIN. That last
// one matters: a deferred transaction that reads and then writes must upgrade
// its lock, and two such transactions deadlock, one of them failing at once
// with SQLITE_BUSY whatever busy_timeout says; with BEGIN IMMEDIATE they queue
// under busy_timeout instead. (A transaction begun with
// sql.TxOptions{ReadOnly: true} is a plain deferred BEGIN: it reads a
// snapshot without taking the write lock.) The pool has SQLiteMaxOpenConns
// connections: WAL gives concurrent reads, and more connections than that
// would only wait for the single write lock; in-process writers queue in
// [sqldb.DB.InTx] instead of polling the lock, which measured faster than either a
// single connection or four connections contending on busy_timeout.
//
// Open creates no tables. It returns an error if
// the DSN is empty or malformed, the driver cannot open the database, the
// ping fails, or a SQLite file database did not switch to WAL mode. The
// caller must Close the DB.
func Open(ctx context.Context, dsn string) (*sqldb.DB, error) {
	dsn = strings.TrimSpace(dsn)
	switch {
	case dsn == "":
		return nil, errors.New("sqldb: open: empty DSN")
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return openPostgres(ctx, dsn)
	case strings.HasPrefix(dsn, "sqlite://"):
		return openSQLite(ctx, strings.TrimPrefix(dsn, "sqlite://"))
	case strings.HasPrefix(dsn, "sqlite:"):
		return openSQLite(ctx, strings.TrimPrefix(dsn, "sqlite:"))
	default:
		return openSQLite(ctx, dsn)
	}
}

func openPostgres(ctx context.Context, dsn string) (*sqldb.DB, error) {
	sqlDB, err := sql.Open("pgx", dsn) // pgx's database/sql driver (github.com/jackc/pgx/v5/stdlib)
	if err != nil {
		return nil, fmt.Errorf("sqldb: open postgres: %w", err)
	}
	sqlDB.SetMaxOpenConns(PostgresMaxOpenConns)
	sqlDB.SetMaxIdleConns(PostgresMaxOpenConns)
	sqlDB.SetConnMaxIdleTime(5 * time.Minute)
	if err := sqlDB.PingContext(ctx); err != nil {
		_ = sqlDB.Close()
		return nil, fmt.Errorf("sqldb: open postgres: ping: %w", err)
	}
	return sqldb.New(sqlDB, sqldb.Postgres)
}

// sqliteDefaults are the pragmas every SQLite connection gets unless the DSN
// sets them; the key is the pragma name as the driver's shorthand parameters
// spell it too.
var sqliteDefaults = []struct {
	name, pragma string
	aliases      []string
}{
	{"busy_timeout", "busy_timeout(" + strconv.FormatInt(SQLiteBusyTimeout.Milliseconds(), 10) + ")", []string{"_busy_timeout", "_timeout"}},
	{"journal_mode", "journal_mode(WAL)", []string{"_journal_mode", "_journal"}},
	{"synchronous", "synchronous(NORMAL)", []string{"_synchronous", "_sync"}},
	{"foreign_keys", "foreign_keys(1)", []string{"_foreign_keys", "_fk"}},
	// Checkpoints run on a goroutine of their own instead (see
	// SQLiteCheckpointInterval); not for an in-memory database.
	{"wal_autocheckpoint", "wal_autocheckpoint(0)", nil},
}

// SQLiteCheckpointInterval is how often [Open]'s background checkpointer
// runs `PRAGMA wal_checkpoint(PASSIVE)` on a SQLite file database while
// transactions are being committed (see sqldb.DB.CheckpointInBackground):
// SQLite's own automatic checkpoint (every 1,000 WAL pages) ran inside a
// writer's COMMIT, holding the write lock every other writer waited for.
const SQLiteCheckpointInterval = 200 * time.Millisecond

// sqliteDSN returns the modernc.org/sqlite DSN for name (a path or a file:
// URI, possibly with query parameters) with this package's defaults added, and
// whether it names an in-memory database, whether the caller set the
// journal mode, and whether checkpoints are to run in the background (a file
// database whose DSN does not set wal_autocheckpoint).
func sqliteDSN(name string) (dsn string, memory, ownJournal, bgCheckpoint bool, err error) {
	path, rawQuery, _ := strings.Cut(name, "?")
	if path == "" || path == "file:" {
		return "", false, false, false, errors.New("empty SQLite path")
	}
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return "", false, false, false, fmt.Errorf("SQLite DSN query: %w", err)
	}
	set := map[string]bool{}
	for _, p := range q["_pragma"] {
		n := strings.ToLower(strings.TrimSpace(p))
		if i := strings.IndexAny(n, "(= "); i >= 0 {
			n = n[:i]
		}
		set[n] = true
	}
	for _, d := range sqliteDefaults {
		for _, a := range d.aliases {
			if q.Has(a) {
				set[d.name] = true
			}
		}
	}
	memory = path == ":memory:" || path == "file::memory:" || q.Get("mode") == "memory"
	ownJournal = set["journal_mode"]
	for _, d := range sqliteDefaults {
		if set[d.name] || (memory && (d.name == "journal_mode" || d.name == "wal_autocheckpoint")) {
			continue
		}
		q.Add("_pragma", d.pragma)
	}
	if !q.Has("_txlock") {
		q.Set("_txlock", "immediate")
	}
	bgCheckpoint = !memory && !set["wal_autocheckpoint"]
	return path + "?" + q.Encode(), memory, ownJournal, bgCheckpoint, nil
}

func openSQLite(ctx context.Context, name string) (*sqldb.DB, error) {
	dsn, memory, ownJournal, bgCheckpoint, err := sqliteDSN(name)
	if err != nil {
		return nil, fmt.Errorf("sqldb: open sqlite: %w", err)
	}
	sqlDB, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqldb: open sqlite: %w", err)
	}
	conns := SQLiteMaxOpenConns
	if memory {
		conns = 1
	}
	sqlDB.SetMaxOpenConns(conns)
	sqlDB.SetMaxIdleConns(conns)
	// Keep connections: each has its own page cache and schema, and opening
	// one re-runs the pragmas.
	sqlDB.SetConnMaxLifetime(0)
	sqlDB.SetConnMaxIdleTime(0)
	if err := pingSQLite(ctx, sqlDB); err != nil {
		_ = sqlDB.Close()
		return nil, fmt.Errorf("sqldb: open sqlite %q: %w", name, err)
	}
	if !memory && !ownJournal {
		var mode string
		if err := sqlDB.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
			_ = sqlDB.Close()
			return nil, fmt.Errorf("sqldb: open sqlite %q: read journal_mode: %w", name, err)
		}
		if !strings.EqualFold(mode, "wal") {
			_ = sqlDB.Close()
			return nil, fmt.Errorf("sqldb: open sqlite %q: journal_mode is %q, want wal", name, mode)
		}
	}
	db, err := sqldb.New(sqlDB, sqldb.SQLite)
	if err != nil {
		_ = sqlDB.Close()
		return nil, err
	}
	if bgCheckpoint {
		onErr := func(err error) { slog.Warn("sqlite checkpoint failed; retrying", "db", name, "err", err) }
		if err := db.CheckpointInBackground(SQLiteCheckpointInterval, onErr); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("sqldb: open sqlite %q: %w", name, err)
		}
	}
	return db, nil
}

// pingSQLite opens the first connection, retrying while it fails with
// SQLITE_BUSY or SQLITE_LOCKED for at most SQLiteBusyTimeout. Opening a
// connection runs the pragmas, and switching a new file to WAL needs the
// exclusive lock: when several processes open the same new file at once,
// SQLite may return SQLITE_BUSY at once instead of calling the busy handler
// (it does so whenever waiting could deadlock; see
// https://sqlite.org/c3ref/busy_handler.html), so busy_timeout alone does
// not cover it.
func pingSQLite(ctx context.Context, sqlDB *sql.DB) error {
	deadline := time.Now().Add(SQLiteBusyTimeout)
	backoff := 5 * time.Millisecond
	for {
		err := sqlDB.PingContext(ctx)
		if err == nil || !sqldb.IsRetryable(err) || time.Now().After(deadline) {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}
