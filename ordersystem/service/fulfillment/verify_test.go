package fulfillment_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/schema/schematest"
	"github.com/ordercast/ordercast/ordersystem/service/fulfillment"
	"github.com/ordercast/ordercast/ordersystem/store"
	"github.com/ordercast/ordercast/processor"
)

// recordOf is the payment record payments writes for ev.
func recordOf(ev order.PaymentProcessed) fulfillment.Payment {
	return fulfillment.Payment{CustomerID: ev.CustomerID, Status: ev.Status, Method: ev.Method, Amount: ev.Amount, ProcessedAt: ev.ProcessedAt.UTC()}
}

func recordsOf(m map[string]fulfillment.Payment) fulfillment.Records {
	return fulfillment.RecordsFunc(func(_ context.Context, orderID string) (fulfillment.Payment, bool, error) {
		p, ok := m[orderID]
		return p, ok, nil
	})
}

// TestForgedPaidShipsNothing: a PAID paymentProcessed that the payments
// service's record (its payments table, here in SQLite) does not confirm
// ships nothing and is a permanent error naming the order and the reason
// (so the processor sends it to the DLQ): an order payments refused, an
// order it never decided, and a PAID copy with another amount or customer.
// The PAID event payments did write ships. TransformBatch decides each
// record of a batch as Transform does, with one query for the batch.
func TestForgedPaidShipsNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := store.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "ordercast.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := store.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2010, 12, 1, 8, 26, 0, 123e6, time.UTC)
	for _, row := range []struct {
		order, cust, status, method string
		amount                      int64
	}{
		{"ord_paid", "17850", order.PaymentPaid, order.MethodWallet, 15300},
		{"ord_refused", "17850", order.PaymentRefused, order.MethodWallet, 999000},
		{"ord_guest", "", order.PaymentPaid, order.MethodCard, 2500},
	} {
		var cust any
		if row.cust != "" {
			cust = row.cust
		}
		if _, err := db.ExecContext(ctx, db.Rebind(`INSERT INTO payments (order_id, customer_id, status, method, amount_milli, reason, processed_at) VALUES (?, ?, ?, ?, ?, '', ?)`),
			row.order, cust, row.status, row.method, row.amount, at.UnixMilli()); err != nil {
			t.Fatal(err)
		}
	}
	serde := schematest.Serde(t, nil)
	svc := &fulfillment.Service{Serde: serde, Payments: fulfillment.DBRecords(db)}
	paid := func(orderID, cust, method string, amount order.Money) *kgo.Record {
		ev := order.PaymentProcessed{EventID: "evt_" + orderID, OrderID: orderID, CustomerID: cust, Status: order.PaymentPaid,
			Method: method, Amount: amount, Country: "United Kingdom", ProcessedAt: at}
		v, err := serde.Encode(order.TopicPaymentProcessed, &ev)
		if err != nil {
			t.Fatal(err)
		}
		return &kgo.Record{Topic: order.TopicPaymentProcessed, Value: v}
	}
	forged := []struct {
		name string
		rec  *kgo.Record
		why  string
	}{
		{"refused order", paid("ord_refused", "17850", order.MethodWallet, 999000), "recorded REFUSED"},
		{"unknown order", paid("ord_unknown", "17850", order.MethodWallet, 15300), "no payment record"},
		{"other amount", paid("ord_paid", "17850", order.MethodWallet, 1), "recorded amount"},
		{"other customer", paid("ord_paid", "12346", order.MethodWallet, 15300), "recorded for customer"},
		{"guest as a customer", paid("ord_guest", "17850", order.MethodCard, 2500), "recorded for customer"},
	}
	for _, c := range forged {
		outs, err := svc.Transform(ctx, c.rec)
		if len(outs) != 0 {
			t.Errorf("%s: %d shipmentRequested records; want none", c.name, len(outs))
		}
		var ue *fulfillment.UnconfirmedError
		if !errors.As(err, &ue) || !errors.Is(err, fulfillment.ErrUnconfirmed) || !processor.IsPermanent(err) || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%s: %v; want a permanent UnconfirmedError saying %q", c.name, err, c.why)
		}
	}
	for _, rec := range []*kgo.Record{paid("ord_paid", "17850", order.MethodWallet, 15300), paid("ord_guest", "", order.MethodCard, 2500)} {
		if outs, err := svc.Transform(ctx, rec); err != nil || len(outs) != 1 {
			t.Errorf("a PAID event the record confirms: %d records, %v; want one shipment", len(outs), err)
		}
	}

	// The same events in one batch (TransformBatch): one query for all of
	// them; the forged ones reported failed with the same reasons, the
	// confirmed ones shipped with Transform's bytes, a REFUSED one and an
	// undecodable one as Transform would have them.
	refused := func() *kgo.Record {
		ev := order.PaymentProcessed{EventID: "evt_r", OrderID: "ord_refused", CustomerID: "17850", Status: order.PaymentRefused,
			Method: order.MethodWallet, Amount: 999000, Country: "United Kingdom", ProcessedAt: at, Reason: "insufficient credits"}
		v, err := serde.Encode(order.TopicPaymentProcessed, &ev)
		if err != nil {
			t.Fatal(err)
		}
		return &kgo.Record{Topic: order.TopicPaymentProcessed, Value: v}
	}()
	batch := []*kgo.Record{paid("ord_paid", "17850", order.MethodWallet, 15300), refused}
	whys := map[int]string{}
	for _, c := range forged {
		whys[len(batch)] = c.why
		batch = append(batch, c.rec)
	}
	batch = append(batch, paid("ord_guest", "", order.MethodCard, 2500), &kgo.Record{Topic: order.TopicPaymentProcessed, Value: []byte("not avro")})
	garbage := len(batch) - 1
	before := fulfillment.Queries(svc.Payments)
	outs, err := svc.TransformBatch(ctx, batch)
	if q := fulfillment.Queries(svc.Payments) - before; q != 1 {
		t.Errorf("TransformBatch of %d events ran %d queries, want 1", len(batch), q)
	}
	var be *processor.BatchError
	if !errors.As(err, &be) || len(outs) != len(batch) {
		t.Fatalf("TransformBatch: %d outputs, %v; want one entry per record and a BatchError", len(outs), err)
	}
	for i, rec := range batch {
		one, oneErr := svc.Transform(ctx, rec)
		ferr := be.Failed(i)
		switch {
		case i == garbage:
			if ferr == nil || oneErr == nil || processor.IsPermanent(ferr) != processor.IsPermanent(oneErr) {
				t.Errorf("undecodable record: batch %v, alone %v; want the same kind of error", ferr, oneErr)
			}
		case whys[i] != "":
			var ue *fulfillment.UnconfirmedError
			if !errors.As(ferr, &ue) || !processor.IsPermanent(ferr) || !strings.Contains(ferr.Error(), whys[i]) || len(outs[i]) != 0 {
				t.Errorf("record %d in the batch: %v, %d outputs; want a permanent UnconfirmedError saying %q", i, ferr, len(outs[i]), whys[i])
			}
		default:
			if ferr != nil || oneErr != nil || len(outs[i]) != len(one) {
				t.Fatalf("record %d: batch %d outputs, %v; alone %d, %v; want the same", i, len(outs[i]), ferr, len(one), oneErr)
			}
			for j := range one {
				if string(outs[i][j].Value) != string(one[j].Value) || string(outs[i][j].Key) != string(one[j].Key) {
					t.Errorf("record %d: the batch's shipment differs from Transform's", i)
				}
			}
		}
	}

	// Without records nothing ships; a batch then fails as a whole, so
	// that each record is transformed alone (and dead-lettered with why).
	if outs, err := (&fulfillment.Service{Serde: serde}).Transform(ctx, paid("ord_paid", "17850", order.MethodWallet, 15300)); len(outs) != 0 || !processor.IsPermanent(err) {
		t.Errorf("Service without Payments: %d records, %v; want none and a permanent error", len(outs), err)
	}
	if outs, err := (&fulfillment.Service{Serde: serde}).TransformBatch(ctx, batch[:1]); outs != nil || err == nil || errors.As(err, &be) {
		t.Errorf("Service without Payments, a batch: %d records, %v; want none and an error of the whole batch", len(outs), err)
	}
}

