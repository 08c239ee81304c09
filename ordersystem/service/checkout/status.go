package checkout

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"time"

	"github.com/ordercast/ordercast/ordersystem/order"
)

// Order stages, the kinds of table order_status that GET /orders/{id}
// ranks: StageAccepted < StageCreated < StagePaid | StagePaymentRefused <
// StageShipmentRequested. The services that reach a stage write its row
// (order_id, kind, detail, at); StageAccepted is not a row but checkout's
// own published checkout_requests row. Other kinds (StageNotified, or any
// a service adds) appear in the history without changing the status.
const (
	// StagePending: checkout recorded the order but the broker has not
	// acknowledged its event (a 503 was answered, or it is in flight).
	StagePending = "pending"
	// StageAccepted: the broker acknowledged the orderCreated event.
	StageAccepted = "accepted"
	// StageCreated: the orders service stored the order.
	StageCreated = "created"
	// StagePaid: the payments service debited the wallet or took the card.
	StagePaid = "paid"
	// StagePaymentRefused: the payments service refused the payment.
	StagePaymentRefused = "payment_refused"
	// StageShipmentRequested: fulfillment published shipmentRequested.
	StageShipmentRequested = "shipment_requested"
	// StageNotified: a notification was sent; shown by OrderView.Notified,
	// not by the status.
	StageNotified = "notified"
)

// stageRank orders the stages; unranked kinds never become the status.
var stageRank = map[string]int{
	StagePending:           0,
	StageAccepted:          1,
	StageCreated:           2,
	StagePaid:              3,
	StagePaymentRefused:    3,
	StageShipmentRequested: 4,
}

// OrderView is the body of GET /orders/{id}.
type OrderView struct {
	OrderID string `json:"orderId"`
	// Status is the highest stage reached (see the Stage* constants);
	// between two stages of the same rank (paid, payment_refused), the
	// later one.
	Status     string `json:"status"`
	CustomerID string `json:"customerId,omitempty"`
	Country    string `json:"country,omitempty"`
	Reference  string `json:"reference,omitempty"`
	// Channel is where the order was placed ("web", "api", ...), absent
	// when unknown (see order.Order.Channel).
	Channel string `json:"channel,omitempty"`
	// Total is the order total as a decimal string ("15.300"), TotalMilli
	// the same in thousandths; both absent when unknown.
	Total      string       `json:"total,omitempty"`
	TotalMilli *order.Money `json:"totalMilli,omitempty"`
	// History lists the stages reached in causal order: the pipeline's
	// stages by rank (accepted, created, paid or payment_refused,
	// shipment_requested; two of one rank by At), then any other kind
	// (notified...) by At. "accepted" is checkout's own record (At: when it
	// recorded the broker's acknowledgement), the others the order_status
	// rows. Each At comes from the service that reached the stage, so the
	// times need not increase down the list (the orders service can store an
	// order before checkout records its acknowledgement).
	History []StageEntry `json:"history"`
	// Notified reports whether any notification was sent for the order;
	// Notifications lists their kinds, oldest first (table notifications).
	Notified      bool     `json:"notified"`
	Notifications []string `json:"notifications"`
}

// StageEntry is one stage of an order's history.
type StageEntry struct {
	Kind   string    `json:"kind"`
	Detail string    `json:"detail,omitempty"`
	At     time.Time `json:"at"`
}

// maxOrderIDLen bounds the ids GET looks up; longer ones are 404 at once.
const maxOrderIDLen = 128

