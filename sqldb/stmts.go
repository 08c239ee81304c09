package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
)

// maxCachedStmts bounds how many query texts [DB.TxStmt] keeps prepared;
// past it a query is prepared for its transaction only. TxStmt's doc
// states the number.
const maxCachedStmts = 256

// MaxRowsPerInsert is the most rows one statement of [DB.InsertRows] writes.
const MaxRowsPerInsert = 256

// maxParamsPerInsert bounds the parameters of one InsertRows statement,
// below SQLite's 32,766 (SQLITE_MAX_VARIABLE_NUMBER since 3.32) and
// PostgreSQL's 65,535.
const maxParamsPerInsert = 30000

// stmtCache is the DB's statements kept prepared, by query text (rebound).
type stmtCache struct {
	mu      sync.Mutex
	stmts   map[string]*sql.Stmt
	pending map[string]bool // being prepared in the background
	closed  bool
}

// TxStmt returns query (written with `?` placeholders, rebound here)
// prepared for use in tx, a transaction of db. The statement is prepared
// once per DB and query text and kept until [DB.Close] (database/sql
// prepares it again on each pool connection it runs on, once), so that a
// statement run in many transactions is parsed and planned once: on SQLite
// the parse of a multi-row INSERT costs about as much as its execution. The
// first use of a text prepares it for tx alone and, on another goroutine,
// for the DB: that needs a pool connection of its own, which tx's must not
// wait for (a pool of one connection, or one whose connections all wait on
// tx's locks, would never give one). A DB keeps at most 256 texts prepared:
// past them, a new text is prepared for its transaction only, on each use.
// The returned statement belongs to tx: it is closed when tx ends; do not
// close it. Errors are the prepare's (a syntax error, a closed DB). Safe for
// concurrent use. Meant for statements whose plan does not depend on the
// data, such as INSERT ... VALUES: a statement kept prepared on PostgreSQL
// may keep a generic plan made while its tables were small (a SELECT by =
// ANY of keys was seen to keep a sequential scan: 15.8 ms a call;
// docs/benchmarks.md, "PostgreSQL's CPU per order at 1,000/s").
func (db *DB) TxStmt(ctx context.Context, tx *sql.Tx, query string) (*sql.Stmt, error) {
	query = db.Rebind(query)
	c := &db.stmts
	c.mu.Lock()
	st, ok := c.stmts[query]
	if !ok && !c.closed && !c.pending[query] && len(c.stmts)+len(c.pending) < maxCachedStmts {
		if c.pending == nil {
			c.pending = map[string]bool{}
		}
		c.pending[query] = true
		go db.keepStmt(query)
	}
	c.mu.Unlock()
	if !ok {
		return tx.PrepareContext(ctx, query)
	}
	return tx.StmtContext(ctx, st), nil
}

// keepStmt prepares query for the DB and keeps it, unless the DB closed
// meanwhile; a failed prepare keeps nothing (the next use tries again).
func (db *DB) keepStmt(query string) {
	st, err := db.DB.PrepareContext(context.Background(), query)
	c := &db.stmts
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pending, query)
	if err != nil {
		return
	}
	if c.closed {
		_ = st.Close()
		return
	}
	if c.stmts == nil {
		c.stmts = map[string]*sql.Stmt{}
	}
	c.stmts[query] = st
}

// closeStmts closes the kept statements; TxStmt keeps none after it.
func (db *DB) closeStmts() {
	c := &db.stmts
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.stmts {
		_ = st.Close()
	}
	c.stmts, c.closed = nil, true
}

// InsertRows writes rows into tx with multi-row INSERT statements
// `head (?, ..., ?), (?, ..., ?) tail`, where head is `INSERT INTO t (c1,
// ..., cN) VALUES` and tail is "" or a clause such as ` ON CONFLICT (k) DO
// NOTHING`. args holds the rows one after another, cols values each
// (len(args) a multiple of cols). The statements have a few fixed shapes,
// kept prepared ([DB.TxStmt]): chunks of MaxRowsPerInsert rows (fewer when
// cols x MaxRowsPerInsert would pass 30,000 parameters), then of the powers
// of two that make up the rest, so a batch of n rows runs at most
// n/MaxRowsPerInsert + 8 statements and no new text is parsed for a new n.
// The rows are inserted in the order given. It returns the first failing
// statement's error with head and its row count; an error for cols < 1 or a
// ragged args. Nothing is written for no rows.
func (db *DB) InsertRows(ctx context.Context, tx *sql.Tx, head, tail string, cols int, args []any) error {
	return db.insertRows(ctx, tx, head, tail, cols, args, nil)
}

// InsertRowsReturning is InsertRows for a tail with a RETURNING clause
// (` ON CONFLICT (k) DO NOTHING RETURNING k`: SQLite 3.35+, PostgreSQL):
// scan is called once for each row returned, with rows positioned on it
// (rows.Scan), in the order the database returns them; an error of scan
// stops the insert and is returned wrapped (errors.Is finds it).
func (db *DB) InsertRowsReturning(ctx context.Context, tx *sql.Tx, head, tail string, cols int, args []any, scan func(rows *sql.Rows) error) error {
	if scan == nil {
		return fmt.Errorf("sqldb: insert rows: %s: a nil scan", head)
	}
	return db.insertRows(ctx, tx, head, tail, cols, args, scan)
}

func (db *DB) insertRows(ctx context.Context, tx *sql.Tx, head, tail string, cols int, args []any, scan func(rows *sql.Rows) error) error {
	if cols < 1 || len(args)%cols != 0 {
		return fmt.Errorf("sqldb: insert rows: %d values for rows of %d columns", len(args), cols)
	}
	most := MaxRowsPerInsert
	for most > 1 && most*cols > maxParamsPerInsert {
		most /= 2
	}
	for rows := len(args) / cols; rows > 0; {
		n := most
		for n > rows {
			n /= 2
		}
		st, err := db.TxStmt(ctx, tx, insertText(head, tail, cols, n))
		if err != nil {
			return fmt.Errorf("sqldb: insert rows: %s (%d rows): prepare: %w", head, n, err)
		}
		if scan == nil {
			if _, err := st.ExecContext(ctx, args[:n*cols]...); err != nil {
				return fmt.Errorf("sqldb: insert rows: %s (%d rows): %w", head, n, err)
			}
		} else if err := queryEach(ctx, st, args[:n*cols], scan); err != nil {
			return fmt.Errorf("sqldb: insert rows: %s (%d rows): %w", head, n, err)
		}
		args, rows = args[n*cols:], rows-n
	}
	return nil
}

// queryEach runs st with args and calls scan on each row it returns.
func queryEach(ctx context.Context, st *sql.Stmt, args []any, scan func(rows *sql.Rows) error) error {
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	if err := rows.Close(); err != nil {
		return err
	}
	return rows.Err()
}

// insertText is the INSERT of n rows of cols columns.
func insertText(head, tail string, cols, n int) string {
	row := "(?" + strings.Repeat(", ?", cols-1) + ")"
	var q strings.Builder
	q.Grow(len(head) + 1 + n*(len(row)+2) + len(tail))
	q.WriteString(head)
	q.WriteByte(' ')
	for i := range n {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString(row)
	}
	q.WriteString(tail)
	return q.String()
}