// TestUnreadableRecordIsTransient: a payment record that cannot be read
// (the database is away) ships nothing and is a transient error (retried,
// not dead-lettered as forged at the first attempt).
func TestUnreadableRecordIsTransient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	serde := schematest.Serde(t, nil)
	down := errors.New("database is down")
	calls := 0
	svc := &fulfillment.Service{Serde: serde, Payments: fulfillment.RecordsFunc(func(context.Context, string) (fulfillment.Payment, bool, error) {
		calls++
		return fulfillment.Payment{}, false, down
	})}
	ev := order.PaymentProcessed{EventID: "evt_1", OrderID: "ord_1", Status: order.PaymentPaid, Method: order.MethodCard, Amount: 1, ProcessedAt: time.Now()}
	v, err := serde.Encode(order.TopicPaymentProcessed, &ev)
	if err != nil {
		t.Fatal(err)
	}
	hctx, hcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer hcancel()
	outs, err := svc.Transform(hctx, &kgo.Record{Topic: order.TopicPaymentProcessed, Value: v})
	if len(outs) != 0 || !errors.Is(err, down) || processor.IsPermanent(err) {
		t.Errorf("unreadable record: %d records, %v; want none and the transient read error", len(outs), err)
	}
	if calls < 2 {
		t.Errorf("the record was read %d times before giving up; want retries", calls)
	}
	// In a batch, a read that fails fails the whole batch (not a
	// BatchError: its records are then transformed alone, with the
	// retries above), without retrying it itself.
	calls = 0
	outs2, err := svc.TransformBatch(ctx, []*kgo.Record{{Topic: order.TopicPaymentProcessed, Value: v}})
	var be *processor.BatchError
	if outs2 != nil || !errors.Is(err, down) || errors.As(err, &be) || calls != 1 {
		t.Errorf("unreadable record in a batch: %d outputs, %v, %d reads; want none, the read error of the whole batch, one read", len(outs2), err, calls)
	}
}

