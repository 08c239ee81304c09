// Package load drives checkout open-loop: POST /orders at a fixed rate for a
// fixed number of orders, each sent at its scheduled time whatever the
// answers to the earlier ones (vegeta's attacker, which starts a new worker
// when every worker waits for an answer), so a slow server cannot slow the
// client down and hide its own latency (coordinated omission, Gil Tene's
// "How NOT to measure latency"). Latencies are recorded in HDR histograms
// (HdrHistogram, 3 significant digits) from each request's scheduled send
// time, and end-to-end latency from checkout's 202 to the order's
// shipmentRequested event being committed, as a read_committed consumer of
// that topic sees it (Watcher).
package load

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/ordercast/ordercast/ordersystem/order"
)

// Options configure Run. BaseURL, Rate, Orders, Customers and StockCodes are
// required; Validate says which is wrong.
type Options struct {
	// BaseURL is checkout's base URL, such as http://127.0.0.1:8080.
	BaseURL string
	// Rate is the send rate in orders per second (> 0, at least 0.001).
	// Order n (from 0) is sent n/Rate seconds after the start.
	Rate float64
	// Orders is how many orders to send (> 0): Rate x the run's duration.
	Orders int
	// Customers are the customer ids the orders are for (known customers
	// with a wallet: checkout refuses unknown ones), picked at random.
	Customers []string
	// StockCodes are the catalog's stock codes the lines are drawn from.
	StockCodes []string
	// MaxLines is the most lines per order (each of quantity 1, 1 to
	// MaxLines, uniform). Default 3.
	MaxLines int
	// KeyPrefix starts every Idempotency-Key ("<KeyPrefix>-<n>"): give each
	// run its own so that no order repeats an earlier run's. Default
	// "load-<unix nanoseconds>".
	KeyPrefix string
	// Timeout bounds one request (connect, send, answer). Default 30s. A
	// request without an answer by then counts as an error ("timeout").
	Timeout time.Duration
	// Seed seeds the choice of customers and lines. Default: the time.
	Seed uint64
	// Progress, if set, receives a line per second while the run goes and
	// one at its end.
	Progress io.Writer
	// Token, if set, gives the bearer token sent with each order
	// (Authorization: Bearer, RFC 6750) for its customer; called once for
	// every customer before the first order is sent (so that a Token which
	// signs and caches, as authn.DevKey.Tokens does, has its tokens made
	// before the clock starts: a customer brings a token it already has,
	// and the client's signing is not checkout's latency), then once per
	// order, from vegeta's workers at once (it must be safe for that). Nil:
	// none (a checkout run with --auth none).
	Token func(customerID string) (string, error)
	// Watcher, if set, is the read_committed reader of shipmentRequested
	// whose records give the end-to-end latency in the progress lines.
	Watcher *Watcher
}

// Validate reports the first option that is out of range, naming it.
func (o *Options) Validate() error {
	u, err := url.Parse(o.BaseURL)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Errorf("load: BaseURL %q: want checkout's base URL, such as http://127.0.0.1:8080", o.BaseURL)
	case !(o.Rate >= 0.001) || math.IsInf(o.Rate, 0):
		return fmt.Errorf("load: Rate %v: want at least 0.001 orders per second", o.Rate)
	case o.Orders < 1:
		return fmt.Errorf("load: Orders %d: want at least 1", o.Orders)
	case len(o.Customers) == 0:
		return errors.New("load: no Customers: is the catalog seeded (wallets table)?")
	case len(o.StockCodes) == 0:
		return errors.New("load: no StockCodes: is the catalog seeded (catalog table)?")
	case o.MaxLines < 0:
		return fmt.Errorf("load: MaxLines %d: want >= 1 (0: 3)", o.MaxLines)
	case o.Timeout < 0:
		return fmt.Errorf("load: Timeout %v: want a positive duration (0: 30s)", o.Timeout)
	}
	return nil
}

