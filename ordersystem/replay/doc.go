// Package replay reads the Online Retail data set (UCI data set 352, CC BY
// 4.0, see data/online-retail/README.md) and replays its sale invoices as
// orders against checkout's HTTP API.
//
// The pieces, in the order a replay uses them:
//
//   - [Open] opens a data file, plain CSV or gzip-compressed.
//   - [ReadInvoices] parses the CSV and groups its lines into [Invoice] values
//     by invoice number. Malformed rows do not abort the read: they are
//     attached to their invoice as [RowError] values.
//   - [Classify] tells a sale (sent as an order) from the invoices that are not
//     orders: cancellations, adjustments, stock write-offs and invoices with a
//     malformed row.
//   - [ScanCatalog] streams the whole file once and derives the catalog (a
//     price and a description per stock code) and the known customer ids that
//     a fresh environment is seeded with.
//   - [Replayer] POSTs each sale to checkout with an Idempotency-Key derived
//     from the invoice number, with rate limiting, bounded concurrency,
//     retries with backoff and progress output (each distinct failure cause
//     printed once), and returns a [Summary]. When checkout answers nothing,
//     it stops early with an [UnreachableError]; when the URL is not
//     checkout's POST /orders (it answers 404 or 405, which that endpoint
//     never does), with a [NotCheckoutError].
//
// A typical replay:
//
//	rc, err := replay.Open("data/online-retail/online_retail.csv.gz")
//	if err != nil { ... }
//	defer rc.Close()
//	invoices, err := replay.ReadInvoices(rc)
//	if err != nil { ... }
//	sum, err := replay.Run(ctx, invoices, replay.Options{
//		BaseURL:  "http://127.0.0.1:8080",
//		Rate:     200,
//		Progress: os.Stderr,
//	})
//	fmt.Println(sum)
package replay
