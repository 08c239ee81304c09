// Package audit recomputes the order system's guarantees from the database
// and the topics, not from counters: what `ordercast up --report` writes and
// what the end-to-end and crash tests assert.
package audit

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/ordersystem/ops"
	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/schema"
	"github.com/ordercast/ordercast/ordersystem/store"
	"github.com/ordercast/ordercast/processor"
	"github.com/ordercast/ordercast/sqldb"
)

// Progress counts how far the services got, from the database. An order is
// fully processed when it is stored, its payment is decided, both its
// notifications exist and, if paid, its shipment request was seen by the
// orders service.
type Progress struct {
	Accepted          int `json:"ordersAccepted"`
	Stored            int `json:"ordersStored"`
	Payments          int `json:"paymentsProcessed"`
	Paid              int `json:"paymentsPaid"`
	Debited           int `json:"paymentsDebited"`
	PaidByCard        int `json:"paymentsByCard"`
	Refused           int `json:"paymentsRefused"`
	Notifications     int `json:"notificationsSent"`
	ShipmentsRecorded int `json:"shipmentsRecorded"`
	OutboxPending     int `json:"outboxPending"`
}

// Done reports whether every accepted order went through every service.
func (p Progress) Done() bool {
	return p.Accepted > 0 && p.Stored == p.Accepted && p.Payments == p.Accepted &&
		p.Notifications == p.Accepted+p.Payments && p.ShipmentsRecorded == p.Paid && p.OutboxPending == 0
}

// Missing describes what is not done yet, for a timeout message.
func (p Progress) Missing() string {
	return fmt.Sprintf("accepted %d: stored %d, payments %d (paid %d), notifications %d of %d, shipments seen %d of %d, outbox pending %d",
		p.Accepted, p.Stored, p.Payments, p.Paid, p.Notifications, p.Accepted+p.Payments, p.ShipmentsRecorded, p.Paid, p.OutboxPending)
}

// ReadProgress reads the counts from one consistent reading of the
// database: every query runs in one read transaction (REPEATABLE READ on
// PostgreSQL, a deferred transaction on SQLite, whose WAL snapshot is
// taken at its first read), so no count is from a later moment than
// another. Accepted orders are the published rows of checkout_requests,
// and every other count is of those orders only: checkout marks a row
// published when the broker acknowledges the orderCreated record, so the
// services may already have processed an order whose row is not yet
// marked; counting such payments would give more payments than accepted
// orders.
func ReadProgress(ctx context.Context, db *store.DB) (Progress, error) {
	var p Progress
	const acc = `(SELECT order_id FROM checkout_requests WHERE status = 'published')`
	// Each table is read once: the payments' five counts come from one
	// scan (a drain polls this while the services still write, and the
	// five separate semi-joins of each poll were most of the database's
	// work then).
	q := []struct {
		dst []any
		sql string
	}{
		{[]any{&p.Accepted}, `SELECT COUNT(*) FROM checkout_requests WHERE status = 'published'`},
		{[]any{&p.Stored}, `SELECT COUNT(*) FROM orders WHERE order_id IN ` + acc},
		{[]any{&p.Payments, &p.Paid, &p.Debited, &p.PaidByCard, &p.Refused}, `SELECT COUNT(*),
			COALESCE(SUM(CASE WHEN status = 'PAID' THEN 1 ELSE 0 END), 0),
			COALESCE(SUM(CASE WHEN status = 'PAID' AND method = 'WALLET' THEN 1 ELSE 0 END), 0),
			COALESCE(SUM(CASE WHEN status = 'PAID' AND method = 'CARD' THEN 1 ELSE 0 END), 0),
			COALESCE(SUM(CASE WHEN status = 'REFUSED' THEN 1 ELSE 0 END), 0)
			FROM payments WHERE order_id IN ` + acc},
		{[]any{&p.Notifications}, `SELECT COUNT(*) FROM notifications WHERE order_id IN ` + acc},
		{[]any{&p.ShipmentsRecorded}, `SELECT COUNT(*) FROM order_status WHERE kind = 'shipment_requested' AND order_id IN ` + acc},
		{[]any{&p.OutboxPending}, `SELECT COUNT(*) FROM outbox WHERE sent_at IS NULL`},
	}
	opts := &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead}
	if db.Dialect != sqldb.Postgres {
		// SQLite: a transaction is a snapshot already; read-only, it
		// begins DEFERRED (modernc.org/sqlite), where the DSN's
		// _txlock=immediate would take the write lock and hold up the
		// services' writes for the whole reading.
		opts = &sql.TxOptions{ReadOnly: true}
	}
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return p, fmt.Errorf("audit: begin the progress reading: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // read only: nothing to undo
	for _, x := range q {
		if err := tx.QueryRowContext(ctx, x.sql).Scan(x.dst...); err != nil {
			return p, fmt.Errorf("audit: %s: %w", x.sql, err)
		}
	}
	return p, nil
}

