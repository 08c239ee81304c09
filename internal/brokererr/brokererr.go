// Package brokererr tells a transient failure to reach a Kafka broker from a
// definitive answer, for the start-time checks of the runtime and the
// services: a broker that is restarting, paused or behind a proxy that drops
// the connection is waited for (within the check's deadline); a refused login,
// an untrusted certificate or a missing ACL is reported at once.
//
// It depends on franz-go and the standard library only (the runtime's
// packages import it).
package brokererr

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Transient reports whether err, from a request to a Kafka cluster, may go
// away by asking again a moment later: a Kafka error code marked retriable
// in the protocol (kerr.Error.Retriable, e.g. LEADER_NOT_AVAILABLE,
// NOT_CONTROLLER), a connection closed, reset or refused (io.EOF,
// io.ErrUnexpectedEOF, net.ErrClosed, a syscall error), a connection the
// broker closed before answering (*kgo.ErrFirstReadEOF: also what a TLS or
// SASL mismatch looks like, so a caller retries it only within a bounded
// wait and then reports it), a network timeout, or the deadline of one
// attempt (context.DeadlineExceeded). Not transient: nil, a non-retriable
// Kafka error (an authorization or authentication failure, an invalid
// request), a TLS certificate error, context.Canceled, anything else.
//
// Safe for concurrent use; it only inspects err.
func Transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	if ke, ok := errors.AsType[*kerr.Error](err); ok {
		return ke.Retriable
	}
	if _, ok := errors.AsType[*kgo.ErrFirstReadEOF](err); ok {
		return true
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	if _, ok := errors.AsType[*os.SyscallError](err); ok {
		return true
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return true
	}
	return false
}

// Backoff bounds the wait between two attempts of Retry: the first wait,
// doubling up to the last.
const (
	FirstBackoff = 250 * time.Millisecond
	MaxBackoff   = 2 * time.Second
)

// Retry calls attempt until it returns nil or an error retriable does not
// accept, or until waiting again would pass limit from now or ctx is done;
// it waits FirstBackoff, doubling to MaxBackoff, between attempts, and
// calls onRetry (may be nil) before each wait with the attempt's number
// (from 1), the wait and its error. It returns attempt's last error, or
// nil. It blocks for at most about limit plus one attempt's duration.
func Retry(ctx context.Context, limit time.Duration, retriable func(error) bool,
	onRetry func(attempt int, wait time.Duration, err error), attempt func() error) error {
	deadline := time.Now().Add(limit)
	wait := FirstBackoff
	for n := 1; ; n++ {
		err := attempt()
		if err == nil || !retriable(err) || ctx.Err() != nil || time.Now().Add(wait).After(deadline) {
			return err
		}
		if onRetry != nil {
			onRetry(n, wait, err)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, MaxBackoff)
	}
}