// handleGet serves GET /orders/{id}.
func (s *Service) handleGet(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	p, aerr := s.admit(w, r)
	if aerr == nil && s.cfg.AuthRequired && p.customer == "" {
		aerr = needToken("this checkout shows orders to authenticated customers only (--auth-required)")
	}
	if aerr != nil {
		s.writeError(w, aerr)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.DBTimeout)
	defer cancel()
	v, err := s.Order(ctx, id)
	switch {
	case err == nil && s.cfg.Auth != nil && v.CustomerID != "" && p.customer == "":
		s.writeError(w, needToken(fmt.Sprintf("order %q is a customer's: it is shown to that customer only", truncate(id, 80))))
	case err == nil && s.cfg.Auth != nil && v.CustomerID != "" && p.customer != v.CustomerID:
		s.writeError(w, reject(http.StatusForbidden, CodeForbidden, fmt.Sprintf(
			"order %q is not an order of customer %q (the bearer token's): it is shown to its customer only", truncate(id, 80), p.customer)))
	case errors.Is(err, ErrOrderNotFound):
		s.writeError(w, reject(http.StatusNotFound, CodeNotFound, fmt.Sprintf("order %q not found", truncate(id, 80))))
	case err != nil && r.Context().Err() != nil:
		s.log.Info("checkout: the client hung up while its order was read", slog.String("order_id", id), slog.Any("error", err))
		s.writeError(w, clientGone(r.Context().Err()))
	case err != nil:
		s.writeError(w, s.dbFailed("reading order "+truncate(id, 80), err, ctx.Err() != nil))
	default:
		writeJSON(w, http.StatusOK, v)
	}
}

// ErrOrderNotFound is returned by Service.Order for an id that neither
// checkout_requests nor orders holds.
var ErrOrderNotFound = errors.New("checkout: order not found")

