package orders_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/ordercast/ordercast/order"
	"github.com/ordercast/ordercast/schema"
	"github.com/ordercast/ordercast/service/orders"
	"github.com/ordercast/ordercast/store"
	"github.com/ordercast/ordercast/store/storetest"
)

// The orders service stores orderCreated's channel when the event has one
// and its Serde reads it: NULL for v1 records, and for any record read by an
// instance pinned to v1 (the old build of a rolling upgrade).
func TestStoresChannel(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		reg := srfake.New()
		defer reg.Close()
		cl, err := sr.NewClient(sr.URLs(reg.URL()))
		if err != nil {
			t.Fatal(err)
		}
		cur, err := schema.New(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		old, err := schema.New(ctx, cl, schema.WithVersion(order.TopicOrderCreated, 1))
		if err != nil {
			t.Fatal(err)
		}
		newSvc := &orders.Service{DB: db, Serde: cur}
		oldSvc := &orders.Service{DB: db, Serde: old}
		cases := []struct {
			id     string
			writer *schema.Serde
			reader *orders.Service
			want   sql.NullString
		}{
			{"ord_v2_new", cur, newSvc, sql.NullString{String: "web", Valid: true}},
			{"ord_v1_new", old, newSvc, sql.NullString{}},
			{"ord_v2_old", cur, oldSvc, sql.NullString{}},
			{"ord_v1_old", old, oldSvc, sql.NullString{}},
		}
		for i, c := range cases {
			ev := order.OrderCreated{EventID: "evt_" + c.id, Order: order.Order{
				OrderID: c.id, CustomerID: "17850", Channel: "web", CreatedAt: time.Now().UTC().Truncate(time.Millisecond),
				Lines: []order.Line{{StockCode: "85123A", Quantity: 2, UnitPrice: 2550, LineTotal: 5100}}, Total: 5100,
			}}
			b, err := c.writer.Encode(order.TopicOrderCreated, &ev)
			if err != nil {
				t.Fatal(err)
			}
			r := &kgo.Record{Topic: order.TopicOrderCreated, Partition: 0, Offset: int64(i), Key: []byte("17850"), Value: b}
			if err := c.reader.Handle(ctx, r); err != nil {
				t.Fatalf("%s: Handle: %v", c.id, err)
			}
			var got sql.NullString
			if err := db.QueryRowContext(ctx, db.Rebind(`SELECT channel FROM orders WHERE order_id = ?`), c.id).Scan(&got); err != nil {
				t.Fatalf("%s: %v", c.id, err)
			}
			if got != c.want {
				t.Errorf("%s: channel %v, want %v", c.id, got, c.want)
			}
		}
	})
}
