package ops_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/ordersystem/ops"
	"github.com/ordercast/ordercast/processor"
)

// scrape returns the value of every series of metric on the /metrics page
// at url, keyed by its label string.
func scrape(t *testing.T, url, metric string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	out := map[string]float64{}
	re := regexp.MustCompile(`(?m)^` + metric + `(\{[^}]*\})? (\S+)$`)
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		out[m[1]] = v
	}
	return out
}

func groupInfo(t *testing.T, adm *kadm.Client, group string) ops.GroupInfo {
	t.Helper()
	gs, err := ops.DescribeGroups(context.Background(), adm, group)
	if err != nil {
		t.Fatal(err)
	}
	return gs[0]
}

// drained reports whether every partition of topic in g is committed up to
// its end, with lag 0, and the metrics say the same.
func drained(t *testing.T, adm *kadm.Client, metricsURL, group, topic string, partitions int, end int64) bool {
	g := groupInfo(t, adm, group)
	n := 0
	for _, p := range g.Partitions {
		if p.Topic == topic && p.Committed == end && p.End == end && p.Lag == 0 {
			n++
		}
	}
	if n != partitions || g.TotalLag != 0 {
		return false
	}
	lags := scrape(t, metricsURL, "ordercast_group_lag")
	total := scrape(t, metricsURL, "ordercast_group_lag_total")
	if len(lags) != partitions || total[`{group="`+group+`"}`] != 0 {
		return false
	}
	for _, v := range lags {
		if v != 0 {
			return false
		}
	}
	return true
}

// TestGroupLagDrainsThroughRebalances: `groups` (DescribeGroups) and the
// /metrics lag show the backlog of a group, its members and their
// partitions, and both return to 0 after draining: after a second member
// joins (rebalance), after more records, and after that member leaves.
func TestGroupLagDrainsThroughRebalances(t *testing.T) {
	const (
		group = "lagged"
		topic = "work"
		parts = 4
	)
	addrs, adm := testCluster(t, map[string]int32{topic: parts})
	send := func(n int) {
		recs := make([]*kgo.Record, n)
		for i := range recs {
			recs[i] = &kgo.Record{Topic: topic, Partition: int32(i % parts), Value: []byte(fmt.Sprint(i))}
		}
		produce(t, addrs, recs...)
	}
	send(200)

	reg := prometheus.NewRegistry()
	reg.MustRegister(ops.NewLagCollector(adm, group).WithMinInterval(0))
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)

	release := make(chan struct{})
	var handled atomic.Int64
	member := func(id string) func() {
		return runProcessor(t, processor.Brokers(addrs...), processor.Group(group), processor.Topics(topic),
			processor.ClientID(id), processor.CommitInterval(20*time.Millisecond), processor.DrainTimeout(100*time.Millisecond),
			processor.DeadLetter(false), // no record fails here: no DLQ topic
			processor.WithHandler(func(ctx context.Context, _ *kgo.Record) error {
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
				handled.Add(1)
				return nil
			}))
	}
	member("m1")
	waitFor(t, 10*time.Second, "m1 holding every partition with the whole backlog as lag", func() bool {
		g := groupInfo(t, adm, group)
		total := scrape(t, srv.URL, "ordercast_group_lag_total")[`{group="lagged"}`]
		return g.State == "Stable" && len(g.Members) == 1 && len(g.Members[0].Assigned[topic]) == parts && g.TotalLag == 200 && total == 200
	})

	stop2 := member("m2")
	waitFor(t, 15*time.Second, "a rebalance giving each member 2 partitions", func() bool {
		g := groupInfo(t, adm, group)
		if g.State != "Stable" || len(g.Members) != 2 {
			return false
		}
		for _, m := range g.Members {
			if len(m.Assigned[topic]) != 2 {
				return false
			}
		}
		return true
	})
	if got := scrape(t, srv.URL, "ordercast_group_members")[`{group="lagged"}`]; got != 2 {
		t.Errorf("ordercast_group_members = %v, want 2", got)
	}
	close(release)
	waitFor(t, 15*time.Second, "lag 0 after draining with two members", func() bool {
		return drained(t, adm, srv.URL, group, topic, parts, 50)
	})

	send(100)
	waitFor(t, 15*time.Second, "lag 0 after draining more records", func() bool {
		return drained(t, adm, srv.URL, group, topic, parts, 75)
	})

	stop2()
	waitFor(t, 15*time.Second, "m1 holding every partition again", func() bool {
		g := groupInfo(t, adm, group)
		return g.State == "Stable" && len(g.Members) == 1 && len(g.Members[0].Assigned[topic]) == parts
	})
	send(40)
	waitFor(t, 15*time.Second, "lag 0 after the member left", func() bool {
		return drained(t, adm, srv.URL, group, topic, parts, 85)
	})
	if handled.Load() < 340 {
		t.Errorf("handled %d records, want at least 340", handled.Load())
	}
}

// TestDescribeGroupsUnknownGroup: a named group that does not exist is
// reported, not silently empty.
func TestDescribeGroupsUnknownGroup(t *testing.T) {
	_, adm := testCluster(t, map[string]int32{"t": 1})
	gs, err := ops.DescribeGroups(context.Background(), adm, "nobody")
	if err != nil {
		t.Fatal(err)
	}
	if len(gs) != 1 || gs[0].Error == "" {
		t.Fatalf("unknown group: %+v", gs)
	}
}
