package replay

import (
	"bufio"
	"compress/gzip"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // Europe/London must load even on hosts without a zoneinfo database

	"github.com/ordercast/ordercast/ordersystem/order"
)

// Column names of the data set's header row. Every one of them is required;
// their order does not matter and extra columns are ignored.
const (
	ColInvoiceNo   = "InvoiceNo"
	ColStockCode   = "StockCode"
	ColDescription = "Description"
	ColQuantity    = "Quantity"
	ColInvoiceDate = "InvoiceDate"
	ColUnitPrice   = "UnitPrice"
	ColCustomerID  = "CustomerID"
	ColCountry     = "Country"
)

// Columns lists the required header columns in the order the data set writes
// them.
var Columns = []string{
	ColInvoiceNo, ColStockCode, ColDescription, ColQuantity,
	ColInvoiceDate, ColUnitPrice, ColCustomerID, ColCountry,
}

// DateLayout is the layout of the InvoiceDate column, in the time package's
// notation. Dates carry no zone: they are the shop's wall-clock time in
// Europe/London (see [Location]).
const DateLayout = "2006-01-02 15:04:05"

// Location is the zone InvoiceDate values are interpreted in: Europe/London,
// or UTC if that zone cannot be loaded (it always can: the package embeds
// time/tzdata). Read-only: do not assign it.
var Location = loadLondon()

func loadLondon() *time.Location {
	loc, err := time.LoadLocation("Europe/London")
	if err != nil {
		return time.UTC
	}
	return loc
}

// Row error reasons, the values of [RowError].Reason. A row with any of them
// makes its invoice "malformed_row" (see [Classify]).
const (
	// RowCSVSyntax: the row breaks RFC 4180 quoting (a bare or unterminated
	// quote). Such a row may swallow the rows after it up to the next
	// closing quote; that is inherent to CSV.
	RowCSVSyntax = "csv_syntax"
	// RowFieldCount: the row has a different number of fields than the
	// header.
	RowFieldCount = "field_count"
	// RowBadInvoiceNo: InvoiceNo is empty or is not digits optionally
	// prefixed by C or A.
	RowBadInvoiceNo = "bad_invoice_no"
	// RowMissingStockCode: StockCode is empty or blank.
	RowMissingStockCode = "missing_stock_code"
	// RowBadQuantity: Quantity is not a base-10 int64.
	RowBadQuantity = "bad_quantity"
	// RowBadPrice: UnitPrice is not accepted by order.ParseMoney.
	RowBadPrice = "bad_price"
	// RowBadDate: InvoiceDate does not match DateLayout.
	RowBadDate = "bad_date"
	// RowCustomerMismatch: the row's CustomerID differs from the one of the
	// invoice's first row (an order has one customer).
	RowCustomerMismatch = "customer_mismatch"
	// RowCountryMismatch: the row's Country differs from the one of the
	// invoice's first row.
	RowCountryMismatch = "country_mismatch"
)

// RowError describes one malformed data row. It is recorded, never fatal.
type RowError struct {
	// Line is the 1-based line number of the row in the CSV text (the header
	// is line 1); for a row spanning several lines, its first line.
	Line int `json:"line"`
	// InvoiceNo is the row's InvoiceNo field as written, "" if it could not
	// be read.
	InvoiceNo string `json:"invoiceNo"`
	// Reason is one of the Row* constants.
	Reason string `json:"reason"`
	// Detail is a human-readable explanation.
	Detail string `json:"detail"`
}

// Error implements error.
func (e RowError) Error() string {
	return fmt.Sprintf("line %d (invoice %q): %s: %s", e.Line, e.InvoiceNo, e.Reason, e.Detail)
}

// Line is one well-formed line of an invoice, as written in the data.
type Line struct {
	StockCode   string      `json:"stockCode"` // as in the file, not normalized
	Description string      `json:"description"`
	Quantity    int64       `json:"quantity"`  // may be <= 0
	UnitPrice   order.Money `json:"unitPrice"` // thousandths of GBP; may be <= 0
}

