package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/ordercast/ordercast/ordersystem/internal/jsonlimit"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/ordercast/ordercast/internal/ctxtime"
	"github.com/ordercast/ordercast/ordersystem/order"
)

// Defaults of [Options], used when the field is zero.
const (
	DefaultConcurrency    = 8                      // orders in flight
	DefaultMaxAttempts    = 10                     // attempts per order, the first included
	DefaultInitialBackoff = 100 * time.Millisecond // wait before the first retry
	DefaultMaxBackoff     = 5 * time.Second        // cap of the doubling backoff
	DefaultAttemptTimeout = 30 * time.Second       // bound of one HTTP attempt
)

// maxResponseBody bounds how much of a checkout answer is read.
const maxResponseBody = 1 << 20

// IdempotencyKey returns the Idempotency-Key header value the replay sends
// for an invoice: "invoice-" + invoiceNo. It is stable across runs, so
// replaying again after a crash never creates a second order: checkout
// answers a repeated key with its first answer.
func IdempotencyKey(invoiceNo string) string { return "invoice-" + invoiceNo }

// Options configure a [Replayer]. Only BaseURL is required; a zero field
// takes its default.
type Options struct {
	// BaseURL is checkout's base URL, such as "http://127.0.0.1:8080"; orders
	// are POSTed to BaseURL + "/orders". Required, http or https.
	BaseURL string
	// Rate is the maximum rate of new orders, in orders per second; 0 means
	// unlimited. Retries of an order are not rate limited (they have their
	// own backoff). Bursts are at most max(1, Rate/10) orders (100 ms
	// worth), so that a late timer does not lose throughput. Negative or NaN
	// is an error.
	Rate float64
	// Concurrency is the number of orders in flight at once. Default
	// DefaultConcurrency (8).
	Concurrency int
	// HTTPClient sends the requests. Default: a client on a clone of
	// http.DefaultTransport keeping Concurrency idle connections per host,
	// with no overall timeout (AttemptTimeout bounds each attempt).
	HTTPClient *http.Client
	// Progress receives progress output (UTF-8 text); nil means none. See
	// ProgressMode.
	Progress io.Writer
	// ProgressMode chooses the progress output format. Default ProgressAuto.
	ProgressMode ProgressMode
	// ProgressInterval is the time between progress updates. Default 200 ms
	// for the bar, 2 s for lines.
	ProgressInterval time.Duration
	// MaxAttempts is the number of attempts per order, the first included,
	// before it counts as failed. 1 means no retries. Default
	// DefaultMaxAttempts (10). When the first order to use them up does so
	// before checkout has answered any attempt of the run, Run stops with
	// an [*UnreachableError].
	MaxAttempts int
	// InitialBackoff is the wait before the first retry; each further retry
	// doubles it, up to MaxBackoff. The actual wait is drawn uniformly from
	// [b/2, b] (jitter). Default DefaultInitialBackoff (100 ms).
	InitialBackoff time.Duration
	// MaxBackoff caps the wait between attempts, a Retry-After header
	// included. Default DefaultMaxBackoff (5 s). With the defaults an order
	// is given up after about 20 s of waiting plus the attempts themselves.
	MaxBackoff time.Duration
	// AttemptTimeout bounds one HTTP attempt (connect, send, answer); a
	// timed out attempt is retried. Default DefaultAttemptTimeout (30 s).
	AttemptTimeout time.Duration
	// Token, if set, gives the bearer token sent (Authorization: Bearer,
	// RFC 6750) with the order of a customer, called with its customer
	// id once per sale; a guest sale is sent without one. An error fails
	// that sale. It is called from several goroutines at once. Nil: no
	// token (a checkout run with --auth none). See authn.DevKey.Tokens.
	Token func(customerID string) (string, error)
}

// ProgressMode is the format of progress output.
type ProgressMode int

const (
	// ProgressAuto draws a bar if Options.Progress is a terminal (an
	// *os.File on a character device) and writes lines otherwise.
	ProgressAuto ProgressMode = iota
	// ProgressBar redraws one line in place with "\r", and ends it with a
	// newline when the run ends.
	ProgressBar
	// ProgressLines writes one plain line per update, for logs and pipes.
	ProgressLines
	// ProgressOff writes nothing, even if Options.Progress is set.
	ProgressOff
)

