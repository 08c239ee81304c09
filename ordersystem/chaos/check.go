package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/ordersystem/audit"
	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/schema"
	"github.com/ordercast/ordercast/ordersystem/service/checkout"
	"github.com/ordercast/ordercast/ordersystem/service/fulfillment"
	"github.com/ordercast/ordercast/ordersystem/service/notifications"
	"github.com/ordercast/ordercast/ordersystem/service/orders"
	"github.com/ordercast/ordercast/ordersystem/service/payments"
	"github.com/ordercast/ordercast/ordersystem/store"
	"github.com/ordercast/ordercast/ordersystem/system"
	"github.com/ordercast/ordercast/processor"
	"github.com/ordercast/ordercast/sqldb"
)

// Invariant is one checked guarantee.
type Invariant struct {
	Name       string `json:"name"`
	OK         bool   `json:"ok"`
	Violations int    `json:"violations"`
	Detail     string `json:"detail"`
}

// retryTopics is the number of retry topics per group: `ordercast run`'s
// default --retry-delays 1s,10s.
const retryTopics = 2

// checker recomputes the guarantees from the database and the topics.
type checker struct {
	cl    *kgo.Client
	adm   *kadm.Client
	db    *store.DB
	serde *schema.Serde

	// undecided is the number of records of open transactions the last
	// offsets check saw.
	undecided int
}

// groupTopics returns the topics a consumer group consumes (its retry
// topics included).
func groupTopics(group string) []string {
	base := system.ConsumedTopics(group)
	if group == order.GroupFulfillment {
		return base // exactly-once: retries in place, no retry topics
	}
	return append(base, processor.RetryTopicNames(group, retryTopics)...)
}

// examples formats at most 5 examples.
func examples(xs []string) string {
	sort.Strings(xs)
	if len(xs) > 5 {
		return strings.Join(xs[:5], "; ") + fmt.Sprintf("; ... (%d more)", len(xs)-5)
	}
	return strings.Join(xs, "; ")
}

