package replay

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// Nothing listens at the URL: Run prints the cause once, gives up once the
// first sale has used its attempts without any answer, and says why; it does
// not go on trying every other sale.
func TestRunGivesUpWhenUnreachable(t *testing.T) {
	var progress bytes.Buffer
	start := time.Now()
	sum, err := Run(context.Background(), readFile(t, oneDayFile), Options{
		BaseURL: "http://" + closedAddr(t), Concurrency: 2, MaxAttempts: 3,
		InitialBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond,
		Progress: &progress, ProgressMode: ProgressLines, ProgressInterval: time.Hour,
	})
	var ue *UnreachableError
	if !errors.As(err, &ue) {
		t.Fatalf("err = %v, want an *UnreachableError", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v to give up", d)
	}
	checkInvariant(t, sum)
	if sum.Failed < 1 || sum.Failed > 2 || sum.Unfinished < 130 || sum.OrdersAccepted != 0 {
		t.Errorf("failed %d, unfinished %d, accepted %d: want the first 1-2 sales failed and the rest unfinished", sum.Failed, sum.Unfinished, sum.OrdersAccepted)
	}
	if ue.Attempts < 3 || !strings.Contains(ue.Cause, "connection refused") {
		t.Errorf("UnreachableError %+v", ue)
	}
	if sum.Stopped != StoppedUnreachable || !strings.Contains(sum.String(), "(checkout unreachable)") {
		t.Errorf("Stopped %q; String():\n%s", sum.Stopped, sum)
	}
	for _, want := range []string{"did not answer any of", "connection refused", ue.URL} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	// The cause is printed once, not once per attempt.
	if n := strings.Count(progress.String(), "connection refused"); n != 1 {
		t.Errorf("cause printed %d times, want once:\n%s", n, progress.String())
	}
	total := 0
	for cause, n := range sum.AttemptErrors {
		if !strings.Contains(cause, "connection refused") {
			t.Errorf("attempt error cause %q", cause)
		}
		total += n
	}
	// The error counts the attempts made when the first sale gave up; the
	// summary also those the other worker (Concurrency 2) had in flight
	// then and finished after: at most one more.
	if total < ue.Attempts || total > ue.Attempts+1 || !strings.Contains(sum.String(), "attempt errors:") {
		t.Errorf("attempt errors %v (total %d), want %d or %d attempts counted; String():\n%s", sum.AttemptErrors, total, ue.Attempts, ue.Attempts+1, sum)
	}
}

// refuseFirst fails its first n requests as a connection refused, then
// passes them on: a checkout that starts late.
type refuseFirst struct {
	n    int64
	seen atomic.Int64
	next http.RoundTripper
}

func (r *refuseFirst) RoundTrip(req *http.Request) (*http.Response, error) {
	if r.seen.Add(1) <= r.n {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	}
	return r.next.RoundTrip(req)
}

// Refused at first, then answering: no sale runs out of attempts, and the
// run is not given up.
func TestRunCheckoutStartsLate(t *testing.T) {
	fake := newFakeCheckout(t, nil)
	var progress bytes.Buffer
	sum, err := Run(context.Background(), readFile(t, oneDayFile), Options{
		BaseURL: fake.URL, Concurrency: 1, MaxAttempts: 6, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond,
		HTTPClient: &http.Client{Transport: &refuseFirst{n: 5, next: http.DefaultTransport}},
		Progress:   &progress, ProgressMode: ProgressLines, ProgressInterval: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	checkInvariant(t, sum)
	if sum.OrdersAccepted != 136 || sum.Retries != 5 || sum.AttemptErrors["dial tcp 127.0.0.1:8080: connect: connection refused"] != 5 {
		t.Errorf("summary = %+v", sum)
	}
	if n := strings.Count(progress.String(), "connection refused"); n != 1 {
		t.Errorf("cause printed %d times, want once:\n%s", n, progress.String())
	}
}

// Each distinct cause is printed once, however many attempts meet it; the
// HTTP ones are told apart by status and code, not by message.
func TestRunPrintsEachCauseOnce(t *testing.T) {
	fake := newFakeCheckout(t, func(w http.ResponseWriter, r *http.Request, a attempt) bool {
		switch a.n {
		case 1:
			writeError(w, http.StatusServiceUnavailable, "kafka_unavailable")
		case 2:
			w.Header().Set("Retry-After", "0")
			writeError(w, http.StatusTooManyRequests, "slow_down")
		default:
			return false
		}
		return true
	})
	var progress bytes.Buffer
	sum, err := Run(context.Background(), readFile(t, oneDayFile), Options{
		BaseURL: fake.URL, Concurrency: 4, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond,
		Progress: &progress, ProgressMode: ProgressBar, ProgressInterval: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	checkInvariant(t, sum)
	if sum.OrdersAccepted != 136 || sum.Retries != 272 {
		t.Errorf("summary = %+v", sum)
	}
	if want := map[string]int{"http 503 kafka_unavailable": 136, "http 429 slow_down": 136}; len(sum.AttemptErrors) != 2 ||
		sum.AttemptErrors["http 503 kafka_unavailable"] != 136 || sum.AttemptErrors["http 429 slow_down"] != 136 {
		t.Errorf("attempt errors %v, want %v", sum.AttemptErrors, want)
	}
	out := progress.String()
	if strings.Count(out, "http 503") != 1 || strings.Count(out, "http 429") != 1 {
		t.Errorf("causes not printed once each:\n%q", out)
	}
	// Printed on lines of their own, not inside the bar.
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "http 503") && strings.Contains(line[strings.LastIndex(line, "\r")+1:], "sales") {
			t.Errorf("cause and bar on one line: %q", line)
		}
	}
}

// A checkout that takes connections but never answers: each attempt ends at
// AttemptTimeout, the cause says so, and the run is given up as unreachable.
func TestRunGivesUpWhenNothingAnswers(t *testing.T) {
	fake := newFakeCheckout(t, func(w http.ResponseWriter, r *http.Request, a attempt) bool {
		<-r.Context().Done()
		return true
	})
	sum, err := Run(context.Background(), readFile(t, "testdata/split_542806.csv"), Options{
		BaseURL: fake.URL, MaxAttempts: 2, AttemptTimeout: 50 * time.Millisecond, InitialBackoff: time.Millisecond,
	})
	var ue *UnreachableError
	if !errors.As(err, &ue) || ue.Cause != "no answer within 50ms" || ue.Attempts != 2 {
		t.Fatalf("err = %#v", err)
	}
	checkInvariant(t, sum)
	if sum.Failed != 1 || sum.AttemptErrors["no answer within 50ms"] != 2 || sum.Stopped != "" {
		t.Errorf("summary = %+v", sum)
	}
}
