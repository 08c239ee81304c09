package processor

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/ordercast/ordercast/internal/testkit/promtest"
	"github.com/ordercast/ordercast/internal/testkit/testkafka"
)

// TestQueueShareLag: a queue member exports its share group's backlog:
// with 10 records on partition 0 and 6 on partition 1, and the member
// stuck in its first record (Concurrency 1, one session), share_lag is 10
// and 6 (the record in its handler is not acknowledged yet) and
// share_lag_total 16; once the handler returns, every record is handled and
// both fall to 0; when Run returns, the series are gone. "kip1226" reads the
// broker's share lag (DescribeShareGroupOffsets v1); "start-offset" pins
// that request to v0, which has no lag, so the backlog is the last stable
// offset minus the share-partition start offset (kfake only: Kafka persists
// the start offset lazily, at its share coordinator's snapshots).
func TestQueueShareLag(t *testing.T) {
	for _, c := range []struct {
		name string
		v0   bool
	}{{"kip1226", false}, {"start-offset", true}} {
		t.Run(c.name, func(t *testing.T) {
			testkafka.Parallel(t)
			if c.v0 {
				testkafka.SkipIfReal(t, "Kafka moves the persisted share-partition start offset lazily")
			}
			testQueueShareLag(t, c.v0)
		})
	}
}

func testQueueShareLag(t *testing.T, v0 bool) {
	addrs := testCluster(t, map[string]int32{"in": 2})
	var recs []*kgo.Record
	for i := range 16 {
		p := int32(0)
		if i >= 10 {
			p = 1
		}
		recs = append(recs, &kgo.Record{Topic: "in", Partition: p, Value: val(i)})
	}
	produce(t, addrs, recs...)
	reg := prometheus.NewRegistry()
	release := make(chan struct{})
	var opts []Opt
	if v0 {
		v := kversion.Stable()
		v.SetMaxKeyVersion(90, 0) // DescribeShareGroupOffsets v0: no share lag (KIP-1226 is v1)
		opts = append(opts, ClientOpts(kgo.MaxVersions(v)))
	}
	seen := newHistory()
	opts = append(opts, WithMetrics(mustMetrics(t, reg)), Concurrency(1), ShareSessions(1), ShareLagInterval(100*time.Millisecond),
		WithHandler(func(ctx context.Context, r *kgo.Record) error {
			seen.add(string(r.Value))
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}))
	_, stop := startQueue(t, addrs, opts...)
	lag := func(p string) float64 {
		return promtest.Sum(t, reg, "ordercast_consumer_share_lag", "group", "g", "topic", "in", "partition", p)
	}
	total := func() float64 { return promtest.Sum(t, reg, "ordercast_consumer_share_lag_total", "group", "g") }
	waitFor(t, 30*time.Second, "a record in the handler, share_lag 10 and 6, share_lag_total 16", func() bool {
		return seen.distinct() == 1 && lag("0") == 10 && lag("1") == 6 && total() == 16
	})
	close(release)
	waitFor(t, 30*time.Second, "every record handled, share_lag and share_lag_total 0", func() bool {
		return seen.distinct() == 16 && lag("0") == 0 && lag("1") == 0 && total() == 0
	})
	if !hasSeries(t, reg, "ordercast_consumer_share_lag_total") {
		t.Fatal("share_lag_total not exported at 0")
	}
	stop()
	for _, name := range []string{"ordercast_consumer_share_lag", "ordercast_consumer_share_lag_total"} {
		if hasSeries(t, reg, name) {
			t.Errorf("%s still exported after Run returned", name)
		}
	}
}

// hasSeries says whether reg gathers a series of the metric name.
func hasSeries(t *testing.T, reg *prometheus.Registry, name string) bool {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			return true
		}
	}
	return false
}

// TestShareLagIntervalOption: ShareLagInterval is NewQueue's alone, and at
// least 100 ms.
func TestShareLagIntervalOption(t *testing.T) {
	h := func(context.Context, *kgo.Record) error { return nil }
	if _, err := New(Brokers("x:1"), Group("g"), Topics("in"), WithHandler(h), ShareLagInterval(time.Second)); err == nil || !strings.Contains(err.Error(), "ShareLagInterval") {
		t.Fatalf("New took ShareLagInterval: %v", err)
	}
	for _, d := range []time.Duration{0, -time.Second, 99 * time.Millisecond} {
		if _, err := NewQueue(Brokers("x:1"), Group("g"), Topics("in"), WithHandler(h), ShareLagInterval(d)); err == nil || !strings.Contains(err.Error(), "ShareLagInterval") {
			t.Fatalf("NewQueue took ShareLagInterval(%v): %v", d, err)
		}
	}
	q, err := NewQueue(Brokers("x:1"), Group("g"), Topics("in"), WithHandler(h), ShareLagInterval(100*time.Millisecond))
	if err != nil {
		t.Fatalf("NewQueue refused ShareLagInterval(100ms): %v", err)
	}
	for _, cl := range q.Clients() {
		cl.Close()
	}
}
