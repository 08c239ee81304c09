// Package servicetest is the common setup of the order system's service
// tests (orders, payments, ...): a database of every dialect, a context and
// a Serde.
package servicetest

import (
	"context"
	"testing"
	"time"

	"github.com/ordercast/ordercast/ordersystem/schema"
	"github.com/ordercast/ordercast/ordersystem/schema/schematest"
	"github.com/ordercast/ordercast/ordersystem/store"
	"github.com/ordercast/ordercast/ordersystem/store/storetest"
)

// Each runs fn, as storetest.Each does, in a subtest per available dialect
// on a freshly migrated database (SQLite; PostgreSQL when
// ORDERCAST_TEST_POSTGRES is set), with ctx, cancelled after 60 s (a bound against a hang; a loaded machine under -race takes over 20 s for the larger tests) or when
// fn returns, and a Serde on a new in-memory schema registry
// (schematest.Serde) with the order system's schemas.
func Each(t *testing.T, fn func(t *testing.T, ctx context.Context, db *store.DB, serde *schema.Serde)) {
	t.Helper()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		fn(t, ctx, db, schematest.Serde(t, nil))
	})
}