// PollInterval is how long a drain loop waits before its next ReadProgress
// after one that took took: at least min, and at least twice took, so that
// polling the progress of a large run (each reading scans the run's rows)
// keeps the database busy for at most a third of the time instead of
// competing, back to back, with the services it waits for.
func PollInterval(min, took time.Duration) time.Duration {
	return max(min, 2*took)
}

// Invariant is one recomputed guarantee.
type Invariant struct {
	OK         bool   `json:"ok"`
	Violations int    `json:"violations"`
	Detail     string `json:"detail"`
}

// Result is the audit: counts from the topics and the invariants.
type Result struct {
	ShipmentRecords int `json:"shipmentRecords"`
	// DLQRecords counts each group's DLQ records as `ordercast dlq list`
	// does (CountDLQ): purged records are not counted.
	DLQRecords map[string]int       `json:"dlqRecords"`
	Invariants map[string]Invariant `json:"invariants"`
}

// OK reports whether every invariant holds.
func (r *Result) OK() bool {
	for _, inv := range r.Invariants {
		if !inv.OK {
			return false
		}
	}
	return true
}

func countQuery(ctx context.Context, db *store.DB, q string) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, q).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("audit: %s: %w", q, err)
	}
	return n, nil
}

// Check recomputes the invariants:
//
//   - each_accepted_order_stored_once: every published checkout request has
//     exactly one orders row with all its lines;
//   - charged_at_most_once: no order has more than one wallet debit, and
//     every wallet's balance equals its opening credit minus its debits;
//   - every_debit_has_one_shipment: each PAID payment has exactly one
//     shipmentRequested record for a read_committed reader, and no other
//     order has one;
//   - every_order_fully_processed: each accepted order has a payment and one
//     notification per (order, kind);
//   - no_dlq_record_for_valid_input: no DLQ record carries an accepted
//     (valid) order's event.
func Check(ctx context.Context, db *store.DB, cl *kgo.Client, serde *schema.Serde) (*Result, error) {
	res := &Result{Invariants: map[string]Invariant{}, DLQRecords: map[string]int{}}
	add := func(name string, violations int, detail string) {
		res.Invariants[name] = Invariant{OK: violations == 0, Violations: violations, Detail: detail}
	}
	missing, err := countQuery(ctx, db, `SELECT COUNT(*) FROM checkout_requests c LEFT JOIN orders o ON o.order_id = c.order_id WHERE c.status = 'published' AND o.order_id IS NULL`)
	if err != nil {
		return nil, err
	}
	badLines, err := countQuery(ctx, db, `SELECT COUNT(*) FROM orders o WHERE o.line_count <> (SELECT COUNT(*) FROM order_lines l WHERE l.order_id = o.order_id)`)
	if err != nil {
		return nil, err
	}
	dupOrders, err := countQuery(ctx, db, `SELECT COUNT(*) FROM (SELECT order_id FROM checkout_requests WHERE status = 'published' GROUP BY order_id HAVING COUNT(*) > 1) d`)
	if err != nil {
		return nil, err
	}
	add("each_accepted_order_stored_once", missing+badLines+dupOrders,
		fmt.Sprintf("%d accepted orders not stored, %d stored with wrong line count, %d order ids accepted twice", missing, badLines, dupOrders))

	doubleDebits, err := countQuery(ctx, db, `SELECT COUNT(*) FROM (SELECT order_id FROM wallet_ledger GROUP BY order_id HAVING COUNT(*) > 1) d`)
	if err != nil {
		return nil, err
	}
	badBalances, err := countQuery(ctx, db, `SELECT COUNT(*) FROM wallets w WHERE w.balance_milli <> w.opening_milli + COALESCE((SELECT SUM(amount_milli) FROM wallet_ledger l WHERE l.customer_id = w.customer_id), 0)`)
	if err != nil {
		return nil, err
	}
	negative, err := countQuery(ctx, db, `SELECT COUNT(*) FROM wallets WHERE balance_milli < 0`)
	if err != nil {
		return nil, err
	}
	add("charged_at_most_once", doubleDebits+badBalances+negative,
		fmt.Sprintf("%d orders debited more than once, %d wallets whose balance is not opening minus debits, %d negative balances", doubleDebits, badBalances, negative))

	unpaid, err := countQuery(ctx, db, `SELECT COUNT(*) FROM checkout_requests c LEFT JOIN payments p ON p.order_id = c.order_id WHERE c.status = 'published' AND p.order_id IS NULL`)
	if err != nil {
		return nil, err
	}
	noReceived, err := countQuery(ctx, db, `SELECT COUNT(*) FROM checkout_requests c WHERE c.status = 'published' AND NOT EXISTS (SELECT 1 FROM notifications n WHERE n.order_id = c.order_id AND n.kind = 'order_received')`)
	if err != nil {
		return nil, err
	}
	noPayNote, err := countQuery(ctx, db, `SELECT COUNT(*) FROM payments p WHERE NOT EXISTS (SELECT 1 FROM notifications n WHERE n.order_id = p.order_id AND n.kind IN ('payment_confirmed', 'payment_failed'))`)
	if err != nil {
		return nil, err
	}
	dupNotes, err := countQuery(ctx, db, `SELECT COUNT(*) FROM (SELECT order_id, kind FROM notifications GROUP BY order_id, kind HAVING COUNT(*) > 1) d`)
	if err != nil {
		return nil, err
	}
	add("every_order_fully_processed", unpaid+noReceived+noPayNote+dupNotes,
		fmt.Sprintf("%d accepted orders without a payment decision, %d without an order_received notification, %d payments without a payment notification, %d duplicate (order, kind) notifications", unpaid, noReceived, noPayNote, dupNotes))

	// Shipments, from the topic as a read_committed reader sees it.
	shipments := map[string]int{}
	recs, err := ReadTopic(ctx, cl, order.TopicShipmentRequested)
	if err != nil {
		return nil, err
	}
	res.ShipmentRecords = len(recs)
	undecodable := 0
	for _, r := range recs {
		ev, ok := DecodeEvent(ctx, serde, r)
		if !ok {
			undecodable++
			continue
		}
		shipments[ev.OrderID]++
	}
	paid, err := db.QueryStrings(ctx, `SELECT order_id FROM payments WHERE status = 'PAID'`)
	if err != nil {
		return nil, err
	}
	wrong := 0
	paidSet := map[string]bool{}
	for _, id := range paid {
		paidSet[id] = true
		if shipments[id] != 1 {
			wrong++
		}
	}
	for id := range shipments {
		if !paidSet[id] {
			wrong++
		}
	}
	add("every_debit_has_one_shipment", wrong+undecodable,
		fmt.Sprintf("%d paid orders without exactly one shipmentRequested or shipments for unpaid orders; %d shipment records read (read_committed), %d undecodable", wrong, len(recs), undecodable))

	accepted, err := db.QueryStrings(ctx, `SELECT order_id FROM checkout_requests WHERE status = 'published'`)
	if err != nil {
		return nil, err
	}
	acceptedSet := make(map[string]bool, len(accepted))
	for _, id := range accepted {
		acceptedSet[id] = true
	}
	validInDLQ := 0
	for _, g := range order.Groups {
		recs, err := ReadTopic(ctx, cl, processor.DLQTopic(g))
		if err != nil {
			return nil, err
		}
		if res.DLQRecords[g], err = countDLQ(ctx, cl, g); err != nil {
			return nil, err
		}
		// Every record dead-lettered counts here, purged or not: a purge
		// does not undo that a valid order was dead-lettered.
		for _, r := range recs {
			if id := orderIDOf(ctx, serde, r); id != "" && acceptedSet[id] {
				validInDLQ++
			}
		}
	}
	add("no_dlq_record_for_valid_input", validInDLQ, fmt.Sprintf("%d DLQ records carry an accepted order's event", validInDLQ))
	return res, nil
}

