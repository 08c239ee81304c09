package replay

import (
	"bytes"
	"compress/gzip"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ordercast/ordercast/ordersystem/order"
)

const (
	oneDayFile = "../../data/online-retail/online_retail_2010-12-01.csv"
	fullFile   = "../../data/online-retail/online_retail.csv.gz"
)

// skipFullFile skips a test on the full data set (about 0.5 s) in -short
// mode, and under the race detector: the parsing is single-goroutine code,
// so there is no race to find, and -race makes it 10 times slower (over 10 s
// per test on a loaded 2-core machine).
func skipFullFile(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("full data set: skipped in -short mode")
	}
	if raceDetector {
		t.Skip("full data set: skipped under -race (single-goroutine parsing, 10x slower); run go test without -race")
	}
}

func readFile(t testing.TB, path string) []*Invoice {
	t.Helper()
	rc, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	invs, err := ReadInvoices(rc)
	if err != nil {
		t.Fatal(err)
	}
	return invs
}

func byNo(invs []*Invoice) map[string]*Invoice {
	m := make(map[string]*Invoice, len(invs))
	for _, inv := range invs {
		m[inv.No] = inv
	}
	return m
}

func kinds(invs []*Invoice) map[string]int {
	m := map[string]int{}
	for _, inv := range invs {
		m[Classify(inv)]++
	}
	return m
}

func rows(invs []*Invoice) int {
	n := 0
	for _, inv := range invs {
		n += inv.Rows()
	}
	return n
}

