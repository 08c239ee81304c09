package processor

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/promtest"
	"github.com/ordercast/ordercast/internal/testkit/testkafka"
)

// DeadLetterTopic, RetryTopicPrefix, HeaderPrefix and MetricsNamespace
// replace the defaults: a record failing once goes through "billing-retry-1"
// and comes back with its own coordinates, a permanent failure lands in
// "billing-dead", both with "x-" headers (a foreign "ordercast-" header is
// the record's own and kept), and the series are billing_*.
func TestConfigurableNames(t *testing.T) {
	addrs := testkafka.Cluster(t, map[string]int32{"in": 1, "billing-retry-1": 1, "billing-dead": 1})
	reg := prometheus.NewRegistry()
	var mu sync.Mutex
	seen := map[string][]string{} // value -> topic@offset of each attempt
	h := func(_ context.Context, r *kgo.Record) error {
		mu.Lock()
		seen[string(r.Value)] = append(seen[string(r.Value)], r.Topic)
		n := len(seen[string(r.Value)])
		mu.Unlock()
		switch {
		case string(r.Value) == "poison":
			return Permanentf("never")
		case string(r.Value) == "flaky" && n == 1:
			return context.DeadlineExceeded
		}
		return nil
	}
	p, err := New(Brokers(addrs...), Group("billing"), Topics("in"), WithHandler(h), MaxAttempts(1),
		RetryTopics(10*time.Millisecond), RetryTopicPrefix("billing-retry-"), DeadLetterTopic("billing-dead"),
		HeaderPrefix("x-"), WithMetrics(mustMetrics(t, reg, MetricsNamespace("billing"))), CommitInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	stop := testkafka.Run(t, p)
	defer stop()
	testkafka.Produce(t, addrs,
		&kgo.Record{Topic: "in", Value: []byte("flaky")},
		&kgo.Record{Topic: "in", Value: []byte("poison"), Headers: []kgo.RecordHeader{{Key: "ordercast-trace", Value: []byte("t1")}, {Key: "x-attempts", Value: []byte("99")}}})

	dead := readAll(t, addrs, "billing-dead", 1, 30*time.Second)[0]
	hs := headerMap(dead)
	if string(dead.Value) != "poison" || hs["x-original-topic"] != "in" || hs["x-original-offset"] != "1" ||
		hs["x-consumer-group"] != "billing" || hs["x-error-class"] != ClassPermanent || hs["x-attempts"] != "1" || hs["ordercast-trace"] != "t1" {
		t.Fatalf("DLQ record %q headers %v", dead.Value, hs)
	}
	if _, ok := hs[HeaderOriginalTopic]; ok {
		t.Fatalf("default-prefixed header written: %v", hs)
	}
	retry := readAll(t, addrs, "billing-retry-1", 1, 30*time.Second)[0]
	if hr := headerMap(retry); string(retry.Value) != "flaky" || hr["x-retry-due"] == "" || hr["x-original-offset"] != "0" {
		t.Fatalf("retry record %q headers %v", retry.Value, hr)
	}
	waitFor(t, 30*time.Second, "flaky handled again from the retry topic", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen["flaky"]) == 2
	})
	mu.Lock()
	if seen["flaky"][1] != "in" {
		t.Fatalf("the retried record showed topic %q to the handler, want in", seen["flaky"][1])
	}
	mu.Unlock()
	waitFor(t, 30*time.Second, "billing_ series", func() bool {
		return promtest.Sum(t, reg, "billing_records_dead_lettered_total") == 1 &&
			promtest.Sum(t, reg, "billing_records_retry_topic_total", "retry_topic", "billing-retry-1") == 1
	})
	if _, ok := promtest.Lookup(t, reg, "ordercast_consumer_records_processed_total"); ok {
		t.Fatal("series under the default namespace")
	}
}

// A name that collides (a retry topic or the DLQ that is also a source) is
// refused by New.
func TestConfigurableNamesCollide(t *testing.T) {
	noop := func(context.Context, *kgo.Record) error { return nil }
	for _, opts := range [][]Opt{
		{Topics("in"), DeadLetterTopic("in")},
		{Topics("in", "r1"), RetryTopics(time.Second), RetryTopicPrefix("r")},
		{Topics("in"), HeaderPrefix("")},
	} {
		if _, err := New(append([]Opt{Brokers("127.0.0.1:1"), Group("g"), WithHandler(noop)}, opts...)...); err == nil {
			t.Fatalf("New accepted %d options with colliding names", len(opts))
		}
	}
}
