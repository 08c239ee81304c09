package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/replay"
	"github.com/ordercast/ordercast/ordersystem/service/checkout/authn"
	"github.com/ordercast/ordercast/ordersystem/store"
)

// Kinds of orders the workload sends.
const (
	kindReal      = "real"      // a sale invoice of the data set
	kindSynthetic = "synthetic" // valid, generated
	kindInvalid   = "invalid"   // generated to be rejected (unknown stock code, quantity 0)
)

// request is one order the client sends until it gets a definite answer.
type request struct {
	key      string
	kind     string
	body     []byte
	customer string // "" for a guest: sent without a token
}

// outcome is the definite answer to a request (or none yet).
type outcome struct {
	kind     string
	status   int    // 202, or the 4xx of a rejection; 0 while unanswered
	orderID  string // set on 202
	reason   string // rejection code
	attempts int
	at       time.Time // when the definite answer came
}

// workload generates orders and sends them to checkout, retrying each with
// its Idempotency-Key until checkout accepts or rejects it.
type workload struct {
	cfg       *Config
	hist      *history
	checkouts []string // base URLs
	client    *http.Client
	// tokens signs a customer's order with the development key the
	// checkouts verify (checkout's --auth dev, the real path).
	tokens func(customer string) (string, error)

	mu       sync.Mutex
	outcomes map[string]*outcome
	retries  int // attempts beyond the first

	queue chan request
	wg    sync.WaitGroup
}

func newWorkload(cfg *Config, hist *history, checkouts []string) (*workload, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 16
	key, err := authn.LoadOrCreateDevKey(devKeyPath(cfg))
	if err != nil {
		return nil, fmt.Errorf("chaos: the checkouts' development key: %w", err)
	}
	return &workload{cfg: cfg, hist: hist, checkouts: checkouts, client: &http.Client{Transport: tr},
		tokens: key.Tokens(time.Hour), outcomes: map[string]*outcome{}, queue: make(chan request, 64)}, nil
}

// devKeyPath is the development signing key of the run's checkouts
// (--auth-dev-key), in the run's data directory.
func devKeyPath(cfg *Config) string { return authn.DevKeyPath(cfg.DataDir) }

// startWorkers starts the senders; they run until the queue is closed and
// drained, or ctx ends (then unanswered orders stay unanswered).
func (w *workload) startWorkers(ctx context.Context, n int) {
	for i := range n {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for req := range w.queue {
				w.send(ctx, req, i)
			}
		}()
	}
}

