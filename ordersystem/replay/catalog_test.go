package replay

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

func scanFile(t testing.TB, path string) *Seed {
	t.Helper()
	rc, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	seed, err := ScanCatalog(rc)
	if err != nil {
		t.Fatal(err)
	}
	return seed
}

func TestScanCatalogMostCommon(t *testing.T) {
	const in = `InvoiceNo,StockCode,Description,Quantity,InvoiceDate,UnitPrice,CustomerID,Country
1,A1,Foo,1,2010-12-01 08:26:00,2.55,10001,United Kingdom
1,A1,Foo,1,2010-12-01 08:26:00,2.95,10001,United Kingdom
2,a1,Bar,1,2010-12-01 08:27:00,2.95,10002,United Kingdom
2,A1 ,Bar,1,2010-12-01 08:27:00,2.55,10002,United Kingdom
3,A1,Bar,1,2010-12-01 08:28:00,3.00,10002,United Kingdom
3,A1,,1,2010-12-01 08:28:00,3.00,10002,United Kingdom
3,A1,,1,2010-12-01 08:28:00,3.00,10002,United Kingdom
3,A1,damaged,-5,2010-12-01 08:28:00,0,10002,United Kingdom
3,A1,damaged,-5,2010-12-01 08:28:00,0,10002,United Kingdom
3,A1,damaged,-5,2010-12-01 08:28:00,0,10002,United Kingdom
3,A1,damaged,-5,2010-12-01 08:28:00,0,10002,United Kingdom
4,T1,Tea,1,2010-12-01 08:29:00,1.00,,United Kingdom
4,T1,Tea,1,2010-12-01 08:29:00,2.00,,United Kingdom
4,T1,Tea,1,2010-12-01 08:29:00,2.00,,United Kingdom
C5,T1,Tea,-1,2010-12-01 08:30:00,1.00,10003,United Kingdom
6,Z1,Zero,1,2010-12-01 08:31:00,0,10004,United Kingdom
7,Z2,Lost,-3,2010-12-01 08:32:00,0,,United Kingdom
8,N1,Negative,1,2010-12-01 08:33:00,-1.50,10005,United Kingdom
`
	seed, err := ScanCatalog(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	// A1 (normalized from "a1" and "A1 "): 2.55 x2, 2.95 x2, 3.000 x3 -> 3.000;
	// Bar x3 beats Foo x2, and empty or price-0 descriptions ("damaged")
	// do not count.
	// T1: 1.00 x2 (one of them on a cancellation), 2.00 x2 -> tie, the lower.
	// Z1, Z2 and N1 never have a positive price.
	want := map[string]Product{
		"A1": {StockCode: "A1", Description: "Bar", UnitPrice: 3000, PricedRows: 7},
		"T1": {StockCode: "T1", Description: "Tea", UnitPrice: 1000, PricedRows: 4},
	}
	if !maps.Equal(seed.Products, want) {
		t.Errorf("products = %+v\nwant       %+v", seed.Products, want)
	}
	// Customers of sales: 10001, 10002 (2 invoices), 10004 (a sale priced 0
	// is still a sale), 10005; not 10003 (cancellation) nor the guest of 4.
	wantCust := map[string]int{"10001": 1, "10002": 2, "10004": 1, "10005": 1}
	if !maps.Equal(seed.Customers, wantCust) {
		t.Errorf("customers = %v, want %v", seed.Customers, wantCust)
	}
	if seed.Rows != 18 || seed.Invoices != 8 || len(seed.RowErrors) != 0 {
		t.Errorf("rows %d invoices %d row errors %v; want 18, 8, none", seed.Rows, seed.Invoices, seed.RowErrors)
	}
	if got := seed.StockCodes(); !slices.Equal(got, []string{"A1", "T1"}) {
		t.Errorf("StockCodes = %v", got)
	}
	if got := seed.CustomerIDs(); !slices.Equal(got, []string{"10001", "10002", "10004", "10005"}) {
		t.Errorf("CustomerIDs = %v", got)
	}

	// Ties between descriptions go to the first in byte order.
	seed, err = ScanCatalog(strings.NewReader(strings.Join(strings.Split(in, "\n")[:5], "\n") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p := seed.Products["A1"]; p.Description != "Bar" || p.UnitPrice != 2550 {
		t.Errorf("A1 = %+v, want Bar at 2.550", p)
	}
}

// The dirty fixture's catalog: rows with their own errors, and rows of
// customer_mismatch, do not count, nor do charges booked as lines (B, D:
// order.FeeStockCodes); prices from every invoice kind do.
func TestScanCatalogDirty(t *testing.T) {
	seed := scanFile(t, "testdata/dirty.csv")
	want := map[string]Product{
		"22041":        {StockCode: "22041", Description: `RECORD FRAME 7" SINGLE SIZE`, UnitPrice: 2100, PricedRows: 1},
		"GIFT_0001_40": {StockCode: "GIFT_0001_40", Description: "Dotcomgiftshop Gift Voucher £40.00", UnitPrice: 34040, PricedRows: 1},
		"47566B":       {StockCode: "47566B", Description: "TRAY, BREAKFAST IN BED", UnitPrice: 12750, PricedRows: 1},
		"22145":        {StockCode: "22145", Description: `CHRISTMAS CRAFT HEART STOCKING, "RED"`, UnitPrice: 2100, PricedRows: 1},
		"22111":        {StockCode: "22111", Description: "SCOTTIE DOG HOT WATER BOTTLE", UnitPrice: 4950, PricedRows: 4},
		"22112":        {StockCode: "22112", Description: "CHOCOLATE HOT WATER BOTTLE", UnitPrice: 4950, PricedRows: 2},
	}
	if !maps.Equal(seed.Products, want) {
		t.Errorf("products:\n got %+v\nwant %+v", seed.Products, want)
	}
	// Sales with a customer: 536477 (16210), 537005 and 537008 (17908).
	if wantCust := map[string]int{"16210": 1, "17908": 2}; !maps.Equal(seed.Customers, wantCust) {
		t.Errorf("customers = %v, want %v", seed.Customers, wantCust)
	}
	wantErrs := map[string]int{RowBadQuantity: 1, RowBadPrice: 1, RowFieldCount: 1, RowBadDate: 1, RowCSVSyntax: 1,
		RowCustomerMismatch: 1, RowBadInvoiceNo: 2, RowMissingStockCode: 1}
	if seed.Rows != 25 || seed.Invoices != 17 || !maps.Equal(seed.RowErrors, wantErrs) {
		t.Errorf("rows %d invoices %d row errors %v; want 25, 17, %v", seed.Rows, seed.Invoices, seed.RowErrors, wantErrs)
	}
}

// Expected values from a Python csv.reader script applying the same rules
// (Decimal prices; ties by (-count, value)): 1,343 priced codes, 1,338
// without the 5 charge codes that day (order.FeeStockCodes); 85123A has
// 17 priced rows, 9 at 2.55 and 6 at 2.95; 22745 ties 2 x 2.10 with 2 x 4.21;
// 21134 is only ever priced 0. Customers: the 95 distinct non-empty
// CustomerIDs of the 136 sales.
func TestScanCatalogOneDay(t *testing.T) {
	seed := scanFile(t, oneDayFile)
	if len(seed.Products) != 1338 || len(seed.Customers) != 95 || seed.Rows != 3108 || seed.Invoices != 143 {
		t.Errorf("products %d customers %d rows %d invoices %d; want 1338, 95, 3108, 143",
			len(seed.Products), len(seed.Customers), seed.Rows, seed.Invoices)
	}
	for code, want := range map[string]Product{
		"85123A": {StockCode: "85123A", Description: "WHITE HANGING HEART T-LIGHT HOLDER", UnitPrice: 2550, PricedRows: 17},
		"22745":  {StockCode: "22745", Description: "POPPY'S PLAYHOUSE BEDROOM", UnitPrice: 2100, PricedRows: 4},
	} {
		if got := seed.Products[code]; got != want {
			t.Errorf("%s = %+v, want %+v", code, got, want)
		}
	}
	if _, ok := seed.Products["21134"]; ok {
		t.Error("21134 (only priced 0) is in the catalog")
	}
	if _, ok := seed.Products["POST"]; ok {
		t.Error("POST (postage, a charge booked as a line) is in the catalog")
	}
}

// Full-file figures from the same Python script: 3,958 normalized codes, of
// which 3,828 have a positive price, 3,818 once the 10 charge codes
// (order.FeeStockCodes) are left out; 4,339 customers with sales, 4,335
// with a product in them (4 only ever paid charges; the 4,372 of system/seed.go
// also count customers who only cancelled); 85123A has 2,374 priced rows, 1,741
// of them at 2.95.
func TestScanCatalogFullFile(t *testing.T) {
	skipFullFile(t)
	t.Parallel()
	seed := scanFile(t, fullFile)
	if len(seed.Products) != 3818 || len(seed.Customers) != 4335 || seed.Rows != 541909 || seed.Invoices != 25900 {
		t.Errorf("products %d customers %d rows %d invoices %d; want 3818, 4335, 541909, 25900",
			len(seed.Products), len(seed.Customers), seed.Rows, seed.Invoices)
	}
	want := Product{StockCode: "85123A", Description: "WHITE HANGING HEART T-LIGHT HOLDER", UnitPrice: 2950, PricedRows: 2374}
	if got := seed.Products["85123A"]; got != want {
		t.Errorf("85123A = %+v, want %+v", got, want)
	}
	if p := seed.Products["47566B"]; p.UnitPrice != 4950 || p.Description != "TEA TIME PARTY BUNTING" {
		t.Errorf("47566B = %+v", p)
	}
}

// BenchmarkScanCatalog measures a full fresh-start scan: open and decompress
// the full data set and derive the seed.
func BenchmarkScanCatalog(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		rc, err := Open(fullFile)
		if err != nil {
			b.Fatal(err)
		}
		seed, err := ScanCatalog(rc)
		rc.Close()
		if err != nil {
			b.Fatal(err)
		}
		if seed.Rows != 541909 {
			b.Fatalf("rows = %d", seed.Rows)
		}
	}
	b.ReportMetric(float64(541909*b.N)/b.Elapsed().Seconds(), "rows/s")
}
