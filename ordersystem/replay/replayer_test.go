package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ordercast/ordercast/ordersystem/order"
)

// attempt is one request as the fake checkout saw it.
type attempt struct {
	method, path, contentType, key string
	raw                            []byte
	body                           order.PlaceOrderRequest
	n                              int // 1 for the first attempt with this key
	at                             time.Time
}

// fakeCheckout records every request and answers with handle, or 202 with
// order id "ord-<reference>" when handle is nil or returns false.
type fakeCheckout struct {
	*httptest.Server
	handle func(w http.ResponseWriter, r *http.Request, a attempt) bool

	mu       sync.Mutex
	attempts []attempt
	byKey    map[string]int
}

func newFakeCheckout(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, a attempt) bool) *fakeCheckout {
	t.Helper()
	f := &fakeCheckout{handle: handle, byKey: map[string]int{}}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeCheckout) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	a := attempt{method: r.Method, path: r.URL.Path, contentType: r.Header.Get("Content-Type"),
		key: r.Header.Get("Idempotency-Key"), raw: raw, at: time.Now()}
	_ = json.Unmarshal(raw, &a.body)
	f.mu.Lock()
	f.byKey[a.key]++
	a.n = f.byKey[a.key]
	f.attempts = append(f.attempts, a)
	f.mu.Unlock()
	if f.handle != nil && f.handle(w, r, a) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	json.NewEncoder(w).Encode(order.PlaceOrderResponse{OrderID: "ord-" + a.body.Reference, Status: "accepted", Total: "1.000"})
}

func (f *fakeCheckout) seen() []attempt {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.attempts)
}

func (f *fakeCheckout) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.attempts)
}

func writeError(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(order.ErrorResponse{Code: code, Error: "test says " + code})
}

// waitFor polls cond until it holds, failing the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

// checkInvariant checks that every sale has exactly one outcome.
func checkInvariant(t *testing.T, s Summary) {
	t.Helper()
	if got := s.OrdersAccepted + s.RejectedTotal() + s.Failed + s.Unfinished; got != s.Sales {
		t.Errorf("accepted %d + rejected %d + failed %d + unfinished %d = %d, want sales %d",
			s.OrdersAccepted, s.RejectedTotal(), s.Failed, s.Unfinished, got, s.Sales)
	}
	notOrders := 0
	for _, n := range s.NotOrders {
		notOrders += n
	}
	if s.Sales+notOrders != s.InvoicesRead {
		t.Errorf("sales %d + not orders %d != invoices read %d", s.Sales, notOrders, s.InvoicesRead)
	}
	if len(s.AcceptedOrderIDs) != s.OrdersAccepted || len(s.RejectedInvoices) != s.RejectedTotal() || len(s.FailedInvoices) != s.Failed {
		t.Errorf("per-invoice maps (%d, %d, %d) disagree with the counts", len(s.AcceptedOrderIDs), len(s.RejectedInvoices), len(s.FailedInvoices))
	}
}

