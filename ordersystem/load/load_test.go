package load

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/ordersystem/order"
)

func validOptions(url string) Options {
	return Options{BaseURL: url, Rate: 100, Orders: 10, Customers: []string{"17850", "13047"}, StockCodes: []string{"85123A", "71053"}}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Options)
		want string // in the error; "" for valid
	}{
		{"valid", func(*Options) {}, ""},
		{"no scheme", func(o *Options) { o.BaseURL = "127.0.0.1:8080" }, "BaseURL"},
		{"zero rate", func(o *Options) { o.Rate = 0 }, "Rate"},
		{"tiny rate", func(o *Options) { o.Rate = 0.0001 }, "Rate"},
		{"no orders", func(o *Options) { o.Orders = 0 }, "Orders"},
		{"no customers", func(o *Options) { o.Customers = nil }, "Customers"},
		{"no stock codes", func(o *Options) { o.StockCodes = nil }, "StockCodes"},
		{"negative lines", func(o *Options) { o.MaxLines = -1 }, "MaxLines"},
		{"negative timeout", func(o *Options) { o.Timeout = -time.Second }, "Timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := validOptions("http://127.0.0.1:1")
			tc.edit(&o)
			err := o.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate: %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate: %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

// holdingServer answers no request until it has received want of them,
// then answers each with 202 and an order id. A client that waits for
// answers before sending more (closed loop) never gets there.
type holdingServer struct {
	want    int
	release chan struct{}
	once    sync.Once

	mu       sync.Mutex
	received int
	answered int
	keys     map[string]bool
	bad      []string
}

func (s *holdingServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req order.PlaceOrderRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(&req)
	key := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	s.received++
	n := s.received
	switch {
	case err != nil:
		s.bad = append(s.bad, "body: "+err.Error())
	case r.Method != http.MethodPost || r.URL.Path != "/orders":
		s.bad = append(s.bad, r.Method+" "+r.URL.Path)
	case key == "" || s.keys[key]:
		s.bad = append(s.bad, fmt.Sprintf("Idempotency-Key %q empty or repeated", key))
	case req.CustomerID == "" || len(req.Lines) == 0 || len(req.Lines) > 3:
		s.bad = append(s.bad, fmt.Sprintf("request %+v", req))
	}
	s.keys[key] = true
	s.mu.Unlock()
	if n >= s.want {
		s.once.Do(func() { close(s.release) })
	}
	<-s.release
	s.mu.Lock()
	s.answered++
	s.mu.Unlock()
	w.WriteHeader(http.StatusAccepted)
	fmt.Fprintf(w, `{"orderId":"ord_%d","status":"accepted","total":"1.000"}`, n)
}

// TestOpenLoopRateHoldsWhenServerIsSlow: the server holds every answer
// until all the run's orders have arrived, so the client's schedule cannot
// depend on answers. A closed-loop client (one waiting for answers) would
// stall at its concurrency and the wait would time out.
func TestOpenLoopRateHoldsWhenServerIsSlow(t *testing.T) {
	const orders = 150
	srv := &holdingServer{want: orders, release: make(chan struct{}), keys: map[string]bool{}}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	t.Cleanup(func() { srv.once.Do(func() { close(srv.release) }) }) // let the handlers end if the test fails first

	o := validOptions(ts.URL)
	o.Rate, o.Orders = 300, orders
	type out struct {
		res *Result
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := Run(context.Background(), o)
		done <- out{res, err}
	}()
	testkafka.WaitFor(t, 30*time.Second, fmt.Sprintf("all %d orders to arrive with none answered", orders), func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		return srv.received >= orders
	})
	got := <-done
	if got.err != nil {
		t.Fatalf("Run: %v", got.err)
	}
	res := got.res
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.received != orders || srv.answered != orders {
		t.Errorf("server received %d and answered %d requests, want %d each (exactly Orders)", srv.received, srv.answered, orders)
	}
	if len(srv.bad) > 0 {
		t.Errorf("%d bad requests, first: %s", len(srv.bad), srv.bad[0])
	}
	if res.Sent != orders || res.Accepted != orders || len(res.Errors) != 0 || len(res.AcceptedAt) != orders {
		t.Errorf("result: sent %d, accepted %d, errors %v, order ids %d; want %d sent and accepted, no errors", res.Sent, res.Accepted, res.Errors, len(res.AcceptedAt), orders)
	}
	if n := res.Checkout.TotalCount(); n != orders {
		t.Errorf("checkout histogram has %d values, want %d", n, orders)
	}
	sent := 0
	for _, s := range res.Seconds {
		sent += s.Sent
	}
	if sent != orders {
		t.Errorf("per-second sent counts add up to %d, want %d", sent, orders)
	}
}

// TestErrorsByStatus: answers other than 202 are counted by status and
// checkout's error code, and a 202 without an order id is an error.
func TestErrorsByStatus(t *testing.T) {
	var mu sync.Mutex
	n := 0
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		i := n
		mu.Unlock()
		switch i % 3 {
		case 0:
			w.WriteHeader(http.StatusUnprocessableEntity)
			fmt.Fprint(w, `{"code":"unknown_customer","error":"no such customer"}`)
		case 1:
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusAccepted)
			fmt.Fprintf(w, `{"orderId":"ord_%d","status":"accepted"}`, i)
		}
	}))
	t.Cleanup(ts.Close)
	o := validOptions(ts.URL)
	o.Rate, o.Orders = 200, 30
	res, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"422 unknown_customer": 10, "503": 10}
	if res.Accepted != 10 || len(res.Errors) != 2 || res.Errors["422 unknown_customer"] != 10 || res.Errors["503"] != 10 {
		t.Errorf("accepted %d, errors %v; want 10 accepted and %v", res.Accepted, res.Errors, want)
	}
}

