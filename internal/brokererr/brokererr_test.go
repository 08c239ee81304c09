package brokererr

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

func TestTransient(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"retriable kafka error", fmt.Errorf("listing: %w", kerr.LeaderNotAvailable), true},
		{"not controller", kerr.NotController, true},
		{"topic authorization", kerr.TopicAuthorizationFailed, false},
		{"sasl", kerr.SaslAuthenticationFailed, false},
		{"eof", fmt.Errorf("read: %w", io.EOF), true},
		{"unexpected eof", io.ErrUnexpectedEOF, true},
		{"closed", net.ErrClosed, true},
		{"refused", &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, true},
		{"reset", &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, true},
		{"attempt deadline", context.DeadlineExceeded, true},
		{"canceled", context.Canceled, false},
		{"certificate", x509.UnknownAuthorityError{}, false},
		{"other", errors.New("invalid config"), false},
	} {
		if got := Transient(tc.err); got != tc.want {
			t.Errorf("%s: Transient(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

func TestRetry(t *testing.T) {
	ctx := context.Background()
	calls := 0
	var waits []time.Duration
	err := Retry(ctx, time.Minute, Transient, func(_ int, w time.Duration, _ error) { waits = append(waits, w) }, func() error {
		if calls++; calls < 3 {
			return io.EOF
		}
		return nil
	})
	if err != nil || calls != 3 || fmt.Sprint(waits) != fmt.Sprint([]time.Duration{FirstBackoff, 2 * FirstBackoff}) {
		t.Fatalf("transient twice: err %v after %d calls, waits %v; want nil after 3, waits 250ms 500ms", err, calls, waits)
	}

	calls = 0
	err = Retry(ctx, time.Minute, Transient, nil, func() error { calls++; return kerr.TopicAuthorizationFailed })
	if !errors.Is(err, kerr.TopicAuthorizationFailed) || calls != 1 {
		t.Fatalf("definitive error: %v after %d calls, want it after 1", err, calls)
	}

	calls = 0
	err = Retry(ctx, 600*time.Millisecond, Transient, nil, func() error { calls++; return io.EOF })
	if !errors.Is(err, io.EOF) || calls != 2 { // waits 250 ms; the next 500 ms would pass the limit
		t.Fatalf("past the limit: %v after %d calls, want EOF after 2", err, calls)
	}
}
