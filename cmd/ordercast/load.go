package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/ordercast/ordercast/ordersystem/audit"
	"github.com/ordercast/ordercast/ordersystem/load"
	"github.com/ordercast/ordercast/ordersystem/schema"
	"github.com/ordercast/ordercast/ordersystem/store"
)

type loadFlags struct {
	url, brokers, registry, db string
	rate                       float64
	duration, timeout, drain   time.Duration
	maxLines                   int
	report, csvFile            string
	seed                       uint64
	minBalance                 float64
	auth                       devTokens
}

func newLoad() *cobra.Command {
	var f loadFlags
	cmd := &cobra.Command{
		Use:   "load",
		Short: "Drive checkout open-loop at a fixed rate and measure throughput, checkout and end-to-end latency, then check the invariants",
		Long: `Sends --rate x --duration valid orders (POST /orders, each with its own Idempotency-Key, for
customers of the wallets table with at least --min-balance, 1 to --max-lines lines of catalog
items priced 0.10-5.00 GBP) to checkout at --url, each at its scheduled time whatever the answers
to the earlier ones (open loop: vegeta's attacker), so a slow checkout cannot slow the client
and hide its latency (coordinated omission). Checkout latency is measured from each request's
scheduled send time to its answer, in HDR histograms.

End-to-end latency is from each 202 to the order's shipmentRequested being committed, as a
read_committed consumer of that topic (--brokers, --registry to decode) sees it: it measures
the committed event itself, not the orders service's copy of it.

A progress line every second on stderr. Once every order was sent, it waits up to
--drain-timeout for every accepted order to go through every service (from --db, as up
--exit-when-done does), recomputes the invariants (every accepted order stored once, charged
at most once, one shipment per paid order, no valid order in a DLQ) and writes the JSON report
to --report (stdout when empty) and the per-second series to --csv. Exit status 1 unless the
report's status is passed. The database is the system's: its invariants cover every order in
it, those of earlier runs included.`,
		Example: `  ordercast up &            # the embedded stack on 127.0.0.1:8080, :9092, :8081, .ordercast/ordercast.db
  ordercast load --rate 300 --duration 60s --report load.json --csv load.csv
  ordercast load --rate 1000 --duration 60s --brokers 127.0.0.1:19092 --db postgres://postgres@127.0.0.1:15432/postgres`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(); err != nil {
				return err
			}
			parent := cmd.Context()
			if parent == nil {
				parent = context.Background()
			}
			ctx, stop := signal.NotifyContext(parent, syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return runLoad(ctx, &f, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.url, "url", "http://127.0.0.1:8080", "checkout base URL")
	fl.Float64Var(&f.rate, "rate", 100, "orders per second, sent open-loop (at least 0.001)")
	fl.DurationVar(&f.duration, "duration", 30*time.Second, "how long to send: rate x duration orders")
	fl.StringVar(&f.brokers, "brokers", envOr("KAFKA_BROKERS", defaultBrokers), "Kafka bootstrap servers, comma separated, to read shipmentRequested and for the audit (env KAFKA_BROKERS; default: the embedded broker of 'ordercast up')")
	fl.StringVar(&f.registry, "registry", envOr("SCHEMA_REGISTRY_URL", defaultRegistry), "schema registry URL to decode the events (env SCHEMA_REGISTRY_URL; default: the embedded registry of 'ordercast up')")
	fl.StringVar(&f.db, "db", envOr("ORDERCAST_DB", "sqlite:.ordercast/ordercast.db"), "the system's database, for customers, catalog and the audit: sqlite:PATH or postgres://... (env ORDERCAST_DB; default: that of 'ordercast up')")
	fl.DurationVar(&f.timeout, "timeout", 30*time.Second, "bound of one request (connect, send, answer); a request without an answer by then counts as an error")
	fl.DurationVar(&f.drain, "drain-timeout", 2*time.Minute, "how long to wait, after the last answer, for every accepted order to be processed; then the report says timed_out")
	fl.IntVar(&f.maxLines, "max-lines", 3, "most lines per order (1 to this, uniform, quantity 1)")
	fl.Float64Var(&f.minBalance, "min-balance", 500, "only customers whose wallet holds at least this many GBP, so that the run's orders are paid, not refused")
	fl.StringVar(&f.report, "report", "", "write the JSON report to this file (empty: stdout)")
	fl.StringVar(&f.csvFile, "csv", "", "write the per-second series (sent, accepted, errors, shipped, checkout p99) as CSV to this file, for a plot")
	fl.Uint64Var(&f.seed, "seed", 0, "seed of the choice of customers and lines (0: the time)")
	f.auth.register(fl)
	return cmd
}

func (f *loadFlags) check() error {
	if u, err := url.Parse(f.url); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--url %q: want checkout's base URL, such as http://127.0.0.1:8080", f.url)
	}
	switch {
	case !(f.rate >= 0.001) || math.IsInf(f.rate, 0):
		return fmt.Errorf("--rate %v: want at least 0.001 orders per second", f.rate)
	case f.duration <= 0:
		return fmt.Errorf("--duration %v: want a positive duration such as 60s", f.duration)
	case f.rate*f.duration.Seconds() < 1:
		return fmt.Errorf("--rate %v x --duration %v is less than one order: want rate x duration >= 1", f.rate, f.duration)
	case f.rate*f.duration.Seconds() > 100_000_000:
		return fmt.Errorf("--rate %v x --duration %v is over 100,000,000 orders: want fewer", f.rate, f.duration)
	case f.timeout <= 0:
		return fmt.Errorf("--timeout %v: want a positive duration such as 30s (the bound of one request)", f.timeout)
	case f.drain <= 0:
		return fmt.Errorf("--drain-timeout %v: want a positive duration such as 2m", f.drain)
	case f.maxLines < 1:
		return fmt.Errorf("--max-lines %d: want >= 1", f.maxLines)
	case !(f.minBalance >= 0):
		return fmt.Errorf("--min-balance %v: want >= 0 GBP", f.minBalance)
	case strings.TrimSpace(f.brokers) == "":
		return fmt.Errorf("--brokers %q: want host:port[,host:port...], the cluster checkout writes to", f.brokers)
	case !strings.HasPrefix(f.db, "sqlite:") && !strings.HasPrefix(f.db, "postgres://") && !strings.HasPrefix(f.db, "postgresql://"):
		return fmt.Errorf("--db %q: want sqlite:PATH or a postgres:// (or postgresql://) URL, the system's database", f.db)
	}
	if u, err := url.Parse(f.registry); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--registry %q: want the schema registry URL, such as http://127.0.0.1:8081", f.registry)
	}
	return nil
}