// send posts req until a definite answer or ctx ends.
func (w *workload) send(ctx context.Context, req request, worker int) {
	w.mu.Lock()
	o := &outcome{kind: req.kind}
	w.outcomes[req.key] = o
	w.mu.Unlock()
	backoff := 100 * time.Millisecond
	for attempt := 0; ctx.Err() == nil; attempt++ {
		base := w.checkouts[(worker+attempt)%len(w.checkouts)]
		status, body, err := w.post(ctx, base, req)
		w.mu.Lock()
		o.attempts++
		if attempt > 0 {
			w.retries++
		}
		w.mu.Unlock()
		switch {
		case err == nil && status == http.StatusAccepted:
			var resp order.PlaceOrderResponse
			_ = json.Unmarshal(body, &resp)
			w.mu.Lock()
			o.status, o.orderID, o.at = status, resp.OrderID, time.Now()
			w.mu.Unlock()
			w.hist.add(event{Ev: "order", Key: req.key, Status: status, OrderID: resp.OrderID, Attempts: o.attempts, Detail: req.kind})
			return
		case err == nil && status >= 400 && status < 500 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests:
			var resp order.ErrorResponse
			_ = json.Unmarshal(body, &resp)
			w.mu.Lock()
			o.status, o.reason, o.at = status, resp.Code, time.Now()
			w.mu.Unlock()
			w.hist.add(event{Ev: "order", Key: req.key, Status: status, Reason: resp.Code, Attempts: o.attempts, Detail: req.kind})
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

func (w *workload) post(ctx context.Context, base string, req request) (int, []byte, error) {
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	hr, err := http.NewRequestWithContext(actx, http.MethodPost, base+"/orders", bytes.NewReader(req.body))
	if err != nil {
		return 0, nil, err
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Idempotency-Key", req.key)
	if req.customer != "" {
		tok, err := w.tokens(req.customer)
		if err != nil {
			return 0, nil, err
		}
		hr.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := w.client.Do(hr)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, err
}

// realOrders reads the sale invoices of the workload file.
func realOrders(path string) ([]request, error) {
	if path == "" {
		return nil, nil
	}
	rc, err := replay.Open(path)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	invoices, err := replay.ReadInvoices(rc)
	if err != nil {
		return nil, err
	}
	var out []request
	for _, inv := range invoices {
		if replay.Classify(inv) != replay.KindSale {
			continue
		}
		po := inv.PlaceOrderRequest()
		b, _ := json.Marshal(po)
		out = append(out, request{key: replay.IdempotencyKey(inv.No), kind: kindReal, body: b, customer: po.CustomerID})
	}
	return out, nil
}

// generator makes synthetic orders from the seeded catalog and wallets.
type generator struct {
	rng       *rand.Rand
	codes     []string
	customers []string // the hot set
	n         int
	seed      int64
}

// newGenerator reads the catalog and the wallets. About expected synthetic
// orders will be made, so the hot set has expected/12 customers (at least
// 40): each sees a dozen orders on average, enough to run some dry.
func newGenerator(ctx context.Context, db *store.DB, seed int64, expected int) (*generator, error) {
	g := &generator{rng: rand.New(rand.NewPCG(uint64(seed), 0x0c)), seed: seed}
	var err error
	if g.codes, err = db.QueryStrings(ctx, `SELECT stock_code FROM catalog ORDER BY stock_code`); err != nil {
		return nil, err
	}
	all, err := db.QueryStrings(ctx, `SELECT customer_id FROM wallets ORDER BY customer_id`)
	if err != nil {
		return nil, err
	}
	if len(g.codes) == 0 || len(all) == 0 {
		return nil, fmt.Errorf("chaos: the catalog (%d products) or the wallets (%d) are empty: was the database seeded?", len(g.codes), len(all))
	}
	// A small hot set, so that wallets run dry and refusals happen.
	for range min(max(40, expected/12), len(all)) {
		g.customers = append(g.customers, all[g.rng.IntN(len(all))])
	}
	return g, nil
}

// next returns the next synthetic order: 85% a hot customer, 10% a guest,
// 5% invalid.
func (g *generator) next() request {
	g.n++
	req := order.PlaceOrderRequest{Country: "United Kingdom", Reference: fmt.Sprintf("chaos-%d", g.n)}
	kind := kindSynthetic
	roll := g.rng.IntN(100)
	if roll < 85 {
		req.CustomerID = g.customers[g.rng.IntN(len(g.customers))]
	}
	for range 1 + g.rng.IntN(4) {
		req.Lines = append(req.Lines, order.RequestLine{StockCode: g.codes[g.rng.IntN(len(g.codes))], Quantity: int64(1 + g.rng.IntN(6))})
	}
	if roll >= 95 {
		kind = kindInvalid
		if roll%2 == 0 {
			req.Lines[0].StockCode = "NO-SUCH-CODE"
		} else {
			req.Lines[0].Quantity = 0
		}
	}
	b, _ := json.Marshal(req)
	return request{key: fmt.Sprintf("chaos-%d-%d", g.seed, g.n), kind: kind, body: b, customer: req.CustomerID}
}

// feed sends the real orders spread over spread and synthetic ones at rate
// until ctx ends (the end of the fault phase); then it closes the queue.
func (w *workload) feed(ctx context.Context, real []request, spread time.Duration, gen *generator, rate float64) {
	defer close(w.queue)
	var realTick, synTick <-chan time.Time
	if len(real) > 0 {
		t := time.NewTicker(max(spread/time.Duration(len(real)), time.Millisecond))
		defer t.Stop()
		realTick = t.C
	}
	if gen != nil && rate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer t.Stop()
		synTick = t.C
	}
	for realTick != nil || synTick != nil {
		var req request
		select {
		case <-ctx.Done():
			return
		case <-realTick:
			req, real = real[0], real[1:]
			if len(real) == 0 {
				realTick = nil
			}
		case <-synTick:
			req = gen.next()
		}
		select {
		case w.queue <- req:
		case <-ctx.Done():
			return
		}
	}
}

// summary returns the outcome counts and the unanswered keys.
func (w *workload) summary() (byKind map[string][3]int, unanswered []string, retries int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	byKind = map[string][3]int{} // accepted, rejected, unanswered
	for k, o := range w.outcomes {
		c := byKind[o.kind]
		switch {
		case o.status == http.StatusAccepted:
			c[0]++
		case o.status != 0:
			c[1]++
		default:
			c[2]++
			unanswered = append(unanswered, k)
		}
		byKind[o.kind] = c
	}
	return byKind, unanswered, w.retries
}

// snapshot copies the outcomes.
func (w *workload) snapshot() map[string]outcome {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]outcome, len(w.outcomes))
	for k, o := range w.outcomes {
		out[k] = *o
	}
	return out
}