func london(t testing.TB, s string) time.Time {
	t.Helper()
	tm, err := time.ParseInLocation(DateLayout, s, Location)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

func mustMoney(t testing.TB, s string) order.Money {
	t.Helper()
	m, err := order.ParseMoney(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Expected numbers for the one-day file were computed independently of this
// package: invoices and cancellations with
//
//	tail -n +2 online_retail_2010-12-01.csv | cut -d, -f1 | sort -u | wc -l       # 143
//	tail -n +2 online_retail_2010-12-01.csv | cut -d, -f1 | sort -u | grep -c ^C  # 6
//
// (InvoiceNo is never quoted), and the rest with a Python csv.reader script
// grouping rows by InvoiceNo: 136 sales (3,081 rows), 6 cancellations (26
// rows), 1 write-off (536589, 1 row), 0 adjustments; 15 sales without a
// customer; invoice 536409 has 58 rows of which 4 are exact duplicates of
// another; 536591 spans 16:57 and 16:58.
func TestReadInvoicesOneDay(t *testing.T) {
	invs := readFile(t, oneDayFile)
	if len(invs) != 143 {
		t.Fatalf("invoices = %d, want 143", len(invs))
	}
	if n := rows(invs); n != 3108 {
		t.Errorf("rows = %d, want 3108", n)
	}
	want := map[string]int{KindSale: 136, KindCancellation: 6, KindWriteOff: 1}
	if got := kinds(invs); !maps.Equal(got, want) {
		t.Errorf("kinds = %v, want %v", got, want)
	}
	if got := RowErrorCounts(invs); len(got) != 0 {
		t.Errorf("row errors = %v, want none", got)
	}
	if invs[0].No != "536365" || invs[len(invs)-1].No != "536597" {
		t.Errorf("first/last invoice = %s/%s, want 536365/536597 (file order)", invs[0].No, invs[len(invs)-1].No)
	}

	m := byNo(invs)
	guests := 0
	for _, inv := range invs {
		if Classify(inv) == KindSale && inv.CustomerID == "" {
			guests++
		}
	}
	if guests != 15 {
		t.Errorf("guest sales = %d, want 15", guests)
	}
	if inv := m["536545"]; inv.CustomerID != "" || Classify(inv) != KindSale {
		t.Errorf("536545: customer %q kind %s, want a guest sale", inv.CustomerID, Classify(inv))
	}
	if inv := m["536589"]; Classify(inv) != KindWriteOff {
		t.Errorf("536589 kind = %s, want write_off", Classify(inv))
	}

	// Repeated lines are kept: 58 rows, 54 distinct.
	inv := m["536409"]
	distinct := map[Line]bool{}
	for _, l := range inv.Lines {
		distinct[l] = true
	}
	if len(inv.Lines) != 58 || len(distinct) != 54 {
		t.Errorf("536409: %d lines, %d distinct; want 58 and 54", len(inv.Lines), len(distinct))
	}

	// The time of an invoice is its first line's.
	inv = m["536591"]
	if want := london(t, "2010-12-01 16:57:00"); !inv.Time.Equal(want) || len(inv.Lines) != 40 {
		t.Errorf("536591: time %v, %d lines; want %v and 40", inv.Time, len(inv.Lines), want)
	}

	// Quoted descriptions.
	inv = m["536477"]
	found := false
	for _, l := range inv.Lines {
		if l.StockCode == "22041" {
			found = l.Description == `RECORD FRAME 7" SINGLE SIZE` && l.Quantity == 48 && l.UnitPrice == 2100
		}
	}
	if !found {
		t.Errorf("536477: no line 22041 `RECORD FRAME 7\" SINGLE SIZE` x48 at 2.100: %+v", inv.Lines)
	}
	first := m["536365"]
	if first.CustomerID != "17850" || first.Country != "United Kingdom" || first.Lines[0] != (Line{"85123A", "WHITE HANGING HEART T-LIGHT HOLDER", 6, 2550}) {
		t.Errorf("536365 = %+v", first)
	}
}

// The split fixture reproduces rows 78088-78094 of the full file (plus a
// repeated line): 542806 is interrupted by C542805.
func TestReadInvoicesGroupsByNumberNotRuns(t *testing.T) {
	invs := readFile(t, "testdata/split_542806.csv")
	if len(invs) != 2 || invs[0].No != "542806" || invs[1].No != "C542805" {
		t.Fatalf("invoices = %v, want [542806 C542805]", invoiceNos(invs))
	}
	inv := invs[0]
	wantCodes := []string{"48194", "21524", "22692", "84247G", "22692"}
	if got := stockCodes(inv); strings.Join(got, " ") != strings.Join(wantCodes, " ") {
		t.Errorf("542806 lines = %v, want %v", got, wantCodes)
	}
	if !inv.Time.Equal(london(t, "2011-02-01 11:19:00")) || inv.CustomerID != "12836" {
		t.Errorf("542806: time %v customer %q", inv.Time, inv.CustomerID)
	}
	if inv.Lines[3].Description != "DECOUPAGE,GREETING CARD," {
		t.Errorf("quoted description = %q", inv.Lines[3].Description)
	}
	if len(invs[1].Lines) != 2 || invs[1].CustomerID != "14606" || Classify(invs[1]) != KindCancellation {
		t.Errorf("C542805 = %+v", invs[1])
	}
}

// Counts for the full file were computed with a Python csv.reader script
// grouping by InvoiceNo (and cross-checked with cut/sort/awk for invoices,
// C and A numbers): 25,900 invoices, 20,725 sales (531,282 rows), 3,836
// cancellations (9,288 rows), 3 adjustments, 1,336 write-offs (1 row each);
// 542806 has 39 rows (lines 78088-78128 minus C542805's two).
func TestReadInvoicesFullFile(t *testing.T) {
	skipFullFile(t)
	t.Parallel()
	invs := readFile(t, fullFile)
	if len(invs) != 25900 {
		t.Fatalf("invoices = %d, want 25900", len(invs))
	}
	if n := rows(invs); n != 541909 {
		t.Errorf("rows = %d, want 541909", n)
	}
	want := map[string]int{KindSale: 20541, KindFeesOnly: 184, KindCancellation: 3836, KindAdjustment: 3, KindWriteOff: 1336}
	if got := kinds(invs); !maps.Equal(got, want) {
		t.Errorf("kinds = %v, want %v", got, want)
	}
	inv := byNo(invs)["542806"]
	if len(inv.Lines) != 39 || inv.Lines[0].StockCode != "48194" || inv.Lines[38].StockCode != "21755" {
		t.Errorf("542806: %d lines %v, want 39 from 48194 to 21755", len(inv.Lines), stockCodes(inv))
	}
	if !inv.Time.Equal(london(t, "2011-02-01 11:19:00")) {
		t.Errorf("542806 time = %v", inv.Time)
	}
}

// dirty.csv (CRLF line ends) holds one example of each kind of dirt; see the
// comments in the table below for what each invoice has.
func TestReadInvoicesDirty(t *testing.T) {
	invs := readFile(t, "testdata/dirty.csv")
	wantOrder := []string{"536477", "536545", "536589", "A563185", "A563186", "C536379",
		"537000", "537001", "537002", "537003", "537004", "537005", "537006", "X12", "", "537007", "537008"}
	if got := invoiceNos(invs); strings.Join(got, "|") != strings.Join(wantOrder, "|") {
		t.Fatalf("invoices = %q\nwant       %q", got, wantOrder)
	}
	if n := rows(invs); n != 25 {
		t.Errorf("rows = %d, want 25 (26 text lines, one record spans 2)", n)
	}
	m := byNo(invs)
	tests := []struct {
		no, kind, rowErr string
		lines            int
	}{
		{"536477", KindSale, "", 3},                     // quoted "", £, lower-case stock code, BST time
		{"536545", KindSale, "", 2},                     // guest; empty description; price 0 line
		{"536589", KindWriteOff, "", 1},                 // -10, price 0, no customer
		{"A563185", KindAdjustment, "", 1},              //
		{"A563186", KindAdjustment, "", 1},              // negative price
		{"C536379", KindCancellation, "", 1},            //
		{"537000", KindMalformedRow, RowBadQuantity, 2}, // "x1"; its last row is at the end of the file
		{"537001", KindMalformedRow, RowBadPrice, 0},    // 4 decimals
		{"537002", KindMalformedRow, RowFieldCount, 0},  // 7 fields
		{"537003", KindMalformedRow, RowBadDate, 0},     // 01/12/2010 11:45
		{"537004", KindMalformedRow, RowCSVSyntax, 0},   // bare quote
		{"537005", KindSale, "", 1},                     // description spans two lines
		{"537006", KindMalformedRow, RowCustomerMismatch, 1},
		{"X12", KindMalformedRow, RowBadInvoiceNo, 0},
		{"", KindMalformedRow, RowBadInvoiceNo, 0},
		{"537007", KindMalformedRow, RowMissingStockCode, 0}, // blank stock code
		{"537008", KindSale, "", 3},                          // lines with qty -1 and price 0 are kept
	}
	for _, tt := range tests {
		inv := m[tt.no]
		if k := Classify(inv); k != tt.kind || len(inv.Lines) != tt.lines {
			t.Errorf("%q: kind %s, %d lines; want %s, %d", tt.no, k, len(inv.Lines), tt.kind, tt.lines)
		}
		if tt.rowErr == "" {
			if len(inv.RowErrors) != 0 {
				t.Errorf("%q: row errors %v, want none", tt.no, inv.RowErrors)
			}
		} else if len(inv.RowErrors) != 1 || inv.RowErrors[0].Reason != tt.rowErr {
			t.Errorf("%q: row errors %v, want one %s", tt.no, inv.RowErrors, tt.rowErr)
		}
	}
	wantErrs := map[string]int{RowBadQuantity: 1, RowBadPrice: 1, RowFieldCount: 1, RowBadDate: 1, RowCSVSyntax: 1,
		RowCustomerMismatch: 1, RowBadInvoiceNo: 2, RowMissingStockCode: 1}
	if got := RowErrorCounts(invs); !maps.Equal(got, wantErrs) {
		t.Errorf("row errors = %v, want %v", got, wantErrs)
	}
	if e := m["537000"].RowErrors[0]; e.Line != 11 || e.InvoiceNo != "537000" || !strings.Contains(e.Error(), "x1") {
		t.Errorf("537000 row error = %+v (%v), want line 11 naming x1", e, e)
	}
	if e := m["537006"].RowErrors[0]; e.Line != 20 {
		t.Errorf("537006 row error line = %d, want 20 (after a record spanning lines 17-18)", e.Line)
	}
	if e := m["537004"].RowErrors[0]; e.Line != 16 {
		t.Errorf("537004 row error line = %d, want 16", e.Line)
	}

	inv := m["536477"]
	want := []Line{
		{"22041", `RECORD FRAME 7" SINGLE SIZE`, 48, 2100},
		{"gift_0001_40", "Dotcomgiftshop Gift Voucher £40.00", 1, 34040},
		{"47566b", "TRAY, BREAKFAST IN BED", 1, 12750},
	}
	for i := range want {
		if inv.Lines[i] != want[i] {
			t.Errorf("536477 line %d = %+v, want %+v", i, inv.Lines[i], want[i])
		}
	}
	// 10:00 in June is British Summer Time: 09:00 UTC.
	if !inv.Time.Equal(time.Date(2011, 6, 1, 9, 0, 0, 0, time.UTC)) {
		t.Errorf("536477 time = %v, want 09:00 UTC", inv.Time.UTC())
	}
	if d := m["536545"].Lines[1].Description; d != `CHRISTMAS CRAFT HEART STOCKING, "RED"` {
		t.Errorf("536545 description = %q", d)
	}
	if d := m["537005"].Lines[0].Description; d != "SCOTTIE DOG\nHOT WATER BOTTLE" {
		t.Errorf("537005 description = %q", d)
	}
	if inv := m["A563186"]; inv.Lines[0].UnitPrice != -11062060 {
		t.Errorf("A563186 price = %v", inv.Lines[0].UnitPrice)
	}
	if inv := m["537008"]; inv.Country != "France" || inv.Lines[1].Quantity != -1 || inv.Lines[2].UnitPrice != 0 {
		t.Errorf("537008 = %+v", inv)
	}
}

func TestReadInvoicesHeader(t *testing.T) {
	const row = "536365,85123A,WHITE HANGING HEART T-LIGHT HOLDER,6,2010-12-01 08:26:00,2.55,17850,United Kingdom\n"
	tests := []struct {
		name, input, wantErr string
	}{
		{"empty", "", "no header row"},
		{"missing column", "InvoiceNo,StockCode,Description,Quantity,InvoiceDate,UnitPrice,CustomerID\n", "missing column(s) Country"},
		{"two missing", "InvoiceNo,Description,Quantity,InvoiceDate,UnitPrice,CustomerID\n", "missing column(s) StockCode, Country"},
		{"no header", row, "missing column(s)"},
		{"duplicate", "InvoiceNo,InvoiceNo,StockCode,Description,Quantity,InvoiceDate,UnitPrice,CustomerID,Country\n", `"InvoiceNo" appears twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadInvoices(strings.NewReader(tt.input))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("err = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}

	// A byte order mark, other column orders and extra columns are fine.
	in := "\uFEFFCountry,Extra,InvoiceNo,StockCode,Description,Quantity,InvoiceDate,UnitPrice,CustomerID\n" +
		"EIRE,x,536365,85123A,\"A, B\",6,2010-12-01 08:26:00,2.55,17850\n"
	invs, err := ReadInvoices(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(invs) != 1 || invs[0].Country != "EIRE" || invs[0].Lines[0] != (Line{"85123A", "A, B", 6, 2550}) {
		t.Errorf("invoices = %+v", invs[0])
	}
}

// An I/O error is fatal, unlike a malformed row.
func TestReadInvoicesReadError(t *testing.T) {
	data, err := os.ReadFile(oneDayFile)
	if err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(data)
	zw.Close()
	truncated := gz.Bytes()[:gz.Len()/2]
	zr, err := gzip.NewReader(bytes.NewReader(truncated))
	if err != nil {
		t.Fatal(err)
	}
	if invs, err := ReadInvoices(zr); err == nil || invs != nil {
		t.Errorf("truncated gzip: %d invoices, err %v; want an error", len(invs), err)
	}
}

func TestOpen(t *testing.T) {
	data, err := os.ReadFile("testdata/split_542806.csv")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// Compressed data is recognized by content, not by name.
	gzPath := filepath.Join(dir, "split.csv")
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(data)
	zw.Close()
	if err := os.WriteFile(gzPath, gz.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"testdata/split_542806.csv", gzPath} {
		rc, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s: read %d bytes, err %v; want the %d plain bytes", path, len(got), err, len(data))
		}
		if err := rc.Close(); err != nil {
			t.Errorf("%s: close: %v", path, err)
		}
	}
	if _, err := Open(filepath.Join(dir, "nope.csv")); err == nil {
		t.Error("Open of a missing file: no error")
	}
	bad := filepath.Join(dir, "bad.gz")
	os.WriteFile(bad, []byte{0x1f, 0x8b, 1}, 0o644)
	if _, err := Open(bad); err == nil {
		t.Error("Open of a broken gzip file: no error")
	}
	if Location.String() != "Europe/London" {
		t.Errorf("Location = %v, want Europe/London (time/tzdata is embedded)", Location)
	}
}

func TestPlaceOrderRequest(t *testing.T) {
	inv := byNo(readFile(t, "testdata/dirty.csv"))["537008"]
	got := inv.PlaceOrderRequest()
	want := order.PlaceOrderRequest{
		CustomerID: "17908", Country: "France", Reference: "537008",
		Lines: []order.RequestLine{{StockCode: "22111", Quantity: 3}, {StockCode: "22112", Quantity: -1}, {StockCode: "22113", Quantity: 1}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("request = %+v, want %+v", got, want)
	}
}

func TestClassifyHandBuilt(t *testing.T) {
	line := []Line{{StockCode: "X", Quantity: 1}}
	tests := []struct {
		inv  Invoice
		want string
	}{
		{Invoice{No: "", Lines: line}, KindMalformedRow},
		{Invoice{No: "12a", Lines: line}, KindMalformedRow},
		{Invoice{No: "123"}, KindMalformedRow},
		{Invoice{No: "123", Lines: line}, KindSale},
		{Invoice{No: "123", Lines: []Line{{Quantity: 0}, {Quantity: -2}}}, KindWriteOff},
		{Invoice{No: "C123", Lines: line}, KindCancellation},
		{Invoice{No: "A123", Lines: line}, KindAdjustment},
		{Invoice{No: "C123", Lines: line, RowErrors: []RowError{{Reason: RowBadPrice}}}, KindMalformedRow},
	}
	for _, tt := range tests {
		if got := Classify(&tt.inv); got != tt.want {
			t.Errorf("Classify(%+v) = %s, want %s", tt.inv, got, tt.want)
		}
	}
}

func invoiceNos(invs []*Invoice) []string {
	s := make([]string, len(invs))
	for i, inv := range invs {
		s[i] = inv.No
	}
	return s
}

func stockCodes(inv *Invoice) []string {
	s := make([]string, len(inv.Lines))
	for i, l := range inv.Lines {
		s[i] = l.StockCode
	}
	return s
}
