// Package orders is the orders service: consumer group "orders". It stores
// each order exactly once (the inbox row and the order rows in one database
// transaction), and records the order's later stages (paid or refused,
// shipment requested) as the other services report them on their topics,
// once each: an order_status row per (order_id, kind), whose key
// deduplicates a redelivered event without an inbox row
// (service.Event.ApplyOnce).
//
// orders.channel holds the event's channel (orderCreated v2), NULL when the
// event has none: a v1 event, or an instance whose Serde is pinned to v1
// (schema.WithVersion), which reads v2 events as v1 did.
package orders

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/schema"
	"github.com/ordercast/ordercast/ordersystem/service"
	"github.com/ordercast/ordercast/ordersystem/store"
	"github.com/ordercast/ordercast/processor"
)

// Topics are the topics the orders group consumes.
var Topics = []string{order.TopicOrderCreated, order.TopicPaymentProcessed, order.TopicShipmentRequested}

// Status kinds written to the order_status table.
const (
	StatusCreated           = "created"
	StatusPaid              = "paid"
	StatusPaymentRefused    = "payment_refused"
	StatusShipmentRequested = "shipment_requested"
)

// Service is the orders service's record handler. Safe for concurrent use.
type Service struct {
	DB     *store.DB
	Serde  *schema.Serde
	Logger *slog.Logger
	// Metrics, if set, counts the duplicates the inbox skipped.
	Metrics *service.Metrics
}

// Handle is the processor.Handler of the orders group. It returns a permanent
// error for a record that breaks its contract and a transient one for a
// database failure.
func (s *Service) Handle(ctx context.Context, r *kgo.Record) error {
	return service.Handle(ctx, s.DB, s.Metrics, s.Logger, order.GroupOrders, r, s.event)
}

// HandleBatch is the processor.BatchHandler of the orders group: the
// records' inbox rows and effects in one transaction (service.ProcessBatch),
// the effects as a few multi-row INSERTs (orders, lines, statuses) for the
// whole batch. Any record that fails (a contract violation included) fails
// the batch, and the runtime then handles its records one at a time with
// Handle.
func (s *Service) HandleBatch(ctx context.Context, recs []*kgo.Record) error {
	return service.HandleBatch(ctx, s.DB, s.Metrics, s.Logger, order.GroupOrders, recs, s.decode, s.storeAll)
}

// effect is what one event writes: an order (created), or a status.
type effect struct {
	created *order.OrderCreated
	status  []any // order_id, kind, detail, at
}

// storeAll writes the effects of the claimed events: every order, then
// every line, then every status, each kind in multi-row INSERTs of a few
// fixed shapes kept prepared (sqldb.DB.InsertRows), the rows' values in one
// flat slice per table.
func (s *Service) storeAll(ctx context.Context, tx *sql.Tx, effs []effect, claimed []bool) error {
	now := time.Now().UnixMilli()
	var nOrders, nLines, nStatus int
	for i, e := range effs {
		if !claimed[i] {
			continue
		}
		if e.created != nil {
			nOrders++
			nLines += len(e.created.Lines)
		}
		nStatus++
	}
	orderArgs := make([]any, 0, orderCols*nOrders)
	lineArgs := make([]any, 0, lineCols*nLines)
	statusArgs := make([]any, 0, statusCols*nStatus)
	for i, e := range effs {
		if !claimed[i] {
			continue
		}
		ev := e.created
		if ev == nil {
			statusArgs = append(statusArgs, e.status...)
			continue
		}
		orderArgs = append(orderArgs, ev.OrderID, nullIfEmpty(ev.CustomerID), ev.Country, int64(ev.Total), int64(len(ev.Lines)), ev.Reference,
			ev.CreatedAt.UnixMilli(), now, nullIfEmpty(ev.Channel))
		for n, l := range ev.Lines {
			lineArgs = append(lineArgs, ev.OrderID, int64(n+1), l.StockCode, l.Description, l.Quantity, int64(l.UnitPrice), int64(l.LineTotal))
		}
		statusArgs = append(statusArgs, ev.OrderID, StatusCreated, ev.Reference, now)
	}
	if err := s.DB.InsertRows(ctx, tx, insertOrders, "", orderCols, orderArgs); err != nil {
		return fmt.Errorf("orders: %w", err)
	}
	if err := s.DB.InsertRows(ctx, tx, insertLines, "", lineCols, lineArgs); err != nil {
		return fmt.Errorf("orders: %w", err)
	}
	// The status events deduplicate themselves by (order_id, kind)
	// (service.Event.ApplyOnce): one whose row the INSERT did not return
	// was there already (or came earlier in this batch).
	fresh, err := service.InsertReturning(ctx, tx, s.DB, insertStatuses, ` ON CONFLICT (order_id, kind) DO NOTHING RETURNING order_id, kind`,
		statusCols, statusArgs, 2)
	if err != nil {
		return fmt.Errorf("orders: %w", err)
	}
	for i, e := range effs {
		if claimed[i] && e.created == nil {
			claimed[i] = fresh.Take(e.status[0].(string), e.status[1].(string))
		}
	}
	return nil
}

// The heads of storeAll's INSERTs and their column counts.
const (
	insertOrders   = `INSERT INTO orders (order_id, customer_id, country, total_milli, line_count, reference, created_at, stored_at, channel) VALUES`
	orderCols      = 9
	insertLines    = `INSERT INTO order_lines (order_id, line_no, stock_code, description, quantity, unit_price_milli, line_total_milli) VALUES`
	lineCols       = 7
	insertStatuses = `INSERT INTO order_status (order_id, kind, detail, at) VALUES`
	statusCols     = 4
)