// offsets checks, for every group and partition, that each record below the
// committed offset has its effect (committed offsets never ahead of applied
// effects), and returns how many committed data records are at or above it
// (the lag, counted in records, not offsets: transaction markers and aborted
// records are not records a consumer gets). Topics are read by readDecided,
// so a committed output behind a transaction left open by a crashed producer
// counts (it is in the log and committed; read_committed readers see it once
// that transaction ends).
//
// The effect of a record for a group with an inbox is its inbox row, or,
// for an event whose effect deduplicates itself (an order's later status, a
// notification), that row (effectKey); or the record forwarded to one of the
// group's retry topics or its DLQ (its effect is then owed by that topic,
// checked the same way). For fulfillment, the
// effect of a PAID paymentProcessed is a committed shipmentRequested for the
// order, or the record in fulfillment's DLQ. The offsets are read first and
// the effects after, so an effect applied meanwhile only helps.
func (c *checker) offsets(ctx context.Context) (inv Invariant, lag map[string]int, err error) {
	committed := map[string]kadm.OffsetResponses{}
	for _, g := range order.Groups {
		resp, err := c.adm.FetchOffsets(ctx, g)
		if err != nil {
			return inv, nil, fmt.Errorf("committed offsets of %s: %w", g, err)
		}
		committed[g] = resp
	}
	views := map[string]*topicView{}
	undecided := 0
	read := func(topic string) (*topicView, error) {
		if v, ok := views[topic]; ok {
			return v, nil
		}
		recs, n, err := readDecided(ctx, c.cl, topic)
		if err != nil {
			return nil, err
		}
		undecided += n
		v := &topicView{records: recs}
		views[topic] = v
		return v, nil
	}
	lag = map[string]int{}
	var bad []string
	for _, g := range order.Groups {
		effects := map[string]bool{} // event ids (inbox) or order ids (fulfillment) with an effect
		if g == order.GroupFulfillment {
			v, err := read(order.TopicShipmentRequested)
			if err != nil {
				return inv, nil, err
			}
			for _, r := range v.records {
				if ev, ok := decodeEvent(ctx, c.serde, r); ok {
					effects[ev.orderID] = true
				}
			}
		} else {
			ids, err := c.db.QueryStrings(ctx, c.db.Rebind(`SELECT event_id FROM inbox WHERE consumer_group = ?`), g)
			if err != nil {
				return inv, nil, err
			}
			// The effects that deduplicate themselves, by their
			// natural keys (effectKey).
			switch g {
			case order.GroupOrders:
				keys, err := c.db.QueryStrings(ctx, `SELECT order_id || '/' || kind FROM order_status`)
				if err != nil {
					return inv, nil, err
				}
				ids = append(ids, keys...)
			case order.GroupNotifications:
				keys, err := c.db.QueryStrings(ctx, `SELECT notification_id FROM notifications`)
				if err != nil {
					return inv, nil, err
				}
				ids = append(ids, keys...)
			}
			for _, id := range ids {
				effects[id] = true
			}
		}
		forwarded := map[string]bool{} // event ids in a retry topic or the DLQ
		for _, t := range append(processor.RetryTopicNames(g, retryTopics), processor.DLQTopic(g)) {
			if g == order.GroupFulfillment && t != processor.DLQTopic(g) {
				continue
			}
			v, err := read(t)
			if err != nil {
				return inv, nil, err
			}
			for _, r := range v.records {
				if ev, ok := decodeEvent(ctx, c.serde, r); ok {
					forwarded[ev.eventID] = true
				}
			}
		}
		for _, topic := range groupTopics(g) {
			v, err := read(topic)
			if err != nil {
				return inv, nil, err
			}
			for _, r := range v.records {
				at := int64(0)
				if o, ok := committed[g].Lookup(topic, r.Partition); ok && o.Err == nil {
					at = o.At
				}
				if r.Offset >= at {
					lag[g]++
					continue
				}
				ev, ok := decodeEvent(ctx, c.serde, r)
				if !ok {
					continue // undecodable input belongs in the DLQ; audit checks that
				}
				switch {
				case forwarded[ev.eventID]:
				case g == order.GroupFulfillment:
					if ev.status == order.PaymentPaid && !effects[ev.orderID] {
						bad = append(bad, fmt.Sprintf("%s: %s/%d@%d (order %s, PAID) committed at %d without a shipmentRequested", g, topic, r.Partition, r.Offset, ev.orderID, at))
					}
				case !effects[effectKey(g, ev)]:
					bad = append(bad, fmt.Sprintf("%s: %s/%d@%d (event %s) committed at %d without its effect (%s)", g, topic, r.Partition, r.Offset, ev.eventID, at, effectKey(g, ev)))
				}
			}
		}
	}
	inv = Invariant{Name: "committed_offsets_never_ahead_of_effects", OK: len(bad) == 0, Violations: len(bad),
		Detail: fmt.Sprintf("%d records below a committed offset without their effect", len(bad))}
	c.undecided = undecided
	if undecided > 0 {
		inv.Detail += fmt.Sprintf(" (%d records of transactions still open left out)", undecided)
	}
	if len(bad) > 0 {
		inv.Detail += ": " + examples(bad)
	}
	return inv, lag, nil
}

// effectKey is the key by which the check finds the effect of event ev in
// group g: its event id (the inbox row) for an effect applied through the
// inbox, the natural key of one that deduplicates itself (an order's later
// status: "<order_id>/<kind>"; a notification: its id). The event's topic
// is its original one (ev.topic: a record read from a retry topic is the
// event of the topic it was first consumed from).
func effectKey(g string, ev eventInfo) string {
	topic := ev.topic
	switch {
	case g == order.GroupOrders && topic == order.TopicPaymentProcessed:
		if ev.status == order.PaymentRefused {
			return ev.orderID + "/" + orders.StatusPaymentRefused
		}
		return ev.orderID + "/" + orders.StatusPaid
	case g == order.GroupOrders && topic == order.TopicShipmentRequested:
		return ev.orderID + "/" + orders.StatusShipmentRequested
	case g == order.GroupNotifications && topic == order.TopicOrderCreated:
		return notifications.NotificationID(ev.orderID, notifications.KindOrderReceived)
	case g == order.GroupNotifications && topic == order.TopicPaymentProcessed:
		if ev.status == order.PaymentRefused {
			return notifications.NotificationID(ev.orderID, notifications.KindPaymentFailed)
		}
		return notifications.NotificationID(ev.orderID, notifications.KindPaymentConfirmed)
	}
	return ev.eventID
}