// TestDueIsWhenThePacerSends: a request's latency is counted from the time
// the pacer sends it, hit n at n+1 intervals (vegeta's ConstantPacer), not n:
// counted from n intervals, every latency had a whole interval added (10 ms
// at 100/s). due is checked against the pacer's own waits as an attack
// replays them (elapsed = the time of the hit before), and against the
// interval itself.
func TestDueIsWhenThePacerSends(t *testing.T) {
	for _, rate := range []float64{1, 100, 333.3, 1000} {
		p := pacer(rate, 50)
		interval := time.Duration(float64(time.Second) / rate)
		var elapsed time.Duration
		for seq := uint64(0); seq < 50; seq++ {
			wait, stop := p.Pace(elapsed, seq)
			if stop {
				t.Fatalf("rate %v: pacer stopped at hit %d of 50", rate, seq)
			}
			elapsed += wait // the attack sleeps wait, then sends hit seq
			if got := p.due(seq); got != elapsed {
				t.Fatalf("rate %v: due(%d) = %v, the pacer sends it at %v", rate, seq, got, elapsed)
			}
			want := time.Duration(seq+1) * interval
			if d := p.due(seq) - want; d < -time.Microsecond || d > time.Microsecond {
				t.Fatalf("rate %v: due(%d) = %v, want (seq+1) intervals = %v", rate, seq, p.due(seq), want)
			}
		}
	}
}

// TestTokensMadeBeforeTheFirstOrder: Token is asked for every customer's
// token before the first order leaves, so a signing Token's cost is not in
// any order's latency (counted from its scheduled time); a customer whose
// token cannot be made fails the run before anything is sent.
func TestTokensMadeBeforeTheFirstOrder(t *testing.T) {
	customers := make([]string, 40)
	for i := range customers {
		customers[i] = fmt.Sprintf("c%d", i)
	}
	var mu sync.Mutex
	asked := map[string]bool{}
	atFirst := -1
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if atFirst < 0 {
			atFirst = len(asked)
		}
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprint(w, `{"orderId":"ord_1","status":"accepted"}`)
	}))
	t.Cleanup(ts.Close)
	o := validOptions(ts.URL)
	o.Customers, o.Orders = customers, 3
	o.Token = func(c string) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		asked[c] = true
		return "tok-" + c, nil
	}
	if _, err := Run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if atFirst != len(customers) {
		t.Errorf("when the first order arrived, tokens of %d customers had been asked for, want all %d", atFirst, len(customers))
	}
	mu.Unlock()

	o.Token = func(c string) (string, error) {
		if c == "c7" {
			return "", fmt.Errorf("no key")
		}
		return "tok-" + c, nil
	}
	mu.Lock()
	atFirst = -1
	mu.Unlock()
	if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "c7") {
		t.Errorf("Run with a customer whose token fails: %v, want an error naming c7", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if atFirst != -1 {
		t.Errorf("an order was sent although a customer's token could not be made")
	}
}