// TestTransformBatchWithoutBatchRecords: with a Records that is not a
// BatchRecords, TransformBatch reads each order's record with Payment and
// ships what Transform ships.
func TestTransformBatchWithoutBatchRecords(t *testing.T) {
	ctx := context.Background()
	serde := schematest.Serde(t, nil)
	at := time.Date(2010, 12, 1, 8, 26, 0, 0, time.UTC)
	var recs []*kgo.Record
	paid := map[string]fulfillment.Payment{}
	for i := range 3 {
		ev := order.PaymentProcessed{EventID: fmt.Sprintf("evt_%d", i), OrderID: fmt.Sprintf("ord_%d", i), CustomerID: "17850",
			Status: order.PaymentPaid, Method: order.MethodWallet, Amount: 1000, Country: "France", ProcessedAt: at}
		if i != 1 {
			paid[ev.OrderID] = recordOf(ev) // ord_1 has no record: forged
		}
		v, err := serde.Encode(order.TopicPaymentProcessed, &ev)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Topic: order.TopicPaymentProcessed, Value: v})
	}
	svc := &fulfillment.Service{Serde: serde, Payments: recordsOf(paid)}
	outs, err := svc.TransformBatch(ctx, recs)
	var be *processor.BatchError
	if !errors.As(err, &be) || be.Failed(1) == nil || be.Failed(0) != nil || be.Failed(2) != nil {
		t.Fatalf("TransformBatch: %v; want a BatchError failing record 1 alone", err)
	}
	for _, i := range []int{0, 2} {
		one, err := svc.Transform(ctx, recs[i])
		if err != nil || len(outs[i]) != 1 || string(outs[i][0].Value) != string(one[0].Value) {
			t.Errorf("record %d: %d outputs in the batch, alone %v; want Transform's shipment", i, len(outs[i]), err)
		}
	}
}

// heldPayments returns a SQLite database with the payments of orders
// ord_000 to ord_<paid-1> (customer 17850, PAID by wallet, amount 1000 +
// the order's number) whose pool's one connection is held by conn: a query
// waits until conn is closed.
func heldPayments(ctx context.Context, t *testing.T, paid int) (*store.DB, *sql.Conn) {
	t.Helper()
	db, err := store.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "ordercast.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.DB.SetMaxOpenConns(1)
	if err := store.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2010, 12, 1, 8, 26, 0, 0, time.UTC)
	for i := range paid {
		if _, err := db.ExecContext(ctx, db.Rebind(`INSERT INTO payments (order_id, customer_id, status, method, amount_milli, reason, processed_at) VALUES (?, ?, ?, ?, ?, '', ?)`),
			fmt.Sprintf("ord_%03d", i), "17850", order.PaymentPaid, order.MethodWallet, int64(1000+i), at.UnixMilli()); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := db.DB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return db, conn
}