// LoadReport is the JSON of `ordercast load`. Latencies are in
// milliseconds.
type LoadReport struct {
	// Status is passed (every order sent was accepted, processed and
	// shipped or refused, every invariant holds), failed (reason says
	// why), timed_out (not every order processed within --drain-timeout)
	// or interrupted.
	Status          string         `json:"status"`
	Reason          string         `json:"reason,omitempty"`
	URL             string         `json:"url"`
	Rate            float64        `json:"rateOrdersPerSecond"`
	DurationSeconds float64        `json:"durationSeconds"`
	OrdersSent      int            `json:"ordersSent"`
	OrdersAccepted  int            `json:"ordersAccepted"`
	ErrorsByStatus  map[string]int `json:"errorsByStatus"`
	// AcceptedPerSecond is accepted orders over the time from the first
	// send to the last answer: the sustained rate.
	AcceptedPerSecond float64 `json:"acceptedPerSecond"`
	// MaxSendLagMs is the latest any request left after its scheduled
	// time: near 0 when the client kept its schedule.
	MaxSendLagMs float64   `json:"maxSendLagMs"`
	Checkout     Latencies `json:"checkoutLatencyMs"`
	// EndToEnd is from the 202 to the order's shipmentRequested committed
	// (seen by a read_committed consumer), for the orders shipped.
	EndToEnd       Latencies `json:"endToEndLatencyMs"`
	EndToEndSource string    `json:"endToEndSource"`
	Shipped        int       `json:"ordersShipped"`
	// Refused are accepted orders whose payment was refused: they are not
	// shipped. Shipped + Refused = accepted when every order was processed.
	Refused        int            `json:"ordersRefused"`
	NotShipped     int            `json:"ordersNotShippedNorRefused"`
	ElapsedSeconds float64        `json:"elapsedSeconds"`
	Progress       audit.Progress `json:"progress"`
	// DLQRecords counts each group's DLQ records as `ordercast dlq list`
	// does (purged records are not counted).
	DLQRecords map[string]int             `json:"dlqRecords,omitempty"`
	Invariants map[string]audit.Invariant `json:"invariants,omitempty"`
	PerSecond  []*load.Second             `json:"perSecond"`
}

// Latencies are quantiles of an HDR histogram, in milliseconds.
type Latencies struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p99_9"`
	Max   float64 `json:"max"`
}

func latencies(h *hdrhistogram.Histogram) Latencies {
	ms := func(q float64) float64 { return float64(h.ValueAtQuantile(q)) / 1000 }
	return Latencies{Count: h.TotalCount(), P50: ms(50), P90: ms(90), P99: ms(99), P999: ms(99.9), Max: float64(h.Max()) / 1000}
}

// stockCode matches the catalog's product codes (five digits and an
// optional letter), not postage, fees or manual lines (POST, DOT, M).
var stockCode = regexp.MustCompile(`^[0-9]{5}[A-Z]?$`)

