package processor

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"

	"github.com/ordercast/ordercast/internal/testkit/promtest"
	"github.com/ordercast/ordercast/internal/testkit/testkafka"
)

// A kprom.Metrics given to ConsumerOpts, and another to ProducerOpts, each
// sees one client: run under -race (go test -race -run TestKpromPerClient),
// consuming, writing to the DLQ and scraping at once reports no race. The
// same instance given to ClientOpts (both clients) raced: 108 reports. Each
// instance counts its own client's traffic: the producer's only produce
// requests, the consumer's only fetches.
func TestKpromPerClient(t *testing.T) {
	addrs := testCluster(t, map[string]int32{"in": 2})
	reg := prometheus.NewRegistry()
	cons := kprom.NewMetrics("test_consumer", kprom.Registerer(reg), kprom.WithClientLabel())
	prod := kprom.NewMetrics("test_producer", kprom.Registerer(reg), kprom.WithClientLabel())
	var recs []*kgo.Record
	for i := range 200 {
		recs = append(recs, &kgo.Record{Topic: "in", Partition: int32(i % 2), Value: val(i)})
	}
	produce(t, addrs, recs...)
	h := func(_ context.Context, r *kgo.Record) error {
		if r.Offset%10 == 0 {
			return Permanentf("every tenth")
		}
		return nil
	}
	p, err := New(Brokers(addrs...), Group("g"), Topics("in"), WithHandler(h), WithOrdering(OrderKey),
		CommitInterval(10*time.Millisecond), ConsumerOpts(kgo.WithHooks(cons)), ProducerOpts(kgo.WithHooks(prod)))
	if err != nil {
		t.Fatal(err)
	}
	stop := testkafka.Run(t, p)
	defer stop()
	done := make(chan struct{})
	scraped := make(chan struct{})
	go func() {
		defer close(scraped)
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := reg.Gather(); err != nil {
				t.Errorf("gather: %v", err)
				return
			}
		}
	}()
	waitFor(t, 30*time.Second, "every offset committed", func() bool {
		c := committed(t, addrs, "g", "in")
		return c[0] == 100 && c[1] == 100
	})
	close(done)
	<-scraped
	// Before stop: kprom unregisters its series when its client closes.
	if v := promtest.Sum(t, reg, "test_producer_produce_bytes_total"); v <= 0 {
		t.Fatalf("producer kprom saw %v produce bytes, want > 0 (the DLQ writes)", v)
	}
	if v := promtest.Sum(t, reg, "test_consumer_produce_bytes_total"); v != 0 {
		t.Fatalf("consumer kprom saw %v produce bytes, want 0", v)
	}
	if v := promtest.Sum(t, reg, "test_consumer_fetch_bytes_total"); v <= 0 {
		t.Fatalf("consumer kprom saw %v fetch bytes, want > 0", v)
	}
	if v := promtest.Sum(t, reg, "test_producer_fetch_bytes_total"); v != 0 {
		t.Fatalf("producer kprom saw %v fetch bytes, want 0", v)
	}
	stop()
}