func TestRunSendsSalesAndCountsRejections(t *testing.T) {
	invs := readFile(t, "testdata/dirty.csv")
	fake := newFakeCheckout(t, func(w http.ResponseWriter, r *http.Request, a attempt) bool {
		switch a.body.Reference {
		case "537008":
			writeError(w, http.StatusUnprocessableEntity, order.ReasonBadQuantity)
		case "536545":
			http.Error(w, "plain text, not JSON", http.StatusBadRequest)
		default:
			return false
		}
		return true
	})
	sum, err := Run(context.Background(), invs, Options{BaseURL: fake.URL + "/", Concurrency: 3})
	if err != nil {
		t.Fatal(err)
	}
	checkInvariant(t, sum)
	if sum.InvoicesRead != 17 || sum.Lines != 25 || sum.Sales != 4 || sum.OrdersAccepted != 2 || sum.Failed != 0 || sum.Unfinished != 0 || sum.Retries != 0 {
		t.Errorf("summary = %+v", sum)
	}
	if want := map[string]string{"536477": "ord-536477", "537005": "ord-537005"}; !maps.Equal(sum.AcceptedOrderIDs, want) {
		t.Errorf("accepted = %v, want %v", sum.AcceptedOrderIDs, want)
	}
	if want := map[string]int{order.ReasonBadQuantity: 1, "http_400": 1}; !maps.Equal(sum.Rejected, want) {
		t.Errorf("rejected = %v, want %v", sum.Rejected, want)
	}
	if want := map[string]string{"537008": order.ReasonBadQuantity, "536545": "http_400"}; !maps.Equal(sum.RejectedInvoices, want) {
		t.Errorf("rejected invoices = %v, want %v", sum.RejectedInvoices, want)
	}
	wantNot := map[string]int{KindCancellation: 1, KindAdjustment: 2, KindWriteOff: 1, KindMalformedRow: 9}
	if !maps.Equal(sum.NotOrders, wantNot) {
		t.Errorf("not orders = %v, want %v", sum.NotOrders, wantNot)
	}
	if !maps.Equal(sum.RowErrors, RowErrorCounts(invs)) || len(sum.RowErrors) != 8 {
		t.Errorf("row errors = %v", sum.RowErrors)
	}

	got := fake.seen()
	if len(got) != 4 {
		t.Fatalf("%d requests, want 4", len(got))
	}
	inv := byNo(invs)
	for _, a := range got {
		if a.method != http.MethodPost || a.path != "/orders" || a.contentType != "application/json" {
			t.Errorf("request %s %s content type %q", a.method, a.path, a.contentType)
		}
		if a.key != "invoice-"+a.body.Reference {
			t.Errorf("Idempotency-Key %q for reference %q", a.key, a.body.Reference)
		}
		if want := inv[a.body.Reference].PlaceOrderRequest(); !reflect.DeepEqual(a.body, want) {
			t.Errorf("body %+v, want %+v", a.body, want)
		}
		switch a.body.Reference {
		case "537008": // sent as in the data: the -1 line and the price-0 line too
			const want = `{"customerId":"17908","country":"France","reference":"537008","lines":[{"stockCode":"22111","quantity":3},{"stockCode":"22112","quantity":-1},{"stockCode":"22113","quantity":1}]}`
			if string(a.raw) != want {
				t.Errorf("537008 body\n %s\nwant\n %s", a.raw, want)
			}
		case "536545": // a guest: no customerId at all
			if bytes.Contains(a.raw, []byte("customerId")) {
				t.Errorf("guest body has a customerId: %s", a.raw)
			}
		case "536477": // stock codes as in the data, not normalized
			if !bytes.Contains(a.raw, []byte(`"stockCode":"47566b"`)) {
				t.Errorf("536477 body: %s", a.raw)
			}
		}
	}
}

// Expected figures for the one-day file: see TestReadInvoicesOneDay.
func TestRunOneDay(t *testing.T) {
	fake := newFakeCheckout(t, nil)
	var progress bytes.Buffer
	sum, err := Run(context.Background(), readFile(t, oneDayFile), Options{
		BaseURL: fake.URL, Concurrency: 4, Progress: &progress, ProgressInterval: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	checkInvariant(t, sum)
	if sum.InvoicesRead != 143 || sum.Lines != 3108 || sum.Sales != 136 || sum.OrdersAccepted != 136 {
		t.Errorf("summary = %+v", sum)
	}
	if want := map[string]int{KindCancellation: 6, KindWriteOff: 1}; !maps.Equal(sum.NotOrders, want) {
		t.Errorf("not orders = %v, want %v", sum.NotOrders, want)
	}
	keys := map[string]bool{}
	for _, a := range fake.seen() {
		keys[a.key] = true
	}
	if len(keys) != 136 || fake.count() != 136 || sum.AcceptedOrderIDs["536365"] != "ord-536365" {
		t.Errorf("%d requests with %d distinct keys, want 136 and 136", fake.count(), len(keys))
	}

	// A bytes.Buffer is not a terminal: plain lines, the last one final.
	out := progress.String()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "replay: 136/136 sales (100.0%): accepted 136, rejected 0, failed 0") ||
		!strings.HasSuffix(last, "finished") || strings.Contains(out, "\r") {
		t.Errorf("progress output:\n%s", out)
	}

	s := sum.String()
	for _, want := range []string{"143 invoices (3,108 rows)", "sales:       136", "accepted:    136", "not orders:  7 (cancellation 6, write_off 1)"} {
		if !strings.Contains(s, want) {
			t.Errorf("String() lacks %q:\n%s", want, s)
		}
	}
	js, err := json.Marshal(sum)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]json.RawMessage
	json.Unmarshal(js, &fields)
	for _, k := range []string{"invoicesRead", "lines", "rowErrors", "sales", "notOrders", "ordersAccepted", "acceptedOrderIds",
		"rejected", "rejectedInvoices", "failed", "failedInvoices", "unfinished", "retries", "attemptErrors", "elapsedNs"} {
		if _, ok := fields[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, js[:200])
		}
	}
	if string(fields["rejected"]) != "{}" {
		t.Errorf(`"rejected" = %s, want {}`, fields["rejected"])
	}
}

