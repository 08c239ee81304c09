package replay

import (
	"cmp"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/ordercast/ordercast/ordersystem/order"
)

// Product is one catalog entry derived from the data.
type Product struct {
	// StockCode is the normalized code (order.NormalizeStockCode).
	StockCode string `json:"stockCode"`
	// Description is the most common non-empty Description of the code's
	// priced rows (ties: the lexicographically smallest); "" if all of them
	// are empty.
	Description string `json:"description"`
	// UnitPrice is the most common positive UnitPrice of the code (ties: the
	// lower price), in thousandths of GBP; always > 0.
	UnitPrice order.Money `json:"unitPrice"`
	// PricedRows is the number of well-formed rows with UnitPrice > 0 the
	// code has.
	PricedRows int `json:"pricedRows"`
}

// Seed is what a fresh environment is seeded with, derived from the data by
// [ScanCatalog]: the catalog and the known customers. Its methods only read
// it.
type Seed struct {
	// Products maps a normalized stock code to its catalog entry. Codes that
	// never have a positive price in a well-formed row are absent.
	Products map[string]Product `json:"products"`
	// Customers maps each known customer id (the non-empty CustomerID of a
	// sale invoice, see [Classify]) to the number of its sale invoices; the
	// number of customers is len(Customers).
	Customers map[string]int `json:"customers"`
	// Rows is the number of data rows read (the header excluded).
	Rows int `json:"rows"`
	// Invoices is the number of distinct InvoiceNo values (of invoices of
	// every kind).
	Invoices int `json:"invoices"`
	// RowErrors counts the malformed rows by reason (the Row* constants).
	RowErrors map[string]int `json:"rowErrors"`
}

// StockCodes returns the catalog's stock codes, sorted.
func (s *Seed) StockCodes() []string { return slices.Sorted(maps.Keys(s.Products)) }

// CustomerIDs returns the known customer ids, sorted.
func (s *Seed) CustomerIDs() []string { return slices.Sorted(maps.Keys(s.Customers)) }

// ScanCatalog reads an Online Retail CSV (as [ReadInvoices] does: header
// required, malformed rows counted, not fatal) in one streaming pass and
// derives the [Seed]:
//
//   - the catalog: for each stock code, normalized with
//     order.NormalizeStockCode so that "47566b" and "47566B" are one product,
//     its most common positive UnitPrice (ties: the lower) and most common
//     non-empty Description, both counted over the code's well-formed rows
//     with UnitPrice > 0, whatever the invoice's kind (a cancellation line
//     carries the price the product was sold at; write-offs, priced 0, do
//     not count, so their "damaged"-style descriptions never win);
//   - the known customers: the CustomerID of every invoice [Classify] would
//     call a sale.
//
// Memory is proportional to the number of distinct stock codes, prices,
// descriptions and invoices, not to the number of rows. On the full data set
// (541,909 rows, gzip) it takes 0.4-0.6 s on two cores, about 55 MB of
// short-lived allocations.
//
// The error is non-nil only for a missing or invalid header or a failing r.
// ScanCatalog keeps no state between calls: concurrent calls on different
// readers are safe.
func ScanCatalog(r io.Reader) (*Seed, error) {
	cr := newCSVReader(r)
	p, err := readHeader(cr)
	if err != nil {
		return nil, err
	}
	var (
		invoices = make(map[string]*invState, 32<<10)
		tallies  = make(map[string]*tally, 8<<10)
		rowErrs  = make(map[string]int)
		rows     int
		last     *invState
		lastNo   string
		row      parsedRow
	)
	get := func(no string) *invState {
		if last != nil && no == lastNo {
			return last
		}
		st := invoices[no]
		if st == nil {
			no = strings.Clone(no) // no aliases the whole record's string
			st = &invState{}
			invoices[no] = st
		}
		last, lastNo = st, no
		return st
	}
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		rows++
		if err != nil {
			var pe *csv.ParseError
			if !errors.As(err, &pe) {
				return nil, fmt.Errorf("replay: read csv: %w", err)
			}
			get(p.field(rec, colInvoiceNo)).bad = true
			rowErrs[RowCSVSyntax]++
			continue
		}
		reason, _ := p.parse(rec, &row)
		st := get(row.invoiceNo)
		if reason != RowFieldCount {
			if !st.hasHeader {
				st.customerID, st.country, st.hasHeader = strings.Clone(row.customerID), strings.Clone(row.country), true
			} else if reason == "" {
				if row.customerID != st.customerID {
					reason = RowCustomerMismatch
				} else if row.country != st.country {
					reason = RowCountryMismatch
				}
			}
		}
		if reason != "" {
			st.bad = true
			rowErrs[reason]++
			continue
		}
		code := order.NormalizeStockCode(row.stockCode)
		if order.IsFeeStockCode(code) {
			continue // a charge booked as a line, not a product (see Classify's KindFeesOnly)
		}
		if row.quantity > 0 {
			st.anyPositive = true
		}
		if row.price <= 0 {
			continue
		}
		t := tallies[code]
		if t == nil {
			t = &tally{}
			tallies[strings.Clone(code)] = t
		}
		t.add(row.price, row.description)
	}

	seed := &Seed{
		Products:  make(map[string]Product, len(tallies)),
		Customers: make(map[string]int),
		Rows:      rows,
		Invoices:  len(invoices),
		RowErrors: rowErrs,
	}
	for code, t := range tallies {
		seed.Products[code] = t.product(code)
	}
	for no, st := range invoices {
		// The same rules as Classify, on the per-invoice facts kept.
		if st.bad || !validInvoiceNo(no) || no[0] == 'C' || no[0] == 'A' || !st.anyPositive || st.customerID == "" {
			continue
		}
		seed.Customers[st.customerID]++
	}
	return seed, nil
}

// invState is what ScanCatalog keeps per invoice to classify it at the end.
type invState struct {
	customerID, country string
	hasHeader           bool
	anyPositive         bool // a well-formed row of a product (not a charge) with quantity > 0
	bad                 bool // a malformed row
}

// tally counts one stock code's prices and descriptions. Codes have few
// distinct values, so slices with a linear scan beat maps.
type tally struct {
	prices []priceCount
	descs  []descCount
	rows   int
}

type priceCount struct {
	price order.Money
	n     int
}

type descCount struct {
	desc string
	n    int
}

func (t *tally) add(price order.Money, desc string) {
	t.rows++
	found := false
	for i := range t.prices {
		if t.prices[i].price == price {
			t.prices[i].n++
			found = true
			break
		}
	}
	if !found {
		t.prices = append(t.prices, priceCount{price, 1})
	}
	if desc == "" {
		return
	}
	for i := range t.descs {
		if t.descs[i].desc == desc {
			t.descs[i].n++
			return
		}
	}
	t.descs = append(t.descs, descCount{strings.Clone(desc), 1})
}

func (t *tally) product(code string) Product {
	best := slices.MinFunc(t.prices, func(a, b priceCount) int {
		return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.price, b.price))
	})
	p := Product{StockCode: code, UnitPrice: best.price, PricedRows: t.rows}
	if len(t.descs) > 0 {
		p.Description = slices.MinFunc(t.descs, func(a, b descCount) int {
			return cmp.Or(cmp.Compare(b.n, a.n), strings.Compare(a.desc, b.desc))
		}).desc
	}
	return p
}