func (o *Options) defaults() {
	if o.MaxLines == 0 {
		o.MaxLines = 3
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = fmt.Sprintf("load-%d", time.Now().UnixNano())
	}
	if o.Timeout == 0 {
		o.Timeout = 30 * time.Second
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
}

// Second is one second of a run, counted from its start: what was sent
// (by scheduled send time), answered, accepted (202) and failed (by
// answer time), and shipped (by the time the Watcher saw the
// shipmentRequested of an order of this run).
type Second struct {
	Second   int     `json:"second"`
	Sent     int     `json:"sent"`
	Accepted int     `json:"accepted"`
	Errors   int     `json:"errors"`
	Shipped  int     `json:"shipped"`
	P99Ms    float64 `json:"checkoutP99Ms"` // checkout p99 of the answers of this second
	hist     *hdrhistogram.Histogram
}

// Result is what Run measured. It is not safe for concurrent use.
type Result struct {
	Rate     float64
	Sent     int
	Accepted int
	// Errors counts the answers other than 202 by cause: "<status>
	// <checkout's code>" ("422 unknown_customer"), or "error: <cause>" for
	// requests without an answer.
	Errors map[string]int
	// Checkout is the latency of every answered request, 202 or not, in
	// microseconds, from its scheduled send time to its answer.
	Checkout *hdrhistogram.Histogram
	// EndToEnd is, per accepted order whose shipment was seen, the time
	// from its 202 to the Watcher seeing its committed shipmentRequested,
	// in microseconds.
	EndToEnd *hdrhistogram.Histogram
	// MaxSendLag is the latest any request was sent after its scheduled
	// time: near zero when the client kept its schedule.
	MaxSendLag time.Duration
	Start      time.Time
	// SendDuration is from the start to the last send; Elapsed to the last
	// answer.
	SendDuration, Elapsed time.Duration
	Seconds               []*Second
	// AcceptedAt is each accepted order's 202 time, by order id.
	AcceptedAt map[string]time.Time
	// Shipped is each accepted order's end-to-end latency, by order id, for
	// those the Watcher saw shipped.
	Shipped map[string]time.Duration
	// Interrupted is set when ctx ended the run early.
	Interrupted bool

	seen    int                  // Watcher entries taken
	pending map[string]time.Time // shipments seen before their order's 202 was processed
}

// TakeShipments adds the shipments w saw since the last call to EndToEnd
// and Shipped: call it after Run, once the system has caught up, to count
// the orders shipped after the last answer. Shipments of orders that are
// not of this run are kept aside (their 202 may not be processed yet) and
// never counted.
func (res *Result) TakeShipments(w *Watcher) {
	if res.pending == nil {
		res.pending = map[string]time.Time{}
	}
	var batch []Shipment
	batch, res.seen = w.Since(res.seen)
	for _, s := range batch {
		if _, dup := res.pending[s.OrderID]; !dup {
			res.pending[s.OrderID] = s.At
		}
	}
	for id, at := range res.pending {
		acc, ok := res.AcceptedAt[id]
		if !ok {
			continue
		}
		delete(res.pending, id)
		if _, dup := res.Shipped[id]; dup {
			continue
		}
		d := max(at.Sub(acc), 0)
		res.Shipped[id] = d
		record(res.EndToEnd, d)
		res.second(at.Sub(res.Start)).Shipped++
	}
}

const maxLatencyMicros = int64(time.Hour / time.Microsecond)

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, maxLatencyMicros, 3) }

func record(h *hdrhistogram.Histogram, d time.Duration) {
	us := d.Microseconds()
	if us < 1 {
		us = 1
	}
	if us > maxLatencyMicros {
		us = maxLatencyMicros
	}
	_ = h.RecordValue(us) // in range by construction
}

// countPacer is vegeta's constant pacer stopped after n hits, so a run sends
// exactly n requests, each at its time, however late the answers come.
type countPacer struct {
	vegeta.ConstantPacer
	n uint64
}

func (p countPacer) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	if hits >= p.n {
		return 0, true
	}
	return p.ConstantPacer.Pace(elapsed, hits)
}

// due is when hit seq (0-based) is sent, after the attack's start:
// vegeta's constant pacer sends hit n at (n+1) intervals, not n, so a
// latency counted from n intervals would add a whole interval to every
// answer (10 ms at 100/s; the load command did so before): this asks the
// pacer itself, its wait for hit seq at elapsed 0.
func (p countPacer) due(seq uint64) time.Duration {
	d, _ := p.ConstantPacer.Pace(0, seq)
	return d
}