func TestRunRetriesSameRequest(t *testing.T) {
	invs := readFile(t, "testdata/split_542806.csv")
	fake := newFakeCheckout(t, func(w http.ResponseWriter, r *http.Request, a attempt) bool {
		switch a.n {
		case 1: // a network error: the connection drops without an answer
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		case 2:
			w.Header().Set("Retry-After", "0")
			writeError(w, http.StatusTooManyRequests, "slow_down")
		case 3:
			writeError(w, http.StatusServiceUnavailable, "kafka_unavailable")
		default:
			return false
		}
		return true
	})
	// No keep-alive: otherwise net/http itself may retry the dropped request
	// (it has an Idempotency-Key), and the attempt count would vary.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	sum, err := Run(context.Background(), invs, Options{
		BaseURL: fake.URL, HTTPClient: client, InitialBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	checkInvariant(t, sum)
	if sum.OrdersAccepted != 1 || sum.Retries != 3 || sum.Failed != 0 || sum.AcceptedOrderIDs["542806"] != "ord-542806" {
		t.Errorf("summary = %+v", sum)
	}
	got := fake.seen()
	if len(got) != 4 {
		t.Fatalf("%d attempts, want 4", len(got))
	}
	for _, a := range got[1:] {
		if a.key != "invoice-542806" || !bytes.Equal(a.raw, got[0].raw) {
			t.Errorf("retry with key %q body %s; want the first request again (%s)", a.key, a.raw, got[0].raw)
		}
	}
	if len(got[0].body.Lines) != 5 {
		t.Errorf("542806 sent with %d lines, want 5 (split invoice grouped, repeated line kept)", len(got[0].body.Lines))
	}
}