// TestDBRecordsShareQueries: lookups made while a query runs share the next
// one (DBRecords). With the pool's one connection held, the first lookup's
// query waits, and 319 more lookups queue behind it; once the connection is
// free, they are answered by a few queries of up to 256 orders, not one
// each, and each gets its own order's record, or none for an order without
// one.
func TestDBRecordsShareQueries(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const paid, unknown = 300, 20
	db, conn := heldPayments(ctx, t, paid)
	recs := fulfillment.DBRecords(db)
	type result struct {
		id  string
		p   fulfillment.Payment
		ok  bool
		err error
	}
	results := make(chan result, paid+unknown)
	for i := range paid + unknown {
		id := fmt.Sprintf("ord_%03d", i) // ord_300 and up have no record
		go func() {
			p, ok, err := recs.Payment(ctx, id)
			results <- result{id, p, ok, err}
		}()
	}
	// Every lookup is in the first query (waiting for the connection) or
	// queued behind it.
	deadline := time.Now().Add(30 * time.Second)
	for fulfillment.Querying(recs)+fulfillment.Queued(recs) < paid+unknown {
		if time.Now().After(deadline) {
			t.Fatalf("%d lookups in the first query and %d queued behind it, want %d in all",
				fulfillment.Querying(recs), fulfillment.Queued(recs), paid+unknown)
		}
		time.Sleep(time.Millisecond)
	}
	conn.Close()
	for range paid + unknown {
		r := <-results
		var i int
		fmt.Sscanf(r.id, "ord_%d", &i)
		switch {
		case r.err != nil:
			t.Errorf("%s: %v", r.id, r.err)
		case i >= paid && r.ok:
			t.Errorf("%s: a record %+v for an order without one", r.id, r.p)
		case i < paid && (!r.ok || r.p.Amount != order.Money(1000+i) || r.p.CustomerID != "17850" || r.p.Status != order.PaymentPaid):
			t.Errorf("%s: %+v (ok %v), want its own record (amount %d)", r.id, r.p, r.ok, 1000+i)
		}
	}
	// The first query (up to 256 lookups), then the rest in queries of up to
	// 256.
	if q := fulfillment.Queries(recs); q > 3 {
		t.Errorf("%d queries for %d lookups made at once, want at most 3", q, paid+unknown)
	}
}

// TestDBRecordsCallerCancelled: a lookup whose context ends returns at once
// with that context's error, both the one whose query runs (stuck on the
// database) and one queued behind it; the query still serves the others,
// and lookups after it are served as before.
func TestDBRecordsCallerCancelled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db, conn := heldPayments(ctx, t, 3)
	recs := fulfillment.DBRecords(db)
	type result struct {
		ok  bool
		err error
	}
	lookup := func(ctx context.Context, id string) chan result {
		c := make(chan result, 1)
		go func() {
			_, ok, err := recs.Payment(ctx, id)
			c <- result{ok, err}
		}()
		return c
	}
	leadCtx, cancelLead := context.WithCancel(ctx)
	lead := lookup(leadCtx, "ord_000") // its query waits for the held connection
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d lookups in the query, %d queued", what, fulfillment.Querying(recs), fulfillment.Queued(recs))
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitFor("the first lookup in its query", func() bool { return fulfillment.Querying(recs) == 1 })
	queuedCtx, cancelQueued := context.WithCancel(ctx)
	queued := lookup(queuedCtx, "ord_001")
	other := lookup(ctx, "ord_002")
	waitFor("two lookups queued", func() bool { return fulfillment.Queued(recs) == 2 })
	for name, c := range map[string]struct {
		cancel context.CancelFunc
		res    chan result
	}{"the lookup whose query runs": {cancelLead, lead}, "a queued lookup": {cancelQueued, queued}} {
		c.cancel()
		select {
		case r := <-c.res:
			if !errors.Is(r.err, context.Canceled) {
				t.Errorf("%s, cancelled: ok %v, error %v; want context.Canceled", name, r.ok, r.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not return at its context's end (the database still held)", name)
		}
	}
	conn.Close() // the query goes on and serves the others
	select {
	case r := <-other:
		if r.err != nil || !r.ok {
			t.Errorf("the lookup queued beside the cancelled ones: ok %v, error %v; want its record", r.ok, r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the lookup queued beside the cancelled ones was not served")
	}
	if _, ok, err := recs.Payment(ctx, "ord_001"); err != nil || !ok {
		t.Errorf("a lookup after the cancelled ones: ok %v, error %v; want its record", ok, err)
	}
}