// Invoice is all the rows of the data set that share one InvoiceNo, wherever
// they are in the file. Nothing in this package modifies an Invoice after
// ReadInvoices returns it (Classify, PlaceOrderRequest and Run only read it),
// so invoices can be shared by goroutines.
type Invoice struct {
	// No is the InvoiceNo as written: "536365", "C536379", "A563185". It is
	// "" for the pseudo-invoice that collects rows whose InvoiceNo could not
	// be read (always malformed).
	No string `json:"invoiceNo"`
	// CustomerID is the customer of the invoice's first row, "" for a guest.
	CustomerID string `json:"customerId"`
	// Country is the country of the invoice's first row.
	Country string `json:"country"`
	// Time is the InvoiceDate of the invoice's first row with a valid date,
	// in Location; zero if no row had one. Later rows may be a minute later.
	Time time.Time `json:"time"`
	// Lines are the well-formed rows in file order. Duplicates and repeated
	// stock codes are kept.
	Lines []Line `json:"lines"`
	// RowErrors are the invoice's malformed rows, in file order. Their
	// content is not in Lines.
	RowErrors []RowError `json:"rowErrors,omitempty"`

	hasHeader bool // CustomerID and Country were set from a row
}

// Rows returns the number of data rows of the invoice: len(Lines) +
// len(RowErrors).
func (inv *Invoice) Rows() int { return len(inv.Lines) + len(inv.RowErrors) }

// PlaceOrderRequest returns the checkout request for the invoice: customer,
// country, the invoice number as reference, and every line's stock code (as
// in the data) and quantity, in file order, without merging; lines of a
// charge booked as a line (postage, bank charges, fees: order.FeeStockCodes)
// are left out, as they are not products (checkout refuses them as lines,
// 422 not_a_product, and prices orders itself).
func (inv *Invoice) PlaceOrderRequest() order.PlaceOrderRequest {
	lines := make([]order.RequestLine, 0, len(inv.Lines))
	for _, l := range inv.Lines {
		if order.IsFeeStockCode(l.StockCode) {
			continue
		}
		lines = append(lines, order.RequestLine{StockCode: l.StockCode, Quantity: l.Quantity})
	}
	return order.PlaceOrderRequest{
		CustomerID: inv.CustomerID,
		Country:    inv.Country,
		Reference:  inv.No,
		Lines:      lines,
	}
}

// Open opens a data file for reading. A gzip-compressed file (recognized by
// its magic bytes, whatever its name) is decompressed transparently; anything
// else is returned as is. The caller must Close the result.
func Open(path string) (io.ReadCloser, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	br := bufio.NewReaderSize(f, 256<<10)
	magic, _ := br.Peek(2)
	if len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("replay: open %s: %w", path, err)
		}
		return &file{r: zr, closers: []io.Closer{zr, f}}, nil
	}
	return &file{r: br, closers: []io.Closer{f}}, nil
}

type file struct {
	r       io.Reader
	closers []io.Closer
}

func (f *file) Read(p []byte) (int, error) { return f.r.Read(p) }