// Replayer sends sale invoices to checkout as orders. Create it with [New].
// A Replayer holds no state between runs: Run may be called any number of
// times, concurrently too.
type Replayer struct {
	opts   Options
	url    string
	client *http.Client
}

// New validates opts, applies the defaults and returns a Replayer. It fails
// if BaseURL is missing or not an absolute http(s) URL, or if Rate is
// negative or NaN.
func New(opts Options) (*Replayer, error) {
	u, err := url.Parse(opts.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("replay: BaseURL %q is not an absolute http(s) URL", opts.BaseURL)
	}
	if opts.Rate < 0 || math.IsNaN(opts.Rate) {
		return nil, fmt.Errorf("replay: Rate %v: want >= 0 orders/s (0 = unlimited)", opts.Rate)
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = DefaultMaxAttempts
	}
	if opts.InitialBackoff <= 0 {
		opts.InitialBackoff = DefaultInitialBackoff
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = DefaultMaxBackoff
	}
	opts.MaxBackoff = max(opts.MaxBackoff, opts.InitialBackoff)
	if opts.AttemptTimeout <= 0 {
		opts.AttemptTimeout = DefaultAttemptTimeout
	}
	client := opts.HTTPClient
	if client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = opts.Concurrency
		tr.MaxIdleConns = max(tr.MaxIdleConns, opts.Concurrency)
		client = &http.Client{Transport: tr}
	}
	return &Replayer{
		opts:   opts,
		url:    strings.TrimRight(opts.BaseURL, "/") + "/orders",
		client: client,
	}, nil
}

// Run is New(opts) followed by Run(ctx, invoices).
func Run(ctx context.Context, invoices []*Invoice, opts Options) (Summary, error) {
	r, err := New(opts)
	if err != nil {
		return Summary{}, err
	}
	return r.Run(ctx, invoices)
}

// Summary is the outcome of a replay. Every sale ends in exactly one of
// accepted, rejected, failed or unfinished:
//
//	Sales == OrdersAccepted + sum(Rejected) + Failed + Unfinished
//
// and every invoice read is a sale or is counted in NotOrders. Maps are never
// nil.
type Summary struct {
	// InvoicesRead is the number of invoices given to Run.
	InvoicesRead int `json:"invoicesRead"`
	// Lines is the number of data rows of those invoices (well-formed or
	// not).
	Lines int `json:"lines"`
	// RowErrors counts the malformed rows by reason (the Row* constants).
	RowErrors map[string]int `json:"rowErrors"`
	// Sales is the number of invoices of kind KindSale: the orders to send.
	Sales int `json:"sales"`
	// NotOrders counts the invoices that are not sent, by kind:
	// "cancellation", "adjustment", "write_off", "malformed_row".
	NotOrders map[string]int `json:"notOrders"`
	// OrdersAccepted is the number of sales checkout accepted (2xx).
	OrdersAccepted int `json:"ordersAccepted"`
	// AcceptedOrderIDs maps the invoice number of each accepted sale to
	// checkout's order id ("" if the 2xx body carried none).
	AcceptedOrderIDs map[string]string `json:"acceptedOrderIds"`
	// Rejected counts the sales checkout refused with a 4xx other than 429,
	// by the code of its order.ErrorResponse body, or "http_<status>" when
	// the body has no code.
	Rejected map[string]int `json:"rejected"`
	// RejectedInvoices maps the invoice number of each rejected sale to its
	// code.
	RejectedInvoices map[string]string `json:"rejectedInvoices"`
	// Failed is the number of sales given up after Options.MaxAttempts
	// attempts that all met a network error, a timeout, a 5xx or a 429.
	// Such an order may or may not exist in checkout; a later replay with
	// the same invoices settles it (same Idempotency-Key).
	Failed int `json:"failed"`
	// FailedInvoices maps the invoice number of each failed sale to its last
	// error.
	FailedInvoices map[string]string `json:"failedInvoices"`
	// Unfinished is the number of sales without an outcome because Run
	// stopped early (the context was cancelled, or an [*UnreachableError]
	// or [*NotCheckoutError]): never sent, or in flight when it happened.
	Unfinished int `json:"unfinished"`
	// Stopped says why Run stopped before every sale had an outcome:
	// StoppedInterrupted, StoppedUnreachable or StoppedNotCheckout; empty
	// when none is Unfinished.
	Stopped string `json:"stopped,omitempty"`
	// Retries is the number of attempts beyond the first, over all sales.
	Retries int `json:"retries"`
	// AttemptErrors counts the attempts that got no usable answer, by
	// cause: "http <status> <code>" for a 429 or a 5xx (the code of its
	// order.ErrorResponse body, if any), the error for a network error
	// (such as "dial tcp 127.0.0.1:8080: connect: connection refused"),
	// "no answer within <AttemptTimeout>" for a timed out attempt.
	AttemptErrors map[string]int `json:"attemptErrors"`
	// Elapsed is the duration of Run, in nanoseconds in JSON.
	Elapsed time.Duration `json:"elapsedNs"`
}