// pacer returns the pacer of rate orders/s: vegeta's takes an integer count
// per period, so rate is kept to a thousandth.
func pacer(rate float64, n int) countPacer {
	return countPacer{ConstantPacer: vegeta.ConstantPacer{Freq: int(math.Round(rate * 1000)), Per: 1000 * time.Second}, n: uint64(n)}
}

// targeter returns a vegeta targeter of valid orders, each with its own
// Idempotency-Key. Safe for concurrent use, as vegeta's workers call it.
func targeter(o *Options) vegeta.Targeter {
	var (
		mu  = make(chan struct{}, 1)
		rng = rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
		n   int
	)
	target := strings.TrimRight(o.BaseURL, "/") + "/orders"
	return func(t *vegeta.Target) error {
		mu <- struct{}{}
		req := order.PlaceOrderRequest{CustomerID: o.Customers[rng.IntN(len(o.Customers))], Channel: "api"}
		lines := 1 + rng.IntN(o.MaxLines)
		for range lines {
			req.Lines = append(req.Lines, order.RequestLine{StockCode: o.StockCodes[rng.IntN(len(o.StockCodes))], Quantity: 1})
		}
		key := fmt.Sprintf("%s-%d", o.KeyPrefix, n)
		n++
		<-mu
		req.Reference = key
		body, err := json.Marshal(req)
		if err != nil {
			return err
		}
		t.Method, t.URL, t.Body = http.MethodPost, target, body
		t.Header = http.Header{"Content-Type": {"application/json"}, "Idempotency-Key": {key}}
		if o.Token != nil {
			tok, err := o.Token(req.CustomerID)
			if err != nil {
				return fmt.Errorf("load: bearer token for customer %s: %w", req.CustomerID, err)
			}
			t.Header.Set("Authorization", "Bearer "+tok)
		}
		return nil
	}
}

// Run sends o.Orders orders to checkout at o.Rate and returns what it
// measured once every request is answered or timed out. It blocks for
// about Orders/Rate seconds plus the slowest answer. If ctx ends first it
// stops sending, waits for the requests in flight and returns the partial
// Result with Interrupted set and ctx's error. Other errors: invalid
// options.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o.defaults()
	if o.Token != nil {
		for _, c := range o.Customers {
			if _, err := o.Token(c); err != nil {
				return nil, fmt.Errorf("load: bearer token for customer %s: %w", c, err)
			}
		}
	}
	atk := vegeta.NewAttacker(vegeta.Timeout(o.Timeout), vegeta.KeepAlive(true), vegeta.Redirects(vegeta.NoFollow),
		vegeta.MaxBody(64<<10), vegeta.Workers(64))
	res := &Result{Rate: o.Rate, Errors: map[string]int{}, Checkout: newHist(), EndToEnd: newHist(),
		AcceptedAt: map[string]time.Time{}, Shipped: map[string]time.Duration{}}
	pace := pacer(o.Rate, o.Orders)
	res.Start = time.Now()
	results := atk.Attack(targeter(&o), pace, 0, "ordercast-load")
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	res.pending = map[string]time.Time{}
	takeShipped := func() {
		if o.Watcher != nil {
			res.TakeShipments(o.Watcher)
		}
	}
	lastSent, lastAcc := 0, 0
	stopped := false
	for {
		select {
		case r, ok := <-results:
			if !ok {
				takeShipped()
				res.Elapsed = time.Since(res.Start)
				if o.Progress != nil {
					res.progress(o.Progress, "done", &lastSent, &lastAcc)
				}
				if stopped {
					res.Interrupted = true
					return res, ctx.Err()
				}
				return res, nil
			}
			res.add(r, pace)
		case <-tick.C:
			takeShipped()
			if o.Progress != nil {
				res.progress(o.Progress, "", &lastSent, &lastAcc)
			}
		case <-ctx.Done():
			if !stopped {
				atk.Stop()
				stopped = true
			}
		}
	}
}