func (f *file) Close() error {
	var errs []error
	for _, c := range f.closers {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// ReadInvoices parses an Online Retail CSV (RFC 4180, UTF-8, header row
// required, see [Columns]) and returns its invoices in the order of their
// first row in the file. Rows are grouped by InvoiceNo, not by runs: an
// invoice whose rows are interleaved with another's (542806 around
// C542805) is one Invoice.
//
// A malformed row does not stop the read: it becomes a [RowError] of its
// invoice (of the pseudo-invoice with No "" if its InvoiceNo cannot be read),
// and [Classify] then reports that invoice as "malformed_row". The error
// result is non-nil only when the header is missing or invalid (the message
// names the missing columns) or when reading r fails; then no invoices are
// returned.
//
// ReadInvoices keeps no state between calls: concurrent calls on different
// readers are safe.
//
// The whole file is held in memory (about 85 MB of heap for the full data set's
// 541,909 rows); use [ScanCatalog] for a streaming pass.
func ReadInvoices(r io.Reader) ([]*Invoice, error) {
	cr := newCSVReader(r)
	p, err := readHeader(cr)
	if err != nil {
		return nil, err
	}
	var (
		out  []*Invoice
		byNo = make(map[string]*Invoice)
		last *Invoice
		row  parsedRow
	)
	get := func(no string) *Invoice {
		if last != nil && last.No == no {
			return last
		}
		inv := byNo[no]
		if inv == nil {
			inv = &Invoice{No: no}
			byNo[no] = inv
			out = append(out, inv)
		}
		last = inv
		return inv
	}
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			if !errors.As(err, &pe) {
				return nil, fmt.Errorf("replay: read csv: %w", err)
			}
			no := p.field(rec, colInvoiceNo)
			inv := get(no)
			inv.RowErrors = append(inv.RowErrors, RowError{Line: pe.StartLine, InvoiceNo: no, Reason: RowCSVSyntax, Detail: pe.Err.Error()})
			continue
		}
		line, _ := cr.FieldPos(0)
		reason, detail := p.parse(rec, &row)
		inv := get(row.invoiceNo)
		if reason != RowFieldCount {
			// The fields are where the header says: the invoice header can
			// be taken from this row.
			if !inv.hasHeader {
				inv.CustomerID, inv.Country, inv.hasHeader = row.customerID, row.country, true
			} else if reason == "" {
				reason, detail = inv.mismatch(&row)
			}
		}
		if inv.Time.IsZero() && !row.time.IsZero() {
			inv.Time = row.time
		}
		if reason != "" {
			inv.RowErrors = append(inv.RowErrors, RowError{Line: line, InvoiceNo: row.invoiceNo, Reason: reason, Detail: detail})
			continue
		}
		inv.Lines = append(inv.Lines, Line{
			StockCode:   row.stockCode,
			Description: row.description,
			Quantity:    row.quantity,
			UnitPrice:   row.price,
		})
	}
	return out, nil
}

// mismatch checks a well-formed row against the invoice's header.
func (inv *Invoice) mismatch(row *parsedRow) (reason, detail string) {
	if row.customerID != inv.CustomerID {
		return RowCustomerMismatch, fmt.Sprintf("CustomerID %q, but the invoice's first row has %q", row.customerID, inv.CustomerID)
	}
	if row.country != inv.Country {
		return RowCountryMismatch, fmt.Sprintf("Country %q, but the invoice's first row has %q", row.country, inv.Country)
	}
	return "", ""
}

// RowErrorCounts returns the number of malformed rows of the invoices by
// reason (the Row* constants). The map is empty, not nil, when there are none.
func RowErrorCounts(invoices []*Invoice) map[string]int {
	m := make(map[string]int)
	for _, inv := range invoices {
		for _, e := range inv.RowErrors {
			m[e.Reason]++
		}
	}
	return m
}

func newCSVReader(r io.Reader) *csv.Reader {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1 // checked per row, so a bad row is a row error, not a stop
	cr.ReuseRecord = true   // each record's fields still get fresh strings
	return cr
}

// Indexes into rowParser.cols.
const (
	colInvoiceNo = iota
	colStockCode
	colDescription
	colQuantity
	colInvoiceDate
	colUnitPrice
	colCustomerID
	colCountry
	numCols
)

// rowParser parses data rows given the header's column positions. It caches
// the last parsed date, since consecutive rows usually share it.
type rowParser struct {
	cols    [numCols]int
	nfields int

	lastDate    string
	lastTime    time.Time
	lastDateErr error
}

// parsedRow is one data row's fields. Strings alias the csv record's.
type parsedRow struct {
	invoiceNo, stockCode, description, customerID, country string
	quantity                                               int64
	price                                                  order.Money
	time                                                   time.Time
}

