package replay

import "github.com/ordercast/ordercast/ordersystem/order"

// Invoice kinds returned by [Classify]. Only KindSale invoices are sent to
// checkout; the others are counted by kind in [Summary].NotOrders.
const (
	// KindSale: a numeric invoice with at least one line of quantity > 0 and
	// no malformed row. It is sent exactly as in the data, including any
	// lines with quantity <= 0 or price <= 0: checkout's validation decides
	// about those (prices are checkout's own anyway).
	KindSale = "sale"
	// KindCancellation: InvoiceNo starts with "C" (a cancellation or return).
	KindCancellation = "cancellation"
	// KindAdjustment: InvoiceNo starts with "A" (an accounting adjustment).
	KindAdjustment = "adjustment"
	// KindWriteOff: a numeric invoice whose lines all have quantity <= 0 (in
	// the data: a stock write-off, negative quantity, price 0, no customer).
	KindWriteOff = "write_off"
	// KindFeesOnly: a numeric invoice whose lines of quantity > 0 are all
	// charges booked as lines (postage, bank charges, marketplace fees:
	// order.FeeStockCodes), no product: nothing a customer could order.
	KindFeesOnly = "fees_only"
	// KindMalformedRow: the invoice has at least one malformed row (see
	// [RowError]). It takes precedence over every other kind: an invoice
	// that was not read in full is never sent, whatever its number.
	KindMalformedRow = "malformed_row"
)

// Classify returns the kind of an invoice, one of the Kind* constants, by
// these rules in order: any row error (or, for an Invoice built by hand, no
// lines or an InvoiceNo that is not [CA]?digits) makes it KindMalformedRow; an InvoiceNo
// starting with "C" KindCancellation, with "A" KindAdjustment; a (numeric)
// invoice whose lines all have quantity <= 0 KindWriteOff; anything else
// KindSale. It only reads inv.
func Classify(inv *Invoice) (kind string) {
	switch {
	case len(inv.RowErrors) > 0 || len(inv.Lines) == 0 || !validInvoiceNo(inv.No):
		return KindMalformedRow
	case inv.No[0] == 'C':
		return KindCancellation
	case inv.No[0] == 'A':
		return KindAdjustment
	}
	fees := false
	for _, l := range inv.Lines {
		if l.Quantity <= 0 {
			continue
		}
		if !order.IsFeeStockCode(l.StockCode) {
			return KindSale
		}
		fees = true
	}
	if fees {
		return KindFeesOnly
	}
	return KindWriteOff
}