// CountDLQ counts the records of each service group's DLQ topic
// (processor.DLQTopic), keyed by group, as `ordercast dlq list` counts them
// (ops.DLQ.List's Selected): the committed records from each partition's
// purge position on, so a purged record is not counted. It is the
// dlqRecords of Result without the rest of Check, for a report of a run
// that ended early. It blocks until each topic is read to its last stable
// offset or ctx ends.
func CountDLQ(ctx context.Context, cl *kgo.Client) (map[string]int, error) {
	out := map[string]int{}
	for _, g := range order.Groups {
		n, err := countDLQ(ctx, cl, g)
		if err != nil {
			return out, err
		}
		out[g] = n
	}
	return out, nil
}

// countDLQ is ops.DLQ.List's count of group's DLQ, through clients with
// cl's options.
func countDLQ(ctx context.Context, cl *kgo.Client, group string) (int, error) {
	d, err := ops.NewDLQ(group, cl.Opts()...)
	if err != nil {
		return 0, err
	}
	defer d.Close()
	l, err := d.List(ctx, ops.Selection{}, 1)
	if err != nil {
		return 0, fmt.Errorf("audit: count the DLQ of %s: %w", group, err)
	}
	return l.Selected, nil
}

// orderIDOf decodes a DLQ record's payload with its original topic's schema
// and returns the order id, or "" if it does not decode.
func orderIDOf(ctx context.Context, serde *schema.Serde, r *kgo.Record) string {
	if _, ok := findHeader(r, processor.HeaderOriginalTopic); !ok {
		return ""
	}
	ev, _ := DecodeEvent(ctx, serde, r)
	return ev.OrderID
}