// charges recomputes every wallet from its opening balance in the order the
// payments committed (see commitOrder below): each order
// is charged at most once, exactly once when the credit sufficed at that
// point, refused only when it did not, and each wallet ends at its balance.
func (c *checker) charges(ctx context.Context) (Invariant, error) {
	type wallet struct{ opening, balance int64 }
	wallets := map[string]*wallet{}
	rows, err := c.db.QueryContext(ctx, `SELECT customer_id, opening_milli, balance_milli FROM wallets`)
	if err != nil {
		return Invariant{}, err
	}
	for rows.Next() {
		var id string
		w := &wallet{}
		if err := rows.Scan(&id, &w.opening, &w.balance); err != nil {
			rows.Close()
			return Invariant{}, err
		}
		wallets[id] = w
	}
	rows.Close()
	type debit struct {
		n   int
		sum int64
	}
	ledger := map[string]*debit{}
	rows, err = c.db.QueryContext(ctx, `SELECT order_id, amount_milli FROM wallet_ledger`)
	if err != nil {
		return Invariant{}, err
	}
	for rows.Next() {
		var id string
		var amt int64
		if err := rows.Scan(&id, &amt); err != nil {
			rows.Close()
			return Invariant{}, err
		}
		if ledger[id] == nil {
			ledger[id] = &debit{}
		}
		ledger[id].n++
		ledger[id].sum += amt
	}
	rows.Close()

	var bad []string
	balance := map[string]int64{}
	for id, w := range wallets {
		balance[id] = w.opening
	}
	// Commit order, then the order within a transaction: payments.seq
	// numbers the rows in the order they were inserted (store migration 5),
	// so in the order a batch transaction applied its payments. SQLite
	// serialises its writes, so seq alone is the commit order; PostgreSQL
	// orders by commit timestamp (track_commit_timestamp, set by the
	// cluster run's reset and by scripts/postgres.sh), then seq within a
	// batch transaction, whose rows share one commit timestamp. A debit's
	// wallet UPDATE waits for the previous debit's commit, so their commit
	// timestamps are in order; a refusal committed after a debit it did not
	// see read a higher balance than the replay gives it, so the replay
	// never calls a correct refusal wrong.
	commitOrder := `p.seq`
	if c.db.Dialect == sqldb.Postgres {
		commitOrder = `pg_xact_commit_timestamp(p.xmin), p.seq`
	}
	rows, err = c.db.QueryContext(ctx, `SELECT p.order_id, COALESCE(p.customer_id, ''), p.status, p.method, p.amount_milli, COALESCE(p.reason, ''), COALESCE(o.total_milli, -1)
		FROM payments p LEFT JOIN orders o ON o.order_id = p.order_id ORDER BY `+commitOrder)
	if err != nil {
		return Invariant{}, err
	}
	paidByWallet, refusedShort := 0, 0
	for rows.Next() {
		var oid, cust, status, method, reason string
		var amt, total int64
		if err := rows.Scan(&oid, &cust, &status, &method, &amt, &reason, &total); err != nil {
			rows.Close()
			return Invariant{}, err
		}
		d := ledger[oid]
		delete(ledger, oid)
		if total != amt {
			bad = append(bad, fmt.Sprintf("order %s: payment amount %d, order total %d", oid, amt, total))
		}
		_, hasWallet := wallets[cust]
		switch {
		case status == order.PaymentPaid && method == order.MethodWallet:
			paidByWallet++
			if !hasWallet {
				bad = append(bad, fmt.Sprintf("order %s: paid by the wallet of %q, which does not exist", oid, cust))
				continue
			}
			if balance[cust] < amt {
				bad = append(bad, fmt.Sprintf("order %s: charged %d with only %d credit left", oid, amt, balance[cust]))
			}
			if d == nil || d.n != 1 || d.sum != -amt {
				bad = append(bad, fmt.Sprintf("order %s: paid %d but its ledger has %+v (want exactly one debit)", oid, amt, d))
			}
			balance[cust] -= amt
		case status == order.PaymentRefused && reason == payments.ReasonInsufficientCredit:
			refusedShort++
			if balance[cust] >= amt {
				bad = append(bad, fmt.Sprintf("order %s: refused for insufficient credit with %d left for %d (credit sufficed: should be charged)", oid, balance[cust], amt))
			}
			if d != nil {
				bad = append(bad, fmt.Sprintf("order %s: refused but debited %+v", oid, d))
			}
		case status == order.PaymentRefused && reason == payments.ReasonNoWallet:
			if hasWallet || d != nil {
				bad = append(bad, fmt.Sprintf("order %s: refused for no wallet, wallet %v, ledger %+v", oid, hasWallet, d))
			}
		case status == order.PaymentPaid && method == order.MethodCard:
			if cust != "" || d != nil {
				bad = append(bad, fmt.Sprintf("order %s: card payment for customer %q, ledger %+v", oid, cust, d))
			}
		default:
			bad = append(bad, fmt.Sprintf("order %s: unexpected payment %s/%s/%s", oid, status, method, reason))
		}
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return Invariant{}, err
	}
	for oid, d := range ledger {
		bad = append(bad, fmt.Sprintf("order %s: ledger %+v without a wallet payment", oid, d))
	}
	for id, w := range wallets {
		if balance[id] != w.balance {
			bad = append(bad, fmt.Sprintf("wallet %s: balance %d, recomputed %d", id, w.balance, balance[id]))
		}
	}
	inv := Invariant{Name: "charged_exactly_once_when_credit_sufficed", OK: len(bad) == 0, Violations: len(bad),
		Detail: fmt.Sprintf("%d wallet payments and %d refusals for insufficient credit replayed in commit order against %d wallets", paidByWallet, refusedShort, len(wallets))}
	if len(bad) > 0 {
		inv.Detail += "; " + examples(bad)
	}
	return inv, nil
}

