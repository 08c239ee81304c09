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
