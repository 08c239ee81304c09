package store

// A minimal database/sql driver over pgx/v5's native connection.
//
// Why not github.com/jackc/pgx/v5/stdlib: that package imports pgxpool, which
// needs github.com/jackc/puddle/v2 and golang.org/x/sync, and the module's
// go.sum has neither, so importing it breaks the build; go.mod is not this
// package's to change. When go.mod gains those two modules, replace this file
// by `_ "github.com/jackc/pgx/v5/stdlib"` and sql.Open("pgx", dsn) in
// openPostgres: nothing else depends on it.
//
// It covers what Ordercast's SQL needs: Exec, Query, transactions with an
// isolation level and read-only mode, ping, and session reset, with the
// values pgx decodes converted to the driver.Value types (int64, float64,
// bool, []byte, string, time.Time, nil). Arguments go to pgx unconverted, as
// stdlib does, so driver.Valuer and pgx's own types work.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgConnector opens pgx connections for a database/sql pool.
type pgConnector struct{ cfg *pgx.ConnConfig }

func newPGConnector(dsn string) (*pgConnector, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	return &pgConnector{cfg: cfg}, nil
}

func (c *pgConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, c.cfg.Copy())
	if err != nil {
		return nil, err
	}
	return &pgConn{conn: conn}, nil
}

func (c *pgConnector) Driver() driver.Driver { return pgDriver{} }

// pgDriver is only what driver.Connector.Driver must return.
type pgDriver struct{}

func (pgDriver) Open(dsn string) (driver.Conn, error) {
	c, err := newPGConnector(dsn)
	if err != nil {
		return nil, err
	}
	return c.Connect(context.Background())
}

// pgConn is one connection; database/sql uses it from one goroutine at a
// time.
type pgConn struct{ conn *pgx.Conn }

var (
	_ driver.ConnBeginTx        = (*pgConn)(nil)
	_ driver.ExecerContext      = (*pgConn)(nil)
	_ driver.QueryerContext     = (*pgConn)(nil)
	_ driver.ConnPrepareContext = (*pgConn)(nil)
	_ driver.Pinger             = (*pgConn)(nil)
	_ driver.SessionResetter    = (*pgConn)(nil)
	_ driver.Validator          = (*pgConn)(nil)
	_ driver.NamedValueChecker  = (*pgConn)(nil)
)

func (c *pgConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

// PrepareContext returns a statement that runs query through the
// connection; pgx prepares and caches it on first use.
func (c *pgConn) PrepareContext(_ context.Context, query string) (driver.Stmt, error) {
	if c.conn.IsClosed() {
		return nil, driver.ErrBadConn
	}
	return &pgStmt{c: c, query: query}, nil
}

func (c *pgConn) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.conn.Close(ctx)
}

func (c *pgConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *pgConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if c.conn.IsClosed() {
		return nil, driver.ErrBadConn
	}
	var o pgx.TxOptions
	switch sql.IsolationLevel(opts.Isolation) {
	case sql.LevelDefault:
	case sql.LevelReadUncommitted:
		o.IsoLevel = pgx.ReadUncommitted
	case sql.LevelReadCommitted:
		o.IsoLevel = pgx.ReadCommitted
	case sql.LevelRepeatableRead, sql.LevelSnapshot:
		o.IsoLevel = pgx.RepeatableRead
	case sql.LevelSerializable:
		o.IsoLevel = pgx.Serializable
	default:
		return nil, fmt.Errorf("store: postgres: unsupported isolation level %v", sql.IsolationLevel(opts.Isolation))
	}
	if opts.ReadOnly {
		o.AccessMode = pgx.ReadOnly
	}
	tx, err := c.conn.BeginTx(ctx, o)
	if err != nil {
		return nil, err
	}
	return pgTx{tx: tx}, nil
}

func (c *pgConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if c.conn.IsClosed() {
		return nil, driver.ErrBadConn
	}
	tag, err := c.conn.Exec(ctx, query, namedArgs(args)...)
	if err != nil {
		return nil, err
	}
	return pgResult(tag.RowsAffected()), nil
}