// history checks the client's view: every order it got a 202 for is the
// published checkout request of that key and stored once; every rejected
// key has no order; valid synthetic orders were accepted and invalid ones
// rejected; no order is left without an answer.
func (c *checker) history(ctx context.Context, outcomes map[string]outcome) (Invariant, error) {
	type reqRow struct{ orderID, status string }
	reqs := map[string]reqRow{}
	rows, err := c.db.QueryContext(ctx, `SELECT idempotency_key, order_id, status FROM checkout_requests`)
	if err != nil {
		return Invariant{}, err
	}
	for rows.Next() {
		var k string
		var r reqRow
		if err := rows.Scan(&k, &r.orderID, &r.status); err != nil {
			rows.Close()
			return Invariant{}, err
		}
		reqs[checkout.ClientKey(k)] = r // a customer's key is stored scoped to the customer
	}
	rows.Close()
	stored := map[string]int{}
	ids, err := c.db.QueryStrings(ctx, `SELECT order_id FROM orders`)
	if err != nil {
		return Invariant{}, err
	}
	for _, id := range ids {
		stored[id]++
	}
	var bad []string
	accepted := 0
	seenOrder := map[string]string{}
	for k, o := range outcomes {
		switch {
		case o.status == 0:
			bad = append(bad, fmt.Sprintf("%s (%s): no answer after %d attempts", k, o.kind, o.attempts))
		case o.status == http.StatusAccepted:
			accepted++
			r, ok := reqs[k]
			if !ok || r.status != "published" || r.orderID != o.orderID {
				bad = append(bad, fmt.Sprintf("%s: accepted as %s, checkout request %+v", k, o.orderID, r))
			}
			if stored[o.orderID] != 1 {
				bad = append(bad, fmt.Sprintf("%s: order %s stored %d times", k, o.orderID, stored[o.orderID]))
			}
			if prev, dup := seenOrder[o.orderID]; dup {
				bad = append(bad, fmt.Sprintf("keys %s and %s got the same order %s", prev, k, o.orderID))
			}
			seenOrder[o.orderID] = k
			if o.kind == kindInvalid {
				bad = append(bad, fmt.Sprintf("%s: an invalid order was accepted", k))
			}
		default:
			if r, ok := reqs[k]; ok {
				bad = append(bad, fmt.Sprintf("%s: rejected (%d %s) but has checkout request %+v", k, o.status, o.reason, r))
			}
			if o.kind == kindSynthetic {
				bad = append(bad, fmt.Sprintf("%s: a valid synthetic order was rejected: %d %s", k, o.status, o.reason))
			}
		}
	}
	for k, r := range reqs {
		if _, ok := outcomes[k]; !ok && r.status == "published" {
			bad = append(bad, fmt.Sprintf("%s: published order %s the client never sent", k, r.orderID))
		}
	}
	inv := Invariant{Name: "history_every_accepted_order_stored_once", OK: len(bad) == 0, Violations: len(bad),
		Detail: fmt.Sprintf("%d orders sent, %d accepted (202), each checked against checkout_requests and orders", len(outcomes), accepted)}
	if len(bad) > 0 {
		inv.Detail += "; " + examples(bad)
	}
	return inv, nil
}

