package processor

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
)

// Run stopped by its context's deadline (not a cancel) stops as cleanly as
// a cancel does, in the plain and the queue mode: the poll the deadline
// ends is neither logged as a fetch error nor counted in
// fetch_errors_total, which alerts watch.
func TestRunStoppedByDeadlineIsNoFetchError(t *testing.T) {
	testkafka.Parallel(t)
	addrs := testkafka.Cluster(t, map[string]int32{"in": 2, "g.dlq": 2, "q.dlq": 2})
	testkafka.Produce(t, addrs, &kgo.Record{Topic: "in", Value: []byte("x")})
	nop := func(context.Context, *kgo.Record) error { return nil }
	for _, c := range []struct {
		name string
		mk   func(reg *prometheus.Registry, log *slog.Logger) (testkafka.Runner, error)
	}{
		{"New", func(reg *prometheus.Registry, log *slog.Logger) (testkafka.Runner, error) {
			return New(Brokers(addrs...), Group("g"), Topics("in"), WithHandler(nop), WithMetrics(mustMetrics(t, reg)), Logger(log))
		}},
		{"NewQueue", func(reg *prometheus.Registry, log *slog.Logger) (testkafka.Runner, error) {
			return NewQueue(Brokers(addrs...), Group("q"), Topics("in"), WithHandler(nop), WithMetrics(mustMetrics(t, reg)), Logger(log))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			logs := &levelLog{}
			r, err := c.mk(reg, slog.New(logs))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			if err := r.Run(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Run: %v", err)
			}
			if got := counterValue(t, reg, "ordercast_consumer_fetch_errors_total"); got != 0 {
				t.Errorf("fetch_errors_total = %v after a stop by deadline, want 0", got)
			}
			if warned := logs.all("fetch error"); len(warned) > 0 {
				t.Errorf("a stop by deadline logged %v", warned)
			}
		})
	}
}

// DeliveryLimit before Run is MaxDeliveries when it is set, else
// DefaultShareDeliveryLimit, as its doc says.
func TestQueueDeliveryLimitBeforeRun(t *testing.T) {
	nop := func(context.Context, *kgo.Record) error { return nil }
	for _, c := range []struct {
		opts []Opt
		want int
	}{{nil, DefaultShareDeliveryLimit}, {[]Opt{MaxDeliveries(4)}, 4}, {[]Opt{MaxDeliveries(50)}, 50}} {
		q, err := NewQueue(append([]Opt{Brokers("127.0.0.1:1"), Group("g"), Topics("in"), WithHandler(nop)}, c.opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		if got := q.DeliveryLimit(); got != c.want {
			t.Errorf("DeliveryLimit() = %d before Run with %d options, want %d", got, len(c.opts), c.want)
		}
		if got := q.Health().DeliveryLimit; got != c.want {
			t.Errorf("Health().DeliveryLimit = %d before Run, want %d", got, c.want)
		}
	}
}