// Values of Summary.Stopped.
const (
	StoppedInterrupted = "interrupted"          // the context ended
	StoppedUnreachable = "checkout unreachable" // see UnreachableError
	StoppedNotCheckout = "not checkout"         // see NotCheckoutError
)

func newSummary() Summary {
	return Summary{
		RowErrors:        map[string]int{},
		NotOrders:        map[string]int{},
		AcceptedOrderIDs: map[string]string{},
		Rejected:         map[string]int{},
		RejectedInvoices: map[string]string{},
		FailedInvoices:   map[string]string{},
		AttemptErrors:    map[string]int{},
	}
}

// Tally classifies the invoices as Run does before it sends anything and
// returns the Summary of a replay that has not sent any: InvoicesRead,
// Lines, RowErrors, Sales and NotOrders filled, the outcomes zero. With
// [Summary.CheckInput] it tells, before a replay starts, whether it would
// be one that sends nothing.
func Tally(invoices []*Invoice) Summary {
	sum, _ := tallyInvoices(invoices)
	return sum
}

func tallyInvoices(invoices []*Invoice) (Summary, []*Invoice) {
	sum := newSummary()
	var sales []*Invoice
	for _, inv := range invoices {
		sum.InvoicesRead++
		sum.Lines += inv.Rows()
		for _, e := range inv.RowErrors {
			sum.RowErrors[e.Reason]++
		}
		if kind := Classify(inv); kind == KindSale {
			sales = append(sales, inv)
		} else {
			sum.NotOrders[kind]++
		}
	}
	sum.Sales = len(sales)
	return sum, sales
}

// RowErrorsTotal returns the number of malformed rows, the sum of RowErrors.
func (s Summary) RowErrorsTotal() int {
	n := 0
	for _, v := range s.RowErrors {
		n += v
	}
	return n
}

// CheckInput says whether the replayed file is one a replay should fail
// on, whatever checkout answers: it returns an [*InputError] when the file
// has no sale invoice to send (only a header, or only cancellations,
// adjustments, write-offs and malformed invoices), or when more than
// maxRowErrorRate of its data rows are malformed (0.01: 1%; 0: any
// malformed row fails; >= 1: never, for row errors), and nil otherwise.
// The Online Retail data set has no malformed row, so
// [DefaultMaxRowErrorRate] passes it and fails a file of another shape
// (a CSV whose columns are not Online Retail's). It looks only at what
// [Tally] counts: call it on a Summary of Run or of Tally alike.
func (s Summary) CheckInput(maxRowErrorRate float64) error {
	rowErrs := s.RowErrorsTotal()
	if s.Lines > 0 && float64(rowErrs) > maxRowErrorRate*float64(s.Lines) {
		return &InputError{Reason: fmt.Sprintf("%d of %d data rows are malformed (by reason: %s), more than the %g%% allowed",
			rowErrs, s.Lines, fmtCounts(s.RowErrors), 100*maxRowErrorRate), RowErrors: rowErrs, Lines: s.Lines, Sales: s.Sales}
	}
	if s.Sales == 0 {
		why := "the file has no data row"
		if s.InvoicesRead > 0 {
			why = fmt.Sprintf("none of its %d invoices is a sale (%s)", s.InvoicesRead, fmtCounts(s.NotOrders))
		}
		return &InputError{Reason: "no order to send: " + why, RowErrors: rowErrs, Lines: s.Lines}
	}
	return nil
}

// RejectedTotal returns the number of rejected sales, the sum of Rejected.
func (s Summary) RejectedTotal() int {
	n := 0
	for _, v := range s.Rejected {
		n += v
	}
	return n
}

