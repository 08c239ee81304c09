package checkout

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ordercast/ordercast/ordersystem/order"
)

// product is one catalog entry.
type product struct {
	description string
	unitPrice   order.Money
}

// catalog maps a normalized stock code to its product. It is immutable once
// built: ReloadCatalog swaps in a new one.
type catalog map[string]product

// loadCatalog reads table catalog. Codes are normalized with
// order.NormalizeStockCode; a row with a negative price, an empty code or a
// code that normalizes to one already read is skipped with a warning (the
// event contract requires unitPriceMilli >= 0, and a duplicate would make
// the price depend on row order).
func (s *Service) loadCatalog(ctx context.Context) (catalog, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT stock_code, description, unit_price_milli FROM catalog`)
	if err != nil {
		return nil, fmt.Errorf("checkout: load catalog: %w", err)
	}
	defer rows.Close()
	c := make(catalog)
	skipped := 0
	for rows.Next() {
		var (
			code, desc string
			price      int64
		)
		if err := rows.Scan(&code, &desc, &price); err != nil {
			return nil, fmt.Errorf("checkout: load catalog: %w", err)
		}
		norm := order.NormalizeStockCode(code)
		_, dup := c[norm]
		switch {
		case norm == "", price < 0, dup:
			skipped++
			s.log.Warn("checkout: catalog row skipped", slog.String("stock_code", code),
				slog.Int64("unit_price_milli", price), slog.Bool("duplicate", dup))
			continue
		}
		c[norm] = product{description: desc, unitPrice: order.Money(price)}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("checkout: load catalog: %w", err)
	}
	if len(c) == 0 {
		s.log.Warn("checkout: the catalog is empty: every order will be rejected with unknown_stock_code")
	}
	return c, nil
}

// ReloadCatalog reads table catalog again and replaces the in-memory
// catalog with it as a whole; requests being priced keep the catalog they
// started with. On error the current catalog stays in use. It is safe to
// call concurrently with requests and with itself.
func (s *Service) ReloadCatalog(ctx context.Context) error {
	c, err := s.loadCatalog(ctx)
	if err != nil {
		return err
	}
	s.catalog.Store(&c)
	s.metrics.catalogSize.Set(float64(len(c)))
	return nil
}

// CatalogSize returns the number of products in the in-memory catalog.
func (s *Service) CatalogSize() int { return len(*s.catalog.Load()) }

// price turns a validated request (normalized stock codes, quantities in
// range) into the OrderCreated event of a new order with the given ids,
// priced from the catalog. The errors are 422 unknown_stock_code and
// amount_overflow.
func (c catalog) price(req *order.PlaceOrderRequest, orderID, eventID string, now time.Time) (*order.OrderCreated, *apiError) {
	lines := make([]order.Line, len(req.Lines))
	var total order.Money
	for i, l := range req.Lines {
		if order.IsFeeStockCode(l.StockCode) {
			return nil, unprocessable(order.ReasonNotAProduct, fmt.Sprintf(
				"lines[%d].stockCode %q is a charge or fee of the catalog (postage, bank charges, ...), not an orderable product", i, l.StockCode))
		}
		p, ok := c[l.StockCode]
		if !ok {
			return nil, unprocessable(order.ReasonUnknownStockCode,
				fmt.Sprintf("lines[%d]: unknown stock code %q", i, l.StockCode))
		}
		lineTotal, ok := p.unitPrice.Times(l.Quantity)
		if !ok {
			return nil, unprocessable(order.ReasonAmountOverflow,
				fmt.Sprintf("lines[%d]: %d x %s overflows", i, l.Quantity, p.unitPrice))
		}
		if total+lineTotal < total { // both are >= 0
			return nil, unprocessable(order.ReasonAmountOverflow,
				fmt.Sprintf("lines[%d]: the order total overflows", i))
		}
		total += lineTotal
		lines[i] = order.Line{
			StockCode:   l.StockCode,
			Description: p.description,
			Quantity:    l.Quantity,
			UnitPrice:   p.unitPrice,
			LineTotal:   lineTotal,
		}
	}
	return &order.OrderCreated{
		EventID: eventID,
		Order: order.Order{
			OrderID:    orderID,
			CustomerID: req.CustomerID,
			Country:    req.Country,
			Lines:      lines,
			Total:      total,
			CreatedAt:  now.UTC().Truncate(time.Millisecond),
			Reference:  req.Reference,
			Channel:    req.Channel,
		},
	}, nil
}
