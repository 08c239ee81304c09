package checkout

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/order"
)

// markTimeout bounds the UPDATE that marks a row published after the
// broker's acknowledgement; it does not depend on the client still waiting.
const markTimeout = 10 * time.Second

// publish produces d's event and waits for the broker's acknowledgement at
// most ProduceTimeout, then marks the row published and answers 202; or
// answers 503 broker_unavailable with an unknown outcome (unknownOutcome:
// the order id and the key to retry with), leaving the row pending. release (the key
// lock) is called once the outcome is recorded: before publish returns, or,
// when the wait timed out, by the goroutine that follows the produce to its
// end.
//
// The produce does not use the request's cancellation: a client that hangs
// up does not abort a publication half-way (the outcome is still recorded).
// Produces are the event topics checkout writes; system.Rights grants
// WRITE on them.
var Produces = []string{order.TopicOrderCreated}

func (s *Service) publish(ctx context.Context, d *decision, release func()) (*outcome, *apiError) {
	ev := d.event
	rec := &kgo.Record{
		Topic: order.TopicOrderCreated,
		Key:   []byte(order.KeyFor(ev.CustomerID, ev.OrderID)),
		Value: d.payload,
	}
	body := marshal(order.PlaceOrderResponse{OrderID: ev.OrderID, Status: "accepted", Total: ev.Total.String()})
	if !d.fresh {
		s.metrics.republished.Inc()
		s.log.Info("checkout: re-publishing the pending event of a retried request",
			slog.String("idempotency_key", d.key), slog.String("order_id", ev.OrderID), slog.String("event_id", ev.EventID))
	}

	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ProduceTimeout)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	s.producer.Produce(pctx, rec, func(_ *kgo.Record, err error) { done <- err })

	select {
	case err := <-done:
		defer release()
		if err != nil {
			s.metrics.produceDuration.WithLabelValues("error").Observe(time.Since(start).Seconds())
			s.log.Warn("checkout: orderCreated not acknowledged; the request stays pending",
				slog.String("idempotency_key", d.key), slog.String("order_id", ev.OrderID), slog.Any("error", err))
			return nil, unknownOutcome(ev.OrderID, d.retryKey, "the order event was not acknowledged by Kafka: "+err.Error())
		}
		s.metrics.produceDuration.WithLabelValues("ok").Observe(time.Since(start).Seconds())
		s.markPublished(ctx, d, body)
		return &outcome{status: http.StatusAccepted, body: body, orderID: ev.OrderID}, nil

	case <-pctx.Done():
		// The producer could not fail the record yet (an idempotent
		// producer never drops a record it may have written): follow it to
		// its end, keeping the key locked, and record a late success.
		s.metrics.produceDuration.WithLabelValues("timeout").Observe(time.Since(start).Seconds())
		s.background.Add(1)
		go func() {
			defer s.background.Done()
			defer release()
			if err := <-done; err != nil {
				s.log.Warn("checkout: orderCreated failed after its request timed out; the request stays pending",
					slog.String("idempotency_key", d.key), slog.String("order_id", ev.OrderID), slog.Any("error", err))
				return
			}
			s.log.Info("checkout: orderCreated acknowledged after its request timed out; marking it published",
				slog.String("idempotency_key", d.key), slog.String("order_id", ev.OrderID))
			s.markPublished(ctx, d, body)
		}()
		return nil, unknownOutcome(ev.OrderID, d.retryKey, fmt.Sprintf("the order event was not acknowledged by Kafka within %v", s.cfg.ProduceTimeout))
	}
}

// markPublished records the broker's acknowledgement of d's event: the row
// becomes 'published' with the 202 answer. A failure is logged, not
// returned: the event is on the topic and the order accepted; the row stays
// pending, so a retry with the same key publishes the same event again
// (which consumers absorb) and marks it then.
func (s *Service) markPublished(ctx context.Context, d *decision, body []byte) {
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markTimeout)
	defer cancel()
	now := s.now().UnixMilli()
	var first bool
	// Idempotent (WHERE status = 'pending'): run again even when the
	// connection was lost in COMMIT (found by ordercast chaos on PostgreSQL:
	// pg_terminate_backend at the COMMIT left an acknowledged order pending).
	err := s.db.InTxIdempotent(mctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(mctx, s.db.Rebind(`UPDATE checkout_requests
			SET status = 'published', response_status = ?, response_body = ?, published_at = ?
			WHERE idempotency_key = ? AND status = 'pending'`),
			http.StatusAccepted, string(body), now, d.key)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		first = n == 1
		return err
	})
	if err != nil {
		s.log.Error("checkout: orderCreated acknowledged but the request could not be marked published; a retry will re-publish it",
			slog.String("idempotency_key", d.key), slog.String("order_id", d.orderID), slog.Any("error", err))
		return
	}
	if first {
		s.metrics.accepted.Inc()
		s.log.Debug("checkout: order accepted", slog.String("order_id", d.orderID), slog.String("idempotency_key", d.key))
	}
}
