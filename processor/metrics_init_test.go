package processor

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/promtest"
)

// TestCounterSeriesExistAtZero: a member's error counters exist at 0 as soon
// as it is created, so that rate() and increase() in the alert rules see the
// first dead-lettered record or failed commit (a series born at 1 is not an
// increase).
func TestCounterSeriesExistAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := mustMetrics(t, reg)
	noop := func(context.Context, *kgo.Record) error { return nil }
	if _, err := New(Brokers("127.0.0.1:1"), Group("g"), Topics("in"), WithHandler(noop), RetryTopics(time.Second), WithMetrics(m)); err != nil {
		t.Fatal(err)
	}
	txnNoop := func(context.Context, *kgo.Record) ([]*kgo.Record, error) { return nil, nil }
	if _, err := NewTransactional("t", txnNoop, Brokers("127.0.0.1:1"), Group("eos"), Topics("in2"), WithMetrics(m)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		labels []string
	}{
		{"ordercast_consumer_records_dead_lettered_total", []string{"group", "g"}},
		{"ordercast_consumer_records_dead_lettered_total", []string{"group", "eos"}},
		{"ordercast_consumer_forward_failures_total", []string{"group", "g", "target", "g.dlq"}},
		{"ordercast_consumer_forward_failures_total", []string{"group", "g", "target", "g.retry.1"}},
		{"ordercast_consumer_records_retry_topic_total", []string{"group", "g", "retry_topic", "g.retry.1"}},
		{"ordercast_consumer_commit_errors_total", []string{"group", "g"}},
		{"ordercast_consumer_commit_errors_total", []string{"group", "eos"}},
		{"ordercast_consumer_records_failed_total", []string{"group", "g", "topic", "in", "class", ClassTransient}},
		{"ordercast_consumer_records_failed_total", []string{"group", "eos", "topic", "in2", "class", ClassPermanent}},
	} {
		if v, ok := promtest.Lookup(t, reg, c.name, c.labels...); !ok || v != 0 {
			t.Errorf("%s%v: found %v, value %v; want a series at 0", c.name, c.labels, ok, v)
		}
	}
}