// exactlyOnceTopics checks the two Kafka-level exactly-once outputs for
// read_committed readers: one paymentProcessed per payment (the
// transactional outbox relay) and one shipmentRequested per PAID payment
// (fulfillment), and reports the records of aborted transactions that
// read_uncommitted readers see.
func (c *checker) exactlyOnceTopics(ctx context.Context, rep *Report) ([]Invariant, error) {
	pays := map[string]string{} // order id -> status
	rows, err := c.db.QueryContext(ctx, `SELECT order_id, status FROM payments`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id, st string
		if err := rows.Scan(&id, &st); err != nil {
			rows.Close()
			return nil, err
		}
		pays[id] = st
	}
	rows.Close()
	var out []Invariant
	for _, t := range []struct {
		topic, name string
		want        func(status string) int
	}{
		{order.TopicPaymentProcessed, "one_payment_processed_per_payment", func(string) int { return 1 }},
		{order.TopicShipmentRequested, "one_shipment_requested_per_paid_order", func(st string) int {
			if st == order.PaymentPaid {
				return 1
			}
			return 0
		}},
	} {
		committedView, err := readTopic(ctx, c.cl, t.topic, true)
		if err != nil {
			return nil, err
		}
		raw, err := readTopic(ctx, c.cl, t.topic, false)
		if err != nil {
			return nil, err
		}
		rep.Topics[t.topic] = TopicCounts{Committed: len(committedView.records), Uncommitted: len(raw.records), AbortMarkers: raw.aborts, CommitMarkers: raw.commits}
		per := map[string]int{}
		for _, r := range committedView.records {
			if isBad(r) {
				continue // made bad by the harness: the DLQ check counts them
			}
			if ev, ok := decodeEvent(ctx, c.serde, r); ok {
				per[ev.orderID]++
			} else {
				per["<undecodable>"]++
			}
		}
		var bad []string
		for id, st := range pays {
			if got, want := per[id], t.want(st); got != want {
				bad = append(bad, fmt.Sprintf("order %s (%s): %d records, want %d", id, st, got, want))
			}
			delete(per, id)
		}
		for id, n := range per {
			bad = append(bad, fmt.Sprintf("order %s: %d records without a payment", id, n))
		}
		inv := Invariant{Name: t.name, OK: len(bad) == 0, Violations: len(bad),
			Detail: fmt.Sprintf("%s: %d records for read_committed readers, %d in the log (read_uncommitted), %d abort markers",
				t.topic, len(committedView.records), len(raw.records), raw.aborts)}
		if len(bad) > 0 {
			inv.Detail += "; " + examples(bad)
		}
		out = append(out, inv)
	}
	for _, topic := range []string{processor.DLQTopic(order.GroupFulfillment), markerTopic} {
		raw, err := readTopic(ctx, c.cl, topic, false)
		if errors.Is(err, kerr.UnknownTopicOrPartition) {
			continue // no marker topic: a relay that is not transactional
		}
		if err != nil {
			return nil, err
		}
		committedView, err := readTopic(ctx, c.cl, topic, true)
		if err != nil {
			return nil, err
		}
		rep.Topics[topic] = TopicCounts{Committed: len(committedView.records), Uncommitted: len(raw.records), AbortMarkers: raw.aborts, CommitMarkers: raw.commits}
	}
	return out, nil
}