func runLoad(ctx context.Context, f *loadFlags, stdout, stderr io.Writer) error {
	start := time.Now()
	tokens, err := f.auth.tokens(stderr)
	if err != nil {
		return err
	}
	db, err := store.Open(ctx, f.db)
	if err != nil {
		return fmt.Errorf("--db %s: %w", f.db, err)
	}
	defer db.Close()
	customers, err := db.QueryStrings(ctx, `SELECT customer_id FROM wallets WHERE balance_milli >= `+strconv.FormatInt(int64(f.minBalance*1000), 10)+` ORDER BY customer_id`)
	if err != nil {
		return fmt.Errorf("--db %s: customers: %w", f.db, err)
	}
	codes, err := db.QueryStrings(ctx, `SELECT stock_code FROM catalog WHERE unit_price_milli BETWEEN 100 AND 5000 ORDER BY stock_code`)
	if err != nil {
		return fmt.Errorf("--db %s: catalog: %w", f.db, err)
	}
	codes = filter(codes, stockCode.MatchString)
	if len(customers) == 0 || len(codes) == 0 {
		return fmt.Errorf("--db %s: %d customers with at least %v GBP (--min-balance) and %d products at 0.10-5.00 GBP: is it the system's database, seeded (ordercast up seeds it at start)?", f.db, len(customers), f.minBalance, len(codes))
	}
	reg, err := sr.NewClient(sr.URLs(f.registry))
	if err != nil {
		return fmt.Errorf("--registry %s: %w", f.registry, err)
	}
	serde, err := schema.New(ctx, reg, schema.WithLookupOnly())
	if err != nil {
		return fmt.Errorf("--registry %s: the system's schemas are not there or it is unreachable: %w", f.registry, err)
	}
	kopts := []kgo.Opt{kgo.SeedBrokers(strings.Split(f.brokers, ",")...)}
	w, err := load.NewWatcher(ctx, kopts, serde)
	if err != nil {
		return fmt.Errorf("--brokers %s: %w", f.brokers, err)
	}
	defer w.Close()
	orders := int(math.Round(f.rate * f.duration.Seconds()))
	fmt.Fprintf(stderr, "ordercast load: %d orders at %v/s to %s (%d customers, %d products); end-to-end from shipmentRequested read_committed on %s\n",
		orders, f.rate, f.url, len(customers), len(codes), f.brokers)
	res, runErr := load.Run(ctx, load.Options{BaseURL: f.url, Rate: f.rate, Orders: orders, Customers: customers, StockCodes: codes,
		MaxLines: f.maxLines, Timeout: f.timeout, Seed: f.seed, Progress: stderr, Watcher: w, Token: tokens})
	if res == nil {
		return runErr
	}
	rep := &LoadReport{URL: f.url, Rate: f.rate, DurationSeconds: f.duration.Seconds(),
		EndToEndSource: "shipmentRequested read by a read_committed consumer (time its fetch returned) minus the time the 202 was received"}
	status, reason := "passed", ""
	if runErr != nil {
		status, reason = "interrupted", "interrupted"+signalNote(ctx)+" while sending"
	} else {
		status, reason = drainLoad(ctx, f, db, w, res, stderr)
	}
	if status != "interrupted" {
		actx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cl, err := kgo.NewClient(kopts...)
		if err == nil {
			var ares *audit.Result
			if ares, err = audit.Check(actx, db, cl, serde); err == nil {
				rep.Invariants, rep.DLQRecords = ares.Invariants, ares.DLQRecords
				if bad := violated(ares); len(bad) > 0 && status == "passed" {
					status, reason = "failed", "invariants violated: "+strings.Join(bad, ", ")
				}
			}
			cl.Close()
		}
		if err != nil {
			status, reason = "failed", "audit: "+err.Error()
		}
		cancel()
	}
	pctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	rep.Progress, _ = audit.ReadProgress(pctx, db)
	refused, rerr := refusedOf(pctx, db, res)
	cancel()
	if rerr != nil && status == "passed" {
		status, reason = "failed", rerr.Error()
	}
	rep.OrdersSent, rep.OrdersAccepted, rep.ErrorsByStatus = res.Sent, res.Accepted, res.Errors
	if d := res.Elapsed.Seconds(); d > 0 {
		rep.AcceptedPerSecond = math.Round(float64(res.Accepted)/d*10) / 10
	}
	rep.MaxSendLagMs = float64(res.MaxSendLag.Microseconds()) / 1000
	rep.Checkout, rep.EndToEnd = latencies(res.Checkout), latencies(res.EndToEnd)
	rep.Shipped, rep.Refused = len(res.Shipped), refused
	rep.NotShipped = max(res.Accepted-rep.Shipped-refused, 0)
	rep.PerSecond = res.Seconds
	rep.ElapsedSeconds = time.Since(start).Seconds()
	if status == "passed" {
		var why []string
		if res.Accepted != res.Sent {
			why = append(why, fmt.Sprintf("%d of %d orders not accepted (errorsByStatus)", res.Sent-res.Accepted, res.Sent))
		}
		if rep.NotShipped > 0 {
			why = append(why, fmt.Sprintf("%d accepted orders neither shipped nor refused", rep.NotShipped))
		}
		if len(why) > 0 {
			status, reason = "failed", strings.Join(why, "; ")
		}
	}
	rep.Status, rep.Reason = status, reason
	fmt.Fprintf(stderr, "ordercast load: %s: %d sent, %d accepted (%.1f/s), errors %s; checkout p50 %.1f ms p99 %.1f ms p99.9 %.1f ms; end-to-end p50 %.1f ms p99 %.1f ms (%d shipped, %d refused)\n",
		status, res.Sent, res.Accepted, rep.AcceptedPerSecond, errorCounts(res.Errors), rep.Checkout.P50, rep.Checkout.P99, rep.Checkout.P999,
		rep.EndToEnd.P50, rep.EndToEnd.P99, rep.Shipped, rep.Refused)
	b, _ := json.MarshalIndent(rep, "", "  ")
	if f.report == "" {
		fmt.Fprintln(stdout, string(b))
	} else if err := os.WriteFile(f.report, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("--report %s: %w", f.report, err)
	}
	if f.csvFile != "" {
		if err := writeLoadCSV(f.csvFile, res.Seconds); err != nil {
			return fmt.Errorf("--csv %s: %w", f.csvFile, err)
		}
	}
	if status != "passed" {
		return &exitError{code: 1, msg: "load " + status + ": " + reason}
	}
	return nil
}

