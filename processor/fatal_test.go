package processor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestFatalGroupErrorStopsRun: a member whose session timeout the broker
// refuses (above group.max.session.timeout.ms: 5m on the embedded broker,
// 30m on Apache Kafka by default) can never join. franz-go retries the join
// forever; Run must instead stop with a *FatalGroupError wrapping
// INVALID_SESSION_TIMEOUT, for the plain and the transactional processor,
// so that the process exits and says why rather than staying up with no
// partition. (The classic protocol: under KIP-848 the broker sets the
// session timeout.)
func TestFatalGroupErrorStopsRun(t *testing.T) {
	handler := func(context.Context, *kgo.Record) error { return nil }
	runners := map[string]func(addrs []string) (func(context.Context) error, error){
		"processor": func(addrs []string) (func(context.Context) error, error) {
			p, err := New(Brokers(addrs...), Group("g"), Topics("in"), WithHandler(handler), SessionTimeout(time.Hour))
			if err != nil {
				return nil, err
			}
			return p.Run, nil
		},
		"transactional": func(addrs []string) (func(context.Context) error, error) {
			tp, err := NewTransactional("fatal-txn", func(context.Context, *kgo.Record) ([]*kgo.Record, error) { return nil, nil },
				Brokers(addrs...), Group("g"), Topics("in"), SessionTimeout(time.Hour))
			if err != nil {
				return nil, err
			}
			return tp.Run, nil
		},
	}
	for name, mk := range runners {
		t.Run(name, func(t *testing.T) {
			addrs := testCluster(t, map[string]int32{"in": 2})
			run, err := mk(addrs)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- run(ctx) }()
			select {
			case err = <-done:
			case <-ctx.Done():
				t.Fatal("Run still running 60s after the broker refused its session timeout")
			}
			var fe *FatalGroupError
			if !errors.As(err, &fe) || !errors.Is(err, kerr.InvalidSessionTimeout) || fe.Group != "g" {
				t.Fatalf("Run returned %v, want a *FatalGroupError for group g wrapping INVALID_SESSION_TIMEOUT", err)
			}
			if ctx.Err() != nil {
				t.Fatalf("Run returned only when its context ended: %v", err)
			}
		})
	}
}