func TestRunGivesUp(t *testing.T) {
	fake := newFakeCheckout(t, func(w http.ResponseWriter, r *http.Request, a attempt) bool {
		writeError(w, http.StatusInternalServerError, "boom")
		return true
	})
	sum, err := Run(context.Background(), readFile(t, "testdata/split_542806.csv"), Options{
		BaseURL: fake.URL, MaxAttempts: 3, InitialBackoff: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	checkInvariant(t, sum)
	if sum.Failed != 1 || sum.Retries != 2 || fake.count() != 3 {
		t.Errorf("failed %d retries %d attempts %d; want 1, 2, 3", sum.Failed, sum.Retries, fake.count())
	}
	if msg := sum.FailedInvoices["542806"]; !strings.Contains(msg, "gave up after 3 attempts: http 500: boom") {
		t.Errorf("failure = %q", msg)
	}
	if !strings.Contains(sum.String(), "failed:      1") {
		t.Errorf("String():\n%s", sum)
	}
}

// A 2xx is an acceptance even when its body is not the expected JSON.
func TestRunAcceptsOddSuccessBody(t *testing.T) {
	fake := newFakeCheckout(t, func(w http.ResponseWriter, r *http.Request, a attempt) bool {
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "ok")
		return true
	})
	sum, err := Run(context.Background(), readFile(t, "testdata/split_542806.csv"), Options{BaseURL: fake.URL})
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := sum.AcceptedOrderIDs["542806"]; sum.OrdersAccepted != 1 || !ok || id != "" {
		t.Errorf("summary = %+v", sum)
	}
}

func TestRunStopsOnCancel(t *testing.T) {
	invs := readFile(t, oneDayFile)
	for _, tt := range []struct {
		name   string
		handle func(w http.ResponseWriter, r *http.Request, a attempt) bool
	}{
		{"in flight", func(w http.ResponseWriter, r *http.Request, a attempt) bool {
			<-r.Context().Done() // never answers
			return true
		}},
		{"in backoff", func(w http.ResponseWriter, r *http.Request, a attempt) bool {
			writeError(w, http.StatusServiceUnavailable, "down")
			return true
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fake := newFakeCheckout(t, tt.handle)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			type result struct {
				sum Summary
				err error
			}
			done := make(chan result, 1)
			go func() {
				sum, err := Run(ctx, invs, Options{BaseURL: fake.URL, Concurrency: 2, InitialBackoff: time.Hour, MaxBackoff: time.Hour})
				done <- result{sum, err}
			}()
			waitFor(t, 5*time.Second, "two requests", func() bool { return fake.count() >= 2 })
			cancel()
			select {
			case res := <-done:
				if !errors.Is(res.err, context.Canceled) {
					t.Errorf("err = %v, want context.Canceled", res.err)
				}
				checkInvariant(t, res.sum)
				if res.sum.Unfinished != 136 || res.sum.OrdersAccepted != 0 || res.sum.Failed != 0 || res.sum.NotOrders[KindCancellation] != 6 {
					t.Errorf("partial summary = %+v", res.sum)
				}
				if !strings.Contains(res.sum.String(), "unfinished:  136 (interrupted)") {
					t.Errorf("String():\n%s", res.sum)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Run did not return within 5 s of the cancellation")
			}
			if n := fake.count(); n != 2 {
				t.Errorf("%d requests, want 2 (Concurrency 2, nothing new after cancel)", n)
			}
		})
	}
}

func TestRunRateLimit(t *testing.T) {
	const rate = 20.0 // orders/s, so bursts of 2
	fake := newFakeCheckout(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	invs := readFile(t, oneDayFile)
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, invs, Options{BaseURL: fake.URL, Rate: rate, Concurrency: 8})
		done <- err
	}()
	waitFor(t, 10*time.Second, "11 requests", func() bool { return fake.count() >= 11 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	got := fake.seen()
	// After a burst of 2, 9 more requests at 20/s take at least 450 ms;
	// scheduling can only stretch that (the margin is for arrival jitter).
	// Unlimited, all 136 would arrive within a few milliseconds.
	if span := got[10].at.Sub(got[0].at); span < 400*time.Millisecond {
		t.Errorf("11 requests within %v, want >= 450 ms at %v/s", span, rate)
	}
	// And never more than burst + rate*window (plus slack for arrival
	// jitter) within any early window.
	window := 250 * time.Millisecond
	n := 0
	for _, a := range got {
		if a.at.Sub(got[0].at) <= window {
			n++
		}
	}
	if limit := 2 + int(rate*window.Seconds()) + 2; n > limit {
		t.Errorf("%d requests within %v of the first, want <= %d", n, window, limit)
	}
}

func TestProgressBar(t *testing.T) {
	fake := newFakeCheckout(t, nil)
	var out bytes.Buffer
	_, err := Run(context.Background(), readFile(t, "testdata/dirty.csv"), Options{
		BaseURL: fake.URL, Progress: &out, ProgressMode: ProgressBar, ProgressInterval: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	s := out.String()
	if !strings.HasPrefix(s, "\r[") || !strings.HasSuffix(s, "\n") || strings.Count(s, "\n") != 1 ||
		!strings.Contains(s, "[##############################] 100.0% 4/4 sales") {
		t.Errorf("bar output %q", s)
	}

	out.Reset()
	Run(context.Background(), nil, Options{BaseURL: fake.URL, Progress: &out, ProgressMode: ProgressOff})
	if out.Len() != 0 {
		t.Errorf("ProgressOff wrote %q", out.String())
	}
}

func TestIsTerminal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(f) || isTerminal(&bytes.Buffer{}) {
		t.Error("a regular file or a buffer taken for a terminal")
	}
}

func TestNewOptions(t *testing.T) {
	for _, o := range []Options{
		{},
		{BaseURL: "localhost:8080"},
		{BaseURL: "ftp://x/"},
		{BaseURL: "http://x", Rate: -1},
		{BaseURL: "http://x", Rate: math.NaN()},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v): no error", o)
		}
	}
	r, err := New(Options{BaseURL: "http://checkout:8080/api/"})
	if err != nil {
		t.Fatal(err)
	}
	if r.url != "http://checkout:8080/api/orders" || r.opts.Concurrency != 8 || r.opts.MaxAttempts != 10 ||
		r.opts.InitialBackoff != 100*time.Millisecond || r.opts.MaxBackoff != 5*time.Second || r.client == nil {
		t.Errorf("defaults: url %q opts %+v", r.url, r.opts)
	}
	if got := IdempotencyKey("536365"); got != "invoice-536365" {
		t.Errorf("IdempotencyKey = %q", got)
	}
}

func TestParseRetryAfter(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"": 0, "3": 3 * time.Second, "-1": 0, "soon": 0,
		time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat): 0,
	} {
		if got := parseRetryAfter(in); got != want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", in, got, want)
		}
	}
	if got := parseRetryAfter(time.Now().Add(time.Minute).UTC().Format(http.TimeFormat)); got < 58*time.Second || got > time.Minute {
		t.Errorf("parseRetryAfter(in a minute) = %v", got)
	}
}