// Run classifies the invoices (see [Classify]), counts those that are not
// sales, and POSTs each sale, in the given order, to checkout as an
// order.PlaceOrderRequest (see [Invoice.PlaceOrderRequest]) with the headers
// Content-Type: application/json and Idempotency-Key: [IdempotencyKey].
//
// Up to Options.Concurrency orders are in flight, new ones started at most at
// Options.Rate per second. An answer is handled thus:
//   - 2xx: accepted; the order id is read from the order.PlaceOrderResponse
//     body;
//   - 429, 5xx, a network error, a timeout or an unreadable 2xx body: the
//     same request (same Idempotency-Key) is retried with exponential
//     backoff and jitter, honouring Retry-After up to Options.MaxBackoff,
//     until Options.MaxAttempts attempts, after which the sale counts as
//     failed;
//   - 404 or 405, whatever the body: the URL is not checkout's POST /orders
//     (checkout answers 404 not_found only for paths outside its API and
//     405 method_not_allowed only for a wrong method), so Run stops at once
//     with a [*NotCheckoutError];
//   - any other status: rejected, counted by the code of the
//     order.ErrorResponse body ("http_<status>" without one).
//
// Attempts without a usable answer are counted by cause in
// Summary.AttemptErrors, and each distinct cause is written once to
// Options.Progress (on a line of its own) when it first occurs. If the first
// sale to use up its attempts does so before checkout has answered any
// attempt, Run stops and returns an [*UnreachableError] with the partial
// Summary. If the URL answers 404 or 405 to any attempt, Run stops at once
// and returns a [*NotCheckoutError] with the partial Summary.
//
// Run only reads the invoices. The workers share Options.HTTPClient (an
// *http.Client is safe for that); Options.Progress is written by one
// goroutine at a time, and not after Run returns.
//
// Progress goes to Options.Progress while it runs. When ctx is cancelled,
// Run stops promptly: no new order is started, in-flight requests and
// backoff waits are abandoned, and the partial Summary is returned with
// ctx.Err() (those sales count as Unfinished). Otherwise the error is nil:
// rejections and failures are outcomes reported in the Summary, not errors.
func (r *Replayer) Run(ctx context.Context, invoices []*Invoice) (Summary, error) {
	start := time.Now()
	sum, sales := tallyInvoices(invoices)

	// runCtx ends with ctx, or with an *UnreachableError or a
	// *NotCheckoutError as its cause.
	runCtx, cancelRun := context.WithCancelCause(ctx)
	defer cancelRun(nil)
	st := &runState{sum: &sum, start: start, giveUp: cancelRun}
	stopProgress := r.startProgress(st, len(sales), start)

	jobs := make(chan *Invoice)
	var wg sync.WaitGroup
	for range min(r.opts.Concurrency, max(len(sales), 1)) {
		wg.Go(func() {
			for inv := range jobs {
				r.send(runCtx, inv, st)
			}
		})
	}
	var limiter *rate.Limiter
	if r.opts.Rate > 0 && !math.IsInf(r.opts.Rate, 1) {
		limiter = rate.NewLimiter(rate.Limit(r.opts.Rate), max(1, int(r.opts.Rate/10)))
	}
dispatch:
	for _, inv := range sales {
		if limiter != nil && !waitToken(runCtx, limiter) {
			break
		}
		select {
		case jobs <- inv:
		case <-runCtx.Done():
			break dispatch
		}
	}
	close(jobs)
	wg.Wait()

	sum.Retries = int(st.retries.Load())
	sum.Unfinished = sum.Sales - sum.OrdersAccepted - sum.RejectedTotal() - sum.Failed
	sum.Elapsed = time.Since(start)
	stopProgress()
	if sum.Unfinished > 0 && ctx.Err() != nil {
		sum.Stopped = StoppedInterrupted
		return sum, ctx.Err()
	}
	var unreachable *UnreachableError
	if errors.As(context.Cause(runCtx), &unreachable) {
		if sum.Unfinished > 0 {
			sum.Stopped = StoppedUnreachable
		}
		return sum, unreachable
	}
	var notCheckout *NotCheckoutError
	if errors.As(context.Cause(runCtx), &notCheckout) {
		if sum.Unfinished > 0 {
			sum.Stopped = StoppedNotCheckout
		}
		return sum, notCheckout
	}
	return sum, nil
}