// Order returns the view of GET /orders/{id}: the order's status, stage
// history and notifications (its fields from the orders service's row once
// stored, else from checkout's own event), read from checkout_requests, orders,
// order_status and notifications with read-only queries (no transaction:
// the parts may be read at slightly different moments). It returns
// ErrOrderNotFound when the id is in neither checkout_requests nor orders,
// or a database error. Safe for concurrent use.
func (s *Service) Order(ctx context.Context, orderID string) (*OrderView, error) {
	if orderID == "" || len(orderID) > maxOrderIDLen {
		return nil, ErrOrderNotFound
	}
	v := &OrderView{OrderID: orderID, History: []StageEntry{}, Notifications: []string{}}

	// The orders service's copy, when it has stored the order.
	var (
		cust, country, ref, channel sql.NullString
		total                       int64
	)
	err := s.db.QueryRowContext(ctx, s.db.Rebind(`SELECT customer_id, country, total_milli, reference, channel
		FROM orders WHERE order_id = ?`), orderID).Scan(&cust, &country, &total, &ref, &channel)
	inOrders := err == nil
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("checkout: read order %s: %w", orderID, err)
	}
	if inOrders {
		m := order.Money(total)
		v.CustomerID, v.Country, v.Reference, v.Channel = cust.String, country.String, ref.String, channel.String
		v.Total, v.TotalMilli = m.String(), &m
	}

	// Checkout's own record.
	req, inRequests, err := s.requestByOrder(ctx, orderID)
	if err != nil {
		return nil, err
	}
	if !inOrders && !inRequests {
		return nil, ErrOrderNotFound
	}
	v.Status = StageAccepted
	var stages []StageEntry
	if inRequests {
		if req.status == statusPending {
			v.Status = StagePending
		} else if req.publishedAt.Valid {
			stages = append(stages, StageEntry{Kind: StageAccepted, At: time.UnixMilli(req.publishedAt.Int64).UTC()})
		}
		if !inOrders && req.payload != nil {
			var ev order.OrderCreated
			if _, err := s.serde.DecodeContext(ctx, order.TopicOrderCreated, req.payload, &ev); err == nil {
				m := ev.Total
				v.CustomerID, v.Country, v.Reference, v.Channel = ev.CustomerID, ev.Country, ev.Reference, ev.Channel
				v.Total, v.TotalMilli = m.String(), &m
			} else {
				s.log.Warn("checkout: stored payload does not decode", slog.String("order_id", orderID), slog.Any("error", err))
			}
		}
	}

	// Stages.
	rows, err := s.db.QueryContext(ctx, s.db.Rebind(`SELECT kind, detail, at FROM order_status WHERE order_id = ?`), orderID)
	if err != nil {
		return nil, fmt.Errorf("checkout: read order_status of %s: %w", orderID, err)
	}
	for rows.Next() {
		var (
			e      StageEntry
			detail sql.NullString
			at     int64
		)
		if err := rows.Scan(&e.Kind, &detail, &at); err != nil {
			rows.Close()
			return nil, fmt.Errorf("checkout: read order_status of %s: %w", orderID, err)
		}
		e.Detail, e.At = detail.String, time.UnixMilli(at).UTC()
		stages = append(stages, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("checkout: read order_status of %s: %w", orderID, err)
	}
	// Causal order, not clock order: each stage's time comes from the
	// service that reached it, and checkout records "accepted" after the
	// broker's acknowledgement, which the orders and payments services can
	// beat. So the pipeline's stages come in rank order (accepted, created,
	// paid | payment_refused, shipment_requested; equal ranks by time), then
	// the other kinds (notified...) by time.
	sort.SliceStable(stages, func(i, j int) bool {
		ri, iok := stageRank[stages[i].Kind]
		rj, jok := stageRank[stages[j].Kind]
		if iok != jok {
			return iok
		}
		if iok && ri != rj {
			return ri < rj
		}
		if !stages[i].At.Equal(stages[j].At) {
			return stages[i].At.Before(stages[j].At)
		}
		return stages[i].Kind < stages[j].Kind
	})
	best := stageRank[v.Status]
	for _, e := range stages {
		v.History = append(v.History, e)
		if e.Kind == StageNotified {
			v.Notified = true
		}
		// >=: of two stages of one rank, the later in the sorted history wins.
		if r, ok := stageRank[e.Kind]; ok && r >= best && r > stageRank[StagePending] {
			best, v.Status = r, e.Kind
		}
	}

	// Notifications.
	nrows, err := s.db.QueryContext(ctx, s.db.Rebind(`SELECT kind FROM notifications WHERE order_id = ?
		ORDER BY created_at, kind`), orderID)
	if err != nil {
		return nil, fmt.Errorf("checkout: read notifications of %s: %w", orderID, err)
	}
	defer nrows.Close()
	for nrows.Next() {
		var kind string
		if err := nrows.Scan(&kind); err != nil {
			return nil, fmt.Errorf("checkout: read notifications of %s: %w", orderID, err)
		}
		v.Notifications = append(v.Notifications, kind)
	}
	if err := nrows.Err(); err != nil {
		return nil, fmt.Errorf("checkout: read notifications of %s: %w", orderID, err)
	}
	if len(v.Notifications) > 0 {
		v.Notified = true
	}
	return v, nil
}

// requestInfo is the part of a checkout_requests row that Order reads.
type requestInfo struct {
	status      string
	payload     []byte
	publishedAt sql.NullInt64
}

// requestByOrder finds the checkout_requests row of an order: by its key
// "order:<id>" for an order placed without an Idempotency-Key (a primary key
// lookup), else by order_id (a scan: the column has no index).
func (s *Service) requestByOrder(ctx context.Context, orderID string) (requestInfo, bool, error) {
	var r requestInfo
	for _, q := range []struct{ sql, arg string }{
		{`SELECT status, payload, published_at FROM checkout_requests WHERE idempotency_key = ?`, keylessPrefix + orderID},
		{`SELECT status, payload, published_at FROM checkout_requests WHERE order_id = ?`, orderID},
	} {
		err := s.db.QueryRowContext(ctx, s.db.Rebind(q.sql), q.arg).Scan(&r.status, &r.payload, &r.publishedAt)
		switch {
		case err == nil:
			if len(r.payload) == 0 {
				r.payload = nil
			}
			return r, true, nil
		case !errors.Is(err, sql.ErrNoRows):
			return r, false, fmt.Errorf("checkout: read checkout request of %s: %w", orderID, err)
		}
	}
	return r, false, nil
}