// drainLoad waits until every accepted order is processed (audit.Progress
// Done) and the shipment reader has caught up, taking its shipments; it
// returns the status and reason.
func drainLoad(ctx context.Context, f *loadFlags, db *store.DB, w *load.Watcher, res *load.Result, stderr io.Writer) (string, string) {
	dctx, cancel := context.WithTimeout(ctx, f.drain)
	defer cancel()
	last := time.Now()
	for {
		t0 := time.Now()
		prog, err := audit.ReadProgress(dctx, db)
		took := time.Since(t0)
		res.TakeShipments(w)
		if err == nil && prog.Done() {
			break
		}
		if dctx.Err() != nil {
			if ctx.Err() != nil {
				return "interrupted", "interrupted" + signalNote(ctx) + " while waiting for the orders to be processed"
			}
			return "timed_out", fmt.Sprintf("--drain-timeout %v passed before every order was processed: %s", f.drain, prog.Missing())
		}
		if time.Since(last) >= time.Second {
			last = time.Now()
			fmt.Fprintf(stderr, "load: draining: %s; shipped %d of this run's %d accepted\n", prog.Missing(), len(res.Shipped), res.Accepted)
		}
		select {
		case <-dctx.Done():
		case <-time.After(audit.PollInterval(100*time.Millisecond, took)):
		}
	}
	if err := w.WaitCaughtUp(dctx); err != nil {
		return "timed_out", err.Error()
	}
	res.TakeShipments(w)
	return "passed", ""
}

// refusedOf counts the run's accepted orders whose payment was refused.
func refusedOf(ctx context.Context, db *store.DB, res *load.Result) (int, error) {
	ids, err := db.QueryStrings(ctx, `SELECT order_id FROM payments WHERE status = 'REFUSED'`)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		if _, ok := res.AcceptedAt[id]; ok {
			n++
		}
	}
	return n, nil
}

func filter(in []string, keep func(string) bool) []string {
	out := in[:0]
	for _, s := range in {
		if keep(s) {
			out = append(out, s)
		}
	}
	return out
}

// writeLoadCSV writes one row per second of the run.
func writeLoadCSV(path string, secs []*load.Second) error {
	fh, err := os.Create(path)
	if err != nil {
		return err
	}
	cw := csv.NewWriter(fh)
	_ = cw.Write([]string{"second", "sent", "accepted", "errors", "shipped", "checkout_p99_ms"})
	sorted := append([]*load.Second(nil), secs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Second < sorted[j].Second })
	for _, s := range sorted {
		_ = cw.Write([]string{strconv.Itoa(s.Second), strconv.Itoa(s.Sent), strconv.Itoa(s.Accepted), strconv.Itoa(s.Errors),
			strconv.Itoa(s.Shipped), strconv.FormatFloat(s.P99Ms, 'f', 2, 64)})
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		fh.Close()
		return err
	}
	return fh.Close()
}

// errorCounts is the summary line's "errors" part: "none", or each cause
// with its count, by cause ("401 unauthorized: 20, 503: 3").
func errorCounts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s: %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