// waitToken waits for a rate token; false if ctx ended first.
func waitToken(ctx context.Context, l *rate.Limiter) bool {
	res := l.Reserve()
	d := res.Delay()
	if d == 0 {
		return ctx.Err() == nil
	}
	if !ctxtime.Sleep(ctx, d) {
		res.Cancel()
		return false
	}
	return true
}

// runState is the mutable state of one Run, shared by its workers.
type runState struct {
	mu  sync.Mutex
	sum *Summary // maps and counters guarded by mu

	// Progress counters, readable without mu.
	accepted, rejected, failed, retries atomic.Int64

	start    time.Time
	p        *progress // where causes are printed; nil: nowhere
	attempts atomic.Int64
	answered atomic.Bool // checkout answered an attempt (any status)
	giveUp   context.CancelCauseFunc
}

// attemptFailed counts a failed attempt by its cause and prints the cause
// the first time it is seen.
func (s *runState) attemptFailed(res attemptResult) {
	s.mu.Lock()
	s.sum.AttemptErrors[res.cause]++
	first := s.sum.AttemptErrors[res.cause] == 1
	s.mu.Unlock()
	if first && s.p != nil {
		s.p.note(fmt.Sprintf("replay: an attempt failed: %s (each cause is shown once; the summary counts them)", res.err))
	}
}

// unreachable stops the run if checkout never answered; called when a sale
// used up its attempts.
func (s *runState) unreachable(url, cause string) {
	if s.answered.Load() {
		return
	}
	s.giveUp(&UnreachableError{URL: url, Attempts: int(s.attempts.Load()), Elapsed: time.Since(s.start), Cause: cause})
}

func (s *runState) accept(no, orderID string) {
	s.mu.Lock()
	s.sum.OrdersAccepted++
	s.sum.AcceptedOrderIDs[no] = orderID
	s.mu.Unlock()
	s.accepted.Add(1)
}

func (s *runState) reject(no, code string) {
	s.mu.Lock()
	s.sum.Rejected[code]++
	s.sum.RejectedInvoices[no] = code
	s.mu.Unlock()
	s.rejected.Add(1)
}

func (s *runState) fail(no, lastErr string) {
	s.mu.Lock()
	s.sum.Failed++
	s.sum.FailedInvoices[no] = lastErr
	s.mu.Unlock()
	s.failed.Add(1)
}

type outcome int

const (
	outcomeRetry outcome = iota
	outcomeAccepted
	outcomeRejected
)

type attemptResult struct {
	outcome    outcome
	answered   bool          // checkout answered (any status)
	orderID    string        // outcomeAccepted
	code       string        // outcomeRejected
	err        string        // outcomeRetry: what went wrong
	cause      string        // outcomeRetry: err without the details of this attempt (see Summary.AttemptErrors)
	retryAfter time.Duration // outcomeRetry: the Retry-After header, 0 if none
	// notCheckout: a 404 or 405, which checkout's POST /orders never
	// answers.
	notCheckout *NotCheckoutError
}