// event decodes r into the event to apply.
func (s *Service) event(ctx context.Context, r *kgo.Record) (service.Event, error) {
	ev, _, err := s.decode(ctx, r)
	return ev, err
}

// decode decodes r into the event to apply alone and the rows it writes in
// a batch.
func (s *Service) decode(ctx context.Context, r *kgo.Record) (service.Event, effect, error) {
	switch r.Topic {
	case order.TopicOrderCreated:
		ev := new(order.OrderCreated)
		if err := service.Decode(ctx, s.Serde, r, ev); err != nil {
			return service.Event{}, effect{}, err
		}
		return service.Event{ID: ev.EventID, Record: r, Apply: func(ctx context.Context, tx *sql.Tx) error {
			return s.store(ctx, tx, ev)
		}}, effect{created: ev}, nil
	case order.TopicPaymentProcessed:
		var ev order.PaymentProcessed
		if err := service.Decode(ctx, s.Serde, r, &ev); err != nil {
			return service.Event{}, effect{}, err
		}
		kind := StatusPaid
		if ev.Status == order.PaymentRefused {
			kind = StatusPaymentRefused
		}
		return s.status(r, ev.EventID, ev.OrderID, kind, ev.Reason, ev.ProcessedAt), effect{status: []any{ev.OrderID, kind, ev.Reason, ev.ProcessedAt.UnixMilli()}}, nil
	case order.TopicShipmentRequested:
		var ev order.ShipmentRequested
		if err := service.Decode(ctx, s.Serde, r, &ev); err != nil {
			return service.Event{}, effect{}, err
		}
		return s.status(r, ev.EventID, ev.OrderID, StatusShipmentRequested, ev.ShipmentID, ev.RequestedAt),
			effect{status: []any{ev.OrderID, StatusShipmentRequested, ev.ShipmentID, ev.RequestedAt.UnixMilli()}}, nil
	}
	return service.Event{}, effect{}, processor.Permanentf("orders: unexpected topic %q", r.Topic)
}

func (s *Service) store(ctx context.Context, tx *sql.Tx, ev *order.OrderCreated) error {
	now := time.Now().UnixMilli()
	if _, err := tx.ExecContext(ctx, s.DB.Rebind(`INSERT INTO orders (order_id, customer_id, country, total_milli, line_count, reference, created_at, stored_at, channel)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`), ev.OrderID, nullIfEmpty(ev.CustomerID), ev.Country, int64(ev.Total), len(ev.Lines), ev.Reference,
		ev.CreatedAt.UnixMilli(), now, nullIfEmpty(ev.Channel)); err != nil {
		return service.OrderConflict(fmt.Errorf("orders: insert order %s: %w", ev.OrderID, err), order.GroupOrders, ev.OrderID, ev.EventID)
	}
	// The lines in multi-row INSERTs of up to linesPerInsert rows: one
	// round trip per chunk instead of one per line.
	for from := 0; from < len(ev.Lines); from += linesPerInsert {
		chunk := ev.Lines[from:min(from+linesPerInsert, len(ev.Lines))]
		args := make([]any, 0, 7*len(chunk))
		for i, l := range chunk {
			args = append(args, ev.OrderID, from+i+1, l.StockCode, l.Description, l.Quantity, int64(l.UnitPrice), int64(l.LineTotal))
		}
		q := `INSERT INTO order_lines (order_id, line_no, stock_code, description, quantity, unit_price_milli, line_total_milli) VALUES ` +
			strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?, ?), ", len(chunk)), ", ")
		if _, err := tx.ExecContext(ctx, s.DB.Rebind(q), args...); err != nil {
			return service.OrderConflict(fmt.Errorf("orders: insert lines %d-%d of %s: %w", from+1, from+len(chunk), ev.OrderID, err), order.GroupOrders, ev.OrderID, ev.EventID)
		}
	}
	_, err := insertStatus(ctx, s.DB, tx, ev.OrderID, StatusCreated, ev.Reference, now)
	return err
}

// linesPerInsert is the most order lines one INSERT writes: 7 parameters
// each, well below SQLite's 32,766 and PostgreSQL's 65,535 per statement.
const linesPerInsert = 500

// nullIfEmpty maps "" to SQL NULL: a guest's customer_id, an unknown
// channel (every orderCreated v1 event, and v2 events without one).
func nullIfEmpty(v string) any {
	if v == "" {
		return nil
	}
	return v
}

// status is the event of a later milestone of an order: its order_status
// row, which deduplicates itself by (order_id, kind) (no inbox row).
func (s *Service) status(r *kgo.Record, eventID, orderID, kind, detail string, at time.Time) service.Event {
	return service.Event{ID: eventID, Record: r, ApplyOnce: func(ctx context.Context, tx *sql.Tx) (bool, error) {
		return insertStatus(ctx, s.DB, tx, orderID, kind, detail, at.UnixMilli())
	}}
}

// insertStatus inserts the status kind of orderID unless the order has it
// already; it reports whether the row is new.
func insertStatus(ctx context.Context, db *store.DB, tx *sql.Tx, orderID, kind, detail string, at int64) (bool, error) {
	ok, err := service.InsertOnce(ctx, tx, db.Rebind(`INSERT INTO order_status (order_id, kind, detail, at) VALUES (?, ?, ?, ?)
		ON CONFLICT (order_id, kind) DO NOTHING`), orderID, kind, detail, at)
	if err != nil {
		return false, fmt.Errorf("orders: status %s of %s: %w", kind, orderID, err)
	}
	return ok, nil
}