func TestFormatting(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 541909: "541,909", -1234567: "-1,234,567"} {
		if got := fmtInt(n); got != want {
			t.Errorf("fmtInt(%d) = %q, want %q", n, got, want)
		}
	}
	if got := fmtCounts(map[string]int{"b": 1, "a": 1, "c": 3000}); got != "3,002 (c 3,000, a 1, b 1)" {
		t.Errorf("fmtCounts = %q", got)
	}
	if got := fmt.Sprint(fmtDuration(1234*time.Millisecond), " ", fmtDuration(83400*time.Millisecond)); got != "1.2s 1m23s" {
		t.Errorf("fmtDuration = %q", got)
	}
}

// TestCheckInput: a file that gives no order to send, or with more
// malformed rows than allowed, is refused before anything is sent.
func TestCheckInput(t *testing.T) {
	const header = "InvoiceNo,StockCode,Description,Quantity,InvoiceDate,UnitPrice,CustomerID,Country\n"
	good := "536365,85123A,WHITE HANGING HEART T-LIGHT HOLDER,6,2010-12-01 08:26:00,2.55,17850,United Kingdom\n"
	bad := "536366,22633,HAND WARMER,six,2010-12-01 08:28:00,1.85,17850,United Kingdom\n"
	cancel := "C536379,D,Discount,-1,2010-12-01 09:41:00,27.5,14527,United Kingdom\n"
	for _, c := range []struct {
		name, csv string
		rate      float64
		want      string // substring of the error; "" for none
	}{
		{"header only", header, DefaultMaxRowErrorRate, "no order to send: the file has no data row"},
		{"all malformed", header + strings.Repeat(bad, 12), DefaultMaxRowErrorRate, "12 of 12 data rows are malformed"},
		{"only a cancellation", header + cancel, DefaultMaxRowErrorRate, "none of its 1 invoices is a sale"},
		{"one bad row in two, 50% allowed", header + good + bad, 0.5, ""},
		{"one bad row in two, 1% allowed", header + good + bad, 0.01, "1 of 2 data rows are malformed"},
		{"clean", header + good, 0, ""},
	} {
		invs, err := ReadInvoices(strings.NewReader(c.csv))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		err = Tally(invs).CheckInput(c.rate)
		var ie *InputError
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v, want nil", c.name, err)
		case c.want != "" && (!errors.As(err, &ie) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an *InputError with %q", c.name, err, c.want)
		}
	}
}