func findHeader(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// ReadTopic reads every record of topic up to its current end offsets as a
// read_committed reader (records of aborted transactions are skipped),
// without control records. It gives up after 60s.
func ReadTopic(ctx context.Context, cl *kgo.Client, topic string) ([]*kgo.Record, error) {
	v, err := ReadView(ctx, cl, topic, true)
	if err != nil {
		return nil, err
	}
	return v.Records, nil
}

// ReadAll reads every record of topic from its log start offsets to its
// current end offsets, control records (transaction markers) included, in
// offset order per partition. With committed it reads as a read_committed
// reader up to the last stable offsets (records of aborted transactions are
// skipped); otherwise as a read_uncommitted reader up to the high
// watermarks. Markers are kept so that a partition whose last offset is a
// marker is still seen to its end. It uses cl's options for a reader client
// of its own and gives up after 60s, with an error naming how many
// partitions were not read to their end.
func ReadAll(ctx context.Context, cl *kgo.Client, topic string, committed bool) ([]*kgo.Record, error) {
	adm := kadm.NewClient(cl)
	list, iso := adm.ListEndOffsets, kgo.ReadUncommitted()
	if committed {
		list, iso = adm.ListCommittedOffsets, kgo.ReadCommitted() // last stable offsets
	}
	ends, err := list(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("audit: end offsets of %s: %w", topic, err)
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("audit: start offsets of %s: %w", topic, err)
	}
	want := map[int32]int64{}
	offsets := map[string]map[int32]kgo.Offset{topic: {}}
	var lerr error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			lerr = o.Err
			return
		}
		s, _ := starts.Lookup(topic, o.Partition)
		if o.Offset > s.Offset {
			want[o.Partition] = o.Offset
			offsets[topic][o.Partition] = kgo.NewOffset().At(s.Offset)
		}
	})
	if lerr != nil {
		return nil, fmt.Errorf("audit: end offsets of %s: %w", topic, lerr)
	}
	if len(want) == 0 {
		return nil, nil
	}
	rd, err := kgo.NewClient(append(cl.Opts(), kgo.ConsumePartitions(offsets), kgo.FetchIsolationLevel(iso),
		kgo.KeepControlRecords(), kgo.FetchMaxWait(200*time.Millisecond))...)
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(want) > 0 {
		f := rd.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("audit: reading %s: %d partitions not read to their end: %w", topic, len(want), ctx.Err())
		}
		f.EachPartition(func(p kgo.FetchTopicPartition) {
			end, ok := want[p.Partition]
			if !ok {
				return
			}
			for _, r := range p.Records {
				if r.Offset < end {
					out = append(out, r)
				}
			}
			if n := len(p.Records); n > 0 && p.Records[n-1].Offset+1 >= end {
				delete(want, p.Partition)
			}
		})
	}
	return out, nil
}