// add records one answer.
func (res *Result) add(r *vegeta.Result, pace countPacer) {
	scheduled := res.Start.Add(pace.due(r.Seq))
	res.Sent++
	if lag := r.Timestamp.Sub(scheduled); lag > res.MaxSendLag {
		res.MaxSendLag = lag
	}
	if d := r.Timestamp.Sub(res.Start); d > res.SendDuration {
		res.SendDuration = d
	}
	res.second(scheduled.Sub(res.Start)).Sent++
	end := r.End()
	sec := res.second(end.Sub(res.Start))
	lat := end.Sub(scheduled)
	if r.Code != 0 {
		record(res.Checkout, lat)
		if sec.hist == nil {
			sec.hist = newHist()
		}
		record(sec.hist, lat)
		sec.P99Ms = float64(sec.hist.ValueAtQuantile(99)) / 1000
	}
	if r.Code == http.StatusAccepted {
		var ok order.PlaceOrderResponse
		if err := json.Unmarshal(r.Body, &ok); err == nil && ok.OrderID != "" {
			res.Accepted++
			sec.Accepted++
			res.AcceptedAt[ok.OrderID] = end
			return
		}
		res.Errors["202 without an orderId"]++
		sec.Errors++
		return
	}
	sec.Errors++
	res.Errors[cause(r)]++
}

// cause names why a request was not accepted.
func cause(r *vegeta.Result) string {
	if r.Code == 0 {
		msg := r.Error
		switch {
		case strings.Contains(msg, "Client.Timeout") || strings.Contains(msg, "deadline exceeded"):
			msg = "timeout"
		case strings.Contains(msg, "connection refused"):
			msg = "connection refused"
		case len(msg) > 80:
			msg = msg[:80]
		}
		return "error: " + msg
	}
	var e order.ErrorResponse
	if json.Unmarshal(r.Body, &e) == nil && e.Code != "" {
		return fmt.Sprintf("%d %s", r.Code, e.Code)
	}
	return fmt.Sprintf("%d", r.Code)
}

// second returns the Second d after the start, adding it if needed.
func (res *Result) second(d time.Duration) *Second {
	i := max(int(d/time.Second), 0)
	for len(res.Seconds) <= i {
		res.Seconds = append(res.Seconds, &Second{Second: len(res.Seconds)})
	}
	return res.Seconds[i]
}

// progress prints one line: the orders sent and accepted in the last
// interval, latencies so far.
func (res *Result) progress(w io.Writer, tag string, lastSent, lastAcc *int) {
	el := time.Since(res.Start).Truncate(time.Second)
	errs := 0
	for _, n := range res.Errors {
		errs += n
	}
	line := fmt.Sprintf("load %4s: sent %d (+%d), accepted %d (+%d), errors %d; checkout p50 %s p99 %s p99.9 %s",
		el, res.Sent, res.Sent-*lastSent, res.Accepted, res.Accepted-*lastAcc, errs,
		us(res.Checkout.ValueAtQuantile(50)), us(res.Checkout.ValueAtQuantile(99)), us(res.Checkout.ValueAtQuantile(99.9)))
	if res.EndToEnd.TotalCount() > 0 || len(res.Shipped) > 0 {
		line += fmt.Sprintf("; shipped %d, end-to-end p50 %s p99 %s", len(res.Shipped), us(res.EndToEnd.ValueAtQuantile(50)), us(res.EndToEnd.ValueAtQuantile(99)))
	}
	if tag != "" {
		line += " (" + tag + ")"
	}
	fmt.Fprintln(w, line)
	*lastSent, *lastAcc = res.Sent, res.Accepted
}

// us formats microseconds as a rounded duration.
func us(v int64) string {
	d := time.Duration(v) * time.Microsecond
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	}
	return d.String()
}

// SortedErrors returns the error causes, most frequent first.
func (res *Result) SortedErrors() []string {
	var out []string
	for k := range res.Errors {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		if res.Errors[out[i]] != res.Errors[out[j]] {
			return res.Errors[out[i]] > res.Errors[out[j]]
		}
		return out[i] < out[j]
	})
	return out
}