// send delivers one sale, retrying as documented on Run, and records its
// outcome in st; it records nothing if ctx ends first.
func (r *Replayer) send(ctx context.Context, inv *Invoice, st *runState) {
	if ctx.Err() != nil {
		return
	}
	req := inv.PlaceOrderRequest()
	body, err := json.Marshal(req)
	if err != nil { // cannot happen: the request has only strings and ints
		st.fail(inv.No, "encode request: "+err.Error())
		return
	}
	var token string
	if r.opts.Token != nil && req.CustomerID != "" {
		if token, err = r.opts.Token(req.CustomerID); err != nil {
			st.fail(inv.No, "bearer token for customer "+req.CustomerID+": "+err.Error())
			return
		}
	}
	key := IdempotencyKey(inv.No)
	backoff := r.opts.InitialBackoff
	for attempt := 1; ; attempt++ {
		res := r.attempt(ctx, body, key, token)
		if res.answered {
			st.answered.Store(true)
		}
		if res.notCheckout != nil {
			st.giveUp(res.notCheckout)
			return // not recorded: Unfinished
		}
		switch res.outcome {
		case outcomeAccepted:
			st.accept(inv.No, res.orderID)
			return
		case outcomeRejected:
			st.reject(inv.No, res.code)
			return
		}
		if ctx.Err() != nil {
			return // abandoned, not failed
		}
		st.attempts.Add(1)
		st.attemptFailed(res)
		if attempt >= r.opts.MaxAttempts {
			st.fail(inv.No, fmt.Sprintf("gave up after %d attempts: %s", attempt, res.err))
			st.unreachable(r.opts.BaseURL, res.err)
			return
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		if res.retryAfter > wait {
			wait = min(res.retryAfter, r.opts.MaxBackoff)
		}
		st.retries.Add(1)
		if !ctxtime.Sleep(ctx, wait) {
			return
		}
		backoff = min(2*backoff, r.opts.MaxBackoff)
	}
}

// attempt makes one HTTP request and classifies its answer.
func (r *Replayer) attempt(ctx context.Context, body []byte, key, token string) attemptResult {
	actx, cancel := context.WithTimeout(ctx, r.opts.AttemptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, r.url, bytes.NewReader(body))
	if err != nil {
		return attemptResult{err: err.Error(), cause: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Idempotency-Key", key)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		cause := r.networkCause(err)
		return attemptResult{err: cause, cause: cause}
	}
	defer func() {
		// Drain a little so the connection can be reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
	}()
	data, readErr := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody))
	status := resp.StatusCode
	switch {
	case status >= 200 && status < 300:
		if readErr != nil {
			// Accepted, but the answer was lost: ask again, the same key
			// gets the same answer.
			return attemptResult{answered: true, err: fmt.Sprintf("http %d: reading body: %v", status, readErr),
				cause: fmt.Sprintf("http %d, body unreadable", status)}
		}
		var ok order.PlaceOrderResponse
		_ = jsonlimit.Unmarshal(data, &ok, 0) // nesting bounded (jsonlimit); a 2xx is an acceptance even if its body is not as expected
		return attemptResult{outcome: outcomeAccepted, answered: true, orderID: ok.OrderID}
	case status == http.StatusTooManyRequests || status >= 500:
		msg, cause := fmt.Sprintf("http %d", status), fmt.Sprintf("http %d", status)
		e := errorBody(data)
		if e.Code != "" || e.Error != "" {
			msg += fmt.Sprintf(": %s: %s", e.Code, e.Error)
			cause = strings.TrimSpace(cause + " " + e.Code)
		}
		return attemptResult{answered: true, err: msg, cause: cause, retryAfter: parseRetryAfter(resp.Header.Get("Retry-After"))}
	case status == http.StatusNotFound || status == http.StatusMethodNotAllowed:
		// Checkout's POST /orders answers neither: checkout itself answers
		// them (with its JSON error body) only for a path outside its API
		// or a wrong method, so the body does not tell them apart.
		e := errorBody(data)
		nc := &NotCheckoutError{URL: r.url, Status: status, Code: e.Code, Message: bodyStart([]byte(e.Error))}
		if e.Code == "" {
			nc.Message = ""
			nc.Body = bodyStart(data)
		}
		return attemptResult{answered: true, notCheckout: nc}
	default:
		code := errorBody(data).Code
		if code == "" {
			code = "http_" + strconv.Itoa(status)
		}
		return attemptResult{outcome: outcomeRejected, answered: true, code: code}
	}
}

// networkCause describes an attempt that got no answer, without what differs
// from one attempt to the next (the request's URL, a local port), so that one
// cause reads the same on every attempt.
func (r *Replayer) networkCause(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Sprintf("no answer within %v", r.opts.AttemptTimeout)
	}
	var op *net.OpError
	if errors.As(err, &op) {
		s := op.Op
		if op.Net != "" {
			s += " " + op.Net
		}
		if op.Addr != nil && op.Op == "dial" {
			s += " " + op.Addr.String()
		}
		return s + ": " + op.Err.Error()
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "connection closed without an answer (" + err.Error() + ")"
	}
	return err.Error()
}

// bodyStart is the first line of a body, at most 80 bytes, for a message.
func bodyStart(data []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(data)), "\n")
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	return strings.ToValidUTF8(s, "?")
}

func errorBody(data []byte) order.ErrorResponse {
	var e order.ErrorResponse
	if jsonlimit.Unmarshal(data, &e, 0) != nil { // nesting bounded, duplicates refused
		return order.ErrorResponse{}
	}
	return e
}

// parseRetryAfter reads a Retry-After value, delay-seconds or HTTP-date; 0
// if absent or invalid.
func parseRetryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil {
		if s < 0 {
			return 0
		}
		return time.Duration(min(s, 24*3600)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}