func (c *pgConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if c.conn.IsClosed() {
		return nil, driver.ErrBadConn
	}
	rows, err := c.conn.Query(ctx, query, namedArgs(args)...)
	if err != nil {
		return nil, err
	}
	return &pgRows{rows: rows}, nil
}

func (c *pgConn) Ping(ctx context.Context) error {
	if c.conn.IsClosed() {
		return driver.ErrBadConn
	}
	return c.conn.Ping(ctx)
}

// ResetSession discards a closed connection, or one left inside a
// transaction, before the pool hands it out again.
func (c *pgConn) ResetSession(context.Context) error {
	if c.conn.IsClosed() || c.conn.PgConn().TxStatus() != 'I' {
		return driver.ErrBadConn
	}
	return nil
}

func (c *pgConn) IsValid() bool { return !c.conn.IsClosed() }

// CheckNamedValue passes every argument to pgx unconverted: pgx encodes
// driver.Valuer and its own types natively.
func (c *pgConn) CheckNamedValue(*driver.NamedValue) error { return nil }

func namedArgs(nv []driver.NamedValue) []any {
	args := make([]any, len(nv))
	for i, v := range nv {
		args[i] = v.Value
	}
	return args
}

type pgStmt struct {
	c     *pgConn
	query string
}

func (s *pgStmt) Close() error  { return nil }
func (s *pgStmt) NumInput() int { return -1 }

func (s *pgStmt) Exec(args []driver.Value) (driver.Result, error) {
	return s.c.ExecContext(context.Background(), s.query, valuesToNamed(args))
}

func (s *pgStmt) Query(args []driver.Value) (driver.Rows, error) {
	return s.c.QueryContext(context.Background(), s.query, valuesToNamed(args))
}

func (s *pgStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	return s.c.ExecContext(ctx, s.query, args)
}

func (s *pgStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	return s.c.QueryContext(ctx, s.query, args)
}

func valuesToNamed(args []driver.Value) []driver.NamedValue {
	nv := make([]driver.NamedValue, len(args))
	for i, a := range args {
		nv[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
	}
	return nv
}

type pgTx struct{ tx pgx.Tx }

func (t pgTx) Commit() error   { return t.tx.Commit(context.Background()) }
func (t pgTx) Rollback() error { return t.tx.Rollback(context.Background()) }

type pgResult int64

func (r pgResult) LastInsertId() (int64, error) {
	return 0, errors.New("store: postgres: LastInsertId is not supported; use RETURNING")
}
func (r pgResult) RowsAffected() (int64, error) { return int64(r), nil }

type pgRows struct {
	rows pgx.Rows
	cols []string
}

func (r *pgRows) Columns() []string {
	if r.cols == nil {
		fds := r.rows.FieldDescriptions()
		r.cols = make([]string, len(fds))
		for i, fd := range fds {
			r.cols[i] = fd.Name
		}
	}
	return r.cols
}

func (r *pgRows) Close() error {
	r.rows.Close()
	return r.rows.Err()
}

func (r *pgRows) Next(dest []driver.Value) error {
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return io.EOF
	}
	vals, err := r.rows.Values()
	if err != nil {
		return err
	}
	for i, v := range vals {
		if dest[i], err = driverValue(v); err != nil {
			return fmt.Errorf("store: postgres: column %d: %w", i, err)
		}
	}
	return nil
}

// driverValue converts a value decoded by pgx to a driver.Value.
func driverValue(v any) (driver.Value, error) {
	switch x := v.(type) {
	case nil, int64, float64, bool, string, time.Time:
		return x, nil
	case []byte:
		return append([]byte(nil), x...), nil
	case int32:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case int8:
		return int64(x), nil
	case int:
		return int64(x), nil
	case uint32:
		return int64(x), nil
	case float32:
		return float64(x), nil
	case driver.Valuer:
		return x.Value()
	case fmt.Stringer:
		return x.String(), nil
	default:
		return fmt.Sprint(x), nil
	}
}
