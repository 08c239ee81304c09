package checkout

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/ordersystem/order"
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
		s.log.InfoContext(ctx, "checkout: re-publishing the pending event of a retried request",
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
			s.log.WarnContext(ctx, "checkout: orderCreated not acknowledged; the request stays pending",
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
				s.log.WarnContext(ctx, "checkout: orderCreated failed after its request timed out; the request stays pending",
					slog.String("idempotency_key", d.key), slog.String("order_id", ev.OrderID), slog.Any("error", err))
				return
			}
			s.log.InfoContext(ctx, "checkout: orderCreated acknowledged after its request timed out; marking it published",
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
//
// The mark is written in a batch with the other requests' marks waiting at
// the time (group commit: one UPDATE for the batch, markBatch), and before
// the 202 is sent, not after: the table's published rows are the durable
// list of the orders checkout accepted (Service.Accepted, the audit, the
// load and chaos checks compare every service's rows with it), and a mark
// written after the 202 would let a crash in between leave an accepted
// order out of that list (a retry would still find it pending and publish
// the same event again, so nothing would be lost, but the list would be
// wrong until then). A batched mark costs the request one shared statement.
// It blocks at most about markTimeout.
func (s *Service) markPublished(ctx context.Context, d *decision, body []byte) {
	m := &markJob{key: d.key, body: string(body), done: make(chan struct{})}
	start := time.Now()
	s.marks.submit(m)
	<-m.done
	s.metrics.dbWrite.WithLabelValues("mark").Observe(time.Since(start).Seconds())
	if m.err != nil {
		s.log.ErrorContext(ctx, "checkout: orderCreated acknowledged but the request could not be marked published; a retry will re-publish it",
			slog.String("idempotency_key", d.key), slog.String("order_id", d.orderID), slog.Any("error", m.err))
		return
	}
	if m.first {
		s.metrics.accepted.Inc()
		s.log.DebugContext(ctx, "checkout: order accepted", slog.String("order_id", d.orderID), slog.String("idempotency_key", d.key))
	}
}

// markJob is one row to mark published (markBatch); first and err are set
// by the runner before done is closed.
type markJob struct {
	key, body string
	first     bool // this mark changed the row from pending
	err       error
	done      chan struct{}
}

// runMarks is the marks batcher's run.
func (s *Service) runMarks(jobs []*markJob) {
	runBatch(s, jobs, markTimeout, s.markBatch, func(m *markJob, err error) { m.err = err })
	for _, m := range jobs {
		close(m.done)
	}
}

// markBatch marks the rows of jobs published in one UPDATE, each with its
// own 202 body. Idempotent (WHERE status = 'pending'), so write runs it
// again even when the connection was lost in its commit (found by ordercast
// chaos on PostgreSQL: pg_terminate_backend at the COMMIT left an
// acknowledged order pending); first is then false for a row the lost
// attempt marked.
func (s *Service) markBatch(ctx context.Context, q execer, jobs []*markJob) error {
	var b strings.Builder
	b.WriteString(`UPDATE checkout_requests SET status = 'published', response_status = ?, response_body = CASE idempotency_key`)
	args := make([]any, 0, 3*len(jobs)+2)
	args = append(args, http.StatusAccepted)
	for _, m := range jobs {
		b.WriteString(" WHEN ? THEN ?")
		args = append(args, m.key, m.body)
	}
	b.WriteString(" END, published_at = ? WHERE status = 'pending' AND idempotency_key IN (?" + strings.Repeat(", ?", len(jobs)-1) + ") RETURNING idempotency_key")
	args = append(args, s.now().UnixMilli())
	for _, m := range jobs {
		args = append(args, m.key)
	}
	rs, err := q.QueryContext(ctx, s.db.Rebind(b.String()), args...)
	if err != nil {
		return fmt.Errorf("mark checkout requests published: %w", err)
	}
	defer rs.Close()
	first := make(map[string]bool, len(jobs))
	for rs.Next() {
		var k string
		if err := rs.Scan(&k); err != nil {
			return fmt.Errorf("mark checkout requests published: %w", err)
		}
		first[k] = true
	}
	if err := rs.Err(); err != nil {
		return fmt.Errorf("mark checkout requests published: %w", err)
	}
	for _, m := range jobs {
		m.first = first[m.key]
	}
	return nil
}