// notificationsMatchPayments checks one notification per (order, kind) and
// that the payment notification's kind matches the payment.
func (c *checker) notificationsMatchPayments(ctx context.Context) (Invariant, error) {
	bad := 0
	var details []string
	for _, q := range []struct{ what, sql string }{
		{"PAID without payment_confirmed", `SELECT COUNT(*) FROM payments p WHERE p.status = 'PAID' AND NOT EXISTS (SELECT 1 FROM notifications n WHERE n.order_id = p.order_id AND n.kind = 'payment_confirmed')`},
		{"REFUSED without payment_failed", `SELECT COUNT(*) FROM payments p WHERE p.status = 'REFUSED' AND NOT EXISTS (SELECT 1 FROM notifications n WHERE n.order_id = p.order_id AND n.kind = 'payment_failed')`},
		{"both payment kinds", `SELECT COUNT(*) FROM (SELECT order_id FROM notifications WHERE kind IN ('payment_confirmed', 'payment_failed') GROUP BY order_id HAVING COUNT(*) > 1) d`},
		{"notifications for unknown orders", `SELECT COUNT(*) FROM notifications n WHERE NOT EXISTS (SELECT 1 FROM checkout_requests c WHERE c.order_id = n.order_id AND c.status = 'published')`},
		{"duplicate (order, kind)", `SELECT COUNT(*) FROM (SELECT order_id, kind FROM notifications GROUP BY order_id, kind HAVING COUNT(*) > 1) d`},
	} {
		var n int
		if err := c.db.QueryRowContext(ctx, q.sql).Scan(&n); err != nil {
			return Invariant{}, err
		}
		if n > 0 {
			bad += n
			details = append(details, fmt.Sprintf("%d %s", n, q.what))
		}
	}
	var total int
	if err := c.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM notifications`).Scan(&total); err != nil {
		return Invariant{}, err
	}
	inv := Invariant{Name: "one_notification_per_order_and_kind", OK: bad == 0, Violations: bad, Detail: fmt.Sprintf("%d notifications", total)}
	if bad > 0 {
		inv.Detail += ": " + strings.Join(details, ", ")
	}
	return inv, nil
}

// auditInvariants runs audit.Check and converts its invariants.
func (c *checker) auditInvariants(ctx context.Context) ([]Invariant, map[string]int, error) {
	res, err := audit.Check(ctx, c.db, c.cl, c.serde)
	if err != nil {
		return nil, nil, err
	}
	var out []Invariant
	for _, name := range sortedKeys(res.Invariants) {
		inv := res.Invariants[name]
		out = append(out, Invariant{Name: "audit_" + name, OK: inv.OK, Violations: inv.Violations, Detail: inv.Detail})
	}
	return out, res.DLQRecords, nil
}

// acknowledged checks every order checkout answered 202: its orderCreated is
// in the topic for read_committed readers (acks=all: nothing acknowledged is
// lost when a broker dies), it is stored, it has a payment decision, it is
// debited at most once, and a PAID one has exactly one shipmentRequested.
// The detail counts the orders acknowledged while a Kafka node was down.
func (c *checker) acknowledged(ctx context.Context, outcomes map[string]outcome, downAt func(time.Time) bool) (Invariant, error) {
	created, err := readTopic(ctx, c.cl, order.TopicOrderCreated, true)
	if err != nil {
		return Invariant{}, err
	}
	inTopic := map[string]int{}
	for _, r := range created.records {
		if ev, ok := decodeEvent(ctx, c.serde, r); ok {
			inTopic[ev.orderID]++
		}
	}
	shipped, err := readTopic(ctx, c.cl, order.TopicShipmentRequested, true)
	if err != nil {
		return Invariant{}, err
	}
	ships := map[string]int{}
	for _, r := range shipped.records {
		if ev, ok := decodeEvent(ctx, c.serde, r); ok {
			ships[ev.orderID]++
		}
	}
	set := func(q string) (map[string]int, error) {
		ids, err := c.db.QueryStrings(ctx, q)
		m := map[string]int{}
		for _, id := range ids {
			m[id]++
		}
		return m, err
	}
	stored, err := set(`SELECT order_id FROM orders`)
	if err != nil {
		return Invariant{}, err
	}
	debits, err := set(`SELECT order_id FROM wallet_ledger`)
	if err != nil {
		return Invariant{}, err
	}
	paid, err := set(`SELECT order_id FROM payments WHERE status = 'PAID'`)
	if err != nil {
		return Invariant{}, err
	}
	decided, err := set(`SELECT order_id FROM payments`)
	if err != nil {
		return Invariant{}, err
	}
	var bad []string
	acked, whileDown, dupCreated := 0, 0, 0
	for k, o := range outcomes {
		if o.status != http.StatusAccepted {
			continue
		}
		acked++
		if downAt != nil && downAt(o.at) {
			whileDown++
		}
		id := o.orderID
		switch {
		case inTopic[id] == 0:
			bad = append(bad, fmt.Sprintf("%s: order %s acknowledged but not in %s (lost)", k, id, order.TopicOrderCreated))
		case stored[id] != 1:
			bad = append(bad, fmt.Sprintf("%s: order %s stored %d times", k, id, stored[id]))
		case decided[id] != 1:
			bad = append(bad, fmt.Sprintf("%s: order %s has %d payment decisions", k, id, decided[id]))
		case debits[id] > 1:
			bad = append(bad, fmt.Sprintf("%s: order %s debited %d times", k, id, debits[id]))
		case paid[id] == 1 && ships[id] != 1:
			bad = append(bad, fmt.Sprintf("%s: paid order %s has %d shipmentRequested", k, id, ships[id]))
		case paid[id] == 0 && ships[id] != 0:
			bad = append(bad, fmt.Sprintf("%s: unpaid order %s has %d shipmentRequested", k, id, ships[id]))
		}
		if inTopic[id] > 1 {
			dupCreated++
		}
	}
	inv := Invariant{Name: "every_acknowledged_order_present_stored_charged_once_shipped_once", OK: len(bad) == 0, Violations: len(bad),
		Detail: fmt.Sprintf("%d orders acknowledged (202), %d of them while a Kafka node was down; %d with more than one orderCreated (consumers deduplicate)", acked, whileDown, dupCreated)}
	if len(bad) > 0 {
		inv.Detail += "; " + examples(bad)
	}
	return inv, nil
}

// badRecord is a record the harness made bad (undecodable) and produced.
type badRecord struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// badKeyPrefix starts the key of every record the harness makes bad.
const badKeyPrefix = "chaos-bad-"

func isBad(r *kgo.Record) bool { return strings.HasPrefix(string(r.Key), badKeyPrefix) }

// dlqExact checks that each group's DLQ holds exactly the bad records of its
// input topics for read_committed readers (by the DLQ records' original
// topic, partition and offset headers), and nothing else; fulfillment's
// (transactional) each once, the inbox groups' at least once (a crash
// between the DLQ produce and the offset commit writes it again).
func (c *checker) dlqExact(ctx context.Context, bad []badRecord) (Invariant, error) {
	var viol []string
	total, dups := 0, 0
	for _, g := range order.Groups {
		want := map[badRecord]bool{}
		var inputs []string
		switch g {
		case order.GroupOrders:
			inputs = orders.Topics
		case order.GroupPayments:
			inputs = payments.Topics
		case order.GroupNotifications:
			inputs = notifications.Topics
		case order.GroupFulfillment:
			inputs = fulfillment.Topics
		}
		for _, b := range bad {
			if contains(inputs, b.Topic) {
				want[b] = true
			}
		}
		v, err := readTopic(ctx, c.cl, processor.DLQTopic(g), true)
		if err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
			return Invariant{}, err
		}
		got := map[badRecord]int{}
		if v != nil {
			for _, r := range v.records {
				var b badRecord
				for _, h := range r.Headers {
					switch h.Key {
					case processor.HeaderOriginalTopic:
						b.Topic = string(h.Value)
					case processor.HeaderOriginalPartition:
						p, _ := strconv.ParseInt(string(h.Value), 10, 32)
						b.Partition = int32(p)
					case processor.HeaderOriginalOffset:
						b.Offset, _ = strconv.ParseInt(string(h.Value), 10, 64)
					}
				}
				got[b]++
				total++
			}
		}
		for b := range want {
			if got[b] == 0 {
				viol = append(viol, fmt.Sprintf("%s: bad record %s/%d@%d not in the DLQ", g, b.Topic, b.Partition, b.Offset))
			}
		}
		for b, n := range got {
			switch {
			case !want[b]:
				viol = append(viol, fmt.Sprintf("%s: DLQ holds %s/%d@%d, which was not made bad", g, b.Topic, b.Partition, b.Offset))
			case n > 1 && g == order.GroupFulfillment:
				viol = append(viol, fmt.Sprintf("%s: DLQ holds bad record %s/%d@%d %d times (its DLQ is written in its transaction: exactly once)", g, b.Topic, b.Partition, b.Offset, n))
			case n > 1:
				dups += n - 1
			}
		}
	}
	inv := Invariant{Name: "dlq_holds_exactly_the_records_made_bad", OK: len(viol) == 0, Violations: len(viol),
		Detail: fmt.Sprintf("%d records made bad, %d DLQ records over %d groups, %d of them copies of a bad record already there (the inbox groups write their DLQ before committing the offset: at least once, a reader deduplicates on the original topic/partition/offset headers; fulfillment's is transactional and must hold each once)", len(bad), total, len(order.Groups), dups)}
	if len(viol) > 0 {
		inv.Detail += "; " + examples(viol)
	}
	return inv, nil
}