func readHeader(cr *csv.Reader) (*rowParser, error) {
	hdr, err := cr.Read()
	if err == io.EOF {
		return nil, errors.New("replay: empty input: no header row")
	}
	if err != nil {
		return nil, fmt.Errorf("replay: read header: %w", err)
	}
	p := &rowParser{nfields: len(hdr)}
	pos := make(map[string]int, len(hdr))
	for i, name := range hdr {
		if i == 0 {
			name = strings.TrimPrefix(name, "\uFEFF") // a UTF-8 byte order mark
		}
		if _, dup := pos[name]; dup {
			return nil, fmt.Errorf("replay: header: column %q appears twice", name)
		}
		pos[name] = i
	}
	var missing []string
	for i, name := range Columns {
		j, ok := pos[name]
		if !ok {
			missing = append(missing, name)
			continue
		}
		p.cols[i] = j
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("replay: header: missing column(s) %s (header is %q; want %s)",
			strings.Join(missing, ", "), hdr, strings.Join(Columns, ","))
	}
	return p, nil
}

// field returns column c of a possibly short record, "" if absent.
func (p *rowParser) field(rec []string, c int) string {
	if i := p.cols[c]; i < len(rec) {
		return rec[i]
	}
	return ""
}

// parse fills row from rec and returns the first problem found, reason "" if
// none. row.invoiceNo is set whenever rec has that column, and the other
// fields as far as they parsed.
func (p *rowParser) parse(rec []string, row *parsedRow) (reason, detail string) {
	*row = parsedRow{invoiceNo: p.field(rec, colInvoiceNo)}
	if len(rec) != p.nfields {
		return RowFieldCount, fmt.Sprintf("%d fields, header has %d", len(rec), p.nfields)
	}
	row.stockCode = rec[p.cols[colStockCode]]
	row.description = rec[p.cols[colDescription]]
	row.customerID = rec[p.cols[colCustomerID]]
	row.country = rec[p.cols[colCountry]]

	// Every field is checked, in column order, so the time is set whenever
	// it is valid; the first problem is reported.
	if !validInvoiceNo(row.invoiceNo) {
		reason, detail = RowBadInvoiceNo, fmt.Sprintf("InvoiceNo %q is not [CA]?digits", row.invoiceNo)
	}
	if strings.TrimSpace(row.stockCode) == "" && reason == "" {
		reason, detail = RowMissingStockCode, "StockCode is empty"
	}
	q, err := strconv.ParseInt(rec[p.cols[colQuantity]], 10, 64)
	if err != nil && reason == "" {
		reason, detail = RowBadQuantity, fmt.Sprintf("Quantity %q is not an integer", rec[p.cols[colQuantity]])
	}
	row.quantity = q
	if t, err := p.date(rec[p.cols[colInvoiceDate]]); err == nil {
		row.time = t
	} else if reason == "" {
		reason, detail = RowBadDate, err.Error()
	}
	m, err := order.ParseMoney(rec[p.cols[colUnitPrice]])
	if err != nil && reason == "" {
		reason, detail = RowBadPrice, err.Error()
	}
	row.price = m
	return reason, detail
}

func (p *rowParser) date(s string) (time.Time, error) {
	if s == p.lastDate && (p.lastDateErr != nil || !p.lastTime.IsZero()) {
		return p.lastTime, p.lastDateErr
	}
	t, err := time.ParseInLocation(DateLayout, s, Location)
	if err != nil {
		err = fmt.Errorf("InvoiceDate %q is not %s", s, DateLayout)
	}
	p.lastDate, p.lastTime, p.lastDateErr = s, t, err
	return t, err
}

// validInvoiceNo reports whether s is digits, optionally prefixed by C or A.
func validInvoiceNo(s string) bool {
	if s != "" && (s[0] == 'C' || s[0] == 'A') {
		s = s[1:]
	}
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
